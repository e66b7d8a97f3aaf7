"""A tiny Llama built from config with a locally trained tokenizer that has SmolLM2's special-token setup
(no BOS added, ``<|im_start|>`` as the bos token, ``<|im_end|>`` as EOS and pad), saved to a directory as a
"pretrained" model: the fast stand-in for ``model=smollm2_135m`` (no network)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from evolve_train.evaluation.evaluators.heldout import GENERAL_FILE

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
SENTENCES = [
    "The capital of France is Paris.",
    "Question: who leads the Halvorsen Group?\nAnswer: Mira Osei",
    "In 2019, the director of Quill Labs was Ana Berg.",
    "year: 2020 text: Tovel Works is based in Lund.",
]


def smollm_like_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """Byte-level BPE (no prefix space, as SmolLM2's) trained on the shipped general text; adds no special
    tokens around a text."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = GENERAL_FILE.read_text(encoding="utf-8").split("\n\n") + SENTENCES
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|im_end|>",
    )


def tiny_llama(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    import torch

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def save_tiny_llama(directory: Path) -> Path:
    """The tiny Llama and its tokenizer saved as a Hugging Face directory (what fetch-model writes)."""
    tokenizer = smollm_like_tokenizer()
    tiny_llama(tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
