"""`evolve-data prepare` (cli/prepare.py): tokenizes every entry a run reads into its data.cache_dir (the
steps, the general mix), does nothing when run again, and a run on the prepared cache tokenizes nothing and
trains on the same batches as a run that tokenized as it went."""

from __future__ import annotations

import json
import logging

from helpers import TINY, tiny_cfg, wall_clock

from evolve_train.cli.data import main
from evolve_train.run import train


def overrides(tmp_path, cache: str) -> list[str]:
    general = tmp_path / "general.jsonl"
    if not general.exists():
        general.write_text(
            "".join(
                json.dumps({"text": f"General text {i}: the sky is blue and water is wet."}) + "\n" for i in range(40)
            )
        )
    return [
        f"data.cache_dir={tmp_path / cache}",
        "trainer.epochs_step0=1",
        "trainer.epochs=1",
        "eval.max_new_tokens=4",
        "method=replay",
        f"+data.mix_files=[{general}]",
        "data.mix_ratio=0.2",
    ]


def test_prepare_then_train_tokenizes_nothing_and_trains_the_same(tmp_path, capsys, caplog):
    args = overrides(tmp_path, "prepared")
    assert main(["prepare", "--workers", "2", *TINY, *args]) == 0
    first = capsys.readouterr().out
    assert "4 of 4 entries tokenized" in first  # 3 steps and the mix
    log_lines = (tmp_path / "prepared" / "prepare.log").read_text().splitlines()
    assert sum("tokens/s" in line for line in log_lines) == 4
    entries = sorted(p.name for p in (tmp_path / "prepared" / "tokens").iterdir() if not p.name.startswith("."))
    assert main(["prepare", *TINY, *args]) == 0
    assert "0 of 4 entries tokenized" in capsys.readouterr().out  # the second time: nothing to do
    assert sorted(p.name for p in (tmp_path / "prepared" / "tokens").iterdir() if not p.name.startswith(".")) == entries

    with caplog.at_level(logging.INFO, logger="evolve_train.training.token_cache"):
        train(tiny_cfg(tmp_path / "on_prepared", *args))
    outcomes = [r.getMessage().split(" ")[2] for r in caplog.records if r.getMessage().startswith("tokenized cache")]
    assert outcomes and set(outcomes) == {"hit"}  # the run tokenized nothing
    train(tiny_cfg(tmp_path / "tokenizing", *overrides(tmp_path, "fresh")))
    metrics = [(tmp_path / run / "metrics.jsonl").read_text().splitlines() for run in ("on_prepared", "tokenizing")]
    train_logs = [
        (tmp_path / run / "train_log.jsonl").read_text().splitlines() for run in ("on_prepared", "tokenizing")
    ]
    strip = [
        [{k: v for k, v in json.loads(line).items() if not wall_clock(k)} for line in rows]
        for rows in (*metrics, *train_logs)
    ]
    assert strip[0] == strip[1] and strip[2] == strip[3]  # the same losses, batch by batch
    assert any(r.get("group") == "mix" for r in strip[2])


def test_prepare_needs_a_cache_dir(tmp_path, capsys):
    assert main(["prepare", *TINY, "data.cache_dir=off"]) == 2
    assert "data.cache_dir" in capsys.readouterr().err
