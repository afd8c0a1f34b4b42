"""``python -m coevo_jax``: the ``coevo`` command."""

import sys

from coevo_jax.cli import main

sys.exit(main())
