"""Throughput benchmarks against the PyTorch stack; see benchmarks/README.md."""
