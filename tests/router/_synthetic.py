"""Two-cluster synthetic routing task shared by the learning tests.

Queries come from two Gaussian clusters A and B in feature space; agent 0 earns reward 1 on
A and 0 on B, agent 1 the reverse. A router that learns must give agent 0 the higher score
on A, agent 1 on B, and route each query to its agent.
"""

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.router.step import route, router_step, update_counters

DIM = 16


class TwoClusters:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        mu = self.rng.normal(size=DIM)
        self.mu = 3.0 * mu / np.linalg.norm(mu)

    def sample(self, b: int):
        label = self.rng.integers(0, 2, b)
        h = np.where(label[:, None] == 0, self.mu, -self.mu) + self.rng.normal(size=(b, DIM))
        return jnp.asarray(h, jnp.float32), label

    @staticmethod
    def rewards(label, n_agents: int):
        r = np.zeros((len(label), n_agents), np.float32)
        r[label == 0, 0] = 1.0
        r[label == 1, 1] = 1.0
        return jnp.asarray(r)


def train(state, task: TwoClusters, steps: int, batch: int = 16):
    """The closed loop minus generation: route (with exploration), count, reward, step."""
    metrics = None
    for _ in range(steps):
        h, label = task.sample(batch)
        decision = route(state, h, train=True)
        state = update_counters(state, decision.active)
        rbar = task.rewards(label, state.cfg.n_agents)
        state, metrics = router_step(state, h, rbar, decision.active)
    jax.block_until_ready(state.params)
    return state, metrics


def evaluate(state, task: TwoClusters, n: int = 512):
    """Per-cluster mean scores and routing quality at inference (no exploration)."""
    h, label = task.sample(n)
    decision = route(state, h, train=False)
    f = np.asarray(decision.f)
    active = np.asarray(decision.active)
    rows = np.arange(n)
    return {
        "f_A": f[label == 0].mean(0),
        "f_B": f[label == 1].mean(0),
        "argmax_correct": float((f[:, :2].argmax(1) == label).mean()),
        "own_agent_active": float(active[rows, label].mean()),
        "solo_own_agent": float((active[rows, label] & (active.sum(1) == 1)).mean()),
        "mean_active": float(active.sum(1).mean()),
    }
