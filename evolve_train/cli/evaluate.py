"""`evolve-eval`: evaluate saved checkpoints without training (same Hydra config groups as train.py).

    evolve-eval RUN_DIR [--steps 0,2] [--name NAME | --out DIR | --replace] [OVERRIDE ...]
    evolve-eval model.name_or_path=MODEL_DIR --out DIR [--steps K] [OVERRIDE ...]
    evolve-eval --series M0 M1 ... | --series-file FILE --out DIR [OVERRIDE ...]

RUN_DIR's config is composed again from its ``.hydra/overrides.yaml``, then the overrides given here
(e.g. ``eval=full``, ``eval.max_items_per_set=100``) are applied; a group chosen anew (``eval=full``) drops
the run's own settings inside that group. Rows go to ``RUN_DIR/evaluations/NAME/``
(NAME defaults to the ``eval=`` option given, else ``eval``), readable by evolve-report and evolve-gate;
``--replace`` replaces the run's own rows of those checkpoints instead. Without a run dir, the model in
``model.name_or_path`` is scored as checkpoint K (default: the last step) of the timeline given by the
``data=...`` overrides. With ``--series``, entry i (a local model dir, a hub id, or ``id@revision``) is
scored as checkpoint i of the run dir ``--out`` (one entry per time step, or the first steps' only);
``--series-file`` reads the entries from a YAML/JSON list (each an entry's text or
``{model:, revision:, name:, date:}``). After the table it prints a knowledge year per checkpoint where the
rows have the evidence (docs/metrics.md#14-knowledge-cutoff). ``python evaluate.py`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evolve-eval", description=__doc__.splitlines()[0])
    parser.add_argument(
        "args",
        nargs="*",
        metavar="RUN_DIR | OVERRIDE",
        help="an optional run dir, then Hydra overrides (key=value, group=option)",
    )
    parser.add_argument("--steps", metavar="K,K", help="checkpoints to evaluate (default: every saved one)")
    parser.add_argument("--name", help="evaluation name: rows go to RUN_DIR/evaluations/NAME/")
    parser.add_argument("--out", metavar="DIR", help="write the rows here instead")
    parser.add_argument("--replace", action="store_true", help="replace the run's own rows of these checkpoints")
    parser.add_argument(
        "--series",
        nargs="+",
        metavar="MODEL",
        help="checkpoints of one series, in time order: local dirs, hub ids or id@revision (needs --out)",
    )
    parser.add_argument("--series-file", metavar="FILE", help="the series' entries as a YAML/JSON list")
    return parser


def is_override(arg: str) -> bool:
    """A Hydra override (``key=value``), not an existing path (a run dir or model dir may hold ``=``) or a hub id
    (which never holds ``=``)."""
    return "=" in arg and not Path(arg).exists()


def series_entries(args, parser: argparse.ArgumentParser) -> Optional[list]:
    """The entries of ``--series`` / ``--series-file`` (``None``: neither given); a usage error (exit 2) for
    options a series does not take."""
    if args.series is None and args.series_file is None:
        return None
    from evolve_train.saved_eval import parse_entry, read_series_file

    clash = [
        name for name, value in (("--steps", args.steps), ("--name", args.name), ("--replace", args.replace)) if value
    ]
    if args.series is not None and args.series_file is not None:
        parser.error("give --series or --series-file, not both")
    if clash:
        parser.error(f"--series takes no {', '.join(clash)} (the entries are the checkpoints)")
    if args.series_file is not None:
        return read_series_file(args.series_file)
    models = [a for a in args.series if not is_override(a)]
    return [parse_entry(text, where=f"--series entry {i}") for i, text in enumerate(models)]


def parse_steps(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SystemExit(f"evolve-eval: error: --steps takes checkpoint numbers such as 0,2; got {text!r}")


def compose_config(run_dir: Optional[Path], overrides: list[str]):
    """The run's own overrides (from ``.hydra/overrides.yaml``), then ``overrides``, on configs/."""
    from omegaconf import OmegaConf

    from evolve_train.compose import compose_dict
    from evolve_train.errors import ConfigError

    base: list[str] = []
    if run_dir is not None:
        saved = run_dir / ".hydra" / "overrides.yaml"
        if not saved.is_file():
            raise ConfigError(f"{run_dir} is not a run dir made by train.py: {saved} is missing")
        base = without_replaced([str(o) for o in OmegaConf.load(saved)], overrides)
    return compose_dict([*base, *overrides])


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def without_replaced(base: list[str], overrides: list[str]) -> list[str]:
    """The run's overrides minus those the new ones replace: the same key, or any key inside a group
    chosen anew (``eval=full`` drops the run's ``eval.*`` settings: a new evaluation config)."""
    keys = {override_key(o) for o in overrides}
    return [
        o
        for o in base
        if override_key(o) not in keys and not any(override_key(o).startswith(key + ".") for key in keys)
    ]


def default_name(overrides: list[str]) -> str:
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("eval=")]
    return chosen[-1] if chosen else "eval"


def print_knowledge(run_dir: Path) -> None:
    """The knowledge year per checkpoint of the evaluated dir (docs/metrics.md#14-knowledge-cutoff), where its
    rows have the evidence (``year_resolved`` rows, time-sliced NLL); printed by the main process."""
    from evolve_train.reporting.knowledge import run_knowledge
    from evolve_train.run import process_index

    text = run_knowledge(run_dir)
    if text and process_index() == 0:
        print(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    # a run dir of a sweep names its overrides (runs/x/multirun/lora/method.lora.r=4_<hash>/seed0): an existing
    # path is the run dir, whatever it holds
    positional = [a for a in args.args if not is_override(a)]
    overrides = [a for a in args.args if is_override(a)]
    overrides += [a for a in args.series or [] if is_override(a)]  # overrides after the entries
    if len(positional) > 1:
        print(f"evolve-eval: error: one run dir at most, got {positional}", file=sys.stderr)
        return 2
    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.saved_eval import evaluate_saved

    run_dir = Path(positional[0]) if positional else None
    with exit_on_user_error():
        entries = series_entries(args, parser)
        if entries is not None:
            if run_dir is not None:
                parser.error(f"--series takes no run dir (got {run_dir})")
            from evolve_train.saved_eval import evaluate_series

            evaluate_series(compose_config(None, overrides), entries=entries, out=args.out, argv=argv)
            print_knowledge(Path(args.out))
            return 0
        if run_dir is not None and any(override_key(o) == "model.name_or_path" for o in overrides):
            # a run's checkpoints are its steps/<k>; its own model.name_or_path (a pretrained run's base model)
            # is part of its config and stays
            from evolve_train.errors import ConfigError

            raise ConfigError("give a run dir or model.name_or_path=..., not both")
        cfg = compose_config(run_dir, overrides)
        evaluate_saved(
            cfg,
            source=run_dir,
            steps=parse_steps(args.steps),
            name=args.name or default_name(overrides),
            out=args.out,
            replace=args.replace,
            argv=argv,
        )
        from evolve_train.saved_eval import output_dir

        print_knowledge(output_dir(run_dir, args.name or default_name(overrides), args.out, args.replace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
