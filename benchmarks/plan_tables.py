"""The `coevo plan` tables of benchmarks/README.md and docs/design.md, generated from the
committed plan JSON (``benchmarks/results/plan-*.json``), never typed.

Each table sits between ``<!-- plan-table:NAME -->`` and ``<!-- /plan-table -->`` in a
Markdown file; this script rewrites what is between them.

    python -m benchmarks.plan_tables            # rewrite the tables
    python -m benchmarks.plan_tables --check    # exit 1 if a table differs from its JSON
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FILES = (ROOT / "benchmarks" / "README.md", ROOT / "docs" / "design.md")
GB = 1e9


def _num(x: float) -> str:
    """3 significant figures, thousands separated (``31,000``, ``984``, ``0.0734``)."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{round(x, -int(len(str(int(abs(x)))) - 3)):,.0f}"
    return f"{x:.3g}"


def _gb(x: float) -> str:
    return f"{x / GB:.2f}"


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"plan-{name}.json").read_text())


def _peak_line(plan: dict) -> str:
    res = plan["resident_bytes"]
    parts = ", ".join(
        f"{label} {_gb(res[key])}"
        for key, label in (
            ("backbones", "backbones"),
            ("policies", "policy states"),
            ("router", "router"),
            ("engine_adapters", "engine adapters"),
        )
        if res.get(key)
    )
    peak, budget = plan["peak_bytes"], plan["budget_bytes"]
    add = peak - res["total"]
    verdict = "fits" if plan["fits"] else f"does not fit (over by {_gb(peak - budget)} GB)"
    mesh = plan["mesh"]
    where = (
        "1 device (no mesh)"
        if plan["devices"] == 1
        else f"{plan['devices']} devices ({', '.join(f'{k}: {v}' for k, v in mesh.items() if v > 1)})"
    )
    return (
        f"- {where}: resident {_gb(res['total'])} GB ({parts}) + `{plan['peak_program']}` "
        f"{_gb(add)} = peak **{peak / GB:.1f} GB** against {budget / GB:.0f} GB: {verdict}."
    )


def homogeneous_table() -> str:
    """Per program at 1 and 8 devices, and both peaks."""
    one, eight = _load("paper_homogeneous-1"), _load("paper_homogeneous-8")
    rows = [
        "| program | TFLOP/device, 1 device | 8 devices | 8 / 1 | temp GB, 1 device | 8 devices "
        "| args GB (8) | collective GB/step (8) | in peak |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, p8 in eight["programs"].items():
        p1 = one["programs"][name]
        rows.append(
            f"| `{name}` | {_num(p1['flops_per_device'] / 1e12)} | "
            f"{_num(p8['flops_per_device'] / 1e12)} | "
            f"{p8['flops_per_device'] / p1['flops_per_device']:.3f} | "
            f"{_gb(p1['temp_bytes'])} | {_gb(p8['temp_bytes'])} | {_gb(p8['argument_bytes'])} | "
            f"{p8['collective_bytes'] / GB:.1f} | {'yes' if p8['in_peak'] else 'no'} |"
        )
    return "\n".join([*rows, "", _peak_line(one), _peak_line(eight)])


def heterogeneous_table() -> str:
    """Per program at 8 devices, and the peak."""
    plan = _load("paper_heterogeneous-8")
    rows = [
        "| program | TFLOP/device | temp GB | args GB | collective GB/step | in peak |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for prog, p in plan["programs"].items():
        rows.append(
            f"| `{prog}` | {_num(p['flops_per_device'] / 1e12)} | {_gb(p['temp_bytes'])} | "
            f"{_gb(p['argument_bytes'])} | {p['collective_bytes'] / GB:.1f} | "
            f"{'yes' if p['in_peak'] else 'no'} |"
        )
    return "\n".join([*rows, "", _peak_line(plan)])


TABLES = {
    "homogeneous": homogeneous_table,
    "heterogeneous": heterogeneous_table,
}
BLOCK = re.compile(
    r"(<!-- plan-table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(\n<!-- /plan-table -->)", re.S
)


def render(text: str) -> str:
    """``text`` with every plan-table block replaced by its table."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a table is out of date")
    args = p.parse_args(argv)
    stale = []
    for path in FILES:
        text = path.read_text()
        new = render(text)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print("out of date: " + ", ".join(str(s.relative_to(ROOT)) for s in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
