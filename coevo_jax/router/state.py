"""Router state: the head's trainable and frozen parts, the optimiser state and the
routing counters, as one pytree (checkpointable as-is, bit-for-bit resumable).

The head module is kept split (``nnx.split(head, nnx.Param, ...)``): ``params`` holds only
``nnx.Param`` leaves (the predictor heads), ``frozen`` holds everything else (the familiarity
targets). The optimiser state is built from ``params`` alone, so frozen weights cannot be
updated even by mistake. The backbone is not part of the state at all: the router step
consumes features ``h`` and never sees backbone weights.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from coevo_jax.router.config import RouterConfig
from coevo_jax.router.features import standardization, standardize
from coevo_jax.router.heads import make_head


@struct.dataclass
class RouterCounters:
    """Exploration statistics (docs/design.md §2 step 4).

    Attributes:
      T: int32 scalar, number of queries routed so far.
      n: ``[N]`` int32, number of queries allocated to each agent.
      h_bar: ``[N]`` float32, running mean per-token generation entropy of each agent (0
        before the agent generated anything).
      entropy_tokens: ``[N]`` float32, tokens behind ``h_bar`` (the running mean's weight;
        float so it does not overflow int32 in long runs).
    """

    T: jax.Array
    n: jax.Array
    h_bar: jax.Array
    entropy_tokens: jax.Array

    @classmethod
    def zeros(cls, n_agents: int) -> RouterCounters:
        return cls(
            T=jnp.zeros((), jnp.int32),
            n=jnp.zeros((n_agents,), jnp.int32),
            h_bar=jnp.zeros((n_agents,), jnp.float32),
            entropy_tokens=jnp.zeros((n_agents,), jnp.float32),
        )


@struct.dataclass
class RouterState:
    """Everything the router owns.

    Attributes:
      cfg: the config (static).
      graphdef: the head's NNX graph definition (static).
      params: ``nnx.State`` of the head's ``nnx.Param`` leaves (trainable).
      frozen: ``nnx.State`` of every other variable (frozen targets).
      opt_state: Adam state over ``params`` only.
      counters: :class:`RouterCounters`.
      step: int32, router updates taken.
      feature_shift, feature_scale: ``[in]`` float32, the frozen whitening every head input
        goes through (:meth:`head_input`); 0 and 1 (no change) until
        :func:`with_feature_stats` sets them (``cfg.feature_norm = "standardize"``).
    """

    cfg: RouterConfig = struct.field(pytree_node=False)
    graphdef: Any = struct.field(pytree_node=False)
    params: Any
    frozen: Any
    opt_state: Any
    counters: RouterCounters
    step: jax.Array
    feature_shift: jax.Array
    feature_scale: jax.Array

    def head_input(self, h: jax.Array) -> jax.Array:
        """``h [B, in]`` as the heads see it: ``(h - feature_shift) * feature_scale``."""
        return standardize(h, self.feature_shift, self.feature_scale)

    @property
    def head(self):
        """A fresh head module carrying this state's weights (for inspection and scoring)."""
        return nnx.merge(self.graphdef, self.params, self.frozen)


def make_optimizer(cfg: RouterConfig) -> optax.GradientTransformation:
    """Adam at ``cfg.lr`` (paper: 1e-4), no schedule."""
    return optax.adam(cfg.lr)


def init_router(cfg: RouterConfig, in_dim: int, *, seed: int | None = None) -> RouterState:
    """Builds the head ``cfg.head`` for features of width ``in_dim`` and a fresh state.

    ``seed`` defaults to ``cfg.seed``.
    """
    rngs = nnx.Rngs(params=cfg.seed if seed is None else seed)
    head = make_head(cfg, in_dim, rngs=rngs)
    graphdef, params, frozen = nnx.split(head, nnx.Param, ...)
    return RouterState(
        cfg=cfg,
        graphdef=graphdef,
        params=params,
        frozen=frozen,
        opt_state=make_optimizer(cfg).init(params),
        counters=RouterCounters.zeros(cfg.n_agents),
        step=jnp.zeros((), jnp.int32),
        feature_shift=jnp.zeros((in_dim,), jnp.float32),
        feature_scale=jnp.ones((in_dim,), jnp.float32),
    )


def with_feature_stats(state: RouterState, h: jax.Array) -> RouterState:
    """Freezes the whitening statistics of the sample ``h [Q, in]`` into ``state``.

    A no-op (``state`` returned unchanged) unless ``state.cfg.feature_norm`` is
    ``"standardize"``. Call it once, before the first routing decision: the heads are trained
    on whitened inputs, so changing the statistics later moves every familiarity.
    """
    if state.cfg.feature_norm != "standardize":
        return state
    chex.assert_shape(h, (None, state.feature_shift.shape[0]))
    shift, scale = standardization(h, center=state.cfg.feature_center)
    return state.replace(feature_shift=shift, feature_scale=scale)


def feature_dim(hidden_size: int, layers: str) -> int:
    """Width of :func:`coevo_jax.router.features.features` for a backbone of ``hidden_size``."""
    if layers == "mid":
        return 2 * hidden_size
    if layers == "final":
        return hidden_size
    raise ValueError(f"layers must be 'mid' or 'final', got {layers!r}")
