"""Imported once by the forkserver that spawns reward workers, so that every worker starts
with SymPy, the LaTeX parser and the IFEval registry (nltk alone imports for seconds)
already loaded."""

import sympy  # noqa: F401
from latex2sympy2_extended import latex2sympy  # noqa: F401

from coevo_jax.rewards import code, dispatch, ifeval, math, reasoning  # noqa: F401

# The first parse builds latex2sympy's ANTLR tables and pulls in SymPy's simplify machinery
# (seconds): do it here once, so no worker spends its first item's timeout on it.
math.symbolic_equal("(x+1)^2", "x^2+2x+1")

try:
    ifeval.registry()
except ImportError:  # lm-eval missing: IFEval items will score 0 with a logged error
    pass
