"""Math reward: the last ``\\boxed{}`` of a completion against the gold answer, 1 or 0.

Pipeline (docs/design.md §5):

1. :func:`last_boxed` takes the last *complete* balanced-brace ``\\boxed{...}`` (or
   ``\\fbox{...}``); escaped braces ``\\{ \\}`` do not count towards the balance. None: 0.
2. :func:`normalize` rewrites presentation variants into one string form: math delimiters
   (``$``, ``\\(``, ``\\[``), spacing commands and whitespace, ``\\left``/``\\right``,
   ``\\dfrac``/``\\tfrac``, ``\\text{}`` wrappers and trailing units (``6 \\text{ cm}^2`` too),
   degree marks, thousands separators (``1,000``, ``1{,}000``, ``1\\,000``), a percent mark,
   matrix environments (``pmatrix``/``Bmatrix``/``matrix`` all become ``bmatrix``), a leading
   ``x =`` or ``f(x) =`` and a trailing period. Equal strings score 1 at once, with no SymPy.
3. Multiple choice: when the gold is one letter A-E, the prediction's letter is read from
   ``(B)``, ``B.``, ``\\text{(B)}``, ``B) 12`` or ``option B``, and only letters are compared.
4. Otherwise both sides are parsed by ``latex2sympy2_extended`` (a maintained ANTLR LaTeX
   parser; ``\\pm`` becomes the two-element set, also inside a fraction, ``3:4`` a ratio,
   ``\\{..\\}`` a set, ``(a, b]`` an interval) and compared by :func:`sympy_equal`: sets as
   unordered collections with a one-to-one matching, intervals by endpoints and openness,
   matrices elementwise, ``x = v`` by ``v``, other equations as equal up to a nonzero constant
   factor (``x+y=1`` is ``-2x-2y=-2``), numbers to a relative 1e-6 when a float is involved
   and otherwise at 50 digits (``simplify`` only when that cannot tell), and expressions by
   ``simplify(a - b) == 0``.

Step 4 runs in a child process killed after ``timeout_s`` (see ``_isolate.py``): parsing and
simplifying adversarial input (``2^{2^{2^{100}}}``, a 10^6-term product) can take unbounded
time. Inside the batch pool the worker itself is the killable unit, so ``isolate=False``.

A percent answer also matches its bare number (``50\\%`` equals ``50`` and ``0.5``): graders
disagree on this, and a model writing either has the right answer.
"""

from __future__ import annotations

import cmath
import functools
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from coevo_jax.rewards._isolate import call_with_timeout

if TYPE_CHECKING:  # annotation only: dispatch imports the verifiers, not the other way round
    from coevo_jax.rewards.dispatch import RewardConfig

MAX_SYMPY_CHARS = 1000

_BOX_CMDS = ("\\boxed", "\\fbox")


def _braced(text: str, i: int) -> int | None:
    """Index just past the brace group opening at ``text[i] == '{'``, or None if unclosed."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` / ``\\fbox{...}`` in ``text``, or None.

    ``\\boxed 5`` (no braces) takes the next whitespace-delimited token.
    """
    if not text:
        return None
    found = None
    for cmd in _BOX_CMDS:
        start = 0
        while True:
            k = text.find(cmd, start)
            if k < 0:
                break
            j = k + len(cmd)
            start = j
            if j < len(text) and text[j].isalpha():
                continue  # \boxedsomething is another command
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                end = _braced(text, j)
                if end is not None and (found is None or k > found[0]):
                    found = (k, text[j + 1 : end - 1])
            elif j > k + len(cmd) and j < len(text):
                m = re.match(r"[^\s$]+", text[j:])
                if m and (found is None or k > found[0]):
                    found = (k, m.group(0))
    return None if found is None else found[1]


# ``\\\\`` (a matrix row break) is matched first so that its second backslash is never read
# as the start of a spacing command such as ``\\ ``.
_SPACING = re.compile(r"(\\\\)|\\[,;:! ]|\\q?quad(?![A-Za-z])|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)\s*(?=[()\[\]|.]|\\[{}|])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_MATRIX_ENV = re.compile(r"\\(begin|end)\{(?:pmatrix|Bmatrix|smallmatrix|matrix)\}")
# ``x = v``, ``a_1 = v``, ``f(x) = v``: the value is the answer.
_ASSIGN = re.compile(
    r"^[A-Za-z](?:_\{?\w+\}?)?(?:\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])*\s*\))?\s*=\s*(?!.*=)(.+)$"
)
_UNIT_WORD = re.compile(
    r"^(-?[\d.,/]+(?:\\frac\{\d+\}\{\d+\})?)\s*"
    r"(?:cm|mm|km|m|kg|g|mg|s|sec|seconds?|minutes?|hours?|days?|weeks?|years?|"
    r"dollars?|cents?|units?|inches|inch|feet|foot|ft|miles?|meters?|degrees?|"
    r"sq\s*units|square\s+\w+|cubic\s+\w+|mph|percent)\.?$"
)
# A unit after a number, possibly squared or cubed outside its braces: ``6 \text{ cm}^2``.
_TRAILING_UNIT = re.compile(
    r"(?<=[\d}])\s*\\(?:text|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .^\d]*\}"
    r"(?:\s*\^\s*(?:\d|\{\s*\d+\s*\}))?\s*$"
)
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)$")


def _space(m: re.Match) -> str:
    return m.group(1) or " "


def _strip_delims(s: str) -> str:
    s = s.strip()
    for lo, hi in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(lo) + len(hi) and s.startswith(lo) and s.endswith(hi):
            s = s[len(lo) : len(s) - len(hi)].strip()
    return s


def _unwrap_box(s: str) -> str:
    while True:
        inner = last_boxed(s)
        if inner is None or not s.strip().startswith(_BOX_CMDS):
            return s
        s = inner


def normalize(answer: str) -> tuple[str, bool]:
    """(normalised string, whether a percent mark was present). See the module docstring."""
    # Spacing goes before the strip: a trailing ``\\ `` stripped of its space is a lone ``\\``.
    s = _unwrap_box(_strip_delims(_SPACING.sub(_space, answer)))
    s = s.replace("\u2212", "-").replace("\n", " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\displaystyle", "").replace("{,}", ",")
    s = _LEFT_RIGHT.sub("", s)
    s = _SPACING.sub(_space, s)
    s = _DEGREE.sub("", s)
    percent = bool(re.search(r"\\?%|\\percent\b", s))
    s = re.sub(r"\\?%|\\percent\b", "", s)
    s = s.replace("\\$", "").replace("$", "")
    # \text{...} that wraps the whole answer is the answer; trailing ones are units.
    m = re.fullmatch(r"\s*\\(?:text|textbf|mathrm|mbox)\s*\{(.*)\}\s*", s)
    if m and "{" not in m.group(1):
        s = m.group(1)
    s = _TRAILING_UNIT.sub("", s)
    s = _TEXT_CMD.sub(r"\1", s)
    s = s.strip().rstrip(".").strip()
    m = _UNIT_WORD.match(s)
    if m:
        s = m.group(1)
    m = _ASSIGN.match(s)
    if m and "\\le" not in s and "\\ge" not in s:
        s = m.group(1)
    while len(s) >= 2 and s[0] == "{" and s[-1] == "}" and _braced(s, 0) == len(s):
        s = s[1:-1].strip()
    s = _MATRIX_ENV.sub(lambda mm: f"\\{mm.group(1)}{{bmatrix}}", s)
    compact = re.sub(r"\s+", "", s)
    if _THOUSANDS.match(compact):
        compact = compact.replace(",", "")
    elif re.fullmatch(r"-?\d{1,3}( \d{3})+(\.\d+)?", s):
        compact = s.replace(" ", "")
    if _NUMBER.match(compact):
        compact = _canonical_number(compact)
    return compact, percent


def _canonical_number(s: str) -> str:
    neg = s.startswith("-")
    s = s.lstrip("-")
    if s.startswith("."):
        s = "0" + s
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    s = s.lstrip("0") or "0"
    if s.startswith("."):
        s = "0" + s
    return ("-" + s) if neg and s != "0" else s


_CHOICE = re.compile(
    r"^(?:(?:option|choice|answer)\s*:?\s*)?(\()?\s*([A-Ea-e])\s*(\))?\s*([.:])?(.*)$",
    re.IGNORECASE | re.DOTALL,
)


def choice_letter(answer: str) -> str | None:
    """The choice letter of ``(B)``, ``B.``, ``\\text{(B)}``, ``B) 12``, ``option B``; or None."""
    s = _unwrap_box(_strip_delims(answer))
    s = _TEXT_CMD.sub(r"\1", s).strip()
    m = _CHOICE.match(s)
    if not m:
        return None
    opened, letter, closed, punct, rest = m.groups()
    if opened and not closed:
        return None
    # "a + 1" is an expression, not choice (A): text after the letter needs a delimiter.
    if rest.strip() and not (closed or punct):
        return None
    return letter.upper()


_SIMPLE_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$|^(-?)\\frac(\d)(\d)$")


def simple_number(s: str) -> Fraction | None:
    """The exact value of an integer, decimal, ``a/b`` or ``\\frac{a}{b}``; else None."""
    try:
        if _NUMBER.match(s):
            return Fraction(s)
        if re.fullmatch(r"-?\d+/-?\d+", s):
            return Fraction(s)
        m = _SIMPLE_FRAC.match(s)
        if m:
            sign, a, b = (m.group(1), m.group(2), m.group(3)) if m.group(2) else m.group(4, 5, 6)
            v = Fraction(int(a), int(b))
            return -v if sign else v
    except (ValueError, ZeroDivisionError):
        return None
    return None


def strings_equal(pred: str, gold: str) -> bool | None:
    """Cheap, SymPy-free verdict: True/False when it can decide, None when SymPy must.

    Equal normal forms or equal choice letters are True; two plain numbers (integers,
    decimals, simple fractions) are compared exactly, percent readings included.
    """
    p, p_pct = normalize(pred)
    g, g_pct = normalize(gold)
    if p == g and p:
        return True
    pv, gv = simple_number(p), simple_number(g)
    if pv is not None and gv is not None:
        hundred = Fraction(100)
        return bool(pv == gv or (p_pct and pv / hundred == gv) or (g_pct and pv == gv / hundred))
    g_letter = choice_letter(gold)
    if g_letter is not None and re.fullmatch(r"[A-Ea-e]", g):
        return choice_letter(pred) == g_letter
    return None


# --------------------------------------------------------------------------------------------
# SymPy stage (runs in a child process unless the caller is itself killable).


@functools.lru_cache(maxsize=4096)
def _parse(s: str, percent: bool):
    # Cached: a GRPO group scores G completions against one gold, often with repeats. The
    # results are only read (sympy_equal never mutates), so sharing them is safe.
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.math_normalization import NormalizationConfig

    cfg = NormalizationConfig(
        basic_latex=True, units=True, malformed_operators=True, nits=False, boxed="none"
    )
    pm = _split_pm(s)
    if pm is not None:
        # The parser reads a top-level ``a \\pm b`` as a set, but not a ``\\pm`` nested in a
        # fraction (the quadratic formula): both signs are parsed and make the set here.
        import sympy

        roots = [latex2sympy(r, normalization_config=cfg) for r in pm]
        if all(isinstance(r, sympy.Expr) for r in roots):
            return sympy.FiniteSet(*roots)
    return latex2sympy(s, normalization_config=cfg)


def _split_pm(s: str) -> tuple[str, str] | None:
    """``s`` with its one ``\\pm`` (or ``\\mp``) read as ``+`` and as ``-``; None otherwise."""
    hits = re.findall(r"\\(?:pm|mp)(?![A-Za-z])", s)
    if len(hits) != 1:
        return None
    plus = re.sub(r"\\(?:pm|mp)(?![A-Za-z])", "+", s)
    minus = re.sub(r"\\(?:pm|mp)(?![A-Za-z])", "-", s)
    return plus, minus


def _unassign(x):
    import sympy

    if isinstance(x, sympy.Eq) and isinstance(x.lhs, sympy.Symbol):
        return x.rhs
    return x


def _num_close(a, b) -> bool:
    import sympy

    try:
        fa, fb = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
    except (TypeError, ValueError):
        return False
    return abs(fa - fb) <= 1e-6 * max(1.0, abs(fb))


def sympy_equal(a, b) -> bool:
    """Mathematical equivalence of two SymPy objects (see the module docstring)."""
    import sympy
    from sympy.matrices import MatrixBase

    a, b = _unassign(a), _unassign(b)
    if a == b:
        return True
    if isinstance(a, sympy.FiniteSet) and isinstance(b, sympy.FiniteSet):
        return _match_all(list(a.args), list(b.args))
    if isinstance(a, (sympy.Tuple, tuple, list)) and isinstance(b, (sympy.Tuple, tuple, list)):
        return len(a) == len(b) and all(sympy_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.Interval) and isinstance(b, sympy.Interval):
        return (
            a.left_open == b.left_open
            and a.right_open == b.right_open
            and sympy_equal(a.start, b.start)
            and sympy_equal(a.end, b.end)
        )
    if isinstance(a, sympy.Union) and isinstance(b, sympy.Union):
        return _match_all(list(a.args), list(b.args))
    if isinstance(a, MatrixBase) and isinstance(b, MatrixBase):
        return a.shape == b.shape and all(sympy_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq):
        return (sympy_equal(a.lhs, b.lhs) and sympy_equal(a.rhs, b.rhs)) or _proportional(
            a.lhs - a.rhs, b.lhs - b.rhs
        )
    if isinstance(a, sympy.Rel) or isinstance(b, sympy.Rel):
        return type(a) is type(b) and sympy_equal(a.lhs, b.lhs) and sympy_equal(a.rhs, b.rhs)
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return False
    if a.is_number and b.is_number:
        if a.has(sympy.Float) or b.has(sympy.Float):
            return _num_close(a, b)
        verdict = _numeric_verdict(a, b)
        return _zero(a - b) if verdict is None else verdict
    return _zero(a - b)


def _numeric_verdict(a, b) -> bool | None:
    """Exact-looking numbers compared numerically: True when ``a - b`` evaluates to below
    1e-45 of their size, False when it is above 1e-10 of it, None (ask ``simplify``) in
    between or on error.

    ``simplify`` of nested radicals can take seconds. ``N(a - b, 50)`` carries 50 significant
    digits of the *difference* (evalf raises its working precision under cancellation), so a
    true zero comes out far below 1e-45. Numbers above 1e12 always go to ``simplify``: there
    a relative bound would call ``7^{94}`` and ``7^{94}-1`` equal.
    """
    import sympy

    try:
        va, vb = complex(sympy.N(a, 50)), complex(sympy.N(b, 50))
        d = complex(sympy.N(a - b, 50))
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not all(cmath.isfinite(v) for v in (va, vb, d)):
        return None  # oo, zoo, nan: simplify decides
    scale = max(1.0, abs(va), abs(vb))
    if scale > 1e12:
        return None  # 7^{94} against 7^{94}-1: a unit apart is a tiny relative difference
    if abs(d) <= 1e-45 * scale:
        return True
    if abs(d) > 1e-10 * scale:
        return False
    return None


def _proportional(da, db) -> bool:
    """Whether the equations ``da = 0`` and ``db = 0`` are the same up to a nonzero constant
    factor (``34x+45y=0`` and ``-34x-45y=0``, ``x+y=1`` and ``2x+2y=2``)."""
    import sympy

    if _zero(da - db) or _zero(da + db):
        return True
    try:
        if db == 0 or da == 0:
            return False
        r = sympy.simplify(da / db)
    except Exception:
        return False
    return bool(r.is_number and r.is_finite and r != 0 and not r.free_symbols)


def _zero(d) -> bool:
    import sympy

    try:
        if d == 0:
            return True
        s = sympy.simplify(d)
        return s == 0 or bool(s.is_zero)
    except Exception:
        return False


def _match_all(xs: list, ys: list) -> bool:
    if len(xs) != len(ys):
        return False
    left = list(ys)
    for x in xs:
        for k, y in enumerate(left):
            if sympy_equal(x, y):
                del left[k]
                break
        else:
            return False
    return True


@functools.lru_cache(maxsize=4096)
def symbolic_equal(pred: str, gold: str) -> bool:
    """Parses both normalised answers with latex2sympy2_extended and compares them.

    Unbounded time on adversarial input: call through :func:`call_with_timeout`.
    """
    p, p_pct = normalize(pred)
    g, g_pct = normalize(gold)
    if not p or not g or len(p) > MAX_SYMPY_CHARS or len(g) > MAX_SYMPY_CHARS:
        return False
    try:
        pe, ge = _parse(p, p_pct), _parse(g, g_pct)
    except Exception:
        return False
    if sympy_equal(pe, ge):
        return True
    if p_pct or g_pct:
        # a percent answer also matches its value as a fraction (50% vs 0.5)
        import sympy

        scale = sympy.Rational(1, 100)
        return bool(
            (p_pct and sympy_equal(pe * scale, ge)) or (g_pct and sympy_equal(pe, ge * scale))
        )
    return False


@functools.cache
def _warm() -> None:
    # Import and exercise the parser here, once, so that forked children inherit it warm
    # instead of each paying ~1.5 s of imports and parser set-up out of their timeout (a
    # forkserver child gets the same from the server's preload).
    try:
        symbolic_equal("(x+1)^2", "x^2+2x+1")
    except Exception:
        pass


def score(completion: str, gold: str, *, timeout_s: float = 5.0, isolate: bool = True) -> float:
    """1.0 if the last ``\\boxed{}`` of ``completion`` is equivalent to ``gold``, else 0.0.

    Args:
      completion: model output.
      gold: the reference answer (a bare answer, or a solution whose last ``\\boxed{}`` is it).
      timeout_s: wall clock for the SymPy stage.
      isolate: run the SymPy stage in a killable child (False only inside a killable worker).
    """
    pred = last_boxed(completion or "")
    if pred is None or not pred.strip():
        return 0.0
    gold = last_boxed(gold) or gold if gold else ""
    if not gold.strip():
        return 0.0
    quick = strings_equal(pred, gold)
    if quick is not None:
        return float(quick)
    if not isolate:
        try:
            return float(symbolic_equal(pred, gold))
        except Exception:
            return 0.0
    _warm()
    status, value = call_with_timeout(symbolic_equal, (pred, gold), timeout_s=timeout_s)
    return 1.0 if status == "ok" and value else 0.0


def verify(
    record: Mapping[str, Any], completion: str, *, config: RewardConfig, isolate: bool
) -> float:
    """The ``math`` domain's verifier (``coevo_jax.rewards.verifiers``): :func:`score`
    against the record's ``true_answer`` under ``config.math_timeout_s``."""
    gold = record.get("true_answer") or ""
    return score(completion, gold, timeout_s=config.math_timeout_s, isolate=isolate)
