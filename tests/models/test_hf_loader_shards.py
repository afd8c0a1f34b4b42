"""coevo_jax.models.hf_loader on multi-file checkpoints: shards load like one file, with and
without a mesh, one file open at a time, each tensor placed on its own (no stacked host copy)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coevo_jax.models import hf_loader, load
from coevo_jax.models.hf_export import save_hf
from coevo_jax.parallel import make_mesh, param_shardings
from tests.helpers import family_configs
from tests.models._params import numpy_params

CONFIGS = family_configs()
SHARD_BYTES = 12_000  # the largest tensor (phi3's fused gate_up, 96x32 fp32) is 12 KB


def _save(tmp_path, family: str):
    """``(single-file dir, sharded dir, params)`` of the tiny ``family`` model."""
    cfg = CONFIGS[family]
    params = numpy_params(cfg, seed=3)
    one = save_hf(params, cfg, tmp_path / "one", progress=False)
    many = save_hf(params, cfg, tmp_path / "many", max_shard_size=SHARD_BYTES, progress=False)
    files = set(json.loads((many / hf_loader.INDEX_FILE).read_text())["weight_map"].values())
    assert len(files) > 3 and not (many / hf_loader.SINGLE_FILE).exists()
    return one, many, params


def _assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_shards_load_identically_to_one_file(tmp_path, family):
    one, many, params = _save(tmp_path, family)
    a, _ = load(one, progress=False)
    b, _ = load(many, progress=False)
    assert a.config == b.config
    _assert_same(b.params, a.params)
    _assert_same(b.params, params)
    bf16, _ = load(many, dtype=jnp.bfloat16, progress=False)
    _assert_same(bf16.params, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params))


@pytest.mark.parametrize(
    ("family", "axes"), [("llama", (2, 2, 2)), ("phi3", (1, 2, 4)), ("qwen3", (1, 4, 2))]
)
def test_shards_load_onto_a_mesh_with_the_rule_shardings(tmp_path, family, axes):
    if jax.device_count() < 8:
        pytest.skip("needs 8 (fake) devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    one, many, params = _save(tmp_path, family)
    mesh = make_mesh(*axes)
    model, _ = load(many, mesh=mesh, progress=False)
    plain, _ = load(one, progress=False)
    _assert_same(model.params, plain.params)
    expect = param_shardings(params, mesh)
    for got, want in zip(jax.tree.leaves(model.params), jax.tree.leaves(expect), strict=True):
        assert got.sharding.is_equivalent_to(want, got.ndim), (got.sharding, want)
        assert len(got.addressable_shards) == 8
        shard = got.addressable_shards[0].data.shape
        assert shard == want.shard_shape(got.shape)
    q = model.params["layers"]["q"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor")


class _Spy:
    """Wraps ``safe_open`` to record which files are open at once."""

    def __init__(self, real):
        self.real, self.open_now, self.most_open, self.opened = real, set(), 0, []

    def __call__(self, path, framework):
        spy, handle = self, self.real(path, framework=framework)

        class Handle:
            def __enter__(self):
                spy.open_now.add(path)
                spy.opened.append(path)
                spy.most_open = max(spy.most_open, len(spy.open_now))
                return handle.__enter__()

            def __exit__(self, *exc):
                spy.open_now.discard(path)
                return handle.__exit__(*exc)

            def keys(self):
                return handle.keys()

        return Handle()


def test_files_are_read_one_at_a_time_and_tensors_placed_one_by_one(tmp_path, monkeypatch):
    _, many, params = _save(tmp_path, "phi3")
    spy = _Spy(hf_loader.safe_open)
    monkeypatch.setattr(hf_loader, "safe_open", spy)
    placed: list[tuple[int, ...]] = []
    real_place = hf_loader.place

    def place(host, sharding):
        placed.append(np.shape(host))
        return real_place(host, sharding)

    monkeypatch.setattr(hf_loader, "place", place)
    mesh = make_mesh(1, jax.device_count(), 1)
    model, _ = load(many, mesh=mesh, progress=False)
    _assert_same(model.params, params)
    n_files = len(list(many.glob("model-*.safetensors")))
    assert spy.most_open == 1 and len(spy.opened) == n_files == len(set(spy.opened))
    # every host array placed is one layer's piece (or an unstacked parameter), never a stack
    cfg = CONFIGS["phi3"]
    assert placed and all(len(s) < 3 for s in placed)
    assert max(int(np.prod(s)) for s in placed) <= cfg.vocab_size * cfg.hidden_size
    assert sum(s == (cfg.hidden_size, cfg.intermediate_size) for s in placed) == 2 * cfg.num_layers


def test_a_shard_listed_in_the_index_but_absent_names_the_file(tmp_path):
    _, many, _ = _save(tmp_path, "llama")
    victim = sorted(many.glob("model-*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(hf_loader.ModelLoadError, match=rf"{victim.name}: not found \(listed in"):
        load(many, progress=False)


@pytest.mark.parametrize("family", ["llama", "phi3"])
@pytest.mark.parametrize(("block_bytes", "tile_rows"), [(5 * 4 * 32, 64), (2**20, 3)])
def test_matrices_read_in_blocks_and_tiles_are_the_same(
    tmp_path, monkeypatch, family, block_bytes, tile_rows
):
    """Blocks of a few rows (Phi-3's fused tensors: blocks inside each piece), or transposing
    tiles of a few rows inside one block: every row lands where one whole read puts it."""
    one, _, params = _save(tmp_path, family)
    monkeypatch.setattr(hf_loader, "_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(hf_loader, "_TILE_ROWS", tile_rows)
    model, _ = load(one, progress=False)
    _assert_same(model.params, params)
