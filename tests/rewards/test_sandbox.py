"""The sandbox runner itself: modes, budgets, uid leases and cleanup."""

import os

import pytest

from coevo_jax.rewards.sandbox import SandboxConfig, kill_uid, run_program, uid_processes

FAST = SandboxConfig(timeout_s=3.0)


def test_config_validation():
    with pytest.raises(ValueError):
        SandboxConfig(timeout_s=0)
    with pytest.raises(ValueError):
        SandboxConfig(nproc=0)
    with pytest.raises(ValueError):
        SandboxConfig(uid_count=0)


def test_modes_report_raw_results():
    r = run_program(
        "import sys\nprint(sys.stdin.read().upper())", "stdio", ["ab\n", "c"], config=FAST
    )
    assert [t["stdout"] for t in r.tests] == ["AB\n\n", "C\n"]
    r = run_program(
        "def f(x):\n    return {'k': [x, (x,)]}", "call", [[1]], fn_name="f", config=FAST
    )
    assert r.tests[0]["values"].startswith("('ret',")
    r = run_program("x = 1", "asserts", ["assert x == 1"], config=FAST)
    assert r.tests[0]["values"].splitlines()[-1] == repr(("done", r.tests[0]["nonce"]))
    r = run_program("def f(:", "stdio", [""], config=FAST)
    assert not r.compiled and "SyntaxError" in r.compile_error and r.tests == [None]
    with pytest.raises(ValueError):
        run_program("x", "call", [[1]], config=FAST)


def test_budget_covers_all_tests():
    src = "import time\ntime.sleep(0.8)\nprint(1)"
    r = run_program(src, "stdio", [""] * 10, config=FAST)
    statuses = [t and t["status"] for t in r.tests]
    assert statuses[:2] == ["ok", "ok"] and "ok" not in statuses[5:]
    assert r.wall_s < FAST.timeout_s + 1.5


def test_environment_is_clean():
    r = run_program("import os\nprint(sorted(os.environ))", "stdio", [""], config=FAST)
    names = eval(r.tests[0]["stdout"])  # noqa: S307 - our own program's output
    assert set(names) <= {"PATH", "LANG", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "LC_CTYPE"}


@pytest.mark.skipif(os.geteuid() != 0, reason="uid switching needs root")
def test_runs_as_leased_uid_and_leaves_nothing():
    r = run_program("import os, time\nos.fork()\nprint(os.getuid())", "stdio", [""], config=FAST)
    uid = int(r.tests[0]["stdout"].split()[0])
    assert FAST.uid_base <= uid < FAST.uid_base + FAST.uid_count
    assert uid_processes(uid) == []
    kill_uid(uid)  # harmless with nothing to kill
