"""The server fleet: publish latency into 1, 2 and 3 local servers, and one ``n = G`` call
against G separate calls.

    python -m benchmarks.bench_fleet [--quick]

Three ``rollout_bridge.server`` children are started on this machine (the embedded
SmolLM2-135M-Instruct, or in ``--quick`` a random 2-layer Llama). Publish: a
:class:`rollout_bridge.fleet.FleetEngine` over the first K servers exports the adapter once
and loads it on all K (new version each time, the previous one unloaded); K = 1, 2, 3 are
timed interleaved. ``n = G``: one ``/v1/completions`` call with ``n = G`` against G calls
with ``n = 1`` sent at once, to one server: wall time and the prompt tokens the server
reports (``usage.prompt_tokens``; the local server prefills every row, so the two are equal
there; vLLM prefills an ``n = G`` prompt once). Writes ``benchmarks/results/fleet-*.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks import common


def _start(k: int, rank: int, server_kw: dict, work: Path, timeout: float) -> list[Any]:
    from rollout_bridge.launcher import ManagedServer, free_port, local_command

    ports: list[int] = []
    while len(ports) < k:
        if (p := free_port()) not in ports:
            ports.append(p)
    servers = []
    for j, port in enumerate(ports):
        argv, env = local_command(
            agents=4, max_lora_rank=rank, port=port, served_model_name="base", **server_kw
        )
        url = f"http://127.0.0.1:{port}"
        servers.append(ManagedServer(argv, env, url, log_path=work / f"s{j}.log", timeout=timeout))
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(lambda s: s.start(), servers))
    return servers


def _publish_times(servers, agent, work: Path, repeats: int) -> dict[str, list[float]]:
    """Seconds per publish into the first K servers, K = 1..len(servers), interleaved."""
    from rollout_bridge.fleet import FleetEngine
    from rollout_bridge.http_engine import HTTPEngine

    fleets, version = {}, {}
    for k in range(1, len(servers) + 1):
        members = [
            HTTPEngine(
                s.url, base_model="base", adapter_dir=work / "adapters", name_prefix=f"k{k}-"
            )
            for s in servers[:k]
        ]
        fleets[f"{k} server{'s' if k > 1 else ''}"] = FleetEngine(members)

    def publish(name):
        version[name] = version.get(name, 0) + 1
        fleets[name].publish(0, agent, version[name])

    try:
        return common.interleaved({n: (lambda n=n: publish(n)) for n in fleets}, repeats)
    finally:
        for fleet in fleets.values():  # free the slots for the next contender
            live = fleet.live.get(0)
            for m in fleet.members:
                if live is not None:
                    m.engine.unload_adapter(live[0])
            fleet.close()


def _n_g(url: str, prompt: list[int], g: int, max_tokens: int, repeats: int) -> dict[str, Any]:
    """One call with ``n = g`` against ``g`` concurrent calls with ``n = 1``."""
    client = httpx.Client(timeout=600.0)
    body = {"model": "base", "prompt": prompt, "max_tokens": max_tokens, "logprobs": 0,
            "return_token_ids": True, "ignore_eos": True}  # fmt: skip
    usage: dict[str, int] = {}

    def post(n: int, seed: int) -> int:
        r = client.post(url + "/v1/completions", json={**body, "n": n, "seed": seed})
        r.raise_for_status()
        return int(r.json()["usage"]["prompt_tokens"])

    def one_call():
        usage["n=G"] = post(g, 0)

    def separate():
        with ThreadPoolExecutor(g) as pool:
            usage["G x n=1"] = sum(pool.map(lambda j: post(1, j), range(g)))

    try:
        times = common.interleaved({"n=G": one_call, "G x n=1": separate}, repeats)
    finally:
        client.close()
    return {name: {**common.summary(t), "prompt_tokens": usage[name]} for name, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="random 2-layer model, 3 repeats")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8, help="G")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--server-timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 3

    import jax

    from coevo_jax.lora import LoRAConfig, init_lora, unstack

    work = Path(tempfile.mkdtemp(prefix="bench_fleet-"))
    params, cfg, _, model_desc, server_kw = common.served_model(args.quick, work)
    lora = init_lora(
        jax.random.key(1), LoRAConfig(n_agents=1, rank=args.rank, alpha=2.0 * args.rank), params
    )
    lora = lora.replace(  # non-zero B: the tensors written are not trivially compressible
        params=jax.tree.map(lambda x: jax.random.normal(jax.random.key(2), x.shape), lora.params)
    )
    agent = unstack(lora, 0)
    t0 = time.perf_counter()
    servers = _start(3, args.rank, server_kw, work, args.server_timeout)
    start_s = time.perf_counter() - t0
    try:
        publish = {
            k: common.summary(v)
            for k, v in _publish_times(servers, agent, work, args.repeats).items()
        }
        prompt = [3 + (7 * i) % (cfg.vocab_size - 3) for i in range(args.prompt_tokens)]
        n_g = _n_g(servers[0].url, prompt, args.group_size, args.max_tokens, args.repeats)
    finally:
        for s in servers:
            s.stop()
    size = sum(f.stat().st_size for f in next((work / "adapters").iterdir()).iterdir())
    figures = {"publish": publish, "n_g": n_g, "servers_start_s": start_s, "adapter_bytes": size}
    config = {
        "model": model_desc,
        "rank": args.rank,
        "targets": "q,k,v,o,gate,up,down",
        "repeats": args.repeats,
        "group_size": args.group_size,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "quick": args.quick,
        "server": "rollout_bridge.server (local, JAX), 3 children on this machine",
    }
    out = common.write_result("fleet", {"config": config, "figures": figures})
    rows = [{"what": f"publish into {k}", "median ms": 1e3 * v["median_s"],
             "min ms": 1e3 * v["min_s"], "prompt tokens": ""} for k, v in publish.items()]  # fmt: skip
    rows += [{"what": k, "median ms": 1e3 * v["median_s"], "min ms": 1e3 * v["min_s"],
              "prompt tokens": v["prompt_tokens"]} for k, v in n_g.items()]  # fmt: skip
    print(common.format_table(rows))
    print(f"adapter {size / 2**20:.2f} MiB; 3 servers started in {start_s:.1f} s; wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return {"config": config, "figures": figures, "path": str(out)}


if __name__ == "__main__":
    main()
