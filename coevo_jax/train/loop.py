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
(``coevo_jax.train.setup``). What is trained (backbones, router, groups, engines, and their
checkpointed arrays) is a ``coevo_jax.train.system.System``; the :class:`Trainer` owns one and
adds the loop's own state: buffers, the data cursor, the feature log, metrics and the probe.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from coevo_jax.rewards import score_batch
from coevo_jax.router import (
    activate,
    push_round,
    record_entropy,
    route,
    router_step,
    update_counters,
)
from coevo_jax.train import probe as probe_lib
from coevo_jax.train.batching import build_policy_batch
from coevo_jax.train.buffers import FeatureReservoir, Group, LIFOBuffer
from coevo_jax.train.checkpoint import latest_checkpoint, save_checkpoint
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.distributed import (
    broadcast_object,
    peer_guard,
    place_batch,
    to_host,
    under_mesh,
)
from coevo_jax.train.gap import round_gaps
from coevo_jax.train.memory import release_free_memory
from coevo_jax.train.metrics import MetricsWriter, round_record
from coevo_jax.train.pipeline import StartedRound, load_pending, save_pending
from coevo_jax.train.plots import FEATURES_FILE, plot_run
from coevo_jax.train.rollouts import (
    Rollouts,
    complete_groups,
    generation_requests,
    rollout_seed,
    sampling_entropy,
    score_flat,
    served_rewards,
)
from coevo_jax.train.selfcheck import check_system
from coevo_jax.train.setup import Backbone, QueryStream, load_records
from coevo_jax.train.system import System
from rollout_bridge.engine import GenerationError
from rollout_bridge.engines import engine_spec

__all__ = ["Backbone", "QueryStream", "Trainer", "default_reward_fn"]

# (records, completions, agent_ids) -> one reward per completion
RewardFn = Callable[[Sequence[Any], Sequence[str], Sequence[int]], Sequence[float]]


def default_reward_fn(
    records: Sequence[Any], completions: Sequence[str], agent_ids: Sequence[int]
) -> list[float]:
    """The verifiers of docs/design.md §5 (the agent does not matter to them)."""
    return list(score_batch(records, completions))


@contextlib.contextmanager
def _timed(timings: dict[str, float], key: str):
    """Adds the block's wall time to ``timings[key]`` (the round's ``timings`` metrics)."""
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


class Trainer:
    """Runs CERA-MoA rounds on a :class:`~coevo_jax.train.system.System` and owns every
    piece of state a checkpoint must hold.

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

    Attributes:
      system: the trained system (router, agent groups, engines).
      round: completed rounds.
      buffers, stream: the agents' LIFO buffers and the data cursor.
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
        probe_records: Sequence[Any] | None = None,
    ):
        self.cfg = cfg
        ro = cfg.rollout
        if jax.process_count() > 1 and ro.selfcheck and not engine_spec(ro.engine).exact_logprobs:
            # the check's recompute would run on process 0 alone, over a backbone that spans
            # every process's devices: it would wait for peers that never join
            raise ValueError(
                "rollout.selfcheck is not supported in a multi-process run yet; set "
                "rollout.selfcheck=false (the per-round log-prob gap, rl.measure_gap, still runs)"
            )
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.records = list(records) if records is not None else load_records(cfg, self.run_dir)
        self.reward_fn = reward_fn or default_reward_fn
        self.system = System(
            cfg,
            backbone=backbone,
            agent_backbones=agent_backbones,
            engines=engines,
            engine_dir=self.run_dir,
        )
        self.driver = self.system.driver
        n = cfg.lora.n_agents
        self.buffers = [LIFOBuffer(capacity=cfg.loop.buffer_limit) for _ in range(n)]
        self.stream = QueryStream(len(self.records), cfg.loop.seed)
        self.round = 0
        self._until = cfg.loop.rounds  # the round run() stops at: the last one starts nothing
        self._pending: StartedRound | None = None  # the next round, generating (async_rollouts)
        self._router_prompts: dict[int, list[int]] = {}
        self._features_log = FeatureReservoir(
            cfg.loop.feature_log_size, self.system.feature_dim, seed=cfg.loop.seed
        )
        if cfg.router.feature_norm != "none":
            self.system.whiten(self._feature_sample())
        self.probe: probe_lib.ProbeSet | None = None
        # every process routes the probe (its features are a program over the whole mesh);
        # process 0 alone generates, scores and logs it
        if cfg.loop.probe_every:
            self.probe = probe_lib.ProbeSet.sample(
                probe_records if probe_records is not None else self._probe_records(),
                cfg.loop.probe_size,
                cfg.loop.seed,
            )
        self.metrics = MetricsWriter(self.run_dir) if self.driver else None
        if self.driver:
            (self.run_dir / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))

    # ---------------------------------------------------------------- helpers
    def _router_prompt(self, idx: int) -> list[int]:
        if idx not in self._router_prompts:
            self._router_prompts[idx] = self.system.router_prompt(self.records[idx])
        return self._router_prompts[idx]

    def _feature_sample(self) -> jax.Array:
        """``[Q, D]`` router features of the training queries the router's whitening
        statistics are taken over (``System.feature_sample``), before the first round."""
        return self.system.feature_sample(self.records)

    def _probe_records(self) -> list[Any]:
        path = Path(self.cfg.data.path) if self.cfg.data.path else self.run_dir / "data"
        file = path / f"{self.cfg.loop.probe_split}.jsonl"
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: loop.probe_every needs a held-out file (loop.probe_split) in the "
                f"data directory, or pass probe_records"
            )
        return data.read_records(file)

    def selfcheck(self) -> dict[str, Any] | None:
        """The engine self-check (``train.selfcheck.check_system``) on the training records."""
        seed = lambda k: rollout_seed(self.cfg.loop.seed, self.round, "selfcheck", k)
        return check_system(self.system, self.records, seed=seed)

    # ---------------------------------------------------------------- checkpointing
    def save(self) -> Path:
        """Checkpoints the complete state. Every process of a multi-process run calls it (each
        writes its shards of the arrays); process 0 writes the host state and the files."""
        feats = self.run_dir / "checkpoints" / f"features_{self.round:06d}.npz"
        host = {
            "round": self.round,
            "versions": self.system.versions,
            "stream": self.stream.state(),
            "buffers": [b.state_dict() for b in self.buffers],
            "features_log": {"file": feats.name, "seen": self._features_log.seen},
            "pending": None,
        }
        # The reservoir is an array file beside the checkpoints (never JSON), written before
        # the checkpoint that names it; files no kept checkpoint names are pruned after.
        root = self.run_dir / "checkpoints"
        if self.driver:
            root.mkdir(parents=True, exist_ok=True)
            self._features_log.save(feats)
        if self._pending is not None:  # a round in flight: wait for it and keep its rollouts
            pending = root / f"pending_{self.round:06d}.pkl"
            h = to_host(self._pending.h)  # on every process: a collective on a mesh
            if self.driver:
                save_pending(pending, self._pending, h)
            host["pending"] = pending.name
        path = save_checkpoint(
            root, self.round, self.system.arrays(), host, keep=self.cfg.loop.keep_checkpoints
        )
        if not self.driver:
            return path
        rounds = [p.name.removeprefix("round_") for p in root.glob("round_*")]
        kept = {
            f"{kind}_{r}.{ext}"
            for r in rounds
            for kind, ext in (("features", "npz"), ("pending", "pkl"))
        }
        for old in [*root.glob("features_*.npz"), *root.glob("pending_*.pkl")]:
            if old.name not in kept:
                old.unlink(missing_ok=True)
        return path

    def restore(self, path: Path | None = None) -> bool:
        """Loads the newest checkpoint of ``run_dir`` (or ``path``); False when there is none."""
        path = path or latest_checkpoint(self.run_dir / "checkpoints")
        if path is None:
            return False
        host = self.system.restore(path)
        self.round = int(host["round"])
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
        self._pending = None
        if host.get("pending"):
            self._pending = load_pending(path.parent / host["pending"])
            self._pending.h = self.system.place_rows(self._pending.h)
        if self.metrics is not None:
            self.metrics.truncate_after(self.round)
        return True

    # ---------------------------------------------------------------- one round
    def _generate(
        self, idx: list[int], active: np.ndarray, round_idx: int
    ) -> tuple[list, list[str]]:
        """Step 5: G samples per (query, activated agent) of round ``round_idx``, through each
        agent's engine."""
        cfg = self.cfg
        trajs, failures = [], []
        for g in self.system.groups:
            requests = generation_requests(g, self.records, idx, active, cfg, round_idx)
            if not requests:
                continue
            try:
                trajs += g.engine.generate(requests)
            except GenerationError as e:  # dropped from the round and reported, never zero-rewarded
                trajs += e.trajectories
                failures += [fr.query_id for fr in e.failures]
        return trajs, failures

    def _policy_steps(self, publish: bool = True) -> dict[str, Any]:
        """Step 7: pop full micro-batches and step every group that has a ready agent; its new
        adapters are published at once, or (``publish=False``, a round generating) later by
        :meth:`_publish`. ``per_agent`` holds the step's metrics and ``staleness``: how many
        versions behind the oldest group it trained on was."""
        cfg = self.cfg
        system = self.system
        out: dict[str, Any] = {"agents": [], "kept_fraction": None, "per_agent": {}}
        kept = []
        stale: dict[int, int] = {}
        steps = system.agent_steps()
        for g in system.groups:
            ready: list[Group] = []
            stepped = []
            for a in g.agents:
                buf = self.buffers[a]
                buf.drop_stale(system.versions[a], cfg.rollout.max_staleness)
                if steps[a] >= cfg.loop.max_policy_steps:
                    continue
                rep = buf.pop(cfg.loop.groups_per_step, dynamic_sampling=cfg.rl.dynamic_sampling)
                if rep is None:
                    continue
                ready += [dataclasses.replace(x, agent_id=g.local(a)) for x in rep.groups]
                stale[a] = system.versions[a] - min(x.version for x in rep.groups)
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
            g.policy, m = g.step_fn(g.policy, g.backbone.params, batch)
            m = jax.device_get(m)
            new_steps = np.asarray(g.policy.agent_steps)
            for a in stepped:
                k = g.local(a)
                out["per_agent"][str(a)] = {name: float(np.asarray(v)[k]) for name, v in m.items()}
                out["per_agent"][str(a)]["staleness"] = stale[a]
                system.versions[a] += 1
                if publish:
                    g.publish(a, system.versions[a])
                if int(new_steps[k]) >= cfg.loop.max_policy_steps:
                    self.buffers[a].clear()  # it never steps again: nothing to keep or save
            out["agents"] += stepped
        if kept:
            out["kept_fraction"] = float(np.mean(kept))
        return out

    def _run_probe(self, timings: dict[str, float]) -> dict[str, Any] | None:
        """The held-out probe, when this round is due one (``loop.probe_every``): it runs
        before the round, so it measures the agents and router the previous round left."""
        cfg = self.cfg
        if self.probe is None or self.round % cfg.loop.probe_every != 0:
            return None
        with _timed(timings, "probe_s"):
            return {"after_rounds": self.round} | probe_lib.run_probe(
                self.system, self.probe, self.reward_fn,
                max_new_tokens=cfg.loop.probe_max_new_tokens or cfg.rollout.max_new_tokens,
            )  # fmt: skip

    def _route(self, idx: list[int]) -> tuple[jax.Array, np.ndarray, np.ndarray]:
        """Steps 2-4: ``(h, f, active)``, the router features ``[B, D]``, familiarity
        ``[B, N]`` and the training activation ``[B, N]`` (agents out of budget never serve)."""
        h = self.system.query_features([self._router_prompt(i) for i in idx])
        decision = route(self.system.router, h, train=True)
        active = decision.active
        capped = self.system.capped()
        if capped.any():
            rc = self.cfg.router
            active = activate(
                decision.f, decision.s, routing=rc.routing, tau=rc.tau, top_k=rc.top_k,
                excluded=capped,
            )  # fmt: skip
        return h, to_host(decision.f), to_host(active)

    def _score(
        self, recs: list, active: np.ndarray, trajs: list, failures: list[str], timings: dict
    ) -> tuple[np.ndarray, Rollouts]:
        """Step 5, rewards: process 0 scores the complete groups, then every process takes
        process 0's activations, trajectories, failures and rewards, so the policy and router
        steps see one round everywhere. Returns ``(active, rollouts)``; incomplete groups are
        reported as failures, never trained on."""
        g_size = self.cfg.rollout.group_size
        rewards = np.zeros(0, np.float32)
        if self.driver:
            _, flat, _ = complete_groups(trajs, g_size, self.round)
            rewards = score_flat(flat, recs, self.system.group_of, self.reward_fn, self.cfg)
        if jax.process_count() > 1:
            t0 = time.perf_counter()
            payload, timings["broadcast_bytes"] = broadcast_object(
                (active, trajs, failures, rewards)
            )
            active, trajs, failures, rewards = payload
            timings["broadcast_s"] = time.perf_counter() - t0
        pairs, flat, incomplete = complete_groups(trajs, g_size, self.round)
        return active, Rollouts(pairs, flat, rewards, failures + incomplete, g_size)

    def _record_entropy(self, rollouts: Rollouts) -> np.ndarray:
        """Step 6: the round's per-agent generation entropy into the router's exploration
        bonus; returns the ``[N]`` means (0 for agents that generated nothing)."""
        mean_ent, ent_tok = sampling_entropy(rollouts, self.cfg.lora.n_agents)
        self.system.router = record_entropy(
            self.system.router,
            jnp.asarray(mean_ent, jnp.float32),
            jnp.asarray(ent_tok, jnp.float32),
        )
        return mean_ent

    def _router_update(
        self, h: jax.Array, active: np.ndarray, rbar: np.ndarray, served: np.ndarray
    ) -> dict[str, Any]:
        """Step 8: ``router.update_steps`` router steps on the activations actually served
        (this round's, or the window of ``router.replay_rounds`` rounds), then the UCB
        counters (queries none of whose agents served a complete group do not count).
        Returns the first step's metrics: the loss before this round's updates."""
        system = self.system
        valid = served.any(axis=1)
        rows = (h, system.place_rows(rbar.astype(np.float32)), system.place_rows(served))
        with under_mesh(system.mesh):
            if system.router_replay is not None:
                system.router_replay = push_round(system.router_replay, *rows)
                rows = system.router_replay.flat()
            rm = None
            for _ in range(self.cfg.router.update_steps):
                system.router, metrics = router_step(system.router, *rows)
                rm = metrics if rm is None else rm
            system.router = update_counters(
                system.router, system.place_rows(active), system.place_rows(valid)
            )
        return rm

    def _log_features(self, h: jax.Array, f: np.ndarray, active: np.ndarray, recs: list) -> None:
        """The round's router features into the reservoir behind the feature plots, labelled
        with the most familiar agent that served each query (-1: none)."""
        routed_agent = np.where(active, f, -1.0).argmax(axis=1)
        self._features_log.add(to_host(h), routed_agent, [str(r.get("class", "")) for r in recs])

    def _start_round(self, round_idx: int, background: bool = False) -> StartedRound:
        """Steps 1-5 of round ``round_idx``: draw, route, and generate (on a background thread
        when ``background``; process 0 alone generates)."""
        t0 = time.perf_counter()
        idx = self.stream.next(self.cfg.loop.queries_per_round)
        h, f, active = self._route(idx)
        started = StartedRound(round_idx, idx, h, f, active, time.perf_counter() - t0)
        if self.driver:
            started.generate(lambda: self._generate(idx, active, round_idx), background)
        else:
            started.generate(lambda: ([], []), background=False)
        return started

    def _publish(self, agents: list[int]) -> None:
        for a in agents:
            self.system.group_of[a].publish(a, self.system.versions[a])

    def run_round(self) -> dict[str, Any]:
        """One orchestration round, steps 1-9 of the module docstring; returns its metrics
        row (also written to ``metrics.jsonl``). ``timings`` times each step; ``round_s``
        is the whole round without the probe."""
        cfg = self.cfg
        timings: dict[str, float] = {}
        probe = self._run_probe(timings)
        t0 = time.perf_counter()
        started, self._pending = self._pending or self._start_round(self.round), None
        idx, h, f, active = started.idx, started.h, started.f, started.active
        recs = [self.records[i] for i in idx]
        with _timed(timings, "generate_wait_s"):
            trajs, failures = started.wait()
        timings["route_s"], timings["generate_s"] = started.route_s, started.generate_s
        with _timed(timings, "reward_s"):
            active, rollouts = self._score(recs, active, trajs, failures, timings)
        # step 6: each complete group onto its agent's LIFO buffer
        qids = [str(r.get("id", i)) for r, i in zip(recs, idx, strict=True)]
        for grp in rollouts.buffer_groups(qids):
            self.buffers[grp.agent_id].push([grp])
        rbar, served = served_rewards(rollouts, len(idx), cfg.lora.n_agents)
        mean_ent = self._record_entropy(rollouts)
        # the engine/trainer log-prob gap, under the adapters that sampled: before step 7
        with _timed(timings, "gap_s"):
            gap = round_gaps(self.system.groups, rollouts, cfg) if cfg.rl.measure_gap else None
        # async_rollouts: the next round routes and starts generating now (train.pipeline)
        overlap = cfg.loop.async_rollouts and self.round + 1 < self._until
        if overlap:
            self._pending = self._start_round(self.round + 1, background=True)
        with _timed(timings, "policy_s"):
            policy = self._policy_steps(publish=not overlap)
        with _timed(timings, "router_s"):
            rm = self._router_update(h, active, rbar, served)
        if overlap:  # the new adapters go out once the next round has sampled
            with _timed(timings, "overlap_wait_s"):
                self._pending.wait()
            self._publish(policy["agents"])
        with _timed(timings, "selfcheck_s"):
            selfcheck = self.selfcheck() if policy["agents"] else None
        timings["round_s"] = time.perf_counter() - t0

        self.round += 1
        self._log_features(h, f, active, recs)
        record = round_record(
            self.round, self.system, self.buffers,
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
        total = self.cfg.loop.rounds if rounds is None else self.round + rounds
        self._until = total
        out: list[dict[str, Any]] = []
        bar = None
        if self.progress and self.driver:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=total, initial=self.round, desc="CERA-MoA", unit="round", dynamic_ncols=True
            )
        try:
            with peer_guard():
                self._run_until(total, bar, out)
        finally:
            if bar is not None:
                bar.close()
        with peer_guard():
            self.save()
        if self.driver:
            self.write_features()
            plot_run(self.run_dir)
        return out

    def _run_until(self, total: int, bar: Any, out: list) -> None:
        """Rounds until ``total`` (or every agent's budget is spent), with the scheduled
        checkpoints and plots; each round's metrics row is appended to ``out``."""
        loop = self.cfg.loop
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
            if self.system.capped().all():  # every agent has spent its own budget
                break

    def close(self) -> None:
        if self._pending is not None:  # a round still generating must not outlive its engine
            try:
                self._pending.wait()
            except Exception:  # noqa: BLE001 - closing after a failure; the run already raised
                pass
        if self.metrics is not None:
            self.metrics.close()
        self.system.close()
