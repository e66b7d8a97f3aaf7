"""LoRA: only low-rank adapters train; the base model stays frozen.

What the name promises, and what the tests check: the adapter output is scaled by ``alpha / r`` (peft's
scaling, as in the LoRA paper), every base weight (embeddings and output head included) is frozen, and
only the adapter matrices receive gradients.

Across time steps (``method.lora.across_steps``):

- ``merge``: a fresh adapter per step on top of the previous step's weights, merged into them after
  the step. ``steps/<k>/adapter/`` reproduces step k's model from step k-1's:
  ``PeftModel.from_pretrained(<model of steps/k-1>, "steps/<k>/adapter").merge_and_unload()``.
- ``stack``: one adapter keeps training across steps on a frozen base (the model before the first
  LoRA step, i.e. ``steps/0``); ``adapter/`` holds the live adapter. The next step (or a resumed run,
  via :meth:`LoRA.load_extra`) recovers the base as ``merged - alpha/r * B @ A``: equal to the original
  base up to float rounding, and the same computation whether the run was resumed or not.

What a checkpoint holds (``method.lora.save_merged``): every LoRA step saves ``adapter/`` (peft format)
and the tokenizer; the merged full weights only with ``save_merged=true`` (and always at step 0, the
start of the chain, when LoRA trains step 0: ``method.at_step0``). ``load_model`` (``models/build.py``)
loads either kind the same way: a checkpoint without weights is rebuilt, bit for bit, from the last full
checkpoint and the adapters after it (``models/lora_checkpoint.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import torch

from evolve_train.errors import ConfigError
from evolve_train.methods.base import Strategy, register_strategy
from evolve_train.models.lora_checkpoint import ADAPTER_DIR, ADAPTER_META, subtract_adapter

log = logging.getLogger(__name__)

_LLAMA_STYLE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DEFAULT_TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "t5": ["q", "k", "v", "o", "wi", "wo", "wi_0", "wi_1"],
    "mt5": ["q", "k", "v", "o", "wi", "wo", "wi_0", "wi_1"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    **{
        name: _LLAMA_STYLE
        for name in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "gemma",
            "gemma2",
            "gemma3_text",
            "olmo",
            "olmo2",
            "smollm3",
        )
    },
}


def default_targets(model: torch.nn.Module) -> list[str]:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in DEFAULT_TARGETS:
        raise ConfigError(
            f"method.lora.target_modules: no default for model type '{model_type}'; set it, "
            "e.g. method.lora.target_modules=[q_proj,v_proj]"
        )
    return DEFAULT_TARGETS[model_type]


def step0_policy(name: str, strategies, at_step0: bool) -> str | None:
    """What a LoRA run trains at step 0, in one line (the run's first log line, the report's header); None for a
    method without the ``lora`` strategy."""
    if "lora" not in list(strategies):
        return None
    if at_step0:
        return f"method {name}: LoRA adapters from step 0 (method.at_step0=true); no step trains all weights"
    return f"method {name}: step 0 trains all weights (method.at_step0=false); LoRA adapters from step 1"


def is_adapter_param(name: str) -> bool:
    return "lora_" in name


@register_strategy("lora")
class LoRA(Strategy):
    def __init__(self, cfg):
        super().__init__(cfg)
        # method.lora.* ranges and choices are checked by the schema (config.py: LoraConfig)
        self._adapter_state: dict | None = None  # the live adapter (stack)
        self._staged: Path | None = None  # adapter saved in peft format, waiting for save_extra

    def peft_config(self, model):
        from peft import LoraConfig as PeftLoraConfig
        from peft import TaskType

        from evolve_train.models.text_format import is_encoder_decoder

        c = self.cfg.lora
        model_type = getattr(model.config, "model_type", "")
        return PeftLoraConfig(
            r=c.r,
            lora_alpha=c.alpha,
            lora_dropout=c.dropout,
            target_modules=list(c.target_modules or default_targets(model)),
            fan_in_fan_out=model_type == "gpt2",  # GPT-2 uses Conv1D (weights transposed)
            task_type=TaskType.SEQ_2_SEQ_LM if is_encoder_decoder(model) else TaskType.CAUSAL_LM,
        )

    def prepare_model(self, model, step):
        from peft import PeftModel, get_peft_model, set_peft_model_state_dict

        if isinstance(model, PeftModel):
            raise RuntimeError("lora.prepare_model got a model that already carries an adapter")
        peft_model = get_peft_model(model, self.peft_config(model))
        if self.cfg.lora.across_steps == "stack" and self._adapter_state is not None:
            result = set_peft_model_state_dict(peft_model, self._adapter_state)
            if result.unexpected_keys:
                raise RuntimeError(f"the saved adapter does not fit the model: {result.unexpected_keys[:3]}")
            subtract_adapter(peft_model)  # merged weights -> base; the adapter trains on
        trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in peft_model.parameters())
        log.info(
            "lora (step %d, %s): %d of %d parameters trainable (%.2f%%), scale alpha/r = %g",
            step,
            self.cfg.lora.across_steps,
            trainable,
            total,
            100 * trainable / total,
            self.cfg.lora.alpha / self.cfg.lora.r,
        )
        return peft_model

    def after_step(self, model, step, examples):
        from peft import PeftModel, get_peft_model_state_dict

        if not isinstance(model, PeftModel):
            return model
        from accelerate import PartialState

        self._discard_staged()
        if PartialState().is_main_process:  # only the main process writes checkpoints
            self._staged = Path(tempfile.mkdtemp(prefix="evolve_lora_"))
            model.save_pretrained(self._staged)
        self._adapter_state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        return model.merge_and_unload()

    def save_extra(self, model, directory):
        if self._staged is None:
            return
        target = Path(directory) / ADAPTER_DIR
        shutil.copytree(self._staged, target)
        base = (
            "the previous step's checkpoint"
            if self.cfg.lora.across_steps == "merge"
            else "the model before the first LoRA step (steps/0 unless method.at_step0)"
        )
        (target / ADAPTER_META).write_text(
            json.dumps(
                {
                    "across_steps": self.cfg.lora.across_steps,
                    "base": base,
                    "scaling": self.cfg.lora.alpha / self.cfg.lora.r,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        self._discard_staged()

    def saves_weights(self, step: int) -> bool:
        """Merged full weights in ``steps/<step>`` only when asked, and at step 0 (the chain's start)."""
        return self.cfg.lora.save_merged or step == 0

    def load_extra(self, model, directory):
        """On resume with ``stack``: the live adapter continues from the last checkpoint's."""
        path = Path(directory) / ADAPTER_DIR / "adapter_model.safetensors"
        if self.cfg.lora.across_steps == "stack" and path.exists():
            from safetensors.torch import load_file

            self._adapter_state = load_file(str(path))

    def _discard_staged(self):
        if self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
            self._staged = None
