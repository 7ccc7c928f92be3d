"""The quickstart's iteration and update time with shared-prefix training off (before) and on (after), in one run.

    .venv/bin/python benchmarks/speed/iteration_time.py --iterations 3 --out benchmarks/results/iteration_time.md

Runs ``evolvekit run configs/quickstart.yaml`` twice with the same seed and budget, held-out evaluation off (it does
not depend on the update), once with ``train.shared_prefix=false`` and once with ``true``, and reads each
iteration's ``time/rollout_s``, ``time/update_s``, ``time/iteration_s``, ``train/tokens`` and
``train/shared_prefix_tokens`` from the runs' metrics.jsonl. Prints a table (mean over iterations) and the ratio
of update times. Run nothing else on the machine meanwhile: a shared CPU measures nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KEYS = (
    "time/rollout_s",
    "time/update_s",
    "time/iteration_s",
    "train/tokens",
    "train/shared_prefix_tokens",
    "train/policy_tokens",
)


def run(config: str, iterations: int, shared: bool, out_dir: Path) -> list[dict]:
    name = f"shared-{str(shared).lower()}"
    cmd = [
        sys.executable,
        "-m",
        "evolvekit.cli.main",
        "run",
        config,
        "--no-progress",
        "--json",
        "--set",
        f"train.iterations={iterations}",
        "--set",
        "train.eval_before=false",
        "--set",
        "train.eval_after=false",
        "--set",
        f"train.shared_prefix={str(shared).lower()}",
        "--set",
        f"run.out_dir={out_dir}",
        "--set",
        f"run.name={name}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the table to this markdown file")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shared in (False, True):
            metrics = run(args.config, args.iterations, shared, Path(tmp))
            rows[shared] = {k: statistics.mean(float(m.get(k, 0.0)) for m in metrics) for k in KEYS}
            rows[shared]["per_iteration_update_s"] = [round(float(m["time/update_s"]), 1) for m in metrics]
    head = (
        "| shared_prefix | rollout s | update s | iteration s | forwarded tokens | tokens not forwarded again "
        "| loss tokens | update s per iteration |"
    )
    table = [head, "|" + "---|" * 8]
    for shared in (False, True):
        r = rows[shared]
        table.append(
            f"| {str(shared).lower()} | {r['time/rollout_s']:.1f} | {r['time/update_s']:.1f} | "
            f"{r['time/iteration_s']:.1f} | {r['train/tokens']:.0f} | {r['train/shared_prefix_tokens']:.0f} | "
            f"{r['train/policy_tokens']:.0f} | {r['per_iteration_update_s']} |"
        )
    ratio = rows[False]["time/update_s"] / rows[True]["time/update_s"]
    it_ratio = rows[False]["time/iteration_s"] / rows[True]["time/iteration_s"]
    text = "\n".join(table) + (
        f"\n\nupdate time: {ratio:.2f}x faster with shared-prefix training; "
        f"iteration time: {it_ratio:.2f}x (means over {args.iterations} iterations)\n"
    )
    print(text)
    if args.out:
        cmd = " ".join(["$ .venv/bin/python", "benchmarks/speed/iteration_time.py", *sys.argv[1:]])
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        Path(args.out).write_text(
            f"# Quickstart iteration time, shared-prefix training off and on\n\n"
            f"Produced by this command, at commit {commit} on this 2-core CPU with nothing "
            f"else running:\n\n```\n{cmd}\n```\n\n" + text
        )


if __name__ == "__main__":
    main()
