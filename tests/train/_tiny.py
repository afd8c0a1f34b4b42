"""A tiny random Llama, a character tokenizer and a tiny loop config, for closed-loop tests."""

import jax

from coevo_jax._config import from_dict
from coevo_jax.models import init_params
from coevo_jax.train.config import TrainConfig
from coevo_jax.train.loop import Backbone, Trainer
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


def tiny_config(**loop) -> TrainConfig:
    """Two rank-2 agents, a small router, groups of 4 and 8 new tokens; 3 rounds of 4 queries.

    ``loop`` overrides fields of the ``loop`` section (``rounds``, ``checkpoint_every``, ...).
    """
    return from_dict(
        TrainConfig,
        {
            "lora": {"n_agents": 2, "rank": 2, "alpha": 4, "dropout": 0.0},
            "rl": {
                "learning_rate": 1e-2,
                "warmup_steps": 0,
                "decay_steps": 100,
                "compute_dtype": "float32",
                "remat": False,
                "beta": 1e-3,
            },
            "router": {
                "n_agents": 2,
                "hidden": 16,
                "out_dim": 8,
                "max_prompt_tokens": 64,
                "lr": 1e-2,
            },
            "data": {"max_input_tokens": 64},
            "rollout": {"group_size": 4, "max_new_tokens": 8},
            "loop": {
                "rounds": 3,
                "queries_per_round": 4,
                "groups_per_step": 2,
                "checkpoint_every": 0,
                "plot_every": 0,
                **loop,
            },
        },
    )


def reward_has_digit_char(records, completions, agents):
    """Scripted reward with variance: 1 when the completion holds an even-coded character."""
    return [float(any((ord(c) % 2 == 0) for c in text[:3])) for text in completions]


def tiny_trainer(cfg: TrainConfig, run_dir, **kw) -> Trainer:
    """A :class:`Trainer` of ``cfg`` in ``run_dir`` on the tiny backbone, its 12 records and
    :func:`reward_has_digit_char`, without progress bars; ``kw`` replaces or adds any
    ``Trainer`` argument (``records=``, ``engines=``, ``probe_records=`` ...)."""
    if "backbone" not in kw:
        kw["backbone"] = tiny_backbone()
    if "records" not in kw:
        kw["records"] = tiny_records()
    kw.setdefault("reward_fn", reward_has_digit_char)
    kw.setdefault("progress", False)
    return Trainer(cfg, run_dir, **kw)
