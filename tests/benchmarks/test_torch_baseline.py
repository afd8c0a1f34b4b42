"""The PyTorch baseline of the policy step: gradient checkpointing changes the work, not the
update (so the benchmark's ``-remat`` pairing compares like with like)."""

import numpy as np
import pytest

from benchmarks import common
from benchmarks.bench_policy_step import make_data

torch = pytest.importorskip("torch", reason="the PyTorch baseline needs torch (test extra)")
pytest.importorskip("peft", reason="the PyTorch baseline needs peft (test extra)")
pytest.importorskip("trl", reason="the PyTorch baseline uses TRL 1.16's loss (test extra)")


def _updates_of_two_steps(checkpointing: bool) -> dict[str, "torch.Tensor"]:
    import transformers

    from benchmarks.torch_baseline import peft_policy_step

    cfg = transformers.LlamaConfig(**common.TINY_LLAMA)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    data = make_data(4, 8, 16, 2, vocab=cfg.vocab_size)
    # A random model's log-probs sit near -log V: old log-probs there keep the sequence ratio
    # inside the clip range, so the loss has a gradient.
    data["old_logp"][:] = -np.log(cfg.vocab_size)
    run = peft_policy_step(model, data, n_agents=2, rank=4, gradient_checkpointing=checkpointing)
    # PEFT wraps the model in place: its LoRA layers are the model's own modules now.
    assert model.is_gradient_checkpointing == checkpointing
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    torch.manual_seed(1)  # the same dropout masks on both sides
    run()
    run()
    # The update, not the parameters: with the warmup's tiny first learning rates the steps
    # move each parameter by ~1e-7, far below any tolerance on the parameters themselves.
    return {n: p.detach() - before[n] for n, p in model.named_parameters() if "lora_" in n}


def test_gradient_checkpointing_gives_the_same_update():
    plain = _updates_of_two_steps(False)
    ckpt = _updates_of_two_steps(True)
    assert plain.keys() == ckpt.keys() and len(plain) == 2 * 7 * 2 * 2  # A, B x 7 x layers x agents
    for name, d in plain.items():
        # B starts at zero, so the steps move every B; A's updates stay below fp32 rounding.
        assert "lora_A" in name or d.abs().max() > 0, name
        torch.testing.assert_close(ckpt[name], d, rtol=1e-4, atol=1e-4 * float(d.abs().max()))
