"""scripts/gpu_env.py on small hand-made wheels: it installs (pip --no-index --no-deps --target, or unpacked where
pip is missing) only the packages whose module does not import, picks the wheel whose tags this interpreter
accepts, counts an earlier install as there, and says which wheel is missing. Seconds."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_env  # noqa: E402

TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def make_wheel(folder: Path, name: str, version: str, tags: str = "py3-none-any", value: str = "1") -> Path:
    """A one-module wheel: ``import <name>`` gives ``VALUE``."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: {tags}\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-{tags}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def gpu_env_run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_env.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def table(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "gpuenvprobe_a", "1.0")
    make_wheel(wheels, "gpuenvprobe_b", "2.0", tags="cp39-cp39-manylinux2014_x86_64", value="wrong interpreter")
    make_wheel(wheels, "gpuenvprobe_b", "2.0", tags=f"py{TAG[2:]}-none-any", value="this interpreter")
    path = tmp_path / "table.txt"
    path.write_text(
        "# package==version module\ngpuenvprobe-a==1.0  gpuenvprobe_a\ngpuenvprobe_b==2.0 gpuenvprobe_b\njson==0 json\n"
    )
    return wheels, path


def test_only_the_missing_packages_are_installed_and_a_second_run_installs_nothing(tmp_path, table):
    wheels, path = table
    target = tmp_path / "deps"
    args = ("--wheels", str(wheels), "--target", str(target), "--table", str(path))
    first = gpu_env_run(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == str(target.resolve())  # the folder to put on PYTHONPATH
    assert "installed 2 missing: gpuenvprobe_a-1.0-py3-none-any.whl gpuenvprobe_b-2.0-py" in first.stderr
    assert "pip install --no-index --no-deps --target" in first.stderr and "json" not in first.stderr.split("\n")[0]
    assert "already there: json==0" in first.stderr and "import check: 3 modules import (2 from" in first.stderr
    assert (target / "gpuenvprobe_b" / "__init__.py").read_text() == "VALUE = 'this interpreter'\n"
    assert not (target / "json").exists()
    second = gpu_env_run(tmp_path, *args)
    assert second.returncode == 0 and second.stdout.strip() == str(target.resolve()), second.stderr
    assert "nothing to install" in second.stderr


def test_nothing_missing_leaves_the_path_alone(tmp_path):
    path = tmp_path / "table.txt"
    path.write_text("json==0 json\n")
    done = gpu_env_run(tmp_path, "--wheels", str(tmp_path), "--target", str(tmp_path / "deps"), "--table", str(path))
    assert done.returncode == 0 and done.stdout == "" and "nothing to install" in done.stderr, done.stderr
    assert not (tmp_path / "deps").exists()


def test_a_missing_wheel_is_named_and_the_others_installed(tmp_path, table):
    wheels, path = table
    path.write_text(path.read_text() + "gpuenvprobe-c==3.0 gpuenvprobe_c\n")
    target = tmp_path / "deps"
    done = gpu_env_run(tmp_path, "--wheels", str(wheels), "--target", str(target), "--table", str(path))
    assert done.returncode == 1
    assert "no wheel for gpuenvprobe-c==3.0" in done.stderr and "installed 2 missing" in done.stderr, done.stderr
    assert (target / "gpuenvprobe_a").is_dir()


def test_without_pip_the_wheels_are_unpacked(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "gpuenvprobe_d", "1.0")
    with zipfile.ZipFile(wheel, "a") as archive:  # a file under <name>.data/purelib goes to the top
        archive.writestr("gpuenvprobe_d-1.0.data/purelib/gpuenvprobe_e.py", "VALUE = 'e'\n")
    gpu_env.unpack(wheel, tmp_path / "deps")
    assert (tmp_path / "deps" / "gpuenvprobe_d" / "__init__.py").is_file()
    assert (tmp_path / "deps" / "gpuenvprobe_e.py").is_file() and not list((tmp_path / "deps").glob("*.data"))


def test_a_wheel_is_picked_by_its_tags():
    accepted = gpu_env.accepted_tags()
    assert gpu_env.wheel_tags(f"x-1-{TAG}-{TAG}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl") & accepted or (
        sys.platform != "linux"
    )
    assert not gpu_env.wheel_tags("x-1-cp39-cp39-manylinux2014_x86_64.whl") & accepted
    assert gpu_env.wheel_tags("x-1-py3-none-any.whl") & accepted
