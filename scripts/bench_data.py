"""``scripts/bench.py --part data``: preparing a corpus at scale, measured in one run on the same cores.

For generated text of two sizes (about 100 MB and 1 GB of JSONL by default), each figure from a fresh process
(so peak memory is that process's own):

- **preparation**: the JSONL corpus read into Arrow (``data/loaders/common.py: read_training_file`` into a
  ``data.cache_dir``), then its tokenized cache entry written (``training/token_cache.py``, the path of
  ``evolve-data prepare`` and of a run), tokens/s of the tokenizing part, peak RSS of the process;
- **plain tokenizers**: ``tokenizers``' ``encode_batch`` over the same documents (read from the same Arrow
  records, in the same batches) with the same number of threads, tokens/s, results discarded: the ratio
  preparation/plain says what the framework costs over the library alone; and the same with
  ``encode_batch_fast`` (no character offsets), the call the preparation makes: ratio ``prepare_vs_plain_fast``;
- **bytes per token on disk**: the entry's ``rows.arrow`` over its tokens (uint16 ids under 65,536 ids);
- **a training step that reads it**: the entry mapped (a cache hit), 20 batches of rows decoded, collated and
  trained on by a small GPT-2: peak RSS of that process.

``tiny`` (``--data-size tiny``) checks the part itself in seconds: two small corpora and 2 training batches
instead of 20 (the model, its AdamW state and one batch's activations are all allocated by the first step, so
the training process's peak is already there); every figure is computed and printed as at the bench size.

The last line is one JSON object; docs/results/benchmarks.md quotes a run of it.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {"bench": (100_000_000, 1_000_000_000), "tiny": (1_000_000, 3_000_000)}
TRAIN_BATCHES = {"bench": 20, "tiny": 2}
"""Batches the training process decodes and trains on."""
SEQ_LEN = 256
VOCAB = 8192
WORDS = 20_000


def _words(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(WORDS)]


def write_corpus(path: Path, size: int, seed: int = 0) -> int:
    """Generated English-like documents (~2 KB each) as JSONL of about ``size`` bytes; the document count.
    Documents are drawn from a pool of sentences over a Zipf-like vocabulary (fast enough for a gigabyte)."""
    rng = random.Random(seed)
    words = _words(rng)
    cumulative, total = [], 0.0
    for rank in range(WORDS):
        total += 1.0 / (rank + 1)
        cumulative.append(total)
    pool = [
        " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(6, 18))).capitalize()
        + f" in {rng.randint(1900, 2030)}."
        for _ in range(50_000)
    ]
    written = docs = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size:
            line = json.dumps({"text": " ".join(rng.choices(pool, k=rng.randint(12, 28))), "doc_id": f"d{docs}"})
            out.write(line + "\n")
            written += len(line) + 1  # ASCII: characters are bytes
            docs += 1
    return docs


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def _text_format(tokenizer_dir: str):
    from transformers import AutoTokenizer

    from evolve_train.models.text_format import make_text_format

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return make_text_format(tokenizer)


def _step(corpus: str, cache: str):
    from evolve_train.data.loaders.common import read_training_file
    from evolve_train.data.schema import TimeStep

    _, texts = read_training_file(Path(corpus), Path(cache))
    return TimeStep(index=0, name="bench", texts=texts, files=[corpus])


def child_prepare(corpus: str, cache: str, tokenizer_dir: str) -> dict:
    import pyarrow.compute as pc

    from evolve_train.training.token_cache import ROWS, TokenCache

    start = time.perf_counter()
    step = _step(corpus, cache)
    read_seconds = time.perf_counter() - start
    cache_ = TokenCache(Path(cache), _text_format(tokenizer_dir))
    start = time.perf_counter()
    rows = cache_.examples(step, "clm", SEQ_LEN)
    seconds = time.perf_counter() - start
    tokens = int(pc.sum(pc.list_value_length(rows.data.table.column("input_ids"))).as_py())
    entry = next(p for p in (Path(cache) / "tokens").iterdir() if (p / ROWS).is_file())
    return {
        "read_seconds": read_seconds,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "rows": len(rows),
        "bytes_on_disk": (entry / ROWS).stat().st_size,
        "bytes_per_token": (entry / ROWS).stat().st_size / tokens,
        "id_type": str(rows.features["input_ids"].feature.dtype),
        "peak_rss_gib": _peak_rss_gib(),
    }


def child_plain(corpus: str, cache: str, tokenizer_dir: str, method: str = "encode_batch") -> dict:
    from evolve_train.data.corpus import record_batches
    from evolve_train.models.text_format import ENCODE_BATCH

    step = _step(corpus, cache)  # the Arrow records written by the preparation run: read, not written again
    encode = getattr(_text_format(tokenizer_dir).tokenizer.backend_tokenizer, method)
    start, tokens = time.perf_counter(), 0
    for batch in record_batches(step.texts, ["text"], ENCODE_BATCH):
        tokens += sum(len(encoding.ids) for encoding in encode(batch["text"], add_special_tokens=False))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "peak_rss_gib": _peak_rss_gib()}


def child_plain_fast(corpus: str, cache: str, tokenizer_dir: str) -> dict:
    return child_plain(corpus, cache, tokenizer_dir, "encode_batch_fast")


def child_train(corpus: str, cache: str, tokenizer_dir: str, batches: int = TRAIN_BATCHES["bench"]) -> dict:
    import torch

    from evolve_train.config import ModelConfig
    from evolve_train.models.build import build_model
    from evolve_train.training.compact_rows import decode_row
    from evolve_train.training.examples import collate
    from evolve_train.training.token_cache import TokenCache

    text_format = _text_format(tokenizer_dir)
    cache_ = TokenCache(Path(cache), text_format)
    rows = cache_.examples(_step(corpus, cache), "clm", SEQ_LEN)
    assert cache_.misses == 0, "the training process found no prepared entry"
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(n_layer=2, n_embd=128, n_head=2, n_positions=SEQ_LEN, vocab_size=VOCAB), text_format.tokenizer
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    start = time.perf_counter()
    for _ in range(batches):  # rows drawn from the whole entry, as a shuffled epoch reads them
        batch = collate([decode_row(rows[rng.randrange(len(rows))]) for _ in range(8)], text_format.pad_id)
        loss = model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "labels")}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return {"seconds": time.perf_counter() - start, "rows": len(rows), "peak_rss_gib": _peak_rss_gib()}


CHILDREN = {"prepare": child_prepare, "plain": child_plain, "plain_fast": child_plain_fast, "train": child_train}


def _run_child(kind: str, corpus: Path, cache: Path, tokenizer_dir: Path, workers: int, **options) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true" if workers > 1 else "false"}
    env["RAYON_NUM_THREADS"] = str(workers)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import bench_data; " + (
        f"print(json.dumps(bench_data.CHILDREN[{kind!r}]({str(corpus)!r}, {str(cache)!r}, {str(tokenizer_dir)!r}, "
        f"**{options!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench --part data: the {kind} process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def data_part(size: str = "bench", workers: int = 2, keep: bool = False) -> dict:
    """Every figure for both corpus sizes of ``size`` (``bench``: ~100 MB and ~1 GB; ``tiny``: a check)."""
    from evolve_train.models.build import train_tokenizer

    work = Path(tempfile.mkdtemp(prefix="evolve-bench-data-"))
    try:
        result: dict = {"workers": workers, "seq_len": SEQ_LEN, "sizes": {}}
        sample = work / "sample.jsonl"
        write_corpus(sample, 2_000_000, seed=1)
        texts = [json.loads(line)["text"] for line in sample.read_text(encoding="utf-8").splitlines()]
        train_tokenizer(texts, VOCAB).save_pretrained(work / "tokenizer")
        for target in SIZES[size]:
            corpus, cache = work / f"corpus_{target}.jsonl", work / f"cache_{target}"
            start = time.perf_counter()
            docs = write_corpus(corpus, target)
            figures = {"bytes": corpus.stat().st_size, "documents": docs}
            figures["generate_seconds"] = time.perf_counter() - start
            for kind in CHILDREN:
                options = {"batches": TRAIN_BATCHES[size]} if kind == "train" else {}
                figures[kind] = _run_child(kind, corpus, cache, work / "tokenizer", workers, **options)
                print(f"  {target / 1e6:,.0f} MB {kind}: {json.dumps(figures[kind])}", flush=True)
            figures["prepare_vs_plain"] = figures["prepare"]["tokens_per_s"] / figures["plain"]["tokens_per_s"]
            figures["prepare_vs_plain_fast"] = (
                figures["prepare"]["tokens_per_s"] / figures["plain_fast"]["tokens_per_s"]
            )
            result["sizes"][str(target)] = figures
            corpus.unlink()
        small, large = (result["sizes"][str(t)] for t in SIZES[size])
        result["prepare_rss_ratio"] = large["prepare"]["peak_rss_gib"] / small["prepare"]["peak_rss_gib"]
        result["train_rss_ratio"] = large["train"]["peak_rss_gib"] / small["train"]["peak_rss_gib"]
        return result
    finally:
        if not keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)


def print_data(result: dict) -> None:
    print(f"data preparation ({result['workers']} tokenizer threads, seq_len {result['seq_len']}):")
    header = ("corpus", "tokens", "prepare tok/s", "plain tok/s", "ratio", "fast tok/s", "ratio", "B/token")
    header += ("prepare RSS", "train RSS")
    print("  " + "  ".join(f"{h:>13}" for h in header))
    for target, f in result["sizes"].items():
        cells = (
            f"{int(target) / 1e6:,.0f} MB",
            f"{f['prepare']['tokens']:,}",
            f"{f['prepare']['tokens_per_s']:,.0f}",
            f"{f['plain']['tokens_per_s']:,.0f}",
            f"{f['prepare_vs_plain']:.3f}",
            f"{f['plain_fast']['tokens_per_s']:,.0f}",
            f"{f['prepare_vs_plain_fast']:.3f}",
            f"{f['prepare']['bytes_per_token']:.3f}",
            f"{f['prepare']['peak_rss_gib']:.2f} GiB",
            f"{f['train']['peak_rss_gib']:.2f} GiB",
        )
        print("  " + "  ".join(f"{c:>13}" for c in cells))
    print(
        f"  peak RSS, large / small corpus: preparation {result['prepare_rss_ratio']:.3f}, "
        f"training step {result['train_rss_ratio']:.3f}"
    )
