"""Code verifier: test-case forms, extraction, scoring, and hostile programs in the sandbox."""

import os
import socket
import threading
import time

import pytest

from coevo_jax.rewards import code, sandbox
from coevo_jax.rewards.sandbox import SandboxConfig, run_program

ADD_STDIN = {"inputs": ["1 2\n", "5 7\n", "10 -3\n"], "outputs": ["3\n", "12", "7\n\n"]}


@pytest.fixture
def contained():
    """After the test: no process survives under the uids this test's sandboxes used (those
    not leased again meanwhile by a concurrent run), and this process is fine."""
    before = len(sandbox.leased_uids)
    yield
    if os.geteuid() == 0:
        used = set(list(sandbox.leased_uids)[before:])
        left = {u: sandbox.uid_processes(u) for u in used if sandbox.uid_is_free(u)}
        assert not any(left.values()), left
    assert os.getpid() > 0 and threading.main_thread().is_alive()


def test_extract_code():
    assert code.extract_code("hi\n```python\nprint(1)\n```\n```python\nprint(2)\n```") == (
        "print(2)\n"
    )
    assert code.extract_code("```py\nx=1\n```\n```\nnot code\n```") == "x=1\n"
    assert code.extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert code.extract_code("print(4)") == "print(4)"
    assert code.extract_code("text\n```python\nprint(5)") == "print(5)"


def test_normalize_stdout():
    assert code.normalize_stdout("a  \nb\t\n\n\n") == "a\nb"
    assert code.normalize_stdout(["a", "b"]) == "a\nb"
    assert code.normalize_stdout("a\r\nb") == "a\nb"


def test_stdin_tasks(contained):
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert code.score(good, ADD_STDIN) == 1.0
    half = "a, b = map(int, input().split())\nprint(a + b if a < 6 else 0)"
    assert code.score(half, ADD_STDIN) == pytest.approx(2 / 3)
    assert code.score(half, ADD_STDIN, strict=True) == 0.0
    assert code.score("print(", ADD_STDIN) == 0.0  # compile error
    assert code.score("", ADD_STDIN) == 0.0
    crash_after = "a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(3)"
    assert code.score(crash_after, ADD_STDIN) == 0.0
    ok_exit = "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)"
    assert code.score(ok_exit, ADD_STDIN) == 1.0


def test_call_tasks(contained):
    tc = {"inputs": [[1, 2], [[1, 2], 3]], "outputs": [[2, 1], [[1, 2], 3, 3]]}
    src = "def f(a, b):\n    return (b, a) if not isinstance(a, list) else (a, b, b)"
    assert code.score(src, tc, fn_name="f") == 1.0
    assert code.score(src, tc, fn_name="g") == 0.0
    method = "class Solution:\n    def f(self, a, b):\n        return [b, a]"
    assert code.score(method, {"inputs": [[1, 2]], "outputs": [[2, 1]]}, fn_name="f") == 1.0
    wrapped = {"inputs": [[3]], "outputs": [[9]]}  # APPS wraps expected values in a list
    assert code.score("def sq(x): return x * x", wrapped, fn_name="sq") == 1.0
    floats = {"inputs": [[0.1, 0.2]], "outputs": [0.3]}
    assert code.score("def add(a, b): return a + b", floats, fn_name="add") == 1.0
    assert code.score("def add(a, b): return a - b", floats, fn_name="add") == 0.0


def test_asserts_tasks(contained):
    tc = {"asserts": ["assert f(2) == 4", "assert f(3) == 9\nassert f(0) == 0", "assert f(1) == 2"]}
    assert code.score("def f(x): return x * x", tc) == pytest.approx(2 / 3)
    humaneval_style = {
        "asserts": [
            "def check(candidate):\n    for i in range(5):\n        assert candidate(i) == i * i\n"
            "    assert abs(candidate(0.5) - 0.25) < 1e-9\n\ncheck(f)\n"
        ]
    }
    assert code.score("def f(x): return x * x", humaneval_style) == 1.0
    assert code.score("def f(x): return x * x + (x == 3)", humaneval_style) == 0.0
    setup = {"asserts": ["assert g(2) == 5"], "setup": "OFFSET = 1"}
    assert code.score("def g(x): return x * x + OFFSET", setup) == 1.0


def test_parse_literal():
    assert code.parse_literal("[1, (2, 3), {'a': {4}}]") == [1, (2, 3), {"a": {4}}]
    assert code.parse_literal("[nan, inf, -inf]")[1] == float("inf")
    assert code.parse_literal("frozenset({1, 2})") == {1, 2}
    with pytest.raises((ValueError, SyntaxError)):
        code.parse_literal("__import__('os').system('true')")


# ---------------------------------------------------------------------------------- hostile

ONE = {"inputs": ["\n"], "outputs": ["ok\n"]}
FAST = SandboxConfig(timeout_s=3.0)
# The wall clock must stop a hostile program; the margin covers killing and reaping its
# process group on a loaded 2-core box (seen: 9.5 s for a fork bomb at load ~10).
KILL_MARGIN_S = 10.0


def _hostile(src: str, tc=ONE, **kw) -> tuple[float, float]:
    t = time.monotonic()
    s = code.score(src, tc, config=FAST, **kw)
    return s, time.monotonic() - t


def test_infinite_loop(contained):
    s, dt = _hostile("while True:\n    pass\nprint('ok')")
    assert s == 0.0 and dt < FAST.timeout_s + KILL_MARGIN_S
    s, dt = _hostile("import time\ntime.sleep(1000)\nprint('ok')")
    assert s == 0.0 and dt < FAST.timeout_s + KILL_MARGIN_S


def test_fork_bomb(contained):
    src = (
        "import os\n"
        "for _ in range(100000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "    except OSError:\n"
        "        pass\n"
        "print('ok')"
    )
    s, dt = _hostile(src)
    assert s == 0.0 and dt < FAST.timeout_s + KILL_MARGIN_S


def test_memory_bomb(contained):
    s, _ = _hostile("x = bytearray(10**11)\nprint('ok')")
    assert s == 0.0
    s, dt = _hostile("a = []\nwhile True:\n    a.append(' ' * 10**7)")
    assert s == 0.0 and dt < FAST.timeout_s + KILL_MARGIN_S


def test_gigabyte_print(contained):
    src = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)"
    s, dt = _hostile(src, {"inputs": [""], "outputs": ["x" * 10]})
    assert s == 0.0 and dt < FAST.timeout_s + KILL_MARGIN_S


def test_write_outside_tempdir(contained, tmp_path):
    target = tmp_path / "pwned.txt"
    home = os.path.expanduser("~/coevo_sandbox_pwned.txt")
    in_tmp = f"/tmp/coevo_sandbox_pwned_{os.getpid()}"
    src = (
        "import os\n"
        "ok = 0\n"
        f"for p in [{str(target)!r}, {home!r}, '/etc/coevo_pwned', {str(tmp_path)!r} + '/x']:\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "        ok += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print('ok' if ok else 'no')"
    )
    s, _ = _hostile(src)
    assert not target.exists() and not (tmp_path / "x").exists()
    assert not os.path.exists(home)
    assert not os.path.exists("/etc/coevo_pwned")
    if os.geteuid() == 0:
        assert s == 0.0  # the sandbox user can write nowhere that reaches the host
        # /tmp inside the sandbox is a private tmpfs: writable, and gone afterwards
        src_tmp = f"open({in_tmp!r}, 'w').write('x')\nprint('ok')"
        assert code.score(src_tmp, ONE, config=FAST) == 1.0
        assert not os.path.exists(in_tmp)


def test_reading_parent_environment(contained, monkeypatch):
    monkeypatch.setenv("COEVO_SECRET_TOKEN", "hunter2")
    src = (
        "import os\n"
        "found = os.environ.get('COEVO_SECRET_TOKEN', '')\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        if b'hunter2' in open(f'/proc/{pid}/environ', 'rb').read():\n"
        "            found = 'hunter2'\n"
        "    except OSError:\n"
        "        pass\n"
        "print(found)"
    )
    s, _ = _hostile(src, {"inputs": [""], "outputs": ["hunter2"]})
    if os.geteuid() == 0:
        assert s == 0.0
    else:
        assert code.score("import os\nprint(os.environ.get('COEVO_SECRET_TOKEN'))", ONE) == 0.0


def test_opening_a_socket(contained):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    src = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
        "    print('ok')\n"
        "except OSError:\n"
        "    print('blocked')"
    )
    s, _ = _hostile(src)
    try:
        conn, _ = server.accept()
        conn.close()
        reached = True
    except (TimeoutError, OSError):
        reached = False
    server.close()
    result = run_program("print(1)", "stdio", [""], config=FAST)
    if result.isolation.net:
        assert s == 0.0 and not reached


def test_killing_the_parent(contained):
    me = os.getpid()
    src = (
        "import os, signal\n"
        f"for pid in (os.getppid(), {me}, 1):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('ok')"
    )
    s, _ = _hostile(src)
    if run_program("print(1)", "stdio", [""], config=FAST).isolation.pid:
        # the runner is its namespace's init, which a SIGKILL from inside cannot stop: the
        # program's own output is judged as usual
        assert s == 1.0
    else:
        assert s == 0.0  # the runner died with its results
    assert os.getpid() == me
    assert code.score("print('ok')", ONE) == 1.0  # and the next run is unaffected


def test_exit_before_tests(contained):
    tc = {"asserts": ["assert f(2) == 4"]}
    for src in (
        "import sys\nsys.exit(0)\ndef f(x): return 4",
        "import os\nos._exit(0)\ndef f(x): return 4",
        "def f(x): return 4\nraise SystemExit(0)",
    ):
        assert code.score(src, tc) == 0.0, src
    assert (
        code.score("import sys\nsys.exit(0)", {"inputs": [[2]], "outputs": [4]}, fn_name="f") == 0
    )


def test_monkeypatching_the_harness(contained):
    tc = {"asserts": ["assert f(2) == 4", "assert f(3) == 9"]}
    always_equal = (
        "class Any:\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "    __hash__ = None\n"
        "def f(x):\n"
        "    return Any()\n"
    )
    assert code.score(always_equal, tc) == 0.0
    assert code.score(always_equal, {"inputs": [[2]], "outputs": [4]}, fn_name="f") == 0.0
    int_subclass = (
        "class Liar(int):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "def f(x):\n"
        "    return Liar(0)\n"
    )
    assert code.score(int_subclass, tc) == 0.0
    patched = (
        "import builtins, os\n"
        "builtins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.repr = lambda x: \"('done', 'x')\"\n"
        "builtins.isinstance = lambda *a: True\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, b\"('done', '0000000000000000')\\n\")\n"
        "    except OSError:\n"
        "        pass\n"
        "def f(x):\n"
        "    return -1\n"
    )
    assert code.score(patched, tc) == 0.0
    fake_output = (
        "import sys\nsys.stdout.write('ok\\n')\nsys.stdout.flush()\nimport os\nos._exit(0)"
    )
    assert code.score(fake_output, {"inputs": [""], "outputs": ["secret\n"]}) == 0.0


def test_isolation_report():
    r = run_program("print(1)", "stdio", [""], config=FAST)
    assert r.compiled and r.tests[0]["stdout"] == "1\n"
    if os.geteuid() == 0:
        assert isinstance(r.isolation.user, int) and r.isolation.user >= FAST.uid_base
        assert r.isolation.mount and r.isolation.net and r.isolation.pid, r.isolation.errors
