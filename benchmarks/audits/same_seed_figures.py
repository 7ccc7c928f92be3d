"""Same-seed figures of short runs at one commit's code, to compare two commits (issue 55: the restructuring must
give identical figures under the same seed).

    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/audits/same_seed_figures.py /tmp/ssf_before > before.json
    PYTHONPATH=src .venv/bin/python benchmarks/audits/same_seed_figures.py /tmp/ssf_after > after.json
    .venv/bin/python benchmarks/audits/same_seed_figures.py --compare /tmp/ssf_before /tmp/ssf_after

Five runs of 2 iterations with a random tiny model (seed 5): the test plugin `coin` (rewards vary, so advantages
are not 0) plain, with Eq. 18-21 and with GiGPO; BFCL `arith` (three-step tool episodes) plain and with grounded
step labels from the references (an oracle run, so the labels are not all neutral).
Prints each run's summary and every metric but timings. ``--compare`` reads two such folders' run stores row by row
(steps with their prompt and completion ids and log-probs, trajectories, tasks, evaluations, iterations, metrics,
checkpoints) and prints, per run, the rows compared and every field that differs, leaving out what differs by
nature: random ids, wall-clock times and the folders' own paths."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path

TABLES = ("steps", "trajectories", "tasks", "evaluations", "iterations", "metrics", "checkpoints")
TIMING = ("second", "per_s", "time")
CLOCK_COLUMNS = {"started", "finished", "created", "created_at"}


def _normal(value: object, roots: tuple[str, str]) -> object:
    """A stored value with its random ids, timings and run-folder paths taken out."""
    text = str(value)
    for root in roots:
        text = text.replace(root, "<run>")
    text = re.sub(r"(traj|group|exp|task|syn|explore)-[0-9a-f]{12}", r"\1-<id>", text)
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if not any(t in k for t in TIMING)}
    return data


def compare(before: Path, after: Path) -> int:
    """Print, per run, the store rows compared and the fields that differ; return the number of differences."""
    roots = (str(before), str(after))
    total = 0
    for db_a in sorted(before.glob("*/run.sqlite")):
        name = db_a.parent.name.rsplit("-", 2)[0]
        [db_b] = sorted(after.glob(f"{name}-*/run.sqlite"))
        a, b = sqlite3.connect(db_a), sqlite3.connect(db_b)
        rows = diffs = 0
        for table in TABLES:
            cols = [r[1] for r in a.execute(f"pragma table_info({table})")]
            ra = list(a.execute(f"select * from {table} order by rowid"))
            rb = list(b.execute(f"select * from {table} order by rowid"))
            if len(ra) != len(rb):
                print(f"{name}: {table} has {len(ra)} rows before and {len(rb)} after")
                diffs += 1
            for x, y in zip(ra, rb):
                rows += 1
                if table == "metrics" and any(t in str(x[1]) for t in TIMING):
                    continue
                for col, u, v in zip(cols, x, y):
                    if col not in CLOCK_COLUMNS and _normal(u, roots) != _normal(v, roots):
                        diffs += 1
                        print(f"{name}: {table}.{col} differs: {str(u)[:100]} | {str(v)[:100]}")
        print(f"{name}: {rows} rows compared, {diffs} differ (random ids, timings and paths aside)")
        total += diffs
    return total


def main() -> None:
    if sys.argv[1:2] == ["--compare"]:
        sys.exit(1 if compare(Path(sys.argv[2]), Path(sys.argv[3])) else 0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "plugins"))
    from evolvekit.config import Config
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    model = make_tiny_model(out / "model")
    res = {}
    arith = {"name": "bfcl", "family": "arith"}
    coin = {"name": "coin", "plugins": ["coin_env"]}
    grounded = {"attributing": {"enabled": True, "source": "grounded"}}
    runs = {
        "coin": (coin, {}),
        "arith": (arith, {}),
        "coin_dual_channel": (coin, grounded),  # Eq. 18-21 (the outcome channel moves: rewards vary)
        "coin_gigpo": (coin, {"attributing": {"enabled": True, "source": "gigpo"}}),
        "arith_grounded_oracle": (arith, {**grounded, "run": {"oracle": True}}),  # labels from the references
    }
    for name, (env, extra) in runs.items():
        data = {
            **extra,
            "run": {**extra.get("run", {}), "name": name, "out_dir": str(out), "seed": 5},
            "env": env,
            "rollout": {"max_steps": 3, "group_size": 3},
            "train": {"iterations": 2, "tasks_per_iteration": 2, "eval_tasks": 2, "eval_k": 2, "autocast": "off"},
            "models": {"policy": {"model": str(model), "max_new_tokens": 12}},
        }
        cfg, run_dir, store = open_run(Config.model_validate(data), None)
        summary = build_loop(cfg, run_dir, store, show_progress=False).run()
        store.close()
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        metrics = [{k: v for k, v in json.loads(x).items() if not any(t in k for t in TIMING)} for x in lines]
        res[name] = {"summary": summary, "metrics": metrics}
    print(json.dumps(res, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
