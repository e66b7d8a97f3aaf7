"""`evolve-train`: train and evaluate over time steps from any directory, with the overrides of `python train.py`.

    evolve-train [--config-dir DIR] [-m] [--dry-run] [key=value ...]
    evolve-train recipes [show NAME | copy NAME DIR]

The configs ship inside the package (``evolve_train.compose.CONFIG_DIR``: ``configs/`` of a clone, or the copy
a built wheel carries), so the command needs no clone. Your own config folder joins the search path with
``--config-dir DIR`` (Hydra's flag; e.g. ``DIR/experiment/mine.yaml`` for ``experiment=mine``), or with the
environment variable ``EVOLVE_TRAIN_CONFIG_DIR`` when no ``--config-dir`` is given. Relative paths (the run dir
``runs/...``, ``data.root``, ``data.mix_files``) are resolved against the directory you run in: the working
directory is never changed. Unknown keys are refused before anything is written (``config_strict.py``); a
former key name is read as it is now, with a warning (``config_renames.py``). ``--dry-run`` prints what each run (or
sweep point) would be, without training or writing anything (``cli/dry_run.py``). ``evolve-train recipes`` lists the
recipes for real runs that ship with the package, shows one or copies it to edit (``cli/recipes.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

MULTIRUN_FLAGS = ("-m", "--multirun")
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")
CONFIG_DIR_ENV = "EVOLVE_TRAIN_CONFIG_DIR"
"""A config folder searched (after the package's configs) when the command line gives no ``--config-dir``."""


def launched_as_one_of_several(environ=os.environ) -> bool:
    """This process is one rank of a launch (``accelerate launch``/torchrun set these for every rank)."""
    return int(environ.get("WORLD_SIZE", "1") or 1) > 1 or "LOCAL_RANK" in environ


def refuse_a_sweep_in_every_rank(argv=sys.argv, environ=os.environ) -> None:
    """``accelerate launch train.py -m ...`` would run the whole sweep in every rank, and the ranks of different
    runs would meet in one process group: stop with one line saying what to run instead (exit code 2)."""
    if not any(arg in MULTIRUN_FLAGS for arg in argv[1:]) or not launched_as_one_of_several(environ):
        return
    if environ.get("RANK", "0") == "0":
        print(
            "error: a sweep (-m) under accelerate launch or torchrun would run the whole sweep in every process. "
            "Sweep multi-process runs with `python train.py -m hydra/launcher=submitit_slurm_multi ...` (or "
            "submitit_local_multi): each point one job of several processes; or run one `accelerate launch "
            "train.py ...` per point (docs/methods.md, 'Sweeps').",
            file=sys.stderr,
        )
    raise SystemExit(2)


def user_config_dirs(args: Sequence[str]) -> list[Path]:
    """The folders given with ``--config-dir DIR`` / ``--config-dir=DIR`` / ``-cd DIR``."""
    dirs = []
    for index, arg in enumerate(args):
        flag, sep, value = arg.partition("=")
        if flag in CONFIG_DIR_FLAGS:
            if sep:
                dirs.append(Path(value))
            elif index + 1 < len(args):
                dirs.append(Path(args[index + 1]))
    return dirs


def refuse_unknown_keys(args: Sequence[str], config_dirs: Sequence[Path]) -> None:
    """An override naming a key the schema does not know stops here with the nearest known key (exit code 2),
    before Hydra creates or writes anything."""
    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.config_strict import check_overrides, command_overrides

    with exit_on_user_error():
        check_overrides(command_overrides(args), config_dirs)


def task(cfg) -> None:
    """One run (or one point of a sweep): the same as ``python train.py``."""
    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.run import train
    from evolve_train.training.submitit_env import export_submitit_env

    with exit_on_user_error():
        export_submitit_env(cfg.trainer)  # a task of a multi-process sweep point: its rank (and launch config)
        train(cfg)


def with_config_dir(args: list[str], environ=os.environ) -> list[str]:
    """``args`` with each ``--config-dir`` folder made absolute (relative to the working directory), and
    ``--config-dir $EVOLVE_TRAIN_CONFIG_DIR`` added when the variable is set and no folder is given."""
    out, after_flag = [], False
    for arg in args:
        flag, sep, value = arg.partition("=")
        if after_flag:
            arg = str(Path(arg).resolve())
        elif flag in CONFIG_DIR_FLAGS and sep:
            arg = f"{flag}={Path(value).resolve()}"
        after_flag = arg in CONFIG_DIR_FLAGS
        out.append(arg)
    if environ.get(CONFIG_DIR_ENV) and not user_config_dirs(out):
        return ["--config-dir", str(Path(environ[CONFIG_DIR_ENV]).resolve()), *out]
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line `evolve-train` takes: Hydra's own parser (the one ``hydra.main`` reads ``sys.argv`` with:
    overrides, ``-m``, ``--cfg``, ``--config-dir``...) under this command's name, built without running anything
    (docs/cli.md and the docs tests read it)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print each run's (each sweep point's with -m) run dir, differing overrides, world size, tokens per "
        "optimizer step, memory and wall-time estimates; train, launch and write nothing (cli/dry_run.py)",
    )
    parser.prog = "evolve-train"
    parser.description = __doc__.splitlines()[0]
    add_recipes_command(parser)
    return parser


RECIPES_COMMAND = "recipes"


def add_recipes_command(parser: argparse.ArgumentParser) -> None:
    """``evolve-train recipes ...`` as a subcommand of the parser (what docs/cli.md shows; :func:`main` hands a
    first argument ``recipes`` to ``cli/recipes.py`` before Hydra sees the command line)."""
    from evolve_train.cli import recipes

    commands = parser.add_subparsers(dest="subcommand", metavar="{recipes}")
    help_line = "list the recipes for real runs shipped with the package, show one, or copy one to edit"
    sub = commands.add_parser(RECIPES_COMMAND, prog="evolve-train recipes", help=help_line, description=help_line)
    recipes.add_arguments(sub)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evolve-train`; exits 2 on a bad config or bad data (one line on stderr)."""
    import hydra

    import evolve_train.config  # noqa: F401  (registers the typed schema as base_config)
    from evolve_train.compose import CONFIG_DIR

    from evolve_train.config_renames import renamed_overrides

    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == [RECIPES_COMMAND]:
        from evolve_train.cli import recipes

        return recipes.main(given[1:])
    args = renamed_overrides(with_config_dir(given))
    from evolve_train.cli.dry_run import run_if_asked

    dry = run_if_asked(args, CONFIG_DIR)
    if dry is not None:
        return dry
    refuse_a_sweep_in_every_rank(["evolve-train", *args])
    refuse_unknown_keys(args, [CONFIG_DIR, *user_config_dirs(args)])
    run = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")(task)
    saved = sys.argv
    sys.argv = ["evolve-train", *args]
    try:
        run()
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
