"""The CERA-MoA closed loop (DESIGN §2, Algorithm 1 of seed 000).

One orchestration round:

1. draw ``B_global`` distinct queries (deterministic from the seed and the data cursor);
2. router features from a partial pass of the frozen backbone (``router.features``);
3. familiarity and 4. exploration-augmented cumulative-threshold routing (``router.route``);
5. ``G`` rollouts per (query, activated agent) through the engine, rewards from the verifiers
   (plus the DAPO soft overlong penalty when enabled);
6. groups onto each agent's LIFO buffer;
7. one jitted policy step for every agent whose buffer holds ``groups_per_step`` groups (all
   ready agents share one step: the adapters are stacked), then the new adapters are published;
8. a router step from the round's cross-agent advantages;
9. metrics, plots and, on schedule, an atomic checkpoint of the complete state.

Homogeneous setting (N adapters on one backbone). The per-agent generation entropy that feeds
the exploration bonus is estimated as the mean negative log-prob of the sampled tokens under
the sampling distribution, an unbiased estimate of that distribution's per-token entropy that
needs no extra forward pass (our reading; the seed does not say how it is measured).
"""

from __future__ import annotations

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

from coevo_jax._config import to_dict
from coevo_jax.lora import init_lora, unstack
from coevo_jax.rl.penalties import soft_overlong_penalty
from coevo_jax.rl.train_step import PolicyState, init_policy_state, make_policy_step
from coevo_jax.router import (
    feature_dim,
    init_router,
    pad_queries,
    record_entropy,
    route,
    router_step,
    update_counters,
)
from coevo_jax.router import features as router_features
from coevo_jax.train.batching import build_policy_batch
from coevo_jax.train.buffers import Group, LIFOBuffer
from coevo_jax.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.metrics import MetricsWriter
from coevo_jax.train.plots import FEATURES_FILE, plot_run
from rollout_bridge.engine import GenerationError, GenerationRequest

# (records, completions, agent_ids) -> one reward per completion
RewardFn = Callable[[Sequence[Any], Sequence[str], Sequence[int]], Sequence[float]]


@dataclasses.dataclass
class Backbone:
    """A frozen decoder: params pytree, ModelConfig, tokenizer."""

    params: Any
    cfg: Any
    tokenizer: Any


def load_backbone(spec) -> Backbone:
    """Loads ``ModelSpec`` ``spec`` (``default`` = the embedded SmolLM2 GGUF)."""
    from coevo_jax import models

    path = models.default_model_path() if spec.path == "default" else spec.path
    model, tokenizer = models.load(path, dtype=jnp.dtype(spec.dtype))
    if tokenizer is None:
        raise ValueError(f"{path}: no tokenizer found; the loop needs one to build prompts")
    return Backbone(model.params, model.config, tokenizer)


def load_records(cfg: TrainConfig, run_dir: Path) -> list[Any]:
    """The training records: ``data.path`` (a ``coevo data build`` directory or a JSONL file),
    else the ``data.mixture`` built into ``run_dir/data`` (once; reused on resume)."""
    from coevo_jax import data

    path = Path(cfg.data.path) if cfg.data.path else run_dir / "data"
    if cfg.data.path is None and not (path / "manifest.json").is_file():
        built = data.build_mixture(cfg.data.mixture, seed=cfg.loop.seed, progress=True)
        data.write_mixture(built, path)
    file = path / f"{cfg.data.split}.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such data file (data.path / data.split)")
    records = data.read_records(file)
    if not records:
        raise ValueError(f"{file}: no records")
    return records


def default_reward_fn(
    records: Sequence[Any], completions: Sequence[str], agent_ids: Sequence[int]
) -> list[float]:
    """The verifiers of DESIGN §5 (the agent does not matter to them)."""
    from coevo_jax.rewards import score_batch

    return list(score_batch(records, completions))


def _seed(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


class QueryStream:
    """Deterministic sampling of distinct queries: a fresh permutation per epoch.

    State is ``(epoch, position)``, saved in checkpoints as the data cursor.
    """

    def __init__(self, n: int, seed: int, epoch: int = 0, position: int = 0):
        if n < 1:
            raise ValueError("QueryStream needs at least one record")
        self.n, self.seed, self.epoch, self.position = n, seed, epoch, position

    def _perm(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def next(self, k: int) -> list[int]:
        k = min(k, self.n)
        out: list[int] = []
        while len(out) < k:
            perm = self._perm(self.epoch)
            while self.position < self.n and len(out) < k:
                idx = int(perm[self.position])
                self.position += 1
                if idx not in out:
                    out.append(idx)
            if self.position >= self.n:
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}


class Trainer:
    """Runs CERA-MoA rounds and owns every piece of state a checkpoint must hold.

    Args:
      cfg: the run config.
      run_dir: output directory (config, metrics, checkpoints, plots, adapters).
      backbone: a preloaded :class:`Backbone` (default: load ``cfg.model``).
      records: training records (default: ``cfg.data``).
      reward_fn: ``(records, completions, agent_ids) -> rewards`` (default: the verifiers).
      engine: a rollout engine (default: the in-process engine for ``inprocess``, the HTTP
        engine for ``http``).
      progress: show a progress bar.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        *,
        backbone: Backbone | None = None,
        records: Sequence[Any] | None = None,
        reward_fn: RewardFn | None = None,
        engine: Any = None,
        progress: bool = True,
    ):
        if cfg.setting != "homogeneous":
            raise NotImplementedError(
                "the heterogeneous setting (one backbone per agent) is validated by the config "
                "loader but the loop runs the homogeneous setting only so far"
            )
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.backbone = backbone or load_backbone(cfg.model)
        self.records = list(records) if records is not None else load_records(cfg, self.run_dir)
        self.reward_fn = reward_fn or default_reward_fn
        n = cfg.lora.n_agents
        key = jax.random.PRNGKey(cfg.loop.seed)
        lora = init_lora(jax.random.fold_in(key, 1), cfg.lora, self.backbone.params)
        self.policy: PolicyState = init_policy_state(lora, cfg.rl, jax.random.fold_in(key, 2))
        in_dim = feature_dim(self.backbone.cfg.hidden_size, cfg.router.feature_layers)
        self.router = init_router(cfg.router, in_dim, seed=cfg.loop.seed)
        self.buffers = [LIFOBuffer() for _ in range(n)]
        self.versions = [0] * n
        self.stream = QueryStream(len(self.records), cfg.loop.seed)
        self.round = 0
        self.step_fn = make_policy_step(self.backbone.cfg, cfg.rl, donate=True)
        self.engine = engine if engine is not None else self._make_engine()
        self._prompt_cache: dict[int, list[int]] = {}
        self._features_log: dict[str, list] = {"h": [], "agent": [], "cls": []}
        self.metrics = MetricsWriter(self.run_dir)
        (self.run_dir / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))

    # ---------------------------------------------------------------- setup helpers
    def _make_engine(self):
        tok = self.backbone.tokenizer
        if self.cfg.rollout.engine == "inprocess":
            from rollout_bridge.local_engine import InProcessEngine

            # The engine keeps its own copy: the policy step donates (and so frees) the state's.
            return InProcessEngine(
                self.backbone.params,
                self.backbone.cfg,
                jax.tree.map(jnp.copy, self.policy.lora),
                eos_ids=tok.eos_token_ids,
                pad_id=tok.pad_token_id,
            )
        from rollout_bridge.http_engine import HTTPEngine

        return HTTPEngine(
            self.cfg.rollout.urls[0],
            base_model=self.cfg.model.name,
            adapter_dir=self.cfg.rollout.adapter_dir or str(self.run_dir / "adapters"),
            eos_ids=tok.eos_token_ids,
        )

    def _prompt(self, idx: int) -> list[int]:
        if idx not in self._prompt_cache:
            from coevo_jax.data.templates import render_chat

            self._prompt_cache[idx] = render_chat(
                self.records[idx], self.backbone.tokenizer, self.cfg.data.max_input_tokens
            )
        return self._prompt_cache[idx]

    def publish_all(self) -> None:
        for i in range(self.cfg.lora.n_agents):
            self.engine.publish(i, unstack(self.policy.lora, i), self.versions[i])

    # ---------------------------------------------------------------- checkpointing
    def _arrays(self) -> dict[str, Any]:
        r = self.router
        return {
            "policy": self.policy,
            "router": {
                "params": r.params,
                "opt_state": r.opt_state,
                "counters": r.counters,
                "step": r.step,
            },
        }

    def save(self) -> Path:
        host = {
            "round": self.round,
            "versions": self.versions,
            "stream": self.stream.state(),
            "buffers": [b.state_dict() for b in self.buffers],
            "features_log": {
                k: [np.asarray(x).tolist() for x in v] for k, v in self._features_log.items()
            },
        }
        return save_checkpoint(
            self.run_dir / "checkpoints",
            self.round,
            self._arrays(),
            host,
            keep=self.cfg.loop.keep_checkpoints,
        )

    def restore(self, path: Path | None = None) -> bool:
        """Loads the newest checkpoint of ``run_dir`` (or ``path``); False when there is none."""
        path = path or latest_checkpoint(self.run_dir / "checkpoints")
        if path is None:
            return False
        arrays, host = load_checkpoint(path, self._arrays())
        self.policy = arrays["policy"]
        r = arrays["router"]
        self.router = self.router.replace(
            params=r["params"], opt_state=r["opt_state"], counters=r["counters"], step=r["step"]
        )
        self.round = int(host["round"])
        self.versions = [int(v) for v in host["versions"]]
        self.stream.epoch, self.stream.position = (
            host["stream"]["epoch"],
            host["stream"]["position"],
        )
        self.buffers = [LIFOBuffer.from_state_dict(b) for b in host["buffers"]]
        self._features_log = {k: list(v) for k, v in host["features_log"].items()}
        self.metrics.truncate_after(self.round)
        self.publish_all()
        return True

    # ---------------------------------------------------------------- one round
    def run_round(self) -> dict[str, Any]:
        cfg = self.cfg
        n_agents = cfg.lora.n_agents
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        idx = self.stream.next(cfg.loop.queries_per_round)
        recs = [self.records[i] for i in idx]
        prompts = [self._prompt(i) for i in idx]

        # 2-4: features, familiarity, routing
        ids, mask = pad_queries(
            prompts,
            max_len=cfg.router.max_prompt_tokens,
            pad_id=self.backbone.tokenizer.pad_token_id,
        )
        h = router_features(
            self.backbone.params,
            self.backbone.cfg,
            jnp.asarray(ids),
            jnp.asarray(mask),
            layers=cfg.router.feature_layers,
            max_len=cfg.router.max_prompt_tokens,
        )
        decision = route(self.router, h, train=True)
        active = np.asarray(decision.active)
        f = np.asarray(decision.f)
        timings["route_s"] = time.perf_counter() - t0

        # 5: generation
        t1 = time.perf_counter()
        requests = []
        for q, rec_idx in enumerate(idx):
            for i in np.flatnonzero(active[q]):
                requests.append(
                    GenerationRequest(
                        prompt_ids=tuple(prompts[q]),
                        agent_id=int(i),
                        n=cfg.rollout.group_size,
                        max_tokens=cfg.rollout.max_new_tokens,
                        temperature=cfg.rollout.temperature,
                        top_p=cfg.rollout.top_p,
                        seed=_seed(cfg.loop.seed, self.round, rec_idx, int(i)),
                        query_id=f"{self.round}:{q}:{int(i)}",
                    )
                )
        failures: list[str] = []
        try:
            trajs = self.engine.generate(requests)
        except GenerationError as e:  # dropped from the round and reported, never zero-rewarded
            trajs = e.trajectories
            failures = [fr.query_id for fr in e.failures]
        timings["generate_s"] = time.perf_counter() - t1

        # rewards
        t2 = time.perf_counter()
        by_pair: dict[tuple[int, int], list] = {}
        for t in trajs:
            _, q, i = t.query_id.split(":")
            by_pair.setdefault((int(q), int(i)), []).append(t)
        pairs = sorted(p for p, ts in by_pair.items() if len(ts) == cfg.rollout.group_size)
        failures += [
            f"{self.round}:{q}:{i}"
            for (q, i), ts in by_pair.items()
            if len(ts) != cfg.rollout.group_size
        ]
        flat = [(p, t) for p in pairs for t in sorted(by_pair[p], key=lambda t: t.sample_index)]
        tok = self.backbone.tokenizer
        texts = [tok.decode(list(t.completion_ids), skip_special_tokens=True) for _, t in flat]
        rewards = np.asarray(
            self.reward_fn([recs[p[0]] for p, _ in flat], texts, [p[1] for p, _ in flat]),
            np.float32,
        )
        if cfg.rollout.overlong_penalty:
            lengths = np.array([len(t.completion_ids) for _, t in flat])
            rewards = rewards + np.asarray(
                soft_overlong_penalty(
                    lengths, cfg.rollout.max_new_tokens, cfg.rollout.overlong_cache
                )
            )
        timings["reward_s"] = time.perf_counter() - t2

        # 6: buffers; rbar and entropy for the router
        g = cfg.rollout.group_size
        rbar = np.zeros((len(idx), n_agents), np.float32)
        served = np.zeros((len(idx), n_agents), bool)
        ent_sum = np.zeros(n_agents)
        ent_tok = np.zeros(n_agents)
        for k, p in enumerate(pairs):
            q, i = p
            ts = [t for _, t in flat[k * g : (k + 1) * g]]
            rs = rewards[k * g : (k + 1) * g]
            rbar[q, i] = float(rs.mean())
            served[q, i] = True
            for t in ts:
                ent_sum[i] -= float(np.sum(t.logprobs))
                ent_tok[i] += len(t.logprobs)
            self.buffers[i].push(
                [
                    Group(
                        agent_id=i,
                        query_id=str(recs[q].get("id", idx[q])),
                        prompt_ids=tuple(prompts[q]),
                        completions=tuple(t.completion_ids for t in ts),
                        logprobs=tuple(tuple(float(x) for x in t.logprobs) for t in ts),
                        rewards=tuple(float(r) for r in rs),
                        version=min(t.version for t in ts),
                    )
                ]
            )
        mean_ent = np.where(ent_tok > 0, ent_sum / np.maximum(ent_tok, 1), 0.0)
        self.router = record_entropy(
            self.router, jnp.asarray(mean_ent, jnp.float32), jnp.asarray(ent_tok, jnp.float32)
        )

        # 7: policy steps for ready agents (one jitted step for all of them)
        t3 = time.perf_counter()
        policy_metrics: dict[str, Any] = {}
        ready_groups: list[Group] = []
        stepped = []
        kept = []
        for i, buf in enumerate(self.buffers):
            buf.drop_stale(self.versions[i], cfg.rollout.max_staleness)
            rep = buf.pop(cfg.loop.groups_per_step, dynamic_sampling=cfg.rl.dynamic_sampling)
            if rep is not None:
                ready_groups += rep.groups
                stepped.append(i)
                kept.append(rep.kept_fraction)
        if (
            ready_groups
            and int(np.max(np.asarray(self.policy.agent_steps))) < cfg.loop.max_policy_steps
        ):
            batch, stats = build_policy_batch(
                ready_groups,
                cfg.rl,
                completion_len=cfg.rollout.max_new_tokens,
                pad_id=tok.pad_token_id,
            )
            self.policy, m = self.step_fn(self.policy, self.backbone.params, batch)
            m = jax.device_get(m)
            policy_metrics = {k: [float(x) for x in np.asarray(v)] for k, v in m.items()}
            policy_metrics["agents"] = stepped
            policy_metrics["kept_fraction"] = float(np.mean(kept))
            for i in stepped:
                self.versions[i] += 1
                self.engine.publish(i, unstack(self.policy.lora, i), self.versions[i])
        timings["policy_s"] = time.perf_counter() - t3

        # 8: router step on the activations actually served
        t4 = time.perf_counter()
        valid = served.any(axis=1)
        self.router, rm = router_step(self.router, h, jnp.asarray(rbar), jnp.asarray(served))
        self.router = update_counters(self.router, jnp.asarray(active), jnp.asarray(valid))
        timings["router_s"] = time.perf_counter() - t4
        timings["round_s"] = time.perf_counter() - t0

        # 9: metrics
        self.round += 1
        routed_agent = np.where(active, f, -1.0).argmax(axis=1)
        self._features_log["h"] += [np.asarray(x, np.float16).tolist() for x in np.asarray(h)]
        self._features_log["agent"] += [int(a) for a in routed_agent]
        self._features_log["cls"] += [str(r.get("class", "")) for r in recs]
        by_class: dict[str, list[float]] = {}
        for c in sorted({str(r.get("class", "")) for r in recs}):
            sel = [q for q, r in enumerate(recs) if str(r.get("class", "")) == c]
            by_class[c] = f[sel].mean(axis=0).tolist()
        sizes = active.sum(axis=1)
        agent_reward = [
            float(rbar[served[:, i], i].mean()) if served[:, i].any() else None
            for i in range(n_agents)
        ]
        record = {
            "round": self.round,
            "system_reward": float(rbar[served].mean()) if served.any() else 0.0,
            "agent_reward": agent_reward,
            "familiarity": {"mean": f.mean(axis=0).tolist(), "by_class": by_class},
            "activated": {
                "mean_per_query": float(sizes.mean()),
                "histogram": np.bincount(sizes, minlength=n_agents + 1)[1:].tolist(),
                "per_agent": active.sum(axis=0).tolist(),
            },
            "updates": [int(x) for x in np.asarray(self.policy.agent_steps)],
            "versions": list(self.versions),
            "tokens_generated": int(sum(len(t.completion_ids) for _, t in flat)),
            "entropy": mean_ent.tolist(),
            "buffers": [len(b) for b in self.buffers],
            "dropped_flat": [b.dropped_flat for b in self.buffers],
            "failures": failures,
            "policy": policy_metrics,
            "router": {k: float(v) for k, v in jax.device_get(rm).items() if np.ndim(v) == 0},
            "counters": {
                "T": int(self.router.counters.T),
                "n": np.asarray(self.router.counters.n).tolist(),
            },
            "timings": timings,
        }
        self.metrics.write(record)
        return record

    # ---------------------------------------------------------------- the run
    def write_features(self) -> None:
        log = self._features_log
        if log["h"]:
            np.savez(
                self.run_dir / FEATURES_FILE,
                h=np.asarray(log["h"], np.float16),
                agent=np.asarray(log["agent"], np.int32),
                cls=np.asarray(log["cls"]),
            )

    def run(self, rounds: int | None = None) -> list[dict[str, Any]]:
        """Runs until ``cfg.loop.rounds`` rounds are done (or ``rounds`` more); returns metrics."""
        total = self.cfg.loop.rounds if rounds is None else self.round + rounds
        loop = self.cfg.loop
        out = []
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=total, initial=self.round, desc="CERA-MoA", unit="round", dynamic_ncols=True
            )
        try:
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
                if loop.plot_every and self.round % loop.plot_every == 0:
                    self.write_features()
                    plot_run(self.run_dir)
                if int(np.max(np.asarray(self.policy.agent_steps))) >= loop.max_policy_steps:
                    break
        finally:
            if bar is not None:
                bar.close()
        self.save()
        self.write_features()
        plot_run(self.run_dir)
        return out

    def close(self) -> None:
        self.metrics.close()
        self.engine.close()
