"""The batcher: concurrent jobs share a run, keys split batches, errors reach every caller."""

import threading

import pytest

from rollout_bridge.batching import Batcher, Job, _pack


def _job(key, rows, payload=None):
    return Job(key=key, rows=rows, payload=payload)


def test_pack_keeps_whole_jobs_under_the_row_cap():
    jobs = [_job("k", r) for r in (3, 3, 2, 5, 1)]
    batches = _pack(jobs, max_rows=6)
    assert [[j.rows for j in b] for b in batches] == [[3, 3], [2], [5, 1]]
    big = _job("k", 9)
    assert _pack([big], max_rows=4) == [[big]]  # an oversize job runs alone


def test_concurrent_jobs_share_one_run_and_keys_split_runs():
    calls = []

    def run(jobs):
        calls.append([j.payload for j in jobs])
        return [j.payload * 10 for j in jobs]

    b = Batcher(run, wait_s=0.3, max_rows=64)
    start = threading.Barrier(4)
    results = {}

    def call(key, payload):
        start.wait()
        results[payload] = b.submit(_job(key, 2, payload)).result(timeout=30)

    threads = [
        threading.Thread(target=call, args=(k, p)) for k, p in (("a", 1), ("a", 2), ("b", 3))
    ]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    b.close()
    assert results == {1: 10, 2: 20, 3: 30}
    assert sorted(sorted(c) for c in calls) == [[1, 2], [3]]
    assert b.batches == 2


def test_errors_reach_every_job_of_the_batch_and_the_batcher_keeps_running():
    def run(jobs):
        if any(j.payload == "boom" for j in jobs):
            raise RuntimeError("sampler failed")
        return [ValueError("gone") if j.payload == "gone" else "ok" for j in jobs]

    b = Batcher(run, wait_s=0.0, max_rows=8)
    with pytest.raises(RuntimeError, match="sampler failed"):
        b.submit(_job("k", 1, "boom")).result(timeout=30)
    with pytest.raises(ValueError, match="gone"):
        b.submit(_job("k", 1, "gone")).result(timeout=30)
    assert b.submit(_job("k", 1, "fine")).result(timeout=30) == "ok"
    b.close()


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        Batcher(lambda jobs: [], wait_s=-1, max_rows=4)
    with pytest.raises(ValueError):
        Batcher(lambda jobs: [], wait_s=0, max_rows=0)
