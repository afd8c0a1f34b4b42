"""What a run is built from: backbones, training records, the query stream and agent groups.

An *agent group* is a set of agents that share one backbone, so their adapters are stacked
and one jitted policy step and one engine serve all of them. The homogeneous setting has a
single group holding every agent; the heterogeneous setting has one group per agent, each
with its own base model, tokenizer, adapter and rollout engine.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax import data, models
from coevo_jax.data.templates import render_chat
from coevo_jax.lora import init_lora, unstack
from coevo_jax.lora.peft_io import served_rank
from coevo_jax.models.hardware import matmul_dtype_warning
from coevo_jax.rl.train_step import PolicyState, init_policy_state, make_policy_step
from coevo_jax.router import RouterConfig, features, pad_queries
from coevo_jax.train.config import ModelSpec, TrainConfig
from rollout_bridge.engines import canonical_engine
from rollout_bridge.fleet import FleetEngine, ServerSet
from rollout_bridge.http_engine import HTTPEngine
from rollout_bridge.launcher import GPUSettings, free_port, launch_vllm, server_gpus
from rollout_bridge.local_engine import InProcessEngine


@dataclasses.dataclass
class Backbone:
    """A frozen decoder: params pytree, ModelConfig, tokenizer."""

    params: Any
    cfg: Any
    tokenizer: Any


def load_backbone(spec: ModelSpec) -> Backbone:
    """Loads ``spec`` (``path: default`` = the embedded SmolLM2 GGUF)."""
    path = models.default_model_path() if spec.path == "default" else spec.path
    model, tokenizer = models.load(path, dtype=jnp.dtype(spec.dtype))
    if tokenizer is None:
        raise ValueError(f"{path}: no tokenizer found; the loop needs one to build prompts")
    return Backbone(model.params, model.config, tokenizer)


def query_features(
    backbone: Backbone,
    router: RouterConfig,
    prompts: Sequence[Sequence[int]],
    place: Callable[[Any], Any] = jnp.asarray,
) -> jax.Array:
    """``[B, D]`` router features of token-id prompts: ``backbone``'s partial pass with
    ``router``'s feature layers and prompt limit, which is what training routes on.
    ``place`` puts the padded ``[B, S]`` ids and mask on devices (a mesh run splits them)."""
    ids, mask = pad_queries(
        prompts, max_len=router.max_prompt_tokens, pad_id=backbone.tokenizer.pad_token_id
    )
    return features(
        backbone.params,
        backbone.cfg,
        place(ids),
        place(mask),
        layers=router.feature_layers,
        max_len=router.max_prompt_tokens,
    )


def load_records(cfg: TrainConfig, run_dir: Path) -> list[Any]:
    """The training records: ``data.path`` (a ``coevo data build`` directory or a JSONL file),
    else the ``data.mixture`` built into ``run_dir/data`` (once; reused on resume)."""
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


def whitening_sample(n_records: int, norm_queries: int, seed: int) -> list[int]:
    """Sorted indices of the training queries the router's whitening statistics are taken
    over: ``min(norm_queries, n_records)`` of them, drawn without replacement with ``seed``
    (the run's ``loop.seed``)."""
    n = min(norm_queries, n_records)
    return sorted(np.random.default_rng(seed).choice(n_records, size=n, replace=False).tolist())


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


@dataclasses.dataclass
class AgentGroup:
    """Agents on one backbone: stacked adapters, their optimizer state, step and engine.

    Attributes:
      agents: global agent ids; position k is local slot k of the stacked adapters.
      backbone: the shared frozen decoder.
      policy: the group's ``PolicyState`` (adapters + per-agent AdamW state).
      step_fn: the jitted policy step (donates ``policy``).
      engine: the rollout engine serving these agents (slot k = local id k); None on the
        non-driver processes of a multi-host run, which never generate.
      prompts: cache of rendered prompt ids per record index (tokenizer-specific).
      mesh: the training mesh when the group runs SPMD (``train.distributed``; its backbone
        is then sharded on it), else None.
    """

    agents: tuple[int, ...]
    backbone: Backbone
    policy: PolicyState
    step_fn: Callable
    engine: Any = None
    prompts: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    mesh: Any = None

    def local(self, agent: int) -> int:
        return self.agents.index(agent)

    def prompt(self, records: Sequence[Any], idx: int, max_input_tokens: int) -> list[int]:
        if idx not in self.prompts:
            self.prompts[idx] = render_chat(records[idx], self.backbone.tokenizer, max_input_tokens)
        return self.prompts[idx]

    def publish(self, agent: int, version: int) -> None:
        if self.engine is None:
            return
        adapter = unstack(self.policy.lora, self.local(agent))
        if self.mesh is not None:  # mesh-replicated -> host, so the engine's device can take it
            adapter = jax.device_get(adapter)
        self.engine.publish(self.local(agent), adapter, version)


def make_groups(
    cfg: TrainConfig, backbones: Sequence[Backbone], *, warn_dtype: bool = True
) -> list[AgentGroup]:
    """One group over every agent (homogeneous) or one group per agent (heterogeneous).

    ``backbones`` holds one backbone (homogeneous) or one per agent (heterogeneous). With
    ``warn_dtype`` (a trainer that will step; evaluation passes False), warns
    (``RuntimeWarning``) when the policy step would multiply in bf16 on a CPU that has no
    native bf16 dot products (:func:`coevo_jax.models.hardware.matmul_dtype_warning`).
    """
    key = jax.random.PRNGKey(cfg.loop.seed)
    advice = warn_dtype and matmul_dtype_warning(cfg.rl.matmul_dtype or cfg.rl.compute_dtype)
    if advice:
        warnings.warn(advice, RuntimeWarning, stacklevel=2)
    if cfg.setting == "homogeneous":
        layout = [tuple(range(cfg.lora.n_agents))]
    else:
        layout = [(i,) for i in range(cfg.lora.n_agents)]
    if len(backbones) != len(layout):
        raise ValueError(
            f"{cfg.setting} setting needs {len(layout)} backbone(s), got {len(backbones)}"
        )
    groups = []
    for g, (agents, bb) in enumerate(zip(layout, backbones, strict=True)):
        lora_cfg = dataclasses.replace(cfg.lora, n_agents=len(agents))
        lora = init_lora(jax.random.fold_in(key, 10 * g + 1), lora_cfg, bb.params)
        policy = init_policy_state(lora, cfg.rl, jax.random.fold_in(key, 10 * g + 2))
        groups.append(AgentGroup(agents, bb, policy, make_policy_step(bb.cfg, cfg.rl, donate=True)))
    return groups


def make_engine(
    cfg: TrainConfig, group: AgentGroup, index: int, run_dir: Path, *, servers: dict | None = None
) -> Any:
    """The engine of agent group ``index``, built by ``rollout.engine``'s entry of
    :data:`ENGINE_BUILDERS` (the names and properties: ``rollout_bridge.engines``).

    ``servers`` maps a base model's ``(path, name)`` to its started server, so groups on the
    same base model (heterogeneous runs that repeat a model) share one; pass the same dict
    for every group of a run. A shared server gets one LoRA slot per agent that uses it.
    """
    build = ENGINE_BUILDERS[canonical_engine(cfg.rollout.engine, warn=False)]
    return build(cfg, group, index, run_dir, {} if servers is None else servers)


def _inprocess_engine(cfg, group, index, run_dir, servers) -> InProcessEngine:
    """The JAX sampler in this process, on the group's backbone."""
    tok = group.backbone.tokenizer
    # The engine keeps its own copy: the policy step donates (and so frees) the state's.
    return InProcessEngine(
        group.backbone.params,
        group.backbone.cfg,
        jax.tree.map(jnp.copy, group.policy.lora),
        eos_ids=tok.eos_token_ids,
        pad_id=tok.pad_token_id,
    )


def _http_kw(cfg: TrainConfig, group: AgentGroup, index: int, run_dir: Path) -> dict[str, Any]:
    spec = cfg.model if cfg.setting == "homogeneous" else cfg.agent_models[index]
    adapter_dir = Path(cfg.rollout.adapter_dir or run_dir / "adapters") / f"group{index}"
    return dict(
        base_model=spec.name,
        adapter_dir=adapter_dir,
        eos_ids=group.backbone.tokenizer.eos_token_ids,
        family=group.backbone.cfg.family,
    )


def _http_engine(cfg, group, index, run_dir, servers) -> HTTPEngine | FleetEngine:
    """HTTP to group ``index``'s block of ``rollout.urls``: ``urls[g*K:(g+1)*K]`` with K =
    ``servers_per_model`` (the last block serves the groups past the list); a block of more
    than one URL is a :class:`FleetEngine`."""
    k = cfg.rollout.servers_per_model
    blocks = [cfg.rollout.urls[i : i + k] for i in range(0, len(cfg.rollout.urls), k)]
    urls = blocks[min(index, len(blocks) - 1)]
    kw = _http_kw(cfg, group, index, run_dir)
    if len(urls) == 1:
        return HTTPEngine(urls[0], **kw)
    return FleetEngine([HTTPEngine(u, retries=1, **kw) for u in urls])


def _vllm_engine(cfg, group, index, run_dir, servers) -> HTTPEngine | FleetEngine:
    """HTTP to the vLLM servers this run starts: ``servers_per_model`` per base model (on
    distinct ports, started together), shared by the groups on that model; more than one
    is a :class:`FleetEngine`."""
    spec = cfg.model if cfg.setting == "homogeneous" else cfg.agent_models[index]
    key = (spec.path, spec.name)
    k = cfg.rollout.servers_per_model
    kw = dict(name_prefix=f"g{index}-", **_http_kw(cfg, group, index, run_dir))
    if k == 1:
        if key not in servers:
            servers[key] = _start_vllm(cfg, spec, len(servers), run_dir, group.backbone.cfg.family)
        return HTTPEngine(servers[key].url, server=servers[key], **kw)
    if key not in servers:
        servers[key] = _start_vllm_fleet(cfg, spec, len(servers), run_dir, group)
    members = [HTTPEngine(s.url, server=s, retries=1, **kw) for s in servers[key].servers]
    return FleetEngine(members)


# engine name -> builder(cfg, group, index, run_dir, servers); keyed like
# rollout_bridge.engines.ENGINES (a test checks the two agree)
ENGINE_BUILDERS: dict[str, Callable[..., Any]] = {
    "inprocess": _inprocess_engine,
    "http": _http_engine,
    "vllm": _vllm_engine,
}


def _lora_slots(cfg: TrainConfig, spec: ModelSpec) -> int:
    if cfg.setting == "homogeneous":
        return cfg.lora.n_agents
    return sum(1 for s in cfg.agent_models if (s.path, s.name) == (spec.path, spec.name))


def _start_vllm_fleet(cfg: TrainConfig, spec: ModelSpec, k: int, run_dir: Path, group) -> Any:
    """``servers_per_model`` vLLM servers for ``spec`` on distinct ports, started together;
    if one fails, the others are stopped and the error raised."""
    n = cfg.rollout.servers_per_model
    ports: list[int] = []
    while len(ports) < n:  # free_port can hand back a port it just gave: keep them distinct
        if (p := free_port()) not in ports:
            ports.append(p)
    family = group.backbone.cfg.family
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [
            pool.submit(_start_vllm, cfg, spec, f"{k}-{j}", run_dir, family, port=p)
            for j, p in enumerate(ports)
        ]
    started = [f.result() for f in futures if f.exception() is None]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        for s in started:
            s.stop()
        raise errors[0]
    return ServerSet(started)


def _start_vllm(
    cfg: TrainConfig, spec: ModelSpec, k: int | str, run_dir: Path, family: str, port=None
) -> Any:
    ro = cfg.rollout
    # evaluation opens runs read-only and points adapter_dir outside them: the log goes there
    log = Path(ro.adapter_dir or run_dir) / f"vllm-server{k}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"starting vLLM for {spec.name} (log: {log})", flush=True)
    return launch_vllm(
        spec.path,
        served_name=spec.name,
        agents=_lora_slots(cfg, spec),
        # a fused Phi-3 module's adapter has rank 3r (qkv): vLLM must accept it
        max_lora_rank=served_rank(cfg.lora.rank, family, cfg.lora.target_modules),
        python=ro.vllm_python,
        log_path=log,
        timeout=ro.server_timeout,
        max_model_len=ro.vllm_max_model_len,
        kv_cache_gb=ro.vllm_kv_cache_gb,
        dtype=ro.vllm_dtype,
        port=port,
        **_vllm_device_kw(cfg, k),
    )


def _vllm_device_kw(cfg: TrainConfig, k: int | str) -> dict[str, Any]:
    """``launch_vllm``'s device profile for the run's vLLM server ``k``: ``rollout.vllm_device``
    and the GPU settings, with block ``index`` of ``rollout.devices``.

    ``k`` is the server's base-model number, or ``"a-b"`` for member ``b`` of base model
    ``a``'s fleet; servers are numbered ``a * servers_per_model + b``.
    """
    ro = cfg.rollout
    a, _, b = str(k).partition("-")
    index = int(a) * ro.servers_per_model + int(b or 0)
    gpu = GPUSettings(
        devices=server_gpus(ro.devices, ro.tensor_parallel, index),
        tensor_parallel_size=ro.tensor_parallel,
        gpu_memory_utilization=ro.gpu_memory_utilization,
        max_num_seqs=ro.max_num_seqs,
    )
    return dict(device=ro.vllm_device, gpu=gpu)
