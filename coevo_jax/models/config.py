"""Decoder hyper-parameters, read from an HF ``config.json``.

One frozen dataclass covers the three supported families because they share one compute
graph: pre-norm RMSNorm blocks, GQA attention with RoPE, a SiLU-gated MLP. Their differences
are flags here (``family`` for Qwen3's per-head q/k norm; rotary fraction, rope scaling and
sliding window for Phi-3/Phi-4-mini). Fused checkpoint tensors are a loading concern and do
not appear in the config.

Both spellings of the rope settings are accepted: the transformers<5 one (``rope_theta`` and
``rope_scaling`` at top level, Phi's ``partial_rotary_factor`` and
``original_max_position_embeddings`` at top level) and the transformers>=5 one (everything in
``rope_parameters``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from coevo_jax._errors import UserError

FAMILIES = ("llama", "qwen3", "phi3")
ROPE_TYPES = ("default", "llama3", "longrope")

# model_type -> family. Architectures that share the layout but not every detail (Mistral's
# sliding window, Qwen2's biases) are deliberately absent: a silent near-match is worse than
# a clear error.
_MODEL_TYPES = {"llama": "llama", "qwen3": "qwen3", "phi3": "phi3"}
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
}


class UnsupportedModelError(UserError, ValueError):
    """The config describes an architecture or option this package does not implement."""


class ModelConfigError(UserError, ValueError):
    """A config (``config.json`` or GGUF metadata) with missing or inconsistent sizes: the
    user's model files, not a bug, so ``coevo`` reports it in one line."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and options of a decoder; hashable so it can be a static ``jit`` argument.

    Attributes:
      family: ``"llama" | "qwen3" | "phi3"``.
      vocab_size, hidden_size, intermediate_size: V, H, I.
      num_layers: L.
      num_heads, num_kv_heads: query heads nH and key/value heads nKV (GQA: nH % nKV == 0).
      head_dim: D per head (Qwen3 sets it explicitly; else H // nH).
      rms_norm_eps: epsilon of every RMSNorm.
      rope_theta: RoPE base.
      rope_type: ``"default" | "llama3" | "longrope"``.
      partial_rotary_factor: fraction of D that is rotated (Phi-3/Phi-4-mini use < 1).
      rope_factor, rope_low_freq_factor, rope_high_freq_factor: llama3 scaling.
      original_max_position_embeddings: pre-extension context (llama3, longrope).
      rope_short_factor, rope_long_factor: longrope per-frequency divisors, length rotary_dim/2.
      rope_attention_factor: longrope cos/sin multiplier; None derives it as transformers does.
      max_position_embeddings: the context length the config advertises.
      tie_word_embeddings: logits use ``embed.T``; there is no ``lm_head`` parameter.
      sliding_window: attend to at most this many most recent keys (Phi-3); None = full.
      eos_token_ids: from config.json, for callers that have no tokenizer.
    """

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    partial_rotary_factor: float = 1.0
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    rope_short_factor: tuple[float, ...] | None = None
    rope_long_factor: tuple[float, ...] | None = None
    rope_attention_factor: float | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise UnsupportedModelError(f"family must be one of {FAMILIES}, got {self.family!r}")
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ValueError(
                f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}"
            )
        if self.rotary_dim % 2:
            raise ValueError(
                f"rotary dim head_dim*partial_rotary_factor = {self.rotary_dim} must be even"
            )
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError("rms_norm_eps and rope_theta must be positive")
        if self.rope_type not in ROPE_TYPES:
            raise UnsupportedModelError(
                f"rope type {self.rope_type!r} is not supported; supported: {ROPE_TYPES}"
            )
        if self.rope_type in ("llama3", "longrope") and not self.original_max_position_embeddings:
            raise ValueError(f"rope type {self.rope_type!r} needs original_max_position_embeddings")
        if self.rope_type == "longrope":
            half = self.rotary_dim // 2
            for name in ("rope_short_factor", "rope_long_factor"):
                f = getattr(self, name)
                if f is None or len(f) != half:
                    raise ValueError(
                        f"longrope {name} must have rotary_dim/2 = {half} entries, got "
                        f"{None if f is None else len(f)}"
                    )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"sliding_window must be positive or None, got {self.sliding_window}")

    @property
    def rotary_dim(self) -> int:
        """Leading channels of each head that RoPE rotates (the rest pass through)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def qk_norm(self) -> bool:
        """Qwen3 RMS-normalises each query/key head before RoPE."""
        return self.family == "qwen3"

    @property
    def longrope_attention_factor(self) -> float:
        """cos/sin multiplier of longrope, derived as transformers does when not given."""
        if self.rope_attention_factor is not None:
            return self.rope_attention_factor
        orig = self.original_max_position_embeddings or self.max_position_embeddings
        factor = (
            self.rope_factor if self.rope_factor != 1.0 else self.max_position_embeddings / orig
        )
        if factor <= 1.0:
            return 1.0
        return math.sqrt(1.0 + math.log(factor) / math.log(orig))

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], *, source: str = "config.json") -> ModelConfig:
        """Builds the config from a parsed HF ``config.json``.

        Args:
          d: the parsed JSON.
          source: where ``d`` came from; every error message names it.

        Raises:
          UnsupportedModelError: unknown ``model_type``/architecture or an unsupported option
            (biases, sliding-window layer mixes, rope types other than default/llama3/longrope).
          ModelConfigError: missing or inconsistent sizes.
        """
        try:
            return _from_hf_dict(d)
        except UnsupportedModelError as e:
            raise UnsupportedModelError(f"{source}: {e}") from e
        except (KeyError, TypeError, ValueError) as e:
            detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            raise ModelConfigError(f"{source}: {detail}") from e


def _family_of(d: dict[str, Any]) -> str:
    mt = d.get("model_type")
    if mt in _MODEL_TYPES:
        return _MODEL_TYPES[mt]
    for arch in d.get("architectures") or ():
        if arch in _ARCHITECTURES:
            return _ARCHITECTURES[arch]
    raise UnsupportedModelError(
        f"unsupported model_type={mt!r} architectures={d.get('architectures')!r}; "
        f"supported model_type values: {sorted(_MODEL_TYPES)}"
    )


def _from_hf_dict(d: dict[str, Any]) -> ModelConfig:
    family = _family_of(d)
    if d.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"hidden_act={d['hidden_act']!r}; only 'silu' is implemented")
    for flag in ("attention_bias", "mlp_bias"):
        if d.get(flag):
            raise UnsupportedModelError(f"{flag}=true is not implemented")
    if family == "qwen3" and d.get("use_sliding_window"):
        raise UnsupportedModelError(
            "Qwen3 use_sliding_window=true (per-layer windows) is not implemented"
        )
    hidden = int(d["hidden_size"])
    heads = int(d["num_attention_heads"])
    head_dim = d.get("head_dim") or hidden // heads

    # transformers>=5 nests every rope field in rope_parameters; older files spread them out.
    rp = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
    rope_type = rp.get("rope_type", rp.get("type", "default")) or "default"
    if rope_type == "su":  # early Phi-3 name for longrope
        rope_type = "longrope"
    if rope_type not in ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope type {rope_type!r} is not supported; supported: {ROPE_TYPES}"
        )
    theta = rp.get("rope_theta", d.get("rope_theta", 10000.0))
    partial = rp.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))
    orig = rp.get("original_max_position_embeddings", d.get("original_max_position_embeddings"))
    max_pos = int(d.get("max_position_embeddings", 2048))
    if rope_type == "longrope" and orig is None:
        orig = max_pos

    eos = d.get("eos_token_id")
    eos_ids = tuple(
        int(e) for e in (eos if isinstance(eos, list) else [eos] if eos is not None else [])
    )
    tie = bool(d.get("tie_word_embeddings", False))  # the default of all three HF config classes

    short = rp.get("short_factor")
    long_ = rp.get("long_factor")
    return ModelConfig(
        family=family,
        vocab_size=int(d["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(d["intermediate_size"]),
        num_layers=int(d["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(d.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        rope_type=rope_type,
        partial_rotary_factor=float(partial),
        rope_factor=float(rp.get("factor") or 1.0),
        rope_low_freq_factor=float(rp.get("low_freq_factor", 1.0)),
        rope_high_freq_factor=float(rp.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=None if orig is None else int(orig),
        rope_short_factor=None if short is None else tuple(float(x) for x in short),
        rope_long_factor=None if long_ is None else tuple(float(x) for x in long_),
        rope_attention_factor=None
        if rp.get("attention_factor") is None
        else float(rp["attention_factor"]),
        max_position_embeddings=max_pos,
        tie_word_embeddings=bool(tie),
        sliding_window=(
            int(d["sliding_window"]) if family == "phi3" and d.get("sliding_window") else None
        ),
        eos_token_ids=eos_ids,
    )
