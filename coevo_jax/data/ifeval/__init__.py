"""Package data: the IFEval prompt set (see README.md)."""
