"""Show the framework's own errors (bad config, bad data) as one clear line, not a traceback."""

from __future__ import annotations

import contextlib
import sys

from evolve_train.errors import EvolveTrainError


@contextlib.contextmanager
def exit_on_user_error(code: int = 2):
    try:
        yield
    except EvolveTrainError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(code)
