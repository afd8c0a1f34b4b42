"""call_with_timeout: results, errors, and a hard stop for C-level work."""

import time

from coevo_jax.rewards._isolate import call_with_timeout


def test_ok_error_timeout():
    assert call_with_timeout(divmod, (7, 2), timeout_s=10) == ("ok", (3, 1))
    status, msg = call_with_timeout(divmod, (1, 0), timeout_s=10)
    assert status == "error" and "ZeroDivisionError" in msg
    t = time.monotonic()
    # one C-level bignum computation, which no signal interrupts (a builtin, so that a
    # forkserver child can unpickle it; functions of test modules are not importable there)
    assert call_with_timeout(pow, (7, 10**9), timeout_s=0.5) == ("timeout", None)
    assert time.monotonic() - t < 3.0
