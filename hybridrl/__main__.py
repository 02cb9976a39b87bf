"""`python -m hybridrl <command>` is the same as the `hybridrl` console script."""

import sys

from hybridrl.cli import main

sys.exit(main())
