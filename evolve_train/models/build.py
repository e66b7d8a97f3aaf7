"""Model and tokenizer building: a pretrained name, a saved checkpoint, or a tiny model from config; and the
model's text format (``build_text_format``, its text format)."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Iterable, Optional

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.models import attention  # noqa: F401  (registers model.attn_implementation=sdpa_varlen)
from evolve_train.models.text_format import TextFormat, make_text_format

log = logging.getLogger(__name__)

EOS, PAD, UNK = "<|endoftext|>", "<pad>", "<unk>"
T5_SENTINELS = [f"<extra_id_{i}>" for i in range(8)]
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def train_tokenizer(texts: Iterable[str], vocab_size: int, arch: str = "gpt2") -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer locally (well under a second on the embedded world)."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = [EOS, PAD, UNK] + (T5_SENTINELS if arch == "t5" else [])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    extra = {"additional_special_tokens": T5_SENTINELS} if arch == "t5" else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, pad_token=PAD, unk_token=UNK, **extra
    )


def load_tokenizer(name_or_path: str, cfg: ModelConfig, *, revision: Optional[str] = None) -> PreTrainedTokenizerFast:
    """The tokenizer of a local dir or hub name (``revision``: a hub branch, tag or commit)."""
    tokenizer = AutoTokenizer.from_pretrained(
        name_or_path, trust_remote_code=cfg.trust_remote_code, **_revision(revision)
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_safe_weights(path: str, allow_pickle: bool) -> None:
    """Refuse pickle-based weights in a local directory unless ``model.allow_pickle=true``."""
    directory = Path(path)
    if not directory.is_dir():
        return
    has_safetensors = any(directory.glob("*.safetensors"))
    pickled = [p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES]
    if pickled and not has_safetensors:
        if not allow_pickle:
            raise ConfigError(
                f"{path} holds only pickle-based weights ({', '.join(sorted(pickled))}); "
                "loading them can run arbitrary code. Convert them to safetensors, or set "
                "model.allow_pickle=true if you trust the source."
            )
        log.warning("loading pickle-based weights from %s (model.allow_pickle=true)", path)


def is_seq2seq(cfg: ModelConfig) -> bool:
    return cfg.arch == "t5"


def run_tokenizer(cfg: ModelConfig, first_step) -> PreTrainedTokenizerFast:
    """A fresh run's tokenizer: ``model.tokenizer`` (else ``model.name_or_path``)'s, or one trained on the first
    time step's documents and pairs (streamed: a corpus may exceed memory)."""
    if cfg.tokenizer or cfg.name_or_path:
        return load_tokenizer(cfg.tokenizer or cfg.name_or_path, cfg)
    texts = itertools.chain(
        (t["text"] for t in first_step.texts), (p["input"] + " " + p["output"] for p in first_step.pairs)
    )
    return train_tokenizer(texts, cfg.vocab_size, cfg.arch)


def build_text_format(cfg: ModelConfig, tokenizer: PreTrainedTokenizerFast) -> TextFormat:
    """The text format of the configured model (``models/text_format.py``): what training rows, prompts,
    generation and scoring look like for it."""
    return make_text_format(tokenizer, is_seq2seq(cfg))


def load_model(
    path: str, cfg: ModelConfig, *, revision: Optional[str] = None, device: Optional[torch.device] = None
) -> PreTrainedModel:
    """Load a pretrained model or a saved checkpoint (safetensors only unless allowed) in ``model.dtype``,
    with the run's model settings (:func:`apply_model_settings`). A LoRA checkpoint saved without merged
    weights (``method.lora.save_merged=false``) is rebuilt from its chain (``models/lora_checkpoint.py``).
    ``revision``: a hub branch, tag or commit of ``path`` (Pythia's ``step143000``). ``device``: where the
    weights go, read from the file straight onto it (:func:`_from_pretrained`)."""
    from evolve_train.models.lora_checkpoint import is_adapter_only, load_adapter_only

    if revision is None and is_adapter_only(path):
        model = load_adapter_only(path, cfg, _from_pretrained)
        return apply_model_settings(model if device is None else model.to(device), cfg)
    return apply_model_settings(_from_pretrained(path, cfg, revision=revision, device=device), cfg)


def _revision(revision: Optional[str]) -> dict:
    """``from_pretrained``'s ``revision`` argument, only when one is given."""
    return {"revision": revision} if revision else {}


def _on_device(device: Optional[torch.device]) -> dict:
    """``from_pretrained``'s ``device_map`` placing every weight on ``device`` as it is read: on a GPU no process
    holds a host copy of the model (8 processes of a node would hold 8), and the file's pages, shared by the
    node's processes through the page cache, are read from disk once."""
    return {} if device is None else {"device_map": {"": torch.device(device)}}


def _from_pretrained(
    path: str, cfg: ModelConfig, *, revision: Optional[str] = None, device: Optional[torch.device] = None
) -> PreTrainedModel:
    check_safe_weights(path, cfg.allow_pickle)
    auto = AutoModelForSeq2SeqLM if is_seq2seq(cfg) else AutoModelForCausalLM
    return auto.from_pretrained(
        path,
        attn_implementation=cfg.attn_implementation,
        trust_remote_code=cfg.trust_remote_code,
        use_safetensors=None if cfg.allow_pickle else True,
        dtype=weight_dtype(cfg),
        **_revision(revision),
        **_on_device(device),
    )


def weight_dtype(cfg: ModelConfig) -> torch.dtype:
    """``model.dtype`` as a torch dtype."""
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[str(cfg.dtype)]


def apply_model_settings(model: PreTrainedModel, cfg: ModelConfig) -> PreTrainedModel:
    """What every model of the run gets, however it was made (built, loaded, resumed, from the step-0
    cache): the weights in ``model.dtype``, gradient checkpointing as configured, the loss type named."""
    model = with_loss_type(model).to(weight_dtype(cfg))
    if cfg.gradient_checkpointing and not model.is_activation_checkpointing:
        model.activation_checkpointing_enable()
    elif not cfg.gradient_checkpointing and model.is_activation_checkpointing:
        model.activation_checkpointing_disable()
    return model


def with_loss_type(model: PreTrainedModel) -> PreTrainedModel:
    """Name the causal-LM loss for classes transformers cannot infer it from (``GPT2LMHeadModel``): it would
    pick the same loss, after warning on every run that ``loss_type=None`` is unrecognized."""
    if getattr(model, "loss_type", "") is None and not model.config.is_encoder_decoder:
        model.loss_type = "ForCausalLM"
    return model


def build_model(
    cfg: ModelConfig, tokenizer: PreTrainedTokenizerFast, device: Optional[torch.device] = None
) -> PreTrainedModel:
    """A fresh model from config (``name_or_path=null``) or the pretrained one, on ``device`` (default: host).
    A pretrained model is read straight onto ``device``; one built from config is initialised on the host in
    float32 (the same weights for a seed on any device), then cast and moved."""
    if cfg.name_or_path:
        return apply_model_settings(_from_pretrained(cfg.name_or_path, cfg, device=device), cfg)
    config = model_config(cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model = apply_model_settings(CLASSES[str(cfg.arch)](config), cfg)
    return model if device is None else model.to(device)


CLASSES = {
    "gpt2": GPT2LMHeadModel,
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
    "t5": T5ForConditionalGeneration,
}


def model_config(cfg: ModelConfig, vocab: int, pad_id: Optional[int] = 0, eos_id: Optional[int] = 0):
    """The transformers config of a model built from ``cfg`` (``model.arch``) for a tokenizer of ``vocab``
    tokens; the memory preflight reads it too (``training/preflight.py``)."""
    common = dict(vocab_size=vocab, pad_token_id=pad_id, eos_token_id=eos_id)
    arch = str(cfg.arch)
    if arch == "gpt2":
        config = GPT2Config(
            n_positions=cfg.n_positions,
            n_embd=cfg.n_embd,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
            activation_function=cfg.activation,
            bos_token_id=eos_id,
            **common,
        )
    elif arch in ("llama", "qwen2"):
        common["vocab_size"] = max(vocab, cfg.vocab_size)
        config = (LlamaConfig if arch == "llama" else Qwen2Config)(
            hidden_size=cfg.n_embd,
            intermediate_size=cfg.n_inner or 4 * cfg.n_embd,
            num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head,
            num_key_value_heads=cfg.n_kv_head or cfg.n_head,
            max_position_embeddings=cfg.n_positions,
            attention_dropout=cfg.dropout,
            tie_word_embeddings=True,
            bos_token_id=eos_id,
            **common,
        )
    elif arch == "t5":
        return T5Config(
            d_model=cfg.n_embd,
            d_ff=4 * cfg.n_embd,
            num_layers=cfg.n_layer,
            num_heads=cfg.n_head,
            d_kv=cfg.n_embd // cfg.n_head,
            dropout_rate=cfg.dropout,
            decoder_start_token_id=pad_id,
            **common,
        )
    else:
        raise ConfigError(
            f"model.arch={arch} needs model.name_or_path (a pretrained decoder-only model); models built from "
            "config: gpt2, llama, qwen2, t5"
        )
    config._attn_implementation = cfg.attn_implementation
    return config


def weight_gib(model: torch.nn.Module) -> float:
    """The bytes of the model's parameters and buffers in GiB (tied tensors counted once)."""
    tensors = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values()) / 2**30


def load_line(model: torch.nn.Module, device, before: Optional[float], after: Optional[float]) -> str:
    """The log line of a model made ready on ``device``: its weights' size and what it added to this process's
    resident host memory (``before``/``after``: :func:`~evolve_train.utils.host_memory.resident_gib`).
    ``scripts/resume_check.py`` reads it."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    host = "n/a" if before is None or after is None else f"{after - before:+.2f} GiB"
    return (
        f"weights: {weight_gib(model):.2f} GiB in {dtype} on {device}; host memory of this process {host} while loading"
    )


def n_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
