"""`python -m bot` is the `lightgrep` command."""

import sys

from bot.cli.main import main

sys.exit(main())
