"""Evaluation: inference-time routing and aggregation over suites, baselines, reports."""

from coevo_jax.eval.collect import Collected, collect, extract_answer
from coevo_jax.eval.methods import evaluate_methods, threshold_active
from coevo_jax.eval.runner import evaluate_run, evaluate_system, suite_records

__all__ = [
    "Collected",
    "collect",
    "evaluate_methods",
    "evaluate_run",
    "evaluate_system",
    "extract_answer",
    "suite_records",
    "threshold_active",
]
