"""Training corpora written in each format users have them in."""

import gzip
import json
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from datasets import Dataset
from helpers.data import issue_layout


def jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


def write(path, records):
    name = path.name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=16)
    elif name.endswith(".gz"):
        path.write_bytes(gzip.compress(jsonl(records)))
    elif name.endswith(".zst"):
        path.write_bytes(zstandard.ZstdCompressor().compress(jsonl(records)))
    elif name.endswith(".jsonl"):
        path.write_bytes(jsonl(records))
    else:
        Dataset.from_list(records).save_to_disk(str(path))
    return path


def layout_with(tmp_path, name) -> list[str]:
    """test_training_files' two-step layout with step 2019's documents in format ``name``."""
    overrides = issue_layout(tmp_path / "data")
    records = [json.loads(line) for line in (tmp_path / "data" / "docs_2019.jsonl").read_text().splitlines()]
    write(tmp_path / "data" / name, records)
    return [o.replace("docs_2019.jsonl", name) for o in overrides]
