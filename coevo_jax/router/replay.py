"""A window of recent rounds for the router to train on (``router.replay_rounds``).

The paper takes one router step per round on that round's queries. A CPU run has tens of
rounds of a few queries each, too little for the heads to learn which agent suits which
queries, so the router may instead take ``router.update_steps`` steps per round on the
served queries of the last ``router.replay_rounds`` rounds. This module holds that window.

The window is a ring of fixed shape ``[R, B, ...]`` (R rounds of B queries), so the jitted
router step compiles once: slots not yet written, and query rows whose agents did not
serve, have ``served`` all False, and the push-pull loss ignores inactive pairs (their
advantage is 0 and they are not counted in its mean). Training on the window is therefore
exactly training on the real rows it holds.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RouterReplay:
    """The last ``R`` rounds' router inputs.

    Attributes:
      h: ``[R, B, in]`` float32 raw router features of each round's queries.
      rbar: ``[R, B, N]`` float32 mean reward of each agent's group on each query.
      served: ``[R, B, N]`` bool, the pairs that served a complete group (what the router
        step learns from).
      rounds: scalar int32, how many rounds were ever pushed; the next slot is
        ``rounds % R``.
    """

    h: jax.Array
    rbar: jax.Array
    served: jax.Array
    rounds: jax.Array

    @classmethod
    def empty(cls, rounds: int, batch: int, in_dim: int, n_agents: int) -> RouterReplay:
        """A window of ``rounds`` slots of ``batch`` queries, nothing served."""
        if rounds < 1 or batch < 1:
            raise ValueError(f"rounds and batch must be >= 1, got {rounds}, {batch}")
        return cls(
            h=jnp.zeros((rounds, batch, in_dim), jnp.float32),
            rbar=jnp.zeros((rounds, batch, n_agents), jnp.float32),
            served=jnp.zeros((rounds, batch, n_agents), bool),
            rounds=jnp.zeros((), jnp.int32),
        )

    def flat(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(h [R*B, in], rbar [R*B, N], served [R*B, N])``, the router step's inputs."""
        r, b = self.served.shape[:2]
        return (
            self.h.reshape(r * b, -1),
            self.rbar.reshape(r * b, -1),
            self.served.reshape(r * b, -1),
        )


@jax.jit
def push_round(
    replay: RouterReplay, h: jax.Array, rbar: jax.Array, served: jax.Array
) -> RouterReplay:
    """Writes one round into the oldest slot.

    Args:
      replay: the window.
      h: ``[B, in]`` this round's raw features.
      rbar: ``[B, N]`` mean rewards (values where ``served`` is False are ignored).
      served: ``[B, N]`` bool.

    Returns:
      the window with this round in slot ``replay.rounds % R`` and ``rounds + 1``.
    """
    chex.assert_shape(h, replay.h.shape[1:])
    chex.assert_shape([rbar, served], replay.served.shape[1:])
    slot = replay.rounds % replay.served.shape[0]
    return RouterReplay(
        h=replay.h.at[slot].set(h.astype(jnp.float32)),
        rbar=replay.rbar.at[slot].set(jnp.where(served, rbar, 0.0).astype(jnp.float32)),
        served=replay.served.at[slot].set(served.astype(bool)),
        rounds=replay.rounds + 1,
    )


def rewindow(replay: RouterReplay, rounds: int) -> RouterReplay:
    """The same history in a window of ``rounds`` slots: its most recent
    ``min(rounds, R, replay.rounds)`` rounds, oldest first, so training resumes on the rounds
    it would have kept (for a run resumed under another ``router.replay_rounds``)."""
    r, b, in_dim = replay.h.shape
    out = RouterReplay.empty(rounds, b, in_dim, replay.rbar.shape[-1])
    pushed = int(replay.rounds)
    for age in range(min(rounds, r, pushed), 0, -1):
        slot = (pushed - age) % r
        out = push_round(out, replay.h[slot], replay.rbar[slot], replay.served[slot])
    return out
