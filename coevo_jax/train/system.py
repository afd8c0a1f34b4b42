"""The trained system of a CERA-MoA run: backbones, router, agent groups and their engines.

A :class:`System` is what a run *is*, apart from how it is being trained: the frozen
backbones, the router state (heads, optimizer, counters, whitening statistics, replay window),
each agent group's stacked adapters with their optimizer state and rollout engine, and the
adapter versions those engines hold. Evaluation, the probe and the benchmarks work on a
System restored from a checkpoint; the training loop (``coevo_jax.train.loop.Trainer``) owns
one and adds what only training needs (buffers, the data cursor, metrics). A System never
writes a run directory by itself, so opening one to evaluate cannot change the run.

Checkpoints hold the System's arrays (:meth:`System.arrays`) beside the loop's host state;
:meth:`System.load` reads any layout a checkpoint of the same config may have.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax.data.templates import render_chat
from coevo_jax.router import (
    RouterReplay,
    feature_dim,
    init_router,
    rewindow,
    with_feature_stats,
)
from coevo_jax.train.checkpoint import checkpoint_shapes, load_checkpoint
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.distributed import (
    build_mesh,
    is_driver,
    place_batch,
    replicate,
    shard_backbone,
    shard_group,
    shard_router,
    under_mesh,
)
from coevo_jax.train.setup import (
    AgentGroup,
    Backbone,
    load_backbone,
    make_engine,
    make_groups,
    query_features,
    whitening_sample,
)

__all__ = ["System"]


def _agent_backbones(cfg: TrainConfig, router_backbone: Backbone) -> list[Backbone]:
    """One backbone per agent group, loading each distinct (path, dtype) once."""
    if cfg.setting == "homogeneous":
        return [router_backbone]
    cache: dict[tuple, Backbone] = {}
    out = []
    for spec in cfg.agent_models:
        key = (spec.path, spec.dtype)
        if key not in cache:
            cache[key] = load_backbone(spec)
        out.append(cache[key])
    return out


class System:
    """Backbones, router and agent groups (with engines) of one run, and their checkpoints.

    Args:
      cfg: the run config.
      backbone: the preloaded router backbone, which is also the agents' backbone in the
        homogeneous setting (default: load ``cfg.model``).
      agent_backbones: heterogeneous setting: one preloaded backbone per agent (default: load
        ``cfg.agent_models``).
      engines: one rollout engine per agent group (default: from ``cfg.rollout``).
      engine_dir: the directory an engine built from ``cfg.rollout`` writes into (adapter
        files and server logs, unless ``rollout.adapter_dir`` is set): the run directory.
      warn_dtype: warn when the policy step would multiply in bf16 on a CPU without native
        bf16 dot products (a system that will train; evaluation passes False).

    Attributes:
      router_backbone, groups, group_of (agent -> its group), mesh (None without a
      ``parallel`` mesh), driver (this process routes, generates and writes), router,
      router_replay (None unless ``router.replay_rounds > 1``), versions (``[N]`` adapter
      version each engine holds), feature_dim (``D`` of the router features), whitened
      (the router's whitening statistics were taken or restored).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        backbone: Backbone | None = None,
        agent_backbones: Sequence[Backbone] | None = None,
        engines: Sequence[Any] | None = None,
        engine_dir: str | Path = ".",
        warn_dtype: bool = True,
    ):
        self.cfg = cfg
        spec = cfg.model if cfg.setting == "homogeneous" else (cfg.router_model or cfg.model)
        self.router_backbone = backbone or load_backbone(spec)
        bbs = (
            list(agent_backbones)
            if agent_backbones is not None
            else _agent_backbones(cfg, self.router_backbone)
        )
        self.groups: list[AgentGroup] = make_groups(cfg, bbs, warn_dtype=warn_dtype)
        self.mesh = build_mesh(cfg.parallel)
        self.driver = is_driver()
        # The engines read the backbone they are built with. Sharded first, one process's
        # engines sample on the mesh's single copy; in a multi-process run the in-process
        # engine samples on process 0 alone, so it keeps the process-local weights.
        local_engines = jax.process_count() > 1
        if self.mesh is not None and not local_engines:
            self._shard()
        servers: dict = {}  # vllm engine: one started server per base model
        try:
            for k, g in enumerate(self.groups):
                if self.driver:
                    g.engine = (
                        engines[k]
                        if engines is not None
                        else make_engine(cfg, g, k, Path(engine_dir), servers=servers)
                    )
        except BaseException:  # a later server failed to start: stop the ones already up
            for server in servers.values():
                server.stop()
            raise
        if self.mesh is not None and local_engines:
            self._shard()
        self.group_of = {a: g for g in self.groups for a in g.agents}
        in_dim = feature_dim(self.router_backbone.cfg.hidden_size, cfg.router.feature_layers)
        self.feature_dim = in_dim
        self.router = init_router(cfg.router, in_dim, seed=cfg.loop.seed)
        self.router_replay = (
            RouterReplay.empty(
                cfg.router.replay_rounds, cfg.loop.queries_per_round, in_dim, cfg.router.n_agents
            )
            if cfg.router.replay_rounds > 1
            else None
        )
        if self.mesh is not None:
            self.router = shard_router(self.router, self.mesh)
            if self.router_replay is not None:
                self.router_replay = replicate(self.router_replay, self.mesh)
        self.versions = [0] * cfg.lora.n_agents
        self.whitened = False

    def _shard(self) -> None:
        """Backbones sharded on the mesh, policy states replicated, policy steps under it."""
        shard_backbone(self.router_backbone, self.mesh)
        for g in self.groups:
            shard_group(g, self.mesh, self.cfg.rl)

    @property
    def backbone(self) -> Backbone:
        """The router backbone (the shared backbone in the homogeneous setting)."""
        return self.router_backbone

    # ---------------------------------------------------------------- router inputs
    def query_features(self, prompts: Sequence[Sequence[int]]) -> jax.Array:
        """``[B, D]`` router features of token-id prompts: the router backbone's partial
        pass with the run's feature layers and prompt limit. Training routes on these, so
        the probe (and any tool that routes records like training does) must use them too.
        """
        if self.mesh is None:
            return query_features(self.router_backbone, self.cfg.router, prompts)
        with under_mesh(self.mesh):
            return query_features(
                self.router_backbone, self.cfg.router, prompts, place=self.place_rows
            )

    def place_rows(self, x: Any) -> Any:
        """A host array (or pytree) with a leading batch axis, split over the mesh's batch
        axes (as a device array without a mesh)."""
        return jax.tree.map(jnp.asarray, x) if self.mesh is None else place_batch(x, self.mesh)

    def router_prompt(self, record: Any) -> list[int]:
        """``record``'s prompt as the router backbone reads it."""
        return render_chat(record, self.router_backbone.tokenizer, self.cfg.data.max_input_tokens)

    def feature_sample(self, records: Sequence[Any], chunk: int = 32) -> jax.Array:
        """``[Q, D]`` router features of ``router.norm_queries`` of ``records`` (a sample
        drawn with the run's seed, all of them when there are fewer): what the router's
        whitening statistics are taken over, before the first round."""
        idx = whitening_sample(len(records), self.cfg.router.norm_queries, self.cfg.loop.seed)
        return jnp.concatenate(
            [
                self.query_features([self.router_prompt(records[i]) for i in idx[s : s + chunk]])
                for s in range(0, len(idx), chunk)
            ]
        )

    def whiten(self, h: jax.Array) -> None:
        """Sets the router's whitening statistics from features ``h [Q, D]`` (when
        ``router.feature_norm`` asks for them)."""
        if self.cfg.router.feature_norm != "none":
            self.router = with_feature_stats(self.router, h)
            self.whitened = True

    # ---------------------------------------------------------------- agents
    def agent_steps(self) -> list[int]:
        """``[N]`` policy updates each agent has taken."""
        steps = [0] * self.cfg.lora.n_agents
        for g in self.groups:
            for k, a in enumerate(g.agents):
                steps[a] = int(np.asarray(g.policy.agent_steps)[k])
        return steps

    def capped(self) -> np.ndarray:
        """``[N]`` bool: agents that have spent ``loop.max_policy_steps`` and left the pool."""
        return np.asarray(self.agent_steps()) >= self.cfg.loop.max_policy_steps

    def publish_all(self) -> None:
        """Every agent's adapter into its engine, at its current version."""
        for g in self.groups:
            for a in g.agents:
                g.publish(a, self.versions[a])

    def server_restarts(self) -> int:
        """Restarts of the servers this system's engines own (a crashed vLLM engine), so far."""
        return sum(int(getattr(g.engine, "server_restarts", 0) or 0) for g in self.groups)

    # ---------------------------------------------------------------- checkpoints
    def arrays(self, feature_stats: bool = True) -> dict[str, Any]:
        """The array state a checkpoint holds: policies, router, and the replay window."""
        r = self.router
        feature_stats = feature_stats and self.cfg.router.feature_norm != "none"
        return {
            "policies": [g.policy for g in self.groups],
            "router": {
                "params": r.params,
                "opt_state": r.opt_state,
                "counters": r.counters,
                "step": r.step,
                # only where used, so checkpoints of runs without whitening keep their layout
                **(
                    {"feature_shift": r.feature_shift, "feature_scale": r.feature_scale}
                    if feature_stats
                    else {}
                ),
            },
            **({"router_replay": self.router_replay} if self.router_replay is not None else {}),
        }

    def load(self, path: Path) -> tuple[dict[str, Any], dict]:
        """``(arrays, host)`` of checkpoint ``path``, under this config's own layout, else
        under the others a checkpoint of this run may have: without the whitening statistics
        (written before checkpoints held them), and with or without a router window (taken
        under another ``router.update_steps``/``replay_rounds``; the window's shape is read
        from the checkpoint). Raises the own layout's error when none fits."""
        stats = [True] + ([False] if self.cfg.router.feature_norm != "none" else [])
        n_agents = self.cfg.router.n_agents

        def layouts():
            yield from (self.arrays(fs) for fs in stats)
            shapes = checkpoint_shapes(path)  # a second read, only off the common path
            for fs in stats:
                bare = {k: v for k, v in self.arrays(fs).items() if k != "router_replay"}
                yield bare
                n = len(jax.tree.leaves(bare))
                # the window's leaves sort after the router's: h, rbar, served, rounds
                if len(shapes) == n + 4 and len(shapes[n]) == 3:
                    r, b, in_dim = shapes[n]
                    yield {**bare, "router_replay": RouterReplay.empty(r, b, in_dim, n_agents)}

        first = None
        for template in layouts():
            try:
                return load_checkpoint(path, template)
            except ValueError as err:
                first = first or err
        raise first

    def restore(self, path: Path) -> dict:
        """Loads checkpoint ``path`` into this system, republishes every adapter at its saved
        version, and returns the checkpoint's host state (the loop's part: round, buffers,
        data cursor...). A checkpoint without whitening statistics keeps the current ones."""
        arrays, host = self.load(path)
        for g, p in zip(self.groups, arrays["policies"], strict=True):
            g.policy = p if g.mesh is None else replicate(p, g.mesh)
        self.router = self.router.replace(**arrays["router"])
        self.whitened = self.whitened or "feature_shift" in arrays["router"]
        if self.mesh is not None:
            self.router = shard_router(self.router, self.mesh)
        saved = arrays.get("router_replay")
        if self.router_replay is not None and saved is not None:
            # the same length resumes as saved, ring layout and count, so the next rounds
            # fill the same slots as in the run that saved it
            same = saved.h.shape[0] == self.cfg.router.replay_rounds
            self.router_replay = saved if same else rewindow(saved, self.cfg.router.replay_rounds)
            if self.mesh is not None:
                self.router_replay = replicate(self.router_replay, self.mesh)
        # else: a window this config does not use is dropped, and a config that adds one
        # starts it empty
        self.versions = [int(v) for v in host["versions"]]
        self.publish_all()
        return host

    def close(self) -> None:
        """Closes every engine (and stops the servers they own)."""
        for g in self.groups:
            if g.engine is not None:
                g.engine.close()
