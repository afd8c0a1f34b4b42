"""The server fleet: least-work balancing, dedupe, publish to all, failover (fake members),
then 3 real local servers on the tiny random model with a kill -9 mid-round."""

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jax
import pytest

from coevo_jax.lora import LoRAConfig, init_lora, unstack
from coevo_jax.models import ModelConfig, init_params
from rollout_bridge.engine import GenerationRequest, Trajectory
from rollout_bridge.fleet import FleetEngine, ServerSet, least_work, merge_unique, unit_work
from rollout_bridge.http_engine import HTTPEngine, ServerUnavailable
from rollout_bridge.launcher import ManagedServer, free_port, local_command
from tests.rollout_bridge._tiny import HF_CONFIG


def _req(q, prompt_len=4, n=2, max_tokens=4, agent=0):
    return GenerationRequest(
        prompt_ids=tuple(range(2, 2 + prompt_len)),
        agent_id=agent,
        n=n,
        max_tokens=max_tokens,
        seed=q,
        query_id=f"q{q}",
    )


# ----------------------------------------------------------------------------- fake members


class _FakeServer:
    def __init__(self):
        self.restarts, self.generation, self.dead = 0, 1, False

    def restart(self, seen=None):
        self.dead = False
        self.restarts += 1
        self.generation += 1
        return True

    def alive(self):
        return not self.dead

    def stop(self):
        pass


class _FakeMember:
    """What the fleet uses of an HTTPEngine; ``send`` sleeps ``latency`` per token of work."""

    def __init__(self, k, tmp, latency=2e-5, server=None):
        self.url, self.base_model, self.adapter_dir = f"fake://{k}", "base", Path(tmp)
        self.family, self.name_prefix, self.server = "llama", "", server
        self.latency, self.loaded, self.live = latency, set(), {}
        self.sent, self.lock = [], threading.Lock()

    def send(self, chunk, name, version):
        if self.server is not None and self.server.dead:
            raise ServerUnavailable(f"{self.url}: connection refused")
        time.sleep(self.latency * unit_work(chunk))
        with self.lock:
            self.sent.append((chunk, name))
        return [
            Trajectory(r.prompt_ids, (5,), (-0.1,), "length", r.agent_id, version, r.query_id, j)
            for r in chunk
            for j in range(r.n)
        ]

    def load_adapter(self, name, path):
        self.loaded.add(name)

    def unload_adapter(self, name):
        self.loaded.discard(name)

    def set_live(self, live):
        self.live = dict(live)

    def recover(self, seen=None):
        self.loaded |= {name for name, _, _ in self.live.values()}

    def health(self):
        return self.server is None or not self.server.dead

    def server_dead(self):
        return self.server is not None and self.server.dead

    def close(self):
        pass


def _adapter():
    cfg = ModelConfig.from_hf_dict(HF_CONFIG)
    params = init_params(cfg, jax.random.PRNGKey(0))
    w = init_lora(jax.random.PRNGKey(1), LoRAConfig(n_agents=1, rank=4, alpha=8), params)
    return unstack(w, 0)


def _keys_once(trajs, reqs):
    keys = [(t.query_id, t.sample_index) for t in trajs]
    return len(keys) == len(set(keys)) and set(keys) == {
        (r.query_id, j) for r in reqs for j in range(r.n)
    }


def test_least_work_choice():
    class M:
        def __init__(self, i, work, calls=0, up=True, sent=0):
            self.index, self.work, self.calls, self.up, self.tokens_sent = i, work, calls, up, sent

    ms = [M(0, 50), M(1, 10), M(2, 5, up=False), M(3, 10, sent=3)]
    assert least_work(ms, cap=8).index == 1  # least work among the up ones; tie: least sent
    ms[1].calls = 8
    assert least_work(ms, cap=8).index == 3  # member 1 is full
    assert least_work([M(0, 0, up=False)], cap=8) is None
    assert unit_work([_req(0, prompt_len=4, n=3, max_tokens=5)]) == 4 + 15


def test_merge_unique_drops_duplicates_and_keeps_request_order():
    reqs = [_req(0), _req(1)]
    t = lambda q, j: Trajectory((2,), (5,), (-0.1,), "length", 0, 1, f"q{q}", j)  # noqa: E731
    out, dropped = merge_unique(reqs, [[t(1, 1), t(1, 0)], [t(0, 0), t(0, 1)], [t(1, 0)]])
    assert dropped == 1
    assert [(x.query_id, x.sample_index) for x in out] == [
        ("q0", 0),
        ("q0", 1),
        ("q1", 0),
        ("q1", 1),
    ]
    same = [_req(0), _req(0)]  # ids that cannot name a trajectory: nothing is merged
    assert merge_unique(same, [[t(0, 0)], [t(0, 0)]])[1] == 0


def test_load_spreads_within_1_5x_under_equal_latency(tmp_path):
    members = [_FakeMember(k, tmp_path) for k in range(3)]
    fleet = FleetEngine(members, max_concurrency=2)
    reqs = [
        _req(q, prompt_len=2 + q % 7, n=2 + q % 3, max_tokens=4 + 3 * (q % 5)) for q in range(90)
    ]
    trajs = fleet.generate(reqs)
    assert _keys_once(trajs, reqs)
    sent = [s["tokens_sent"] for s in fleet.stats()]
    assert sum(sent) == unit_work(reqs)
    assert max(sent) <= 1.5 * sum(sent) / 3, sent
    # a group's samples went as one call with n = G
    assert all(len(c) == 1 and c[0].n >= 2 for m in members for c, _ in m.sent)
    fleet.close()


def test_publish_reaches_every_member_before_it_is_used(tmp_path):
    members = [_FakeMember(k, tmp_path) for k in range(3)]
    fleet = FleetEngine(members)
    a = _adapter()
    fleet.publish(0, a, 1)
    fleet.publish(0, a, 2)
    assert all(m.loaded == {"agent0-v2"} for m in members)  # v1 retired and unloaded
    trajs = fleet.generate([_req(q) for q in range(6)])
    assert {t.version for t in trajs} == {2}
    assert {name for m in members for _, name in m.sent} == {"agent0-v2"}
    fleet.close()


def test_a_dead_member_fails_over_restarts_and_gets_the_adapters_back(tmp_path):
    servers = [_FakeServer() for _ in range(3)]
    members = [_FakeMember(k, tmp_path, server=s) for k, s in enumerate(servers)]
    fleet = FleetEngine(members, max_concurrency=2, heal_interval=0.05)
    fleet.publish(0, _adapter(), 3)
    servers[1].dead = True
    members[1].loaded.clear()  # a restarted server has forgotten its adapters
    reqs = [_req(q) for q in range(30)]
    trajs = fleet.generate(reqs)
    assert _keys_once(trajs, reqs) and {t.version for t in trajs} == {3}
    deadline = time.monotonic() + 10
    while not fleet.stats()[1]["up"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fleet.stats()[1]["up"] and members[1].loaded == {"agent0-v3"}
    assert fleet.server_restarts == 1 and fleet.resent >= 1
    fleet.close()


def test_server_set_stops_every_server_and_sums_restarts():
    servers = [_FakeServer(), _FakeServer()]
    servers[0].restarts = 2
    assert ServerSet(servers).restarts == 2


# ----------------------------------------------------------------------------- 3 real servers


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    (d / "config.json").write_text(json.dumps(HF_CONFIG))
    ports: list[int] = []
    while len(ports) < 3:
        if (p := free_port()) not in ports:
            ports.append(p)
    made = []
    for k, port in enumerate(ports):
        argv, env = local_command(
            random_config=str(d / "config.json"), agents=3, max_lora_rank=4, port=port,
            served_model_name="tiny", extra=["--batch-wait-ms", "5"],
        )  # fmt: skip
        made.append(
            ManagedServer(
                argv, env, f"http://127.0.0.1:{port}", log_path=d / f"s{k}.log", timeout=300
            )
        )
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda s: s.start(), made))
        yield made
    finally:
        for s in made:
            s.stop()


def _real_fleet(servers, tmp_path, on_request=None):
    members = [
        HTTPEngine(
            s.url, base_model="tiny", adapter_dir=tmp_path / "adapters", eos_ids=(1,),
            retries=1, backoff=0.1, server=s, on_request=on_request,
        )
        for s in servers
    ]  # fmt: skip
    return FleetEngine(members, max_concurrency=4, heal_interval=0.2)


def _close_keeping_servers(fleet):
    """Closes the fleet's clients; the module's servers outlive it."""
    for m in fleet.members:
        m.engine.server = None
    fleet.close()


def _served_names(url):
    return {m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"]}


def test_three_servers_counts_versions_and_spread(servers, tmp_path):
    fleet = _real_fleet(servers, tmp_path)
    a = _adapter()
    fleet.publish(0, a, 1)
    fleet.publish(1, a, 1)
    assert all({"agent0-v1", "agent1-v1"} <= _served_names(s.url) for s in servers)
    reqs = [_req(q, n=4, max_tokens=6, agent=q % 2) for q in range(18)]
    trajs = fleet.generate(reqs)
    assert _keys_once(trajs, reqs) and {t.version for t in trajs} == {1}
    fleet.publish(0, a, 2)
    assert all("agent0-v2" in (n := _served_names(s.url)) and "agent0-v1" not in n for s in servers)
    # Every server takes work. The 1.5x bound is the fake-member test's: here each server
    # compiles its own sampler shapes on two shared cores, so latencies are not equal, and
    # least-work dispatch rightly sends more to whichever server answers first.
    sent = [s["tokens_sent"] for s in fleet.stats()]
    assert min(sent) > 0 and sum(sent) == unit_work(reqs), sent
    _close_keeping_servers(fleet)


def test_kill_9_mid_round_loses_and_duplicates_nothing(servers, tmp_path):
    posts = []
    victim = servers[1]

    def kill_on_second_call(path, body):
        if path == "/v1/completions" and threading.current_thread().name.startswith("fleet"):
            posts.append(1)
            if len(posts) == 4:  # calls are in flight on every server by now
                os.kill(victim.handle.proc.pid, signal.SIGKILL)

    fleet = _real_fleet(servers, tmp_path, on_request=kill_on_second_call)
    fleet.publish(0, _adapter(), 5)
    reqs = [_req(q, prompt_len=4, n=3, max_tokens=8) for q in range(30)]
    trajs = fleet.generate(reqs)
    assert _keys_once(trajs, reqs) and {t.version for t in trajs} == {5}
    deadline = time.monotonic() + 240
    while not fleet.stats()[1]["up"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fleet.stats()[1]["up"], "the killed server did not come back"
    assert fleet.server_restarts == 1 and fleet.stats()[1]["failures"] >= 1
    assert "agent0-v5" in _served_names(victim.url)  # re-published before taking work
    again = fleet.generate(reqs[:6])
    assert _keys_once(again, reqs[:6])
    _close_keeping_servers(fleet)


# ----------------------------------------------------------------------------- wiring (setup)


def _group_and_cfg(**rollout):
    import dataclasses

    from coevo_jax.train import setup
    from tests.train._tiny import tiny_backbone, tiny_config

    cfg = tiny_config()
    cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, **rollout))
    (group,) = setup.make_groups(cfg, [tiny_backbone(layers=2)])
    return setup, cfg, group


def test_http_urls_go_to_groups_in_blocks_of_k(tmp_path):
    urls = tuple(f"http://127.0.0.1:{9000 + i}" for i in range(4))
    setup, cfg, group = _group_and_cfg(engine="http", urls=urls, servers_per_model=2)
    fleets = [setup.make_engine(cfg, group, g, tmp_path) for g in range(3)]
    assert [[m.engine.url for m in f.members] for f in fleets] == [
        list(urls[:2]), list(urls[2:]), list(urls[2:])  # groups past the list: the last block
    ]  # fmt: skip
    for f in fleets:
        f.close()
    setup, cfg, group = _group_and_cfg(engine="http", urls=urls[:1])
    single = setup.make_engine(cfg, group, 0, tmp_path)
    assert isinstance(single, HTTPEngine)  # K = 1: today's engine, no fleet
    single.close()
    with pytest.raises(ValueError, match="servers_per_model"):
        _group_and_cfg(engine="http", urls=urls[:3], servers_per_model=2)


def test_vllm_starts_k_servers_on_distinct_ports_shared_by_groups(monkeypatch, tmp_path):
    setup, cfg, group = _group_and_cfg(engine="vllm", servers_per_model=3)
    calls = []

    def launch(*a, port=None, **kw):
        calls.append(port)
        server = _FakeServer()
        server.url = f"http://127.0.0.1:{port}"
        return server

    monkeypatch.setattr(setup, "launch_vllm", launch)
    servers = {}
    first = setup.make_engine(cfg, group, 0, tmp_path, servers=servers)
    second = setup.make_engine(cfg, group, 1, tmp_path, servers=servers)  # same base model
    assert len(calls) == 3 and len(set(calls)) == 3
    assert isinstance(first, FleetEngine) and len(first.members) == 3
    assert [m.engine.server for m in first.members] == [m.engine.server for m in second.members]
    assert {m.engine.name_prefix for m in second.members} == {"g1-"}
    first.close()
    second.close()
