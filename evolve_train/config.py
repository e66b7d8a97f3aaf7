"""Typed configuration: the schema every Hydra config is merged into.

Each dataclass field carries a docstring (the string literal under it). Because the schema is
registered in Hydra's ConfigStore as ``base_config``, an override naming a key that does not exist
(``trainer.lr_rate=...``) fails before any work starts, with Hydra naming the key.

Each field also says once what it changes (``evolve_train/config_keys.py``): a plain field changes results;
``runtime(...)`` marks one that changes neither what is trained nor any metric (it may differ on resume and
stays out of the run tag and the cache keys), ``later_steps(...)`` one that changes only the time steps after
step 0 (out of the step-0 cache key), ``label(...)`` one that only names the run. The run identity
(``training/identity.py``) and the cache keys (``training/step0_cache.py``, ``evaluation/initial_cache.py``)
read these marks, never a list of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, ClassVar, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from evolve_train.config_keys import label, later_steps, runtime
from evolve_train.config_renames import current_evaluators
from evolve_train.errors import ConfigError


class Choice(str, Enum):
    """A closed set of string values: Hydra rejects any other value while composing, naming the key.
    A member compares equal to (and prints as) its string value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Arch(Choice):
    """``model.arch``: the architecture a model built from config gets (``models/build.py``); for a pretrained
    ``name_or_path`` it only picks the code path (every entry but ``t5`` is decoder-only)."""

    gpt2 = "gpt2"
    llama = "llama"
    qwen2 = "qwen2"
    t5 = "t5"
    causal = "causal"
    """Any decoder-only model of ``name_or_path`` (``AutoModelForCausalLM``); nothing to build from config."""


class AcrossSteps(Choice):
    merge = "merge"
    stack = "stack"


class ReplaySource(Choice):
    all = "all"
    initial = "initial"


class DataKind(Choice):
    synthetic_world = "synthetic_world"
    evolvingqa = "evolvingqa"
    temporal_qa = "temporal_qa"
    dyknow = "dyknow"


class DataOrder(Choice):
    time = "time"
    shuffled = "shuffled"


class GenerativePrompt(Choice):
    bos = "bos"
    corpus = "corpus"


class GenerativeSampler(Choice):
    previous = "previous"
    initial = "initial"


class Objective(Choice):
    masked_entity = "masked_entity"
    clm = "clm"
    auto = "auto"


class TxtDocuments(Choice):
    file = "file"
    paragraph = "paragraph"


class Split(Choice):
    dev = "dev"
    private = "private"


class DateForm(Choice):
    prefix = "prefix"
    inline = "inline"
    none = "none"


class Precision(Choice):
    no = "no"
    bf16 = "bf16"
    fp16 = "fp16"
    auto = "auto"
    """bf16 where the device computes it natively, else ``no`` (``training/distributed.py: resolve_precision``)."""


class WeightDtype(Choice):
    float32 = "float32"
    bfloat16 = "bfloat16"


class NonFinite(Choice):
    stop = "stop"
    skip = "skip"


class GreedyDecoder(Choice):
    pruned = "pruned"
    generate = "generate"


class EvalPrecision(Choice):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    bf16_copy = "bf16_copy"
    """A bfloat16 copy of the weights, evaluated without autocast (``evaluation/precision.py: evaluated_weights``)."""
    train = "train"
    """The autocast training used (``trainer.mixed_precision`` as resolved on this machine)."""


class PassageSource(Choice):
    documents = "documents"
    sentences = "sentences"
    files = "files"


class RetrievalScope(Choice):
    all = "all"
    latest = "latest"
    newest_version = "newest_version"


# --- continual-pretraining recipes (training/schedule.py, methods/lwf.py, methods/averaging.py) -----------


class Schedule(Choice):
    """``trainer.schedule``: the shape of the learning rate within a time step (training/schedule.py)."""

    linear = "linear"
    """Linear warmup, then linear decay to ``min_lr_ratio`` (the default)."""
    cosine = "cosine"
    """Linear warmup, then a cosine to ``min_lr_ratio``."""
    constant = "constant"
    """Linear warmup, then the peak."""
    wsd = "wsd"
    """Warmup, stable at the peak, linear decay to ``min_lr_ratio`` over the last ``cooldown_fraction``."""
    rsqrt = "rsqrt"
    """Warmup, inverse square root (timescale ``warmup_steps``), linear cooldown over the last ``cooldown_fraction``."""
    infinite = "infinite"
    """Ibrahim et al. 2024: warmup once (step 0), constant ``constant_lr_ratio`` between steps, cooldown per step."""


class Rewarm(Choice):
    """``trainer.rewarm``: which time steps after step 0 start with a warmup."""

    all = "all"
    """Every time step."""
    first = "first"
    """Only step 1, the first continual step."""
    none = "none"
    """No step after step 0 (the LR starts at the step's peak)."""


class PeakSchedule(Choice):
    """``trainer.peak_schedule``: the peak learning rate of each time step."""

    constant = "constant"
    """``trainer.lr`` at every step."""
    cosine_over_steps = "cosine_over_steps"
    """TiC-LM's AR meta-schedule: step k's peak follows one cosine over the run's time steps."""


class OptimizerState(Choice):
    """``trainer.optimizer_state``: what AdamW starts a time step with."""

    reset = "reset"
    """Fresh moments at every time step (the default)."""
    keep = "keep"
    """The moments (and step counts) at the end of the previous time step, matched by parameter name."""


class Average(Choice):
    """``method.average``: what the checkpoint of step k holds."""

    none = "none"
    """The trained weights."""
    uniform = "uniform"
    """The mean of the trained weights of steps 0..k."""
    ema = "ema"
    """An exponential moving average over the steps' trained weights (``method.ema_decay``)."""


class AverageContinue(Choice):
    """``method.average_continue``: which weights step k+1 trains from when averaging."""

    raw = "raw"
    """The trained (raw) weights of step k, kept in ``train_state/carry/<k>/``."""
    average = "average"
    """The averaged checkpoint ``steps/<k>/``."""


class LwfTargets(Choice):
    """``method.lwf.targets``: what the student is distilled toward."""

    kl = "kl"
    """The teacher's softened distribution (KL divergence, scaled by temperature squared)."""
    argmax = "argmax"
    """The teacher's argmax token (cross-entropy), as TiC-LM without ``--lwf-kl``."""


POSITIVE = (lambda v: v > 0, "positive")
NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
AT_LEAST_ONE = (lambda v: v >= 1, ">= 1")
UNIT = (lambda v: 0.0 <= v <= 1.0, "in [0, 1]")


def check_ranges(section: str, rules: dict[str, tuple[Any, tuple[Callable[[Any], bool], str]]]) -> None:
    """Range checks of one config section: ``{field: (value, (predicate, rule))}``; the error names the key."""
    for name, (value, (ok, rule)) in rules.items():
        if not ok(value):
            raise ConfigError(f"{section}.{name} must be {rule}, got {value!r}")


def as_choice(key: str, enum: type[Choice], value) -> Choice:
    """``value`` as a member of ``enum`` (configs built in Python pass plain strings)."""
    try:
        return enum(value)
    except ValueError:
        raise ConfigError(f"{key} must be one of {', '.join(m.value for m in enum)}, got {value!r}") from None


REGISTERED_SCHEDULES: set[str] = set()
"""Names of LR schedules registered besides the built-in ones (``training/schedule.py``: ``register_schedule``)."""


def schedule_choice(key: str, value):
    """A built-in schedule as its :class:`Schedule` member, a registered one as its name; else ConfigError."""
    if str(value) in REGISTERED_SCHEDULES:
        return str(value)
    try:
        return Schedule(value)
    except ValueError:
        known = [m.value for m in Schedule] + sorted(REGISTERED_SCHEDULES)
        raise ConfigError(f"{key} must be one of {', '.join(known)}, got {value!r}") from None


@dataclass
class ModelConfig:
    name_or_path: Optional[str] = None
    """Hub name or local directory of a pretrained model. ``null`` builds a fresh model from the fields below."""
    arch: Arch = Arch.gpt2
    """Architecture: ``gpt2``, ``llama``, ``qwen2`` (decoder-only, built from config when ``name_or_path`` is
    null), ``t5`` (seq2seq) or ``causal`` (a pretrained decoder-only ``name_or_path`` of any architecture)."""
    n_layer: int = 4
    """Transformer blocks (built-from-config models only)."""
    n_embd: int = 256
    """Hidden width (built-from-config models only)."""
    n_head: int = 4
    """Attention heads (built-from-config models only)."""
    n_kv_head: Optional[int] = None
    """Key/value heads of a built-from-config Llama or Qwen2 (grouped-query attention); ``null``: ``n_head``."""
    n_inner: Optional[int] = None
    """MLP width of a built-from-config Llama or Qwen2; ``null``: ``4 * n_embd``."""
    n_positions: int = 128
    """Maximum sequence length of a built-from-config model."""
    dropout: float = 0.0
    """Dropout of a built-from-config model (0 is best for memorising facts)."""
    activation: str = "gelu_pytorch_tanh"
    """MLP activation of a built-from-config GPT-2 (a transformers ``ACT2FN`` name). The default is GPT-2's
    ``gelu_new`` (tanh-approximated GELU) as one fused kernel: same function, much faster on CPU."""
    vocab_size: int = 2048
    """Vocabulary size of the tokenizer trained locally when no pretrained tokenizer is given. A built Llama or
    Qwen2 has at least this many embedding rows (a 128,256-row head on a smaller local tokenizer: the memory of a
    Llama-3 vocabulary without a download)."""
    tokenizer: Optional[str] = None
    """Tokenizer name or directory; ``null`` uses ``name_or_path``'s or trains a BPE tokenizer on the step-0 corpus."""
    attn_implementation: str = "sdpa"
    """Attention kernel passed to transformers (``sdpa``, ``eager``, ``flash_attention_2``)."""
    trust_remote_code: bool = False
    """Allow model repositories to run their own Python code. Off unless you trust the source."""
    allow_pickle: bool = False
    """Allow loading pickle-based weights (``.bin``/``.pt``). Off: only safetensors load."""
    gradient_checkpointing: bool = False
    """Activation checkpointing of each transformer block (transformers'): trade compute for memory on large
    models; re-applied after every load (resume, step-0 cache). With ``trainer.compile`` inside each compiled block."""
    dtype: WeightDtype = WeightDtype.float32
    """Dtype of the weights (built, loaded from any path) and so of the saved checkpoints: ``float32`` or
    ``bfloat16`` (half the memory and checkpoint size; AdamW then updates bf16 weights). Independent of
    ``trainer.mixed_precision`` (the autocast of training) and of ``eval.precision`` (that of evaluation)."""

    def __post_init__(self):
        self.arch = as_choice("model.arch", Arch, self.arch)
        self.dtype = as_choice("model.dtype", WeightDtype, self.dtype)
        check_ranges(
            "model",
            {
                "n_layer": (self.n_layer, POSITIVE),
                "n_embd": (self.n_embd, POSITIVE),
                "n_head": (self.n_head, POSITIVE),
                "n_positions": (self.n_positions, POSITIVE),
                "vocab_size": (self.vocab_size, POSITIVE),
                "dropout": (self.dropout, (lambda v: 0 <= v < 1, "in [0, 1)")),
            },
        )


@dataclass
class LoraConfig:
    r: int = 8
    """LoRA rank (>= 1)."""
    alpha: float = 16
    """LoRA alpha; the adapter output is scaled by alpha / r (as in the LoRA paper and peft)."""
    dropout: float = 0.0
    """Dropout on the adapter input (0 <= dropout < 1)."""
    target_modules: Optional[list[str]] = None
    """Module names to adapt; ``null`` picks per architecture (GPT-2 ``c_attn,c_proj,c_fc``, llama-style
    ``q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj``, T5 ``q,k,v,o,wi,wo``, GPT-NeoX)."""
    across_steps: AcrossSteps = AcrossSteps.merge
    """``merge``: merge into the base after each time step and start a fresh adapter; ``stack``: keep training
    one adapter on the frozen base across steps."""
    save_merged: bool = runtime(False)
    """Also save the merged full weights in each LoRA step's checkpoint. Off: ``steps/<k>/`` holds the
    adapter (``adapter/``) and the tokenizer; loading it rebuilds the merged model from the last full
    checkpoint and the adapters after it (``models/lora_checkpoint.py``), bit for bit."""

    def __post_init__(self):
        self.across_steps = as_choice("method.lora.across_steps", AcrossSteps, self.across_steps)
        check_ranges(
            "method.lora",
            {
                "r": (self.r, AT_LEAST_ONE),
                "alpha": (self.alpha, POSITIVE),
                "dropout": (self.dropout, (lambda v: 0 <= v < 1, "in [0, 1)")),
            },
        )
        if self.target_modules is not None and not list(self.target_modules):
            raise ConfigError("method.lora.target_modules is empty; use null for the architecture's default")


@dataclass
class ReplayConfig:
    ratio: float = 0.25
    """Earlier steps' examples mixed into each step's corpus, as a multiple of its size (0.25 adds 25%)."""
    decay: float = 1.0
    """CKL-style decaying schedule: the ratio at epoch e is ratio * decay**e (1.0 = fixed ratio; 0 < decay <= 1)."""
    source: ReplaySource = ReplaySource.all
    """Where replayed examples come from: ``all`` earlier steps, or ``initial`` (step 0 only, as Mix-review)."""

    def __post_init__(self):
        self.source = as_choice("method.replay.source", ReplaySource, self.source)
        check_ranges(
            "method.replay",
            {"ratio": (self.ratio, NON_NEGATIVE), "decay": (self.decay, (lambda v: 0 < v <= 1, "in (0, 1]"))},
        )


@dataclass
class L2InitConfig:
    coef: float = 1.0
    """Penalty coefficient: the loss gains coef/2 * sum((w - w_prev)^2) over every trainable parameter."""
    anneal_t0: int = 0
    """RecAdam-style annealing: the penalty weight falls from coef to 0 along a sigmoid centred on this
    optimizer step of each time step (0 = constant coef)."""
    anneal_k: float = 0.1
    """Steepness of the annealing sigmoid (RecAdam's k)."""
    anchor_dtype: WeightDtype = WeightDtype.float32
    """Dtype of the stored previous-step weights (and, for ``ewc``, the Fisher): ``float32`` or ``bfloat16``
    (half the memory; the penalty is still computed in the parameters' dtype)."""

    section: ClassVar[str] = "method.l2_init"

    def __post_init__(self):
        self.anchor_dtype = as_choice(f"{self.section}.anchor_dtype", WeightDtype, self.anchor_dtype)
        check_ranges(self.section, {"coef": (self.coef, NON_NEGATIVE), "anneal_t0": (self.anneal_t0, NON_NEGATIVE)})
        if self.anneal_t0 > 0 and not self.anneal_k > 0:
            raise ConfigError(f"{self.section}.anneal_k must be positive when annealing, got {self.anneal_k}")


@dataclass
class EwcConfig(L2InitConfig):
    fisher_batches: int = 8
    """Batches of the previous step's data used to estimate the diagonal Fisher."""
    fisher_batch_size: int = 8
    """Rows per Fisher batch."""

    section: ClassVar[str] = "method.ewc"

    def __post_init__(self):
        super().__post_init__()
        check_ranges(
            self.section,
            {
                "fisher_batches": (self.fisher_batches, AT_LEAST_ONE),
                "fisher_batch_size": (self.fisher_batch_size, AT_LEAST_ONE),
            },
        )


@dataclass
class FreezeConfig:
    embeddings: bool = False
    """Freeze the token and position embeddings (for GPT-2 this also freezes the tied output head)."""
    lower_blocks: int = 0
    """Freeze the lowest N transformer blocks (of encoder and decoder for T5)."""

    def __post_init__(self):
        check_ranges("method.freeze", {"lower_blocks": (self.lower_blocks, NON_NEGATIVE)})


@dataclass
class LwfConfig:
    weight: float = 1.0
    """Weight of the distillation term added to the language-model loss (``>= 0``)."""
    temperature: float = 2.0
    """Softmax temperature of teacher and student in the KL term (``> 0``); the term is scaled by its square."""
    targets: LwfTargets = LwfTargets.kl
    """``kl``: KL(teacher || student) on the softened distributions; ``argmax``: cross-entropy of the student
    on the teacher's most likely token."""
    teacher_dtype: WeightDtype = WeightDtype.float32
    """Dtype of the teacher copy (the previous step's weights): ``float32`` or ``bfloat16`` (half the memory)."""

    def __post_init__(self):
        self.targets = as_choice("method.lwf.targets", LwfTargets, self.targets)
        self.teacher_dtype = as_choice("method.lwf.teacher_dtype", WeightDtype, self.teacher_dtype)
        check_ranges("method.lwf", {"weight": (self.weight, NON_NEGATIVE), "temperature": (self.temperature, POSITIVE)})


@dataclass
class GenerativeConfig:
    """``generative_replay``: the model before step k writes documents that are mixed into step k."""

    samples: int = 64
    """Documents sampled before each step k >= 1 (all of them are mixed into step k)."""
    temperature: float = 1.0
    """Sampling temperature (pure ancestral sampling: no top-k, no top-p), > 0."""
    max_new_tokens: int = 128
    """Tokens sampled per document at most (a document ends at EOS)."""
    prompt: GenerativePrompt = GenerativePrompt.bos
    """What a sample starts from: ``bos`` (the tokenizer's BOS, or EOS where it has none: an unconditional
    sample) or ``corpus`` (the first ``prompt_tokens`` tokens of a seeded random step-0 document or pair)."""
    prompt_tokens: int = 8
    """``prompt=corpus``: tokens of the step-0 text a sample continues (the prompt is part of the document)."""
    batch_size: int = 32
    """Sequences sampled at a time (a part of the seeded draw: another size, other samples)."""
    sampler: GenerativeSampler = GenerativeSampler.previous
    """Which model writes step k's samples: ``previous`` (step k-1's checkpoint, the model step k starts from:
    LAMOL) or ``initial`` (the model before step 0, e.g. the pretrained base: its own general text, as
    Self-Synthesized Rehearsal samples the base model)."""

    def __post_init__(self):
        self.prompt = as_choice("method.generative.prompt", GenerativePrompt, self.prompt)
        self.sampler = as_choice("method.generative.sampler", GenerativeSampler, self.sampler)
        check_ranges(
            "method.generative",
            {
                "samples": (self.samples, AT_LEAST_ONE),
                "temperature": (self.temperature, POSITIVE),
                "max_new_tokens": (self.max_new_tokens, AT_LEAST_ONE),
                "prompt_tokens": (self.prompt_tokens, AT_LEAST_ONE),
                "batch_size": (self.batch_size, AT_LEAST_ONE),
            },
        )


@dataclass
class MethodConfig:
    name: str = label("full")
    """Name of the method, used in run names and reports."""
    strategies: list[str] = field(default_factory=lambda: ["full"])
    """Strategies applied by the one training loop, in order (e.g. ``[lora, replay]``)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA settings (strategy ``lora``)."""
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """Mix-review settings (strategy ``replay``)."""
    l2_init: L2InitConfig = field(default_factory=L2InitConfig)
    """RecAdam-style pull toward the previous step's weights (strategy ``l2_init``)."""
    ewc: EwcConfig = field(default_factory=EwcConfig)
    """Elastic weight consolidation: the pull weighted by the previous step's diagonal Fisher (strategy ``ewc``)."""
    freeze: FreezeConfig = field(default_factory=FreezeConfig)
    """Frozen parameter groups (strategy ``freeze``)."""
    generative: GenerativeConfig = later_steps(default_factory=GenerativeConfig)
    """Generative replay: the previous step's model samples documents mixed into the step (strategy
    ``generative_replay``; ``methods/generative.py``)."""
    # --- LwF, averaging (docs/methods.md, "Recipes") ---
    lwf: LwfConfig = field(default_factory=LwfConfig)
    """Learning without forgetting: distillation toward the previous step's model (strategy ``lwf``)."""
    average: Average = Average.none
    """``none``: ``steps/<k>/`` holds the trained weights; ``uniform``: the mean of the trained weights of steps
    0..k; ``ema``: their exponential moving average (``ema_decay``). Evaluated is ``steps/<k>/``."""
    ema_decay: float = 0.5
    """``average=ema``: ``avg_k = ema_decay * avg_(k-1) + (1 - ema_decay) * raw_k`` (``avg_0 = raw_0``), in [0, 1)."""
    average_continue: AverageContinue = AverageContinue.raw
    """When averaging: step k+1 trains from the raw weights of step k (``raw``) or from the average (``average``)."""
    lr: Optional[float] = later_steps(None)
    """Peak learning rate of the steps after step 0 (``null``: ``trainer.lr``). Step 0 is shared by every method
    (and its step-0 cache key ignores this), so LoRA can train at its own rate without retraining step 0."""
    at_step0: bool = False
    """Apply the strategies at step 0 too. Off (default): step 0 is the same full training for every method
    (a model built from scratch must first learn the world), so a sweep can share its checkpoint."""
    step0_cache: Optional[str] = runtime("auto")
    """Directory of shared step-0 checkpoints keyed by a hash of data, model, seed and step-0 training:
    ``auto`` = ``<hydra.sweep.dir>/.step0_cache`` in a multirun and off otherwise; a path; or ``null`` (off)."""

    def __post_init__(self):
        self.average = as_choice("method.average", Average, self.average)
        self.average_continue = as_choice("method.average_continue", AverageContinue, self.average_continue)
        check_ranges("method", {"ema_decay": (self.ema_decay, (lambda v: 0 <= v < 1, "in [0, 1)"))})
        if self.lr is not None:
            check_ranges("method", {"lr": (self.lr, POSITIVE)})


@dataclass
class WorldConfig:
    seed: int = 0
    """Seed of the generated world; the same seed gives byte-identical data."""
    n_entities: int = 300
    """Organisations alive at step 0."""
    n_steps: int = 3
    """Time steps (snapshots), step 0 included."""
    change_share: float = 0.25
    """Share of changeable facts whose value changes at each later step."""
    new_entities_per_step: int = 40
    """Organisations founded (new facts) at each later step."""
    n_people: int = 60
    """People who can direct an organisation (values are drawn from this pool, as real values recur)."""
    n_cities: int = 60
    """Cities an organisation can be based in."""
    start_year: int = 2018
    """Calendar year of step 0; step k is year start_year + k."""
    dev_share: float = 0.2
    """Share of eval items marked ``dev`` (usable for tuning); the rest are ``private``."""
    dates: DateForm = DateForm.prefix
    """How each snapshot's date is written into its corpus and asked in its probes (``data/dates.py``):
    ``prefix`` (``year: 2019 text: ...``), ``inline`` (``As of 2019, ...``) or ``none`` (undated corpus)."""
    docs_per_entity: int = 3
    """Differently worded documents per organisation per step (knowledge augmentation; the first always
    uses the probe wording, the others distinct wordings of the relation's bank), sentence order shuffled."""

    def __post_init__(self):
        check_ranges(
            "data.world",
            {
                "n_entities": (self.n_entities, POSITIVE),
                "n_steps": (self.n_steps, POSITIVE),
                "change_share": (self.change_share, UNIT),
                "new_entities_per_step": (self.new_entities_per_step, NON_NEGATIVE),
                "n_people": (self.n_people, POSITIVE),
                "n_cities": (self.n_cities, POSITIVE),
                "dev_share": (self.dev_share, UNIT),
                "docs_per_entity": (self.docs_per_entity, AT_LEAST_ONE),
            },
        )
        self.dates = as_choice("data.world.dates", DateForm, self.dates)


DYKNOW_CUTS = ["2010", "2014", "2018", "2022"]
"""Default cut dates of ``data=dyknow`` (docs/data.md, "DyKnow": the counts per step of the fetched release,
``evolve-data fetch-data dyknow``)."""


@dataclass
class DyKnowConfig:
    """The DyKnow timeline (``data.kind=dyknow``; ``evolve_train/data/loaders/dyknow.py``, docs/data.md)."""

    cuts: list[str] = field(default_factory=lambda: list(DYKNOW_CUTS))
    """Cut dates, strictly increasing (``YYYY`` = 1 January, ``YYYY-MM`` = the 1st, ``YYYY-MM-DD``): step k's
    state is every value valid on cut k; the cut as written is the step's name and its date in the texts."""
    train_wordings: list[str] = field(default_factory=lambda: ["contextualized", "generic"])
    """Prompt names whose wordings are trained; a fact's other prompts are held out (its ``extra.variants``:
    flip rate, paraphrase gap). The first of these a fact has is the wording its questions are asked in; a
    fact with none of them trains on its first prompt."""
    dates: DateForm = DateForm.inline
    """How the cut's date is written into the corpus and the questions (``data/dates.py``): ``inline``
    (``As of 2018, the President of Freedonia is``), ``prefix`` (``data.time_prefix_format``) or ``none``
    (undated corpus and questions). ``data.time_prefix=true`` means ``prefix``."""
    passages: bool = False
    """Add the Wikipedia passages (``passages.json``) to the corpus of each step stating the value they match."""
    qa_questions: bool = True
    """Use ``qa_generated.json`` (when present): its question is each item's ``base_question`` and one more
    held-out variant."""
    categories: Optional[list[str]] = None
    """Categories to load (``null`` = all of the file)."""
    dev_share: float = 0.2
    """Share of facts whose items are ``dev`` (all items of a fact share its split); the rest are private."""
    split_seed: int = 0
    """Seed of the dev/private assignment of facts."""
    stable_probes: int = 20
    """Unchanged facts asked as of every cut in the ``paired_<k>`` sets (old-knowledge retention)."""

    def __post_init__(self):
        self.dates = as_choice("data.dyknow.dates", DateForm, self.dates)
        check_ranges(
            "data.dyknow", {"dev_share": (self.dev_share, UNIT), "stable_probes": (self.stable_probes, NON_NEGATIVE)}
        )
        if not list(self.cuts):
            raise ConfigError("data.dyknow.cuts is empty: give at least one cut date")
        if not list(self.train_wordings):
            raise ConfigError("data.dyknow.train_wordings is empty: name at least one prompt to train on")


@dataclass
class DataConfig:
    kind: DataKind = DataKind.synthetic_world
    """Data source: ``synthetic_world``, ``evolvingqa``, ``temporal_qa`` or ``dyknow``."""
    objective: Objective = Objective.auto
    """``masked_entity``: loss on the masked entity of each pair; ``clm``: loss on all text of the documents;
    ``auto``: per step, from its data (pairs: ``masked_entity``, documents: ``clm``; ``data/objective.py``)."""
    world: WorldConfig = field(default_factory=WorldConfig)
    """Settings of the embedded world (``kind=synthetic_world``)."""
    dyknow: DyKnowConfig = field(default_factory=DyKnowConfig)
    """Settings of the DyKnow timeline (``kind=dyknow``)."""
    root: Optional[str] = None
    """Directory of a data release (``kind=evolvingqa`` / ``temporal_qa``; ``dyknow``: the directory holding
    ``grc_generated.json``)."""
    steps: Optional[list[str]] = None
    """Order of the release's time steps by name; ``null`` sorts the names found in the files."""
    fields: dict[str, str] = field(default_factory=dict)
    """Field mapping for other layouts: ``{contract_name: source_name}``, e.g. ``question: edited_question``."""
    cache_dir: Optional[str] = runtime(None)
    """Where materialised datasets are cached: training files validated into Arrow (``<dir>/corpora/``) and
    each time step's tokenized rows (``<dir>/tokens/``), written once (atomically) and memory-mapped by every
    later run and rank (docs/data.md, "The tokenized cache"). ``null``: ``<sweep dir>/.data_cache`` in a
    Hydra multirun, else no cache (rows tokenized in memory each run); ``off``: no cache. Set it for corpora
    larger than memory, and to share it between sweeps."""
    prompt_template: str = "{question}"
    """How an eval item becomes a prompt (``str.format`` over the item's fields), e.g.
    ``"Question: {question}\\nAnswer:"``; every item is checked against it before training starts."""
    train_files: dict[str, list[str]] = field(default_factory=dict)
    """``kind=temporal_qa``: training files per step name (relative to ``root``), each entry a file, a folder
    (its ``.txt``/``.jsonl``/``.jsonl.gz``/``.jsonl.zst``/``.csv``/``.parquet`` files and ``save_to_disk``
    folders, sorted, not recursive) or a glob (``**`` recurses): masked-entity pairs (with ``input``,
    ``output``) or documents (with ``text``, see ``text_field``; or ``.txt`` files)."""
    txt_documents: TxtDocuments = TxtDocuments.file
    """How a ``.txt`` training file becomes documents: ``file`` (the whole file is one document) or
    ``paragraph`` (each blank-line-separated block is one)."""
    text_field: str = "text"
    """The column (JSONL key, CSV/Parquet/``save_to_disk`` column) holding a training document's text, in
    ``data.train_files`` and ``data.mix_files`` (``content`` for a corpus that calls it so)."""
    eval_files: list[str] = field(default_factory=list)
    """``kind=temporal_qa``: QA item files (JSONL/CSV of the item contract, or EvolveBench-style event
    files, recognised by their ``knowledge_event``/``questions`` fields), relative to ``root``."""
    default_split: Split = Split.private
    """Split (``dev``/``private``) of loaded items that do not name one."""
    time_prefix: bool = False
    """Time-aware training for every loader: each training example of step k starts with step k's date (the
    world's year, else the step name) in ``time_prefix_format``, and each timestamped eval prompt with its
    own timestamp (so the ablation's true/shuffled/none arms apply). The world writes it as
    ``data.world.dates=prefix`` (``data/dates.py``)."""
    time_prefix_format: str = "year: {date} text: "
    """The date prefix (TempLAMA's form); ``{date}`` is the slot. Also the world's ``prefix`` form."""
    keep_history: bool = later_steps(False)
    """Every earlier step's corpus is kept in each step's corpus (the positive control of
    ``experiment=time_aware``: each dated snapshot so far, not only the step's diff)."""
    # --- held-out time slices (docs/metrics.md#9-time-sliced-perplexity, data/slices.py) ---
    heldout_share: float = 0.05
    """Share of each step's training examples (masked-entity pairs, or ``clm`` documents) held out as the
    step's slice: never trained on, scored by the ``slices`` evaluator (P[i][j], docs/metrics.md#9-time-sliced-perplexity); 0 = none."""
    heldout_seed: int = 0
    """Seed of the held-out selection (with the step index)."""
    # --- baselines of the time order and of general data (docs/methods.md, "General data, generative replay") ---
    order: DataOrder = DataOrder.time
    """``time``: each step trains its own snapshot; ``shuffled``: the union of every step's training pairs and
    documents dealt back into the same steps with the same per-step counts, in a seeded random order
    (``order_seed``): time order removed, all else equal (``data/transforms.py``; eval sets unchanged)."""
    order_seed: int = 0
    """Seed of ``order=shuffled``'s deal."""
    mix_files: list[str] = later_steps(default_factory=list)
    """General documents mixed into every step after step 0 (replay of pretraining-like data): entries as in
    ``train_files`` (files, folders, globs; JSONL/CSV with ``text``, or ``.txt``), relative to ``root``; never a
    time step, never evaluated as one. Needs ``mix_ratio`` > 0 (``methods/mixing.py``)."""
    mix_ratio: float = later_steps(0.0)
    """Share of each later step's training tokens that are ``mix_files`` tokens: ``round(mix_ratio / (1 -
    mix_ratio) * step tokens)`` mix tokens are appended to the step's rows (seeded by ``seed`` and the step),
    in [0, 1)."""

    def __post_init__(self):
        check_ranges("data", {"heldout_share": (self.heldout_share, (lambda v: 0.0 <= v < 1.0, "in [0, 1)"))})
        self.kind = as_choice("data.kind", DataKind, self.kind)
        self.objective = as_choice("data.objective", Objective, self.objective)
        self.txt_documents = as_choice("data.txt_documents", TxtDocuments, self.txt_documents)
        self.default_split = as_choice("data.default_split", Split, self.default_split)
        self.order = as_choice("data.order", DataOrder, self.order)
        check_ranges("data", {"mix_ratio": (self.mix_ratio, (lambda v: 0.0 <= v < 1.0, "in [0, 1)"))})
        if bool(self.mix_files) != (self.mix_ratio > 0):
            raise ConfigError(
                "data.mix_files and data.mix_ratio go together: give the general documents and their token share "
                f"(got {len(self.mix_files)} mix file(s) and mix_ratio={self.mix_ratio})"
            )


@dataclass
class TrainerConfig:
    epochs_step0: float = 40
    """Passes over the step-0 corpus (the initial pretraining)."""
    epochs: float = later_steps(30)
    """Passes over each later step's corpus."""
    max_steps_step0: int = 0
    """A budget of optimizer steps for step 0 instead of ``epochs_step0`` (0 = off: the epochs decide)."""
    max_steps: int = later_steps(0)
    """A budget of optimizer steps for each later step instead of ``epochs`` (0 = off)."""
    tokens_per_step0: int = 0
    """A budget of training tokens (real, not padding; all processes) for step 0 instead of ``epochs_step0``: the
    passes are ``tokens_per_step0 / tokens of the step's rows``, fractional (0 = off)."""
    tokens_per_step: int = later_steps(0)
    """A budget of training tokens for each later step instead of ``epochs`` (0 = off). With both budgets set,
    ``max_steps`` caps the steps the token budget plans."""
    batch_size: int = 16
    """Rows per optimizer micro-batch (per process), unless ``tokens_per_batch`` is set."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    seq_len: int = 128
    """Longest training row (tokens): masked-entity rows are cut to it, ``clm`` documents packed into rows of it."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 30
    """Linear warmup at the start of a time step (which ones: ``rewarm``), then ``schedule``'s decay."""
    min_lr_ratio: float = 0.1
    """Final learning rate of each time step, as a share of ``lr``."""
    grad_clip: float = 1.0
    """Gradient-norm clipping (0 = off)."""
    mixed_precision: Precision = Precision.no
    """Passed to accelerate: ``no``, ``bf16``, ``fp16``, or ``auto``: bf16 where the device computes it natively (a
    CUDA device with bf16; a CPU with AVX-512 BF16 or AMX under torch's AVX-512 kernels), ``no`` (fp32) elsewhere,
    resolved when the run starts and said in its log (``training/distributed.py: resolve_precision``). An explicit
    ``bf16`` on a CPU without native bf16 warns: torch emulates it there, many times slower than fp32."""
    num_threads: int = runtime(0)
    """torch CPU threads (0 = torch's default)."""
    log_every: int = runtime(10)
    """Optimizer steps between training-loss log rows (the only host syncs in the loop)."""
    progress_every_s: float = runtime(30.0)
    """Without a terminal (a SLURM log, ``> file``), a progress line every this many seconds: time step k/K,
    optimizer step n/total, loss, tokens/s and ETA (0 = off). With a terminal the tqdm bar shows the same."""
    compile: bool = False
    """``torch.compile`` (inductor) of each transformer block (the model's ``_no_split_modules`` class) in place,
    after ``model.gradient_checkpointing`` and before FSDP2 shards the blocks, as torchtitan orders them; the whole
    model where it names no blocks. Compiled at the first batches (once more when the batch shape first changes)
    and reused by every later time step of the process. See docs/training.md."""
    save_every_n_steps: int = runtime(0)
    """Save a resumable training state (``train_state/step<k>-opt<n>/``) every N optimizer steps of a time step
    and at its last one, so ``resume=auto`` continues mid-step (0 = resume at step boundaries only; Ctrl-C
    still saves one). See docs/reliability.md."""
    save_every_minutes: float = runtime(0.0)
    """Also save a resumable training state once this many minutes of a time step's training passed since its
    start or its last state (0 = off), beside ``save_every_n_steps``: what a job that may be preempted at any
    time loses at most. The clock is read where the processes agree anyway (every ``log_every`` optimizer
    steps with several processes, every step with one), so it adds no collective. See docs/reliability.md."""
    keep_last_states: int = runtime(2)
    """Mid-step training states kept for the step in progress (>= 1); a finished step's are deleted."""
    async_save: bool = runtime(True)
    """Under FSDP2, write the mid-step states in the background (``torch.distributed.checkpoint.async_save``: a
    CPU copy of every process's shards, written while training goes on); a state counts once its write ended and
    it was renamed complete. The next save, the end of the time step and a signal's stop wait for it. Other
    setups save at once. See docs/reliability.md."""
    dist_timeout_s: int = runtime(1800)
    """Timeout of the process group's collectives, in seconds (multi-process runs: accelerate's
    ``InitProcessGroupKwargs``). A rank waits this long for the others, e.g. while the main process saves a
    checkpoint; torch's default is 600 s."""
    train_timeout_s: int = runtime(300)
    """The collectives' timeout from the first optimizer step of a time step until its training ends (0 = keep
    ``dist_timeout_s``): a rank that died or hangs inside training ends the job in this time instead of the
    long one (docs/reliability.md)."""
    nonfinite: NonFinite = NonFinite.stop
    """On a non-finite loss or gradient: ``stop`` (error naming step, batch and last good checkpoint) or
    ``skip`` (drop that update, count it in ``skipped_batches``)."""
    fsdp_reduce_dtype: str = "float32"
    """Under FSDP2, the dtype gradients are reduce-scattered in: ``float32`` (default; as torchtitan and
    OLMo-core), ``bfloat16`` or ``param`` (the parameters' dtype, accelerate's default). docs/distributed.md."""
    fsdp_sync_each_batch: bool = runtime(True)
    """Under FSDP2 with ``grad_accum > 1``, reduce-scatter gradients after every micro-batch (accelerate's
    ``sync_each_batch``), so each process keeps only its shard of the gradients between micro-batches; ``false``
    keeps the unsharded gradients until the last micro-batch (less traffic, a full model's gradients more in
    memory). docs/distributed.md."""
    fsdp_mesh: str = runtime("auto")
    """FSDP2's device mesh: ``fsdp`` (every process one shard of the model), ``hsdp`` (shards within a group of
    processes, replicas across groups: a 2-D ``(replicate, shard)`` mesh, gradients reduce-scattered within a
    node and all-reduced across nodes) or ``auto`` (``hsdp`` with one replica per node when the job spans
    nodes, ``WORLD_SIZE > LOCAL_WORLD_SIZE``, or ``trainer.fsdp_replicate`` > 1; else ``fsdp``).
    docs/distributed.md."""
    fsdp_replicate: int = runtime(0)
    """Replicas under ``trainer.fsdp_mesh=hsdp`` (0 = one per node: ``WORLD_SIZE / LOCAL_WORLD_SIZE``); the
    processes divide into this many groups of equal size, each holding the whole model in shards."""
    accelerate_config: Optional[str] = runtime(None)
    """An accelerate config file (``accelerate_configs/fsdp.yaml``: FSDP2; ``ddp.yaml``) for each point of a sweep
    whose points are submitit jobs of several tasks (``hydra/launcher=submitit_slurm_multi`` or
    ``submitit_local_multi``): every task exports what ``accelerate launch --config_file`` sets from it
    (``training/submitit_env.py``), so the point runs as that launch would, with the job's processes and
    ``mixed_precision``. A relative path is read from the working directory. ``null``: plain data parallel.
    Refused elsewhere (a single run takes ``accelerate launch --config_file``). docs/distributed.md."""
    memory_preflight: str = runtime("check")
    """Before the weights load, the estimated memory of a training step per device (``training/preflight.py``):
    ``check`` prints it and stops a run that cannot fit, naming settings that would; ``warn`` prints and warns
    only; ``off`` skips it."""
    tokens_per_batch: int = 0
    """Token-budget micro-batches: as many length-grouped rows as fit this many *padded* tokens (rows x the
    longest row's length) per process, instead of ``batch_size`` rows (0 = off: ``batch_size`` rows). At
    least ``seq_len``. See training/packing.py and docs/training.md."""
    attention_reset: bool = True
    """``clm`` (packed documents): each document gets its own position ids and attends only to itself
    (block-diagonal attention; needs ``model.attn_implementation`` eager, sdpa or flex_attention); false:
    plain packing, a document attends to the earlier ones of its row."""
    packed_attention: str = "auto"
    """How packed documents are kept apart under ``attention_reset`` (``models/attention.py``): ``mask`` (rows
    as they are, a block-diagonal mask built from the position ids: ``eager``, ``sdpa``, ``flex_attention``),
    ``position_ids`` (padding-free: the rows laid end to end, position ids and document bounds only, no mask:
    ``flash_attention_2/3/4`` or ``sdpa_varlen``) or ``auto`` (``position_ids`` where the attention
    implementation is a varlen one, else ``mask``)."""
    peak_flops: float = runtime(0.0)
    """Peak FLOP/s of one device for the ``mfu`` of the training log (0 = look it up by GPU name, bf16/fp16)."""
    # --- schedules across time steps and optimizer state (training/schedule.py, docs/training.md) ---
    schedule: str = Schedule.linear
    """Shape of the LR within each time step: ``linear`` (warmup, linear decay), ``cosine``, ``constant``,
    ``wsd`` (warmup, stable, decay), ``rsqrt`` (with cooldown) or ``infinite`` (warmup once, constant between
    steps, cooldown within each), or a schedule registered with ``training.schedule.register_schedule``; the LR
    of every update is a pure function of settings, step and update."""
    step0_schedule: Optional[str] = None
    """Shape of the LR of time step 0 (and of the oracle's steps, which train like step 0): ``null`` = ``schedule``;
    a schedule name gives every run of a sweep over ``schedule`` the same step 0, trained once and shared through
    the step-0 cache (TiC-LM and Ibrahim et al. compare schedules on the continual steps from one initial model)."""
    rewarm: Rewarm = later_steps(Rewarm.all)
    """Which time steps after step 0 warm up: ``all``, ``first`` (step 1 only) or ``none`` (step 0 always does;
    ``schedule=infinite`` warms up at step 0 only: ``all`` and ``none`` give it the same curve, ``first`` is
    refused)."""
    peak_schedule: PeakSchedule = later_steps(PeakSchedule.constant)
    """Peak LR per time step: ``constant`` (``lr``) or ``cosine_over_steps`` (TiC-LM's AR meta-schedule: a global
    cosine over the run's time steps, from ``lr`` at step 0 toward ``min_lr_ratio * lr``)."""
    cooldown_fraction: float = 0.2
    """``wsd``, ``rsqrt``, ``infinite``: share of each time step's optimizer steps spent in the final linear
    decay to ``min_lr_ratio`` (in [0, 1]; 0 = no cooldown)."""
    constant_lr_ratio: float = 1.0
    """``infinite``: the constant LR between steps as a share of the peak (step 0 decays to it by a cosine
    after its warmup); in (0, 1]."""
    optimizer_state: OptimizerState = later_steps(OptimizerState.reset)
    """``reset``: fresh AdamW moments at every time step; ``keep``: carry the moments and step counts of step k-1
    into step k (kept in ``train_state/carry/<k-1>/`` between steps, so a resume keeps them)."""

    def __post_init__(self):
        self.mixed_precision = as_choice("trainer.mixed_precision", Precision, self.mixed_precision)
        self.nonfinite = as_choice("trainer.nonfinite", NonFinite, self.nonfinite)
        self.schedule = schedule_choice("trainer.schedule", self.schedule)
        if self.step0_schedule is not None:
            self.step0_schedule = schedule_choice("trainer.step0_schedule", self.step0_schedule)
        self.rewarm = as_choice("trainer.rewarm", Rewarm, self.rewarm)
        self.peak_schedule = as_choice("trainer.peak_schedule", PeakSchedule, self.peak_schedule)
        self.optimizer_state = as_choice("trainer.optimizer_state", OptimizerState, self.optimizer_state)
        if self.schedule == Schedule.infinite and self.rewarm == Rewarm.first:
            raise ConfigError(
                "trainer.rewarm=first with trainer.schedule=infinite: that schedule warms up at step 0 only, so "
                "step 1 would not warm up as rewarm=first says. Drop trainer.rewarm (all and none give infinite "
                "the same curve), or choose a schedule that re-warms (linear, cosine, constant, wsd, rsqrt)"
            )
        check_ranges(
            "trainer",
            {
                "cooldown_fraction": (self.cooldown_fraction, UNIT),
                "constant_lr_ratio": (self.constant_lr_ratio, (lambda v: 0 < v <= 1, "in (0, 1]")),
            },
        )
        check_ranges(
            "trainer",
            {
                "epochs_step0": (self.epochs_step0, POSITIVE),
                "epochs": (self.epochs, POSITIVE),
                "max_steps_step0": (self.max_steps_step0, NON_NEGATIVE),
                "max_steps": (self.max_steps, NON_NEGATIVE),
                "tokens_per_step0": (self.tokens_per_step0, NON_NEGATIVE),
                "tokens_per_step": (self.tokens_per_step, NON_NEGATIVE),
                "progress_every_s": (self.progress_every_s, NON_NEGATIVE),
                "batch_size": (self.batch_size, POSITIVE),
                "grad_accum": (self.grad_accum, POSITIVE),
                "seq_len": (self.seq_len, POSITIVE),
                "lr": (self.lr, POSITIVE),
                "weight_decay": (self.weight_decay, NON_NEGATIVE),
                "warmup_steps": (self.warmup_steps, NON_NEGATIVE),
                "min_lr_ratio": (self.min_lr_ratio, UNIT),
                "grad_clip": (self.grad_clip, NON_NEGATIVE),
                "num_threads": (self.num_threads, NON_NEGATIVE),
                "log_every": (self.log_every, AT_LEAST_ONE),
                "save_every_n_steps": (self.save_every_n_steps, NON_NEGATIVE),
                "save_every_minutes": (self.save_every_minutes, NON_NEGATIVE),
                "keep_last_states": (self.keep_last_states, AT_LEAST_ONE),
                "tokens_per_batch": (self.tokens_per_batch, NON_NEGATIVE),
                "peak_flops": (self.peak_flops, NON_NEGATIVE),
                "dist_timeout_s": (self.dist_timeout_s, AT_LEAST_ONE),
                "train_timeout_s": (self.train_timeout_s, NON_NEGATIVE),
            },
        )
        if 0 < self.tokens_per_batch < self.seq_len:
            raise ConfigError(
                f"trainer.tokens_per_batch: {self.tokens_per_batch} is below trainer.seq_len "
                f"({self.seq_len}); a row of seq_len tokens must fit a micro-batch (0 = off)"
            )


@dataclass
class QAAdaptationConfig:
    enabled: bool = False
    """Fine-tune a *copy* of every checkpoint on a QA train set before evaluating it (EvolvingQA protocol);
    the copy is evaluated and dropped, never fed back into the chain of time steps."""
    train_file: Optional[str] = None
    """QA train set (CSV/JSONL with ``question`` and ``answer``/``answers``; relative paths are under
    ``data.root``); ``null`` uses the release's ``unchanged_train*.csv`` for ``data=evolvingqa``."""
    fields: dict[str, str] = field(default_factory=dict)
    """Field mapping of the train file, ``{contract_name: source_name}`` (as ``data.fields``)."""
    epochs: float = 1.0
    """Passes over the QA train set (ignored when ``steps`` > 0)."""
    steps: int = 0
    """Optimizer steps of adaptation (0 = use ``epochs``)."""
    lr: Optional[float] = None
    """Learning rate of adaptation; ``null`` uses ``trainer.lr``."""
    batch_size: Optional[int] = None
    """Rows per batch; ``null`` uses ``trainer.batch_size``."""
    max_items: int = 0
    """Use at most this many QA train items (a fixed seeded sample; 0 = all)."""

    def __post_init__(self):
        check_ranges(
            "eval.qa_adaptation",
            {
                "epochs": (self.epochs, POSITIVE),
                "steps": (self.steps, NON_NEGATIVE),
                "max_items": (self.max_items, NON_NEGATIVE),
            },
        )


@dataclass
class ParaphraseGapConfig:
    variants: int = 3
    """Label-preserving perturbed variants per question (docs/metrics.md#8-statistics-and-hygiene; fewer when an item has fewer)."""
    rewrites: list[dict[str, str]] = field(default_factory=list)
    """Rewrites of loaded items without ``extra.variants``, each keeping the gold: ``{pattern, replacement}``
    (``re.sub`` on the question; not applicable when it does not match) or ``{template}`` (``str.format`` over
    the item's fields, e.g. ``"{question} Answer in a few words."``); an optional ``name``."""
    spotcheck: int = 20
    """Original/perturbed pairs per checkpoint written to ``paraphrase_spotcheck.jsonl`` (seeded; 0 = none)."""
    max_items_per_set: int = 0
    """Items per split set asked with variants by ``paraphrase_gap``/``flip_rate`` (seeded sample; 0 = all)."""

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Range checks; the hygiene preflight runs them again on a config changed after it was built."""
        check_ranges(
            "eval.paraphrase_gap",
            {
                "variants": (self.variants, AT_LEAST_ONE),
                "spotcheck": (self.spotcheck, NON_NEGATIVE),
                "max_items_per_set": (self.max_items_per_set, NON_NEGATIVE),
            },
        )


@dataclass
class FlipRateConfig:
    templates: int = 4
    """K equivalent templates per question: the original plus up to K-1 variants (held-out ones included)."""
    samples: int = 1
    """n repeats per template: 1 = greedy decoding; n > 1 samples n answers and takes the majority."""
    temperature: float = 1.0
    """Sampling temperature when ``samples`` > 1."""
    seed: int = 0
    """Seed of sampled decoding (plus the checkpoint)."""

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Range checks; the hygiene preflight runs them again on a config changed after it was built."""
        check_ranges(
            "eval.flip_rate",
            {
                "templates": (self.templates, (lambda v: v >= 2, ">= 2 (the original and a variant)")),
                "samples": (self.samples, (lambda v: v >= 1, ">= 1 (1 = greedy)")),
            },
        )
        if self.samples > 1 and not self.temperature > 0:
            raise ConfigError(f"eval.flip_rate.temperature must be > 0 when sampling, got {self.temperature}")


@dataclass
class LmEvalConfig:
    """``lm_eval``: lm-evaluation-harness tasks scored on every checkpoint (docs/evaluation.md "lm-eval tasks")."""

    tasks: list[str] = field(default_factory=list)
    """Task or group names, as ``lm_eval --tasks`` takes them (built-in ones, or those under ``include_path``)."""
    num_fewshot: Optional[int] = None
    """Few-shot examples per prompt (``null``: each task's own default, as ``lm_eval`` without ``--num_fewshot``)."""
    limit: Optional[float] = None
    """Documents per task: a count (>= 1) or a share (< 1), as ``lm_eval --limit`` (``null``: all)."""
    batch_size: int = 16
    """Requests per forward pass (lm-eval's ``--batch_size``)."""
    include_path: list[str] = field(default_factory=list)
    """Folders of local task YAML files (lm-eval's ``--include_path``); relative paths from the working directory."""

    def __post_init__(self):
        check_ranges(
            "eval.lm_eval",
            {
                "batch_size": (self.batch_size, POSITIVE),
                "num_fewshot": (0 if self.num_fewshot is None else self.num_fewshot, NON_NEGATIVE),
                "limit": (1 if self.limit is None else self.limit, (lambda v: v > 0, "> 0")),
            },
        )


@dataclass
class RetrievalConfig:
    """``retrieval``: the open-book evaluator (docs/metrics.md#10-open-book-evaluation; docs/evaluation.md "Retrieval (open-book)")."""

    k: int = 3
    """Passages retrieved (BM25, ``bm25s``) per question and put before it."""
    passages: PassageSource = PassageSource.documents
    """What the store of step i holds: ``documents`` (step i's training documents; masked-entity pairs with the
    mask filled in where a step has no documents), ``sentences`` (the same text split into sentences) or
    ``files`` (``passage_files``)."""
    passage_files: list[str] = field(default_factory=list)
    """``passages=files``: JSONL passage files, one per time step in step order, or one file whose records name
    their ``step`` (index or step name). A record: ``text`` (required), optional ``step``, ``date`` (default:
    the step's name) and ``id``."""
    scope: RetrievalScope = RetrievalScope.all
    """At checkpoint i: ``all`` = the passages of steps 0..i, each with its step's date; ``latest`` = step i's
    only (StreamingQA's two settings); ``newest_version`` = each document's newest version up to step i (by
    ``doc_id``, else title: a time-aware index that never holds two versions of one document)."""
    template: str = "{passages}\n{question}"
    """The open-book prompt: ``{passages}`` (the retrieved passages, best first) and ``{question}`` (the
    closed-book prompt of the item, ``data.prompt_template`` applied)."""
    passage_template: str = "[{date}] {text}"
    """One retrieved passage in the prompt: ``{text}``, ``{date}`` (its step's date), ``{step}``."""
    separator: str = "\n"
    """Between two passages in ``{passages}``."""
    initial_every_store: bool = True
    """With ``eval.eval_initial``: the model before training (checkpoint ``initial``) is asked open-book at
    every step i's store, on the sets of checkpoint i (the retriever-only arm: rows with ``store`` = i)."""
    paired: bool = True
    """Also the paired temporal metrics (§4) open-book, on the ``paired`` evaluator's sets."""

    def __post_init__(self):
        self.passages = as_choice("eval.retrieval.passages", PassageSource, self.passages)
        self.scope = as_choice("eval.retrieval.scope", RetrievalScope, self.scope)
        check_ranges("eval.retrieval", {"k": (self.k, AT_LEAST_ONE)})
        if (self.passages == PassageSource.files) != bool(self.passage_files):
            raise ConfigError(
                "eval.retrieval.passage_files: give the files with eval.retrieval.passages=files "
                f"(got passages={self.passages} and {len(self.passage_files)} file(s))"
            )
        for key, template, slots in (
            ("template", self.template, ("passages", "question")),
            ("passage_template", self.passage_template, ("text",)),
        ):
            try:
                template.format(passages="", question="", text="", date="", step="")
            except (KeyError, IndexError, ValueError) as err:
                raise ConfigError(
                    f"eval.retrieval.{key}: {template!r} is not a format string over "
                    f"{{passages}}, {{question}} / {{text}}, {{date}}, {{step}} ({err})"
                ) from None
            missing = [slot for slot in slots if "{" + slot + "}" not in template]
            if missing:
                raise ConfigError(f"eval.retrieval.{key}: {template!r} must contain {{{missing[0]}}}")


@dataclass
class GateConfig:
    flip_rate_max: Optional[float] = 0.10
    """Release gate: flip_rate (all splits, final checkpoint) must be <= this (null = no check)."""
    paraphrase_gap_max: Optional[float] = 0.03
    """Release gate: paraphrase_gap (all splits, final checkpoint) must be <= this (null = no check; formerly
    ``contamination_gap_max``)."""
    ci_low_min: Optional[float] = 0.0
    """Release gate: paired-bootstrap CI low of EM vs the baseline run must be > this (null = no check)."""
    slice_floors: dict[str, float] = field(default_factory=dict)
    """Release gate: EM floors per slice at the final checkpoint, ``{slice: floor}``; a slice is a set name
    (``new_2``), a split kind (``new`` = all New_k, item-weighted) or ``all`` (Unchanged+New+Updated)."""
    bootstrap: int = 2000
    """Bootstrap resamples of the baseline comparison."""


@dataclass
class EvalConfig:
    evaluators: list[str] = field(default_factory=lambda: ["splits"])
    """Evaluators run on every checkpoint, by registered name."""
    batch_size: int = runtime(64, hashed=True)
    """Prompts per generation batch."""
    precision: EvalPrecision = EvalPrecision.fp32
    """The precision every checkpoint is evaluated in, chosen here rather than inherited from training: ``fp32``
    (the default: no autocast, so the same checkpoint scores the same on any machine and as lm-evaluation-harness
    scores it; weights stored in bfloat16, ``model.dtype``, stay bfloat16), ``bf16`` / ``fp16`` (autocast to that
    dtype), ``bf16_copy`` (a bfloat16 copy of the weights evaluated without autocast; on a GPU the fp32 weights
    wait in host memory meanwhile, so the GPU holds 2 bytes per parameter during evaluation instead of 4 plus
    autocast's bf16 copies) or ``train`` (the autocast of ``trainer.mixed_precision`` as this machine resolved
    it). Every metric row records what was used (``eval_precision``)."""
    greedy_decoder: GreedyDecoder = GreedyDecoder.pruned
    """``pruned``: the evaluator's greedy loop, which drops each answer's row from the batch once it ends
    (decoder-only models; plain argmax, no ``generation_config`` processors); ``generate``: transformers'
    ``generate`` (what seq2seq models always use)."""
    max_new_tokens: int = 12
    """Longest generated answer."""
    stop_strings: list[str] = field(default_factory=lambda: ["\n"])
    """Generation is cut at the first of these (and at the tokenizer's EOS)."""
    stop_patterns: list[str] = field(default_factory=list)
    """Regular expressions (Python ``re``) the answer is also cut at, at the start of their first match, after
    the stop strings: a sentence end that is not an initial, ``(?<![\\s.][A-Z])\\.\\s`` (DyKnow: "A. P. J.
    Abdul Kalam. He ..." -> "A. P. J. Abdul Kalam"), where a literal ``". "`` would cut at "A"."""
    forward_transfer: bool = False
    """Also evaluate each checkpoint on the next step's sets (needed for FWT)."""
    eval_initial: Optional[bool] = None
    """Evaluate the model before any training as checkpoint ``initial`` (A_init for FWT; what a pretrained
    model knew). ``null`` (default): on for a pretrained model (``model.name_or_path`` set), off for one
    built from config (it knows nothing yet)."""
    max_items_per_set: int = 0
    """Cap on items per eval set (0 = all); a fixed seeded sample keeps it comparable across steps."""
    save_predictions: bool = True
    """Write per-item predictions under ``predictions/step_<k>/``."""
    time_slices: dict[str, list[Optional[str]]] = field(default_factory=dict)
    """Slices of ``paired``'s time_accuracy: ``{name: [start, end]}``, half-open, timestamps or null for
    unbounded (e.g. ``{early: [null, "2019"], late: ["2019", null]}``); empty = one slice per year."""
    ablation_k: int = 3
    """``ablation``: other timestamps each question is re-asked with for timestamp_invariance (fewer when
    the data has fewer)."""
    ablation_seed: int = 0
    """``ablation``: seed of the shuffled / replacement timestamp draws."""
    overconfidence_tau: float = 0.8
    """``calibration``: confidence at or above which a wrong answer is an overconfident error."""
    position_items: int = 64
    """``calibration``: questions (seeded sample) re-asked with lettered options for position_consistency."""
    position_rotations: int = 0
    """``calibration``: cyclic rotations of the option order per question (0 = one per option)."""
    grad_norms: bool = runtime(False, hashed=True)
    """Removed: list ``grad_norms`` in ``eval.evaluators`` to run that evaluator (``eval=full`` does). ``true`` is
    refused with a ConfigError saying so; ``false``, the old default, is accepted and does nothing."""
    grad_norm_items: int = 64
    """``grad_norms``: items per split set (seeded sample)."""
    heldout_text: list[str] = field(default_factory=lambda: ["general"])
    """``heldout``: plain-text files scored for perplexity per checkpoint (general-knowledge forgetting);
    ``general`` = the general text shipped with the package (not about the world's organisations)."""
    heldout_window: int = 128
    """``heldout``: tokens per scored window (at most the model's context length)."""
    # --- time slices, regret, within-step evaluation (docs/metrics.md#9-time-sliced-perplexity, docs/metrics.md#11-compute; docs/evaluation.md) ---
    slice_max_examples: int = 1000
    """``slices``: examples scored per held-out slice (a fixed seeded sample; 0 = all)."""
    oracle_run: Optional[str] = runtime(None, hashed=True)
    """A finished oracle run dir (the same model retrained from the initial weights on steps 0..i for each
    checkpoint i): ``summary.json`` then gets ``regret_*`` = aggregate(run) − aggregate(oracle) (docs/metrics.md#9-time-sliced-perplexity)."""
    within_step_every: int = 0
    """Evaluate a fixed probe of every split set each N optimizer steps during training (0 = off): the
    stability gap within a step (one row per probe in ``train_log.jsonl``, ``group: within_step``)."""
    within_step_items: int = 64
    """Items per split set of the within-step probe (a fixed seeded sample)."""
    qa_adaptation: QAAdaptationConfig = field(default_factory=QAAdaptationConfig)
    """QA adaptation of each checkpoint before evaluation (off by default)."""
    paraphrase_gap: ParaphraseGapConfig = field(default_factory=ParaphraseGapConfig)
    """``paraphrase_gap``: perturbed variants and the spot-check sample (docs/hygiene.md; formerly
    ``eval.contamination``)."""
    flip_rate: FlipRateConfig = field(default_factory=FlipRateConfig)
    """``flip_rate``: K equivalent templates and n repeats (docs/hygiene.md)."""
    gate: GateConfig = runtime(default_factory=GateConfig, hashed=True)
    """Release-gate thresholds (docs/metrics.md#8-statistics-and-hygiene defaults), read by ``evolve-gate`` (docs/hygiene.md)."""
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    """``retrieval``: the open-book evaluator over the snapshots seen so far (docs/metrics.md#10-open-book-evaluation)."""
    lm_eval: LmEvalConfig = field(default_factory=LmEvalConfig)
    """``lm_eval``: lm-evaluation-harness tasks per checkpoint (the ``lmeval`` extra)."""
    # --- pretrained models ---
    few_shot: int = 0
    """Solved dev items (``split: dev``, drawn once, seeded) shown before every prompt, for question-style
    sets (``data/few_shot.py``); a private item is never a demonstration (0 = zero-shot)."""

    def __post_init__(self):
        if self.grad_norms:
            raise ConfigError(
                "eval.grad_norms is no longer a switch: add grad_norms to eval.evaluators instead (e.g. "
                "eval.evaluators=[splits,grad_norms]; eval=full lists it) and drop eval.grad_norms=true"
            )
        self.evaluators = current_evaluators(self.evaluators)  # a former name (contamination) as it is now
        self.greedy_decoder = as_choice("eval.greedy_decoder", GreedyDecoder, self.greedy_decoder)
        self.precision = as_choice("eval.precision", EvalPrecision, self.precision)
        for index, pattern in enumerate(self.stop_patterns):
            try:
                re.compile(pattern)
            except re.error as error:
                raise ConfigError(f"eval.stop_patterns[{index}]: {pattern!r} is not a regular expression ({error})")
        check_ranges(
            "eval",
            {
                "batch_size": (self.batch_size, POSITIVE),
                "max_new_tokens": (self.max_new_tokens, POSITIVE),
                "max_items_per_set": (self.max_items_per_set, NON_NEGATIVE),
                "ablation_k": (self.ablation_k, AT_LEAST_ONE),
                "overconfidence_tau": (self.overconfidence_tau, UNIT),
                "position_items": (self.position_items, NON_NEGATIVE),
                "position_rotations": (self.position_rotations, NON_NEGATIVE),
                "grad_norm_items": (self.grad_norm_items, NON_NEGATIVE),
                "few_shot": (self.few_shot, NON_NEGATIVE),
                "heldout_window": (self.heldout_window, (lambda v: v >= 2, ">= 2")),
                "slice_max_examples": (self.slice_max_examples, NON_NEGATIVE),
                "within_step_every": (self.within_step_every, NON_NEGATIVE),
                "within_step_items": (self.within_step_items, AT_LEAST_ONE),
            },
        )


@dataclass
class WandbConfig:
    project: str = "evolve-train"
    """W&B project."""
    entity: Optional[str] = None
    """W&B entity (team/user); ``null`` uses your default."""
    mode: str = "offline"
    """``offline`` (default), ``online`` or ``disabled``; the ``WANDB_MODE`` variable wins when set."""
    tags: list[str] = field(default_factory=list)
    """Tags of the run."""
    group: Optional[str] = None
    """Run group; ``null``: in a Hydra multirun the sweep dir (``hydra.sweep.dir``, one group per sweep), else
    the experiment name."""
    predictions_sample: int = 16
    """Predictions per eval set sampled (seeded) into each checkpoint's ``predictions/step_<k>`` table (0 = none)."""


@dataclass
class LoggerConfig:
    backends: list[str] = field(default_factory=lambda: ["disk", "console"])
    """Metric loggers by name: ``disk``, ``console``, ``wandb`` (``disk`` always runs: metrics.jsonl)."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases settings (backend ``wandb``)."""


@dataclass
class Config:
    model: ModelConfig = MISSING
    """Which model to train."""
    method: MethodConfig = MISSING
    """How to train across time steps."""
    data: DataConfig = MISSING
    """The timeline: training corpora and eval sets per step."""
    trainer: TrainerConfig = MISSING
    """Optimisation settings."""
    eval: EvalConfig = MISSING
    """Evaluation of every checkpoint."""
    logger: LoggerConfig = runtime(MISSING)
    """Where metrics go."""
    experiment: str = label("default")
    """Name of the experiment; groups runs in the run-dir tree and in W&B."""
    seed: int = 0
    """Seed of model init, data order and everything else random in training."""
    resume: str = runtime("auto")
    """``auto``: continue a run dir that has completed steps; ``false``: refuse to reuse a non-empty run dir."""
    run_dir: Optional[str] = runtime(None)
    """Output directory; ``null`` uses Hydra's run dir (deterministic, see configs/config.yaml)."""
    extra: dict[str, Any] = runtime(default_factory=dict)
    """Free-form notes carried into the run's saved config (not read by the framework)."""


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    from evolve_train.config_identity import register_resolvers  # run-dir naming in configs/config.yaml

    register_resolvers(Config)


register_configs()
