"""Run one function call in a child process under a wall clock that really stops it.

SymPy can spend minutes inside one C-level big-integer operation or recurse without ever
returning to the interpreter loop, so a signal-based timeout does not stop it (and signals
only work on the main thread). A child process is killed with SIGKILL instead.

The child is forked when that is safe (no JAX loaded, a single thread) and comes from a
forkserver otherwise: forking a process that runs XLA's thread pools can deadlock.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
from collections.abc import Callable
from typing import Any

PRELOAD = ["coevo_jax.rewards._preload"]


def forkserver_context():
    """The ``forkserver`` context, its server preloading the verifiers (set before it starts)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def mp_context():
    """``fork`` when this process is safe to fork, else ``forkserver``."""
    if "jax" in sys.modules or threading.active_count() > 1:
        return forkserver_context()
    return mp.get_context("fork")


def _child(conn, fn, args, kwargs):
    try:
        conn.send((True, fn(*args, **kwargs)))
    except BaseException as e:  # the parent decides what an error is worth
        try:
            conn.send((False, f"{type(e).__name__}: {e}"))
        except BaseException:
            pass
    finally:
        conn.close()


def call_with_timeout(
    fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None, *, timeout_s: float
) -> tuple[str, Any]:
    """Calls ``fn(*args, **kwargs)`` in a child; returns ``("ok", value)``,
    ``("error", message)`` or ``("timeout", None)``. ``fn`` and its result must pickle."""
    ctx = mp_context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args, kwargs or {}), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(timeout_s):
            try:
                ok, value = recv.recv()
            except (EOFError, OSError):
                return "error", "child died"
            return ("ok", value) if ok else ("error", value)
        return "timeout", None
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
        proc.join()
