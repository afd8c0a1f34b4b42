"""The repository stands alone: no path or spec outside it, and library docstrings explain
rather than record history (timings live in benchmarks/HISTORY.md)."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the project once cited from outside itself: the shared spec and the source papers by
# their file names. docs/design.md and the papers' titles replace them.
OUTSIDE = re.compile(r"\.\./shared|shared/DESIGN|DESIGN §|\bseed 00\d|\bthe seed's\b", re.I)
# Timings and session history in a library docstring (HISTORY.md is their place).
HISTORY = re.compile(
    r"\b\d+(\.\d+)?\s*(ns|µs|us|ms)\s+per\b|\bmeasured on\b|\b(this|last|previous) session\b",
    re.I,
)


def _tracked(*suffixes: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    files = [ROOT / f for f in out.split("\0") if f.endswith(suffixes)]
    return [f for f in files if "benchmarks/results" not in f.as_posix() and f.is_file()]


def test_nothing_cites_a_path_or_spec_outside_the_repository():
    hits = [
        f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
        for f in _tracked(".py", ".md", ".yaml", ".toml", ".sh", ".cfg")
        if f.name != "test_self_contained.py"
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_library_docstrings_hold_no_timings_or_session_history():
    hits = []
    for pkg in ("coevo_jax", "rollout_bridge"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text())
            for node in ast.walk(tree):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node) or ""
                    for m in HISTORY.finditer(doc):
                        hits.append(
                            f"{f.relative_to(ROOT)}: {getattr(node, 'name', '<module>')}: {m.group(0)!r}"
                        )
    assert not hits, "\n".join(hits)


def test_the_patterns_catch_what_they_are_for():
    assert OUTSIDE.search("Read `../shared/DESIGN.md` first")
    assert OUTSIDE.search("as DESIGN §4 says") and OUTSIDE.search("seed 001, eq. 3")
    assert HISTORY.search("6.5 ns per element") and HISTORY.search("measured on a Zen 3 box")
    assert not HISTORY.search("one CoDream session per failure; start_new_session=True")
