"""The pipeline's input type.

A :class:`Query` carries what a user sends and nothing else. The gold route of a benchmark
item is deliberately *not* a field here: the replay harness keeps gold labels in its own
structures, so no routing, gating or profiling code can read them (the FlyRoute paper: the gold route
"remains inaccessible to the routing and profiling pipeline").
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Query:
    """One incoming user query.

    Attributes:
      id: a stable identifier (used for provenance and by an injected verifier).
      text: the query text the agents, router and judge see.
    """

    id: str
    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Query.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.text, str):
            raise ValueError(
                f"Query {self.id}: text must be a string, got {type(self.text).__name__}"
            )
