"""Stacked multi-agent LoRA: init, stacking, per-row application, gradient isolation, PEFT IO."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.lora import (
    AdapterFormatError,
    AgentLoRA,
    LoRAConfig,
    LoRAWeights,
    export_peft,
    import_peft,
    init_lora,
    lora_delta,
    merge,
    set_agent,
    stack,
    unstack,
)
from coevo_jax.lora.weights import dropout_keep_mask

L, H, FF, KV = 2, 16, 24, 8


def _base_params():
    k = jax.random.PRNGKey(0)
    shapes = {
        "q": (H, H),
        "k": (H, KV),
        "v": (H, KV),
        "o": (H, H),
        "gate": (H, FF),
        "up": (H, FF),
        "down": (FF, H),
    }
    return {
        "layers": {
            m: jax.random.normal(jax.random.fold_in(k, i), (L, *s))
            for i, (m, s) in enumerate(shapes.items())
        }
    }


def _random_weights(n=4, r=4, seed=1, modules=None) -> LoRAWeights:
    cfg = LoRAConfig(
        n_agents=n,
        rank=r,
        alpha=8.0,
        dropout=0.0,
        **({"target_modules": modules} if modules else {}),
    )
    w = init_lora(jax.random.PRNGKey(seed), cfg, _base_params())
    params = jax.tree.map(
        lambda x: jax.random.normal(jax.random.PRNGKey(seed + 7), x.shape) * 0.1, w.params
    )
    return w.replace(params=params)


def test_config_validation():
    with pytest.raises(ValueError, match="target_modules"):
        LoRAConfig(target_modules=("q", "qkv"))
    with pytest.raises(ValueError, match="rank"):
        LoRAConfig(rank=0)
    assert LoRAConfig(rank=16, alpha=32).scale == 2.0
    assert LoRAConfig(rank=16, alpha=32, rslora=True).scale == pytest.approx(8.0)


def test_init_matches_peft_scheme():
    cfg = LoRAConfig(n_agents=3, rank=4, alpha=8)
    w = init_lora(jax.random.PRNGKey(0), cfg, _base_params())
    assert w.params["q"]["A"].shape == (L, 3, H, 4)
    assert w.params["down"]["B"].shape == (L, 3, 4, H)
    for ab in w.params.values():
        assert float(jnp.abs(ab["B"]).max()) == 0.0
        bound = 1.0 / np.sqrt(ab["A"].shape[2])
        assert float(jnp.abs(ab["A"]).max()) <= bound
    # agents are drawn independently
    assert not np.allclose(w.params["q"]["A"][:, 0], w.params["q"]["A"][:, 1])


def test_stack_unstack_set_roundtrip():
    w = _random_weights()
    agents = [unstack(w, i) for i in range(4)]
    back = stack(agents)
    jax.tree.map(np.testing.assert_array_equal, back.params, w.params)
    w2 = set_agent(w, 2, agents[0])
    np.testing.assert_array_equal(w2.params["q"]["A"][:, 2], w.params["q"]["A"][:, 0])
    np.testing.assert_array_equal(w2.params["q"]["A"][:, 1], w.params["q"]["A"][:, 1])
    with pytest.raises(IndexError):
        unstack(w, 4)


def test_lora_delta_rows_and_adapter_off():
    w = _random_weights()
    x = jax.random.normal(jax.random.PRNGKey(3), (5, 3, H))
    ids = jnp.array([0, 3, -1, 1, 0])
    a, b = w.params["q"]["A"][0], w.params["q"]["B"][0]
    y = lora_delta(x, a, b, ids, w.scale)
    for row, agent in enumerate([0, 3, -1, 1, 0]):
        expect = (
            np.zeros((3, H))
            if agent < 0
            else w.scale * np.asarray(x[row]) @ np.asarray(a[agent]) @ np.asarray(b[agent])
        )
        np.testing.assert_allclose(y[row], expect, rtol=1e-5, atol=1e-5)
    assert float(jnp.abs(y[2]).max()) == 0.0


def test_gradients_reach_only_present_agents():
    w = _random_weights()
    x = jax.random.normal(jax.random.PRNGKey(3), (4, 3, H))
    ids = jnp.array([2, 2, -1, 2])

    def loss(params):
        return jnp.sum(lora_delta(x, params["A"], params["B"], ids, 2.0) ** 2)

    g = jax.grad(loss)({"A": w.params["q"]["A"][0], "B": w.params["q"]["B"][0]})
    for agent in (0, 1, 3):
        assert float(jnp.abs(g["A"][agent]).max()) == 0.0
        assert float(jnp.abs(g["B"][agent]).max()) == 0.0
    assert float(jnp.abs(g["A"][2]).max()) > 0.0


def test_dropout_only_with_rng():
    w = _random_weights()
    x = jnp.ones((2, 4, H))
    ids = jnp.array([0, 1])
    a, b = w.params["q"]["A"][0], w.params["q"]["B"][0]
    y0 = lora_delta(x, a, b, ids, 2.0, dropout=0.5)
    y1 = lora_delta(x, a, b, ids, 2.0, dropout=0.5, rng=jax.random.PRNGKey(0))
    np.testing.assert_array_equal(y0, lora_delta(x, a, b, ids, 2.0))
    assert not np.allclose(y0, y1)


@pytest.mark.parametrize("shape", [(4, 64, 576), (3, 5, 7)])
def test_dropout_mask_rate_and_unbiased_scale(shape):
    keep, keep_prob = dropout_keep_mask(jax.random.key(3), shape, 0.05)
    assert keep.shape == shape and keep.dtype == jnp.bool_
    assert abs(keep_prob - 0.95) < 2**-32
    if keep.size > 10_000:  # binomial sd of the kept fraction is ~1e-3 here
        assert abs(float(keep.mean()) - keep_prob) < 5e-3
        # no stripe pattern along the last axis: both of its halves keep the same fraction
        half = shape[-1] // 2
        np.testing.assert_allclose(
            float(keep[..., :half].mean()), float(keep[..., half:].mean()), atol=1e-2
        )
    # lora_delta rescales by the exact keep probability
    x = jnp.ones((1, 2, 4))
    a, b = jnp.ones((1, 4, 1)), jnp.ones((1, 1, 1))
    y = lora_delta(x, a, b, jnp.array([0]), 1.0, dropout=0.5, rng=jax.random.key(0))
    kept, kp = dropout_keep_mask(jax.random.key(0), x.shape, 0.5)
    np.testing.assert_allclose(np.asarray(y[..., 0]), np.asarray(kept.sum(-1) / kp), rtol=1e-6)


def test_dropout_mask_independent_across_keys_and_positions():
    # The mask is a hash of (seed, element index): check that neither neighbouring elements
    # nor masks drawn from different (or folded-in) keys are correlated.
    shape = (8, 128, 576)
    a, keep_prob = dropout_keep_mask(jax.random.key(0), shape, 0.05)
    drop = 1.0 - keep_prob
    a = np.asarray(a)
    others = [jax.random.key(1), jax.random.fold_in(jax.random.key(0), 1)]
    for key in others:
        b = np.asarray(dropout_keep_mask(key, shape, 0.05)[0])
        # sd of the agreement fraction over 590k elements is ~4e-4
        assert abs((a == b).mean() - (keep_prob**2 + drop**2)) < 2e-3
    flat = a.reshape(-1)
    for lag in (1, 576):  # next element, same feature in the next position
        both_dropped = (~flat[lag:] & ~flat[:-lag]).mean()
        assert abs(both_dropped - drop**2) < 4e-4  # sd ~7e-5
    # same key, same mask (training steps are reproducible)
    np.testing.assert_array_equal(a, dropout_keep_mask(jax.random.key(0), shape, 0.05)[0])


def test_adapter_vjp_regenerates_the_forward_mask():
    """The hand-written VJP (mask regenerated from its seeds) equals autodiff of the textbook
    dropout adapter with the same mask, for every input, and agent -1 rows get nothing."""
    k = jax.random.split(jax.random.key(7), 4)
    x = jax.random.normal(k[0], (3, 5, H))
    a = jax.random.normal(k[1], (4, H, 3))
    b = jax.random.normal(k[2], (4, 3, 6))
    ids = jnp.array([2, -1, 0])
    g = jax.random.normal(k[3], (3, 5, 6))
    rng = jax.random.key(11)

    def textbook(x, a, b):
        keep, kp = dropout_keep_mask(rng, x.shape, 0.3)
        xd = jnp.where(keep, x / kp, 0)
        on = ids >= 0
        rows = jnp.where(on, ids, 0)
        y = jnp.einsum("bti,bir,bro->bto", xd, a[rows], b[rows]) * 1.5
        return jnp.where(on[:, None, None], y, 0)

    ours = lambda x, a, b: lora_delta(x, a, b, ids, 1.5, dropout=0.3, rng=rng)
    y, vjp = jax.vjp(ours, x, a, b)
    y_ref, vjp_ref = jax.vjp(textbook, x, a, b)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(vjp(g), vjp_ref(g), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    dx, da, _ = vjp(g)
    np.testing.assert_array_equal(dx[1], 0.0)
    np.testing.assert_array_equal(da[1], 0.0)  # agent 1 is absent
    np.testing.assert_array_equal(da[3], 0.0)


def test_traced_scale_is_differentiable():
    """A functional caller may pass the scale as an array (e.g. to sweep it under jit or
    learn it); its gradient is sum(g * y / scale)."""
    k = jax.random.split(jax.random.key(3), 4)
    x = jax.random.normal(k[0], (2, 5, H))
    a = jax.random.normal(k[1], (4, H, 3))
    b = jax.random.normal(k[2], (4, 3, 6))
    ids = jnp.array([1, -1])
    g = jax.random.normal(k[3], (2, 5, 6))
    f = jax.jit(lambda s: jnp.sum(g * lora_delta(x, a, b, ids, s)))
    want = jnp.sum(g * lora_delta(x, a, b, ids, 1.5))
    np.testing.assert_allclose(f(jnp.float32(1.5)), want, rtol=1e-6)
    y1 = lora_delta(x, a, b, ids, 1.0)
    np.testing.assert_allclose(jax.grad(f)(jnp.float32(1.5)), jnp.sum(g * y1), rtol=1e-5)


def test_adapter_keeps_no_mask_or_dropped_copy_for_the_backward():
    a = jax.random.normal(jax.random.key(1), (4, H, 3))
    b = jax.random.normal(jax.random.key(2), (4, 3, H))
    ids = jnp.array([0, 3])

    def f(x):
        def body(c, layer):
            key = jax.random.fold_in(jax.random.key(0), layer)  # a new mask per layer
            three = [
                lora_delta(c, a, b, ids, 1.0, dropout=0.1, rng=jax.random.fold_in(key, m))
                for m in range(3)
            ]
            return c + sum(three), None

        return jnp.sum(jax.lax.scan(body, x, jnp.arange(5))[0])

    _, res = jax.linearize(f, jnp.ones((2, 4, H)))
    per_layer = [r for r in jax.tree.leaves(res) if getattr(r, "shape", (0,))[0] == 5]
    # three adapters reading one input keep that input once, plus per adapter its [B, T, r]
    # bottleneck and two uint32 seeds: no keep masks, no dropped copies of the input
    assert sorted((r.shape, str(r.dtype)) for r in per_layer) == sorted(
        [((5, 2, 4, H), "float32")] + [((5, 2, 4, 3), "float32"), ((5, 2), "uint32")] * 3
    )


def test_merge_equals_delta():
    w = _random_weights()
    base = _base_params()
    merged = merge(base, w, 1)
    x = jax.random.normal(jax.random.PRNGKey(5), (1, 2, H))
    for m in ("q", "down"):
        d_in = base["layers"][m].shape[1]
        xm = x if d_in == H else jax.random.normal(jax.random.PRNGKey(6), (1, 2, d_in))
        expect = xm @ base["layers"][m][0] + lora_delta(
            xm, w.params[m]["A"][0], w.params[m]["B"][0], jnp.array([1]), w.scale
        )
        np.testing.assert_allclose(xm @ merged["layers"][m][0], expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_export_import_roundtrip_exact(tmp_path, family):
    w = _random_weights()
    out = export_peft(w, 2, tmp_path / "agent2-v1", base_model="tiny", family=family)
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8.0
    if family == "phi3":
        assert set(cfg["target_modules"]) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
        assert cfg["rank_pattern"] == {"qkv_proj": 12, "gate_up_proj": 8}
    else:
        assert set(cfg["target_modules"]) == {
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        }
    back = import_peft(out)
    assert back.scale == w.scale
    want = unstack(w, 2)
    jax.tree.map(np.testing.assert_array_equal, back.params, want.params)


def test_phi3_foreign_fused_import_is_exact(tmp_path):
    """A fused adapter without our sidecar comes back as shared-A pieces with the same deltas."""
    w = _random_weights()
    out = export_peft(w, 0, tmp_path / "a", base_model="tiny", family="phi3")
    (out / "coevo_lora.json").unlink()
    with pytest.raises(AdapterFormatError, match="qkv_sizes"):
        import_peft(out)
    back = import_peft(out, qkv_sizes=(H, KV, KV))
    want = unstack(w, 0)
    x = jax.random.normal(jax.random.PRNGKey(9), (1, 3, H))
    for m in ("q", "k", "v", "gate", "up"):
        got = lora_delta(
            x,
            back.params[m]["A"][0][None],
            back.params[m]["B"][0][None],
            jnp.array([0]),
            back.scale,
        )
        exp = lora_delta(
            x,
            want.params[m]["A"][0][None],
            want.params[m]["B"][0][None],
            jnp.array([0]),
            want.scale,
        )
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_import_errors_name_the_file(tmp_path):
    with pytest.raises(AdapterFormatError, match="adapter_config.json"):
        import_peft(tmp_path)
    w = _random_weights(n=1)
    out = export_peft(w, 0, tmp_path / "x", base_model="tiny")
    (out / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(AdapterFormatError, match="adapter_model.safetensors"):
        import_peft(out)


def test_export_replaces_directory_atomically(tmp_path):
    w = _random_weights()
    d = tmp_path / "agent0"
    export_peft(w, 0, d, base_model="tiny")
    export_peft(w, 1, d, base_model="tiny")
    back = import_peft(d)
    np.testing.assert_array_equal(back.params["q"]["A"], unstack(w, 1).params["q"]["A"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent0"]


def test_agentlora_export_single(tmp_path):
    w = _random_weights(modules=("q", "v"))
    single = AgentLoRA(params=unstack(w, 3).params, scale=w.scale, dropout=0.0)
    back = import_peft(export_peft(single, None, tmp_path / "s", base_model="tiny"))
    assert set(back.params) == {"q", "v"}
