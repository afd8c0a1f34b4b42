"""The README's library example runs as written, and its set-up commands are the ones CI runs."""

import math
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_opens_with_the_two_setup_commands():
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert len(blocks) >= 2
    assert "coevo train" in blocks[0] and "pip install" in blocks[0]
    assert "pytest" in blocks[1] and ".[test]" in blocks[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "test-command" in ci


@pytest.mark.slow
def test_readme_library_example_runs():
    pytest.importorskip("gguf")
    from coevo_jax.models import default_model_path

    try:
        default_model_path()
    except (FileNotFoundError, ImportError, RuntimeError) as e:
        pytest.skip(f"embedded model not installed: {e}")
    code = re.search(r"```python\n(.*?)\n```", README.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README
    assert scope["h"].shape == (1, 2 * 576)
    assert math.isfinite(float(scope["loss"]))
