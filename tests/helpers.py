"""Helpers shared across the test packages."""

from coevo_jax.models import ModelConfig

# The common tiny decoder: two layers, hidden 32, 4 query heads over 2 KV heads of width 8.
TINY_MODEL = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
)


def tiny_model_config(family: str = "llama", **overrides) -> ModelConfig:
    """A decoder config of ``family`` small enough for CPU unit tests.

    ``TINY_MODEL``'s fields, each replaced by ``overrides`` where given (any ``ModelConfig``
    field, e.g. ``vocab_size=97, eos_token_ids=(96,)``).
    """
    return ModelConfig(family=family, **(TINY_MODEL | overrides))


# The export and merge tests' decoders (tests/models/test_hf_export.py, tests/lora/test_merge.py):
# TINY_MODEL with vocabulary 61 and intermediate 48, one config per family, each with what
# sets its family apart.
FAMILY_MODEL = dict(vocab_size=61, intermediate_size=48)
FAMILY_TRAITS: dict[str, dict] = {
    "llama": {},
    "qwen3": dict(head_dim=16, tie_word_embeddings=True),  # head_dim != hidden/heads, as in Qwen3
    "phi3": dict(partial_rotary_factor=0.5),
}


def family_configs(**extra: dict) -> dict[str, ModelConfig]:
    """One tiny config per family in ``FAMILY_TRAITS`` (llama, qwen3, phi3, in that order).

    ``tiny_model_config(family)`` with ``FAMILY_MODEL``, the family's traits and then
    ``extra[family]`` (a test's own fields, e.g. ``llama=dict(eos_token_ids=(2,))``).
    """
    unknown = set(extra) - set(FAMILY_TRAITS)
    if unknown:
        raise ValueError(f"no tiny config for families {sorted(unknown)}")
    return {
        family: tiny_model_config(family, **(FAMILY_MODEL | traits | extra.get(family, {})))
        for family, traits in FAMILY_TRAITS.items()
    }
