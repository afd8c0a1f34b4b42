"""The jitted multi-agent policy step (docs/design.md §2 step 7).

N agents are LoRA adapters stacked on one frozen backbone (``coevo_jax.lora``). One step takes
a batch whose sequences may belong to any of them, and:

1. computes each sequence's log-probs under its own agent in one forward pass, and the
   reference log-probs with the adapter off (same backbone, no second model) in a second,
   gradient-free pass that skips the LoRA matmuls entirely; stacking the two into one pass
   would run the backward through the reference rows too;
2. forms one loss per agent, ``sum(numer) / sum(denom)`` over that agent's sequences
   (``coevo_jax.rl.losses``), and differentiates the sum of those losses w.r.t. the adapter
   params only; an agent's loss depends on its own slice only, so each slice receives
   exactly its agent's gradient;
3. accumulates over micro-batches with a ``lax.scan``. Denominators depend only on masks, so
   they are computed for the whole batch first and every micro-batch's numerator is divided
   by the *global* per-agent denominator: the accumulated gradient equals the full-batch
   gradient exactly (up to summation order), whatever the token counts per micro-batch;
4. with ``length_buckets > 1``, sorts the rows by completion length and runs each
   micro-batch at the narrowest of a few compiled widths that holds its rows, skipping
   micro-batches of padding rows outright (``coevo_jax.rl.buckets``): rollouts stop early,
   so much of a batch padded to the generation budget is padding;
5. applies AdamW with global-norm clipping, vmapped over the agent axis: every agent has its
   own optimizer state, step count and so its own warmup + cosine schedule, counted in its
   own updates. Agents without a sequence in the batch keep params, moments and counts
   bit-for-bit (``jnp.where`` on the agent axis), so there is no Adam drift.

Precision: the trainable adapters and their optimizer state are fp32 master copies; the
forward/backward runs in ``compute_dtype`` (bf16 by default) with the projection and LM-head
matmuls in ``matmul_dtype`` (default: the compute dtype; fp32 accumulation either way),
log-softmax and loss in fp32. The step casts the backbone's matrices to the matmul dtype
once per call; store them in it beforehand (``models.decoder.cast_matrices``) to skip that.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models import ModelConfig
from coevo_jax.models.decoder import cast_matrices
from coevo_jax.rl import buckets
from coevo_jax.rl.config import RLConfig
from coevo_jax.rl.correction import truncated_is_weights
from coevo_jax.rl.logprobs import PolicyBatch, sequence_logprobs
from coevo_jax.rl.losses import policy_loss_terms

METRIC_NAMES = ("loss", "clip_low", "clip_high", "clip_region", "ratio", "kl", "entropy")


@struct.dataclass
class PolicyState:
    """Everything the policy step updates.

    Attributes:
      lora: stacked adapters, fp32 master copies (``A: [L, N, in, r]``, ``B: [L, N, r, out]``).
      opt_state: the optax state of one agent's optimizer, with a leading agent axis ``N`` on
        every leaf (moments ``[N, L, in, r]``, counts ``[N]``).
      agent_steps: ``[N]`` int32 updates applied to each agent so far.
      rng: PRNG key for LoRA dropout.
    """

    lora: LoRAWeights
    opt_state: Any
    agent_steps: jax.Array
    rng: jax.Array


def lr_schedule(cfg: RLConfig) -> optax.Schedule:
    """Linear warmup from 0 to ``learning_rate`` over ``warmup_steps``, then cosine decay to
    ``end_lr_ratio * learning_rate`` at ``decay_steps`` (HF's cosine-with-warmup shape)."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.decay_steps,
        end_value=cfg.learning_rate * cfg.end_lr_ratio,
    )


def make_optimizer(cfg: RLConfig) -> optax.GradientTransformation:
    """One agent's optimizer: global-norm clipping, then AdamW on the schedule."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.adamw(
            lr_schedule(cfg),
            b1=cfg.adam_b1,
            b2=cfg.adam_b2,
            eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay,
        ),
    )


def init_policy_state(lora: LoRAWeights, cfg: RLConfig, rng: jax.Array) -> PolicyState:
    """Fresh optimizer state for every agent; adapters are copied to fp32 master weights.

    The copy is real (never an alias of ``lora``'s buffers), so donating the state to the
    jitted step leaves the caller's ``lora`` intact.
    """
    lora = lora.replace(
        params=jax.tree.map(lambda x: jnp.array(x, jnp.float32, copy=True), lora.params)
    )
    opt_state = jax.vmap(make_optimizer(cfg).init, in_axes=1)(lora.params)
    return PolicyState(
        lora=lora,
        opt_state=opt_state,
        agent_steps=jnp.zeros((lora.n_agents,), jnp.int32),
        rng=rng,
    )


def _split_micro(x: jax.Array | None, k: int) -> jax.Array | None:
    if x is None:
        return None
    return x.reshape(k, x.shape[0] // k, *x.shape[1:])


def _select(present: jax.Array, new: Any, old: Any) -> Any:
    """Per-agent ``where`` over the leading agent axis of every leaf."""
    return jax.tree.map(
        lambda n, o: jnp.where(present.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old
    )


def policy_gradients(
    lora: LoRAWeights,
    params: dict[str, Any],
    batch: PolicyBatch,
    rng: jax.Array,
    *,
    model_cfg: ModelConfig,
    rl_cfg: RLConfig,
    chunk_size: int | None = None,
) -> tuple[dict[str, Any], dict[str, jax.Array]]:
    """Accumulated gradients of the per-agent losses w.r.t. the adapter params.

    Differentiates ``sum_n loss_n`` with ``loss_n = sum(numer over agent n's sequences) /
    sum(denom over agent n's sequences)``, over ``rl_cfg.micro_batches`` micro-batches.

    Args:
      lora: stacked adapters (the params differentiated).
      params: frozen backbone params (never differentiated).
      batch: a :class:`PolicyBatch` of ``B`` sequences; ``B`` must divide by
        ``rl_cfg.micro_batches``. Rows with agent id -1 are padding. With
        ``rl_cfg.length_buckets > 1`` the rows are regrouped longest first before they are
        split into micro-batches, and each micro-batch runs on the completion columns its
        rows need, rounded up to a bucket width.
      rng: PRNG key for LoRA dropout (unused when the dropout rate is 0).
      model_cfg, rl_cfg: static configs.
      chunk_size: vocabulary-projection chunk over completion positions (0 = whole); None
        = ``rl_cfg.logprob_chunk``. Used by the policy and the reference passes.

    Returns:
      ``(grads, metrics)``: grads with ``lora.params``' structure (fp32), and ``[N]`` float32
      per-agent metrics: ``loss``, ``clip_low``, ``clip_high``, ``clip_region``, ``ratio``,
      ``entropy``, ``kl`` (when ``beta > 0`` or reference log-probs are given),
      ``is_weight`` (with ``behavior_logprobs: recompute``), ``tokens``, ``sequences``; plus
      ``present`` (bool ``[N]``: agents with completion tokens).
    """
    k = rl_cfg.micro_batches
    b_total = batch.batch_size
    if b_total % k:
        raise ValueError(f"batch size {b_total} does not divide into {k} micro-batches")
    n_agents = lora.n_agents
    t_full = batch.completion_ids.shape[1]
    recompute_old = rl_cfg.behavior_logprobs == "recompute"
    if recompute_old and batch.old_logp is None:
        raise ValueError("behavior_logprobs: recompute needs the engine's log-probs in old_logp")
    md = jnp.dtype(rl_cfg.matmul_dtype or rl_cfg.compute_dtype)
    loss_kw = _loss_kwargs(rl_cfg, t_full)
    onehot = (batch.agent_ids[:, None] == jnp.arange(n_agents)[None]).astype(jnp.float32)  # [B, N]
    tokens = batch.completion_mask.sum(-1).astype(jnp.float32)
    inv_denom = _inverse_agent_denominators(batch, onehot, rl_cfg, loss_kw)
    widths = buckets.bucket_widths(t_full, rl_cfg.length_buckets)
    rows, width_index = _group_rows_by_length((batch, inv_denom, onehot), batch, k, widths)
    runner = _MicroBatches(
        # The backbone is frozen: cast its matrices to the matmul dtype once per step, not
        # once per layer, micro-batch and pass inside the loops (XLA does not hoist casts).
        params=cast_matrices(params, md),
        lora=lora,
        rng=rng,
        model_cfg=model_cfg,
        rl_cfg=rl_cfg,
        chunk_size=rl_cfg.logprob_chunk if chunk_size is None else chunk_size,
        compute_dtype=jnp.dtype(rl_cfg.compute_dtype),
        matmul_dtype=md,
        loss_kw=loss_kw,
        need_ref=rl_cfg.beta != 0.0 or batch.ref_logp is not None,
        recompute_old=recompute_old,
        widths=widths,
    )
    zero_grads = jax.tree.map(jnp.zeros_like, lora.params)
    xs = (jax.tree.map(lambda x: _split_micro(x, k), rows), jnp.arange(k), width_index)
    grads, (sums, counts) = jax.lax.scan(runner.step, zero_grads, xs)
    return grads, _agent_metrics(sums, counts, onehot, tokens)


def _loss_kwargs(rl_cfg: RLConfig, t_full: int) -> dict[str, Any]:
    """The keyword arguments of :func:`policy_loss_terms` that come from the config."""
    return dict(
        eps_low=rl_cfg.eps_low,
        eps_high=rl_cfg.eps_high,
        beta=rl_cfg.beta,
        level=rl_cfg.level,
        loss_type=rl_cfg.loss_type,
        # Explicit, so that a micro-batch trimmed to a narrower width keeps dr_grpo's T.
        max_completion_length=rl_cfg.max_completion_length or t_full,
    )


def _inverse_agent_denominators(
    batch: PolicyBatch, onehot: jax.Array, rl_cfg: RLConfig, loss_kw: dict[str, Any]
) -> jax.Array:
    """``[B]``: one over the whole batch's loss denominator of each row's agent (0 on padding).

    Denominators depend on masks only, so the terms are evaluated on dummy log-probs (XLA
    drops the rest): a single definition of each aggregation. Dividing every micro-batch's
    numerator by these *global* denominators makes the accumulated gradient the full-batch one.
    """
    zeros = jnp.zeros(batch.completion_mask.shape, jnp.float32)
    denom = policy_loss_terms(
        zeros,
        zeros,
        zeros if rl_cfg.beta else None,
        batch.advantages,
        batch.completion_mask,
        **loss_kw,
    ).denom
    agent_denom = jnp.maximum(onehot.T @ denom, 1.0)  # [N]
    return onehot @ (1.0 / agent_denom)


def _group_rows_by_length(
    rows: Any, batch: PolicyBatch, k: int, widths: tuple[int, ...]
) -> tuple[Any, jax.Array | None]:
    """``(rows, width_index)``: rows reordered so similar lengths share micro-batches, and the
    compiled width of each of the ``k`` micro-batches; ``rows`` as given and None when there
    is no width to choose. Sums over rows do not see the order."""
    if not buckets.chooses_width(widths):
        return rows, None
    lengths = buckets.needed_lengths(batch.completion_mask, batch.agent_ids)
    order, width_index = buckets.plan(lengths, k, widths)
    return jax.tree.map(lambda x: x[order], rows), width_index


def _agent_metrics(
    sums: dict[str, jax.Array], counts: dict[str, jax.Array], onehot: jax.Array, tokens: jax.Array
) -> dict[str, jax.Array]:
    """Per-agent ``[N]`` metrics from the per-micro-batch sums and counts ``[k, N]``."""
    metrics = {"loss": sums.pop("loss").sum(0)}
    for name, s in sums.items():
        metrics[name] = s.sum(0) / jnp.maximum(counts[name].sum(0), 1.0)
    metrics["tokens"] = onehot.T @ tokens
    metrics["sequences"] = onehot.sum(0)
    metrics["present"] = metrics["tokens"] > 0
    return metrics


@dataclasses.dataclass(frozen=True, eq=False)
class _MicroBatches:
    """The per-micro-batch work of :func:`policy_gradients`, as the body of its ``lax.scan``.

    Holds what every micro-batch shares: the (cast) frozen backbone, the adapters, the dropout
    key, the configs and the loss settings. ``step`` is the scan body; the other methods are
    its named parts.
    """

    params: dict[str, Any]
    lora: LoRAWeights
    rng: jax.Array
    model_cfg: ModelConfig
    rl_cfg: RLConfig
    chunk_size: int
    compute_dtype: Any
    matmul_dtype: Any
    loss_kw: dict[str, Any]
    need_ref: bool
    recompute_old: bool
    widths: tuple[int, ...]

    def step(self, acc: Any, xs: Any) -> tuple[Any, Any]:
        """Scan body: adds micro-batch ``i``'s gradients to ``acc``, at its width ``j`` if any."""
        (mb, inv, oh), i, j = xs
        if j is None:
            return self.grads(acc, mb, inv, oh, i)
        # The accumulator goes through the branch, so the sum is formed in place there
        # instead of the branch returning a fresh gradient tree to be copied out and added.
        branches = [functools.partial(self.grads_at_width, w) for w in self.widths]
        return jax.lax.switch(j, branches, acc, mb, inv, oh, i)

    def grads_at_width(self, w: int, acc, mb, inv, oh, i):
        """:meth:`grads` on the first ``w`` completion columns (0: a skipped micro-batch)."""
        if w == 0:
            _, shapes = jax.eval_shape(self.grads, acc, mb, inv, oh, i)
            return acc, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        cut = lambda x: None if x is None else x[:, :w]
        mb = mb.replace(
            completion_ids=cut(mb.completion_ids),
            completion_mask=cut(mb.completion_mask),
            old_logp=cut(mb.old_logp),
            ref_logp=cut(mb.ref_logp),
        )
        return self.grads(acc, mb, inv, oh, i)

    def grads(self, acc, mb: PolicyBatch, inv: jax.Array, oh: jax.Array, i: jax.Array):
        """``acc`` plus this micro-batch's gradients, and its per-agent metric sums and counts."""
        ref_logp = self.reference_logprobs(mb)
        loss_fn = functools.partial(self.loss, mb=mb, inv=inv, ref_logp=ref_logp, i=i)
        grads, terms = jax.grad(loss_fn, has_aux=True)(self.lora.params)
        sums = {name: oh.T @ v for name, v in terms.sums.items()}
        counts = {name: oh.T @ v for name, v in terms.counts.items()}
        sums["loss"] = oh.T @ (terms.numer * inv)
        return jax.tree.map(jnp.add, acc, grads), (sums, counts)

    def reference_logprobs(self, mb: PolicyBatch) -> jax.Array | None:
        """The batch's reference log-probs, else the adapter-off pass when the loss needs them
        (gradient-free, no LoRA matmuls), else None."""
        if not self.need_ref or mb.ref_logp is not None:
            return mb.ref_logp
        ref_logp, _ = sequence_logprobs(
            self.params,
            self.model_cfg,
            None,
            mb,
            compute_dtype=self.compute_dtype,
            matmul_dtype=self.matmul_dtype,
            chunk_size=self.chunk_size,
            with_entropy=False,
            attention=self.rl_cfg.attention,
            attention_block=self.rl_cfg.attention_block,
        )
        return jax.lax.stop_gradient(ref_logp)

    def loss(
        self,
        lora_params: dict[str, Any],
        *,
        mb: PolicyBatch,
        inv: jax.Array,
        ref_logp: jax.Array | None,
        i: jax.Array,
    ) -> tuple[jax.Array, Any]:
        """``(sum(numer * inv), terms)`` of one micro-batch under ``lora_params``."""
        rl_cfg = self.rl_cfg
        logp, ent = sequence_logprobs(
            self.params,
            self.model_cfg,
            self.lora.replace(params=lora_params),
            mb,
            lora_rng=jax.random.fold_in(self.rng, i) if self.lora.dropout > 0.0 else None,
            compute_dtype=self.compute_dtype,
            matmul_dtype=self.matmul_dtype,
            remat=rl_cfg.remat,
            chunk_size=self.chunk_size,
            attention=rl_cfg.attention,
            attention_block=rl_cfg.attention_block,
        )
        old_logp, is_w = mb.old_logp, None
        if self.recompute_old:
            # One update per batch: the trainer's recompute under the adapter being updated
            # is this very forward pass (old = stop_gradient(logp)); the engine's log-probs
            # only weight each sequence.
            is_w = truncated_is_weights(
                logp, old_logp, mb.completion_mask, cap=rl_cfg.is_cap, level=rl_cfg.level
            )
            old_logp = None
        terms = policy_loss_terms(
            logp,
            old_logp,
            ref_logp,
            mb.advantages,
            mb.completion_mask,
            entropy=ent,
            is_weights=is_w,
            **self.loss_kw,
        )
        return jnp.sum(terms.numer * inv), terms


def apply_policy_update(
    state: PolicyState, grads: dict[str, Any], present: jax.Array, rl_cfg: RLConfig
) -> tuple[PolicyState, dict[str, jax.Array]]:
    """Per-agent clipped AdamW update of the agents in ``present``; the others are untouched.

    Args:
      state: the :class:`PolicyState`.
      grads: adapter gradients (``state.lora.params``' structure, agent axis 1).
      present: ``[N]`` bool, the agents to update.
      rl_cfg: static config.

    Returns:
      ``(new_state, {"grad_norm": [N], "lr": [N]})``; ``lr`` is the rate this update used.
    """
    opt = make_optimizer(rl_cfg)
    updates, new_opt = jax.vmap(opt.update, in_axes=(1, 0, 1), out_axes=(1, 0))(
        grads, state.opt_state, state.lora.params
    )
    new_params = optax.apply_updates(state.lora.params, updates)
    # The agent axis is 1 on the adapters and 0 on the optimizer state.
    keep = lambda new, old: jnp.where(present.reshape((1, -1) + (1,) * (new.ndim - 2)), new, old)
    kept_params = jax.tree.map(keep, new_params, state.lora.params)
    kept_opt = _select(present, new_opt, state.opt_state)
    metrics = {
        "grad_norm": jax.vmap(optax.tree.norm, in_axes=1)(grads),
        "lr": jax.vmap(lr_schedule(rl_cfg))(state.agent_steps),
    }
    new_state = state.replace(
        lora=state.lora.replace(params=kept_params),
        opt_state=kept_opt,
        agent_steps=state.agent_steps + present.astype(jnp.int32),
    )
    return new_state, metrics


def policy_step(
    state: PolicyState,
    params: dict[str, Any],
    batch: PolicyBatch,
    *,
    model_cfg: ModelConfig,
    rl_cfg: RLConfig,
    chunk_size: int | None = None,
) -> tuple[PolicyState, dict[str, jax.Array]]:
    """One optimisation step for every agent that has completion tokens in ``batch``.

    :func:`policy_gradients` followed by :func:`apply_policy_update`.

    Returns:
      ``(new_state, metrics)``: the metrics of both, ``[N]`` per agent.
    """
    rng, step_rng = jax.random.split(state.rng)
    grads, metrics = policy_gradients(
        state.lora,
        params,
        batch,
        step_rng,
        model_cfg=model_cfg,
        rl_cfg=rl_cfg,
        chunk_size=chunk_size,
    )
    new_state, opt_metrics = apply_policy_update(state, grads, metrics["present"], rl_cfg)
    return new_state.replace(rng=rng), {**metrics, **opt_metrics}


def make_policy_step(
    model_cfg: ModelConfig,
    rl_cfg: RLConfig,
    *,
    chunk_size: int | None = None,
    donate: bool = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
):
    """``policy_step`` under ``jax.jit`` with the configs bound, one per distinct arguments.

    The jitted function is cached on all arguments when they are hashable (the configs are
    frozen dataclasses; shardings that are None or hashable): equal arguments return the
    same object, so a second Trainer built from the same configs reuses the first one's
    compiled executables instead of tracing and compiling the step again. Unhashable
    shardings (e.g. a pytree with dicts) get a fresh, uncached function.

    Args:
      model_cfg, rl_cfg: static configs.
      chunk_size: see :func:`policy_gradients` (None = ``rl_cfg.logprob_chunk``).
      donate: donate the incoming state's buffers (the adapters and moments are updated in
        place; do not reuse the state passed in).
      in_shardings, out_shardings: optional ``jax.jit`` shardings for
        ``(state, params, batch)`` and ``(state, metrics)``.

    Returns:
      ``step(state, params, batch) -> (state, metrics)``.
    """
    chunk = rl_cfg.logprob_chunk if chunk_size is None else int(chunk_size)
    key = (model_cfg, rl_cfg, chunk, bool(donate), in_shardings, out_shardings)
    try:
        hash(key)
    except TypeError:
        return _jit_policy_step.__wrapped__(*key)
    return _jit_policy_step(*key)


@functools.lru_cache(maxsize=16)
def _jit_policy_step(model_cfg, rl_cfg, chunk_size, donate, in_shardings, out_shardings):
    """The uncached body of :func:`make_policy_step` (positional, all resolved)."""
    fn = functools.partial(policy_step, model_cfg=model_cfg, rl_cfg=rl_cfg, chunk_size=chunk_size)
    kw = {}
    if in_shardings is not None:
        kw["in_shardings"] = in_shardings
    if out_shardings is not None:
        kw["out_shardings"] = out_shardings
    return jax.jit(fn, donate_argnums=(0,) if donate else (), **kw)
