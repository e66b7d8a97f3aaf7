"""``evolve-data fetch-data dyknow``: DyKnow's files into the cache, checked against the pinned release, and
``data=dyknow`` reading them there by default. Never the network: the release is the tests' invented fixture
(``tests/helpers/dyknow.py``) with its own pins, and a download is served from memory."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.dyknow import FACTS, PASSAGES, QUESTIONS, write_fixture
from evolve_train.cli import data as cli
from evolve_train.config import DataConfig, DyKnowConfig
from evolve_train.data.loaders import dyknow_fetch
from evolve_train.data.loaders.dyknow_fetch import COMMIT, FILES, category_digest, default_root, fetch, verify
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import DataError

CUTS = ["2000", "2005", "2010"]


def compact(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@pytest.fixture
def release(monkeypatch):
    """The fixture as "the release": FILES pinned to its bytes (compact JSON) and categories."""
    import hashlib

    contents = {"grc_generated.json": FACTS, "qa_generated.json": QUESTIONS, "passages.json": PASSAGES}
    pinned = tuple(
        replace(
            spec,
            sha256=hashlib.sha256(compact(contents[spec.name])).hexdigest(),
            categories={c: category_digest(v) for c, v in contents[spec.name].items()},
        )
        for spec in FILES
    )
    monkeypatch.setattr(dyknow_fetch, "FILES", pinned)
    license_text = b"MIT License (fixture)\n"
    monkeypatch.setattr(
        dyknow_fetch, "LICENSE", replace(dyknow_fetch.LICENSE, sha256=hashlib.sha256(license_text).hexdigest())
    )
    served = {spec.url: compact(contents[spec.name]) for spec in pinned}
    served[dyknow_fetch.LICENSE.url] = license_text
    return served


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("EVOLVE_TRAIN_CACHE", str(root))
    return root


def test_the_pins_name_the_public_repository_at_one_commit():
    assert len(COMMIT) == 40
    for spec in (*FILES, dyknow_fetch.LICENSE):
        assert spec.url == f"https://raw.githubusercontent.com/sislab-unitn/DyKnow/{COMMIT}/{spec.path}"
        assert len(spec.sha256) == 64
    assert [spec.name for spec in FILES if spec.required] == ["grc_generated.json"]
    assert set(FILES[0].categories) == {"countries_byGDP", "athletes_byPayment", "companies_byRevenue", "organizations"}


def test_from_a_directory_then_data_dyknow_reads_the_cache_by_default(tmp_path, cache, release):
    copy = write_fixture(tmp_path / "copy")
    (copy / "LICENSE").write_text("MIT License (fixture)\n")
    assert cli.main(["fetch-data", "dyknow", "--from", str(copy)]) == 0
    target = default_root()
    assert target == cache / "data" / "dyknow"
    assert sorted(p.name for p in target.iterdir()) == [
        "LICENSE",
        "SOURCE.json",
        "grc_generated.json",
        "passages.json",
        "qa_generated.json",
    ]
    source = json.loads((target / "SOURCE.json").read_text())
    assert source["commit"] == COMMIT and source["files"]["grc_generated.json"]["matches"].startswith("categories")
    fetched = build_timeline(DataConfig(kind="dyknow", root=None, dyknow=DyKnowConfig(cuts=CUTS)))
    given = build_timeline(DataConfig(kind="dyknow", root=str(copy), dyknow=DyKnowConfig(cuts=CUTS)))
    assert [s.pairs for s in fetched.steps] == [s.pairs for s in given.steps]
    assert [e.items for e in fetched.eval_sets] == [e.items for e in given.eval_sets]
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary dir left


def test_from_the_file_itself_takes_what_lies_beside_it(tmp_path, cache, release):
    copy = write_fixture(tmp_path / "copy", passages=False)
    lines = []
    fetch(source=copy / "grc_generated.json", say=lines.append)
    assert sorted(p.name for p in default_root().iterdir()) == [
        "SOURCE.json",
        "grc_generated.json",
        "qa_generated.json",
    ]
    assert any("passages.json not beside" in line for line in lines)


def test_a_copy_with_categories_left_out_and_another_layout_passes(tmp_path, release):
    partial = {c: v for c, v in FACTS.items() if c != next(iter(FACTS))}
    path = tmp_path / "grc_generated.json"
    path.write_text(json.dumps(partial, indent=1, ensure_ascii=True))
    how = verify(path, dyknow_fetch.FILES[0])
    assert how == f"categories {', '.join(partial)} of the release"
    path.write_bytes(compact(FACTS))
    assert verify(path, dyknow_fetch.FILES[0]) == "the release file"


def test_an_edited_copy_is_refused_and_the_earlier_fetch_is_kept(tmp_path, cache, release):
    good = write_fixture(tmp_path / "good")
    fetch(source=good, say=lambda _: None)
    before = (default_root() / "grc_generated.json").read_bytes()
    facts = json.loads(json.dumps(FACTS))
    category = next(iter(facts))
    entity = next(iter(facts[category]))
    facts[category][entity] = {"edited": True}
    bad = write_fixture(tmp_path / "bad", facts)
    with pytest.raises(DataError, match=f"category '{category}' differs from the release's"):
        fetch(source=bad, say=lambda _: None)
    unknown = write_fixture(tmp_path / "unknown", {**FACTS, "planets": {}})
    assert cli.main(["fetch-data", "dyknow", "--from", str(unknown)]) == 2
    assert (default_root() / "grc_generated.json").read_bytes() == before
    assert not [p for p in default_root().parent.iterdir() if p.name.startswith(".")]


def test_a_from_without_the_facts_file_exits_2(tmp_path, cache, release, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["fetch-data", "dyknow", "--from", str(tmp_path / "empty")]) == 2
    assert "grc_generated.json is not in --from" in capsys.readouterr().err
    assert not default_root().exists()


def test_the_download_is_checked_byte_for_byte(cache, release, monkeypatch):
    requested = []

    def urlopen(url, timeout):
        requested.append(url)
        return io.BytesIO(release[url])

    monkeypatch.setattr(dyknow_fetch.urllib.request, "urlopen", urlopen)
    assert cli.main(["fetch-data", "dyknow"]) == 0
    assert len(requested) == 4 and all(COMMIT in url for url in requested)
    source = json.loads((default_root() / "SOURCE.json").read_text())
    assert {f["matches"] for f in source["files"].values()} == {"the release file"}

    release[dyknow_fetch.LICENSE.url] = b"another licence\n"
    with pytest.raises(DataError, match="is not the pinned"):
        fetch(say=lambda _: None)


def test_no_network_says_how_to_copy_instead(cache, release, monkeypatch, capsys):
    def urlopen(url, timeout):
        raise dyknow_fetch.urllib.error.URLError("no route to host")

    monkeypatch.setattr(dyknow_fetch.urllib.request, "urlopen", urlopen)
    assert cli.main(["fetch-data", "dyknow"]) == 2
    assert "fetch-data dyknow --from" in capsys.readouterr().err
    assert not default_root().exists()


def test_data_dyknow_without_a_fetched_copy_says_how_to_fetch(cache):
    with pytest.raises(DataError, match="evolve-data fetch-data dyknow") as err:
        build_timeline(DataConfig(kind="dyknow", root=None, dyknow=DyKnowConfig(cuts=CUTS)))
    assert str(cache / "data" / "dyknow") in str(err.value)
    with pytest.raises(DataError, match=r"not found in data.root \(.*nowhere\)"):
        build_timeline(DataConfig(kind="dyknow", root=str(Path(cache) / "nowhere"), dyknow=DyKnowConfig(cuts=CUTS)))


def test_dyknow_counts_reads_the_fetched_copy(tmp_path, cache, release, capsys):
    fetch(source=write_fixture(tmp_path / "copy"), say=lambda _: None)
    assert cli.main(["dyknow-counts", "--cuts", *CUTS]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:2] == ["0", "2000"]
