"""The project's own vLLM-compatible server, backed by the JAX sampler with multi-LoRA.

It implements the subset of vLLM's OpenAI-compatible API the bridge uses, with vLLM's JSON
shapes (checked in tests against vLLM 0.33's own pydantic models):

- ``GET /health``; ``GET /v1/models`` (the base model and every loaded adapter);
  ``GET /metrics`` (Prometheus text: completion calls served and sampler batches run);
- ``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` and
  ``POST /v1/unload_lora_adapter {"lora_name"}`` (plain-text 200 bodies, like vLLM);
- ``POST /v1/completions`` with ``prompt`` as token ids (or a list of them, or text when the
  model has a tokenizer), ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``seed``,
  ``stop_token_ids``, ``logprobs: 0``, ``return_token_ids``, ``return_tokens_as_token_ids``.

Log-probs are those of the sampling distribution (vLLM's ``processed_logprobs`` mode). Errors
are vLLM-style ``{"error": {"message", "type", "param", "code"}}`` with 400/404, and the
server keeps serving. Concurrent calls are batched into shared sampler calls
(``rollout_bridge.batching``: calls for different adapters, temperatures and seeds share one
batch when their token budget and stop set agree), one sampler call at a time (JAX owns the
cores); a row's sample depends only on its seed, never on its batch companions.

Run it with ``coevo serve --engine local`` or ``python -m rollout_bridge.server``.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse

from coevo_jax.models.config import ModelConfig
from coevo_jax.models.decoder import init_params
from coevo_jax.models.default import default_model_path
from coevo_jax.models.hf_loader import read_config_file
from coevo_jax.models.loading import load
from coevo_jax.models.sampler import GenerationResult
from coevo_jax.models.sampler import generate as sample
from rollout_bridge.batching import Batcher, Job
from rollout_bridge.local_engine import row_seed
from rollout_bridge.slots import AdapterSlots, SlotError


class BadRequest(ValueError):
    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class ServerBackend:
    """Model, tokenizer and adapter slots; turns completion requests into responses."""

    def __init__(
        self,
        params: Any,
        cfg: ModelConfig,
        tokenizer: Any = None,
        *,
        model_name: str = "base",
        max_loras: int = 4,
        max_lora_rank: int = 16,
        max_model_len: int | None = None,
        eos_ids: tuple[int, ...] | None = None,
        batch_wait_s: float = 0.02,
        max_num_seqs: int = 256,
    ):
        self.params, self.cfg, self.tokenizer = params, cfg, tokenizer
        self.model_name = model_name
        self.slots = AdapterSlots(cfg, max_loras, max_lora_rank)
        self.max_model_len = int(max_model_len or cfg.max_position_embeddings)
        if eos_ids is None:
            eos_ids = tuple(getattr(tokenizer, "eos_token_ids", ()) or cfg.eos_token_ids)
        self.eos_ids = tuple(int(i) for i in eos_ids)
        self.pad_id = int(getattr(tokenizer, "pad_token_id", 0) or 0)
        self.batcher = Batcher(self._run_batch, wait_s=batch_wait_s, max_rows=max_num_seqs)
        self.created = int(time.time())

    # ------------------------------------------------------------------ models
    def models(self) -> dict[str, Any]:
        cards = [self._card(self.model_name, root=self.model_name, parent=None)]
        for name in sorted(self.slots.names):
            cards.append(self._card(name, root=self.slots.paths.get(name), parent=self.model_name))
        return {"object": "list", "data": cards}

    def _card(self, name: str, root: str | None, parent: str | None) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "coevo-jax",
            "root": root,
            "parent": parent,
            "max_model_len": self.max_model_len,
            "permission": [],
        }

    # ------------------------------------------------------------------ completions
    def _prompts(self, prompt: Any) -> list[list[int]]:
        if isinstance(prompt, str):
            prompt = [prompt]
        if not isinstance(prompt, list) or not prompt:
            raise BadRequest(
                "prompt must be a non-empty string, token list or list of those", param="prompt"
            )
        if all(isinstance(t, int) for t in prompt):
            prompt = [prompt]
        out = []
        for p in prompt:
            if isinstance(p, str):
                if self.tokenizer is None:
                    raise BadRequest(
                        "this model has no tokenizer: send prompt as token ids", param="prompt"
                    )
                p = self.tokenizer.encode(p)
            if not isinstance(p, list) or not p or not all(isinstance(t, int) for t in p):
                raise BadRequest(
                    "each prompt must be a non-empty list of token ids", param="prompt"
                )
            bad = [t for t in p if not 0 <= t < self.cfg.vocab_size]
            if bad:
                raise BadRequest(
                    f"token id {bad[0]} out of vocabulary range [0, {self.cfg.vocab_size})",
                    param="prompt",
                )
            out.append(p)
        return out

    def _run_batch(self, jobs: list[Job]) -> list[Any]:
        """One sampler call for compatible jobs (equal keys); per job a GenerationResult slice,
        or a 404 BadRequest when its adapter was unloaded while it queued."""
        max_tokens, stops = jobs[0].key
        with self.slots.lock:  # adapter names and the weights they point at, read together
            weights = self.slots.weights
            slots = [
                -1
                if j.payload["model"] == self.model_name
                else self.slots.slot_of(j.payload["model"])
                for j in jobs
            ]
        live = [(j, s) for j, s in zip(jobs, slots, strict=True) if s is not None]
        out: list[Any] = [
            BadRequest(
                f"The model `{j.payload['model']}` does not exist.", status=404, param="model"
            )
            if s is None
            else None
            for j, s in zip(jobs, slots, strict=True)
        ]
        if live:
            res = sample(
                self.params,
                self.cfg,
                [p for j, _ in live for p in j.payload["prompts"]],
                max_new_tokens=max_tokens,
                temperature=[j.payload["temperature"] for j, _ in live for _ in range(j.rows)],
                top_p=[j.payload["top_p"] for j, _ in live for _ in range(j.rows)],
                seeds=[s for j, _ in live for s in j.payload["seeds"]],
                stop_ids=stops,
                lora=(weights, jnp.asarray([s for j, s in live for _ in range(j.rows)], jnp.int32)),
                ignore_eos=True,  # the key's stop set already holds the EOS ids when wanted
                pad_id=self.pad_id,
            )
            start = 0
            for k, s in enumerate(slots):
                if s is None:
                    continue
                sl = slice(start, start + jobs[k].rows)
                out[k] = GenerationResult(res.tokens[sl], res.logprobs[sl], res.finish_reasons[sl])
                start += jobs[k].rows
        return out

    def close(self) -> None:
        """Stops the batching thread (pending calls finish first)."""
        self.batcher.close()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        model = body.get("model") or self.model_name
        if model != self.model_name and self.slots.slot_of(model) is None:
            raise BadRequest(f"The model `{model}` does not exist.", status=404, param="model")
        prompts = self._prompts(body.get("prompt"))
        n = _int(body, "n", 1, lo=1)
        max_tokens = _int(body, "max_tokens", 16, lo=1)
        temperature = _float(body, "temperature", 1.0, lo=0.0)
        top_p = _float(body, "top_p", 1.0, lo=1e-9, hi=1.0)
        seed = body.get("seed")
        seed = int(seed) if seed is not None else int(uuid.uuid4().int % (2**31))
        stop_ids = tuple(int(t) for t in (body.get("stop_token_ids") or ()))
        ignore_eos = bool(body.get("ignore_eos", False))
        as_ids = bool(body.get("return_tokens_as_token_ids", False))
        want_logprobs = body.get("logprobs") is not None
        for p in prompts:
            if len(p) + max_tokens > self.max_model_len:
                raise BadRequest(
                    f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                    f"requested {len(p) + max_tokens} tokens ({len(p)} in the messages, {max_tokens} in the "
                    "completion). Please reduce the length of the messages or completion.",
                    param="max_tokens",
                )
        rows = [(pi, j) for pi in range(len(prompts)) for j in range(n)]
        # The sampler adds cfg's EOS ids unless told not to, so the stop set is spelled out here.
        stops = () if ignore_eos else self.eos_ids + tuple(self.cfg.eos_token_ids)
        job = Job(
            key=(max_tokens, tuple(sorted(set(stops + stop_ids)))),
            rows=len(rows),
            payload={
                "model": model,
                "prompts": [prompts[pi] for pi, _ in rows],
                "seeds": [row_seed(seed, k) for k in range(len(rows))],
                "temperature": temperature,
                "top_p": top_p,
            },
        )
        res = self.batcher.submit(job).result()
        choices = []
        completion_tokens = 0
        for k, (pi, _) in enumerate(rows):
            ids = [int(t) for t in res.tokens[k]]
            completion_tokens += len(ids)
            lps = [float(x) for x in np.asarray(res.logprobs[k], np.float32)]
            toks = [
                f"token_id:{t}" if as_ids or self.tokenizer is None else self.tokenizer.decode([t])
                for t in ids
            ]
            text = self.tokenizer.decode(ids) if self.tokenizer is not None else ""
            logprobs = None
            if want_logprobs:
                offsets = (
                    list(np.cumsum([0] + [len(t) for t in toks[:-1]]).tolist()) if toks else []
                )
                logprobs = {
                    "text_offset": offsets,
                    "token_logprobs": lps,
                    "tokens": toks,
                    "top_logprobs": [{toks[i]: lps[i]} for i in range(len(ids))],
                }
            stop_reason = ids[-1] if res.finish_reasons[k] == "stop" and ids else None
            choices.append(
                {
                    "index": k,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": res.finish_reasons[k],
                    "stop_reason": stop_reason,
                    "token_ids": ids if body.get("return_token_ids") else None,
                    "prompt_token_ids": prompts[pi] if body.get("return_token_ids") else None,
                }
            )
        prompt_tokens = sum(len(p) for p in prompts) * n
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _int(body: dict, key: str, default: int, lo: int) -> int:
    v = body.get(key, default)
    if v is None:
        v = default
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise BadRequest(f"{key} must be an integer >= {lo}, got {v!r}", param=key)
    return v


def _float(body: dict, key: str, default: float, lo: float, hi: float | None = None) -> float:
    v = body.get(key, default)
    if v is None:
        v = default
    if (
        not isinstance(v, (int, float))
        or isinstance(v, bool)
        or v < lo
        or (hi is not None and v > hi)
    ):
        raise BadRequest(
            f"{key} must be a number in [{lo}, {hi if hi is not None else 'inf'}], got {v!r}",
            param=key,
        )
    return float(v)


def create_app(backend: ServerBackend):
    """The FastAPI application serving ``backend``."""
    app = FastAPI(title="coevo-jax rollout server", version="0.1.0")

    def err(message: str, status: int, param: str | None = None):
        return JSONResponse(error_body(message, status, param), status_code=status)

    async def read_json(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw or b"null")
        except json.JSONDecodeError as e:
            raise BadRequest(f"malformed JSON body: {e}") from e

    @app.exception_handler(BadRequest)
    async def _bad(_, exc: BadRequest):
        return err(str(exc), exc.status, exc.param)

    @app.exception_handler(SlotError)
    async def _slot(_, exc: SlotError):
        return err(str(exc), exc.status)

    @app.get("/health")
    async def health():
        return PlainTextResponse("")

    @app.get("/metrics")
    async def metrics():
        # Prometheus text like vLLM's /metrics; calls / batches > 1 means calls were merged.
        b = backend.batcher
        return PlainTextResponse(
            f"coevo:completion_calls_total {b.jobs}\ncoevo:sampler_batches_total {b.batches}\n"
        )

    @app.get("/v1/models")
    async def models():
        return backend.models()

    @app.post("/v1/load_lora_adapter")
    async def load_lora(request: Request):
        body = await read_json(request)
        if not isinstance(body, dict) or not body.get("lora_name") or not body.get("lora_path"):
            raise BadRequest("Both 'lora_name' and 'lora_path' must be provided.")
        await run_in_threadpool(backend.slots.load, str(body["lora_name"]), str(body["lora_path"]))
        return PlainTextResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora(request: Request):
        body = await read_json(request)
        if not isinstance(body, dict) or not body.get("lora_name"):
            raise BadRequest("'lora_name' needs to be provided to unload a LoRA adapter.")
        backend.slots.unload(str(body["lora_name"]))
        return PlainTextResponse(
            f"Success: LoRA adapter '{body['lora_name']}' removed successfully."
        )

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await read_json(request)
        # A JSONResponse skips FastAPI's jsonable_encoder walk over every token of every
        # choice (~10 ms for 16 x 64 tokens, more than the whole tiny-model generation).
        return JSONResponse(await run_in_threadpool(backend.complete, body))

    return app


def backend_from_args(args: argparse.Namespace) -> ServerBackend:
    """Builds the backend from ``--model``/``--random-config`` and the LoRA limits."""
    if args.random_config:
        cfg = read_config_file(args.random_config)  # the check `coevo serve` runs first
        params = init_params(cfg, jax.random.PRNGKey(args.seed))
        tokenizer = None
        name = args.served_model_name or "random"
    else:
        path = args.model or str(default_model_path())
        model, tokenizer = load(path)
        params, cfg = model.params, model.config
        name = args.served_model_name or (args.model or "SmolLM2-135M-Instruct")
    return ServerBackend(
        params,
        cfg,
        tokenizer,
        model_name=name,
        max_loras=args.max_loras,
        max_lora_rank=args.max_lora_rank,
        max_model_len=args.max_model_len,
        batch_wait_s=args.batch_wait_ms / 1e3,
        max_num_seqs=args.max_num_seqs,
    )


def add_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="HF directory or .gguf (default: the embedded SmolLM2)")
    p.add_argument(
        "--random-config", help="serve a random-initialised model of this HF config.json (tests)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --random-config weights")
    p.add_argument("--served-model-name", help="name the base model answers to")
    p.add_argument("--max-loras", type=int, default=4)
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=20.0,
        help="how long a call waits for concurrent calls to share its sampler batch",
    )
    p.add_argument("--max-num-seqs", type=int, default=256, help="rows per sampler batch")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    backend = backend_from_args(args)
    print(f"serving {backend.model_name} at http://{args.host}:{args.port}", flush=True)
    uvicorn.run(create_app(backend), host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="coevo-jax vLLM-compatible rollout server")
    add_server_args(p)
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
