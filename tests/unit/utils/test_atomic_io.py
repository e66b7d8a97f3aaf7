"""The one atomic writer (``evolve_train/utils/io.py``): files and directories are written under
``.<name>.tmp-<pid>``, fsynced and renamed; a failed write leaves neither its temporary name nor a target;
``remove_stale_tmp`` removes leftovers of that scheme and nothing else."""

from __future__ import annotations

import errno
import os

import pytest

from evolve_train.utils import io as atomic_io
from evolve_train.utils.io import AlreadyPublished, atomic_dir, atomic_file, atomic_write_text, remove_stale_tmp


class Boom(Exception):
    pass


def names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_temporary_name_is_a_hidden_sibling_with_the_pid(tmp_path):
    tmp = atomic_io.tmp_path(tmp_path / "steps" / "3")
    assert tmp == tmp_path / "steps" / f".3.tmp-{os.getpid()}"
    assert atomic_io.is_tmp_name(tmp.name) and atomic_io.is_tmp_name(tmp.name, of="3")
    assert not atomic_io.is_tmp_name(tmp.name, of="30")


def test_a_text_write_replaces_the_file_and_a_failed_one_leaves_the_old_file_alone(tmp_path):
    target = tmp_path / "state.json"
    atomic_write_text(target, "one\n")
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n" and names(tmp_path) == ["state.json"]
    with pytest.raises(Boom):
        with atomic_file(target) as tmp:
            tmp.write_text("half")
            raise Boom
    assert target.read_text() == "two\n" and names(tmp_path) == ["state.json"]


@pytest.mark.parametrize("failure", [Boom, KeyboardInterrupt])
def test_a_failed_dir_write_leaves_no_temporary_dir_and_no_target(tmp_path, failure):
    final = tmp_path / "steps" / "1"
    with pytest.raises(failure):
        with atomic_dir(final) as tmp:
            (tmp / "model.safetensors").write_bytes(b"\0" * 100)
            assert names(tmp_path / "steps") == [f".1.tmp-{os.getpid()}"]  # only the temporary name meanwhile
            raise failure
    assert names(tmp_path / "steps") == []


def test_a_failed_rename_leaves_no_temporary_dir_and_no_target(tmp_path, monkeypatch):
    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_io.os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        with atomic_dir(tmp_path / "entry") as tmp:
            (tmp / "rows").write_text("x")
    assert names(tmp_path) == []


def test_a_published_dir_is_complete_fsynced_and_replaces_an_earlier_one(tmp_path, monkeypatch):
    final = tmp_path / "carry" / "2"
    final.mkdir(parents=True)
    (final / "stale.safetensors").write_text("from an earlier attempt")
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(atomic_io.os, "fsync", lambda fd: synced.append(os.fstat(fd).st_ino) or fsync(fd))
    with atomic_dir(final) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "optimizer.safetensors").write_bytes(b"1" * 10)
        (tmp / "sub" / "raw.safetensors").write_bytes(b"2" * 20)
    assert names(final) == ["optimizer.safetensors", "sub"] and names(final.parent) == ["2"]
    assert (final / "optimizer.safetensors").read_bytes() == b"1" * 10
    assert (final / "sub" / "raw.safetensors").read_bytes() == b"2" * 20
    every = [final / "optimizer.safetensors", final / "sub" / "raw.safetensors", final / "sub", final, final.parent]
    assert {p.stat().st_ino for p in every} <= set(synced)  # files, dirs, and the parent after the rename


def test_without_replace_a_dir_published_first_by_another_writer_is_kept(tmp_path):
    final = tmp_path / "cache" / "key"
    with atomic_dir(final, replace=False) as tmp:
        (tmp / "meta.json").write_text("first")
    with pytest.raises(AlreadyPublished):
        with atomic_dir(final, replace=False) as tmp:
            (tmp / "meta.json").write_text("second")
    assert (final / "meta.json").read_text() == "first" and names(final.parent) == ["key"]


def test_stale_cleanup_removes_only_leftovers_of_the_scheme(tmp_path):
    leftovers = [".1.tmp-1234", ".metrics.jsonl.tmp-99", ".step1-opt12.tmp-7"]
    (tmp_path / leftovers[0]).mkdir()
    (tmp_path / leftovers[0] / "model.safetensors").write_text("half")
    (tmp_path / leftovers[1]).write_text("half")
    (tmp_path / leftovers[2]).mkdir()
    kept = [".key.lock", "out.tmp", ".t.tmp", ".a.tmp-x", "a.tmp-12", ".write-probe-1", "1", "metrics.jsonl"]
    for name in kept:
        (tmp_path / name).write_text("mine")
    nested = tmp_path / "predictions" / "step_0"
    nested.mkdir(parents=True)
    (nested / ".set.jsonl.tmp-5").write_text("half")

    assert remove_stale_tmp(tmp_path, of="1") == [tmp_path / ".1.tmp-1234"]
    assert remove_stale_tmp(tmp_path) == [tmp_path / leftovers[1], tmp_path / leftovers[2]]
    assert names(tmp_path) == sorted([*kept, "predictions"])
    assert names(nested) == [".set.jsonl.tmp-5"]  # not recursive unless asked
    assert remove_stale_tmp(tmp_path / "predictions", recursive=True) == [nested / ".set.jsonl.tmp-5"]
    assert names(nested) == [] and remove_stale_tmp(tmp_path / "missing") == []
