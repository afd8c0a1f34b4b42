"""The closed loop's configuration: one frozen dataclass per component, composed.

``configs/*.yaml`` map 1:1 onto :class:`TrainConfig` (unknown keys are errors naming their
dotted path). Every ablation of docs/design.md §2 is a key:

| ablation | key |
| --- | --- |
| reward-regression / classification router | ``router.head`` |
| final-layer features | ``router.feature_layers: final`` |
| fixed top-1/2/3 routing | ``router.routing: top_k`` + ``router.top_k`` |
| no exploration | ``router.c_ucb: 0`` + ``router.w_ent: 0`` |
| no margin (unbounded push) | ``router.unbounded_push: true`` |
| lambda / margin sensitivity | ``router.lam`` / ``router.margin`` |
| train/test tau mismatch | ``router.tau`` (train) and ``eval_tau`` (test) |

``parallel`` sets the training mesh (multi-device / multi-host, ``coevo_jax.train.distributed``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from coevo_jax._config import (
    BUNDLED_CONFIG_DIR,
    ConfigError,
    check_at_least,
    load_yaml,
    register_renames,
)
from coevo_jax.data.mixtures import MIXTURES
from coevo_jax.lora import LoRAConfig
from coevo_jax.rl import RLConfig
from coevo_jax.router import RouterConfig
from rollout_bridge.engines import canonical_engine, engine_names, engine_spec
from rollout_bridge.launcher import VLLM_DEVICES, VLLM_DTYPES

ENGINES = engine_names()
SETTINGS = ("homogeneous", "heterogeneous")
CONFIG_DIR = BUNDLED_CONFIG_DIR  # the bundled configs, in the package (also after a wheel install)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Where a backbone comes from.

    Attributes:
      path: ``"default"`` (the embedded SmolLM2-135M-Instruct GGUF), an HF model directory, a
        ``.gguf`` file, a Hugging Face Hub id ``org/name`` (e.g. ``Qwen/Qwen3-4B``; fetched
        into the Hub cache, or read from it under ``HF_HUB_OFFLINE``, by
        ``coevo_jax.models.hub``), or ``"random:<family>"`` for a tiny random model (tests).
        Not checked here: a Hub id is no local path, and ``models.load`` names what is wrong.
      name: the name recorded in exported adapters (``base_model_name_or_path``) and served
        by the rollout server.
      dtype: storage dtype of the frozen weights (``float32`` or ``bfloat16``).
    """

    path: str = "default"
    name: str = "SmolLM2-135M-Instruct"
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """The training queries.

    Attributes:
      mixture: a mixture name for ``coevo data build`` (``cpu``, ``paper``, ``reference``,
        ``conflict``), built into the run directory when ``path`` is None.
      path: a directory written by ``coevo data build`` (or a JSONL file of records).
      split: which split of the mixture to train on.
      max_input_tokens: prompts are left-truncated to this many tokens (paper: 800).
    """

    mixture: str = "cpu"
    path: str | None = None
    split: str = "train"
    max_input_tokens: int = 800

    def __post_init__(self):
        if self.max_input_tokens < 8:
            raise ValueError(f"max_input_tokens must be >= 8, got {self.max_input_tokens}")
        if self.path is None and self.mixture not in MIXTURES:
            raise ValueError(
                f"unknown mixture {self.mixture!r}; known: {', '.join(sorted(MIXTURES))}"
            )


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """Generation through the rollout engine (docs/design.md §2 step 5, §6).

    Attributes:
      engine: ``inprocess`` (JAX sampler in this process), ``http`` (a vLLM-protocol server
        already running at ``urls``) or ``vllm`` (the run starts and stops its own vLLM
        server per base model, restarts it when it dies, and self-checks it).
      urls: server URLs for ``http`` (one per base model in the heterogeneous setting).
      servers_per_model: K servers per base model, balanced and failed over by one
        :class:`rollout_bridge.fleet.FleetEngine` (1: a single server, no fleet). ``vllm``
        starts K; ``http`` gives agent group g the block ``urls[g*K:(g+1)*K]`` (groups past
        the list share the last block), so ``urls`` must hold a multiple of K.
      vllm_python: ``vllm`` engine: the interpreter that runs vLLM (default: the project's
        venv from ``python -m rollout_bridge.vllm_env``; a GPU build of vLLM goes here).
      vllm_kv_cache_gb: ``vllm`` engine: KV cache of vLLM's CPU build, GiB.
      vllm_max_model_len: ``vllm`` engine: the server's context length.
      vllm_dtype: ``vllm`` engine: the server's ``--dtype``; None is ``bfloat16`` where the
        machine multiplies bf16 natively (a GPU, or a CPU with AVX512-BF16/AMX), else
        ``float32`` (vLLM's CPU build converts bf16 elsewhere and runs 2-3x slower).
      server_timeout: seconds to wait for a started server's ``/health``.
      selfcheck: check an HTTP/vLLM engine's behaviour log-probs against the trainer's
        recompute when the run starts and after every round that publishes
        (:mod:`coevo_jax.train.selfcheck`); the in-process engine is exact and skips it.
      selfcheck_tolerance: largest mean |Δ log p| per token the check accepts.
      group_size: G completions per (query, activated agent) (paper: 8).
      max_new_tokens: generation budget (paper: 1000).
      temperature, top_p: sampling settings for training rollouts.
      max_staleness: drop groups sampled more than this many versions ago (None = keep).
      overlong_penalty: add the DAPO soft overlong penalty to rewards.
      overlong_cache: L_cache of that penalty (tokens before max_new_tokens where it starts).
      adapter_dir: where published adapter versions are written (default: run_dir/adapters).
      vllm_device: ``vllm`` engine: the launcher's profile (docs/design.md §6): ``cpu``
        (vLLM's CPU build), ``gpu`` (tensor parallelism, memory share, prefix caching,
        ``CUDA_VISIBLE_DEVICES``) or ``auto`` (the one the vLLM interpreter's build needs).
      devices: GPU indices the vLLM servers get, cut into blocks of
        ``tensor_parallel_size``, one per server (empty: none assigned; a server sees what
        the run sees). Must not overlap ``parallel.devices``.
      tensor_parallel_size: GPUs one vLLM server spans (None: ``len(devices)`` or 1).
      gpu_memory_utilization: share of each of its GPUs' memory a vLLM server takes.
      max_num_seqs: most sequences a vLLM server batches in one step.
    """

    engine: str = "inprocess"
    urls: tuple[str, ...] = ()
    servers_per_model: int = 1
    group_size: int = 8
    max_new_tokens: int = 1000
    temperature: float = 1.0
    top_p: float = 1.0
    max_staleness: int | None = None
    overlong_penalty: bool = False
    overlong_cache: int = 200
    adapter_dir: str | None = None
    vllm_python: str | None = None
    vllm_kv_cache_gb: float = 2.0
    vllm_max_model_len: int = 2048
    vllm_dtype: str | None = None
    server_timeout: float = 900.0
    selfcheck: bool = True
    selfcheck_tolerance: float = 0.08
    # the vLLM launcher's device profile (one block: rollout_bridge.launcher.GPUSettings)
    vllm_device: str = "auto"
    devices: tuple[int, ...] = ()
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 256

    def __post_init__(self):
        self._check_vllm_device()
        if self.selfcheck_tolerance <= 0 or self.vllm_kv_cache_gb <= 0:
            raise ValueError("selfcheck_tolerance and vllm_kv_cache_gb must be > 0")
        object.__setattr__(self, "engine", canonical_engine(self.engine))
        if self.vllm_dtype not in (None, *VLLM_DTYPES):
            raise ValueError(
                f"vllm_dtype must be None or one of {VLLM_DTYPES}, got {self.vllm_dtype!r}"
            )
        if engine_spec(self.engine).needs_urls and not self.urls:
            raise ValueError(f"engine {self.engine} needs rollout.urls")
        if self.servers_per_model < 1 or len(self.urls) % self.servers_per_model:
            raise ValueError(
                f"servers_per_model must be >= 1 and divide len(urls) ({len(self.urls)}), "
                f"got {self.servers_per_model}"
            )
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 (advantages need a group), got {self.group_size}"
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.overlong_penalty and not 0 < self.overlong_cache < self.max_new_tokens:
            raise ValueError("overlong_cache must be in (0, max_new_tokens)")

    def _check_vllm_device(self) -> None:
        if self.vllm_device not in VLLM_DEVICES:
            raise ValueError(f"vllm_device must be one of {VLLM_DEVICES}, got {self.vllm_device!r}")
        _check_gpu_indices("rollout.devices", self.devices)
        if self.devices and self.vllm_device == "cpu":
            raise ValueError("rollout.devices names GPUs, but rollout.vllm_device is cpu")
        if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.devices and len(self.devices) % self.tensor_parallel:
            raise ValueError(
                f"rollout.devices {self.devices} cannot be cut into servers of "
                f"tensor_parallel_size {self.tensor_parallel}"
            )
        if not 0 < self.gpu_memory_utilization <= 1 or self.max_num_seqs < 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1] and max_num_seqs >= 1")

    @property
    def tensor_parallel(self) -> int:
        """GPUs one vLLM server spans: ``tensor_parallel_size``, else ``len(devices)`` or 1."""
        return self.tensor_parallel_size or len(self.devices) or 1


def _check_gpu_indices(name: str, devices: tuple[int, ...]) -> None:
    if any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        raise ValueError(f"{name} must be distinct GPU indices >= 0, got {devices}")


@dataclasses.dataclass(frozen=True)
class LoopSpec:
    """Rounds, batching, logging and checkpoints (docs/design.md §2 steps 1, 6, 9).

    Attributes:
      rounds: orchestration rounds to run.
      queries_per_round: B_global distinct training queries per round (paper: 16).
      groups_per_step: |Q_i|, query groups an agent's buffer must hold to take a policy
        step, and how many it pops (paper: 16).
      max_policy_steps: each agent's own budget of policy steps. An agent that has spent it
        leaves the pool: it is no longer routed, generates nothing and its buffer is
        emptied. The run stops when *every* agent has spent its budget (or after
        ``rounds``). The paper's "at most 6000 optimisation steps" counts all agents'
        steps, so the paper configs give each of the 4 agents 1500.
      seed: everything random derives from it (paper: 42).
      checkpoint_every: rounds between checkpoints (0 = only at the end).
      keep_checkpoints: how many checkpoints to keep.
      plot_every: rounds between plot refreshes (0 = only at the end).
      eval_tau: tau used at inference (defaults to router.tau; set it for the mismatch ablation).
      buffer_capacity: most groups an agent's LIFO buffer holds; pushing more evicts the
        oldest (bottom) ones, which a LIFO pop would reach last. At least ``groups_per_step``;
        None means ``4 * groups_per_step`` (see :attr:`buffer_limit`).
      feature_log_size: router features kept for the t-SNE plot, as a uniform reservoir
        sample of every routed query (``router_features.npz``, never the JSON state).
      probe_every: rounds between held-out probes (``coevo_jax.train.probe``; 0 = none). A
        probe runs before a round whose count of completed rounds is a multiple of it, and
        is logged under ``probe`` in that round's record (``rounds = k * probe_every + 1``
        ends on a probe).
      async_rollouts: generate round r+1 while round r's policy and router steps run
        (``coevo_jax.train.pipeline``): each round's groups are then one adapter version
        behind, so ``rollout.max_staleness`` must allow 1. Not in the paper.
      probe_size: probe queries, stratified by domain, from the mixture's ``probe_split``.
      probe_split: which held-out file of the data directory the probe samples.
      probe_max_new_tokens: greedy budget of a probe completion (None: rollout's budget).
    """

    rounds: int = 100
    queries_per_round: int = 16
    groups_per_step: int = 16
    max_policy_steps: int = 6000
    seed: int = 42
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    plot_every: int = 10
    eval_tau: float | None = None
    buffer_capacity: int | None = None
    feature_log_size: int = 4096
    probe_every: int = 0
    probe_size: int = 64
    probe_split: str = "eval_id"
    probe_max_new_tokens: int | None = None
    async_rollouts: bool = False

    def __post_init__(self):
        check_at_least(
            self,
            1,
            (
                "rounds",
                "queries_per_round",
                "groups_per_step",
                "max_policy_steps",
                "feature_log_size",
                "probe_size",
            ),
        )
        if self.checkpoint_every < 0 or self.plot_every < 0 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every/plot_every must be >= 0 and keep_checkpoints >= 1")
        if self.buffer_capacity is not None and self.buffer_capacity < self.groups_per_step:
            raise ValueError(
                f"buffer_capacity ({self.buffer_capacity}) must be >= groups_per_step "
                f"({self.groups_per_step}), or no policy step could ever be taken"
            )
        if self.probe_every < 0:
            raise ValueError(f"probe_every must be >= 0, got {self.probe_every}")
        if self.probe_max_new_tokens is not None and self.probe_max_new_tokens < 1:
            raise ValueError(f"probe_max_new_tokens must be >= 1, got {self.probe_max_new_tokens}")

    @property
    def buffer_limit(self) -> int:
        """Groups an agent's buffer may hold (``buffer_capacity`` or ``4 * groups_per_step``)."""
        return self.buffer_capacity or 4 * self.groups_per_step


@dataclasses.dataclass(frozen=True)
class ParallelSpec:
    """The training mesh (``coevo_jax.train.distributed``): sizes of its three axes.

    Attributes:
      data: pure data parallelism (backbone replicated, batch split).
      fsdp: batch split *and* backbone sharded (gathered per layer).
      tensor: heads and MLP width split.
      devices: GPU indices the trainer uses (empty: every GPU it sees); ``coevo train`` makes
        them its only visible ones before JAX starts
        (:func:`coevo_jax.parallel.mesh.configure_devices`). Must not overlap
        ``rollout.devices``.
      memory_fraction: share of each of its GPUs JAX preallocates
        (``XLA_PYTHON_CLIENT_MEM_FRACTION``; None: JAX's default, 0.75).

    All 1 (the default) means no mesh: the single-device loop. One size may be -1 (all the
    devices the others leave). A multi-process run (``jax.distributed``) needs a mesh; the
    product must equal the global device count.
    """

    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    devices: tuple[int, ...] = ()
    memory_fraction: float | None = None

    def __post_init__(self):
        _check_gpu_indices("parallel.devices", self.devices)
        if self.memory_fraction is not None and not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")
        sizes = (self.data, self.fsdp, self.tensor)
        if any(s == 0 or s < -1 for s in sizes):
            raise ValueError(f"data/fsdp/tensor must be positive or -1, got {sizes}")
        if sizes.count(-1) > 1:
            raise ValueError(f"at most one of data/fsdp/tensor may be -1, got {sizes}")

    @property
    def enabled(self) -> bool:
        return (self.data, self.fsdp, self.tensor) != (1, 1, 1)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A whole CERA-MoA run.

    ``setting: homogeneous`` stacks ``lora.n_agents`` adapters on ``model``;
    ``heterogeneous`` gives agent i its own backbone ``agent_models[i]`` (each with its
    adapter and rollout server), routed by ``router_model`` (default: ``model``).
    """

    setting: str = "homogeneous"
    model: ModelSpec = ModelSpec()
    router_model: ModelSpec | None = None
    agent_models: tuple[ModelSpec, ...] = ()
    lora: LoRAConfig = LoRAConfig()
    rl: RLConfig = RLConfig()
    router: RouterConfig = RouterConfig()
    data: DataSpec = DataSpec()
    rollout: RolloutSpec = RolloutSpec()
    loop: LoopSpec = LoopSpec()
    parallel: ParallelSpec = ParallelSpec()

    def __post_init__(self):
        if self.setting not in SETTINGS:
            raise ValueError(f"setting must be one of {SETTINGS}, got {self.setting!r}")
        if self.lora.n_agents != self.router.n_agents:
            raise ValueError(
                f"lora.n_agents ({self.lora.n_agents}) and router.n_agents ({self.router.n_agents}) must agree"
            )
        if self.setting == "heterogeneous":
            if len(self.agent_models) != self.lora.n_agents:
                raise ValueError(
                    f"heterogeneous setting needs one agent_models entry per agent "
                    f"({self.lora.n_agents}), got {len(self.agent_models)}"
                )
        elif self.agent_models:
            raise ValueError("agent_models is only for setting: heterogeneous")
        shared = sorted(set(self.parallel.devices) & set(self.rollout.devices))
        if shared:  # JAX preallocates its GPUs' memory: a vLLM beside it there cannot start
            raise ValueError(
                f"parallel.devices {self.parallel.devices} and rollout.devices "
                f"{self.rollout.devices} overlap on GPU(s) {shared}; the trainer and vLLM need "
                "GPUs of their own"
            )
        if self.rl.behavior_logprobs == "auto":
            # A server's bf16 kernels differ from the trainer's: see RLConfig.behavior_logprobs.
            choice = "engine" if engine_spec(self.rollout.engine).exact_logprobs else "recompute"
            object.__setattr__(self, "rl", dataclasses.replace(self.rl, behavior_logprobs=choice))
        stale = self.rollout.max_staleness
        if self.loop.async_rollouts and stale is not None and stale < 1:
            raise ValueError(
                "loop.async_rollouts trains on groups one adapter version old: "
                f"rollout.max_staleness must be >= 1 or unset, got {stale}"
            )
        if self.data.max_input_tokens > self.router.max_prompt_tokens:
            raise ValueError(
                f"data.max_input_tokens ({self.data.max_input_tokens}) exceeds "
                f"router.max_prompt_tokens ({self.router.max_prompt_tokens})"
            )

    @property
    def eval_tau(self) -> float:
        return self.router.tau if self.loop.eval_tau is None else self.loop.eval_tau


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Loads a YAML run config (default: ``configs/cpu_default.yaml``) with ``key=value`` overrides."""
    if path is None:
        path = CONFIG_DIR / "cpu_default.yaml"
        if not path.is_file():
            raise ConfigError(f"default config {path} is missing from this install")
    return load_yaml(TrainConfig, path, overrides)


# TRL's GRPOConfig names (TRL 1.16) that are ours under another name or in a section: a run
# that passes one is told the key to use instead. TRL's `max_completion_length` is the
# generation budget; ours (`rl.max_completion_length`) is Dr. GRPO's loss denominator.
TRL_NAMES = {
    "num_generations": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens",
    "epsilon": "rl.eps_low",
    "epsilon_high": "rl.eps_high",
    "importance_sampling_level": "rl.level",
    "gradient_checkpointing": "rl.remat",
    "scale_rewards": "rl.adv_scale",
    "gradient_accumulation_steps": "rl.micro_batches",
}
register_renames(TrainConfig, "TRL", TRL_NAMES)
