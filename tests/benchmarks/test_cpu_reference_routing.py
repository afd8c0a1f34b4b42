import numpy as np

from benchmarks.cpu_reference_routing import geometry


def test_geometry_separates_a_shared_direction_from_the_domains():
    rng = np.random.default_rng(0)
    shared = np.zeros(8)
    shared[0] = 100.0
    a = shared + np.r_[0, 1, 0, 0, 0, 0, 0, 0] + 0.01 * rng.normal(size=(20, 8))
    b = shared + np.r_[0, 0, 1, 0, 0, 0, 0, 0] + 0.01 * rng.normal(size=(20, 8))
    g = geometry(np.concatenate([a, b]), ["a"] * 20 + ["b"] * 20)
    assert g["mean_norm_share"] > 0.99  # almost all of each norm is the shared vector
    assert g["cosine_raw"]["a"]["b"] > 0.99  # raw, the two domains look alike
    # whitened, the shared direction is gone: the two domains point apart
    assert g["cosine_whitened"]["a"]["b"] < 0 < g["cosine_whitened"]["a"]["a"]
