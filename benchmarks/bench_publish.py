"""Adapter publish latency: ``HTTPEngine.publish`` against the project's local rollout server.

    python -m benchmarks.bench_publish [--quick]

One publish = export the agent's LoRA as a PEFT directory (safetensors + adapter_config.json,
written atomically to a new versioned directory), ``POST /v1/load_lora_adapter`` and, from
the second version on, ``POST /v1/unload_lora_adapter`` of the previous version. It is the
pause between a policy step and the next rollout that uses the new weights.

The server is ``rollout_bridge.server`` started by ``rollout_bridge.launcher`` in a child
process: the embedded SmolLM2-135M-Instruct by default (rank 16 on q, k, v, o, gate, up,
down: the adapter the policy-step benchmark trains), or in ``--quick`` a random 2-layer
Llama so CI stays fast. There is no PyTorch counterpart: publishing is a file write plus an
HTTP round trip on either side. Writes ``benchmarks/results/publish-*.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import common

# ----------------------------------------------------------------------------- figures (run_all)


def figures(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    p = rec["figures"]["publish"]
    return [
        common.figure(
            "adapter_publish_ms",
            "ms",
            1e3 * p["median_s"],
            None,
            higher_is_better=False,
            spread_jax=common.time_range(p, 1e3),
            note="HTTPEngine.publish (PEFT export + load + unload of the previous version) "
            f"against the local server; {rec['config']['model']}, rank {rec['config']['rank']}",
        )
    ]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="random 2-layer model, 5 publishes")
    ap.add_argument("--repeats", type=int, default=20, help="publishes timed (new version each)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--server-timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 5

    import jax

    from coevo_jax.lora import LoRAConfig, export_peft, init_lora, unstack
    from rollout_bridge.http_engine import HTTPEngine
    from rollout_bridge.launcher import free_port, local_command, start_server

    work = Path(tempfile.mkdtemp(prefix="bench_publish-"))
    params, cfg, _, model_desc, server_kw = common.served_model(args.quick, work)

    lora = init_lora(
        jax.random.key(1),
        LoRAConfig(n_agents=2, rank=args.rank, alpha=2.0 * args.rank, dropout=0.0),
        params,
    )
    # Non-zero B so the exported tensors are not trivially compressible.
    lora = lora.replace(
        params=jax.tree.map(lambda x: jax.random.normal(jax.random.key(2), x.shape), lora.params)
    )
    agent = unstack(lora, 0)
    n_params = sum(int(x.size) for x in jax.tree.leaves(agent))

    port = free_port()
    argv_, env = local_command(
        agents=2, max_lora_rank=args.rank, port=port, served_model_name="base", **server_kw
    )
    log = open(work / "server.log", "w")
    t0 = time.perf_counter()
    handle = start_server(
        argv_, env, f"http://127.0.0.1:{port}", timeout=args.server_timeout, log=log
    )
    server_start_s = time.perf_counter() - t0
    try:
        eng = HTTPEngine(handle.url, base_model="base", adapter_dir=work / "adapters")
        eng.publish(0, agent, 0)  # first load: connection set-up, server-side imports
        publish_s = []
        for v in range(1, args.repeats + 1):
            t = time.perf_counter()
            eng.publish(0, agent, v)
            publish_s.append(time.perf_counter() - t)
        export_s = []
        for v in range(args.repeats):
            t = time.perf_counter()
            export_peft(agent, None, work / "export" / f"v{v}", base_model="base")
            export_s.append(time.perf_counter() - t)
        eng.close()
    finally:
        handle.stop()
        log.close()
    size = sum(f.stat().st_size for f in (work / "adapters" / f"agent0-v{args.repeats}").iterdir())

    figures = {
        "publish": common.summary(publish_s),
        "export_only": common.summary(export_s),
        "server_start_s": server_start_s,
        "adapter_bytes": size,
        "adapter_params": n_params,
    }
    config = {
        "model": model_desc,
        "rank": args.rank,
        "targets": "q,k,v,o,gate,up,down",
        "repeats": args.repeats,
        "quick": args.quick,
        "server": "rollout_bridge.server (local, JAX)",
    }
    out = common.write_result("publish", {"config": config, "figures": figures})
    rows = [
        {
            "step": name,
            "median ms": 1e3 * figures[name]["median_s"],
            "min ms": 1e3 * figures[name]["min_s"],
            "max ms": 1e3 * figures[name]["max_s"],
        }
        for name in ("publish", "export_only")
    ]
    print(common.format_table(rows))
    print(
        f"adapter {size / 2**20:.2f} MiB ({n_params} params); server start {server_start_s:.1f} s"
    )
    print(f"wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return {"config": config, "figures": figures, "path": str(out)}


if __name__ == "__main__":
    main()
