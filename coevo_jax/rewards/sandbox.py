"""Runs untrusted Python programs against tests in an isolated child process.

The child side lives in ``_sandbox_child.py`` (read as text and run with ``python -I -S -c``,
so it imports nothing from this package). What the child gets:

- its own session and process group (``start_new_session``), killed as a whole on timeout,
  and its own PID namespace where the kernel allows one, so that killing the runner kills
  every process the program started (see ``_sandbox_child.py``); it runs at nice 19;
- as root: a dedicated uid from ``[uid_base, uid_base + uid_count)``, leased with an
  ``flock`` so two concurrent sandboxes never share one (``RLIMIT_NPROC`` counts per uid, and
  the final sweep kills *every* process of that uid, including ones that left the group with
  ``setsid``). The uid needs no ``/etc/passwd`` entry;
- a new network namespace (no interfaces up; no route anywhere) and, as root, a new mount
  namespace with private tmpfs ``/tmp``, ``/var/tmp``, ``/dev/shm`` holding the work
  directory, and the caller's home hidden behind an empty tmpfs;
- rlimits on CPU seconds, address space, processes, file size and open files; no core files;
- a clean environment (``PATH``, ``LANG``, ``HOME``, ``TMPDIR`` only);
- a wall clock of ``timeout_s`` from spawn to the last result, compilation included.

Best effort, as documented per field of :class:`Isolation`: without root there is no uid
switch and no mount namespace (the work directory is a host temp directory that is removed
afterwards), and the network namespace is attempted through an unprivileged user namespace;
if the kernel refuses, the run proceeds and ``Isolation.net`` says so. Hand-written because no
maintained library does namespaces + rlimits + per-test judging for Python on Linux without
a container runtime.
"""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import json
import logging
import math
import os
import pwd
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

_CHILD_SOURCE = Path(__file__).with_name("_sandbox_child.py").read_text()
_LOCK_DIR = Path(tempfile.gettempdir()) / "coevo_jax_sandbox_uids"
# uids this process has leased, newest last (tests check that nothing of theirs survives)
log = logging.getLogger(__name__)
leased_uids: collections.deque[int] = collections.deque(maxlen=4096)

Mode = Literal["stdio", "call", "asserts"]


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandboxed run.

    Attributes:
      timeout_s: wall clock for interpreter start, compilation and all tests together.
      cpu_s: ``RLIMIT_CPU`` per process; default ``ceil(timeout_s) + 1``.
      address_space_mb: ``RLIMIT_AS`` per process.
      nproc: ``RLIMIT_NPROC`` for the sandbox uid (root callers only).
      file_size_mb: ``RLIMIT_FSIZE``.
      nofile: ``RLIMIT_NOFILE``.
      tmpfs_mb: size of each private tmpfs (root callers only).
      output_cap_mb: most stdout bytes kept per test; more fails that test.
      isolate_net: put the child in a new network namespace.
      uid_base, uid_count: the uid range leased to sandboxes when the caller is root.
      require_drop: as root, refuse to run (score 0) if privileges cannot be dropped.
    """

    timeout_s: float = 10.0
    cpu_s: int | None = None
    address_space_mb: int = 2048
    nproc: int = 64
    file_size_mb: int = 16
    nofile: int = 256
    tmpfs_mb: int = 64
    output_cap_mb: int = 16
    isolate_net: bool = True
    uid_base: int = 61000
    uid_count: int = 1000
    require_drop: bool = True

    def __post_init__(self):
        if not self.timeout_s > 0:
            raise ValueError(f"SandboxConfig.timeout_s must be > 0, got {self.timeout_s}")
        for name in ("address_space_mb", "nproc", "file_size_mb", "nofile", "tmpfs_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"SandboxConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.output_cap_mb <= 0:
            raise ValueError(f"SandboxConfig.output_cap_mb must be > 0, got {self.output_cap_mb}")
        if self.uid_base <= 0 or self.uid_count < 1:
            raise ValueError(
                f"SandboxConfig needs uid_base > 0 and uid_count >= 1, got {self.uid_base}, "
                f"{self.uid_count}"
            )


@dataclasses.dataclass
class Isolation:
    """What the OS granted: ``net`` (own network namespace), ``mount`` (private tmpfs and
    hidden home), ``user`` (the uid the program ran as, or ``"caller"``), ``errors``, and
    ``pid`` (own PID namespace: every process the program starts dies with the runner)."""

    net: bool = False
    mount: bool = False
    user: int | str = "caller"
    errors: list[str] = dataclasses.field(default_factory=list)
    pid: bool = False


@dataclasses.dataclass
class SandboxResult:
    """Raw outcome of one run; judging is the caller's job (see ``coevo_jax.rewards.code``).

    ``tests[i]`` is ``None`` when test ``i`` produced no record (timeout, killed runner), else
    a dict with ``status`` (``ok|timeout|oversize``), ``exit`` (exit code, when it exited),
    and ``stdout`` (stdio mode) or ``values`` + ``nonce`` (call and asserts modes).
    """

    compiled: bool
    compile_error: str | None
    tests: list[dict[str, Any] | None]
    timed_out: bool
    isolation: Isolation
    wall_s: float


def _python_layout() -> tuple[str, str | None, str | None]:
    """(interpreter path, its prefix, the topmost prefix ancestor others cannot traverse)."""
    python = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith(prefix + os.sep):
        return python, None, None
    parts = Path(prefix).parts
    for i in range(2, len(parts) + 1):
        d = os.path.join(*parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return python, prefix, d
    return python, prefix, None


class _UidLease:
    """An exclusive lease on one sandbox uid, held through an ``flock``ed file."""

    def __init__(self, base: int, count: int):
        _LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        start = random.randrange(count)
        for k in range(count):
            uid = base + (start + k) % count
            try:
                pwd.getpwuid(uid)
                continue  # a real account: never borrow it
            except KeyError:
                pass
            fd = os.open(_LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            leased_uids.append(uid)
            kill_uid(uid)  # leftovers of a crashed earlier holder
            return
        raise RuntimeError(f"no free sandbox uid in [{base}, {base + count})")

    def release(self):
        os.close(self._fd)


def kill_uid(uid: int) -> None:
    """SIGKILLs every process owned by ``uid`` (root only): ``kill -9 -1`` run as that uid.

    The kernel walks the task list under a lock that ``fork`` also needs, so a fork bomb cannot
    outrun the sweep. The helper is spawned by ``subprocess`` (fork+exec in C), which is safe
    in a multithreaded (JAX) process, unlike ``os.fork``.
    """
    try:
        subprocess.run(
            ["/bin/sh", "-c", "kill -9 -1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        log.warning("code sandbox: the kill sweep for uid %d took over 10 s", uid)


def uid_processes(uid: int) -> list[int]:
    """Pids of live (not zombie) processes whose real uid is ``uid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                text = f.read(2048)
        except OSError:
            continue
        state = uid_line = ""
        for line in text.splitlines():
            if line.startswith("State:"):
                state = line
            elif line.startswith("Uid:"):
                uid_line = line
                break
        if uid_line.split()[1:2] == [str(uid)] and "zombie" not in state:
            out.append(int(name))
    return out


def uid_is_free(uid: int) -> bool:
    """Whether no sandbox holds ``uid`` right now (its lease lock is free)."""
    path = _LOCK_DIR / str(uid)
    if not path.exists():
        return True
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _wait_uid_gone(uid: int, timeout_s: float = 5.0) -> None:
    # SIGKILLed processes still need to unmap their memory before they are gone; the uid is
    # leased to the next sandbox only once none is left.
    deadline = time.monotonic() + timeout_s
    while uid_processes(uid) and time.monotonic() < deadline:
        kill_uid(uid)
        time.sleep(0.01)


def run_program(
    code: str,
    mode: Mode,
    tests: list[Any],
    *,
    fn_name: str | None = None,
    config: SandboxConfig = SandboxConfig(),
) -> SandboxResult:
    """Runs ``code`` against ``tests`` in the sandbox and returns what each test produced.

    Args:
      code: the program source.
      mode: ``"stdio"`` (each test is a stdin string; stdout is captured), ``"call"`` (each test
        is a list of positional arguments to ``fn_name``; the return value comes back as plain
        data) or ``"asserts"`` (each test is Python source run after the program; its
        ``assert`` statements ship their operands back).
      tests: one entry per test, as above.
      fn_name: the function to call in ``"call"`` mode (a method of ``Solution`` also works).
      config: limits.
    """
    if mode not in ("stdio", "call", "asserts"):
        raise ValueError(f"mode must be stdio|call|asserts, got {mode!r}")
    if mode == "call" and not fn_name:
        raise ValueError("mode 'call' needs fn_name")
    t0 = time.monotonic()
    is_root = os.geteuid() == 0
    lease = _UidLease(config.uid_base, config.uid_count) if is_root else None
    host_dir = tempfile.mkdtemp(prefix="coevo_sbx_")
    python, prefix, masked = _python_layout()
    cpu_s = config.cpu_s or math.ceil(config.timeout_s) + 1
    job = {
        "isolate_net": config.isolate_net,
        "python": python,
        "prefix": prefix,
        "masked": masked,
        "workdir": host_dir,
        "tmpfs_mb": config.tmpfs_mb,
        "uid": lease.uid if lease else None,
        "gid": lease.uid if lease else None,
        "require_drop": config.require_drop,
        "limits": {
            "cpu_s": cpu_s,
            "address_space_mb": config.address_space_mb,
            "nproc": config.nproc,
            "file_size_mb": config.file_size_mb,
            "nofile": config.nofile,
        },
        "source": _CHILD_SOURCE,
        "payload": {
            "mode": mode,
            "code": code,
            "tests": list(tests),
            "fn_name": fn_name,
            "budget_s": config.timeout_s,
            "output_cap": config.output_cap_mb << 20,
        },
    }
    proc = None
    lines: list[dict] = []
    timed_out = False
    try:
        proc = subprocess.Popen(
            [python, "-I", "-S", "-c", _CHILD_SOURCE, "launch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            cwd=host_dir,
        )
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        deadline = t0 + config.timeout_s
        total_cap = 4 * (config.output_cap_mb << 20) + (1 << 20)
        lines, timed_out = _read_lines(proc.stdout, deadline, total_cap)
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            if lease is not None:
                kill_uid(lease.uid)
                _wait_uid_gone(lease.uid)
            if proc is not None:
                proc.wait()
                proc.stdout.close()
        finally:
            if lease is not None:
                lease.release()
            shutil.rmtree(host_dir, ignore_errors=True)
    return _assemble(lines, len(tests), timed_out, time.monotonic() - t0)


def _read_lines(stream, deadline: float, cap: int) -> tuple[list[dict], bool]:
    fd = stream.fileno()
    buf = bytearray()
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > cap:
            break
    out = []
    for line in bytes(buf).split(b"\n"):
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            break  # a line cut by the cap or by a kill: everything after it is lost
        if isinstance(obj, dict):
            out.append(obj)
    return out, timed_out


def _assemble(lines: list[dict], n: int, timed_out: bool, wall_s: float) -> SandboxResult:
    iso = Isolation()
    compiled, compile_error = False, None
    tests: list[dict | None] = [None] * n
    for obj in lines:
        if "isolation" in obj:
            rep = obj["isolation"]
            iso = Isolation(
                rep["net"], rep["mount"], rep["user"], list(rep["errors"]), rep.get("pid", False)
            )
        elif "compile_error" in obj:
            compile_error = str(obj["compile_error"])
        elif obj.get("compiled"):
            compiled = True
        elif isinstance(obj.get("i"), int) and 0 <= obj["i"] < n:
            tests[obj["i"]] = obj
    return SandboxResult(compiled, compile_error, tests, timed_out, iso, wall_s)
