"""`python -m scrapeq` runs the `scrapeq` command."""

import sys

from scrapeq.cli import main

sys.exit(main())
