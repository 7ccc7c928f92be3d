"""Same-seed figures of two short runs at one commit's code, to compare two commits (issue 55: the restructuring
must give identical figures under the same seed).

    PYTHONPATH=/tmp/before/src .venv/bin/python benchmarks/same_seed_figures.py /tmp/ssf_before > before.json
    PYTHONPATH=src .venv/bin/python benchmarks/same_seed_figures.py /tmp/ssf_after > after.json

Two runs of 2 iterations with a random tiny model (seed 5): the test plugin `coin` (rewards vary, so the loss is
not 0) and BFCL `arith` (three-step tool episodes). Prints each run's summary and every metric but timings; the
two commits' stores can be compared row by row too (trajectory ids, times and paths aside)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "plugins"))
    from evolvekit.config import Config
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import build_loop, open_run

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    model = make_tiny_model(out / "model")
    res = {}
    for env in ({"name": "coin", "plugins": ["coin_env"]}, {"name": "bfcl", "family": "arith"}):
        data = {
            "run": {"name": env["name"], "out_dir": str(out), "seed": 5},
            "env": env,
            "rollout": {"max_steps": 3, "group_size": 3},
            "train": {"iterations": 2, "tasks_per_iteration": 2, "eval_tasks": 2, "eval_k": 2, "autocast": "off"},
            "models": {"policy": {"model": str(model), "max_new_tokens": 12}},
        }
        cfg, run_dir, store = open_run(Config.model_validate(data), None)
        summary = build_loop(cfg, run_dir, store, show_progress=False).run()
        store.close()
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        timing = ("second", "per_s", "time")
        metrics = [{k: v for k, v in json.loads(x).items() if not any(t in k for t in timing)} for x in lines]
        res[env["name"]] = {"summary": summary, "metrics": metrics}
    print(json.dumps(res, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
