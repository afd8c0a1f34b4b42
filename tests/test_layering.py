"""The package layering of docs/design.md §1 ("Layers"), checked on the source with ``ast``.

Every import between the project's own modules counts, at module level or inside a function
(a function-local import is a dependency too; it only runs later). The units are the
subpackages of ``coevo_jax`` (``coevo_jax.models``, ``coevo_jax.lora``, ...), its top-level
modules (``coevo_jax._config``, ``coevo_jax.text_llm``), ``rollout_bridge`` as a whole, and
each command-line module (``*.cli``, ``__main__``), which forms the entry-point layer on top.

Two rules: no cycle between units, and no import from a lower layer to a higher one.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("coevo_jax", "rollout_bridge")
# Packages whose subpackages and top-level modules are units of their own; any other
# package is one unit.
SPLIT = ("coevo_jax",)
ENTRY_POINTS = "entry points"

# Lowest first. A unit may import units of its own layer or below (the cycle check keeps
# imports inside a layer one-way). Keep in step with docs/design.md §1.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "base",
        frozenset({"coevo_jax", "coevo_jax._errors", "coevo_jax._config", "coevo_jax.text_llm"}),
    ),
    (
        "sharding, adapters, records",
        frozenset({"coevo_jax.parallel", "coevo_jax.lora", "coevo_jax.data"}),
    ),
    ("decoder", frozenset({"coevo_jax.models"})),
    (
        "algorithms",
        frozenset({"coevo_jax.rewards", "coevo_jax.rl", "coevo_jax.router", "coevo_jax.aggregate"}),
    ),
    ("rollout bridge", frozenset({"rollout_bridge"})),
    (
        "loop, evaluation, orchestrators",
        frozenset({"coevo_jax.train", "coevo_jax.eval", "coevo_jax.orchestrators"}),
    ),
    (ENTRY_POINTS, frozenset()),  # every *.cli / __main__ module
)


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement from module ``src`` of ``dst`` (``file:line`` in ``where``)."""

    src: str
    dst: str
    where: str
    local: bool  # inside a function


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(root: Path, packages: Sequence[str]) -> list[Import]:
    """Every import of a module of ``packages`` by a module of ``packages`` under ``root``."""
    files = {
        _module_name(f, root): f for pkg in packages for f in sorted((root / pkg).rglob("*.py"))
    }
    out: list[Import] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        local: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                local.update(id(n) for n in ast.walk(node) if n is not node)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # ``from pkg import sub`` depends on the submodule ``pkg.sub``.
                targets = [
                    f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else mod for a in node.names
                ]
            else:
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            for dst in dict.fromkeys(targets):
                if dst.split(".")[0] in packages:
                    out.append(Import(module, dst, where, id(node) in local))
    return out


def unit_of(module: str, split: Sequence[str] = SPLIT) -> str:
    """The unit a module belongs to (see the module docstring)."""
    parts = module.split(".")
    if parts[-1] in ("cli", "__main__"):
        return module
    if parts[0] in split and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def unit_graph(
    imports: Iterable[Import], split: Sequence[str] = SPLIT
) -> dict[tuple[str, str], list[Import]]:
    """``(unit, unit) -> the imports behind that edge``, self-edges dropped."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        a, b = unit_of(imp.src, split), unit_of(imp.dst, split)
        if a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def cycles(edges: Mapping[tuple[str, str], list[Import]]) -> list[list[str]]:
    """The strongly connected components with more than one unit (Tarjan), sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(unit: str, layers: Sequence[tuple[str, frozenset[str]]] = LAYERS) -> int | None:
    """The index of ``unit``'s layer; entry points are the last layer; None if undeclared."""
    for i, (name, units) in enumerate(layers):
        if unit in units or (
            name == ENTRY_POINTS and unit.rpartition(".")[2] in ("cli", "__main__")
        ):
            return i
    return None


def upward_imports(
    edges: Mapping[tuple[str, str], list[Import]],
    layers: Sequence[tuple[str, frozenset[str]]] = LAYERS,
) -> list[str]:
    """One line per import that goes from a lower layer up to a higher one."""
    out = []
    for (a, b), imps in sorted(edges.items()):
        la, lb = layer_of(a, layers), layer_of(b, layers)
        if la is not None and lb is not None and lb > la:
            for imp in imps:
                kind = "function-local" if imp.local else "module-level"
                out.append(
                    f"{imp.where}: {imp.src} imports {imp.dst} ({kind}): layer "
                    f"{layers[la][0]!r} may not import layer {layers[lb][0]!r}"
                )
    return out


def describe_cycles(edges: Mapping[tuple[str, str], list[Import]]) -> list[str]:
    """One line per cycle, naming an import behind each edge inside it."""
    out = []
    for comp in cycles(edges):
        inside = [
            f"{a} -> {b} ({imps[0].where})"
            for (a, b), imps in sorted(edges.items())
            if a in comp and b in comp
        ]
        out.append(f"cycle between {', '.join(comp)}: " + "; ".join(inside))
    return out


# ---------------------------------------------------------------------------------------------


def test_project_units_are_all_declared():
    edges = unit_graph(project_imports(ROOT, PACKAGES))
    units = {u for edge in edges for u in edge}
    undeclared = sorted(u for u in units if layer_of(u) is None)
    assert not undeclared, f"units missing from LAYERS (and docs/design.md §1): {undeclared}"


def test_no_cycles_between_packages():
    problems = describe_cycles(unit_graph(project_imports(ROOT, PACKAGES)))
    assert not problems, "\n".join(problems)


def test_no_import_goes_up_the_layers():
    problems = upward_imports(unit_graph(project_imports(ROOT, PACKAGES)))
    assert not problems, "\n".join(problems)


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


TINY_LAYERS = (
    ("low", frozenset({"pkg.low"})),
    ("high", frozenset({"pkg.high"})),
    (ENTRY_POINTS, frozenset()),
)


def test_checker_reports_a_cycle_made_by_a_function_local_import(tmp_path):
    _write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": """
                def f():
                    from pkg.high import b  # the cycle this test plants
                    return b
            """,
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "from ..low import a\n",
            "pkg/cli.py": "from pkg.high import b\n",
        },
    )
    imports = project_imports(tmp_path, ("pkg",))
    edges = unit_graph(imports, split=("pkg",))
    assert sorted(edges) == [
        ("pkg.cli", "pkg.high"),
        ("pkg.high", "pkg.low"),
        ("pkg.low", "pkg.high"),
    ]
    assert cycles(edges) == [["pkg.high", "pkg.low"]]
    [line] = describe_cycles(edges)
    assert "pkg/low/a.py:3" in line and "pkg/high/b.py:1" in line
    [up] = upward_imports(edges, TINY_LAYERS)
    assert up.startswith("pkg/low/a.py:3: pkg.low.a imports pkg.high.b (function-local)")
    assert "'low' may not import layer 'high'" in up


def test_checker_passes_a_one_way_tree(tmp_path):
    _write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "",
            "pkg/high/__init__.py": "from pkg.low import a\n",
            "pkg/cli.py": "def main():\n    from pkg import high\n",
        },
    )
    edges = unit_graph(project_imports(tmp_path, ("pkg",)), split=("pkg",))
    assert sorted(edges) == [("pkg.cli", "pkg.high"), ("pkg.high", "pkg.low")]
    assert cycles(edges) == []
    assert upward_imports(edges, TINY_LAYERS) == []
