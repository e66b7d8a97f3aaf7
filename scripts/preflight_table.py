"""The memory preflight's estimates per GPU for public model shapes (the table in docs/distributed.md): bf16
weights (``model.dtype=bfloat16``) under ``trainer.mixed_precision=bf16``, so FSDP2 trains float32 masters;
16,384 tokens per GPU (``trainer=gpu``), the chunked loss. Shapes are built on the meta device (no download).

    python scripts/preflight_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evolve_train.training.preflight import GIB, Estimate, Shape, estimate, shape_of  # noqa: E402

TOKENS = 16384
MODELS = {
    # width, blocks, query heads, key/value heads, MLP width, vocabulary, tied embeddings (the models' config.json)
    "Llama-3.2-1B": (2048, 16, 32, 8, 8192, 128256, True),
    "Qwen2.5-1.5B": (1536, 28, 12, 2, 8960, 151936, True),
    "Llama-3.2-3B": (3072, 28, 24, 8, 8192, 128256, True),
    "Llama-3.1-8B": (4096, 32, 32, 8, 14336, 128256, False),
}
LAYOUTS = {
    # column: (processes the model is sharded over, gradient checkpointing)
    "1 GPU, checkpointing": (1, True),
    "8 × H100 FSDP2": (8, False),
    "8 × H100 FSDP2, checkpointing": (8, True),
    "4 × 8 H100 HSDP, checkpointing": (8, True),  # sharded within a node of 8, replicated across the 4
}
HSDP_ONLY = {"Llama-3.1-8B"}


def model_shape(name: str) -> Shape:
    from transformers import LlamaConfig, Qwen2Config

    hidden, layers, heads, kv, ffn, vocab, tied = MODELS[name]
    kind = Qwen2Config if name.startswith("Qwen") else LlamaConfig
    return shape_of(
        kind(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            intermediate_size=ffn,
            vocab_size=vocab,
            tie_word_embeddings=tied,
        )
    )


def per_gpu(shape: Shape, shards: int, checkpointing: bool) -> Estimate:
    sharded = shards > 1
    return estimate(
        shape,
        tokens=TOKENS,
        weight_bytes=2,
        compute_bytes=2,
        world=shards,
        sharded=sharded,
        masters=sharded,
        checkpointing=checkpointing,
    )


def cell(result: Estimate) -> str:
    phase = "" if result.step >= result.between_steps else " (between steps)"
    return f"{result.total / GIB:.1f}{phase}"


def table() -> str:
    lines = ["| model | parameters | " + " | ".join(LAYOUTS) + " | confirmed on a GPU |"]
    lines.append("|---" * (len(LAYOUTS) + 3) + "|")
    for name in MODELS:
        shape = model_shape(name)
        cells = [
            cell(per_gpu(shape, *layout)) if "HSDP" not in column or name in HSDP_ONLY else "-"
            for column, layout in LAYOUTS.items()
        ]
        lines.append(f"| {name} | {shape.parameters / 1e9:.2f} B | " + " | ".join(cells) + " | not yet |")
    return "\n".join(lines)


def parts(name: str, shards: int, checkpointing: bool) -> str:
    return per_gpu(model_shape(name), shards, checkpointing).lines()


if __name__ == "__main__":
    print(table())
    print()
    print("Llama-3.1-8B, 8 GPUs, checkpointing:", parts("Llama-3.1-8B", 8, True))
