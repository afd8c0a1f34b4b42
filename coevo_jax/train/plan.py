"""``coevo plan``: a run's per-device memory and work, compiled ahead of time, nothing allocated.

:func:`plan_run` compiles, for this process's first N devices (fake CPU devices when run by
``coevo plan``), the programs a run of ``cfg`` calls, built by the trainer's own code at the
config's exact shapes, with abstract weights (``jax.ShapeDtypeStruct`` carrying the
``NamedSharding`` the trainer would give each array):

* ``policy_step``: each agent group's jitted step (``rl.train_step.make_policy_step``, or
  ``train.distributed.mesh_policy_step`` on a mesh) with its reference pass when ``beta != 0``,
  at the batch ``train.batching.build_policy_batch`` builds from ``groups_per_step`` full
  groups of every agent of the group;
* ``reference``: the step's reference pass alone (adapter off, the config's log-prob chunk
  and attention) over the same rows at once. It runs inside the step, never on its own, so
  it is reported but not counted in the peak;
* ``logprob_recompute``: ``train.gap.recompute_logprobs`` exactly as the loop calls it when
  ``rl.measure_gap`` is set: the round's groups, under their adapters, with the arguments
  ``train.gap.group_gaps`` passes (the run's log-prob chunk and attention);
* ``router_features`` and ``router_step``: the router backbone's partial pass over a round's
  queries, and one router update over ``queries_per_round x max(1, replay_rounds)`` rows
  with the router state split as ``train.distributed.shard_router`` splits it;
* ``sampler_prefill`` and ``sampler_decode``: the in-process sampler's prefill and one decode
  step (``models.sampler.generate_arrays``' two halves) over one engine call's rows
  (``queries_per_round x group_size``, at most the engine's ``max_batch``), prompt
  ``data.max_input_tokens``, cache length prompt + ``rollout.max_new_tokens``.

Per program and device it reports ``memory_analysis()``'s argument, temporary, output and
aliased bytes, the FLOPs per step and the collective bytes per step. Both per-step figures
are read off the compiled, partitioned HLO (``train.plan_hlo.hlo_costs``), each loop body
counted its known trip count times (the layer scan, the micro-batch scan, the log-prob
chunks): ``cost_analysis()`` counts a loop body once, so its ``flops`` (kept as
``xla_flops``) understates a scanned step by the trip counts. FLOPs are those of the matrix
products (``dot``), what MFU counts; collective bytes are the result sizes of every
all-gather, all-reduce, reduce-scatter, all-to-all and collective-permute, an estimate of the
traffic per device (a ring all-reduce moves about twice its size). A ``lax.switch`` (length
buckets) counts its costliest branch, so a bucketed step is planned at its widest.

The verdict. Resident state per device is every distinct backbone (sharded by
``parallel.rules``), every group's policy state (replicated), the router state (split like
``shard_router``) and, with the in-process engine, its copy of the adapters. A program adds
its transient arguments (its inputs other than resident state), its outputs that do not
alias a donated input, and its temporaries. The planned peak is the resident state plus the
largest addition over the programs the run's process executes (the sampler's only with
``rollout.engine: inprocess``, the recompute only with ``rl.measure_gap``). It fits when it
is at most ``device_memory_gb x 1e9 x`` JAX's preallocation fraction
(``XLA_PYTHON_CLIENT_MEM_FRACTION``, default 0.75). Programs run one at a time, and a
program's temporaries are freed when it returns, so the largest addition is what counts. The figures come from the CPU compiler,
which fuses and schedules differently from a GPU's: read them as estimates of the GPU's,
within about 2x.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from coevo_jax._errors import UserError
from coevo_jax.lora import init_lora
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import KVCache, cast_matrices, forward, lm_head, param_shapes
from coevo_jax.models.presets import planning_config
from coevo_jax.parallel import batch_sharding, cache_sharding, make_mesh, param_shardings
from coevo_jax.rl.logprobs import sequence_logprobs
from coevo_jax.rl.train_step import init_policy_state, make_policy_step
from coevo_jax.router import RouterReplay, feature_dim, features, init_router, router_step
from coevo_jax.train.batching import build_policy_batch
from coevo_jax.train.buffers import Group
from coevo_jax.train.config import ModelSpec, TrainConfig
from coevo_jax.train.distributed import mesh_policy_step, replicated, router_spec, under_mesh
from coevo_jax.train.gap import recompute_logprobs
from coevo_jax.train.plan_hlo import hlo_costs
from rollout_bridge.engines import engine_spec
from rollout_bridge.local_engine import InProcessEngine

GB = 1e9
CPU_NOTE = "figures from the CPU compiler on fake devices: estimates of the GPU's (within about 2x)"


class PlanError(UserError, ValueError):
    """A config ``coevo plan`` cannot plan (no model config at hand, too few devices)."""


# ---------------------------------------------------------------- abstract state
def _abstract(x: Any, sharding: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of ``tree``'s abstract (or concrete) leaves."""
    total = 0
    for x in jax.tree.leaves(tree):
        sh = getattr(x, "sharding", None)
        shape = sh.shard_shape(x.shape) if sh is not None else x.shape
        total += math.prod(shape) * jnp.dtype(x.dtype).itemsize
    return int(total)


def abstract_params(cfg: ModelConfig, dtype: str, mesh: Mesh | None) -> Any:
    """The backbone's params as ShapeDtypeStructs, sharded by the partition rules on ``mesh``."""
    shapes = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, jnp.dtype(dtype)),
        param_shapes(cfg),
        is_leaf=lambda s: isinstance(s, tuple),
    )
    if mesh is None:
        return shapes
    return jax.tree.map(_abstract, shapes, param_shardings(shapes, mesh))


def abstract_policy(cfg: TrainConfig, params: Any, n_agents: int, mesh: Mesh | None) -> Any:
    """A group's ``PolicyState`` (adapters, AdamW moments, counters, key) as ShapeDtypeStructs,
    replicated on ``mesh`` as ``shard_group`` places it."""
    lora_cfg = dataclasses.replace(cfg.lora, n_agents=n_agents)
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(lambda: init_policy_state(init_lora(key, lora_cfg, params), cfg.rl, key))
    if mesh is None:
        return state
    return jax.tree.map(lambda x: _abstract(x, replicated(mesh)), state)


def abstract_router(cfg: TrainConfig, in_dim: int, mesh: Mesh | None) -> Any:
    """The router state as ShapeDtypeStructs (its heads split over ``fsdp`` on ``mesh``)."""
    state = jax.eval_shape(lambda: init_router(cfg.router, in_dim, seed=cfg.loop.seed))
    if mesh is None:
        return state
    return jax.tree.map(
        lambda x: _abstract(x, NamedSharding(mesh, router_spec(x.shape, mesh))), state
    )


def _rows(tree: Any, mesh: Mesh | None) -> Any:
    """Abstract host-shaped arrays split over the mesh's batch axes (``place_batch``)."""
    if mesh is None:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    return jax.tree.map(lambda x: _abstract(x, batch_sharding(x.shape, mesh)), tree)


def policy_batch(cfg: TrainConfig, rows: int, mesh: Mesh | None) -> Any:
    """The abstract ``PolicyBatch`` of ``rows`` sequences (before padding), exactly as
    ``build_policy_batch`` shapes it: full-length prompts and completions of one agent."""
    g_size, t = cfg.rollout.group_size, cfg.rollout.max_new_tokens
    n_groups = -(-rows // g_size)
    group = Group(
        agent_id=0,
        query_id="plan",
        prompt_ids=(1,) * cfg.data.max_input_tokens,
        completions=((1,) * t,) * g_size,
        logprobs=((0.0,) * t,) * g_size,
        rewards=(0.0,) * g_size,
        version=0,
    )
    batch, _ = build_policy_batch([group] * n_groups, cfg.rl, completion_len=t, pad_id=0)
    return _rows(batch, mesh)


# ---------------------------------------------------------------- the programs
@dataclasses.dataclass(frozen=True)
class Program:
    """One program to compile: ``lower()`` gives its ``Lowered``; ``resident`` is the part of
    its arguments that is resident state (per device); ``in_peak`` whether the run's process
    executes it."""

    name: str
    lower: Any
    resident: int
    in_peak: bool = True


@functools.partial(jax.jit, static_argnames=("model_cfg", "rl_cfg"))
def reference_pass(params: Any, batch: Any, *, model_cfg: ModelConfig, rl_cfg: Any) -> jax.Array:
    """The policy step's reference pass alone (``rl.train_step._MicroBatches.
    reference_logprobs``): adapter off, the backbone cast to the matmul dtype, the config's
    log-prob chunk and attention; ``[B, T]`` log-probs."""
    md = jnp.dtype(rl_cfg.matmul_dtype or rl_cfg.compute_dtype)
    logp, _ = sequence_logprobs(
        cast_matrices(params, md),
        model_cfg,
        None,
        batch,
        compute_dtype=jnp.dtype(rl_cfg.compute_dtype),
        matmul_dtype=md,
        chunk_size=rl_cfg.logprob_chunk,
        with_entropy=False,
        attention=rl_cfg.attention,
        attention_block=rl_cfg.attention_block,
    )
    return logp


@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype"))
def sampler_prefill(params, cfg, prompt_ids, mask, lora, agent_ids, *, n_new, compute_dtype):
    """``generate_arrays``' prefill: a fresh cache of ``P + n_new`` slots filled with the
    prompts, and the last position's logits. ``n_new`` is given as a ``[n_new]`` dummy."""
    b, p_len = prompt_ids.shape
    cache = KVCache.init(cfg, b, p_len + n_new.shape[0], compute_dtype)
    mask = jnp.concatenate([mask, jnp.ones((b, n_new.shape[0]), mask.dtype)], axis=1)
    out = forward(
        params, cfg, prompt_ids, attention_mask=mask, lora=(lora, agent_ids),
        hidden_layers=(cfg.num_layers,), stop_after_hidden=True, cache=cache, cache_index=0,
        compute_dtype=compute_dtype,
    )  # fmt: skip
    last = out.hidden_states[cfg.num_layers][:, -1]
    return lm_head(params, cfg, last, compute_dtype), out.cache


@functools.partial(jax.jit, static_argnames=("cfg", "compute_dtype"), donate_argnums=(3,))
def sampler_decode(params, cfg, token, cache, mask, index, lora, agent_ids, *, compute_dtype):
    """One of ``generate_arrays``' decode steps: token ``[B]`` at slot ``index`` of the
    (donated) cache, the next logits."""
    out = forward(
        params, cfg, token[:, None], attention_mask=mask, lora=(lora, agent_ids),
        hidden_layers=(cfg.num_layers,), stop_after_hidden=True, cache=cache, cache_index=index,
        compute_dtype=compute_dtype,
    )  # fmt: skip
    last = out.hidden_states[cfg.num_layers][:, -1]
    return lm_head(params, cfg, last, compute_dtype), out.cache


def _sds(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))


def group_programs(
    cfg: TrainConfig, model_cfg: ModelConfig, params: Any, n_agents: int, mesh: Mesh | None
) -> list[Program]:
    """The programs of one agent group of ``n_agents`` agents on backbone ``params``."""
    rl = cfg.rl
    policy = abstract_policy(cfg, params, n_agents, mesh)
    bb, pol = per_device_bytes(params), per_device_bytes(policy)
    g_size = cfg.rollout.group_size
    batch = policy_batch(cfg, cfg.loop.groups_per_step * g_size * n_agents, mesh)
    if mesh is None:
        step = make_policy_step(model_cfg, rl, donate=True)
    else:
        step = mesh_policy_step(model_cfg, rl, policy, mesh)
    # round_gaps: the round's groups of these agents, at most this many rows per pass
    gap_rows = min(
        max(64, cfg.loop.groups_per_step * g_size * n_agents),
        cfg.loop.queries_per_round * n_agents * g_size,
    )
    gap_batch = policy_batch(cfg, gap_rows, mesh)
    temp = 1.0 if cfg.rollout.temperature == 0 else float(cfg.rollout.temperature)

    def under(fn):
        def lower():
            with under_mesh(mesh):
                return fn()

        return lower

    out = [
        Program("policy_step", lambda: step.lower(policy, params, batch), bb + pol),
        Program(
            "reference",
            under(lambda: reference_pass.lower(params, batch, model_cfg=model_cfg, rl_cfg=rl)),
            bb,
            in_peak=False,
        ),
        Program(
            "logprob_recompute",
            under(
                lambda: recompute_logprobs.lower(
                    params,
                    policy.lora,
                    gap_batch,
                    model_cfg=model_cfg,
                    compute_dtype=rl.compute_dtype,
                    matmul_dtype=rl.matmul_dtype,
                    temperature=temp,
                    chunk_size=rl.logprob_chunk,
                    attention=rl.attention,
                    attention_block=rl.attention_block,
                )
            ),
            bb + per_device_bytes(policy.lora),
            in_peak=rl.measure_gap,
        ),
    ]
    return out + _sampler_programs(cfg, model_cfg, params, policy.lora, mesh, bb)


def _sampler_programs(cfg, model_cfg, params, lora, mesh, bb) -> list[Program]:
    """Prefill and one decode step of the in-process engine's sampler, fp32 as the engine
    runs it, over one engine call's rows."""
    max_batch = inspect.signature(InProcessEngine).parameters["max_batch"].default
    b = min(cfg.loop.queries_per_round * cfg.rollout.group_size, max_batch)
    p_len, n_new = cfg.data.max_input_tokens, cfg.rollout.max_new_tokens
    s_len = p_len + n_new
    dt = jnp.float32
    cache = jax.eval_shape(lambda: KVCache.init(model_cfg, b, s_len, dt))
    if mesh is not None:
        cache = jax.tree.map(lambda x: _abstract(x, cache_sharding(x.shape, mesh)), cache)
    ids, mask, agents = _rows(
        (_sds((b, p_len), jnp.int32), _sds((b, p_len), jnp.int32), _sds((b,), jnp.int32)), mesh
    )
    tok, full_mask = _rows((_sds((b,), jnp.int32), _sds((b, s_len), jnp.int32)), mesh)
    dummy, index = _sds((n_new,), jnp.int8), _sds((), jnp.int32)
    resident = bb + per_device_bytes(lora)
    in_peak = engine_spec(cfg.rollout.engine).loads_weights

    def prefill():
        with under_mesh(mesh):
            return sampler_prefill.lower(
                params, model_cfg, ids, mask, lora, agents, n_new=dummy, compute_dtype=dt
            )

    def decode():
        with under_mesh(mesh):
            return sampler_decode.lower(
                params, model_cfg, tok, cache, full_mask, index, lora, agents, compute_dtype=dt
            )

    return [
        Program("sampler_prefill", prefill, resident, in_peak),
        Program("sampler_decode", decode, resident, in_peak),
    ]


def router_programs(
    cfg: TrainConfig, model_cfg: ModelConfig, params: Any, mesh: Mesh | None
) -> tuple[list[Program], int]:
    """``([router_features, router_step], router state bytes per device)``."""
    rc = cfg.router
    in_dim = feature_dim(model_cfg.hidden_size, rc.feature_layers)
    state = abstract_router(cfg, in_dim, mesh)
    q = cfg.loop.queries_per_round
    s_len = min(rc.max_prompt_tokens, -(-cfg.data.max_input_tokens // 64) * 64)
    ids, mask = _rows((_sds((q, s_len), jnp.int32), _sds((q, s_len), jnp.int32)), mesh)
    rows = q * max(1, rc.replay_rounds)
    h, rbar, served = _rows(
        (
            _sds((rows, in_dim), jnp.float32),
            _sds((rows, rc.n_agents), jnp.float32),
            _sds((rows, rc.n_agents), bool),
        ),
        mesh,
    )
    r_bytes = per_device_bytes(state)
    if rc.replay_rounds > 1:  # the replay window is resident too, replicated
        window = jax.eval_shape(
            lambda: RouterReplay.empty(rc.replay_rounds, q, in_dim, rc.n_agents)
        )
        r_bytes += per_device_bytes(window)

    def feats():
        with under_mesh(mesh):
            return features.lower(
                params, model_cfg, ids, mask, layers=rc.feature_layers, max_len=rc.max_prompt_tokens
            )

    def step():
        with under_mesh(mesh):
            return router_step.lower(state, h, rbar, served)

    progs = [
        Program("router_features", feats, per_device_bytes(params)),
        Program("router_step", step, per_device_bytes(state)),
    ]
    return progs, r_bytes


# ---------------------------------------------------------------- compiling and the verdict
def measure(program: Program, progress: bool = True) -> dict[str, Any]:
    """Compiles ``program`` and returns its per-device figures (see the module docstring)."""
    t0 = time.perf_counter()
    if progress:
        print(f"coevo plan: compiling {program.name} ...", file=sys.stderr, flush=True)
    compiled = program.lower().compile()
    mem = compiled.memory_analysis()
    xla = compiled.cost_analysis()
    xla = xla[0] if isinstance(xla, list | tuple) else xla
    costs = hlo_costs(compiled.as_text())
    dt = time.perf_counter() - t0
    if progress:
        print(f"coevo plan: {program.name} compiled in {dt:.0f} s", file=sys.stderr, flush=True)
    return {
        "flops_per_device": costs["flops"],
        "argument_bytes": int(mem.argument_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "alias_bytes": int(mem.alias_size_in_bytes),
        "collective_bytes": costs["collective_bytes"],
        "resident_argument_bytes": program.resident,
        "xla_flops": float(xla.get("flops", 0.0)) if xla else 0.0,
        "unknown_trip_loops": costs["unknown_trip_loops"],
        "in_peak": program.in_peak,
        "compile_s": round(dt, 1),
    }


def added_bytes(p: dict[str, Any]) -> int:
    """What a program adds to the resident state while it runs: transient arguments,
    outputs that alias no donated input, temporaries."""
    transient = max(0, p["argument_bytes"] - p["resident_argument_bytes"])
    return transient + max(0, p["output_bytes"] - p["alias_bytes"]) + p["temp_bytes"]


def mem_fraction() -> float:
    """JAX's GPU preallocation fraction: ``XLA_PYTHON_CLIENT_MEM_FRACTION``, default 0.75."""
    return float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))


def plan_mesh(cfg: TrainConfig, devices: list) -> Mesh | None:
    """The config's own mesh when it spans exactly ``devices``, else ``fsdp = len(devices)``;
    None for one device (the trainer's single-device path)."""
    if len(devices) == 1:
        return None
    p = cfg.parallel
    if p.enabled:
        try:
            return make_mesh(data=p.data, fsdp=p.fsdp, tensor=p.tensor, devices=devices)
        except ValueError:
            pass
    return make_mesh(data=1, fsdp=len(devices), tensor=1, devices=devices)


def _layout(cfg: TrainConfig) -> list[tuple[tuple[int, ...], ModelSpec]]:
    """``[(agents, backbone spec)]`` of the run's agent groups (``train.setup.make_groups``)."""
    if cfg.setting == "homogeneous":
        return [(tuple(range(cfg.lora.n_agents)), cfg.model)]
    return [((i,), spec) for i, spec in enumerate(cfg.agent_models)]


def plan_run(
    cfg: TrainConfig,
    devices: int,
    device_memory_gb: float = 80.0,
    *,
    programs: tuple[str, ...] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The plan of ``cfg`` on this process's first ``devices`` devices (module docstring).

    Args:
      cfg: the run config.
      devices: N; the process must have at least N devices (``coevo plan`` starts one with
        exactly N fake CPU devices).
      device_memory_gb: memory of one device, in GB (1e9 bytes).
      programs: only these program kinds (``policy_step``, ``reference``, ...); None = all.
      progress: say on stderr which program is compiling.

    Returns:
      A JSON-ready dict: ``devices``, ``mesh``, ``programs`` (per program: the figures of
      :func:`measure`), ``resident_bytes``, ``peak_bytes``, ``peak_program``,
      ``budget_bytes``, ``fits``, ``models``, ``note``.
    """
    have = jax.devices()
    if len(have) < devices:
        raise PlanError(f"plan for {devices} devices, but this process has {len(have)}")
    mesh = plan_mesh(cfg, have[:devices])
    layout = _layout(cfg)
    router_spec_ = cfg.model if cfg.setting == "homogeneous" else (cfg.router_model or cfg.model)
    backbones: dict[tuple[str, str], tuple[ModelConfig, Any, str]] = {}
    for spec in [router_spec_] + [s for _, s in layout]:
        if (spec.path, spec.dtype) not in backbones:
            mcfg, source = planning_config(spec.path, spec.name)
            backbones[(spec.path, spec.dtype)] = (
                mcfg,
                abstract_params(mcfg, spec.dtype, mesh),
                source,
            )
    resident = {"backbones": sum(per_device_bytes(p) for _, p, _ in backbones.values())}
    todo: list[Program] = []
    r_cfg, r_params, _ = backbones[(router_spec_.path, router_spec_.dtype)]
    router_progs, resident["router"] = router_programs(cfg, r_cfg, r_params, mesh)
    resident["policies"] = resident["engine_adapters"] = 0
    for k, (agents, spec) in enumerate(layout):
        mcfg, params, _ = backbones[(spec.path, spec.dtype)]
        group = group_programs(cfg, mcfg, params, len(agents), mesh)
        policy = abstract_policy(cfg, params, len(agents), mesh)
        resident["policies"] += per_device_bytes(policy)
        if engine_spec(cfg.rollout.engine).loads_weights:
            resident["engine_adapters"] += per_device_bytes(policy.lora)
        suffix = f".g{k}" if len(layout) > 1 else ""
        todo += [dataclasses.replace(p, name=p.name + suffix) for p in group]
    todo += router_progs
    if programs is not None:
        todo = [p for p in todo if p.name.split(".")[0] in programs]
    measured = {p.name: measure(p, progress) for p in todo}
    return verdict(cfg, devices, mesh, measured, resident, backbones, layout, device_memory_gb)


def verdict(cfg, devices, mesh, measured, resident, backbones, layout, device_memory_gb) -> dict:
    """The JSON-ready plan: the figures, the resident state, the peak and whether it fits."""
    in_peak = {n: added_bytes(p) for n, p in measured.items() if p["in_peak"]}
    peak_program = max(in_peak, key=in_peak.get) if in_peak else None
    total_resident = sum(resident.values())
    peak = total_resident + (in_peak[peak_program] if peak_program else 0)
    budget = device_memory_gb * GB * mem_fraction()
    return {
        "devices": devices,
        "mesh": None if mesh is None else dict(mesh.shape),
        "programs": measured,
        "resident_bytes": {**resident, "total": total_resident},
        "peak_bytes": peak,
        "peak_program": peak_program,
        "device_memory_gb": device_memory_gb,
        "mem_fraction": mem_fraction(),
        "budget_bytes": budget,
        "fits": peak <= budget,
        "models": {
            f"{path} ({dtype})": {"source": source, "params": _n_params(mcfg)}
            for (path, dtype), (mcfg, _, source) in backbones.items()
        },
        "groups": [{"agents": list(a), "model": s.path} for a, s in layout],
        "shapes": _shapes_summary(cfg),
        "note": CPU_NOTE,
    }


def _n_params(mcfg: ModelConfig) -> int:
    leaves = jax.tree.leaves(param_shapes(mcfg), is_leaf=lambda s: isinstance(s, tuple))
    return int(sum(math.prod(s) for s in leaves))


def _shapes_summary(cfg: TrainConfig) -> dict[str, Any]:
    rl = cfg.rl
    return {
        "groups_per_step": cfg.loop.groups_per_step,
        "group_size": cfg.rollout.group_size,
        "queries_per_round": cfg.loop.queries_per_round,
        "max_input_tokens": cfg.data.max_input_tokens,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "micro_batches": rl.micro_batches,
        "length_buckets": rl.length_buckets,
        "remat": rl.remat,
        "logprob_chunk": rl.logprob_chunk,
        "attention": rl.attention,
        "attention_block": rl.attention_block,
        "beta": rl.beta,
        "measure_gap": rl.measure_gap,
        "engine": cfg.rollout.engine,
    }


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as a table and a verdict, for a terminal."""
    mesh = plan["mesh"] or "none (one device)"
    lines = [
        f"devices: {plan['devices']}  mesh: {mesh}",
        f"{'program':<26}{'args GB':>9}{'temp GB':>9}{'out GB':>8}{'TFLOP':>10}{'coll GB':>9}"
        "  in peak",
    ]
    for name, p in plan["programs"].items():
        lines.append(
            f"{name:<26}{p['argument_bytes'] / GB:>9.2f}{p['temp_bytes'] / GB:>9.2f}"
            f"{p['output_bytes'] / GB:>8.2f}{p['flops_per_device'] / 1e12:>10.2f}"
            f"{p['collective_bytes'] / GB:>9.2f}  {'yes' if p['in_peak'] else 'no'}"
        )
    res = plan["resident_bytes"]
    parts = ", ".join(f"{k} {v / GB:.2f}" for k, v in res.items() if k != "total")
    lines += [
        "(per device; FLOPs and collective bytes per step, collectives an estimate)",
        f"resident: {res['total'] / GB:.2f} GB ({parts})",
        f"planned peak: {plan['peak_bytes'] / GB:.2f} GB per device (resident + "
        f"{plan['peak_program']}'s transient arguments, new outputs and temporaries)",
        f"budget: {plan['device_memory_gb']:g} GB x {plan['mem_fraction']:g} = "
        f"{plan['budget_bytes'] / GB:.2f} GB: "
        + ("FITS" if plan["fits"] else
           f"DOES NOT FIT (over by {(plan['peak_bytes'] - plan['budget_bytes']) / GB:.2f} GB)"),
        f"note: {plan['note']}",
    ]  # fmt: skip
    return "\n".join(lines)
