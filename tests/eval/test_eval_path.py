"""The full evaluation path on a tiny random model: collection, methods, report files."""

import json

from coevo_jax.eval import evaluate_trainer
from coevo_jax.train.loop import Trainer
from tests.train._tiny import tiny_backbone, tiny_records
from tests.train.test_loop import reward_has_digit_char, tiny_config


def test_eval_writes_reports(tmp_path):
    cfg = tiny_config(rounds=1)
    recs = tiny_records(8)
    tr = Trainer(
        cfg,
        tmp_path / "run",
        backbone=tiny_backbone(),
        records=recs,
        reward_fn=reward_has_digit_char,
        progress=False,
    )
    tr.run()
    ev = [dict(r, id=f"e{i}", source="toy-" + r["class"]) for i, r in enumerate(tiny_records(6))]
    payload = evaluate_trainer(
        tr,
        ev,
        tmp_path / "eval",
        name="toy",
        max_new_tokens=6,
        taus=(0.3, 0.9),
        score_fn=lambda rs, cs: [float(len(c) % 2) for c in cs],
    )
    res = payload["results"]
    assert {"cera", "base", "oracle", "uniform_vote", "random", "top:1", "single:0"} <= set(res)
    assert set(res["cera"]["by_dataset"]) == {"toy-math", "toy-reasoning"}
    assert 0 < res["cera"]["tokens_per_query"] <= 2 * 6
    assert payload["router_ms"] > 0
    files = {p.name for p in (tmp_path / "eval").iterdir()}
    assert {"toy.json", "toy.md", "toy_accuracy.png", "toy_tokens_vs_accuracy.png"} <= files
    assert json.loads((tmp_path / "eval" / "toy.json").read_text())["queries"] == 6
    tr.close()
