"""Scripts that drive the library end to end (not benchmarks, not part of the package)."""
