"""Each config field says once what it changes (``evolve_train/config_keys.py``); the run identity, the run-dir
tag and the two cache keys read that, and give what their hand-kept lists gave before (copied here verbatim).

The comparisons are over the schema's keys of that time (:data:`OLD_SCHEMA`): a field added since is
classified where it is defined, and changes the keys as any new setting does."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from helpers import tiny_cfg
from omegaconf import OmegaConf

from evolve_train import config_identity
from evolve_train.config import Config, EvalConfig, TrainerConfig
from evolve_train.config_keys import (
    LABEL,
    LATER_STEPS,
    NONE,
    RESULT,
    STEP0_LEAVES_OUT,
    affects,
    key_part,
    keys_where,
    label,
    later_steps,
    runtime,
    under,
)
from evolve_train.data.timeline import TimeStep
from evolve_train.errors import ConfigError
from evolve_train.evaluation.initial_cache import eval_part
from evolve_train.training import identity
from evolve_train.training.step0_cache import TRAINER_FIELDS_NOT_IN_KEY, step0_parts

# --- the lists as they were kept by hand before the fields carried their class -------------------------------

OLD_SCHEMA = {
    "": "logger experiment seed resume run_dir extra",
    "model": "name_or_path arch n_layer n_embd n_head n_positions dropout activation vocab_size tokenizer "
    "attn_implementation trust_remote_code allow_pickle gradient_checkpointing dtype",
    "method": "name strategies average ema_decay average_continue at_step0 step0_cache",
    "method.lora": "r alpha dropout target_modules across_steps save_merged",
    "method.replay": "ratio decay source",
    "method.l2_init": "coef anneal_t0 anneal_k anchor_dtype",
    "method.ewc": "coef anneal_t0 anneal_k anchor_dtype fisher_batches fisher_batch_size",
    "method.freeze": "embeddings lower_blocks",
    "method.lwf": "weight temperature targets teacher_dtype",
    "data": "kind objective root steps fields cache_dir prompt_template train_files eval_files default_split "
    "time_prefix time_prefix_format keep_history heldout_share heldout_seed",
    "data.world": "seed n_entities n_steps change_share new_entities_per_step n_people n_cities start_year "
    "dev_share dates docs_per_entity",
    "data.dyknow": "cuts train_wordings dates passages qa_questions categories dev_share split_seed stable_probes",
    "trainer": "epochs_step0 epochs batch_size grad_accum seq_len lr weight_decay warmup_steps min_lr_ratio "
    "grad_clip mixed_precision num_threads log_every compile save_every_n_steps keep_last_states "
    "dist_timeout_s nonfinite tokens_per_batch attention_reset peak_flops schedule step0_schedule rewarm "
    "peak_schedule cooldown_fraction constant_lr_ratio optimizer_state",
    "eval": "evaluators batch_size greedy_decoder max_new_tokens stop_strings stop_patterns forward_transfer "
    "eval_initial max_items_per_set save_predictions time_slices ablation_k ablation_seed overconfidence_tau "
    "position_items position_rotations grad_norms grad_norm_items heldout_text heldout_window "
    "slice_max_examples oracle_run within_step_every within_step_items gate few_shot",
    "eval.qa_adaptation": "enabled train_file fields epochs steps lr batch_size max_items",
    "eval.paraphrase_gap": "variants rewrites spotcheck max_items_per_set",
    "eval.flip_rate": "templates samples temperature seed",
    "eval.retrieval": "k passages passage_files scope template passage_template separator initial_every_store paired",
}
"""The schema's keys when the lists below were kept by hand (``eval.gate`` and ``logger`` as sections)."""
OLD_KEYS = frozenset(
    f"{section}.{name}" if section else name for section, names in OLD_SCHEMA.items() for name in names.split()
)
OLD_SECTIONS = frozenset(section for section in OLD_SCHEMA if section)


def old_key(key: str) -> bool:
    """Whether ``key`` was in the schema then (or below one of its keys, as ``eval.gate.flip_rate_max``)."""
    return under(key, OLD_KEYS)


def restricted(part, prefix: str):
    """``part`` (a section as a key hashes it) without the keys added to the schema since."""
    if not isinstance(part, dict):
        return part
    return {
        name: restricted(value, f"{prefix}.{name}") if f"{prefix}.{name}" in OLD_SECTIONS else value
        for name, value in part.items()
        if old_key(f"{prefix}.{name}")
    }


OLD_MAY_DIFFER_ON_RESUME = (
    "logger",
    "resume",
    "run_dir",
    "extra",
    "data.cache_dir",
    "method.step0_cache",
    "method.lora.save_merged",
    "trainer.num_threads",
    "trainer.log_every",
    "trainer.save_every_n_steps",
    "trainer.keep_last_states",
    "trainer.dist_timeout_s",
    "trainer.peak_flops",
    "eval.batch_size",
    "eval.gate",
    "eval.oracle_run",
)
OLD_TRAINER_FIELDS_NOT_IN_KEY = (
    "epochs",
    "log_every",
    "num_threads",
    "save_every_n_steps",
    "keep_last_states",
    "dist_timeout_s",
    "peak_flops",
    "rewarm",
    "peak_schedule",
    "optimizer_state",
)
REMOVED_SWITCHES = ("eval.grad_norms",)
"""Fields that no longer change anything (refused when set): runtime now, so a run recorded with the old value
resumes (the recorded key is reported as one of another code version, not as a change)."""


def old_may_differ(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in OLD_MAY_DIFFER_ON_RESUME + REMOVED_SWITCHES)


def old_result_config(cfg) -> dict:
    return {
        key: config_identity._digest(value) if config_identity.is_secret(key) else value
        for key, value in config_identity.flatten(cfg).items()
        if not old_may_differ(key)
    }


def old_step0_parts(cfg, tokenizer, num_processes, step0, runtime, versions) -> dict:
    """What ``step0_key`` hashed before the classification, verbatim but for the versions passed in."""
    data = dataclasses.asdict(cfg.data)
    data.pop("cache_dir", None)
    data.pop("keep_history", None)
    trainer = {k: v for k, v in dataclasses.asdict(cfg.trainer).items() if k not in OLD_TRAINER_FIELDS_NOT_IN_KEY}
    step0_schedule = trainer.pop("step0_schedule", None)
    if step0_schedule is not None:
        trainer["schedule"] = step0_schedule
    if not cfg.method.at_step0:
        method = {"at_step0": False}
    else:
        method = dataclasses.asdict(cfg.method)
        for name in ("name", "step0_cache"):
            method.pop(name, None)
    from evolve_train.training.step0_cache import step0_corpus_fingerprint, tokenizer_fingerprint

    parts = {
        "data": data,
        "model": dataclasses.asdict(cfg.model),
        "seed": cfg.seed,
        "trainer": trainer,
        "method": method,
        "num_processes": num_processes,
        "runtime": runtime,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "corpus": step0_corpus_fingerprint(step0) if step0 is not None else None,
        "versions": versions,
    }
    return parts


def restricted_step0(parts: dict) -> dict:
    return {name: restricted(value, name) if name in OLD_SECTIONS else value for name, value in parts.items()}


CONFIGS = [
    (),
    ("method=lora", "method.lora.r=4", "method.lora.save_merged=true"),
    ("method=lora", "method.at_step0=true", "method.lora.save_merged=true", "method.name=renamed"),
    ("method=ewc", "trainer.epochs=9", "trainer.rewarm=none", "trainer.optimizer_state=keep"),
    ("trainer.schedule=wsd", "trainer.step0_schedule=linear", "trainer.peak_schedule=cosine_over_steps"),
    ("trainer.schedule=infinite", "trainer.constant_lr_ratio=0.5", "trainer.cooldown_fraction=0.3"),
    ("data.cache_dir=/tmp/elsewhere", "data.keep_history=true", "trainer.num_threads=2", "trainer.log_every=3"),
    ("eval=full", "eval.batch_size=7", "eval.gate.flip_rate_max=0.5", "eval.oracle_run=/tmp/oracle"),
    ("logger.backends=[disk,console]", "resume=false", "+extra.note=hi", "+extra.api_key=s3cr3t-value"),
    ("seed=3", "model.n_embd=64", "trainer.mixed_precision=bf16", "trainer.peak_flops=1e12"),
    ("experiment=recipes",),
]
STEP0 = TimeStep(0, "2018", pairs=[{"input": "Orvane is run by <mask>.", "output": "Ada Brill"}])
RUNTIME = {"device": "cpu", "distributed_type": "NO"}


def cfg_of(*overrides: str) -> Config:
    return OmegaConf.to_object(tiny_cfg("/tmp/unused-run-dir", *overrides))


@pytest.fixture(scope="module")
def tokenizer():
    from evolve_train.models.build import train_tokenizer

    return train_tokenizer(["the director of Orvane was Ada Brill", "in 2019 it was Tom Vey"], 300)


# --- the derived lists equal the old ones ----------------------------------------------------------------------


def test_the_keys_that_may_differ_on_resume_are_the_old_ones_and_the_removed_switch():
    derived = {key for key in identity.MAY_DIFFER_ON_RESUME if old_key(key)}
    assert derived == set(OLD_MAY_DIFFER_ON_RESUME) | set(REMOVED_SWITCHES)
    assert len(identity.MAY_DIFFER_ON_RESUME) == len(set(identity.MAY_DIFFER_ON_RESUME))


def test_the_trainer_fields_left_out_of_the_step0_key_are_the_old_ones():
    assert {name for name in TRAINER_FIELDS_NOT_IN_KEY if old_key(f"trainer.{name}")} == set(
        OLD_TRAINER_FIELDS_NOT_IN_KEY
    )


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(o) or "default")
def test_result_config_equals_the_old_one(overrides):
    cfg = cfg_of(*overrides)
    new, old = identity.result_config(cfg), old_result_config(cfg)
    assert {k: v for k, v in new.items() if old_key(k)} == {k: v for k, v in old.items() if old_key(k)}


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(o) or "default")
def test_step0_key_equals_the_old_one(tokenizer, overrides):
    import accelerate
    import torch
    import transformers

    import evolve_train

    versions = [evolve_train.__version__, torch.__version__, transformers.__version__, accelerate.__version__]
    cfg = cfg_of(*overrides)
    for step0, processes in ((STEP0, 1), (None, 2)):
        new = step0_parts(cfg, tokenizer, processes, step0, RUNTIME)
        old = old_step0_parts(cfg, tokenizer, processes, step0, RUNTIME, versions)
        assert restricted_step0(new) == restricted_step0(old)


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(o) or "default")
def test_initial_eval_key_hashes_the_whole_eval_section_as_before(overrides):
    cfg = cfg_of(*overrides)
    assert restricted(eval_part(cfg.eval), "eval") == restricted(dataclasses.asdict(cfg.eval), "eval")


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(o) or "default")
def test_run_tag_leaves_out_the_same_overrides_as_before(overrides):
    old_items = [
        item for item in config_identity.tag_items(list(overrides), ()) if not old_may_differ(item[0].split("=")[0])
    ]
    assert identity.tag_items(list(overrides)) == old_items
    assert identity.run_tag(list(overrides)) == config_identity.run_tag(list(overrides), OLD_MAY_DIFFER_ON_RESUME)


# --- the classification itself ---------------------------------------------------------------------------------


def test_every_field_has_a_known_class_and_sections_are_walked():
    assert {key for key in keys_where(Config, LABEL) if old_key(key)} == {"method.name", "experiment"}
    assert {key for key in keys_where(Config, LATER_STEPS) if old_key(key)} == {
        "data.keep_history",
        "trainer.epochs",
        "trainer.rewarm",
        "trainer.peak_schedule",
        "trainer.optimizer_state",
    }
    every = keys_where(Config, RESULT, LATER_STEPS, LABEL, NONE)
    assert "trainer.lr" in every and "method.lora.r" in every and "eval.gate" in every  # a marked section: one key
    assert not any(key.startswith("eval.gate.") or key.startswith("logger.") for key in every)
    assert keys_where(TrainerConfig, NONE, deep=False) == tuple(
        k.split(".", 1)[1] for k in identity.MAY_DIFFER_ON_RESUME if k.startswith("trainer.")
    )


@dataclass
class Inner:
    x: int = 1


@dataclass
class Section:
    plain: int = 0
    speed: int = runtime(4)
    kept: int = runtime(5, hashed=True)
    later: int = later_steps(6)
    name: str = label("n")
    notes: dict = runtime(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_helpers_mark_fields_and_key_part_keeps_hashed_runtime_fields():
    kinds = {f.name: affects(f) for f in dataclasses.fields(Section)}
    assert kinds == {
        "plain": RESULT,
        "speed": NONE,
        "kept": NONE,
        "later": LATER_STEPS,
        "name": LABEL,
        "notes": NONE,
        "inner": RESULT,
    }
    assert keys_where(Section, RESULT) == ("plain", "inner.x")
    assert key_part(Section(), STEP0_LEAVES_OUT) == {"plain": 0, "kept": 5, "inner": {"x": 1}}
    assert Section().notes == {} and Section().notes is not Section().notes
    with pytest.raises(ValueError, match="unknown"):
        keys_where(Section, "sometimes")


def test_a_runtime_override_changes_neither_tag_nor_identity_and_a_result_one_both():
    base = identity.identity(cfg_of())["fingerprint"]
    for key in identity.MAY_DIFFER_ON_RESUME:
        assert identity.run_tag([f"{key}=1"]) == "", key
    assert identity.identity(cfg_of("trainer.dist_timeout_s=60", "trainer.peak_flops=1e12"))["fingerprint"] == base
    assert identity.run_tag(["trainer.epochs=3"]) != "" and identity.run_tag(["method.name=x"]) != ""
    assert identity.identity(cfg_of("trainer.epochs=3"))["fingerprint"] != base


# --- eval.grad_norms: eval.evaluators is the one switch -----------------------------------------------------


def test_the_removed_grad_norms_switch_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"add grad_norms to eval.evaluators"):
        EvalConfig(grad_norms=True)
    with pytest.raises(Exception, match=r"add grad_norms to eval.evaluators"):
        OmegaConf.to_object(tiny_cfg(tmp_path, "eval.grad_norms=true"))
    assert EvalConfig(grad_norms=False).grad_norms is False  # the old default, in configs saved before
    full = cfg_of("eval=full")
    assert "grad_norms" in full.eval.evaluators and full.eval.grad_norms is False


def test_a_run_recorded_with_the_old_switch_resumes(tmp_path, caplog):
    from evolve_train.training.checkpoint import RunState

    state = RunState(trained=[0], evaluated=[0])
    identity.record(state, cfg_of("eval=full"))
    state.identity["config"]["eval.grad_norms"] = True  # what a run of eval=full recorded before
    identity.check_resume(tmp_path, cfg_of("eval=full"), state)  # a setting of another code version: a warning
    assert "eval.grad_norms" in caplog.text
