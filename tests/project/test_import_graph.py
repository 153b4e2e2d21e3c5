"""The package's import graph: one direction, no cycle (docs/design.md#package-layout).

Every `import` in `mmjax/` is read from the source (function-local imports included: a lazy import is still a
dependency) and mapped to its top-level unit (`mmjax.<package or module>`). Every unit has a declared floor
(`FLOORS`, the table of docs/design.md#package-layout) and imports only units on lower floors — so the graph has no
cycle, units of one floor never import each other (`evaluation` and `train`: neither sees the other) and only the
composition root (`mmjax.experiment`, the top floor) sees both. The programs beside the package (the reproduction study
`reproduce/`, `bench/`, `scripts/`) are outside it: the library imports none of them, and the study imports the
library only through its public modules.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "mmjax"

# floor -> units on it; a unit imports only units on strictly lower floors (docs/design.md#package-layout).
FLOORS = {
    0: {"matching", "data", "batching", "normalize", "jsonl", "provenance"},
    1: {"similarity"},
    2: {"sharded_similarity"},
    3: {"losses", "flowclip"},
    4: {"models"},
    5: {"train", "evaluation"},
    6: {"tasks", "config_validation"},
    7: {"experiment", "retriever"},
}
FLOOR = {unit: floor for floor, units in FLOORS.items() for unit in units}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mmjax"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("mmjax"):
            out.add(node.module)
            if node.module == "mmjax":  # `from mmjax import matching`
                out.update(f"mmjax.{a.name}" for a in node.names)
    return out


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _graphs():
    modules, units = {}, {}
    for path in ROOT.rglob("*.py"):
        name = _module_name(path)
        deps = _imports(path)
        modules[name] = deps
        u = _unit(name)
        if u is not None:
            units.setdefault(u, set()).update(d for d in map(_unit, deps) if d is not None and d != u)
    return modules, units


def _closure(graph: dict, start: str) -> set[str]:
    seen, todo = set(), list(graph.get(start, ()))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(graph.get(n, ()))
    return seen


def _find_cycle(graph: dict):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_walk_sees_known_edges():
    """The walker itself works: edges that exist are found (guards against a test that passes on an empty graph)."""
    modules, units = _graphs()
    assert "mmjax.matching" in modules["mmjax.similarity"]
    assert {"tasks", "train", "evaluation"} <= units["experiment"]
    assert len(modules) > 80


def test_units_form_no_cycle():
    _, units = _graphs()
    assert _find_cycle(units) is None, f"import cycle between packages: {' -> '.join(_find_cycle(units))}"


def test_modules_form_no_cycle():
    modules, _ = _graphs()
    graph = {m: {d for d in deps if d in modules and d != m and not m.startswith(d + ".")}
             for m, deps in modules.items()}
    assert _find_cycle(graph) is None, f"import cycle between modules: {' -> '.join(_find_cycle(graph))}"


def test_every_unit_has_a_declared_floor():
    """A new package (or top-level module) must be placed in `FLOORS` before it can be imported by others."""
    _, units = _graphs()
    undeclared = sorted((set(units) | {d for deps in units.values() for d in deps}) - set(FLOOR))
    assert not undeclared, f"units without a floor in FLOORS: {undeclared}"
    assert set(FLOOR) <= set(units), f"FLOORS names units that do not exist: {sorted(set(FLOOR) - set(units))}"


@pytest.mark.parametrize("unit", sorted(FLOOR))
def test_layering(unit):
    _, units = _graphs()
    bad = sorted(d for d in units.get(unit, ()) if FLOOR.get(d, 99) >= FLOOR[unit])
    assert not bad, (f"mmjax.{unit} (floor {FLOOR[unit]}) imports {[(d, FLOOR.get(d)) for d in bad]}: only units on "
                     f"lower floors may be imported")


def test_matching_depends_on_jax_numpy_only():
    for path in (ROOT / "matching").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                assert top in {"jax", "numpy", "math", "functools", "typing", "itertools", "collections",
                               "dataclasses", "__future__", "mmjax", "optax", "warnings", "inspect"}, (path.name, name)
                if top == "mmjax":
                    assert name.startswith("mmjax.matching"), (path.name, name)


# ---------------------------------------------------------------- applications beside the package

REPO = ROOT.parent
APPLICATIONS = {"reproduce", "bench", "scripts", "tests", "train", "evaluate"}  # top-level names outside the package


def _top_level_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `path`, function-local ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "mmjax":  # `from mmjax import experiment`
                out += [(node.lineno, f"mmjax.{a.name}") for a in node.names]
    return out


def test_the_library_imports_no_application():
    """Nothing in `mmjax/` imports the reproduction study (`reproduce/`) or any other program beside the package."""
    bad = [f"{p.relative_to(REPO)}:{line} imports {m}" for p in ROOT.rglob("*.py")
           for line, m in _top_level_imports(p) if m.split(".")[0] in APPLICATIONS]
    text_refs = [str(p.relative_to(REPO)) for p in ROOT.rglob("*.py")
                 if re.search(r"""(import_module|__import__)\(\s*["']reproduce""", p.read_text())]
    assert not bad and not text_refs, bad + text_refs


def test_the_reproduction_study_uses_mmjax_as_a_user_would():
    """`reproduce/` reaches mmjax only through imports of its public modules (no `_private` module, no name that is
    not a module or package of mmjax), never by path: no `sys.path` edits, no relative import above the package, no
    other program of the repository."""
    study = REPO / "reproduce"
    files = sorted(study.glob("*.py"))
    assert len(files) >= 10, files
    mmjax_imports, bad = set(), []
    for path in files:
        rel = path.relative_to(REPO)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                bad.append(f"{rel}:{node.lineno}: relative import above the package")
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                bad.append(f"{rel}:{node.lineno}: sys.path")
        for line, m in _top_level_imports(path):
            top = m.split(".")[0]
            if top == "mmjax":
                mmjax_imports.add(m)
                if any(part.startswith("_") for part in m.split(".")):
                    bad.append(f"{rel}:{line}: private module {m}")
            elif top in APPLICATIONS - {"reproduce"}:
                bad.append(f"{rel}:{line}: imports {m}")
    for m in sorted(mmjax_imports):  # each names a module or package of the library, not a file reached otherwise
        parts = m.split(".")[1:]
        target = ROOT.joinpath(*parts)
        if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
            bad.append(f"{m}: not a module of mmjax")
    assert {"mmjax.experiment", "mmjax.batching"} <= mmjax_imports, mmjax_imports  # the walker sees them
    assert not bad, bad
