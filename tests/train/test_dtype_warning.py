"""make_groups warns when the policy step would multiply in bf16 on a converting CPU (not
when the trainer only evaluates)."""

import dataclasses
import warnings

import pytest

from coevo_jax.train import setup
from tests.train._tiny import tiny_backbone, tiny_config


def test_make_groups_passes_the_effective_matmul_dtype_and_warns(monkeypatch):
    seen = []

    def fake(dtype):
        seen.append(dtype)
        return "converted here" if dtype == "bfloat16" else None

    monkeypatch.setattr(setup, "matmul_dtype_warning", fake)
    cfg = tiny_config()  # compute float32, matmul None: float32
    bf16 = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, matmul_dtype="bfloat16"))
    with pytest.warns(RuntimeWarning, match="converted here"):
        setup.make_groups(bf16, [tiny_backbone()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup.make_groups(cfg, [tiny_backbone()])
        setup.make_groups(bf16, [tiny_backbone()], warn_dtype=False)  # evaluation: no step
    assert seen == ["bfloat16", "float32"]
