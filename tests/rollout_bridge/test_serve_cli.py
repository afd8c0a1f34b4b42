"""``coevo serve`` stops every server it started on Ctrl-C, SIGTERM and SIGHUP."""

import contextlib
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from rollout_bridge.launcher import free_port
from tests.rollout_bridge.test_http_bridge import HF_CONFIG


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path):
    """A failing case must not leave ``coevo serve`` or its server behind: the server runs in
    its own session, so nothing else reaches it. Every process started here names this
    test's ``tmp_path`` (its ``--random-config``) on its command line."""
    yield
    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(tmp_path) in " ".join(proc.info["cmdline"] or ()):
            mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(mine, timeout=10)


def _serve(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(HF_CONFIG))
    argv = [sys.executable, "-m", "coevo_jax.cli", "serve", "--engine", "inprocess",
            "--random-config", str(cfg), "--agents", "2", "--max-lora-rank", "4",
            "--port", str(free_port()), "--timeout", "300"]  # fmt: skip
    # Ctrl-C reaches a foreground command whose SIGINT is at its default. A test run started
    # in the background of a non-interactive shell (nohup ... &) inherits SIGINT ignored, and
    # Python then never installs its KeyboardInterrupt handler: give the child the default back.
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_coevo_serve_leaves_no_process_behind(tmp_path, sig):
    proc = _serve(tmp_path)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("ready:"):
            break
    assert lines and lines[-1].startswith("ready:"), "".join(lines)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the server runs as a child of coevo serve"
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(c.is_running() for c in children):
        time.sleep(0.2)
    alive = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"{sig.name} left {alive} running"


def test_a_signal_while_the_server_starts_stops_it_too(tmp_path):
    proc = _serve(tmp_path)
    first = proc.stdout.readline()
    assert first.startswith("starting:"), first
    deadline = time.monotonic() + 30
    children = []
    while time.monotonic() < deadline and not children:
        children = psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.1)
    assert children
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    psutil.wait_procs(children, timeout=30)
    assert not [c.pid for c in children if c.is_running() and c.status() != "zombie"]
