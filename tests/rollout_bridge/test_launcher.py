"""The launcher builds the exact vLLM invocation the bridge relies on."""

import pytest

from rollout_bridge.launcher import local_command, vllm_command, vllm_max_lora_rank


def test_vllm_command_has_runtime_lora_flags():
    argv, env = vllm_command("Qwen/Qwen3-4B", agents=4, max_lora_rank=16, port=8123)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-4B"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert "--enable-lora" in argv
    assert argv[argv.index("--max-loras") + 1] == "4"
    assert argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert argv[argv.index("--port") + 1] == "8123"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert flags  # parsed


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
