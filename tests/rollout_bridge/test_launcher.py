"""The launcher builds the exact vLLM invocation the bridge relies on."""

import os

import pytest

from rollout_bridge.launcher import local_command, vllm_command, vllm_max_lora_rank


def test_vllm_command_has_runtime_lora_flags():
    argv, env = vllm_command("Qwen/Qwen3-4B", agents=4, max_lora_rank=16, port=8123)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-4B"]
    assert "--enable-lora" in argv
    # one spare slot: with every slot taken, vLLM serves base rows with an adapter
    assert argv[argv.index("--max-loras") + 1] == "5"
    assert argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert argv[argv.index("--port") + 1] == "8123"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    # seeded requests must never be prefilled in chunks (vLLM's CPU worker dies on it), so
    # a whole prompt of max_model_len tokens fits one step
    assert "--no-enable-chunked-prefill" in argv

    def value(flag):
        return int(argv[argv.index(flag) + 1])

    assert value("--max-num-batched-tokens") >= value("--max-model-len")


@pytest.mark.parametrize(
    ("flags", "expected"), [({"avx2", "avx512_bf16"}, "bfloat16"), ({"avx2", "fma"}, "float32")]
)
def test_vllm_dtype_follows_native_bf16(monkeypatch, flags, expected):
    """Unset, the server's dtype is bf16 only where the CPU multiplies bf16 natively (vLLM's CPU
    build converts elsewhere: 2-3x slower than fp32 on an AVX2 box); explicit wins."""
    from coevo_jax.models import hardware

    monkeypatch.setattr(hardware, "cpu_flags", lambda path="/proc/cpuinfo": frozenset(flags))
    monkeypatch.setattr(hardware.jax, "default_backend", lambda: "cpu")
    argv, _ = vllm_command("m", agents=1)
    assert argv[argv.index("--dtype") + 1] == expected
    argv, _ = vllm_command("m", agents=1, dtype="float16")
    assert argv[argv.index("--dtype") + 1] == "float16"


@pytest.mark.parametrize(("cpus", "bind"), [({0, 1}, "0,1"), ({3}, "3"), (set(range(8)), None)])
def test_vllm_cpu_threads_use_every_core_of_a_small_machine(monkeypatch, cpus, bind):
    """On 1-2 CPUs the OpenMP threads take every core (vLLM's own binding leaves one thread on
    2 cores); larger machines keep vLLM's binding; the caller's environment wins."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cpus)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    _, env = vllm_command("m", agents=1)
    assert env.get("VLLM_CPU_OMP_THREADS_BIND") == bind
    assert env.get("VLLM_CPU_NUM_OF_RESERVED_CPU") == (None if bind is None else "0")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    _, env = vllm_command("m", agents=1)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_vllm_rank_rounds_up_to_an_accepted_value():
    assert vllm_max_lora_rank(16) == 16
    assert vllm_max_lora_rank(48) == 64  # phi3's fused qkv export at r=16
    with pytest.raises(ValueError):
        vllm_max_lora_rank(1000)


def test_local_command_runs_our_server_module():
    argv, _ = local_command(model="m.gguf", agents=3, port=9000)
    assert argv[1:3] == ["-m", "rollout_bridge.server"]
    assert (
        argv[argv.index("--max-loras") + 1] == "3" and argv[argv.index("--model") + 1] == "m.gguf"
    )


def test_vllm_command_with_an_interpreter_runs_the_api_server_module():
    argv, env = vllm_command("/m", agents=2, python="/venv/bin/python", kv_cache_gb=3)
    assert argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
    ]
    assert argv[argv.index("--max-loras") + 1] == "3"
    assert argv[argv.index("--dtype") + 1] in ("bfloat16", "float32")  # by the CPU's bf16
    assert env["VLLM_CPU_KVCACHE_SPACE"] in ("3", os.environ.get("VLLM_CPU_KVCACHE_SPACE"))
