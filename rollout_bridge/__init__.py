"""Everything that talks to a rollout server: protocol, clients, adapter publishing, servers."""

from rollout_bridge.engine import (
    Engine,
    FailedRequest,
    GenerationError,
    GenerationRequest,
    Trajectory,
)

__all__ = ["Engine", "FailedRequest", "GenerationError", "GenerationRequest", "Trajectory"]
