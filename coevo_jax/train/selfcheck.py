"""An engine self-check: do the engine's behaviour log-probs match the trainer's recompute?

A serving bug shows up as a log-prob gap between what the engine reports for the tokens it
sampled and what the trainer computes for the same tokens under the same adapter. The
known case (``RECIPES.md``, "Hazard 1"): a vLLM server started with ``--max-loras N`` for
N agents serves base-model rows with an adapter when every LoRA slot is taken in one
batch, so base rows mixed with LoRA rows come back with about 5x the agents' gap.
:func:`check_engine` therefore sends every agent *and* the base model in one ``generate``
call, so they share engine batches, and raises :class:`EngineMismatch` naming each agent
past tolerance.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax

from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models import ModelConfig
from coevo_jax.rl.config import RLConfig
from coevo_jax.train.buffers import Group
from coevo_jax.train.gap import group_gaps
from rollout_bridge.engine import GenerationRequest
from rollout_bridge.engines import engine_spec

BASE = -1  # the agent id of the base model (adapter off)


class EngineMismatch(RuntimeError):
    """The engine's log-probs disagree with the trainer's past tolerance for some agents.

    Attributes:
      report: the full :class:`SelfCheckReport`.
      failed: the agent ids past tolerance (-1 = the base model).
    """

    def __init__(self, report: SelfCheckReport):
        self.report = report
        self.failed = report.failed
        parts = [
            f"{_name(a)}: {report.gaps[a]['token_abs']:.4f} nats/token "
            f"(worst sequence {report.gaps[a]['seq_absmax']:.4f})"
            for a in self.failed
        ]
        ok = [
            f"{_name(a)} {g['token_abs']:.4f}"
            for a, g in report.gaps.items()
            if a not in self.failed
        ]
        super().__init__(
            "engine log-probs disagree with the trainer's recompute past tolerance "
            f"{report.tolerance} nats/token for "
            + "; ".join(parts)
            + (f" (within tolerance: {', '.join(ok)})" if ok else "")
            + ". Base rows served with an adapter (vLLM with every LoRA slot taken: start it "
            "with --max-loras of at least agents + 1) or adapters not (re)loaded are the "
            "usual causes."
        )


@dataclasses.dataclass(frozen=True)
class SelfCheckReport:
    """What :func:`check_engine` measured.

    Attributes:
      gaps: ``{agent_id: coevo_jax.rl.correction.logprob_gap summary}`` (-1 = base model);
        ``token_abs`` is the mean |delta log p| per token the tolerance applies to.
      tolerance: the tolerance checked against.
      requests: requests sent (in one ``generate`` call).
      seconds: wall time of the ``generate`` call.
    """

    gaps: dict[int, dict[str, float]]
    tolerance: float
    requests: int
    seconds: float

    @property
    def failed(self) -> list[int]:
        return [a for a, g in self.gaps.items() if not g["token_abs"] <= self.tolerance]

    def metrics(self) -> dict[str, dict[str, float]]:
        """The gaps keyed ``"base"`` / ``"0"``, ``"1"``, ... for ``metrics.jsonl``."""
        return {_name(a, short=True): g for a, g in self.gaps.items()}


def _name(agent: int, short: bool = False) -> str:
    if agent == BASE:
        return "base" if short else "base model"
    return str(agent) if short else f"agent {agent}"


def check_engine(
    engine: Any,
    params: dict[str, Any],
    model_cfg: ModelConfig,
    lora: LoRAWeights | None,
    prompts: Sequence[Sequence[int]],
    *,
    n_per_agent: int = 2,
    max_tokens: int = 16,
    temperature: float = 1.0,
    tolerance: float = 0.08,
    include_base: bool = True,
    rl_cfg: RLConfig | None = None,
    pad_id: int = 0,
    seed: int = 0,
    raise_on_mismatch: bool = True,
) -> SelfCheckReport:
    """Samples every agent and the base model in one batch and checks the log-prob gap.

    Each of ``prompts`` goes to every agent (slots ``0 .. lora.n_agents - 1`` of the engine,
    which must already serve the adapters in ``lora``) and, with ``include_base``, to the
    base model (agent -1), each request asking ``n_per_agent`` samples of ``max_tokens``
    tokens; the requests are interleaved by prompt and all sent in one
    ``engine.generate`` call, so a batching engine mixes base and adapter rows. The
    trainer then recomputes the sampled tokens' log-probs (``coevo_jax.train.gap``: base
    rows with the adapter off) and compares.

    Args:
      engine: a ``rollout_bridge.engine.Engine``.
      params, model_cfg: the trainer's backbone.
      lora: the stacked adapters the engine serves, or None (base model only).
      prompts: token-id prompts (chat template applied), at least one.
      n_per_agent: samples per (prompt, agent).
      max_tokens: generation budget per sample.
      temperature: sampling temperature (the recompute uses the same).
      tolerance: the largest allowed mean |delta log p| per token, per agent (nats).
      include_base: also sample the base model in the same batch.
      rl_cfg: the trainer's dtypes (``compute_dtype``, ``matmul_dtype``); default float32.
      pad_id: padding token id.
      seed: request seeds derive from it.
      raise_on_mismatch: False returns the report instead of raising.

    Returns:
      the :class:`SelfCheckReport`.

    Raises:
      EngineMismatch: some agent's (or the base model's) gap is past ``tolerance`` (or not
        finite).
      ValueError: no prompts, or the engine returned no sample for some agent.
    """
    if not prompts:
        raise ValueError("check_engine: no prompts")
    rl_cfg = rl_cfg or RLConfig(compute_dtype="float32")
    agents = list(range(lora.n_agents if lora is not None else 0))
    if include_base or not agents:
        agents = [BASE, *agents]
    requests = [
        GenerationRequest(
            prompt_ids=tuple(int(t) for t in p),
            agent_id=a,
            n=n_per_agent,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed * 1_000_003 + 1000 * i + k,
            query_id=f"selfcheck:{i}:{a}",
        )
        for i, p in enumerate(prompts)
        for k, a in enumerate(agents)
    ]
    t0 = time.perf_counter()
    trajs = engine.generate(requests)
    seconds = time.perf_counter() - t0
    by_request: dict[str, list] = {}
    for t in trajs:
        by_request.setdefault(t.query_id, []).append(t)
    groups = []
    for r in requests:
        ts = sorted(by_request.get(r.query_id, []), key=lambda t: t.sample_index)
        if len(ts) != n_per_agent:
            raise ValueError(
                f"check_engine: request {r.query_id} ({_name(r.agent_id)}) got {len(ts)} "
                f"of {n_per_agent} samples"
            )
        groups.append(
            Group(
                agent_id=r.agent_id,
                query_id=r.query_id,
                prompt_ids=r.prompt_ids,
                completions=tuple(tuple(t.completion_ids) for t in ts),
                logprobs=tuple(tuple(float(x) for x in t.logprobs) for t in ts),
                rewards=(0.0,) * n_per_agent,
                version=0,
            )
        )
    gaps = group_gaps(
        groups,
        params,
        lora if lora is not None and any(a != BASE for a in agents) else None,
        model_cfg,
        rl_cfg,
        completion_len=max_tokens,
        pad_id=pad_id,
        temperature=temperature,
    )
    report = SelfCheckReport(
        gaps=gaps, tolerance=tolerance, requests=len(requests), seconds=seconds
    )
    if raise_on_mismatch and report.failed:
        raise EngineMismatch(report)
    return report


def selfcheck_prompts(
    group: Any, records: Sequence[Any], max_input_tokens: int, n: int = 2, pool: int = 16
) -> list[list[int]]:
    """The ``n`` shortest of the first ``pool`` records' prompts, for the engine self-check.

    Short, because a server's LoRA prefill is the check's main cost (vLLM-CPU copies each
    token's adapter weights); the gap of every round's own rollouts covers real lengths.
    """
    prompts = [group.prompt(records, i, max_input_tokens) for i in range(min(pool, len(records)))]
    return sorted(prompts, key=len)[:n]


def check_system(system: Any, records: Sequence[Any], *, seed: Any) -> dict[str, Any] | None:
    """Checks every agent group's engine of ``system`` (a ``train.system.System``) against
    the trainer's recompute, with :func:`check_engine`.

    Runs when ``rollout.selfcheck`` is on, on the driver process, for engines that do not
    return exact log-probs by construction (every engine but the in-process one). The
    prompts are the shortest of ``records``' first ones (:func:`selfcheck_prompts`); each
    agent of the group and the base model sample two completions of 16 tokens in one batch.
    ``seed(k)`` gives group ``k``'s sampling seed.

    Returns:
      ``{"groupK": {"base" | "<local agent>": gap summary}, "seconds": wall time}``,
      or None when nothing was checked.

    Raises:
      EngineMismatch: a gap past ``rollout.selfcheck_tolerance``, naming the agent.
    """
    cfg = system.cfg
    ro = cfg.rollout
    if not ro.selfcheck or engine_spec(ro.engine).exact_logprobs or not system.driver:
        return None
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    for k, g in enumerate(system.groups):
        if g.engine is None:
            continue
        report = check_engine(
            g.engine,
            g.backbone.params,
            g.backbone.cfg,
            jax.device_get(g.policy.lora) if g.mesh is not None else g.policy.lora,
            selfcheck_prompts(g, records, cfg.data.max_input_tokens),
            n_per_agent=2,
            max_tokens=min(16, ro.max_new_tokens),
            temperature=ro.temperature,
            tolerance=ro.selfcheck_tolerance,
            rl_cfg=cfg.rl,
            pad_id=g.backbone.tokenizer.pad_token_id,
            seed=seed(k),
        )
        out[f"group{k}"] = report.metrics()
    out["seconds"] = time.perf_counter() - t0
    return out
