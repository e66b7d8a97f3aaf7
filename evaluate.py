"""Entry point: ``python evaluate.py RUN_DIR [--steps 0,2] [overrides]`` = ``evolve-eval`` (see
``evolve_train/cli/evaluate.py``): evaluates saved checkpoints without training."""

import sys

from evolve_train.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
