"""`python -m bot.cli` is the `lightgrep` command (the benches and some tests start it so)."""

import sys

from bot.cli.main import main

sys.exit(main())
