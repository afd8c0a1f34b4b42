"""Per-device FLOPs and collective bytes of one execution of a compiled, partitioned program,
read off its HLO text (``compiled.as_text()``), for ``coevo plan`` (``coevo_jax.train.plan``).

``compiled.cost_analysis()`` counts a loop body once, so a step that scans its layers and
micro-batches is understated by the trip counts. Here every ``while`` body is counted its
``known_trip_count`` times (XLA records it in the loop's backend config), a conditional at its
costliest branch, fusions and calls once. FLOPs are those of the matrix products (``dot``:
``2 x |result| x |contracted dims|``), what MFU counts; elementwise work is left out.
Collective bytes are the result sizes of every all-gather, all-reduce, reduce-scatter,
all-to-all and collective-permute: an estimate of what each device moves (a ring all-reduce
moves about twice its size).
"""

from __future__ import annotations

import functools
import math
import re

_DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
                "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
                "c128": 16}  # fmt: skip
_SHAPE = re.compile(r"\b(pred|bf16|f8\w*|[suf]\d+|c64|c128)\[([\d,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([^\s(]+)\s*\(.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_CALLEE = re.compile(r"\b(body|calls|to_apply|true_computation|false_computation)=%?([^\s,})]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")


def _shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(d, tuple(int(x) for x in dims.split(",") if x)) for d, dims in _SHAPE.findall(text)]


def _nbytes(dtype: str, dims: tuple[int, ...]) -> float:
    return math.prod(dims) * _DTYPE_BYTES.get(dtype, 1)


def _split_result(rest: str) -> tuple[str, str, str]:
    """``(result shape text, op name, the rest)`` of an instruction's right-hand side."""
    if rest.startswith("("):
        depth, end = 0, len(rest)
        for i, c in enumerate(rest):
            depth += (c == "(") - (c == ")")
            if depth == 0:
                end = i + 1
                break
        shape, tail = rest[:end], rest[end:].lstrip()
    else:
        shape, _, tail = rest.partition(" ")
    m = re.match(r"([\w\-]+)\((.*)$", tail)
    return (shape, m.group(1), m.group(2)) if m else (shape, "", tail)


def _parse_hlo(text: str) -> tuple[dict[str, list[tuple[str, str, str, str]]], str]:
    """``({computation: [(name, shape, op, rest)]}, entry name)`` of an HLO module's text."""
    comps: dict[str, list] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m and not line.startswith(" "):
                current = comps.setdefault(m.group(1), [])
                entry = m.group(1) if line.startswith("ENTRY") else entry
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            current.append((m.group(1), *_split_result(m.group(2))))
    return comps, entry


def _dot_flops(shape: str, rest: str, symbols: dict[str, str]) -> float:
    """``2 x |result| x |contracted|`` of a ``dot`` instruction."""
    result = _shapes(shape)
    lhs_text = rest.split(",")[0]
    lhs = _shapes(lhs_text) or _shapes(symbols.get(lhs_text.strip().lstrip("%"), ""))
    m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
    if not result or not lhs or not m:
        return 0.0
    contracted = math.prod(lhs[0][1][int(i)] for i in m.group(1).split(",") if i)
    return 2.0 * math.prod(result[0][1]) * contracted


def hlo_costs(text: str) -> dict[str, float]:
    """Per-device ``{"flops", "collective_bytes", "unknown_trip_loops"}`` of a compiled,
    partitioned HLO module's text, per execution: matrix-product FLOPs and collective result
    bytes, each loop body counted its known trip count times (once when unknown, which
    ``unknown_trip_loops`` counts), each conditional at its costliest branch."""
    comps, entry = _parse_hlo(text)

    @functools.cache
    def cost(name: str) -> tuple[float, float, int]:
        flops = coll = 0.0
        unknown = 0
        instrs = comps.get(name, [])
        symbols = {n: s for n, s, _, _ in instrs}
        for _, shape, op, rest in instrs:
            if op == "dot":
                flops += _dot_flops(shape, rest, symbols)
            base = op.removesuffix("-start")
            if base in COLLECTIVES:
                sizes = [_nbytes(*s) for s in _shapes(shape)]
                # an async start's result holds its operand too: count the output alone
                coll += (max(sizes) if op.endswith("-start") else sum(sizes)) if sizes else 0
            trips = 1
            if op == "while":
                m = _TRIP.search(rest)
                trips = int(m.group(1)) if m else 1
                unknown += m is None
            for kind, callee in _CALLEE.findall(rest):
                if kind == "to_apply" and op != "call":
                    continue  # a reducer: scalar adds
                f, c, u = cost(callee)
                flops, coll, unknown = flops + trips * f, coll + trips * c, unknown + u
            m = _BRANCHES.search(rest)
            if m:
                branches = [cost(b.strip().lstrip("%")) for b in m.group(1).split(",") if b.strip()]
                if branches:
                    f, c, u = max(branches)
                    flops, coll, unknown = flops + f, coll + c, unknown + u
        return flops, coll, unknown

    f, c, u = cost(entry)
    return {"flops": f, "collective_bytes": c, "unknown_trip_loops": u}
