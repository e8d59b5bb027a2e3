"""`python -m bot` is the `lightgrep` command."""

import sys

from bot.cli import main

sys.exit(main())
