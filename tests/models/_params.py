"""Random fp32 decoder params drawn with numpy, for tests that build many tiny configs."""

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.models import ModelConfig, param_shapes


def numpy_params(cfg: ModelConfig, seed: int = 0):
    """Norms near 1, matrices N(0, 0.2^2); numpy-drawn because ``init_params``' jit compile
    costs seconds per config."""
    rng = np.random.default_rng(seed)

    def draw(path, shape):
        if "norm" in jax.tree_util.keystr(path):
            return jnp.asarray(1.0 + 0.1 * rng.standard_normal(shape), jnp.float32)
        return jnp.asarray(0.2 * rng.standard_normal(shape), jnp.float32)

    return jax.tree_util.tree_map_with_path(
        draw, param_shapes(cfg), is_leaf=lambda s: isinstance(s, tuple)
    )
