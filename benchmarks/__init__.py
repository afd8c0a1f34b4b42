"""Throughput benchmarks against the PyTorch stack; see benchmarks/NOTES.md."""
