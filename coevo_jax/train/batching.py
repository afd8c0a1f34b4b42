"""Turning popped trajectory groups into one ``PolicyBatch`` for the multi-agent step.

Row counts are bucketed (powers of two) and completion length is fixed to the generation
budget, so the jitted policy step compiles for a handful of shapes over a whole run; padding
rows carry agent id -1, which no loss and no gradient sees.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from coevo_jax.rl import group_advantages
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.logprobs import PolicyBatch
from coevo_jax.train.buffers import Group


def _bucket_pow2(n: int, multiple: int) -> int:
    b = 1
    while b < n:
        b *= 2
    return max(b, multiple) + (-max(b, multiple)) % multiple


def build_policy_batch(
    groups: Sequence[Group],
    rl_cfg: RLConfig,
    *,
    completion_len: int,
    pad_id: int,
    prompt_bucket: int = 64,
) -> tuple[PolicyBatch, dict[str, float]]:
    """Packs groups (any agents) into a left-padded-prompt / right-padded-completion batch.

    Advantages are computed per group with ``rl.group_advantages`` (DAPO/GRPO normalisation
    over the G rewards) and broadcast to the group's G sequences.

    Args:
      groups: the groups to train on; each contributes G rows.
      rl_cfg: supplies the advantage settings and the micro-batch count rows must divide by.
      completion_len: fixed completion width T (the generation budget).
      pad_id: token id for padding.
      prompt_bucket: prompt width is rounded up to a multiple of this.

    Returns:
      ``(batch, stats)`` where stats has the real row count and mean |advantage|.
    """
    if not groups:
        raise ValueError("build_policy_batch: no groups")
    rows = sum(len(g.completions) for g in groups)
    b = _bucket_pow2(rows, rl_cfg.micro_batches)
    p_len = max(len(g.prompt_ids) for g in groups)
    p_len = -(-p_len // prompt_bucket) * prompt_bucket
    prompt_ids = np.full((b, p_len), pad_id, np.int32)
    prompt_mask = np.zeros((b, p_len), np.int32)
    comp = np.full((b, completion_len), pad_id, np.int32)
    comp_mask = np.zeros((b, completion_len), np.float32)
    old_logp = np.zeros((b, completion_len), np.float32)
    agent_ids = np.full((b,), -1, np.int32)
    adv = np.zeros((b,), np.float32)
    sizes = {len(g.rewards) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}; advantages need one G")
    advantages = np.asarray(
        group_advantages(
            jnp.asarray([g.rewards for g in groups], jnp.float32),
            eps=rl_cfg.adv_eps,
            ddof=rl_cfg.adv_ddof,
            scale=rl_cfg.adv_scale,
        )
    )
    r = 0
    for g, a in zip(groups, advantages, strict=True):
        for j, (ids, lps) in enumerate(zip(g.completions, g.logprobs, strict=True)):
            n = min(len(ids), completion_len)
            prompt_ids[r, p_len - len(g.prompt_ids) :] = g.prompt_ids
            prompt_mask[r, p_len - len(g.prompt_ids) :] = 1
            comp[r, :n] = ids[:n]
            comp_mask[r, :n] = 1.0
            old_logp[r, :n] = lps[:n]
            agent_ids[r] = g.agent_id
            adv[r] = a[j]
            r += 1
    batch = PolicyBatch(
        prompt_ids=jnp.asarray(prompt_ids),
        prompt_mask=jnp.asarray(prompt_mask),
        completion_ids=jnp.asarray(comp),
        completion_mask=jnp.asarray(comp_mask),
        agent_ids=jnp.asarray(agent_ids),
        advantages=jnp.asarray(adv),
        old_logp=jnp.asarray(old_logp),
    )
    batch.check()
    return batch, {
        "rows": float(rows),
        "padded_rows": float(b),
        "mean_abs_adv": float(np.abs(adv[:rows]).mean()),
    }
