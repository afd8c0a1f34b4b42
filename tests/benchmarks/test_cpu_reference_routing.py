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


def test_linear_probe_reads_a_small_domain_offset_under_a_large_shared_vector():
    from benchmarks.cpu_reference_routing import linear_probe

    rng = np.random.default_rng(0)

    def sample(n, noise_dims):
        d = rng.integers(0, 4, size=n)
        h = 100.0 + rng.normal(size=(n, 16)) * noise_dims  # shared vector plus noise
        h[np.arange(n), d] += 0.5 if noise_dims.any() else 0.0
        return h, [f"d{k}" for k in d]

    signal = np.r_[np.full(4, 0.05), np.ones(12)]  # domain axes quiet, the rest noisy
    fit, test = sample(400, signal), sample(200, signal)
    r = linear_probe(fit[0], fit[1], test[0], test[1])
    assert r["accuracy"] > 0.95 and r["test_queries"] == 200 and r["chance"] < 0.35
    # labels unrelated to the features: near chance
    shuffled = list(np.random.default_rng(1).permutation(test[1]))
    assert linear_probe(fit[0], fit[1], test[0], shuffled)["accuracy"] < 0.45


def test_nmi_ci_from_counts_brackets_the_nmi_of_the_table():
    from benchmarks.cpu_reference_routing import nmi_ci
    from coevo_jax.train.probe import routing_nmi

    table = {"a": [50, 10, 0], "b": [5, 40, 15], "c": [10, 10, 40]}
    d = [k for k, c in table.items() for _ in range(sum(c))]
    top1 = [i for c in table.values() for i, n in enumerate(c) for _ in range(n)]
    lo, hi = nmi_ci(table)
    assert lo < routing_nmi(d, top1) < hi and hi - lo < 0.3
    assert nmi_ci({"a": [20, 0], "b": [0, 20]}) == [1.0, 1.0]
