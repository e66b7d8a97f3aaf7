"""Installs the packages this interpreter lacks from the wheels carried with the tree, for a GPU machine without
network (scripts/gpu_env.sh runs it; scripts/gpu_check.sh sources that).

    python3 scripts/gpu_env.py [--wheels .gpu_wheels] [--target .gpu_deps] [--table scripts/gpu_wheels.txt]

For each package of the table (``package==version module``) whose module does not import here (a package an
earlier run installed into the target counts as there), picks its wheel in --wheels (scripts/gpu_wheels.sh
downloads them), one whose tags this interpreter accepts, and installs those wheels with

    python3 -m pip install --no-index --no-deps --target <target> <wheels>

(without pip: unpacks them there, which is what pip does for these wheels). Then imports every module of the table
in a fresh interpreter with the target on the path. Says what it did on stderr, one line a step; prints the
target's absolute path on stdout when some module of the table comes from it (the caller puts it on PYTHONPATH),
nothing otherwise. Exit status 1 when a missing package has no wheel, or the install or the import check fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


def read_table(path: Path) -> list[tuple[str, str, str]]:
    """(name, version, module) of each line of the table."""
    out = []
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            name, _, version = fields[0].partition("==")
            out.append((name, version, fields[1]))
    return out


def origin(module: str) -> str | None:
    """Where ``module`` would be imported from; None when it would not import."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or (list(spec.submodule_search_locations or []) or [""])[0]


def accepted_tags() -> set[str]:
    try:
        from packaging.tags import sys_tags
    except ImportError:  # no packaging: pure-Python and this CPython's own tags, any Linux x86-64 platform
        version = f"{sys.version_info.major}{sys.version_info.minor}"
        return {"py3-none-any", f"py{version}-none-any", f"cp{version}-cp{version}-linux_x86_64"}
    return {str(tag) for tag in sys_tags()}


def wheel_tags(filename: str) -> set[str]:
    """The tags a wheel's file name declares (``name-version[-build]-python-abi-platform.whl``)."""
    python, abi, platform = filename[: -len(".whl")].split("-")[-3:]
    tags = {f"{p}-{a}-{q}" for p in python.split(".") for a in abi.split(".") for q in platform.split(".")}
    if any(q.startswith("manylinux") for q in platform.split(".")):  # sys_tags lists manylinux tags by glibc
        tags |= {f"{p}-{a}-linux_x86_64" for p in python.split(".") for a in abi.split(".") if "x86_64" in platform}
    return tags


def find_wheel(wheels: Path, name: str, version: str, accepted: set[str]) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", name).lower() + "-" + version + "-"
    for path in sorted(wheels.glob("*.whl")):
        if path.name.lower().startswith(stem) and wheel_tags(path.name) & accepted:
            return path
    return None


def unpack(wheel: Path, target: Path) -> None:
    """A wheel's files into ``target``, its ``<name>.data/purelib`` and ``platlib`` folders merged in."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    for data in target.glob("*.data"):
        for kind in ("purelib", "platlib"):
            if (data / kind).is_dir():
                shutil.copytree(data / kind, target, dirs_exist_ok=True)
        shutil.rmtree(data)


def install(wheels: list[Path], target: Path) -> str:
    target.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("pip") is not None:
        command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--upgrade", "--target"]
        command += [str(target), "--disable-pip-version-check", "--no-warn-script-location", "--quiet"]
        done = subprocess.run(command + [str(w) for w in wheels], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip install failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return "pip install --no-index --no-deps --target"
    for wheel in wheels:
        unpack(wheel, target)
    return "unpacked (no pip)"


def main(argv=None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, default=here.parent / ".gpu_wheels")
    parser.add_argument("--target", type=Path, default=here.parent / ".gpu_deps")
    parser.add_argument("--table", type=Path, default=here / "gpu_wheels.txt")
    args = parser.parse_args(argv)
    target = args.target.resolve()
    table = read_table(args.table)

    def say(line: str) -> None:
        print(f"gpu_env: {line}", file=sys.stderr, flush=True)

    if target.is_dir():
        sys.path.insert(0, str(target))
    missing = [(name, version, module) for name, version, module in table if origin(module) is None]
    absent: list[str] = []
    if missing:
        accepted = accepted_tags()
        found = {name: find_wheel(args.wheels, name, version, accepted) for name, version, _ in missing}
        absent = [f"{name}=={version}" for name, version, _ in missing if found[name] is None]
        if absent:  # the others are still installed: the parts that need only them can run
            say(
                f"no wheel for {', '.join(absent)} in {args.wheels} for this interpreter (python "
                f"{sys.version_info.major}.{sys.version_info.minor}): run `bash scripts/gpu_wheels.sh` where pip "
                "reaches the package index, and bring the folder along"
            )
        chosen = [found[name] for name, _, _ in missing if found[name] is not None]
        if chosen:
            try:
                how = install(chosen, target)
            except RuntimeError as error:
                say(str(error))
                return 1
            importlib.invalidate_caches()
            if str(target) not in sys.path:
                sys.path.insert(0, str(target))
            say(f"installed {len(chosen)} missing: {' '.join(w.name for w in chosen)} ({how} {target})")
    else:
        say(f"nothing to install: every package of {args.table.name} imports")
    from_target = [module for _, _, module in table if (origin(module) or "").startswith(str(target) + os.sep)]
    present = [f"{n}=={v}" for n, v, module in table if module not in from_target and f"{n}=={v}" not in absent]
    if from_target and present:
        say(f"already there: {' '.join(present)}")
    env = dict(os.environ)
    if from_target:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(target)]))
    modules = [module for name, version, module in table if f"{name}=={version}" not in absent]
    check = "import " + ", ".join(modules)
    done = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
    if from_target:
        print(target)
    if done.returncode != 0:
        say(f"import check failed ({check}): {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        return 1
    say(
        f"import check: {len(modules)} modules import" + (f" ({len(from_target)} from {target})" if from_target else "")
    )
    return 1 if absent else 0


if __name__ == "__main__":
    sys.exit(main())
