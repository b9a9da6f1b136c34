"""`python -m experiments.stage`: the GPU stages' command (`cli`)."""

import sys

from experiments.stage.cli import main

sys.exit(main())
