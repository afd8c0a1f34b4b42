"""The code that runs inside the sandbox: a privileged launcher, then an unprivileged runner.

This file is never imported by the package. :mod:`coevo_jax.rewards.sandbox` reads its source
and runs it as ``python -I -S -c <source> launch`` with the job (JSON) on stdin, so the child
depends on nothing but the standard library and sees no site-packages, no ``PYTHON*``
variables and no user site.

Phase 1, ``launch`` (the caller's user, root on a training box):
  1. new network namespace (loopback only, and down), a new PID namespace and, as root, a new
     mount namespace with a private size-limited tmpfs on ``/tmp``, ``/var/tmp`` and
     ``/dev/shm``; the fresh work directory lives on that tmpfs, so nothing written there
     reaches the host;
  2. as root: the interpreter prefix is bind-mounted under the private ``/tmp`` (the caller's
     prefix may sit under a ``0700`` home that the sandbox user cannot traverse);
  3. rlimits (CPU, address space, processes, file size, open files, no core files);
  4. as root: drop to the sandbox uid/gid with no supplementary groups;
  5. the lowest CPU priority (nice 19), so that a program spinning in many processes never
     starves the trainer or the caller's kill;
  6. parent-death signal, then ``execve`` of the interpreter in phase 2 with a clean
     environment.
Each step that the OS refuses is reported in the ``isolation`` line, never silently skipped.

With a PID namespace the launcher forks once: the child becomes the namespace's init and
goes on to phase 2, the launcher only waits. When the caller kills the launcher, the
parent-death signal kills that init and the kernel kills every process left in the
namespace at once, including ones that called ``setsid`` or forked in a loop; no sweep of
the process table has to race them.

Phase 2, ``run`` (the sandbox user): compiles the program once, then runs every test in a
fresh ``fork`` of itself with the remaining time budget, and streams one JSON line per test
to its stdout. The runner is made non-dumpable so the program cannot ptrace it. The program
never sees the expected stdout or return values of stdin and call tests; the parent compares.
For assert-style tests (weaker: the assert source, expected values included, is inside the
child) every ``assert`` is rewritten into a call that ships both sides of the comparison, as
plain built-in data, to the parent, which re-judges it; see ``_assert_hooks``.
"""

import ast
import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MAX_FD = 1024


def _emit(obj):
    data = (json.dumps(obj) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def launch():
    job = json.loads(sys.stdin.buffer.read().decode())
    sys.stdin.close()
    libc = _libc()
    report = {"net": False, "mount": False, "pid": False, "user": "caller", "errors": []}
    is_root = os.geteuid() == 0

    ns = CLONE_NEWNS if is_root else CLONE_NEWUSER
    net = CLONE_NEWNET if job["isolate_net"] else 0
    # Strongest first; each later entry drops what an older kernel or a container's seccomp
    # profile may refuse.
    attempts = [ns | CLONE_NEWPID | net, ns | net, net] if net else [ns | CLONE_NEWPID, ns]
    for flags in attempts:
        if libc.unshare(flags) == 0:
            report["net"] = bool(flags & CLONE_NEWNET)
            report["mount"] = bool(flags & CLONE_NEWNS)
            report["pid"] = bool(flags & CLONE_NEWPID)
            break
    else:
        report["errors"].append(f"unshare: errno {ctypes.get_errno()}")

    python = job["python"]
    workdir = job["workdir"]
    if report["mount"]:
        ok = libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
        opts = f"size={job['tmpfs_mb']}m,mode=1777".encode()
        for target in (b"/tmp", b"/var/tmp", b"/dev/shm"):
            if os.path.isdir(target):
                ok = ok and libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV, opts) == 0
        if ok and job["prefix"] and job["masked"]:
            # The interpreter prefix sits under a directory the sandbox user cannot traverse
            # (a 0700 home): stage a bind mount of it, hide that directory under an empty
            # tmpfs, and put the prefix back at its own path so RUNPATHs still resolve.
            prefix, masked = job["prefix"].encode(), job["masked"].encode()
            os.mkdir("/tmp/.python", 0o755)
            ok = libc.mount(prefix, b"/tmp/.python", None, MS_BIND | MS_REC, None) == 0
            ok = (
                ok
                and libc.mount(b"tmpfs", masked, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755") == 0
            )
            if ok:
                os.makedirs(prefix, 0o755, exist_ok=True)
                ok = libc.mount(b"/tmp/.python", prefix, None, MS_BIND | MS_REC, None) == 0
        if ok:
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        else:
            report["mount"] = False
            report["errors"].append(f"mount: errno {ctypes.get_errno()}")

    uid, gid = job["uid"], job["gid"]
    if is_root and uid is not None and not report["mount"]:
        # Without a private mount the interpreter under a 0700 home may be unreachable for
        # the sandbox user; the parent decides (via require_drop) whether to go on as root.
        if job["require_drop"]:
            report["errors"].append("cannot drop privileges without a mount namespace")
            _emit({"isolation": report, "fatal": True})
            return
        uid = None
    if is_root and uid is not None:
        os.chown(workdir, uid, gid)
    job_path = os.path.join(workdir, ".job.json")
    with open(job_path, "w") as f:
        json.dump(job["payload"], f)
    if is_root and uid is not None:
        os.chown(job_path, uid, gid)

    if report["pid"]:
        _become_init()

    lim = job["limits"]
    dropping = is_root and uid is not None
    for name, value in (
        ("RLIMIT_CPU", lim["cpu_s"]),
        ("RLIMIT_AS", lim["address_space_mb"] << 20),
        # RLIMIT_NPROC counts every process of the real uid: meaningful only for the
        # dedicated sandbox uid (root ignores it, and another caller uid has its own).
        ("RLIMIT_NPROC", lim["nproc"] if dropping else None),
        ("RLIMIT_FSIZE", lim["file_size_mb"] << 20),
        ("RLIMIT_NOFILE", lim["nofile"]),
        ("RLIMIT_CORE", 0),
    ):
        if value is None:
            continue
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError) as e:
            report["errors"].append(f"{name}: {e}")

    if is_root and uid is not None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        report["user"] = uid
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except OSError as e:
        report["errors"].append(f"setpriority: {e}")
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    _emit({"isolation": report})
    os.chdir(workdir)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
    os.execve(python, [python, "-I", "-S", "-c", job["source"], "run"], env)


def _become_init():
    """Forks into the new PID namespace; only the child (its init) returns.

    The launcher closes its copy of stdout, so the caller's end of file means the runner and
    everything it started are gone, and waits so that the caller's process group still holds
    a live process to kill.
    """
    pid = os.fork()
    if pid == 0:
        return
    os.close(1)
    _, status = os.waitpid(pid, 0)  # EINTR is retried by Python itself (PEP 475)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


# ---------------------------------------------------------------------------------------------
# Phase 2: the runner.

_PLAIN_SCALARS = (int, float, complex, str, bytes, bool, type(None))


class NotPlain(Exception):
    pass


def _make_plain():
    """A converter to built-in data, bound to references taken before the program runs."""
    _type, _isinstance, _list, _tuple, _dict = type, isinstance, list, tuple, dict
    _set, _frozenset, _int, _float, _str, _bytes = set, frozenset, int, float, str, bytes
    scalars = _PLAIN_SCALARS
    bases = ((bool, bool), (int, _int), (float, _float), (str, _str), (bytes, _bytes))

    def plain(x, depth=0):
        if depth > 200:
            raise NotPlain("too deep")
        t = _type(x)
        if t in scalars:
            return x
        if t is _list or t is _tuple:
            return t([plain(v, depth + 1) for v in x])
        if t is _dict:
            return {plain(k, depth + 1): plain(v, depth + 1) for k, v in _dict.items(x)}
        if t is _set or t is _frozenset:
            return t(plain(v, depth + 1) for v in x)
        # Subclasses (namedtuple, IntEnum, OrderedDict, Counter...) are reduced to their
        # built-in base so that any custom __eq__ they carry is gone before comparison.
        for base, conv in bases:
            if _isinstance(x, base):
                return plain(conv(x), depth + 1)
        if _isinstance(x, _dict):
            return {plain(k, depth + 1): plain(v, depth + 1) for k, v in _dict.items(x)}
        if _isinstance(x, (_list, _tuple)):
            return plain(_list(x) if _isinstance(x, _list) else _tuple(x), depth + 1)
        if _isinstance(x, (_set, _frozenset)):
            return _frozenset(plain(v, depth + 1) for v in x)
        raise NotPlain(t.__name__)

    return plain


def _close_other_fds(keep):
    keep = sorted(k for k in keep if k > 2)
    lo = 3
    for k in keep:
        os.closerange(lo, k)
        lo = k + 1
    os.closerange(lo, MAX_FD)


class _AssertRewriter(ast.NodeTransformer):
    def __init__(self, eq_name, true_name):
        self.eq_name, self.true_name = eq_name, true_name

    def visit_Assert(self, node):
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            call = ast.Call(ast.Name(self.eq_name, ast.Load()), [t.left, t.comparators[0]], [])
        else:
            call = ast.Call(ast.Name(self.true_name, ast.Load()), [t], [])
        return ast.copy_location(ast.Expr(call), node)


def _assert_hooks(fd, plain):
    """Hooks that replace ``assert``: ship plain values to the parent, stop on failure."""
    _repr, _write, _len = repr, os.write, len
    limit = 1 << 20

    def send(rec):
        data = (_repr(rec) + "\n").encode()
        if _len(data) > limit:
            raise AssertionError("value too large")
        _write(fd, data)

    def eq(a, b):
        try:
            pa, pb = plain(a), plain(b)
        except NotPlain as e:
            send(("x", _repr(str(e))))
            raise AssertionError("not plain data") from None
        send(("eq", _repr(pa), _repr(pb)))
        if not pa == pb:
            raise AssertionError

    def true(v):
        try:
            pv = plain(v)
        except NotPlain as e:
            send(("x", _repr(str(e))))
            raise AssertionError("not plain data") from None
        send(("true", _repr(pv)))
        if not pv:
            raise AssertionError

    return eq, true


def _child(mode, compiled, test, value_fd, out_fd, in_fd, payload, nonce):
    """Runs one test in a forked child; never returns."""
    try:
        # dies with the runner (whose own death signal fires when the caller dies)
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        keep = [] if value_fd is None else [value_fd]
        _close_other_fds(keep)
        plain = _make_plain()
        _exit = os._exit
        g = {"__name__": "__main__", "__builtins__": __builtins__}
        if mode == "stdio":
            try:
                exec(compiled, g)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                sys.stdout.flush()
                _exit(code)
            sys.stdout.flush()
            _exit(0)
        if mode == "call":
            exec(compiled, g)
            fn_name = payload["fn_name"]
            fn = g.get(fn_name)
            if fn is None and "Solution" in g:
                fn = getattr(g["Solution"](), fn_name)
            result = fn(*test)
            data = (repr(("ret", repr(plain(result)))) + "\n").encode()
            os.write(value_fd, data)
            _exit(0)
        # asserts
        exec(compiled, g)
        eq_name, true_name = "_coevo_eq_" + nonce, "_coevo_true_" + nonce
        tree = _AssertRewriter(eq_name, true_name).visit(ast.parse(test))
        code = compile(ast.fix_missing_locations(tree), "<test>", "exec")
        g[eq_name], g[true_name] = _assert_hooks(value_fd, plain)
        exec(code, g)
        os.write(value_fd, (repr(("done", nonce)) + "\n").encode())
        _exit(0)
    except BaseException:
        try:
            sys.stdout.flush()
        finally:
            os._exit(1)


def _collect(pid, fds, deadline, cap):
    """Reads ``fds`` until EOF or ``deadline``; returns (bufs, status, wait status)."""
    bufs = {fd: bytearray() for fd in fds}
    open_fds = list(fds)
    status = "ok"
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                continue
            bufs[fd] += chunk
            if len(bufs[fd]) > cap:
                status = "oversize"
                open_fds = []
                break
    if status != "ok":
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return bufs, status, None
    while True:
        done, wstatus = os.waitpid(pid, os.WNOHANG)
        if done:
            return bufs, status, wstatus
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return bufs, "timeout", None
        time.sleep(0.002)


def run():
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with open(".job.json") as f:
        payload = json.load(f)
    os.unlink(".job.json")
    sys.set_int_max_str_digits(0)
    deadline = time.monotonic() + payload["budget_s"]
    mode = payload["mode"]
    cap = payload["output_cap"]
    nonce = os.urandom(8).hex()
    try:
        compiled = compile(payload["code"], "<solution>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        _emit({"compile_error": f"{type(e).__name__}: {e}"})
        return
    _emit({"compiled": True})
    devnull_in = os.open(os.devnull, os.O_RDONLY)
    for i, test in enumerate(payload["tests"]):
        if time.monotonic() >= deadline:
            _emit({"i": i, "status": "timeout"})
            continue
        in_fd = devnull_in
        if mode == "stdio":
            path = f".in{i}"
            with open(path, "w") as f:
                f.write(test)
            in_fd = os.open(path, os.O_RDONLY)
        out_r, out_w = os.pipe()
        val_r, val_w = (None, None) if mode == "stdio" else os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            if val_r is not None:
                os.close(val_r)
            _child(mode, compiled, test, val_w, out_w, in_fd, payload, nonce)
        os.close(out_w)
        if val_w is not None:
            os.close(val_w)
        if in_fd != devnull_in:
            os.close(in_fd)
            os.unlink(f".in{i}")
        fds = [out_r] + ([val_r] if val_r is not None else [])
        bufs, status, wstatus = _collect(pid, fds, deadline, cap)
        for fd in fds:
            os.close(fd)
        rec = {"i": i, "status": status}
        if wstatus is not None:
            rec["exit"] = os.waitstatus_to_exitcode(wstatus)
        if mode == "stdio":
            rec["stdout"] = bufs[out_r].decode("utf-8", "replace")
        else:
            rec["values"] = bufs[val_r].decode("utf-8", "replace")
            rec["nonce"] = nonce
        _emit(rec)


if __name__ == "__main__":
    if sys.argv[1:] == ["launch"]:
        launch()
    elif sys.argv[1:] == ["run"]:
        run()
