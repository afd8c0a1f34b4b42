"""Code reward: run the completion's program against the task's tests in the sandbox.

``test_cases`` follows the TACO/APPS ``input_output`` convention (``{"inputs": [...],
"outputs": [...]}``): without ``fn_name`` each input is stdin and each output the expected
stdout, compared after stripping trailing whitespace per line and trailing blank lines (a list
of lines is joined with newlines first); with ``fn_name`` each input is the list of positional
arguments and each output the expected return value, compared here, in the parent, after the
child ships the value back as plain built-in data (tuples compare equal to lists, as JSON has
no tuples; APPS' habit of wrapping the expected value in a one-element list is accepted too).

``{"asserts": [str, ...]}`` serves MBPP/HumanEval-style tests: each string runs after the
program and passes when it finishes. This form is weaker, since the expected values are inside
the child; the harness rewrites every ``assert`` so that both operands are reduced to built-in
data (an object whose ``__eq__`` is always true does not survive that) and re-judged in the
parent, requires an end-of-test marker (an early ``sys.exit`` fails), and binds its helpers to
built-ins captured before the program runs (patching ``builtins`` does not reach them). A
program that reads the runner's memory to forge records is not stopped: use the stdin or call
forms for untrusted training data where possible.

Anything that fails (no code, compile error, crash, timeout, oversize output) scores 0.
"""

from __future__ import annotations

import ast
import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coevo_jax.rewards.sandbox import SandboxConfig, SandboxResult, run_program

if TYPE_CHECKING:  # annotation only: dispatch imports the verifiers, not the other way round
    from coevo_jax.rewards.dispatch import RewardConfig

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_TAGS = {"python", "py", "python3", "py3"}


def extract_code(completion: str) -> str:
    """The last fenced python block, else the last untagged fenced block, else the raw text.

    A fence left open at the end (a truncated completion) counts as a block to the end.
    """
    blocks = _FENCE.findall(completion)
    py = [body for tag, body in blocks if tag.lower() in _PY_TAGS]
    if py:
        return py[-1]
    plain = [body for tag, body in blocks if not tag]
    if plain:
        return plain[-1]
    return completion


class _Literal(ast.NodeTransformer):
    """Lets ``ast.literal_eval`` read the reprs of nan/inf and frozensets."""

    def visit_Name(self, node):
        if node.id in ("nan", "inf"):
            return ast.Constant(float(node.id))
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "frozenset" and not node.keywords:
            if not node.args:
                return ast.Call(ast.Name("set", ast.Load()), [], [])
            return node.args[0]
        return node


def parse_literal(text: str) -> Any:
    """Reads the repr of plain built-in data shipped by the sandbox (never evaluates code)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        tree = _Literal().visit(ast.parse(text, mode="eval"))
        return ast.literal_eval(ast.fix_missing_locations(tree).body)


def _jsonish(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_jsonish(v) for v in x]
    if isinstance(x, dict):
        return {_jsonish_key(k): _jsonish(v) for k, v in x.items()}
    return x


def _jsonish_key(k: Any) -> Any:
    return str(k) if not isinstance(k, (str, int, float, bool)) and k is not None else k


def _values_equal(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or got == want
    try:
        return bool(_jsonish(got) == _jsonish(want))
    except Exception:
        return False


def returns_match(got: Any, want: Any) -> bool:
    """Call-form comparison (see the module docstring)."""
    if _values_equal(got, want):
        return True
    return isinstance(want, list) and len(want) == 1 and _values_equal(got, want[0])


def normalize_stdout(text: Any) -> str:
    """Joins a list of lines, strips trailing whitespace per line and trailing blank lines."""
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t) for t in text)
    lines = [line.rstrip() for line in str(text).replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _records(rec: Mapping[str, Any]) -> list[tuple]:
    out = []
    for line in str(rec.get("values", "")).splitlines():
        try:
            item = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
        if not isinstance(item, tuple) or not item:
            return []
        out.append(item)
    return out


def _judge_call(rec: Mapping[str, Any], want: Any) -> bool:
    items = _records(rec)
    if len(items) != 1 or items[0][0] != "ret" or len(items[0]) != 2:
        return False
    try:
        got = parse_literal(items[0][1])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    return returns_match(got, want)


def _judge_asserts(rec: Mapping[str, Any]) -> bool:
    items = _records(rec)
    if not items or items[-1] != ("done", rec.get("nonce")):
        return False
    try:
        for item in items[:-1]:
            if item[0] == "eq" and len(item) == 3:
                if not _values_equal(parse_literal(item[1]), parse_literal(item[2])):
                    return False
            elif item[0] == "true" and len(item) == 2:
                if not parse_literal(item[1]):
                    return False
            else:
                return False
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def judge(result: SandboxResult, mode: str, expected: Sequence[Any] | None) -> list[bool]:
    """Per-test pass/fail of a sandbox run, decided here in the parent."""
    verdicts = []
    for i, rec in enumerate(result.tests):
        if rec is None or rec.get("status") != "ok" or rec.get("exit") != 0:
            verdicts.append(False)
        elif mode == "stdio":
            verdicts.append(
                normalize_stdout(rec.get("stdout", "")) == normalize_stdout(expected[i])
            )
        elif mode == "call":
            verdicts.append(_judge_call(rec, expected[i]))
        else:
            verdicts.append(_judge_asserts(rec))
    return verdicts


def _plan(test_cases: Any, fn_name: str | None) -> tuple[str, list[Any], list[Any] | None]:
    if isinstance(test_cases, str):
        import json

        test_cases = json.loads(test_cases)
    if not isinstance(test_cases, Mapping):
        raise ValueError(f"test_cases must be a mapping, got {type(test_cases).__name__}")
    if test_cases.get("asserts"):
        asserts = list(test_cases["asserts"])
        setup = test_cases.get("setup")
        if setup:
            asserts = [setup + "\n" + a for a in asserts]
        return "asserts", asserts, None
    inputs, outputs = test_cases.get("inputs"), test_cases.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("test_cases needs 'inputs' and 'outputs' lists of equal length")
    fn_name = fn_name or test_cases.get("fn_name")
    if fn_name:
        args = [a if isinstance(a, list) else [a] for a in inputs]
        return "call", args, outputs
    return "stdio", [normalize_stdin(x) for x in inputs], outputs


def normalize_stdin(x: Any) -> str:
    if isinstance(x, (list, tuple)):
        x = "\n".join(str(t) for t in x)
    x = str(x)
    return x if x.endswith("\n") or not x else x + "\n"


def score_detailed(
    completion: str,
    test_cases: Any,
    *,
    fn_name: str | None = None,
    timeout_s: float = 10.0,
    config: SandboxConfig | None = None,
) -> tuple[list[bool], SandboxResult | None]:
    """Per-test verdicts and the raw sandbox result (``None`` when nothing ran)."""
    mode, tests, expected = _plan(test_cases, fn_name)
    code = extract_code(completion or "")
    if not code.strip() or not tests:
        return [False] * len(tests), None
    if config is None:
        config = SandboxConfig(timeout_s=timeout_s)
    result = run_program(code, mode, tests, fn_name=fn_name or _fn(test_cases), config=config)
    _warn_isolation(result)
    return judge(result, mode, expected), result


_warned: set[str] = set()


def _warn_isolation(result: SandboxResult) -> None:
    iso = result.isolation
    for msg in iso.errors + ([] if iso.net else ["no network namespace: network not isolated"]):
        if msg not in _warned:
            _warned.add(msg)
            log.warning("code sandbox: %s", msg)


def _fn(test_cases: Any) -> str | None:
    return test_cases.get("fn_name") if isinstance(test_cases, Mapping) else None


def score(
    completion: str,
    test_cases: Any,
    *,
    fn_name: str | None = None,
    timeout_s: float = 10.0,
    strict: bool = False,
    config: SandboxConfig | None = None,
) -> float:
    """Pass fraction of the completion's program on ``test_cases`` (all-or-nothing if strict).

    Args:
      completion: model output; its last fenced python block is run (else the raw text).
      test_cases: ``{"inputs", "outputs"}`` (stdin or, with ``fn_name``, call form) or
        ``{"asserts": [...]}`` (optionally with ``"setup"`` code run before each assert).
      fn_name: function to call for call-form tests.
      timeout_s: wall clock for compilation and all tests together.
      strict: 1.0 only if every test passes.
      config: full sandbox limits; overrides ``timeout_s`` when given.
    """
    verdicts, _ = score_detailed(
        completion, test_cases, fn_name=fn_name, timeout_s=timeout_s, config=config
    )
    if not verdicts:
        return 0.0
    if strict:
        return float(all(verdicts))
    return sum(verdicts) / len(verdicts)


def verify(
    record: Mapping[str, Any], completion: str, *, config: RewardConfig, isolate: bool
) -> float:
    """The ``code`` domain's verifier (``coevo_jax.rewards.verifiers``): :func:`score` on the
    record's ``test_cases`` and ``fn_name`` (the sandbox is its own isolation)."""
    return score(
        completion,
        record.get("test_cases") or {},
        fn_name=record.get("fn_name"),
        timeout_s=config.code_timeout_s,
        strict=config.code_strict,
    )
