"""`evolve-train`: the overrides of `python train.py`, from any directory, with the configs shipped in the package
and a user's own config folder (--config-dir or EVOLVE_TRAIN_CONFIG_DIR)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY

from helpers.cli import REPO, evolve_train


def test_runs_from_any_directory_and_writes_its_run_dir_there(tmp_path):
    done = evolve_train([*TINY, "eval.evaluators=[splits]"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = list((tmp_path / "runs").rglob("summary.json"))
    assert summary.parent.relative_to(tmp_path).parts[:3] == ("runs", "default", "full")
    assert json.loads(summary.read_text())["em"]


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel ``python -m build`` makes of a copy of the sources (sdist first, then the wheel from the sdist, so
    MANIFEST.in and the setup.py hook are both exercised); the copy because the build writes next to the sources."""
    root = tmp_path_factory.mktemp("build")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    for name in ("evolve_train", "configs"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    pytest.importorskip("build", reason="the `build` package (pip install -e '.[test]')")
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), str(source)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, (build.stdout + build.stderr)[-3000:]
    (wheel,) = (root / "dist").glob("*.whl")
    return wheel


def test_a_built_wheel_carries_the_configs(tmp_path, built_wheel):
    import evolve_train

    assert built_wheel.name.startswith(f"evolve_train-{evolve_train.__version__}-")
    target = tmp_path / "site"
    shutil.unpack_archive(built_wheel, target, "zip")
    probe = "from evolve_train.compose import CONFIG_DIR; print(CONFIG_DIR)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shipped = Path(done.stdout.decode().strip())
    assert shipped == target / "evolve_train" / "configs" and (shipped / "config.yaml").is_file()
    assert {p.name for p in (shipped / "experiment").glob("*.yaml")} == {
        p.name for p in (REPO / "configs" / "experiment").glob("*.yaml")
    }


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_runs_evolve_train_and_the_demo_from_another_directory(tmp_path, built_wheel):
    """The wheel installed (without its dependencies) into a new virtual environment, which sees the dependencies
    of this one through a path file (torch and the rest are not downloaded again), and nothing of this checkout:
    from an unrelated directory, `evolve-train` composes the shipped configs and the demo's three parts run on a
    small world (train every time step, `evolve-report`, the band check)."""
    import site

    import evolve_train

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dependencies = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "dependencies.pth").write_text("\n".join(dependencies) + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(built_wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(WANDB_MODE="disabled", HF_HUB_OFFLINE="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
        return done

    probe = "import evolve_train as e, importlib.metadata as m; print(e.__file__); print(e.__version__, m.version('evolve-train'))"
    where, versions = run(str(python), "-c", probe).stdout.split("\n")[:2]
    assert Path(where).is_relative_to(venv) and versions.split() == [evolve_train.__version__] * 2
    assert "experiment" in run("evolve-train", "--help").stdout
    run("evolve-train", *TINY, "hydra.run.dir=runs/demo")
    assert json.loads((elsewhere / "runs" / "demo" / "summary.json").read_text())["em"]
    run("evolve-report", "runs/demo", "--out", "runs/demo/report")
    assert (elsewhere / "runs" / "demo" / "report" / "report.html").is_file()
    assert "demo check" in run(str(python), "-m", "evolve_train.reporting.demo_check", "runs/demo").stdout
