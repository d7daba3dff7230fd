"""`python -m harness.nemesis`: the fault injector (harness.nemesis.injector)."""

import sys

from harness.nemesis.injector import main

sys.exit(main())
