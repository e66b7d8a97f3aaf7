"""No import cycles in ``evolve_train`` and no import up a layer: the import graph, read with ``ast`` from every
module, is acyclic, and every edge points to the module's own layer or one below (:data:`LAYERS`: utils, errors,
config < data < models < training < methods < evaluation < reporting < run < cli).

Every ``import`` statement counts, at module level and inside functions alike (a late import only hides a
cycle). An edge goes from a module to the module it names: ``from pkg import name`` points at ``pkg.name``
when that is a module, else at ``pkg``; relative imports are resolved against the importing module's
package. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit edges are not
counted (every submodule would otherwise depend on its package's ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from helpers.processes import ROOT

PACKAGE_DIR = ROOT / "evolve_train"
PACKAGE = PACKAGE_DIR.name


def module_names(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package (a package is its ``__init__``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (PACKAGE,) + path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is a module of the package, else its longest prefix that is (None outside the package)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _from_base(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its file (see the module docstring)."""
    targets: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {_known(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node, path.name == "__init__.py")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else _known(base, modules))
    return {t for t in targets if t and t != module}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted; only those with a cycle."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module: ``[a, b, ..., a]``."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return paths[node] + [start]
                if child not in paths:
                    paths[child] = paths[node] + [child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def test_cycle_finder_on_a_known_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    components = strongly_connected(graph)
    assert components == [["a", "b", "c"], ["e", "f"]]
    assert a_cycle(graph, components[0]) == ["a", "b", "c", "a"]


def test_relative_and_from_imports_resolve_to_modules(tmp_path):
    root = tmp_path / PACKAGE
    (root / "sub").mkdir(parents=True)
    for name in ("__init__", "top", "sub/__init__", "sub/one", "sub/two"):
        (root / f"{name}.py").write_text("")
    modules = module_names(root)
    code = (
        "from . import two\nfrom .. import top\nfrom evolve_train.sub import one, helper\n"
        "def late():\n    import evolve_train.top.missing\n    from .two import thing\n"
    )
    (root / "sub" / "one.py").write_text(code)
    found = imports_of(f"{PACKAGE}.sub.one", root / "sub" / "one.py", modules)
    assert found == {f"{PACKAGE}.sub.two", f"{PACKAGE}.top", f"{PACKAGE}.sub"}


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and f"{PACKAGE}.run" in graph
    cycles = [
        f"{' -> '.join(a_cycle(graph, component))}  (all {len(component)} modules of this knot: {', '.join(component)})"
        for component in strongly_connected(graph)
    ]
    assert not cycles, "import cycles (module-level and function-level imports):\n" + "\n".join(cycles)


# --- layers: a module imports only from its own layer or the ones below ---------------------------------------

LAYERS: list[tuple[str, ...]] = [
    (
        PACKAGE,  # the package's __init__ (its version)
        f"{PACKAGE}.utils",
        f"{PACKAGE}.errors",
        f"{PACKAGE}.config",
        f"{PACKAGE}.config_keys",
        f"{PACKAGE}.config_renames",
        f"{PACKAGE}.config_identity",
        f"{PACKAGE}.config_strict",
        f"{PACKAGE}.compose",
    ),
    (f"{PACKAGE}.data",),
    (f"{PACKAGE}.models",),
    (f"{PACKAGE}.training",),
    (f"{PACKAGE}.methods",),
    (f"{PACKAGE}.evaluation", f"{PACKAGE}.tracking"),  # the rows of an evaluation and the loggers they go to
    (f"{PACKAGE}.reporting", f"{PACKAGE}.export"),  # read what the evaluation wrote
    (f"{PACKAGE}.run", f"{PACKAGE}.saved_eval", f"{PACKAGE}.hooks"),  # a run: its steps and what runs around them
    (f"{PACKAGE}.cli",),
]
"""Bottom to top. A module (or package) named here places itself and everything below it (the package's
``__init__`` only itself); a module that no entry covers fails the test, so a new top-level module says where it
sits."""

UPWARD_ALLOWED: set[tuple[str, str]] = set()
"""``(importing module, imported module or package)`` edges that may run up a layer while they are being
removed, each with a comment giving its reason. Empty: the last one, ``training.loop -> methods``, is gone (the
loop receives its hooks). An entry whose edge no longer exists fails :func:`test_allowed_upward_imports_exist`."""


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest entry that is ``module`` or a package above it."""
    best, best_len = None, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            below = name != PACKAGE and module.startswith(name + ".")  # the package's __init__ covers only itself
            if (module == name or below) and len(name) > best_len:
                best, best_len = index, len(name)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(module) and not any(
                module == source and (target == up or target.startswith(up + ".")) for source, up in UPWARD_ALLOWED
            ):
                found.append(
                    f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
    return found


def test_layer_of_a_module_is_its_longest_entry():
    assert layer_of(PACKAGE) == 0 and layer_of(f"{PACKAGE}.config") == 0 and layer_of(f"{PACKAGE}.utils.io") == 0
    assert layer_of(f"{PACKAGE}.data.loaders.dyknow") == 1 and layer_of(f"{PACKAGE}.cli.evaluate") == len(LAYERS) - 1
    assert layer_of(f"{PACKAGE}.configuration") is None  # a prefix of a name is not its package
    graph = {f"{PACKAGE}.data.x": {f"{PACKAGE}.evaluation.metrics", f"{PACKAGE}.config"}, f"{PACKAGE}.config": set()}
    assert upward_imports(graph) == [
        f"{PACKAGE}.data.x ({PACKAGE}.data) imports {PACKAGE}.evaluation.metrics ({PACKAGE}.evaluation)"
    ]


def test_every_module_has_a_layer():
    unplaced = [module for module in import_graph() if layer_of(module) is None]
    assert not unplaced, f"modules in no layer of LAYERS (add their package where it sits): {unplaced}"


def test_no_module_imports_from_a_higher_layer():
    found = upward_imports(import_graph())
    order = " < ".join("/".join(name.split(".")[-1] for name in names) for names in LAYERS)
    assert not found, f"imports that run up a layer ({order}; module-level and function-level):\n" + "\n".join(found)


def test_allowed_upward_imports_exist():
    graph = import_graph()
    stale = [
        (source, up)
        for source, up in sorted(UPWARD_ALLOWED)
        if not any(target == up or target.startswith(up + ".") for target in graph.get(source, ()))
    ]
    assert not stale, f"allowed upward imports that no longer exist (delete them from UPWARD_ALLOWED): {stale}"
