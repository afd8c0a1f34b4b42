"""RL hyperparameters for the policy step (docs/design.md §2 step 7, §4; paper appendix B)."""

from __future__ import annotations

import dataclasses

from coevo_jax.models.decoder import remat_name
from coevo_jax.models.ops import ATTENTION_IMPLS

LEVELS = ("sequence", "token")
LOSS_TYPES = ("grpo", "dapo", "dr_grpo")
BEHAVIOR_LOGPROBS = ("auto", "engine", "recompute")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Policy-optimisation settings shared by every agent.

    Attributes:
      level: importance-sampling level: ``"sequence"`` is GSPO (one ratio per completion,
        from the mean token log-ratio), ``"token"`` is GRPO/DAPO's per-token ratio.
      loss_type: aggregation: ``"grpo"`` (per-sequence token mean, then mean over sequences),
        ``"dapo"`` (token sum over the token count), ``"dr_grpo"`` (token sum over
        sequences x ``max_completion_length``).
      eps_low, eps_high: the ratio is clipped to ``[1 - eps_low, 1 + eps_high]``.
      beta: weight of the per-token k3 KL to the reference (adapter off); 0 skips the
        reference forward pass entirely.
      adv_eps: added to the group std in the advantage denominator.
      adv_ddof: delta degrees of freedom of the group std (1 = unbiased, as TRL).
      adv_scale: ``"group"``, ``"batch"`` or ``"none"`` (TRL's ``scale_rewards``).
      dynamic_sampling: drop groups whose rewards are all equal (DAPO).
      learning_rate: peak AdamW learning rate of each agent.
      warmup_steps: linear warmup length, counted in the agent's own update steps.
      decay_steps: total schedule length (warmup included) of the cosine decay, per agent.
      end_lr_ratio: final learning rate as a fraction of the peak.
      weight_decay, adam_b1, adam_b2, adam_eps: AdamW settings (torch/HF defaults, with
        HF's zero weight decay).
      max_grad_norm: global-norm clipping threshold, per agent (each agent is its own model).
      micro_batches: gradient-accumulation steps per policy step. Besides bounding memory,
        on CPU a few micro-batches are faster than one: XLA allocates the step's scratch
        buffer (activations kept for the backward) afresh on every call, and faulting in
        new pages grows with the buffer (figures in ``benchmarks/HISTORY.md``).
      max_completion_length: ``dr_grpo``'s constant denominator; None = the padded length T.
      length_buckets: > 1 lets the step skip completion padding: rows are sorted by length
        and each micro-batch runs at the narrowest of this many widths
        (``ceil(j T / length_buckets)``) that holds its longest completion, or not at all
        when it holds only padding rows (``coevo_jax.rl.buckets``). The result is the
        same; the step compiles once per width. 1 = every micro-batch at the full width.
      remat: what the backward recomputes of each decoder block (``jax.checkpoint`` per
        block): ``true`` / ``"full"`` (default) keeps only each block's input, ``false`` /
        ``"none"`` keeps everything; ``"dots"`` / ``"dots_no_batch"`` are
        ``jax.checkpoint_policies``' dots_saveable / dots_with_no_batch_dims_saveable. The
        projections and attention are custom-VJP ops whose products those policies do not
        see, so they keep little more than the LoRA products (``benchmarks/HISTORY.md``).
        Same gradients under every choice (to fp32 rounding); memory and time differ.
      logprob_chunk: > 0 forms the LM head's fp32 logits this many completion positions at a
        time, each chunk recomputed in the backward (``rl.logprobs.token_logprobs``), so
        that ``[rows, logprob_chunk, V]`` rather than ``[rows, T, V]`` logits are live; 0 =
        all positions at once. Same result; used by the policy and reference passes.
      attention: ``"xla"`` (default: whole fp32 scores per query block,
        ``models.ops.attend``), ``"blockwise"`` (FlashAttention's schedule in XLA: one score
        tile at a time), ``"cudnn"`` (``jax.nn.dot_product_attention``'s cuDNN kernel, GPU
        and bf16 only) or ``"auto"`` (cuDNN on a GPU backend, else blockwise). Equal up to
        fp32 summation order on every real token.
      attention_block: tile edge (queries and keys) of ``"blockwise"`` attention: one fp32
        score tile is ``[rows, heads, attention_block, attention_block]``.
      compute_dtype: ``"bfloat16"`` or ``"float32"`` activation dtype (log-softmax is fp32).
      matmul_dtype: ``"bfloat16"``, ``"float32"`` or None (= ``compute_dtype``): operand
        dtype of the projection and LM-head matmuls, accumulated in fp32. The step casts
        the frozen backbone to it once per call. ``compute_dtype: float32`` with
        ``matmul_dtype: bfloat16`` is the fast CPU setting: XLA:CPU's bf16 GEMMs run at
        about twice its fp32 ones, while its bf16 elementwise and stacking ops are slower
        than fp32 (figures in ``benchmarks/HISTORY.md``).
      behavior_logprobs: what GSPO's "old" log-probs are. ``"auto"`` (default): a run
        (``coevo_jax.train.config.TrainConfig``) resolves it to ``"recompute"`` when its
        rollout engine is a server (``http``, ``vllm``) and to ``"engine"`` in process, whose
        log-probs are the trainer's own to ~1e-7; a policy step given ``"auto"`` directly
        reads it as ``"engine"``. Why recompute for a server: with one update per batch the
        two choices give the same gradient until the engine's numerics gap leaves the clip
        range, where ``"engine"`` silently drops the sequence and ``"recompute"`` keeps it
        with a weight near 1 (benchmarks/HISTORY.md has the vLLM measurement).
        ``"engine"``: the behaviour log-probs the rollout engine returned.
        ``"recompute"``: the trainer's own log-probs of the same tokens under the adapter
        it is about to update (each popped batch gets exactly one update, so that is the
        step's own forward pass, stop-gradient, its LoRA dropout included: the clipped ratio
        is 1), with the engine's log-probs entering only as a truncated importance weight
        per sequence, ``min(ratio, is_cap)``
        (``coevo_jax.rl.correction.truncated_is_weights``; verl's and TRL's rollout
        correction).
      is_cap: upper truncation of that importance weight (``"recompute"`` only).
      measure_gap: every round, recompute the behaviour log-probs of the round's samples
        and log the trainer/engine gap per agent (``coevo_jax.train.gap``); one extra
        forward pass over the round's samples.
    """

    level: str = "sequence"
    loss_type: str = "grpo"
    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 1e-4
    adv_eps: float = 1e-4
    adv_ddof: int = 1
    adv_scale: str = "group"
    dynamic_sampling: bool = True
    learning_rate: float = 3e-5
    warmup_steps: int = 600
    decay_steps: int = 6000
    end_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    micro_batches: int = 1
    max_completion_length: int | None = None
    length_buckets: int = 1
    remat: bool | str = True
    logprob_chunk: int = 0
    attention: str = "xla"
    attention_block: int = 512
    compute_dtype: str = "bfloat16"
    matmul_dtype: str | None = None
    behavior_logprobs: str = "auto"
    is_cap: float = 2.0
    measure_gap: bool = True

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        if self.adv_scale not in ("group", "batch", "none"):
            raise ValueError(f"adv_scale must be group, batch or none, got {self.adv_scale!r}")
        if not (0.0 <= self.eps_low < 1.0):
            raise ValueError(f"eps_low must be in [0, 1), got {self.eps_low}")
        if self.eps_high < 0.0:
            raise ValueError(f"eps_high must be >= 0, got {self.eps_high}")
        if self.beta < 0.0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.adv_ddof < 0:
            raise ValueError(f"adv_ddof must be >= 0, got {self.adv_ddof}")
        if self.learning_rate <= 0.0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"decay_steps ({self.decay_steps}) must exceed warmup_steps ({self.warmup_steps})"
            )
        if not 0.0 <= self.end_lr_ratio <= 1.0:
            raise ValueError(f"end_lr_ratio must be in [0, 1], got {self.end_lr_ratio}")
        if self.max_grad_norm <= 0.0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        if self.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {self.micro_batches}")
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(
                f"max_completion_length must be >= 1, got {self.max_completion_length}"
            )
        if self.length_buckets < 1:
            raise ValueError(f"length_buckets must be >= 1, got {self.length_buckets}")
        remat_name(self.remat)  # raises ValueError naming the choices
        if isinstance(self.logprob_chunk, bool) or self.logprob_chunk < 0:
            raise ValueError(f"logprob_chunk must be an int >= 0, got {self.logprob_chunk!r}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")
        if self.attention_block < 1:
            raise ValueError(f"attention_block must be >= 1, got {self.attention_block}")
        if self.compute_dtype not in ("bfloat16", "float32"):
            raise ValueError(
                f"compute_dtype must be bfloat16 or float32, got {self.compute_dtype!r}"
            )
        if self.matmul_dtype not in (None, "bfloat16", "float32"):
            raise ValueError(
                f"matmul_dtype must be bfloat16, float32 or null, got {self.matmul_dtype!r}"
            )
        if self.behavior_logprobs not in BEHAVIOR_LOGPROBS:
            raise ValueError(
                f"behavior_logprobs must be one of {BEHAVIOR_LOGPROBS}, "
                f"got {self.behavior_logprobs!r}"
            )
        if not self.is_cap >= 1.0:
            raise ValueError(f"is_cap must be >= 1 (1 = no upweighting), got {self.is_cap}")
