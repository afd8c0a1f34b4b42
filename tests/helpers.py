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
