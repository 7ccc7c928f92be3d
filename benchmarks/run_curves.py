"""Per-run held-out curves and mechanism figures of evidence runs: what each seed did, iteration by iteration.

    .venv/bin/python benchmarks/run_curves.py runs/evidence_arith_turns_named [more roots] [--rows a b]

Reads every ``<root>/<row>/seed<k>/`` that holds a ``run.sqlite`` (the folders evidence runs leave) and its
``metrics.jsonl``: the held-out avg@k before training (``summary.json``) and after every evaluated iteration
(``eval/avg@k``), and, over the run, the experience-guided and vanilla rollouts' mean training reward
(``navigating/guided_reward``, ``navigating/vanilla_reward``, weighted by their rollout counts), the share of guided
tokens the Eq. 17 clip bound (``train/guided_clip_frac``, mean over iterations) and the groups whose attribution
channel was live (``attribution/mixed_groups_nondegenerate`` of ``attribution/mixed_groups``). For runs with step
labels in their store, the attribution channel's part of the step advantages (Eq. 18-21 recomputed from the stored
labels and outcomes with the run's α: Σ|A − A_outcome-only| / Σ|A| over the training steps) and the groups without
mixed outcomes (no GRPO gradient) that the attribution channel alone gave one. A figure a run did not log is "—".
Prints a markdown table; takes seconds.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from training_groups import print_table, run_stores, store_arguments  # benchmarks/, the script's own folder

from evolvekit.attributing.credit import group_step_advantages
from evolvekit.types import StepLabel


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


def attribution_cells(store: Path) -> list[str]:
    """The attribution channel's share of |step advantage| and the unmixed groups it alone gave a gradient."""
    alphas = {
        int(m.get("iteration", -1)): m["attribution/alpha"] for m in _metrics(store.parent) if "attribution/alpha" in m
    }
    if not alphas:
        return ["—", "—"]
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT t.iteration, t.group_id, t.trajectory_id, t.outcome_reward, s.label FROM trajectories t "
            "JOIN steps s ON s.trajectory_id = t.trajectory_id WHERE t.phase = 'train' "
            "ORDER BY t.group_id, t.trajectory_id, s.step_index"
        ).fetchall()
    groups: dict[str, dict[str, tuple[int, float, list[StepLabel | None]]]] = {}
    for it, gid, tid, outcome, label in rows:
        entry = groups.setdefault(gid, {}).setdefault(tid, (int(it), float(outcome or 0.0), []))
        entry[2].append(StepLabel(label) if label else None)
    total = attr = 0.0
    unmixed = unmixed_live = 0
    for trajs in groups.values():
        its, outcomes = [t[0] for t in trajs.values()], [t[1] for t in trajs.values()]
        labels = [lab if lab and all(x is not None for x in lab) else None for _, _, lab in trajs.values()]
        steps = [len(t[2]) for t in trajs.values()]
        alpha = alphas.get(its[0], next(iter(alphas.values())))
        both = group_step_advantages(labels, outcomes, steps, alpha, "both")  # type: ignore[arg-type]
        out = group_step_advantages(labels, outcomes, steps, alpha, "outcome_only")  # type: ignore[arg-type]
        flat_both = [a for adv in both for a in adv]
        flat_out = [a for adv in out for a in adv]
        total += sum(abs(a) for a in flat_both)
        attr += sum(abs(a - b) for a, b in zip(flat_both, flat_out))
        if len(set(outcomes)) == 1:
            unmixed += 1
            unmixed_live += any(abs(a) > 1e-9 for a in flat_both)
    return [f"{attr / total:.2f}" if total else "—", f"{unmixed_live} of {unmixed}"]


def main(argv: list[str] | None = None) -> int:
    args = store_arguments(__doc__ or "", argv)
    lines = [
        "| row | seed | held-out avg@k: before, after each iteration | guided reward | vanilla reward "
        "| guided clip frac | attribution live (mixed groups) | attribution share of abs(A) "
        "| unmixed groups given a gradient by attribution |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row, seed, store in run_stores(args.roots, args.rows):
        points = " / ".join(f"{p:.3f}" for p in curve(store.parent))
        lines.append(
            f"| {row} | {seed} | {points} | "
            + " | ".join(mechanism_cells(store.parent) + attribution_cells(store))
            + " |"
        )
    return print_table(lines, args.roots)


if __name__ == "__main__":
    sys.exit(main())
