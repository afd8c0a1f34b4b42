"""A wheel of the project ships the run configs: a non-editable install runs ``coevo train``
with a bundled config by name from any directory (issue 49)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from coevo_jax._config import BUNDLED_CONFIG_DIR

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the source (setuptools writes build/ beside the source)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("coevo_jax", "rollout_bridge"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            str(src),
            "-w",
            str(tmp / "dist"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = (tmp / "dist").glob("coevo_jax-*.whl")
    return built


def test_wheel_holds_every_bundled_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {f"coevo_jax/configs/{p.name}" for p in BUNDLED_CONFIG_DIR.glob("*.yaml")}
    assert bundled and bundled <= names, bundled - names


@pytest.mark.slow
def test_installed_wheel_prints_a_bundled_config_from_another_directory(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    py = venv / "bin" / "python"
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [str(venv / "bin" / "coevo"), "train", "--config", "cpu_default", "--print-config"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("setting: homogeneous\n")
    where = subprocess.run(
        [str(py), "-c", "import coevo_jax; print(coevo_jax.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        check=True,
    ).stdout
    assert str(venv) in where, where  # the wheel's copy, not the editable source tree
