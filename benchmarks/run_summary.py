"""A training run's cost, for its results folder: ``run.json`` from the run's own records.

Reads the run's ``metrics.jsonl`` (rounds, per-round timings, the agents' policy versions)
and, when given, the ``/usr/bin/time -v`` output the training and evaluation commands were
wrapped in (command, wall-clock time, peak resident memory), and writes one JSON object:

- ``rounds``, ``policy_steps_per_agent`` (the agents' versions after the last round) and
  ``policy_steps``;
- ``round_s`` (min, median, max of the rounds' wall seconds) and ``router_s_median``;
- ``wall_min`` and ``max_rss_gib`` of training (over all its processes when it was stopped
  and resumed: then also ``resume_commands`` and ``wall_min_by_process``), and
  ``eval_wall_min`` and ``eval_max_rss_gib`` of the evaluation (from the ``time -v`` logs);
- the commands, ``machine`` and ``git_commit``, and free-text ``notes``.

    /usr/bin/time -v coevo train --config C --out runs/X --no-progress > runs/X.log 2>&1
    /usr/bin/time -v coevo eval --run runs/X --suite id --no-progress > runs/X.eval.log 2>&1
    python -m benchmarks.run_summary --run runs/X --train-log runs/X.log \\
        --eval-log runs/X.eval.log --out benchmarks/results/X/run.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from benchmarks import common


def parse_time_v(text: str, path: str = "<log>") -> dict:
    """``{"command", "wall_s", "max_rss_gib"}`` from GNU ``time -v`` output inside ``text``.

    Raises:
      ValueError: naming ``path`` when the report is missing (the command was not wrapped,
        or it is still running).
    """
    cmd = re.search(r'Command being timed: "(.*)"', text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if not (cmd and wall and rss):
        raise ValueError(f"{path}: no complete /usr/bin/time -v report (is the command done?)")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = 60 * seconds + float(part)
    return {
        "command": cmd.group(1),
        "wall_s": round(seconds, 1),
        "max_rss_gib": round(int(rss.group(1)) / 2**20, 2),
    }


def summarize_metrics(path: Path) -> dict:
    """Rounds, policy steps and round timings from a run's ``metrics.jsonl``.

    Raises:
      ValueError: naming the file when it holds no round records.
    """
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "round" in r and "timings" in r]
    if not rows:
        raise ValueError(f"{path}: no round records")
    round_s = np.array([r["timings"]["round_s"] for r in rows])
    steps = [int(v) for v in rows[-1]["versions"]]
    return {
        "rounds": int(rows[-1]["round"]),
        "rounds_logged": len(rows),
        "policy_steps_per_agent": steps,
        "policy_steps": sum(steps),
        "round_s": {
            "min": round(float(round_s.min()), 1),
            "median": round(float(np.median(round_s)), 1),
            "max": round(float(round_s.max()), 1),
        },
        "rounds_wall_min": round(float(round_s.sum()) / 60, 1),
        "router_s_median": round(float(np.median([r["timings"]["router_s"] for r in rows])), 3),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the run directory (holds metrics.jsonl)")
    ap.add_argument(
        "--train-log",
        nargs="+",
        help="the training command's /usr/bin/time -v output; one per process, in order, for "
        "a run that was stopped and resumed",
    )
    ap.add_argument("--eval-log", help="the evaluation command's /usr/bin/time -v output")
    ap.add_argument("--notes", default="", help="free text: what else shared the machine")
    ap.add_argument("--out", required=True, help="the run.json to write")
    a = ap.parse_args(argv)

    out = summarize_metrics(Path(a.run) / "metrics.jsonl")
    if a.train_log:
        ts = [parse_time_v(Path(x).read_text(errors="replace"), x) for x in a.train_log]
        out = {"command": ts[0]["command"], **out}
        if len(ts) > 1:
            out["resume_commands"] = [t["command"] for t in ts[1:]]
            out["wall_min_by_process"] = [round(t["wall_s"] / 60, 1) for t in ts]
        out["wall_min"] = round(sum(t["wall_s"] for t in ts) / 60, 1)
        out["max_rss_gib"] = max(t["max_rss_gib"] for t in ts)
    if a.eval_log:
        e = parse_time_v(Path(a.eval_log).read_text(errors="replace"), a.eval_log)
        out["eval_command"] = e["command"]
        out["eval_wall_min"] = round(e["wall_s"] / 60, 1)
        out["eval_max_rss_gib"] = e["max_rss_gib"]
    out["machine"] = common.machine_info()
    out["git_commit"] = common.git_commit()
    out["notes"] = a.notes
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    return out


if __name__ == "__main__":
    main()
