"""A torch-free tokenizer with chat template, from a GGUF file or an HF model directory.

The BPE itself is HF ``tokenizers`` (Rust). What is written here is the glue:

* **GGUF.** A GGUF carries no ``tokenizer.json``, only llama.cpp metadata (tokens, merges,
  token types, special ids, chat template). transformers can turn that into a tokenizer, but its
  GGUF path is gated on torch, which this library never imports, so the byte-level BPE is
  rebuilt here from the same metadata. The pre-tokenizer follows llama.cpp's
  ``tokenizer.ggml.pre`` name (e.g. SmolLM splits digits one by one, then applies GPT-2's
  byte-level regex). Only byte-level BPE (``tokenizer.ggml.model == "gpt2"``) is supported;
  a sentencepiece GGUF should be loaded from its HF directory instead.
* **Chat template.** Rendered with jinja2 configured as transformers configures it (sandboxed,
  ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, a non-escaping ``tojson``,
  ``raise_exception``, ``strftime_now``, special tokens as variables), so prompts are
  byte-identical to ``AutoTokenizer.apply_chat_template``. Thinking mode is switched off
  (``enable_thinking=False``) unless the caller asks otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as _Backend

from coevo_jax.models.gguf_file import read_metadata

# llama.cpp token types (gguf.TokenType): 3 = CONTROL (special), 4 = USER_DEFINED (added, whole)
_CONTROL, _USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_level_pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """The split that llama.cpp applies for ``tokenizer.ggml.pre == pre``."""
    if pre in ("smollm", "starcoder", "refact"):
        # digits one by one, then GPT-2's regex (what these models' tokenizer.json do)
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    split = {
        "llama3": _LLAMA3_SPLIT,
        "llama-v3": _LLAMA3_SPLIT,
        "llama-bpe": _LLAMA3_SPLIT,
        "smaug-bpe": _LLAMA3_SPLIT,
        "qwen2": _QWEN2_SPLIT,
        "deepseek-r1-qwen": _QWEN2_SPLIT,
    }.get(pre or "")
    if split is None:  # "gpt2", "default" and unknown names: GPT-2's own regex
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (assistant-mask marker)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(
            lineno
        )

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja's own tojson HTML-escapes; chat templates expect plain JSON
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=16)
def _compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class Tokenizer:
    """Text <-> ids and chat prompts, with no torch.

    Attributes:
      backend: the ``tokenizers.Tokenizer`` doing the BPE.
      chat_template: jinja source, or None when the model has none.
      special_tokens: ``{"bos_token": str, "eos_token": str, ...}`` as chat templates see them.
      eos_token_ids: ids that end a generation (the EOS id, plus any extra ones the model's
        generation config lists).
      pad_token_id: the id used to left-pad prompts (EOS when the model names no pad token).
      bos_token_id: the BOS id or None.
      add_bos_token: whether ``encode(..., add_special_tokens=True)`` prepends BOS.
    """

    def __init__(
        self,
        backend: _Backend,
        *,
        chat_template: str | None,
        special_tokens: Mapping[str, str | None],
        eos_token_ids: Sequence[int],
        pad_token_id: int | None,
        bos_token_id: int | None = None,
        add_bos_token: bool = False,
    ):
        if not eos_token_ids:
            raise ValueError("Tokenizer needs at least one EOS token id")
        self.backend = backend
        self.chat_template = chat_template
        self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = int(self.eos_token_ids[0] if pad_token_id is None else pad_token_id)
        self.bos_token_id = None if bos_token_id is None else int(bos_token_id)
        self.add_bos_token = bool(add_bos_token and self.bos_token_id is not None)
        if self.add_bos_token:
            bos = self.backend.id_to_token(self.bos_token_id)
            self.backend.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A",
                pair=f"{bos} $A {bos} $B",
                special_tokens=[(bos, self.bos_token_id)],
            )

    # ---------------------------------------------------------------- text <-> ids
    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (base vocabulary + added tokens)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int:
        return self.eos_token_ids[0]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings in ``text`` map to their single ids."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = False
    ) -> list[list[int]]:
        return [
            e.ids
            for e in self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        ]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.backend.id_to_token(int(i)) for i in ids]

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    # ---------------------------------------------------------------- chat
    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        enable_thinking: bool = False,
        **kwargs: Any,
    ) -> str:
        """The prompt text for ``messages`` (``[{"role": ..., "content": ...}, ...]``).

        Rendered exactly as transformers renders it. ``enable_thinking`` is passed to the
        template (templates that do not know it ignore it); extra ``kwargs`` override the
        special-token variables, as in transformers. Encode the result with
        ``add_special_tokens=False``: the template writes any BOS itself.
        """
        if self.chat_template is None:
            raise ValueError(
                "This tokenizer has no chat template; format the prompt yourself and call encode()."
            )
        variables = {**self.special_tokens, "enable_thinking": enable_thinking, **kwargs}
        return _compile_template(self.chat_template).render(
            messages=list(messages),
            tools=None if tools is None else list(tools),
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )

    def encode_chat(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, **kwargs
    ) -> list[int]:
        """``encode(apply_chat_template(messages, ...))``."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt, **kwargs))

    # ---------------------------------------------------------------- constructors
    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any], *, source: str = "GGUF") -> Tokenizer:
        """Build from GGUF key/values (``tokenizer.ggml.*``, ``tokenizer.chat_template``).

        Args:
          meta: key -> decoded value (strings as ``str``, arrays as lists).
          source: the file name, for error messages.
        """
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(
                f"{source}: tokenizer.ggml.model is {kind!r}; only byte-level BPE ('gpt2') GGUF "
                "tokenizers are supported. Load the model from its HF directory instead."
            )
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in meta:
                raise ValueError(f"{source}: missing GGUF metadata {key!r}")
        tokens = list(meta["tokenizer.ggml.tokens"])
        types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
        vocab = {tok: i for i, tok in enumerate(tokens)}
        backend = _Backend(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        backend.pre_tokenizer = _byte_level_pre_tokenizer(meta.get("tokenizer.ggml.pre"))
        backend.decoder = decoders.ByteLevel()
        control = [t for t, ty in zip(tokens, types, strict=True) if ty == _CONTROL]
        user = [t for t, ty in zip(tokens, types, strict=True) if ty == _USER_DEFINED]
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
        if user:
            backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])

        def token(key):
            i = meta.get(f"tokenizer.ggml.{key}")
            return None if i is None or not 0 <= int(i) < len(tokens) else int(i)

        bos, eos, unk, pad = (
            token(k)
            for k in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")
        )
        if eos is None:
            raise ValueError(f"{source}: GGUF metadata has no tokenizer.ggml.eos_token_id")
        eot = token("eot_token_id")
        eos_ids = (eos,) + ((eot,) if eot is not None and eot != eos else ())
        named = {"bos_token": bos, "eos_token": eos, "unk_token": unk, "pad_token": pad}
        return cls(
            backend,
            chat_template=meta.get("tokenizer.chat_template"),
            special_tokens={k: None if i is None else tokens[i] for k, i in named.items()},
            eos_token_ids=eos_ids,
            pad_token_id=pad,
            bos_token_id=bos,
            add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        )

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> Tokenizer:
        """Read only the tokenizer metadata of a GGUF file."""
        return cls.from_gguf_metadata(read_metadata(path), source=os.fspath(path))

    @classmethod
    def from_hf_dir(cls, directory: str | os.PathLike) -> Tokenizer | None:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json``, ``generation_config.json``).

        Returns None when the directory has no ``tokenizer.json``. The chat template comes from
        ``tokenizer_config.json`` or a ``chat_template.jinja`` file; extra EOS ids come from
        ``generation_config.json``'s ``eos_token_id``.
        """
        directory = os.fspath(directory)
        tok_file = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(tok_file):
            return None
        try:
            backend = _Backend.from_file(tok_file)
        except Exception as e:  # tokenizers raises a bare Exception on a bad file
            raise ValueError(f"{tok_file}: not a valid tokenizers JSON file ({e})") from e
        config = _read_json(os.path.join(directory, "tokenizer_config.json"))
        gen = _read_json(os.path.join(directory, "generation_config.json"))

        def token_text(value):
            if isinstance(value, dict):  # serialised AddedToken
                return value.get("content")
            return value

        special = {
            k: token_text(config.get(k))
            for k in ("bos_token", "eos_token", "unk_token", "pad_token")
        }
        for added in (config.get("added_tokens_decoder") or {}).values():
            # tokens tokenizer_config marks special must be special in the backend too
            if added.get("special") and backend.token_to_id(added["content"]) is not None:
                backend.add_special_tokens(
                    [AddedToken(added["content"], special=True, normalized=False)]
                )

        def tid(name):
            text = special.get(name)
            return None if text is None else backend.token_to_id(text)

        eos_ids: list[int] = []
        if tid("eos_token") is not None:
            eos_ids.append(tid("eos_token"))
        extra = gen.get("eos_token_id")
        for i in extra if isinstance(extra, list) else [extra] if extra is not None else []:
            if int(i) not in eos_ids:
                eos_ids.append(int(i))
        if not eos_ids:
            raise ValueError(
                f"{directory}: no EOS token (tokenizer_config.json eos_token or "
                "generation_config.json eos_token_id)"
            )
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default", next(iter(named.values()), None))
        jinja_file = os.path.join(directory, "chat_template.jinja")
        if template is None and os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read()
        return cls(
            backend,
            chat_template=template,
            special_tokens=special,
            eos_token_ids=eos_ids,
            pad_token_id=tid("pad_token"),
            bos_token_id=tid("bos_token"),
            # tokenizer.json's own post-processor already adds BOS where the model wants it
            add_bos_token=False,
        )


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON ({e})") from e
