"""A tiny random Llama plus a character tokenizer, for fast closed-loop tests."""

import jax

from coevo_jax.models import init_params
from coevo_jax.train.loop import Backbone
from tests.helpers import tiny_model_config

VOCAB = 96  # ids 0..2 special, then printable ASCII from 32


class CharTokenizer:
    eos_token_ids = (1,)
    pad_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [3 + (ord(c) - 32) % (VOCAB - 3) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(32 + (i - 3)) for i in ids if i >= 3)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + (
            "<a>" if add_generation_prompt else ""
        )


def tiny_backbone(seed: int = 0, layers: int = 4) -> Backbone:
    cfg = tiny_model_config(
        "llama", vocab_size=VOCAB, num_layers=layers, max_position_embeddings=512
    )
    return Backbone(init_params(cfg, jax.random.PRNGKey(seed)), cfg, CharTokenizer())


def tiny_records(n: int = 12):
    recs = []
    for i in range(n):
        cls = "math" if i % 2 == 0 else "reasoning"
        recs.append(
            {
                "id": f"r{i}",
                "source": "synthetic",
                "split": "train",
                "class": cls,
                "problem": f"{'add' if cls == 'math' else 'pick'} {i}",
                "true_answer": str(i),
            }
        )
    return recs
