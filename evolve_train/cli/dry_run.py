"""``python train.py --dry-run [-m] [overrides]`` (and ``evolve-train --dry-run``): what a run, or every point of a
sweep, would be, without training, without a GPU, in seconds, writing nothing but its output.

Each point (a sweep's points split as Hydra's basic sweeper splits them) is composed with Hydra's compose API,
so no Hydra job runs: no run dir, no sweep dir, no ``.hydra/``, no log file, and no launcher submits anything (a
``hydra/launcher=...`` override only gives the world size: ``tasks_per_node`` x ``nodes`` of its config). Per
point it prints the run dir the run would use, the overrides that differ between the points, the world size,
the tokens per optimizer step, the memory preflight's estimate per device (``training/preflight.py``, from the
model's config alone) and a training wall-time estimate: the training FLOPs ``(4 N + 2 N_trainable) T``
(``training/telemetry.py``) of the tokens every step would train (its token budget, else its optimizer steps,
else its epochs over its corpus at :data:`CHARS_PER_TOKEN`) at :data:`UTILISATION` of ``trainer.peak_flops``, or
of an assumed device peak (:data:`ASSUMED_PEAK`) where it is 0. Evaluation time is not counted.

The memory estimate is the one a launch in this environment would check: FSDP2's shards where the environment
says what ``accelerate launch --config_file accelerate_configs/fsdp.yaml`` sets in every process
(``ACCELERATE_USE_FSDP=true``, ``FSDP_VERSION=2``), or where the point's ``trainer.accelerate_config`` names an FSDP2
file (each point of a submitit sweep then runs under it), over ``WORLD_SIZE`` (or the launcher's) processes, or one
node's (``LOCAL_WORLD_SIZE``, or the launcher's ``tasks_per_node``) under HSDP. A ``model.name_or_path`` that is a local path without a ``config.json`` (a
recipe's placeholder, a checkpoint not copied here yet) is estimated from the ``model.*`` shape keys instead, and
the plan says so; data that cannot be read leaves the wall time unknown, not the memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

DRY_RUN_FLAG = "--dry-run"
MULTIRUN_FLAGS = ("-m", "--multirun")
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")
LAUNCHER = "hydra/launcher"
CHARS_PER_TOKEN = 4.0
"""Characters of corpus text per token in the wall-time estimate (no tokenizer is built)."""
UTILISATION = 0.35
"""Share of the device's peak FLOP/s the wall-time estimate assumes training reaches."""
ASSUMED_PEAK = {"gpu": 989.4e12, "cpu": 3e11}
"""Peak FLOP/s assumed where ``trainer.peak_flops`` is 0: an H100's dense bf16 under bf16/fp16/auto mixed
precision, else a CPU's fp32 matmul peak (about docs/results/benchmarks.md's 2-core measurement)."""


@dataclass
class Point:
    """One run of the dry run: its overrides and what it would be."""

    overrides: list[str]
    run_dir: str = ""
    world: int = 1
    world_from: str = ""
    per_node: int = 0
    """Processes per node under a launcher (its ``tasks_per_node``); 0: ``LOCAL_WORLD_SIZE``, else the world."""
    tokens_per_update: int = 0
    tokens_line: str = ""
    memory: str = ""
    wall: str = ""
    notes: list[str] = field(default_factory=list)


def take_flag(args: Sequence[str]) -> tuple[bool, list[str]]:
    """``(--dry-run given, the other arguments)``."""
    rest = [arg for arg in args if arg != DRY_RUN_FLAG]
    return len(rest) != len(args), rest


def parse_args(args: Sequence[str]) -> tuple[bool, list[str], list[Path]]:
    """``(multirun, overrides, config dirs)`` of a dry run's arguments; any other flag is a ConfigError."""
    from evolve_train.errors import ConfigError

    multirun, overrides, dirs = False, [], []
    words = list(args)
    while words:
        word = words.pop(0)
        flag, sep, value = word.partition("=")
        if word in MULTIRUN_FLAGS:
            multirun = True
        elif flag in CONFIG_DIR_FLAGS:
            dirs.append(Path(value if sep else (words.pop(0) if words else "")).resolve())
        elif word.startswith("-"):
            raise ConfigError(f"{DRY_RUN_FLAG} takes overrides, -m and --config-dir; not {word}")
        else:
            overrides.append(word)
    return multirun, overrides, dirs


def sweep_points(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The overrides of every point: one, or (``-m``) the sweep split as Hydra's basic sweeper splits it."""
    if not multirun:
        return [list(overrides)]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(point) for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for point in batch]


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def differing(points: list[list[str]]) -> list[str]:
    """The override keys whose value is not the same in every point (in first-seen order)."""
    keys: dict[str, set] = {}
    for point in points:
        for override in point:
            keys.setdefault(_key(override), set())
    for key in keys:
        for point in points:
            keys[key].add(next((o for o in point if _key(o) == key), None))
    return [key for key, values in keys.items() if len(values) > 1]


def launcher_shape(point: list[str], config_dirs: list[Path]) -> tuple[Optional[str], int, int, list[str]]:
    """``(launcher, tasks per node, nodes, the point without launcher overrides)``: ``tasks_per_node`` and
    ``nodes`` of the config of the point's ``hydra/launcher=X`` (``hydra.launcher.*`` overrides applied); ``(None
    or "basic", 0, 0, ...)`` without a launcher of its own."""
    from omegaconf import OmegaConf

    launcher = next((o.split("=", 1)[1] for o in point if _key(o) == LAUNCHER), None)
    settings = {
        _key(o)[len("hydra.launcher.") :]: o.split("=", 1)[1] for o in point if _key(o).startswith("hydra.launcher.")
    }
    kept = [o for o in point if _key(o) != LAUNCHER and not _key(o).startswith("hydra.launcher.")]
    if launcher in (None, "basic"):
        return launcher, 0, 0, kept
    values: dict = {}
    for folder in config_dirs:
        path = folder / "hydra" / "launcher" / f"{launcher}.yaml"
        if path.is_file():
            values = OmegaConf.to_container(OmegaConf.load(path)) or {}
            break
    tasks = int(settings.get("tasks_per_node", values.get("tasks_per_node", 1)))
    nodes = int(settings.get("nodes", values.get("nodes", 1)))
    return launcher, tasks, nodes, kept


def launcher_world(point: list[str], config_dirs: list[Path]) -> tuple[int, str, list[str]]:
    """``(world size, where it comes from, the point without launcher overrides)``: a ``hydra/launcher=X`` of
    the point gives ``tasks_per_node`` x ``nodes`` of X's config (``hydra.launcher.*`` overrides applied); else
    the environment's ``WORLD_SIZE`` (1 for ``python train.py``)."""
    launcher, tasks, nodes, kept = launcher_shape(point, config_dirs)
    if not tasks:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        return world, "WORLD_SIZE" if world > 1 else "one process", kept
    return tasks * nodes, f"{LAUNCHER}={launcher}: {tasks} tasks x {nodes} node(s)", kept


def compose_point(point: list[str], config_dirs: list[Path]):
    """The point's config with its ``hydra`` node (run and sweep dirs), composed with no job run."""
    from hydra import compose, initialize_config_dir

    from evolve_train.config_renames import renamed_overrides
    from evolve_train.config_strict import check_overrides

    primary, extra = config_dirs[0], config_dirs[1:]
    point = renamed_overrides(point)
    check_overrides(point, config_dirs)
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in extra)}]"] if extra else []
    with initialize_config_dir(config_dir=str(primary), version_base="1.3"):
        return compose(config_name="config", overrides=[*point, *search], return_hydra_config=True)


def run_dir_of(cfg, multirun: bool) -> str:
    """Where the point's run would write: ``run_dir``, else Hydra's run dir (a sweep's: sweep dir / subdir)."""
    if cfg.get("run_dir"):
        return str(cfg.run_dir)
    if multirun:
        return str(Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir))
    return str(cfg.hydra.run.dir)


def corpus_tokens(data_cfg, cache: dict) -> list[float]:
    """Estimated tokens of each step's training corpus (characters / :data:`CHARS_PER_TOKEN`), read once per
    data config."""
    key = repr(data_cfg)
    if key not in cache:
        from evolve_train.data.timeline import build_timeline

        timeline = build_timeline(data_cfg)
        cache[key] = [_characters(step) / CHARS_PER_TOKEN for step in timeline.steps]
    return cache[key]


def _characters(step) -> int:
    texts = sum(len(str(record.get("text", ""))) for record in step.texts)
    pairs = sum(len(str(record.get("input", ""))) + len(str(record.get("output", ""))) for record in step.pairs)
    return texts + pairs


def step_tokens(trainer, corpus: list[float], update_tokens: int) -> list[float]:
    """Tokens each step would train: its token budget, else its optimizer steps, else its epochs over its corpus."""
    out = []
    for k, tokens in enumerate(corpus):
        budget = trainer.tokens_per_step0 if k == 0 else trainer.tokens_per_step
        steps = trainer.max_steps_step0 if k == 0 else trainer.max_steps
        epochs = trainer.epochs_step0 if k == 0 else trainer.epochs
        out.append(float(budget) if budget else float(steps * update_tokens) if steps else float(epochs) * tokens)
    return out


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def is_local_placeholder(name_or_path: Optional[str]) -> bool:
    """``name_or_path`` names a local directory (absolute, ``~``, ``./``) that holds no ``config.json``."""
    if not name_or_path or not name_or_path.startswith(("/", "~", "./", "../")):
        return False
    return not (Path(name_or_path).expanduser() / "config.json").is_file()


def model_shape(model) -> tuple:
    """``(shape, note)`` of the model the run would train: from its config (``training/preflight.py``), or, for a
    local ``name_or_path`` without a ``config.json``, from the ``model.*`` shape keys (the note says so)."""
    from dataclasses import replace

    from evolve_train.training import preflight

    if not is_local_placeholder(model.name_or_path):
        return preflight.shape_of(preflight._transformers_config(model)), ""
    shape = preflight.shape_of(preflight._transformers_config(replace(model, name_or_path=None)))
    note = (
        f"estimated from the model.* shape keys ({model.n_layer} blocks, width {model.n_embd}, MLP "
        f"{model.n_inner or 4 * model.n_embd}, vocabulary {model.vocab_size}, tied head): {model.name_or_path} has "
        "no config.json here"
    )
    return shape, note


def fsdp2_file(path: Optional[str]) -> bool:
    """``trainer.accelerate_config`` names an FSDP2 file (``distributed_type: FSDP``, ``fsdp_version: 2``), read
    as each task of a submitit job reads it (a relative path from the working directory); False without one."""
    if not path or not Path(path).is_file():
        return False
    import yaml

    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    version = (config.get("fsdp_config") or {}).get("fsdp_version", 1)
    return config.get("distributed_type") == "FSDP" and int(version) == 2


def shard_group(world: int, trainer, per_node: int = 0) -> int:
    """Processes one copy of the model is sharded over under FSDP2 (what the environment's ``accelerate launch``
    sets, ``ACCELERATE_USE_FSDP=true FSDP_VERSION=2``, or an FSDP2 ``trainer.accelerate_config``): every process,
    or a node's under HSDP (``trainer.fsdp_mesh``; ``LOCAL_WORLD_SIZE``, else ``per_node``); 0 when the run
    would not be sharded."""
    from evolve_train.training.distributed import fsdp2_requested, mesh_sizes

    if world <= 1 or not (fsdp2_requested() or fsdp2_file(getattr(trainer, "accelerate_config", None))):
        return 0
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or per_node or world
    sizes = mesh_sizes(str(trainer.fsdp_mesh), int(trainer.fsdp_replicate), world, local)
    return sizes[1] if sizes else world


def plan_point(point: Point, cfg, cache: dict) -> Point:
    """Fill in the point's tokens per optimizer step, memory per device and wall-time estimate."""
    from evolve_train.config import Config
    from evolve_train.training import preflight
    from evolve_train.training.telemetry import training_flops

    from omegaconf import OmegaConf

    config: Config = OmegaConf.to_object(cfg)
    trainer, model = config.trainer, config.model
    micro = int(trainer.tokens_per_batch or trainer.batch_size * trainer.seq_len)
    point.tokens_per_update = micro * int(trainer.grad_accum) * point.world
    point.tokens_line = f"{point.tokens_per_update} ({micro} a micro-batch x grad_accum {trainer.grad_accum} x {point.world} process(es))"
    precision = str(trainer.mixed_precision)
    half = precision in ("bf16", "fp16", "auto")
    try:
        shape, source = model_shape(model)
    except Exception as err:  # a remote or missing pretrained config: the rest still prints
        point.memory = point.wall = f"unknown (the model's config could not be read: {err})"
        return point
    strategies = [str(s) for s in (getattr(config.method, "strategies", None) or [config.method.name])]
    trainable = preflight._lora_parameters(shape, config.method.lora.r) if "lora" in strategies else None
    weight_bytes = 2 if str(model.dtype) == "bfloat16" else 4
    shards = shard_group(point.world, trainer, point.per_node)
    estimate = preflight.estimate(
        shape,
        tokens=micro,
        weight_bytes=weight_bytes,
        compute_bytes=2 if half else weight_bytes,
        world=shards or point.world,
        sharded=bool(shards),
        masters=bool(shards) and half,  # accelerate upcasts trainable weights to float32 for fully_shard
        trainable=trainable,
        checkpointing=bool(model.gradient_checkpointing),
    )
    sharding = f"; FSDP2, sharded over {shards} processes" if shards else ""
    point.memory = f"{estimate.lines()} ({shape.parameters / 1e6:.2f}M parameters{sharding})"
    if source:
        point.notes.append(source)
    try:
        corpus = corpus_tokens(config.data, cache)
    except Exception as err:  # data not given or not here (a recipe's placeholders): the memory still prints
        point.wall = f"unknown (the corpus could not be read: {err})"
        return point
    tokens = step_tokens(trainer, corpus, point.tokens_per_update)
    flops = training_flops(shape.parameters, trainable or shape.parameters, int(sum(tokens)))
    peak = float(trainer.peak_flops) or ASSUMED_PEAK["gpu" if half else "cpu"]
    source = "trainer.peak_flops" if trainer.peak_flops else "assumed: set trainer.peak_flops"
    seconds = flops / (UTILISATION * peak * point.world)
    point.wall = (
        f"~{_duration(seconds)} of training ({sum(tokens):.3g} tokens over {len(tokens)} steps, {flops:.3g} FLOPs at "
        f"{UTILISATION:.0%} of {peak:.3g} FLOP/s per process, {source}; evaluation not counted)"
    )
    return point


def dry_run(args: Sequence[str], config_dir: Path, user_dirs: Sequence[Path] = ()) -> list[Point]:
    """Compose and estimate every point of ``args`` (the command line without ``--dry-run``); print the plan."""
    from omegaconf import open_dict

    multirun, overrides, flag_dirs = parse_args(args)
    dirs = [Path(config_dir).resolve(), *[Path(d).resolve() for d in [*user_dirs, *flag_dirs]]]
    dirs = list(dict.fromkeys(dirs))
    raw = sweep_points(overrides, multirun)
    cache: dict = {}
    points = []
    for overrides_of_point in raw:
        world, world_from, kept = launcher_world(overrides_of_point, dirs)
        per_node = launcher_shape(overrides_of_point, dirs)[1]
        point = Point(overrides=overrides_of_point, world=world, world_from=world_from, per_node=per_node)
        cfg = compose_point(kept, dirs)
        point.run_dir = run_dir_of(cfg, multirun)
        with open_dict(cfg):
            del cfg["hydra"]  # Hydra's own node: not part of the run's schema
        points.append(plan_point(point, cfg, cache))
    print(format_plan(points, differing(raw)))
    return points


def format_plan(points: list[Point], keys: list[str]) -> str:
    """The printed plan: a header, then per point its differing overrides and estimates."""
    lines = [f"dry run: {len(points)} point(s); nothing is trained, launched or written"]
    if keys:
        lines.append(f"differs between points: {', '.join(keys)}")
    for index, point in enumerate(points, 1):
        shown = [o for o in point.overrides if len(points) == 1 or _key(o) in keys] or ["(the defaults)"]
        lines += [
            f"[{index}/{len(points)}] {' '.join(shown)}",
            f"  run dir: {point.run_dir}",
            f"  world size: {point.world} ({point.world_from})",
            f"  tokens per optimizer step: {point.tokens_line}",
            f"  memory per device (preflight estimate): {point.memory}",
            *[f"    {note}" for note in point.notes],
            f"  wall time: {point.wall}",
        ]
    return "\n".join(lines)


def run_if_asked(args: Sequence[str], config_dir: Path, user_dirs: Sequence[Path] = ()) -> Optional[int]:
    """With ``--dry-run`` in ``args``: the dry run (exit status 0, or 2 on a bad config: one line); else None."""
    asked, rest = take_flag(args)
    if not asked:
        return None
    from evolve_train.cli.errors import exit_on_user_error

    with exit_on_user_error():
        dry_run(rest, config_dir, user_dirs)
    return 0
