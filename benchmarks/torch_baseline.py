"""The PyTorch baseline of the policy step: transformers + PEFT multi-adapter LoRA + TRL's loss.

Shared by ``bench_policy_step`` (SmolLM2 on CPU) and ``gpu_check`` (Qwen3-4B shapes on a GPU):
given any causal LM, it trains ``n_agents`` named PEFT adapters the way a TRL user would,
one agent after another: ``set_adapter``, reference log-probs under ``disable_adapter()``,
``GRPOTrainer._compute_loss`` (TRL 1.16 has no free-standing loss, so the trainer is built
with ``object.__new__`` and the attributes the loss reads), backward, clipping and that
agent's own AdamW + cosine schedule.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np

HF_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def trl_loss_stub(model: Any, max_completion_length: int, *, beta: float = 1e-4, eps: float = 0.2):
    """A ``GRPOTrainer`` that only knows what ``_compute_loss`` reads (GSPO, grpo aggregation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl import GRPOTrainer

    t = object.__new__(GRPOTrainer)
    t.top_entropy_quantile = 1.0
    t.off_policy_mask_threshold = None
    t.importance_sampling_level = "sequence"
    t.loss_type = "grpo"
    t.epsilon_low = t.epsilon_high = eps
    t.beta = beta
    t.args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
    t.use_vllm = False
    t.vllm_importance_sampling_correction = False
    t.model = model
    t.current_gradient_accumulation_steps = 1
    t.max_completion_length = max_completion_length
    t._entropy_bonus_enabled = False
    t.aux_loss_enabled = False
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = SimpleNamespace(
        num_processes=1,
        reduce=lambda x, reduction="sum": x,
        gather=lambda x: x,
        autocast=contextlib.nullcontext,
        is_main_process=True,
    )
    return t


def peft_policy_step(
    model: Any,
    data: dict[str, np.ndarray],
    *,
    n_agents: int,
    rank: int,
    device: str = "cpu",
    autocast: Any = None,
    gradient_checkpointing: bool = False,
):
    """Wraps ``model`` with ``n_agents`` LoRA adapters; returns ``run()`` doing one full step.

    ``autocast`` (e.g. ``torch.bfloat16``) runs both forwards under ``torch.autocast`` (bf16
    matmuls; PEFT keeps the adapters fp32 whatever the backbone's dtype, so they stay the
    fp32 master copies); None = fp32.

    ``gradient_checkpointing`` is ``GRPOConfig``'s default (True in TRL 1.16), set up as
    ``GRPOTrainer`` does: ``gradient_checkpointing_enable()`` (transformers 5: non-reentrant)
    and ``enable_input_require_grads()`` for a PEFT model, and the reference pass under
    ``disable_gradient_checkpointing``. The decoder layers' forward is then recomputed in
    the backward, the work our ``RLConfig(remat=True)`` does.
    """
    import contextlib

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl import GRPOTrainer
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import add_fused_lm_head

    # As GRPOTrainer.__init__ does: fused, tiled LM head returning log-probs and entropies.
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    lcfg = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.05,
        target_modules=HF_TARGETS,
        task_type="CAUSAL_LM",
    )
    pm = get_peft_model(model, lcfg, adapter_name="agent0")
    for i in range(1, n_agents):
        pm.add_adapter(f"agent{i}", lcfg)
    pm.to(device)
    pm.train()
    if gradient_checkpointing:
        pm.gradient_checkpointing_enable()
        pm.enable_input_require_grads()
    opts, scheds, agent_params = [], [], []
    for i in range(n_agents):
        ps = [p for n, p in pm.named_parameters() if f".agent{i}." in n]
        for p in ps:
            p.requires_grad_(True)
        agent_params.append(ps)
        opt = torch.optim.AdamW(ps, lr=3e-5, weight_decay=0.0)
        opts.append(opt)
        scheds.append(transformers.get_cosine_schedule_with_warmup(opt, 600, 6000))
    t_len = data["completion_ids"].shape[1]
    t = trl_loss_stub(pm, t_len)
    tt = {k: torch.from_numpy(np.asarray(v)).to(device) for k, v in data.items()}

    def amp():
        if autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device, dtype=autocast)

    def run():
        for i in range(n_agents):
            rows = (tt["agent_ids"] == i).nonzero().squeeze(-1)
            if rows.numel() == 0:
                continue
            pick = {k: v[rows] for k, v in tt.items()}
            pm.set_adapter(f"agent{i}")
            ids = torch.cat([pick["prompt_ids"], pick["completion_ids"]], 1)
            mask = torch.cat([pick["prompt_mask"], pick["completion_mask"]], 1)
            no_ckpt = disable_gradient_checkpointing(pm)
            with torch.no_grad(), no_ckpt, pm.disable_adapter(), amp():
                ref, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(t, pm, ids, mask, t_len)
            inputs = {
                "prompt_ids": pick["prompt_ids"],
                "prompt_mask": pick["prompt_mask"],
                "completion_ids": pick["completion_ids"],
                "completion_mask": pick["completion_mask"],
                "advantages": pick["advantages"],
                "old_per_token_logps": pick["old_logp"],
                "ref_per_token_logps": ref,
                "num_items_in_batch": pick["completion_mask"].sum().float(),
            }
            with amp():
                loss = GRPOTrainer._compute_loss(t, pm, inputs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent_params[i], 1.0)
            opts[i].step()
            scheds[i].step()
            opts[i].zero_grad(set_to_none=True)
        if device != "cpu":
            torch.cuda.synchronize()

    return run
