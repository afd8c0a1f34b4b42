"""TRL 1.16 ``GRPOTrainer._compute_loss`` driven with given per-token log-probs (RECIPES.md)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from types import SimpleNamespace

import numpy as np


def trl_loss_and_grad(
    logp,
    old_logp,
    ref_logp,
    advantages,
    mask,
    *,
    eps_low,
    eps_high,
    beta,
    level,
    loss_type,
    importance_sampling_ratio=None,
):
    """Loss value and d loss / d logp from TRL, all float64 numpy out (computed in fp32).

    ``importance_sampling_ratio`` (``[B, 1]`` or ``[B, T]``), when given, is TRL's vLLM
    importance-sampling weight (``vllm_importance_sampling_correction``), fed as computed.
    """
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl import GRPOTrainer

    new = torch.tensor(np.asarray(logp), dtype=torch.float32, requires_grad=True)
    B, T = new.shape
    t = object.__new__(GRPOTrainer)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (new, torch.zeros_like(new), None)
    t.top_entropy_quantile = 1.0
    t.off_policy_mask_threshold = None
    t.importance_sampling_level = level
    t.loss_type = loss_type
    t.epsilon_low = eps_low
    t.epsilon_high = eps_high
    t.beta = beta
    t.args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
    t.use_vllm = importance_sampling_ratio is not None
    t.vllm_importance_sampling_correction = importance_sampling_ratio is not None
    t.model = SimpleNamespace(training=True)
    t.current_gradient_accumulation_steps = 1
    t.max_completion_length = T
    t._entropy_bonus_enabled = False
    t.aux_loss_enabled = False
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = SimpleNamespace(
        num_processes=1, reduce=lambda x, reduction="sum": x, gather=lambda x: x
    )
    m = torch.tensor(np.asarray(mask), dtype=torch.int64)
    inputs = {
        "prompt_ids": torch.zeros((B, 1), dtype=torch.int64),
        "prompt_mask": torch.ones((B, 1), dtype=torch.int64),
        "completion_ids": torch.zeros((B, T), dtype=torch.int64),
        "completion_mask": m,
        "advantages": torch.tensor(np.asarray(advantages), dtype=torch.float32),
        "old_per_token_logps": torch.tensor(np.asarray(old_logp), dtype=torch.float32),
        "ref_per_token_logps": torch.tensor(np.asarray(ref_logp), dtype=torch.float32),
        "num_items_in_batch": m.sum().float(),
    }
    if importance_sampling_ratio is not None:
        inputs["importance_sampling_ratio"] = torch.tensor(
            np.asarray(importance_sampling_ratio), dtype=torch.float32
        )
    loss = GRPOTrainer._compute_loss(t, None, inputs)
    loss.backward()
    metrics = {k: v[-1] for k, v in t._metrics["train"].items()}
    return float(loss.detach()), new.grad.numpy().astype(np.float64), metrics
