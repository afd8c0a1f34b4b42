"""coevo-jax: co-evolving LLM agents (CERA-MoA, EvoChamber, FlyRoute) in JAX/Flax."""

__version__ = "0.1.0"
