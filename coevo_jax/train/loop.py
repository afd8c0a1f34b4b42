"""The CERA-MoA closed loop (docs/design.md §2, Algorithm 1 of the CERA-MoA paper).

One orchestration round:

1. draw ``B_global`` distinct queries (deterministic from the seed and the data cursor);
2. router features from a partial pass of the frozen router backbone (``router.features``);
3. familiarity and 4. exploration-augmented cumulative-threshold routing (``router.route``);
5. ``G`` rollouts per (query, activated agent) through each agent's engine; rewards from the
   verifiers (plus the DAPO soft overlong penalty when enabled);
6. groups onto each agent's LIFO buffer;
7. a jitted policy step for every agent whose buffer holds ``groups_per_step`` groups (agents
   that share a backbone share one step: their adapters are stacked), then the new adapters
   are published to the engines;
8. a router step from the round's cross-agent advantages;
9. metrics, plots and, on schedule, an atomic checkpoint of the complete state.

With an HTTP or vLLM engine and ``rollout.selfcheck``, each engine is checked against the
trainer's recompute (``coevo_jax.train.selfcheck``) when :meth:`Trainer.run` starts and after
every round that publishes adapters, so a serving bug stops the run (``EngineMismatch``)
instead of training on wrong behaviour log-probs.

Every ``loop.probe_every`` rounds, before the round, a fixed held-out probe set is routed and
answered in inference mode (``coevo_jax.train.probe``) and logged under ``probe``.

``loop.max_policy_steps`` is a per-agent budget: an agent that has spent it is routed no
more (the others meet the threshold), generates nothing and drops its buffer; the run ends
when every agent has spent it, or after ``loop.rounds``.

With a ``parallel`` mesh the policy step runs SPMD over every device of every process and
process 0 drives routing, generation and rewards (``coevo_jax.train.distributed``).

Homogeneous and heterogeneous settings run the same round over agent groups
(``coevo_jax.train.setup``). The per-agent generation entropy that feeds the exploration bonus
is estimated as the mean negative log-prob of the sampled tokens under the sampling
distribution, an unbiased estimate of that distribution's per-token entropy that needs no
extra forward pass (our reading; the CERA-MoA paper does not say how it is measured).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax import data
from coevo_jax._config import to_dict
from coevo_jax.data.templates import render_chat
from coevo_jax.rewards import score_batch
from coevo_jax.rl.penalties import soft_overlong_penalty
from coevo_jax.router import (
    RouterReplay,
    feature_dim,
    init_router,
    push_round,
    record_entropy,
    rewindow,
    route,
    router_step,
    select_agents,
    select_top_k,
    update_counters,
    with_feature_stats,
)
from coevo_jax.train import probe as probe_lib
from coevo_jax.train.batching import build_policy_batch
from coevo_jax.train.buffers import FeatureReservoir, Group, LIFOBuffer
from coevo_jax.train.checkpoint import (
    checkpoint_shapes,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.distributed import (
    broadcast_object,
    build_mesh,
    is_driver,
    place_batch,
    replicate,
    shard_group,
)
from coevo_jax.train.gap import group_gaps
from coevo_jax.train.memory import release_free_memory
from coevo_jax.train.metrics import MetricsWriter
from coevo_jax.train.plots import FEATURES_FILE, plot_run
from coevo_jax.train.selfcheck import check_engine
from coevo_jax.train.setup import (
    AgentGroup,
    Backbone,
    QueryStream,
    load_backbone,
    load_records,
    make_engine,
    make_groups,
    query_features,
    whitening_sample,
)
from rollout_bridge.engine import GenerationError, GenerationRequest

__all__ = ["Backbone", "QueryStream", "Trainer", "default_reward_fn"]

# (records, completions, agent_ids) -> one reward per completion
RewardFn = Callable[[Sequence[Any], Sequence[str], Sequence[int]], Sequence[float]]


def default_reward_fn(
    records: Sequence[Any], completions: Sequence[str], agent_ids: Sequence[int]
) -> list[float]:
    """The verifiers of docs/design.md §5 (the agent does not matter to them)."""
    return list(score_batch(records, completions))


def _seed(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


@contextlib.contextmanager
def _timed(timings: dict[str, float], key: str):
    """Adds the block's wall time to ``timings[key]`` (the round's ``timings`` metrics)."""
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


@dataclasses.dataclass(frozen=True)
class _Rollouts:
    """A round's complete groups: ``pairs[k]`` (query position, agent) owns the trajectories
    ``flat[k*G:(k+1)*G]`` (as ``(pair, trajectory)``) and the rewards at the same slice;
    ``failures`` names the (query, agent) requests that were dropped or came back short."""

    pairs: list[tuple[int, int]]
    flat: list
    rewards: np.ndarray
    failures: list[str]
    group_size: int

    def groups(self):
        """``(q, a, trajectories, rewards)`` per complete group, in ``pairs`` order."""
        g = self.group_size
        for k, (q, a) in enumerate(self.pairs):
            yield (
                q,
                a,
                [t for _, t in self.flat[k * g : (k + 1) * g]],
                self.rewards[k * g : (k + 1) * g],
            )


def _served_rewards(
    rollouts: _Rollouts, n_queries: int, n_agents: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(rbar, served)``, both ``[B, N]``: each served (query, agent)'s mean group reward and
    whether it served; the router step learns only from the served cells."""
    rbar = np.zeros((n_queries, n_agents), np.float32)
    served = np.zeros((n_queries, n_agents), bool)
    for q, a, _, rs in rollouts.groups():
        rbar[q, a] = float(rs.mean())
        served[q, a] = True
    return rbar, served


def _sampling_entropy(rollouts: _Rollouts, n_agents: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, tokens)``, both ``[N]``: each agent's mean negative log-prob over the tokens
    it sampled this round (an estimate of its per-token entropy that needs no extra forward
    pass; see the module docstring) and how many tokens that mean covers."""
    ent_sum = np.zeros(n_agents)
    ent_tok = np.zeros(n_agents)
    for _, a, ts, _ in rollouts.groups():
        for t in ts:
            ent_sum[a] -= float(np.sum(t.logprobs))
            ent_tok[a] += len(t.logprobs)
    return np.where(ent_tok > 0, ent_sum / np.maximum(ent_tok, 1), 0.0), ent_tok


def selfcheck_prompts(
    group: AgentGroup, records: Sequence[Any], max_input_tokens: int, n: int = 2, pool: int = 16
) -> list[list[int]]:
    """The ``n`` shortest of the first ``pool`` records' prompts, for the engine self-check.

    Short, because a server's LoRA prefill is the check's main cost (vLLM-CPU copies each
    token's adapter weights); the gap of every round's own rollouts covers real lengths.
    """
    prompts = [group.prompt(records, i, max_input_tokens) for i in range(min(pool, len(records)))]
    return sorted(prompts, key=len)[:n]


class Trainer:
    """Runs CERA-MoA rounds and owns every piece of state a checkpoint must hold.

    Args:
      cfg: the run config.
      run_dir: output directory (config, metrics, checkpoints, plots, adapters).
      backbone: the preloaded router backbone, which is also the agents' backbone in the
        homogeneous setting (default: load ``cfg.model``).
      agent_backbones: heterogeneous setting: one preloaded backbone per agent (default: load
        ``cfg.agent_models``).
      records: training records (default: ``cfg.data``).
      reward_fn: ``(records, completions, agent_ids) -> rewards`` (default: the verifiers).
      engines: one rollout engine per agent group (default: from ``cfg.rollout``).
      progress: show a progress bar.
      probe_records: the held-out records the probe samples when ``cfg.loop.probe_every``
        is set (default: ``cfg.loop.probe_split`` of the run's data directory).
      read_only: restore-and-serve mode for evaluation: ``run_dir`` is only read (no
        ``config.json`` rewrite, no metrics or TensorBoard writer, no metrics truncation on
        :meth:`restore`); ``records`` must be given (nothing is built into the run) and
        :meth:`run` / :meth:`save` refuse. With an ``http`` engine, point
        ``rollout.adapter_dir`` outside the run, since publishing writes adapters there.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        *,
        backbone: Backbone | None = None,
        agent_backbones: Sequence[Backbone] | None = None,
        records: Sequence[Any] | None = None,
        reward_fn: RewardFn | None = None,
        engines: Sequence[Any] | None = None,
        progress: bool = True,
        read_only: bool = False,
        probe_records: Sequence[Any] | None = None,
    ):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.read_only = read_only
        if read_only and records is None:
            raise ValueError("Trainer(read_only=True) needs records: it builds nothing in run_dir")
        if not read_only:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        if cfg.setting == "homogeneous":
            self.router_backbone = backbone or load_backbone(cfg.model)
            agent_bbs = [self.router_backbone]
        else:
            self.router_backbone = backbone or load_backbone(cfg.router_model or cfg.model)
            if agent_backbones is None:
                cache: dict[tuple, Backbone] = {}
                agent_backbones = []
                for spec in cfg.agent_models:
                    key = (spec.path, spec.dtype)
                    if key not in cache:
                        cache[key] = load_backbone(spec)
                    agent_backbones.append(cache[key])
            agent_bbs = list(agent_backbones)
        self.records = list(records) if records is not None else load_records(cfg, self.run_dir)
        self.reward_fn = reward_fn or default_reward_fn
        n = cfg.lora.n_agents
        self.groups: list[AgentGroup] = make_groups(cfg, agent_bbs, warn_dtype=not read_only)
        self.mesh = build_mesh(cfg.parallel)
        self.driver = is_driver()
        servers: dict = {}  # vllm engine: one started server per base model
        try:
            for k, g in enumerate(self.groups):
                if self.driver:
                    g.engine = (
                        engines[k]
                        if engines is not None
                        else make_engine(cfg, g, k, self.run_dir, servers=servers)
                    )
                if self.mesh is not None:  # after the engine took its own adapter copy
                    shard_group(g, self.mesh, cfg.rl)
        except BaseException:  # a later server failed to start: stop the ones already up
            for server in servers.values():
                server.stop()
            raise
        self.group_of = {a: g for g in self.groups for a in g.agents}
        in_dim = feature_dim(self.router_backbone.cfg.hidden_size, cfg.router.feature_layers)
        self.router = init_router(cfg.router, in_dim, seed=cfg.loop.seed)
        self.router_replay = (
            RouterReplay.empty(
                cfg.router.replay_rounds, cfg.loop.queries_per_round, in_dim, cfg.router.n_agents
            )
            if cfg.router.replay_rounds > 1
            else None
        )
        self.buffers = [LIFOBuffer(capacity=cfg.loop.buffer_limit) for _ in range(n)]
        self.versions = [0] * n
        self.stream = QueryStream(len(self.records), cfg.loop.seed)
        self.round = 0
        self._router_prompts: dict[int, list[int]] = {}
        self._features_log = FeatureReservoir(cfg.loop.feature_log_size, in_dim, seed=cfg.loop.seed)
        if cfg.router.feature_norm != "none":
            self.router = with_feature_stats(self.router, self._feature_sample())
        self.probe: probe_lib.ProbeSet | None = None
        if cfg.loop.probe_every and self.driver and not read_only:
            self.probe = probe_lib.ProbeSet.sample(
                probe_records if probe_records is not None else self._probe_records(),
                cfg.loop.probe_size,
                cfg.loop.seed,
            )
        self.metrics = MetricsWriter(self.run_dir) if self.driver and not read_only else None
        if self.driver and not read_only:
            (self.run_dir / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))

    # ---------------------------------------------------------------- helpers
    @property
    def backbone(self) -> Backbone:
        """The router backbone (the shared backbone in the homogeneous setting)."""
        return self.router_backbone

    def _router_prompt(self, idx: int) -> list[int]:
        if idx not in self._router_prompts:
            self._router_prompts[idx] = render_chat(
                self.records[idx], self.router_backbone.tokenizer, self.cfg.data.max_input_tokens
            )
        return self._router_prompts[idx]

    def _feature_sample(self, chunk: int = 32) -> jax.Array:
        """``[Q, D]`` router features of ``router.norm_queries`` training queries (a sample
        drawn with the run's seed, all of them when there are fewer): what the router's
        whitening statistics are taken over, before the first round."""
        idx = whitening_sample(len(self.records), self.cfg.router.norm_queries, self.cfg.loop.seed)
        return jnp.concatenate(
            [
                self.query_features([self._router_prompt(i) for i in idx[s : s + chunk]])
                for s in range(0, len(idx), chunk)
            ]
        )

    def _probe_records(self) -> list[Any]:
        path = Path(self.cfg.data.path) if self.cfg.data.path else self.run_dir / "data"
        file = path / f"{self.cfg.loop.probe_split}.jsonl"
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: loop.probe_every needs a held-out file (loop.probe_split) in the "
                f"data directory, or pass probe_records"
            )
        return data.read_records(file)

    def capped(self) -> np.ndarray:
        """``[N]`` bool: agents that have spent ``loop.max_policy_steps`` and left the pool."""
        return np.asarray(self.agent_steps()) >= self.cfg.loop.max_policy_steps

    def _route_uncapped(self, f: np.ndarray, s: np.ndarray, capped: np.ndarray) -> np.ndarray:
        """Training activation over the agents still in the pool: capped agents rank last with
        no familiarity, so the threshold (or top-k) is met by the others, and never serve."""
        rc = self.cfg.router
        f_m = jnp.asarray(np.where(capped, 0.0, f), jnp.float32)
        s_m = jnp.asarray(np.where(capped, -np.inf, s), jnp.float32)
        if rc.routing == "top_k":
            active = select_top_k(s_m, min(rc.top_k, int((~capped).sum())))
        else:
            active = select_agents(f_m, s_m, tau=rc.tau)
        return np.asarray(active) & ~capped

    def agent_steps(self) -> list[int]:
        steps = [0] * self.cfg.lora.n_agents
        for g in self.groups:
            for k, a in enumerate(g.agents):
                steps[a] = int(np.asarray(g.policy.agent_steps)[k])
        return steps

    def publish_all(self) -> None:
        for g in self.groups:
            for a in g.agents:
                g.publish(a, self.versions[a])

    def server_restarts(self) -> int:
        """Restarts of the servers this run's engines own (a crashed vLLM engine), so far."""
        return sum(int(getattr(g.engine, "server_restarts", 0) or 0) for g in self.groups)

    def selfcheck(self) -> dict[str, Any] | None:
        """Checks every group's engine against the trainer (``coevo_jax.train.selfcheck``).

        Runs when ``rollout.selfcheck`` is on and the engine is not the in-process one (whose
        log-probs are exact by construction). The prompts are the first two training
        records; each agent of the group and the base model sample two completions of 16
        tokens in one batch.

        Returns:
          ``{"groupK": {"base" | "<local agent>": gap summary}, "seconds": wall time}``,
          or None when nothing was checked.

        Raises:
          coevo_jax.train.selfcheck.EngineMismatch: a gap past
            ``rollout.selfcheck_tolerance``, naming the agent.
        """
        ro = self.cfg.rollout
        if not ro.selfcheck or ro.engine == "inprocess" or not self.driver:
            return None
        t0 = time.perf_counter()
        out: dict[str, Any] = {}
        for k, g in enumerate(self.groups):
            if g.engine is None:
                continue
            prompts = selfcheck_prompts(g, self.records, self.cfg.data.max_input_tokens)
            report = check_engine(
                g.engine,
                g.backbone.params,
                g.backbone.cfg,
                jax.device_get(g.policy.lora) if g.mesh is not None else g.policy.lora,
                prompts,
                n_per_agent=2,
                max_tokens=min(16, ro.max_new_tokens),
                temperature=ro.temperature,
                tolerance=ro.selfcheck_tolerance,
                rl_cfg=self.cfg.rl,
                pad_id=g.backbone.tokenizer.pad_token_id,
                seed=_seed(self.cfg.loop.seed, self.round, "selfcheck", k),
            )
            out[f"group{k}"] = report.metrics()
        out["seconds"] = time.perf_counter() - t0
        return out

    # ---------------------------------------------------------------- checkpointing
    def _arrays(self, feature_stats: bool = True) -> dict[str, Any]:
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

    def save(self) -> Path | None:
        """Checkpoints the complete state (process 0 only; the others return None)."""
        if self.read_only:
            raise RuntimeError(f"{self.run_dir}: opened read-only (evaluation); not saving")
        if not self.driver:
            return None
        feats = self.run_dir / "checkpoints" / f"features_{self.round:06d}.npz"
        host = {
            "round": self.round,
            "versions": self.versions,
            "stream": self.stream.state(),
            "buffers": [b.state_dict() for b in self.buffers],
            "features_log": {"file": feats.name, "seen": self._features_log.seen},
        }
        # The reservoir is an array file beside the checkpoints (never JSON), written before
        # the checkpoint that names it; files no kept checkpoint names are pruned after.
        root = self.run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        self._features_log.save(feats)
        path = save_checkpoint(
            root, self.round, self._arrays(), host, keep=self.cfg.loop.keep_checkpoints
        )
        kept = {f"features_{p.name.removeprefix('round_')}.npz" for p in root.glob("round_*")}
        for old in root.glob("features_*.npz"):
            if old.name not in kept:
                old.unlink(missing_ok=True)
        return path

    def _load_any_layout(self, path: Path) -> tuple[dict[str, Any], dict]:
        """Loads ``path`` under the run's own layout, else under the others a checkpoint of
        this run may have: without the whitening statistics (written before checkpoints held
        them: the ones this trainer took at start come from the same seeded sample of the
        same queries), and with or without a router window (taken under another
        ``router.update_steps``/``replay_rounds``; the window's shape is read from the
        checkpoint). Raises the own layout's error when none fits."""
        stats = [True] + ([False] if self.cfg.router.feature_norm != "none" else [])
        n_agents = self.cfg.router.n_agents

        def layouts():
            yield from (self._arrays(fs) for fs in stats)
            shapes = checkpoint_shapes(path)  # a second read, only off the common path
            for fs in stats:
                bare = {k: v for k, v in self._arrays(fs).items() if k != "router_replay"}
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

    def restore(self, path: Path | None = None) -> bool:
        """Loads the newest checkpoint of ``run_dir`` (or ``path``); False when there is none."""
        path = path or latest_checkpoint(self.run_dir / "checkpoints")
        if path is None:
            return False
        arrays, host = self._load_any_layout(path)
        for g, p in zip(self.groups, arrays["policies"], strict=True):
            g.policy = p if g.mesh is None else replicate(p, g.mesh)
        self.router = self.router.replace(**arrays["router"])
        saved = arrays.get("router_replay")
        if self.router_replay is not None and saved is not None:
            # the same length resumes as saved, ring layout and count, so the next rounds
            # fill the same slots as in the run that saved it
            same = saved.h.shape[0] == self.cfg.router.replay_rounds
            self.router_replay = saved if same else rewindow(saved, self.cfg.router.replay_rounds)
        # else: a window this config does not use is dropped, and a config that adds one
        # starts it empty
        self.round = int(host["round"])
        self.versions = [int(v) for v in host["versions"]]
        self.stream.epoch, self.stream.position = (
            host["stream"]["epoch"],
            host["stream"]["position"],
        )
        self.buffers = [
            LIFOBuffer.from_state_dict(b, capacity=self.cfg.loop.buffer_limit)
            for b in host["buffers"]
        ]
        feats = host["features_log"]
        if "file" in feats:
            self._features_log = FeatureReservoir.load(path.parent / feats["file"])
        else:  # a checkpoint from before the reservoir: replay its full log into one
            log = self._features_log
            for h, a, c in zip(feats["h"], feats["agent"], feats["cls"], strict=True):
                log.add(np.asarray([h], np.float32), np.asarray([a]), [c])
        if self.metrics is not None:
            self.metrics.truncate_after(self.round)
        self.publish_all()
        return True

    # ---------------------------------------------------------------- one round
    def _generate(self, idx: list[int], active: np.ndarray) -> tuple[list, list[str]]:
        """Step 5: G samples per (query, activated agent), through each agent's engine."""
        cfg = self.cfg
        trajs, failures = [], []
        for g in self.groups:
            requests = []
            for q, rec_idx in enumerate(idx):
                for a in g.agents:
                    if not active[q, a]:
                        continue
                    requests.append(
                        GenerationRequest(
                            prompt_ids=tuple(
                                g.prompt(self.records, rec_idx, cfg.data.max_input_tokens)
                            ),
                            agent_id=g.local(a),
                            n=cfg.rollout.group_size,
                            max_tokens=cfg.rollout.max_new_tokens,
                            temperature=cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p,
                            seed=_seed(cfg.loop.seed, self.round, rec_idx, a),
                            query_id=f"{self.round}:{q}:{a}",
                        )
                    )
            if not requests:
                continue
            try:
                trajs += g.engine.generate(requests)
            except GenerationError as e:  # dropped from the round and reported, never zero-rewarded
                trajs += e.trajectories
                failures += [fr.query_id for fr in e.failures]
        return trajs, failures

    def _policy_steps(self) -> dict[str, Any]:
        """Step 7: pop full micro-batches and step every group that has a ready agent."""
        cfg = self.cfg
        out: dict[str, Any] = {"agents": [], "kept_fraction": None, "per_agent": {}}
        kept = []
        steps = self.agent_steps()
        for g in self.groups:
            ready: list[Group] = []
            stepped = []
            for a in g.agents:
                buf = self.buffers[a]
                buf.drop_stale(self.versions[a], cfg.rollout.max_staleness)
                if steps[a] >= cfg.loop.max_policy_steps:
                    continue
                rep = buf.pop(cfg.loop.groups_per_step, dynamic_sampling=cfg.rl.dynamic_sampling)
                if rep is None:
                    continue
                ready += [dataclasses.replace(x, agent_id=g.local(a)) for x in rep.groups]
                stepped.append(a)
                kept.append(rep.kept_fraction)
            if not ready:
                continue
            batch, _ = build_policy_batch(
                ready,
                cfg.rl,
                completion_len=cfg.rollout.max_new_tokens,
                pad_id=g.backbone.tokenizer.pad_token_id,
            )
            if g.mesh is not None:
                batch = place_batch(batch, g.mesh)
            g.policy, m = g.step_fn(g.policy, g.step_params, batch)
            m = jax.device_get(m)
            new_steps = np.asarray(g.policy.agent_steps)
            for a in stepped:
                k = g.local(a)
                out["per_agent"][str(a)] = {name: float(np.asarray(v)[k]) for name, v in m.items()}
                self.versions[a] += 1
                g.publish(a, self.versions[a])
                if int(new_steps[k]) >= cfg.loop.max_policy_steps:
                    self.buffers[a].clear()  # it never steps again: nothing to keep or save
            out["agents"] += stepped
        if kept:
            out["kept_fraction"] = float(np.mean(kept))
        return out

    def _complete_groups(self, trajs: list) -> tuple[list, list, list[str]]:
        """``(pairs, flat, incomplete)``: sorted (query, agent) pairs with all G samples, their
        trajectories flattened in sample order, and the query ids of incomplete pairs."""
        g_size = self.cfg.rollout.group_size
        by_pair: dict[tuple[int, int], list] = {}
        for t in trajs:
            _, q, a = t.query_id.split(":")
            by_pair.setdefault((int(q), int(a)), []).append(t)
        pairs = sorted(p for p, ts in by_pair.items() if len(ts) == g_size)
        incomplete = [
            f"{self.round}:{q}:{a}" for (q, a), ts in by_pair.items() if len(ts) != g_size
        ]
        flat = [(p, t) for p in pairs for t in sorted(by_pair[p], key=lambda t: t.sample_index)]
        return pairs, flat, incomplete

    def _rewards(self, recs: list, flat: list) -> np.ndarray:
        """One reward per flattened trajectory (verifiers, plus the overlong penalty)."""
        cfg = self.cfg
        texts = [
            self.group_of[p[1]].backbone.tokenizer.decode(
                list(t.completion_ids), skip_special_tokens=True
            )
            for p, t in flat
        ]
        rewards = np.asarray(
            self.reward_fn([recs[p[0]] for p, _ in flat], texts, [p[1] for p, _ in flat]),
            np.float32,
        )
        if cfg.rollout.overlong_penalty and len(flat):
            lengths = np.array([len(t.completion_ids) for _, t in flat])
            rewards = rewards + np.asarray(
                soft_overlong_penalty(
                    lengths, cfg.rollout.max_new_tokens, cfg.rollout.overlong_cache
                )
            )
        return rewards

    def _logprob_gap(self, rollouts: _Rollouts) -> dict[str, dict[str, float]]:
        """Per agent that sampled this round: the engine's behaviour log-probs against the
        trainer's recompute of the same tokens (``train.gap``), keyed by agent id."""
        cfg = self.cfg
        g_size = cfg.rollout.group_size
        out: dict[str, dict[str, float]] = {}
        for g in self.groups:
            groups = []
            for q, a, ts, _ in rollouts.groups():
                if a not in g.agents:
                    continue
                groups.append(
                    Group(
                        agent_id=g.local(a),
                        query_id=str(q),
                        prompt_ids=tuple(ts[0].prompt_ids),
                        completions=tuple(t.completion_ids for t in ts),
                        logprobs=tuple(t.logprobs for t in ts),
                        rewards=(0.0,) * g_size,
                        version=0,
                    )
                )
            if not groups:
                continue
            gaps = group_gaps(
                groups,
                g.step_params,
                g.policy.lora,
                g.backbone.cfg,
                cfg.rl,
                completion_len=cfg.rollout.max_new_tokens,
                pad_id=g.backbone.tokenizer.pad_token_id,
                temperature=cfg.rollout.temperature,
                rows_per_batch=max(64, cfg.loop.groups_per_step * g_size * len(g.agents)),
                place=None if g.mesh is None else (lambda b, m=g.mesh: place_batch(b, m)),
            )
            out.update({str(g.agents[local]): v for local, v in gaps.items()})
        return out

    def _run_probe(self, timings: dict[str, float]) -> dict[str, Any] | None:
        """The held-out probe, when this round is due one (``loop.probe_every``): it runs
        before the round, so it measures the agents and router the previous round left."""
        cfg = self.cfg
        if self.probe is None or self.round % cfg.loop.probe_every != 0:
            return None
        with _timed(timings, "probe_s"):
            return {"after_rounds": self.round} | probe_lib.run_probe(
                self, self.probe,
                max_new_tokens=cfg.loop.probe_max_new_tokens or cfg.rollout.max_new_tokens,
            )  # fmt: skip

    def query_features(self, prompts: Sequence[Sequence[int]]) -> jax.Array:
        """``[B, D]`` router features of token-id prompts: the router backbone's partial
        pass with the run's feature layers and prompt limit. Training routes on these, so
        the probe (and any tool that routes records like training does) must use them too.
        """
        return query_features(self.router_backbone, self.cfg.router, prompts)

    def _route(self, idx: list[int]) -> tuple[jax.Array, np.ndarray, np.ndarray]:
        """Steps 2-4: ``(h, f, active)``, the router features ``[B, D]``, familiarity
        ``[B, N]`` and the training activation ``[B, N]`` (agents out of budget never serve)."""
        h = self.query_features([self._router_prompt(i) for i in idx])
        decision = route(self.router, h, train=True)
        active = np.asarray(decision.active)
        f = np.asarray(decision.f)
        capped = self.capped()
        if capped.any():
            active = self._route_uncapped(f, np.asarray(decision.s), capped)
        return h, f, active

    def _score(
        self, recs: list, active: np.ndarray, trajs: list, failures: list[str]
    ) -> tuple[np.ndarray, _Rollouts]:
        """Step 5, rewards: process 0 scores the complete groups, then every process takes
        process 0's activations, trajectories, failures and rewards, so the policy and router
        steps see one round everywhere. Returns ``(active, rollouts)``; incomplete groups are
        reported as failures, never trained on."""
        rewards = np.zeros(0, np.float32)
        if self.driver:
            _, flat, _ = self._complete_groups(trajs)
            rewards = self._rewards(recs, flat)
        if jax.process_count() > 1:
            active, trajs, failures, rewards = broadcast_object((active, trajs, failures, rewards))
        pairs, flat, incomplete = self._complete_groups(trajs)
        rollouts = _Rollouts(
            pairs, flat, rewards, failures + incomplete, self.cfg.rollout.group_size
        )
        return active, rollouts

    def _push_groups(self, idx: list[int], recs: list, rollouts: _Rollouts) -> None:
        """Step 6: each complete group onto its agent's LIFO buffer, stamped with the oldest
        adapter version that sampled it (what ``rollout.max_staleness`` is measured from)."""
        for q, a, ts, rs in rollouts.groups():
            self.buffers[a].push(
                [
                    Group(
                        agent_id=a,
                        query_id=str(recs[q].get("id", idx[q])),
                        prompt_ids=tuple(ts[0].prompt_ids),
                        completions=tuple(t.completion_ids for t in ts),
                        logprobs=tuple(tuple(float(x) for x in t.logprobs) for t in ts),
                        rewards=tuple(float(r) for r in rs),
                        version=min(t.version for t in ts),
                    )
                ]
            )

    def _record_entropy(self, rollouts: _Rollouts) -> np.ndarray:
        """Step 6: the round's per-agent generation entropy into the router's exploration
        bonus; returns the ``[N]`` means (0 for agents that generated nothing)."""
        mean_ent, ent_tok = _sampling_entropy(rollouts, self.cfg.lora.n_agents)
        self.router = record_entropy(
            self.router, jnp.asarray(mean_ent, jnp.float32), jnp.asarray(ent_tok, jnp.float32)
        )
        return mean_ent

    def _router_update(
        self, h: jax.Array, active: np.ndarray, rbar: np.ndarray, served: np.ndarray
    ) -> dict[str, Any]:
        """Step 8: ``router.update_steps`` router steps on the activations actually served
        (this round's, or the window of ``router.replay_rounds`` rounds), then the UCB
        counters (queries none of whose agents served a complete group do not count).
        Returns the first step's metrics: the loss before this round's updates."""
        valid = served.any(axis=1)
        rows = (h, jnp.asarray(rbar, jnp.float32), jnp.asarray(served))
        if self.router_replay is not None:
            self.router_replay = push_round(self.router_replay, *rows)
            rows = self.router_replay.flat()
        rm = None
        for _ in range(self.cfg.router.update_steps):
            self.router, metrics = router_step(self.router, *rows)
            rm = metrics if rm is None else rm
        self.router = update_counters(self.router, jnp.asarray(active), jnp.asarray(valid))
        return rm

    def _log_features(self, h: jax.Array, f: np.ndarray, active: np.ndarray, recs: list) -> None:
        """The round's router features into the reservoir behind the feature plots, labelled
        with the most familiar agent that served each query (-1: none)."""
        routed_agent = np.where(active, f, -1.0).argmax(axis=1)
        self._features_log.add(np.asarray(h), routed_agent, [str(r.get("class", "")) for r in recs])

    def _round_record(
        self,
        *,
        recs: list,
        f: np.ndarray,
        active: np.ndarray,
        rbar: np.ndarray,
        served: np.ndarray,
        rollouts: _Rollouts,
        mean_ent: np.ndarray,
        policy: dict[str, Any],
        gap: dict[str, Any] | None,
        selfcheck: dict[str, Any] | None,
        rm: dict[str, Any],
        timings: dict[str, float],
        probe: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Step 9: the round's ``metrics.jsonl`` row, which the plots (``train.plots``),
        TensorBoard and the progress bar read."""
        n_agents = self.cfg.lora.n_agents
        by_class = probe_lib.mean_by_label(f, [str(r.get("class", "")) for r in recs])
        sizes = active.sum(axis=1)
        record = {
            "round": self.round,
            "system_reward": float(rbar[served].mean()) if served.any() else 0.0,
            "agent_reward": [
                float(rbar[served[:, a], a].mean()) if served[:, a].any() else None
                for a in range(n_agents)
            ],
            "familiarity": {"mean": f.mean(axis=0).tolist(), "by_class": by_class},
            "activated": {
                "mean_per_query": float(sizes.mean()),
                "histogram": np.bincount(sizes, minlength=n_agents + 1)[1:].tolist(),
                "per_agent": active.sum(axis=0).tolist(),
            },
            "updates": self.agent_steps(),
            "versions": list(self.versions),
            "tokens_generated": int(sum(len(t.completion_ids) for _, t in rollouts.flat)),
            "entropy": mean_ent.tolist(),
            "buffers": [len(b) for b in self.buffers],
            "dropped_flat": [b.dropped_flat for b in self.buffers],
            "dropped_overflow": [b.dropped_overflow for b in self.buffers],
            "capped": self.capped().tolist(),
            "failures": rollouts.failures,
            "policy": policy,
            "gap": gap,
            "selfcheck": selfcheck,
            "server_restarts": self.server_restarts(),
            "router": {k: float(v) for k, v in jax.device_get(rm).items() if np.ndim(v) == 0},
            "counters": {
                "T": int(self.router.counters.T),
                "n": np.asarray(self.router.counters.n).tolist(),
            },
            "timings": timings,
        }
        if probe is not None:
            record["probe"] = probe
        return record

    def run_round(self) -> dict[str, Any]:
        """One orchestration round, steps 1-9 of the module docstring; returns its metrics
        row (also written to ``metrics.jsonl``). ``timings`` times each step; ``round_s``
        is the whole round without the probe."""
        cfg = self.cfg
        timings: dict[str, float] = {}
        probe = self._run_probe(timings)
        t0 = time.perf_counter()
        with _timed(timings, "route_s"):
            idx = self.stream.next(cfg.loop.queries_per_round)
            recs = [self.records[i] for i in idx]
            h, f, active = self._route(idx)
        with _timed(timings, "generate_s"):
            trajs, failures = self._generate(idx, active) if self.driver else ([], [])
        with _timed(timings, "reward_s"):
            active, rollouts = self._score(recs, active, trajs, failures)
        self._push_groups(idx, recs, rollouts)
        rbar, served = _served_rewards(rollouts, len(idx), cfg.lora.n_agents)
        mean_ent = self._record_entropy(rollouts)
        # the engine/trainer log-prob gap, under the adapters that sampled: before step 7
        with _timed(timings, "gap_s"):
            gap = self._logprob_gap(rollouts) if cfg.rl.measure_gap else None
        with _timed(timings, "policy_s"):
            policy = self._policy_steps()
        with _timed(timings, "selfcheck_s"):
            selfcheck = self.selfcheck() if policy["agents"] else None
        with _timed(timings, "router_s"):
            rm = self._router_update(h, active, rbar, served)
        timings["round_s"] = time.perf_counter() - t0

        self.round += 1
        self._log_features(h, f, active, recs)
        record = self._round_record(
            recs=recs, f=f, active=active, rbar=rbar, served=served, rollouts=rollouts,
            mean_ent=mean_ent, policy=policy, gap=gap, selfcheck=selfcheck, rm=rm,
            timings=timings, probe=probe,
        )  # fmt: skip
        if self.metrics is not None:
            self.metrics.write(record)
        release_free_memory()  # the round's freed buffers, held by malloc (train.memory)
        return record

    # ---------------------------------------------------------------- the run
    def write_features(self) -> None:
        """Writes the feature reservoir (bounded) to ``run_dir/router_features.npz``."""
        if len(self._features_log) and self.driver:
            self._features_log.save(self.run_dir / FEATURES_FILE)

    def run(self, rounds: int | None = None) -> list[dict[str, Any]]:
        """Runs until ``cfg.loop.rounds`` rounds are done (or ``rounds`` more); returns metrics."""
        if self.read_only:
            raise RuntimeError(f"{self.run_dir}: opened read-only (evaluation); not training")
        total = self.cfg.loop.rounds if rounds is None else self.round + rounds
        loop = self.cfg.loop
        out = []
        bar = None
        if self.progress and self.driver:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=total, initial=self.round, desc="CERA-MoA", unit="round", dynamic_ncols=True
            )
        try:
            if self.round < total:
                self.selfcheck()
            while self.round < total:
                m = self.run_round()
                out.append(m)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{m['system_reward']:.3f}",
                        active=f"{m['activated']['mean_per_query']:.2f}",
                        updates="/".join(str(u) for u in m["updates"]),
                    )
                if loop.checkpoint_every and self.round % loop.checkpoint_every == 0:
                    self.save()
                if loop.plot_every and self.round % loop.plot_every == 0 and self.driver:
                    self.write_features()
                    plot_run(self.run_dir)
                if self.capped().all():  # every agent has spent its own budget
                    break
        finally:
            if bar is not None:
                bar.close()
        self.save()
        if self.driver:
            self.write_features()
            plot_run(self.run_dir)
        return out

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        for g in self.groups:
            if g.engine is not None:
                g.engine.close()
