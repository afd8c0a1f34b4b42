import jax
import numpy as np
from flax import nnx

from coevo_jax.router.config import RouterConfig
from coevo_jax.router.familiarity import FrozenTarget
from coevo_jax.router.state import RouterCounters, RouterState, init_router


def test_init_splits_trainable_from_frozen():
    cfg = RouterConfig(n_agents=3, hidden=16, out_dim=8)
    st = init_router(cfg, 12)
    assert isinstance(st, RouterState)
    param_types = {type(v) for _, v in nnx.to_flat_state(st.params)}
    frozen_types = {type(v) for _, v in nnx.to_flat_state(st.frozen)}
    assert param_types == {nnx.Param} and frozen_types == {FrozenTarget}
    # Adam moments exist for the predictor leaves only.
    n_param = len(jax.tree.leaves(st.params))
    moments = [x for x in jax.tree.leaves(st.opt_state) if np.ndim(x) > 0]
    assert len(moments) == 2 * n_param
    c = st.counters
    assert isinstance(c, RouterCounters) and int(c.T) == 0 and c.n.shape == (3,)


def test_state_is_a_pytree_and_deterministic_from_seed():
    cfg = RouterConfig(n_agents=2, hidden=16, out_dim=8)
    a, b = init_router(cfg, 12), init_router(cfg, 12)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    c = init_router(cfg, 12, seed=7)
    assert not np.array_equal(np.asarray(a.params["w1"][...]), np.asarray(c.params["w1"][...]))
    leaves, treedef = jax.tree.flatten(a)
    back = jax.tree.unflatten(treedef, leaves)
    assert back.cfg == cfg and back.graphdef == a.graphdef
