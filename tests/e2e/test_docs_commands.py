"""Every command line the documents show works as written, without training: a renamed key, option, flag or file
fails here, not in a reader's shell.

The command lines are read from README.md, docs/*.md (fenced code blocks and inline code) and the comments of
configs/ (``# python train.py ...``). Each is checked the way its tool would take it:

* ``python train.py ...`` (also behind ``accelerate launch ... train.py`` and ``/usr/bin/time -v``): composed
  with Hydra's compose API in this process and validated into the typed schema (what ``--cfg job`` prints and
  ``train`` starts from); a sweep (``-m``) is split into its jobs as Hydra's basic sweeper splits it and every
  job is composed; the run dir resolves. ``accelerate launch --config_file FILE`` must name a file.
* ``evolve-*`` and ``python evaluate.py``: the tool's own argument parser takes the line (subcommand, options,
  required arguments), and the Hydra overrides it passes on compose.
* ``python scripts/X.py``, ``bash scripts/X.sh``, ``python -m module``: the script or module exists.

A placeholder (``...``, ``…``, ``<k>``, ``$VAR``) stands for the reader's value: its override is not composed,
only its key is checked to exist. Inline code in prose and usage synopses (``[--cuts ...]``) often name a tool
or part of a line (``evolve-data diff``, ``accelerate launch train.py -m``): their train.py overrides are
checked as above, and of a tool's words only what they say (the subcommand exists, every ``--option`` is one of
its options), not that the line is complete.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict, read_write

import evolve_train.config  # noqa: F401  (registers the typed schema, base_config)
from evolve_train.config import Config
from helpers.processes import ROOT

CONFIGS = ROOT / "configs"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PLACEHOLDER = re.compile(r"\.\.\.|…|<[^>]*>|\$")
TOOLS = ("evolve-data", "evolve-eval", "evolve-report", "evolve-gate", "evolve-score", "evolve-train")
WRAPPERS = {"/usr/bin/time": 0, "time": 0, "-v": 0, "timeout": 1, "nohup": 0, "exec": 0}
"""Words that run the command after them (and how many arguments they take themselves)."""
HYDRA_FLAGS = {
    "-m",
    "--multirun",
    "--cfg",
    "job",
    "hydra",
    "all",
    "--help",
    "-h",
    "--hydra-help",
    "--resolve",
    "--dry-run",
}
STARTS = re.compile(
    r"(?:^|\s)((?:[A-Z_]+=\S*\s+)*(?:/usr/bin/time\s+(?:-v\s+)?)?(?:python3?\s+\S+\.py|python3?\s+-m\s+\S+"
    r"|bash\s+scripts/\S+|accelerate\s+launch|evolve-(?:data|eval|report|gate|score)\b|evolve-train(?=\s+[^\s:]|\s*$)).*)"
)


@dataclass
class Command:
    where: str
    text: str
    words: list[str] = field(default_factory=list)
    complete: bool = True
    """A line of a code block (checked whole); False: inline code or a synopsis (checked for what it says)."""


# ---------------------------------------------------------------- reading the documents


def _joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Backslash continuations joined; (first line number, text)."""
    out, pending, first = [], "", 0
    for number, text in lines:
        if not pending:
            first = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        out.append((first, pending + text))
        pending = ""
    if pending:
        out.append((first, pending))
    return out


def _markdown_lines(path: Path) -> list[tuple[int, str, bool]]:
    """(line, text, from a code block) of code-block lines (continuations joined, a ``$ `` prompt dropped) and
    inline code spans."""
    out, fence, prose = [], None, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence = []
            else:
                out += [(n, t[2:] if t.startswith("$ ") else t, True) for n, t in _joined(fence)]
                fence = None
            continue
        if fence is not None:
            fence.append((number, stripped))
        else:
            prose.append((number, line))
    # inline code may wrap: read the prose as one text, each span at the line where it starts
    text, starts = "", []
    for number, line in prose:
        starts.append((len(text), number))
        text += line + "\n"
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        number = max(n for offset, n in starts if offset <= match.start())
        out.append((number, " ".join(match.group(1).split()), False))
    return out


def _config_lines(path: Path) -> list[tuple[int, str, bool]]:
    lines = [
        (number, line.lstrip()[1:].strip())
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.lstrip().startswith("#")
    ]
    return [(number, text, True) for number, text in _joined(lines)]


def _commands_in(text: str) -> list[str]:
    """The command lines in one line of text: several when joined by ``&&``, ``;`` or a pipe."""
    code = re.split(r"\s#\s|\s#$", text)[0]
    found = []
    for part in re.split(r"&&|;|\|(?!\|)", code):
        match = STARTS.search(part)
        if match:
            found.append(match.group(1).strip())
    return found


def documented_commands() -> list[Command]:
    commands = []
    sources = [(path, _markdown_lines(path)) for path in DOCUMENTS]
    sources += [(path, _config_lines(path)) for path in sorted(CONFIGS.rglob("*.yaml"))]
    sources += [(path, _config_lines(path)) for path in sorted((ROOT / "accelerate_configs").glob("*.yaml"))]
    for path, lines in sources:
        for number, text, block in lines:
            if text.startswith("usage: "):  # argparse's synopsis (docs/cli.md): generated from the parser itself
                continue
            for command in _commands_in(text):
                try:
                    words = [w for w in shlex.split(command) if w not in ("...", "…")]
                except ValueError:
                    continue  # an unbalanced quote: prose, not a command
                complete = block and "[-" not in command  # a synopsis: [--option ...]
                commands.append(Command(f"{path.relative_to(ROOT)}:{number}", command, words, complete))
    return commands


COMMANDS = documented_commands()


# ---------------------------------------------------------------- checking one command


def _unwrap(words: list[str]) -> list[str]:
    """Without leading ``VAR=value`` assignments and wrappers (``/usr/bin/time -v``, ``timeout 600``)."""
    words = list(words)
    while words:
        if re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
        elif words[0] in WRAPPERS:
            skip = WRAPPERS[words.pop(0)]
            del words[:skip]
        else:
            return words
    return words


def _compose(overrides: list[str]) -> None:
    """Compose ``overrides`` as train.py would, validate them into the schema, resolve the run dir."""
    _composed(tuple(overrides))


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]) -> bool:
    """(Cached: many documents show the same line.)"""
    overrides = list(overrides)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    assert str(cfg.hydra.run.dir) and str(cfg.hydra.sweep.subdir)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    assert isinstance(OmegaConf.to_object(cfg), Config)
    return True


@functools.lru_cache(maxsize=1)
def _default_config():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config")


def _key_exists(override: str) -> None:
    key = override.split("=", 1)[0].lstrip("+~")
    if "/" in key or key.startswith("hydra"):  # a config group path, or Hydra's own keys
        return
    cfg = _default_config()
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if override.startswith("+"):
        return  # a new key: nothing to find
    assert node is not None and leaf in node, f"{key} is not a config key"


def _split_overrides(words: list[str]) -> tuple[list[str], list[str]]:
    """(overrides that compose, overrides with a placeholder value: only their key is checked)."""
    usable, placeholders = [], []
    for word in words:
        if word.startswith("-") or "=" not in word:
            continue
        (placeholders if PLACEHOLDER.search(word) else usable).append(word)
    return usable, placeholders


@functools.lru_cache(maxsize=None)
def _recipe_copy(folder: str, experiment: str) -> str:
    """The folder ``evolve-train recipes copy NAME FOLDER`` makes (``experiment=my_NAME`` names it), made here."""
    import tempfile

    from evolve_train.cli import recipes

    shipped = {recipe.name: recipe for recipe in recipes.all_recipes()}
    name = experiment.removeprefix("my_")
    assert name in shipped, f"--config-dir {folder}: no such folder, and experiment={experiment} is no recipe's copy"
    copy = recipes.copy(shipped[name], Path(tempfile.mkdtemp(prefix="recipe_copy_")) / folder)
    return str(copy.parent.parent)


def _config_dir(words: list[str]) -> list[str]:
    """``--config-dir DIR`` as the search-path override it amounts to; a DIR the documents make with ``evolve-train
    recipes copy`` (the line before) is made here the same way."""
    if "--config-dir" not in words:
        return words
    at = words.index("--config-dir")
    folder, rest = words[at + 1], words[:at] + words[at + 2 :]
    if not Path(folder).is_dir():
        experiment = next((w.split("=", 1)[1] for w in rest if w.startswith("experiment=")), "")
        folder = _recipe_copy(folder, experiment)
    return [*rest, f"hydra.searchpath=[file://{Path(folder).resolve()}]"]


def check_train(words: list[str]) -> None:
    """``train.py``'s arguments: flags, overrides; a sweep composes every job."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words = _config_dir(words)
    unknown = [w for w in words if w.startswith("-") and w not in HYDRA_FLAGS]
    assert not unknown, f"flags train.py does not take: {unknown}"
    positional = [w for w in words if "=" not in w and not w.startswith("-") and w not in HYDRA_FLAGS]
    assert not positional, f"train.py takes overrides key=value, not {positional}"
    usable, placeholders = _split_overrides(words)
    for override in placeholders:
        _key_exists(override)
    if "-m" in words or "--multirun" in words:
        parsed = OverridesParser.create().parse_overrides(usable)
        jobs = BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]
    else:
        jobs = [usable]
    for job in jobs:
        _compose(job)


def check_accelerate(words: list[str], complete: bool = True) -> None:
    assert words[:2] == ["accelerate", "launch"], words
    if "train.py" not in words:
        assert not complete, "accelerate launch without train.py"
        words = [*words, "train.py"]
    at = words.index("train.py")
    if complete:
        assert "-m" not in words[at:] and "--multirun" not in words[at:], "never accelerate launch train.py -m"
    launch = words[2:at]
    if "--config_file" in launch:
        given = launch[launch.index("--config_file") + 1 :][:1]
        if given and not given[0].startswith("-") and not PLACEHOLDER.search(given[0]):
            assert (ROOT / given[0]).is_file(), f"--config_file {given[0]} does not exist"
    check_train(words[at + 1 :])


def _parse(parser, arguments: list[str], intermixed: bool = False):
    try:
        return parser.parse_intermixed_args(arguments) if intermixed else parser.parse_args(arguments)
    except SystemExit as err:
        assert err.code == 0, f"{parser.prog} refuses {arguments}"
        return None


def _mentioned(parser, arguments: list[str]) -> None:
    """What a partial line says holds: its subcommand exists and each ``--option`` is one of its options."""
    subparsers = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    words = [w for w in arguments if not PLACEHOLDER.search(w)]
    if subparsers and words and not words[0].startswith("-"):
        choices = subparsers[0].choices
        assert words[0] in choices, f"{parser.prog} has no subcommand {words[0]} ({', '.join(choices)})"
        parser, words = choices[words[0]], words[1:]
    for word in words:
        option = word.split("=", 1)[0]
        if option.startswith("--"):
            known = [o for o in parser._option_string_actions if o.startswith(option)]
            assert known, f"{parser.prog} has no option {option}"


@functools.lru_cache(maxsize=1)
def console_parsers() -> dict:
    """``{tool: build_parser}`` of every console script of pyproject.toml (its module's ``build_parser``)."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as handle:
        scripts = tomllib.load(handle)["project"]["scripts"]
    return {tool: importlib.import_module(target.split(":")[0]).build_parser for tool, target in scripts.items()}


def check_tool(words: list[str], complete: bool = True) -> None:
    tool, arguments = words[0], words[1:]
    if tool in ("python", "python3"):  # python evaluate.py = evolve-eval
        tool, arguments = "evolve-eval", words[2:]
    parsers = console_parsers()
    assert tool in parsers, f"no such tool {tool}"
    if tool == "evolve-train" and arguments[:1] == ["recipes"]:  # its subcommand: cli/recipes.py's own parser
        if complete:
            _parse(importlib.import_module("evolve_train.cli.recipes").build_parser(), arguments[1:])
        else:
            _mentioned(parsers[tool](), arguments)
        return
    if tool == "evolve-train" and complete:  # the arguments of python train.py
        check_train(arguments)
        return
    if not complete:
        _mentioned(parsers[tool](), arguments)
        overrides = [w for w in arguments if re.match(r"^[+~]?[\w.]+=", w) and not w.startswith("-")]
        if tool == "evolve-data" and arguments[:1] != ["export-lm-eval"]:
            overrides = []
        usable, placeholders = _split_overrides(overrides)
        for override in placeholders:
            _key_exists(override)
        if usable:
            _compose(usable)
        return
    args = _parse(parsers[tool](), arguments, intermixed=tool == "evolve-eval")
    if args is None:  # --help
        return
    overrides = []
    if tool == "evolve-eval":
        overrides = [a for a in args.args if "=" in a]
    elif tool == "evolve-data" and args.command == "export-lm-eval":
        overrides = list(args.overrides)
    if overrides:
        usable, placeholders = _split_overrides(overrides)
        for override in placeholders:
            _key_exists(override)
        _compose(usable)


def check_file(words: list[str]) -> None:
    if words[0] == "bash" or words[1].endswith(".py"):
        script = words[1]
        assert (ROOT / script).is_file(), f"{script} does not exist"
    else:
        module = words[2]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"


def check(command: Command) -> None:
    words = _unwrap(command.words)
    if not words:
        return
    if words[0] == "accelerate":
        check_accelerate(words, command.complete)
    elif words[0] in TOOLS or (words[0].startswith("python") and words[1:2] == ["evaluate.py"]):
        check_tool(words, command.complete)
    elif words[0].startswith("python") and words[1:2] == ["train.py"]:
        check_train(words[2:])
    else:
        check_file(words)


# ---------------------------------------------------------------- the tests


def test_the_documents_show_every_kind_of_command():
    kinds = {_unwrap(c.words)[0] for c in COMMANDS if _unwrap(c.words)}
    assert {"python", "accelerate", "evolve-data", "evolve-eval", "evolve-report", "evolve-gate"} <= kinds
    where = {c.where.split(":")[0] for c in COMMANDS}
    assert "README.md" in where and "configs/data/temporal_qa.yaml" in where
    assert sum(1 for c in COMMANDS if "train.py" in c.words) >= 50


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where} {c.text[:60]}" for c in COMMANDS])
def test_documented_command_works_as_written(command):
    try:
        check(command)
    except AssertionError as err:
        raise AssertionError(f"{command.where}: `{command.text}`: {err}") from None
    except Exception as err:  # noqa: BLE001  (Hydra's and the schema's errors: a renamed key, a bad value)
        message = " ".join(str(err).split())[:500]
        raise AssertionError(f"{command.where}: `{command.text}`: {type(err).__name__}: {message}") from None


@pytest.mark.parametrize(
    "text",
    [
        "python train.py trainer.lr_rate=1",  # a renamed key
        "python train.py model=nope",  # an option that does not exist
        "python train.py -m method=full,nope",  # one job of a sweep
        "accelerate launch --config_file configs/accelerate/fsdp.yaml train.py",  # a moved file
        "accelerate launch train.py -m method=full,lora",
        "evolve-data fetch-modle smollm2-135m",  # a misspelt subcommand
        "evolve-eval runs/demo --checkpoints 0,2",  # an option the tool does not have
        "evolve-data export-lm-eval --out tasks/ data.rooot=DIR",
        "python scripts/no_such_script.py",
        "python train.py trainer.epochs=-1",  # a value the schema refuses
        "evolve-train trainer.lr_rate=1",
        "evolve-train --config-dirr configs",
    ],
)
def test_a_broken_line_fails(text):
    command = Command("example", text, shlex.split(text))
    with pytest.raises(Exception):
        check(command)


def test_lines_are_read_from_code_blocks_inline_code_and_config_comments(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Run `python train.py\nseed=1` and then:\n\n```bash\n$ python train.py -m method=full,lora \\\n"
        "    seed=0,1   # a sweep\nevolve-report runs/x --out y && echo done\n```\n",
        encoding="utf-8",
    )
    assert [(n, " ".join(t.split()), b) for n, t, b in _markdown_lines(doc) if "train" in t or "report" in t] == [
        (5, "python train.py -m method=full,lora seed=0,1 # a sweep", True),
        (7, "evolve-report runs/x --out y && echo done", True),
        (1, "python train.py seed=1", False),
    ]
    assert _commands_in("evolve-report runs/x --out y && echo done") == ["evolve-report runs/x --out y"]
    assert _commands_in("ACCELERATE_USE_CPU=1 accelerate launch train.py  # x") == [
        "ACCELERATE_USE_CPU=1 accelerate launch train.py"
    ]


def test_every_group_train_py_help_lists_is_selectable():
    """``python train.py --help`` lists every directory of configs/ as a group: each must take an option
    (``group=option``, or ``+group=option`` for the arms an experiment adds), so nothing listed is unusable."""
    groups = sorted(p for p in CONFIGS.iterdir() if p.is_dir() and p.name != "hydra")
    assert {"model", "method", "data", "trainer", "eval", "logger", "experiment"} <= {g.name for g in groups}
    for group in groups:
        option = sorted(group.glob("*.yaml"))[0].stem
        try:
            _compose([f"{group.name}={option}"])
        except Exception:  # noqa: BLE001  (not in the defaults list: added with +)
            _compose([f"+{group.name}={option}"])


def test_the_readme_is_short_with_working_contents():
    """A newcomer reads README.md in minutes: at most 250 lines, a table of contents whose every link finds
    its heading, and the "What is tested where" table."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", readme, flags=re.MULTILINE)
    }
    links = re.findall(r"\]\(#([^)]+)\)", readme)
    assert len(links) >= 10 and not [link for link in links if link not in headings], headings
    assert "## What is tested where" in readme
    for target in re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|png))\)", readme):
        if target not in ("docs/your_data.md", "CONTRIBUTING.md"):  # (written separately)
            assert (ROOT / target).is_file(), target
