"""`evolve-train recipes`: the recipes for real runs that ship with the package, listed, shown and copied to edit.

    evolve-train recipes                    # one line each: name, model, cluster shape
    evolve-train recipes show NAME          # the recipe's YAML
    evolve-train recipes copy NAME DIR      # DIR/experiment/my_NAME.yaml, and how to run it from there

A recipe is a config overlay ``configs/experiment/recipe_<name>.yaml`` (run it with ``experiment=recipe_<name>``):
model, token budgets, sequence length, precision, activation checkpointing, checkpoint interval and evaluators
for one cluster shape. Its header comment holds ``# key: value`` lines (:data:`HEADER_KEYS`) that this command
lists and the tests run: the model, the cluster, the device, the LoRA and QA overrides, the dry-run command.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

PREFIX = "recipe_"
"""File-name prefix of a recipe in ``configs/experiment/``."""
COPY_PREFIX = "my_"
"""Name prefix of a copy: the package's own recipe keeps its name on the search path, so a copy needs another."""
HEADER_KEYS = ("model", "cluster", "device", "full", "lora", "data", "qa", "dry run")
"""The ``# key: value`` lines of a recipe's header."""
COMMANDS = ("list", "show", "copy")


@dataclass(frozen=True)
class Recipe:
    """One recipe file and what its header says."""

    name: str
    path: Path
    title: str
    header: dict[str, str] = field(default_factory=dict)

    @property
    def override(self) -> str:
        """The command-line override that selects it."""
        return f"experiment={PREFIX}{self.name}"


def recipes_dir(config_dir: Optional[Path] = None) -> Path:
    """``experiment/`` of the package's configs (or of ``config_dir``)."""
    from evolve_train.compose import CONFIG_DIR

    return Path(config_dir or CONFIG_DIR) / "experiment"


def read_header(text: str) -> tuple[str, dict[str, str]]:
    """``(title, {key: value})`` of a recipe's leading comment: the ``# Recipe: ...`` line and the
    :data:`HEADER_KEYS` lines."""
    title, header = "", {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:].strip()
        key, sep, value = body.partition(": ")
        if key == "Recipe" and sep:
            title = value.strip()
        elif key in HEADER_KEYS and sep:
            header[key] = value.strip()
    return title, header


def load(path: Path) -> Recipe:
    """The recipe in ``path`` (``recipe_<name>.yaml``)."""
    title, header = read_header(path.read_text(encoding="utf-8"))
    return Recipe(name=path.stem[len(PREFIX) :], path=path, title=title, header=header)


def all_recipes(config_dir: Optional[Path] = None) -> list[Recipe]:
    """Every recipe of the configs, by name."""
    return [load(path) for path in sorted(recipes_dir(config_dir).glob(f"{PREFIX}*.yaml"))]


def find(name: str, config_dir: Optional[Path] = None) -> Recipe:
    """The recipe called ``name`` (with or without ``recipe_``); a ConfigError listing them when there is none."""
    from evolve_train.errors import ConfigError

    known = all_recipes(config_dir)
    wanted = name.removeprefix(PREFIX).removesuffix(".yaml")
    for recipe in known:
        if recipe.name == wanted:
            return recipe
    names = ", ".join(recipe.name for recipe in known)
    raise ConfigError(f"no recipe {name!r}; the recipes are: {names} (evolve-train recipes)")


def listing(recipes: Sequence[Recipe]) -> str:
    """One line per recipe: name, model, cluster shape; then how to use them."""
    width = max((len(recipe.name) for recipe in recipes), default=0)
    model_width = max((len(recipe.header.get("model", "")) for recipe in recipes), default=0)
    lines = [
        f"{recipe.name:<{width}}  {recipe.header.get('model', ''):<{model_width}}  {recipe.header.get('cluster', '')}"
        for recipe in recipes
    ]
    lines += [
        "",
        "run one: evolve-train experiment=recipe_<name> model.name_or_path=... data.root=... (its header has the launch",
        "commands, the LoRA and QA overrides and a dry run); evolve-train recipes show <name> | copy <name> <dir>",
    ]
    return "\n".join(lines)


def copied_text(recipe: Recipe) -> str:
    """The recipe's YAML as a copy named ``my_<name>``: its ``experiment:`` (the run dir's first part) and the
    ``experiment=recipe_<name>`` of its commands renamed."""
    copy = f"{COPY_PREFIX}{recipe.name}"
    text = recipe.path.read_text(encoding="utf-8")
    text = re.sub(rf"^experiment: {re.escape(recipe.name)}$", f"experiment: {copy}", text, flags=re.M)
    return text.replace(recipe.override, f"experiment={copy}")


def copy(recipe: Recipe, directory: Path) -> Path:
    """Write ``DIR/experiment/my_<name>.yaml``; refuses (ConfigError) to overwrite one."""
    from evolve_train.errors import ConfigError

    target = Path(directory) / "experiment" / f"{COPY_PREFIX}{recipe.name}.yaml"
    if target.exists():
        raise ConfigError(f"{target} exists: edit it, or copy to another directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(copied_text(recipe), encoding="utf-8")
    return target


def how_to_run(target: Path) -> str:
    """What to type to run a copy: the folder on Hydra's search path, the copy as the experiment."""
    folder = target.parent.parent.resolve()
    name = target.stem
    return "\n".join(
        [
            f"copied to {target}; edit it, then run it with its folder on the config search path:",
            f"  evolve-train --config-dir {folder} experiment={name} model.name_or_path=... data.root=...",
            f"  python train.py --config-dir {folder} experiment={name} ...     # in a clone",
            f"  python train.py 'hydra.searchpath=[file://{folder}]' experiment={name} ...",
            f"  evolve-train --dry-run --config-dir {folder} experiment={name}    # its estimates, nothing trained",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of ``evolve-train recipes`` (also the ``recipes`` subcommand of ``evolve-train``'s parser)."""
    parser.add_argument(
        "command",
        nargs="?",
        default="list",
        choices=COMMANDS,
        help="list: name, model and cluster of each recipe; show: print one's YAML; copy: write it to DIR to edit",
    )
    parser.add_argument("name", nargs="?", help="a recipe's name (as listed; show and copy)")
    parser.add_argument(
        "directory", nargs="?", help="copy: the folder to copy it into (as DIR/experiment/my_NAME.yaml)"
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The command line of `evolve-train recipes`."""
    parser = argparse.ArgumentParser(prog="evolve-train recipes", description=__doc__.splitlines()[0])
    return add_arguments(parser)


def run(args: argparse.Namespace) -> str:
    """What the command prints (ConfigError on a missing or unknown name)."""
    from evolve_train.errors import ConfigError

    if args.command == "list":
        return listing(all_recipes())
    if not args.name:
        raise ConfigError(f"evolve-train recipes {args.command} needs a recipe name (evolve-train recipes lists them)")
    recipe = find(args.name)
    if args.command == "show":
        return recipe.path.read_text(encoding="utf-8").rstrip("\n")
    if not args.directory:
        raise ConfigError("evolve-train recipes copy needs a directory: evolve-train recipes copy NAME DIR")
    return how_to_run(copy(recipe, Path(args.directory)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``evolve-train recipes ...``: prints the listing, a recipe or where its copy went; exit 2 on a bad name."""
    from evolve_train.cli.errors import exit_on_user_error

    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    with exit_on_user_error():
        print(run(args))
    return 0
