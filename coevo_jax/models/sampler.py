"""Jitted batched generation with a KV cache over left-padded prompts.

One compiled function does the whole request: a prefill over the left-padded prompts (only the
last position goes through the LM head), then a ``lax.while_loop`` of one-token decode steps
that exits as soon as every row has stopped. Compiles are keyed by the bucketed batch size
(powers of two up to 8, then multiples of 8), prompt length (``2^k`` or ``1.5 * 2^k``) and
new-token budget (powers of two up to 64, then multiples of 64), so
ragged workloads reuse a handful of executables; temperature, top-p, seeds, stop ids and the
real token budget are traced values and never recompile.

Sampling semantics (per row, at every step):

* ``temperature > 0``: logits are divided by the temperature, then top-p keeps the smallest
  set of highest-probability tokens whose mass reaches ``top_p`` (every token whose
  probability equals the cut-off's is kept too), and the token is drawn from that set,
  renormalised. The reported log-prob is the token's log-probability **under exactly that
  distribution**: ``log_softmax(logits / T)`` restricted to the kept set and renormalised over
  it (what vLLM reports with ``--logprobs-mode processed_logprobs``). With ``temperature=1``
  and ``top_p=1`` it equals the log-softmax of a teacher-forced forward pass.
* ``temperature == 0`` (greedy): the token is the arg-max of the logits; since the sampling
  distribution is then a point mass, the reported log-prob is instead the model's own
  ``log_softmax(logits)`` at that token (temperature 1, no top-p), which is what a scorer
  wants.

Randomness is a function of ``(seed of the row, step)`` only: each step draws one uniform per
row from ``fold_in(PRNGKey(seed), step)`` and inverts the row's CDF with it. A row's result
therefore does not depend on which other rows share the batch (up to float rounding of
differently shaped matmuls), and one uniform per row is far cheaper on CPU than Gumbel noise
over the whole vocabulary.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from coevo_jax._errors import UserError
from coevo_jax.lora.weights import LoRAWeights
from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import KVCache, forward, lm_head

Params = dict[str, Any]

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """What ``generate`` returns; all lists are per prompt, in the order given.

    Attributes:
      tokens: completion ids (a stop token that ended the row is included).
      logprobs: log-prob of each completion id under the sampling distribution (see the module
        docstring for the exact definition, including greedy rows).
      finish_reasons: ``"stop"`` (a stop/EOS id was sampled) or ``"length"`` (budget spent).
    """

    tokens: list[list[int]]
    logprobs: list[list[float]]
    finish_reasons: list[str]


def bucket(n: int, base: int, minimum: int = 1) -> int:
    """``n`` rounded up to a power of two while ``<= base``, else to a multiple of ``base``."""
    n = max(int(n), minimum)
    if n <= base:
        return 1 << (n - 1).bit_length()
    return -(-n // base) * base


def prompt_bucket(n: int, minimum: int = 16) -> int:
    """Smallest size ``>= n`` of the form ``2^k`` or ``1.5 * 2^k`` (at most 1/3 padding, and a
    logarithmic number of compiled prompt lengths)."""
    size = max(int(minimum), 1)
    while size < n:
        half = size // 2
        size = size + half if half and (size & (size - 1)) == 0 else (size // 3) * 4
    return size


def sampling_logprobs(logits: jax.Array, temperature: jax.Array, top_p: jax.Array) -> jax.Array:
    """Log-probabilities of the sampling distribution, ``-inf`` outside the top-p set.

    Args:
      logits: ``[B, V]`` float32.
      temperature: ``[B]``; rows with 0 are treated as temperature 1 here (greedy rows report
        the model's own log-probs).
      top_p: ``[B]`` in (0, 1].

    Returns:
      ``[B, V]`` float32 log-probs that sum (in prob space) to 1 over the kept tokens.
    """
    chex.assert_rank(logits, 2)
    t = jnp.where(temperature > 0, temperature, 1.0).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32) / t[:, None], axis=-1)

    def nucleus(lp):
        p = jnp.exp(lp)
        desc = -jnp.sort(-p, axis=-1)
        mass_above = jnp.cumsum(desc, axis=-1) - desc
        # smallest kept probability: the last sorted token whose predecessors hold < top_p
        keep_sorted = mass_above < top_p[:, None]
        cutoff = jnp.min(jnp.where(keep_sorted, desc, jnp.inf), axis=-1)
        kept = jnp.where(p >= cutoff[:, None], lp, -jnp.inf)
        return kept - jax.nn.logsumexp(kept, axis=-1, keepdims=True)

    # the sort is the costliest part of a step; skip it when no row asks for top-p
    return jax.lax.cond(jnp.any(top_p < 1.0), nucleus, lambda lp: lp, logp)


def sample_step(
    logits: jax.Array, keys: jax.Array, temperature: jax.Array, top_p: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """One token per row and its log-prob (module docstring semantics).

    Args:
      logits: ``[B, V]`` float32.
      keys: ``[B]`` PRNG keys (one per row and step).
      temperature, top_p: ``[B]``.

    Returns:
      ``(tokens [B] int32, logprobs [B] float32)``.
    """
    logp = sampling_logprobs(logits, temperature, top_p)
    probs = jnp.exp(logp)
    cdf = jnp.cumsum(probs, axis=-1)
    # u in (0, 1] so a zero-probability token can never be the first with cdf >= u * total
    u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)
    drawn = jnp.sum(cdf < (u * cdf[:, -1])[:, None], axis=-1)
    drawn = jnp.minimum(drawn, logits.shape[-1] - 1).astype(jnp.int32)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    tokens = jnp.where(temperature > 0, drawn, greedy)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]


@functools.partial(jax.jit, static_argnames=("cfg", "n_new", "compute_dtype"))
def generate_arrays(
    params: Params,
    cfg: ModelConfig,
    prompt_ids: jax.Array,
    prompt_mask: jax.Array,
    seeds: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    stop_ids: jax.Array,
    max_new_tokens: jax.Array,
    lora: tuple[LoRAWeights, jax.Array] | None = None,
    *,
    n_new: int,
    compute_dtype: Any = jnp.float32,
    pad_id: int | jax.Array = 0,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The compiled core of ``generate`` on device arrays.

    Args:
      params: decoder params (``docs/interfaces.md``).
      cfg: static model config.
      prompt_ids: ``[B, P]`` int32, left-padded.
      prompt_mask: ``[B, P]``, 1 = real token; every row needs at least one.
      seeds: ``[B]`` uint32/int per-row seeds.
      temperature, top_p: ``[B]`` float32.
      stop_ids: ``[K]`` int32 ids that end a row (pad the array with -1).
      max_new_tokens: scalar int32, ``<= n_new``.
      lora: ``(LoRAWeights, agent_ids [B])`` or None.
      n_new: static capacity of the output (and of the cache beyond the prompt).
      compute_dtype: activations and KV cache dtype.
      pad_id: id written after a row stopped.

    Returns:
      ``tokens [B, n_new] int32`` (pad after the end), ``logprobs [B, n_new] float32`` (0 after
      the end), ``lengths [B] int32`` (completion length, stop token included),
      ``stopped [B] bool`` (ended by a stop id).
    """
    b, p_len = prompt_ids.shape
    chex.assert_shape(prompt_mask, (b, p_len))
    chex.assert_shape([seeds, temperature, top_p], (b,))
    s_len = p_len + n_new
    mask = jnp.concatenate([prompt_mask.astype(jnp.int32), jnp.ones((b, n_new), jnp.int32)], axis=1)
    cache = KVCache.init(cfg, b, s_len, compute_dtype)
    base_keys = jax.vmap(jax.random.PRNGKey)(seeds.astype(jnp.uint32))
    max_new = jnp.minimum(jnp.asarray(max_new_tokens, jnp.int32), n_new)

    def run(ids, cache, index):
        out = forward(
            params,
            cfg,
            ids,
            attention_mask=mask,
            lora=lora,
            hidden_layers=(cfg.num_layers,),
            stop_after_hidden=True,
            cache=cache,
            cache_index=index,
            compute_dtype=compute_dtype,
        )
        last = out.hidden_states[cfg.num_layers][:, -1]
        return lm_head(params, cfg, last, compute_dtype), out.cache

    def sample(logits, step, done):
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(base_keys, step)
        tok, lp = sample_step(logits, keys, temperature, top_p)
        tok = jnp.where(done, pad_id, tok)
        lp = jnp.where(done, 0.0, lp)
        hit = jnp.any(tok[:, None] == stop_ids[None, :], axis=-1) & ~done
        return tok, lp, hit

    logits, cache = run(prompt_ids, cache, 0)
    done0 = jnp.zeros((b,), bool)
    tok, lp, hit = sample(logits, 0, done0)
    tokens = jnp.full((b, n_new), pad_id, jnp.int32).at[:, 0].set(tok)
    logprobs = jnp.zeros((b, n_new), jnp.float32).at[:, 0].set(lp)
    lengths = jnp.ones((b,), jnp.int32)

    def cond(state):
        step, _, _, done, *_ = state
        return (step < max_new) & ~jnp.all(done)

    def body(state):
        step, last, cache, done, stopped, lengths, tokens, logprobs = state
        logits, cache = run(last[:, None], cache, p_len + step - 1)
        tok, lp, hit = sample(logits, step, done)
        tokens = jax.lax.dynamic_update_slice(tokens, tok[:, None], (0, step))
        logprobs = jax.lax.dynamic_update_slice(logprobs, lp[:, None], (0, step))
        lengths = lengths + (~done).astype(jnp.int32)
        return step + 1, tok, cache, done | hit, stopped | hit, lengths, tokens, logprobs

    state = (jnp.int32(1), tok, cache, hit, hit, lengths, tokens, logprobs)
    _, _, _, _, stopped, lengths, tokens, logprobs = jax.lax.while_loop(cond, body, state)
    lengths = jnp.minimum(lengths, max_new)
    return tokens, logprobs, lengths, stopped


class SamplingError(UserError, ValueError):
    """A temperature or top-p outside its range: the caller's setting, not a bug."""


def check_sampling(
    temperature: Any, top_p: Any, *, names: tuple[str, str] = ("temperature", "top_p")
) -> None:
    """Raises :class:`SamplingError` unless every temperature is finite and >= 0 and every
    top-p is in (0, 1]. :func:`generate` checks its rows with it; a command checks its flags
    with it (``names``: how the message names them) before it loads a model.
    """
    temps = np.asarray(temperature, np.float32)
    tops = np.asarray(top_p, np.float32)
    if (temps < 0).any() or not np.isfinite(temps).all():
        raise SamplingError(f"{names[0]} must be finite and >= 0, got {temps.tolist()}")
    if not ((tops > 0) & (tops <= 1)).all():  # NaN fails too
        raise SamplingError(f"{names[1]} must be in (0, 1], got {tops.tolist()}")


def _per_row(value, n: int, name: str, dtype) -> np.ndarray:
    arr = np.asarray(value, dtype=dtype)
    if arr.ndim == 0:
        return np.full((n,), arr, dtype)
    if arr.shape != (n,):
        raise ValueError(
            f"{name} must be a scalar or have one entry per prompt ({n}), got {arr.shape}"
        )
    return arr


def generate(
    params: Params,
    cfg: ModelConfig,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = 64,
    temperature: float | Sequence[float] = 1.0,
    top_p: float | Sequence[float] = 1.0,
    seeds: Sequence[int] | None = None,
    stop_ids: Sequence[int] = (),
    lora: tuple[LoRAWeights, Any] | None = None,
    *,
    ignore_eos: bool = False,
    pad_id: int = 0,
    compute_dtype: Any = jnp.float32,
) -> GenerationResult:
    """Sample completions for a batch of token-id prompts of unequal lengths.

    Args:
      params: decoder params pytree.
      cfg: its ``ModelConfig``.
      prompts: one list of ids per row (at least one id each).
      max_new_tokens: completion budget per row.
      temperature: scalar or per row; 0 = greedy.
      top_p: scalar or per row, in (0, 1].
      seeds: one int per row; None draws fresh ones from the OS. The same seed and prompt give
        the same completion whatever else is in the batch.
      stop_ids: ids that end a row (returned as its last token). ``cfg.eos_token_ids`` are added
        unless ``ignore_eos``.
      lora: ``(LoRAWeights, agent_ids)``, one agent id per row (-1 = base model).
      ignore_eos: do not stop on ``cfg.eos_token_ids`` (benchmarks with a fixed length).
      pad_id: id used for left padding (masked, so it never influences results).
      compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` activations and KV cache.

    Returns:
      ``GenerationResult`` (see its docstring; log-prob semantics in the module docstring).
    """
    n = len(prompts)
    if n == 0:
        return GenerationResult([], [], [])
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    lens = [len(p) for p in prompts]
    if min(lens) < 1:
        raise ValueError(f"prompt {lens.index(min(lens))} is empty; every prompt needs a token")
    temps = _per_row(temperature, n, "temperature", np.float32)
    tops = _per_row(top_p, n, "top_p", np.float32)
    check_sampling(temps, tops)
    if seeds is None:
        seeds = np.random.SeedSequence().generate_state(n)
    seeds = _per_row(np.asarray(seeds, np.int64) % (2**32), n, "seeds", np.uint32)
    stops = sorted(
        set(int(s) for s in stop_ids) | (set() if ignore_eos else set(cfg.eos_token_ids))
    )

    # buckets: rows and stop ids padded, prompt length and budget rounded up
    b = bucket(n, 8)
    p_len = prompt_bucket(max(lens))
    n_new = bucket(max_new_tokens, 64, minimum=16)
    if p_len + n_new > cfg.max_position_embeddings:
        p_len = max(lens)
        n_new = max_new_tokens
    ids = np.full((b, p_len), pad_id, np.int32)
    mask = np.zeros((b, p_len), np.int32)
    for i, p in enumerate(prompts):
        ids[i, p_len - len(p) :] = p
        mask[i, p_len - len(p) :] = 1
    mask[n:, -1] = 1  # filler rows: one masked-in pad token, results discarded
    pad_rows = b - n
    temps = np.concatenate([temps, np.zeros(pad_rows, np.float32)])
    tops = np.concatenate([tops, np.ones(pad_rows, np.float32)])
    seeds = np.concatenate([seeds, np.zeros(pad_rows, np.uint32)])
    stop_arr = np.full((bucket(max(len(stops), 1), 8),), -1, np.int32)
    stop_arr[: len(stops)] = stops
    if lora is not None:
        weights, agent_ids = lora
        agent_ids = _per_row(agent_ids, n, "lora agent_ids", np.int32)
        lora = (weights, jnp.asarray(np.concatenate([agent_ids, -np.ones(pad_rows, np.int32)])))

    # stops are handled on the host side of cfg; dropping them shares compiles across EOS sets
    jit_cfg = dataclasses.replace(cfg, eos_token_ids=()) if cfg.eos_token_ids else cfg
    tokens, logprobs, lengths, stopped = jax.device_get(
        generate_arrays(
            params,
            jit_cfg,
            jnp.asarray(ids),
            jnp.asarray(mask),
            jnp.asarray(seeds),
            jnp.asarray(temps),
            jnp.asarray(tops),
            jnp.asarray(stop_arr),
            jnp.asarray(max_new_tokens, jnp.int32),
            lora,
            n_new=n_new,
            compute_dtype=compute_dtype,
            pad_id=pad_id,
        )
    )
    out_tokens, out_lps, reasons = [], [], []
    for i in range(n):
        k = int(lengths[i])
        out_tokens.append(tokens[i, :k].tolist())
        out_lps.append(logprobs[i, :k].tolist())
        reasons.append(FINISH_STOP if stopped[i] else FINISH_LENGTH)
    return GenerationResult(out_tokens, out_lps, reasons)
