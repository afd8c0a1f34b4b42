"""The trainer's recompute of the engine's behaviour log-probs, and the gap per agent.

Every round the loop hands this module the round's fresh trajectory groups before any
policy step, so the adapters it recomputes with are exactly the ones the engine sampled
with. The groups are packed by the policy step's own batch builder
(``train.batching.build_policy_batch``: power-of-two rows, prompt widths in multiples of 64,
completions at the generation budget), so the forward-only function here compiles for the
same few shapes; rows run under their own agent's adapter, agent -1 with the adapter off.

The recompute uses the trainer's numerics (``RLConfig.compute_dtype`` / ``matmul_dtype``)
and the rollout temperature (the engine reports log-probs of ``softmax(logits / T)``; the
in-process sampler reports greedy rows, ``T = 0``, at temperature 1). Top-p is not
reproduced: with ``top_p < 1`` the engine renormalises over the kept tokens, so the gap then
also holds ``log(kept mass) <= 0`` per token.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models import ModelConfig
from coevo_jax.models.decoder import cast_matrices
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.correction import logprob_gap
from coevo_jax.rl.logprobs import PolicyBatch, sequence_logprobs
from coevo_jax.train.batching import build_policy_batch
from coevo_jax.train.buffers import Group
from coevo_jax.train.distributed import place_batch, to_host, under_mesh


@functools.partial(
    jax.jit,
    static_argnames=(
        "model_cfg",
        "compute_dtype",
        "matmul_dtype",
        "temperature",
        "chunk_size",
        "attention",
        "attention_block",
    ),
)
def recompute_logprobs(
    params: dict[str, Any],
    lora: LoRAWeights | None,
    batch: PolicyBatch,
    *,
    model_cfg: ModelConfig,
    compute_dtype: str = "float32",
    matmul_dtype: str | None = None,
    temperature: float = 1.0,
    chunk_size: int = 0,
    attention: str = "xla",
    attention_block: int = 512,
) -> jax.Array:
    """``[B, T]`` float32 log-probs of ``batch.completion_ids``, each row under its agent.

    Args:
      params: frozen backbone params.
      lora: stacked adapters (row ``b`` uses slot ``batch.agent_ids[b]``; -1 = adapter off),
        or None for the bare backbone everywhere.
      batch: a :class:`PolicyBatch` (ids, masks and agent ids are read).
      model_cfg: static model config.
      compute_dtype, matmul_dtype: the trainer's dtypes (``RLConfig``'s names).
      temperature: sampling temperature > 0 of the engine's reported log-probs.
      chunk_size: vocabulary-projection chunk over completion positions (0 = whole).
      attention, attention_block: the attention implementation (``RLConfig.attention``).

    Returns:
      log-probs, meaningless at masked positions. No dropout, no gradient.
    """
    md = jnp.dtype(matmul_dtype or compute_dtype)
    logp, _ = sequence_logprobs(
        cast_matrices(params, md),
        model_cfg,
        lora,
        batch,
        compute_dtype=jnp.dtype(compute_dtype),
        matmul_dtype=md,
        chunk_size=chunk_size,
        with_entropy=False,
        temperature=temperature,
        attention=attention,
        attention_block=attention_block,
    )
    return logp


def _chunks(groups: Sequence[Group], rows_per_batch: int) -> list[list[Group]]:
    out: list[list[Group]] = []
    rows = 0
    for g in groups:
        n = len(g.completions)
        if out and rows + n <= rows_per_batch:
            out[-1].append(g)
            rows += n
        else:
            out.append([g])
            rows = n
    return out


def group_gaps(
    groups: Sequence[Group],
    params: dict[str, Any],
    lora: LoRAWeights | None,
    model_cfg: ModelConfig,
    rl_cfg: RLConfig,
    *,
    completion_len: int,
    pad_id: int,
    temperature: float = 1.0,
    rows_per_batch: int = 64,
    chunk_size: int | None = None,
    place: Callable[[PolicyBatch], PolicyBatch] | None = None,
) -> dict[int, dict[str, float]]:
    """The engine/trainer log-prob gap of each agent over ``groups``.

    Args:
      groups: trajectory groups whose ``agent_id`` is the adapter slot of ``lora`` that
        sampled them (-1: the base model) and whose ``logprobs`` are the engine's; all of one
        group size (one round's, or a self-check's).
      params, lora: the backbone and the stacked adapters the samples came from.
      model_cfg: static model config.
      rl_cfg: supplies the trainer's dtypes and the batch builder's settings.
      completion_len: completion width T (the generation budget); longer completions are
        cut to it, as in the policy step.
      pad_id: padding token id.
      temperature: the rollout temperature (0, greedy, is scored at 1 as the sampler does).
      rows_per_batch: at most this many rows per forward pass (bounds memory; groups are
        never split, so a single larger group still runs whole).
      chunk_size: see :func:`recompute_logprobs` (None: ``rl_cfg.logprob_chunk``).
      place: optional ``batch -> batch`` placement (a mesh's ``place_batch``).

    Returns:
      ``{agent_id: {"token_abs", "seq_mean", "seq_absmax", "tokens", "sequences"}}`` as
      Python floats, for every agent id present in ``groups``
      (``coevo_jax.rl.correction.logprob_gap``).
    """
    if not groups:
        return {}
    temp = 1.0 if temperature == 0 else float(temperature)
    behaviour, recomputed, masks, agents = [], [], [], []
    for chunk in _chunks(groups, rows_per_batch):
        batch, stats = build_policy_batch(
            chunk, rl_cfg, completion_len=completion_len, pad_id=pad_id
        )
        rows = int(stats["rows"])
        if place is not None:
            batch = place(batch)
        lp = recompute_logprobs(
            params,
            lora,
            batch,
            model_cfg=model_cfg,
            compute_dtype=rl_cfg.compute_dtype,
            matmul_dtype=rl_cfg.matmul_dtype,
            temperature=temp,
            chunk_size=chunk_size if chunk_size is not None else rl_cfg.logprob_chunk,
            attention=rl_cfg.attention,
            attention_block=rl_cfg.attention_block,
        )
        recomputed.append(to_host(lp)[:rows])
        behaviour.append(to_host(batch.old_logp)[:rows])
        masks.append(to_host(batch.completion_mask)[:rows])
        agents.append(to_host(batch.agent_ids)[:rows])
    b, r, m, a = (np.concatenate(x) for x in (behaviour, recomputed, masks, agents))
    out = {}
    for agent in sorted({int(x) for x in a}):
        gap = logprob_gap(b, r, m, (a == agent).astype(np.float32))
        out[agent] = {k: float(v) for k, v in gap.items()}
    return out


def round_gaps(groups: Sequence[Any], rollouts: Any, cfg: Any) -> dict[str, dict[str, float]]:
    """:func:`group_gaps` of a round's complete groups (``train.rollouts.Rollouts``), per
    agent that sampled, under the adapters that sampled: the loop calls it before the
    policy step. ``groups`` are the system's agent groups; ``cfg`` the run's TrainConfig.

    Returns:
      ``{str(agent): gap summary}``.
    """
    g_size = cfg.rollout.group_size
    out: dict[str, dict[str, float]] = {}
    for g in groups:
        mine = [
            Group(
                agent_id=g.local(a),
                query_id=str(q),
                prompt_ids=tuple(ts[0].prompt_ids),
                completions=tuple(t.completion_ids for t in ts),
                logprobs=tuple(t.logprobs for t in ts),
                rewards=(0.0,) * g_size,
                version=0,
            )
            for q, a, ts, _ in rollouts.groups()
            if a in g.agents
        ]
        if not mine:
            continue
        with under_mesh(g.mesh):
            gaps = group_gaps(
                mine,
                g.backbone.params,
                g.policy.lora,
                g.backbone.cfg,
                cfg.rl,
                completion_len=cfg.rollout.max_new_tokens,
                pad_id=g.backbone.tokenizer.pad_token_id,
                temperature=cfg.rollout.temperature,
                rows_per_batch=max(64, cfg.loop.groups_per_step * g_size * len(g.agents)),
                place=None if g.mesh is None else (lambda b, m=g.mesh: place_batch(b, m)),
            )
        out.update({str(g.agents[local]): v for local, v in gaps.items()})
    return out
