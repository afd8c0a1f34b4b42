"""The predictive familiarity estimator: per-agent predictor heads, frozen target heads,
and the distance-to-familiarity map (CERA-MoA §2 step 3).

Every agent i owns a trainable predictor ``g_i`` and a frozen target ``gbar_i``, both
``Linear(in, hidden) -> SiLU -> Linear(hidden, out)``. The N agents' weights are stacked on
a leading agent axis so one einsum evaluates all heads for a batch.

Frozen by construction: target weights are :class:`FrozenTarget` variables, a
``nnx.Variable`` subclass that is *not* ``nnx.Param``. Every optimiser in this package is
built with ``wrt=nnx.Param`` (and the functional step differentiates only the ``nnx.Param``
state), so the targets never reach a gradient or an optimiser state.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from coevo_jax.router.losses import push_pull_loss, router_advantages


class FrozenTarget(nnx.Variable):
    """A frozen, non-trainable weight (a target head). Not an ``nnx.Param``."""


def familiarity(
    pred: jax.Array, target: jax.Array, *, lam: float = 2.0
) -> tuple[jax.Array, jax.Array]:
    """Familiarity from predictor and target projections.

    ``d = || pred/|pred| - target/|target| ||_2`` (so ``d`` lies in ``[0, 2]``) and
    ``f = exp(-lam * d)``.

    Differentiable in both inputs; norms are floored at 1e-12 so a zero projection gives a
    finite gradient, and ``d`` is exactly 0 (with zero gradient) when the directions agree.

    Args:
      pred: ``[B, N, D]`` predictor outputs ``c_i``.
      target: ``[B, N, D]`` target outputs ``cbar_i``.
      lam: temperature lambda.

    Returns:
      ``(f, d)``, each ``[B, N]`` float32.
    """
    chex.assert_rank(pred, 3)
    chex.assert_equal_shape([pred, target])

    def unit(x):
        x = x.astype(jnp.float32)
        sq = jnp.sum(x * x, axis=-1, keepdims=True)
        return x / jnp.sqrt(jnp.maximum(sq, 1e-24))

    diff = unit(pred) - unit(target)
    sq = jnp.sum(diff * diff, axis=-1)
    positive = sq > 1e-20
    d = jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)
    return jnp.exp(-lam * d), d


def _mlp(h, w1, b1, w2, b2):
    """All agents' two-layer heads: ``[B, in] -> [B, N, out]``."""
    z = jnp.einsum("bi,nih->bnh", h, w1) + b1[None]
    return jnp.einsum("bnh,nho->bno", jax.nn.silu(z), w2) + b2[None]


def orthogonal_across_agents(key: jax.Array, n_agents: int, in_dim: int, out_dim: int):
    """``[N, in, out]`` weights whose agent blocks are slices of one orthogonal matrix.

    One matrix ``Q`` of shape ``[in, N * out]`` is drawn from the Haar-orthogonal
    initialiser and agent i takes columns ``i*out : (i+1)*out``.

    - If ``N * out <= in``, Q has orthonormal columns: every block has orthonormal columns
      and ``W_i^T W_j = 0`` for ``i != j``. The agents' heads read mutually orthogonal
      subspaces of the shared input.
    - If ``N * out > in``, no such set of blocks exists. Q then has orthonormal *rows*
      (``sum_i W_i W_i^T = I_in``, a tight frame shared out among agents): the agents'
      subspaces overlap and each block's singular values are at most 1.
    """
    q = jax.nn.initializers.orthogonal()(key, (in_dim, n_agents * out_dim), jnp.float32)
    return q.reshape(in_dim, n_agents, out_dim).transpose(1, 0, 2)


class FamiliarityHeads(nnx.Module):
    """Per-agent predictor heads ``g_i`` and frozen target heads ``gbar_i``.

    Shapes: ``Linear(in_dim, hidden) -> SiLU -> Linear(hidden, out)`` per agent, stacked on
    a leading agent axis (``w1: [N, in, hidden]``, ``b1: [N, hidden]``, ``w2: [N, hidden,
    out]``, ``b2: [N, out]``).

    Initialisation:
      - Predictors (``nnx.Param``): LeCun-normal weights drawn independently per agent,
        zero biases.
      - Targets (:class:`FrozenTarget`), orthogonal across agents: the first layers of all N
        targets are column blocks of one orthogonal matrix of shape ``[in, N * hidden]``
        (see :func:`orthogonal_across_agents`). The input ``h`` is the only space the
        agents' targets share, so this is where orthogonality across agents is defined:
        when ``N * hidden <= in`` the N targets read mutually orthogonal subspaces of
        ``h``; when ``N * hidden > in`` (e.g. SmolLM2 mid features, in = 1152, with N = 4
        and hidden = 512) full orthogonality is impossible and the blocks form a tight
        frame (``sum_i W1_i W1_i^T = I``) whose subspaces overlap. Each target's second
        layer is an independent orthogonal ``[hidden, out]`` matrix (orthonormal columns
        when ``hidden >= out``, orthonormal rows otherwise). Target biases are zero.
    """

    def __init__(
        self, n_agents: int, in_dim: int, hidden: int = 512, out: int = 256, *, rngs: nnx.Rngs
    ):
        self.n_agents, self.in_dim, self.hidden, self.out = n_agents, in_dim, hidden, out
        init = jax.nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        self.w1 = nnx.Param(init(rngs.params(), (n_agents, in_dim, hidden), jnp.float32))
        self.b1 = nnx.Param(jnp.zeros((n_agents, hidden), jnp.float32))
        self.w2 = nnx.Param(init(rngs.params(), (n_agents, hidden, out), jnp.float32))
        self.b2 = nnx.Param(jnp.zeros((n_agents, out), jnp.float32))
        ortho = jax.nn.initializers.orthogonal()
        keys = jax.random.split(rngs.params(), n_agents)
        self.target_w1 = FrozenTarget(
            orthogonal_across_agents(rngs.params(), n_agents, in_dim, hidden)
        )
        self.target_b1 = FrozenTarget(jnp.zeros((n_agents, hidden), jnp.float32))
        self.target_w2 = FrozenTarget(
            jax.vmap(lambda k: ortho(k, (hidden, out), jnp.float32))(keys)
        )
        self.target_b2 = FrozenTarget(jnp.zeros((n_agents, out), jnp.float32))

    def project(self, h: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``h: [B, in]`` -> ``(pred, target)``, each ``[B, N, out]`` float32.

        The target branch is wrapped in ``stop_gradient`` as a second guard.
        """
        chex.assert_rank(h, 2)
        chex.assert_axis_dimension(h, 1, self.in_dim)
        h = h.astype(jnp.float32)
        pred = _mlp(h, self.w1[...], self.b1[...], self.w2[...], self.b2[...])
        target = _mlp(
            h, self.target_w1[...], self.target_b1[...], self.target_w2[...], self.target_b2[...]
        )
        return pred, jax.lax.stop_gradient(target)

    def __call__(self, h: jax.Array, *, lam: float = 2.0) -> tuple[jax.Array, jax.Array]:
        """``h: [B, in]`` -> ``(f, d)``, each ``[B, N]`` (see :func:`familiarity`)."""
        pred, target = self.project(h)
        return familiarity(pred, target, lam=lam)

    def scores(self, h: jax.Array, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Router interface: ``(f [B, N], {"d": d})`` with ``lam = cfg.lam``."""
        f, d = self(h, lam=cfg.lam)
        return f, {"d": d}

    def loss(self, h, rbar, active, cfg) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Router interface: push-pull loss on the cross-agent advantages of ``rbar``."""
        f, d = self(h, lam=cfg.lam)
        adv = router_advantages(rbar, active)
        margin = None if cfg.unbounded_push else cfg.margin
        loss = push_pull_loss(d, adv, active, margin=margin)
        act = active.astype(bool)
        count = jnp.maximum(act.sum(), 1)
        return loss, {
            "loss": loss,
            "mean_d_active": jnp.where(act, d, 0.0).sum() / count,
            "mean_f_active": jnp.where(act, f, 0.0).sum() / count,
            "positive_adv_fraction": jnp.where(act & (adv > 0), 1.0, 0.0).sum() / count,
        }
