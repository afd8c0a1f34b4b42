"""A tiny random Llama and batches for policy-step tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.lora.config import LoRAConfig
from coevo_jax.lora.init import init_lora
from coevo_jax.models import init_params
from coevo_jax.rl.logprobs import PolicyBatch
from tests.helpers import tiny_model_config

CFG = tiny_model_config("llama", vocab_size=32, tie_word_embeddings=True)


# Three of the seven projections (attention in/out and the MLP's down): every code path, at
# less than half the compile time of all seven.
MODULES = ("q", "v", "down")


def tiny_model(
    seed: int = 0, n_agents: int = 4, rank: int = 4, dropout: float = 0.0, modules=MODULES
):
    params = init_params(CFG, jax.random.key(seed), std=0.2)
    lcfg = LoRAConfig(n_agents=n_agents, rank=rank, dropout=dropout, target_modules=modules)
    lora = init_lora(jax.random.key(seed + 1), lcfg, params)
    # Non-zero B so that agents differ from the reference and from each other.
    lora = lora.replace(
        params=jax.tree.map(
            lambda x: x + 0.05 * jax.random.normal(jax.random.key(seed + 2), x.shape, x.dtype),
            lora.params,
        )
    )
    return params, lora


def random_batch(seed: int, agents, P: int = 5, T: int = 6) -> PolicyBatch:
    rng = np.random.default_rng(seed)
    B = len(agents)
    prompt_len = rng.integers(1, P + 1, B)
    pm = (np.arange(P)[None] >= P - prompt_len[:, None]).astype(np.int32)
    comp_len = rng.integers(1, T + 1, B)
    comp_len[0] = T
    cm = (np.arange(T)[None] < comp_len[:, None]).astype(np.int32)
    logp_noise = rng.normal(0, 0.3, (B, T)).astype(np.float32)
    return PolicyBatch(
        prompt_ids=jnp.asarray(rng.integers(0, CFG.vocab_size, (B, P)) * pm, jnp.int32),
        prompt_mask=jnp.asarray(pm),
        completion_ids=jnp.asarray(rng.integers(0, CFG.vocab_size, (B, T)) * cm, jnp.int32),
        completion_mask=jnp.asarray(cm),
        agent_ids=jnp.asarray(np.asarray(agents), jnp.int32),
        advantages=jnp.asarray(rng.normal(0, 1, B), jnp.float32),
        old_logp=jnp.asarray(-3.4 + logp_noise),
    )
