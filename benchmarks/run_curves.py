"""Per-run held-out curves and mechanism figures of evidence runs: what each seed did, iteration by iteration.

    .venv/bin/python benchmarks/run_curves.py runs/evidence_arith_turns_named [more roots] [--rows a b]

Reads every ``<root>/<row>/seed<k>/`` that holds a ``run.sqlite`` (the folders evidence runs leave) and its
``metrics.jsonl``: the held-out avg@k before training (``summary.json``) and after every evaluated iteration
(``eval/avg@k``), and, over the run, the experience-guided and vanilla rollouts' mean training reward
(``navigating/guided_reward``, ``navigating/vanilla_reward``, weighted by their rollout counts), the share of guided
tokens the Eq. 17 clip bound (``train/guided_clip_frac``, mean over iterations) and the groups whose attribution
channel was live (``attribution/mixed_groups_nondegenerate`` of ``attribution/mixed_groups``). A figure a run did
not log is "—". Prints a markdown table; takes seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from training_groups import print_table, run_stores, store_arguments  # benchmarks/, the script's own folder


def _metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve(run_dir: Path) -> list[float]:
    """Held-out avg@k before training and after each evaluated iteration (in order; the last one from the
    summary's ``eval_after`` when the metrics do not hold it)."""
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    before = summary.get("eval_before") or {}
    key = next((k for k in before if k.startswith("avg@")), None)
    points = [float(before[key])] if key else []
    for m in _metrics(run_dir):
        k = next((k for k in m if k.startswith("eval/avg@")), None)
        if k is not None:
            points.append(float(m[k]))
    after = summary.get("eval_after") or {}
    if key and key in after and len(points) <= int(after.get("iteration", 0)):  # the final one, when not logged
        points.append(float(after[key]))
    return points


def weighted_reward(rows: list[dict[str, float]], kind: str) -> float | None:
    """Mean training reward of the ``kind`` (guided / vanilla) rollouts over the run, weighted by their counts."""
    pairs = [
        (m[f"navigating/{kind}_reward"], m.get(f"navigating/{kind}_rollouts", 0.0))
        for m in rows
        if f"navigating/{kind}_reward" in m
    ]
    n = sum(w for _, w in pairs)
    return sum(r * w for r, w in pairs) / n if n else None


def mechanism_cells(run_dir: Path) -> list[str]:
    rows = _metrics(run_dir)
    guided, vanilla = weighted_reward(rows, "guided"), weighted_reward(rows, "vanilla")
    clip = [m["train/guided_clip_frac"] for m in rows if m.get("train/guided_tokens", 0.0) > 0]
    mixed = sum(m.get("attribution/mixed_groups", 0.0) for m in rows)
    live = sum(m.get("attribution/mixed_groups_nondegenerate", 0.0) for m in rows)
    has_attr = any("attribution/mixed_groups" in m for m in rows)
    return [
        f"{guided:.2f}" if guided is not None else "—",
        f"{vanilla:.2f}" if vanilla is not None else "—",
        f"{sum(clip) / len(clip):.4f}" if clip else "—",
        f"{live:.0f} of {mixed:.0f}" if has_attr else "—",
    ]


def main(argv: list[str] | None = None) -> int:
    args = store_arguments(__doc__ or "", argv)
    lines = [
        "| row | seed | held-out avg@k: before, after each iteration | guided reward | vanilla reward "
        "| guided clip frac | attribution live (mixed groups) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, seed, store in run_stores(args.roots, args.rows):
        points = " / ".join(f"{p:.3f}" for p in curve(store.parent))
        lines.append(f"| {row} | {seed} | {points} | " + " | ".join(mechanism_cells(store.parent)) + " |")
    return print_table(lines, args.roots)


if __name__ == "__main__":
    sys.exit(main())
