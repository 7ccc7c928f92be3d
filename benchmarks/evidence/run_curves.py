"""Per-run held-out curves and mechanism figures of evidence runs: what each seed did, iteration by iteration.

    .venv/bin/python benchmarks/evidence/run_curves.py runs/evidence_arith_turns_named [more roots] [--rows a b]

Reads every ``<root>/<row>/seed<k>/`` that holds a ``run.sqlite`` (the folders evidence runs leave) and its
``metrics.jsonl``: the held-out avg@k before training (``summary.json``) and after every evaluated iteration
(``eval/avg@k``), and, over the run, the experience-guided and vanilla rollouts' mean training reward
(``navigating/guided_reward``, ``navigating/vanilla_reward``, weighted by their rollout counts), the share of guided
tokens the Eq. 17 clip bound (``train/guided_clip_frac``, mean over iterations) and the groups whose attribution
channel was live (``attribution/mixed_groups_nondegenerate`` of ``attribution/mixed_groups``). For runs with step
labels in their store, the attribution channel's part of the step advantages (Eq. 18-21 recomputed from the stored
labels and outcomes with the run's α and Eq. 18 population: Σ|A − A_outcome-only| / Σ|A| over the training steps)
and the groups without mixed outcomes (no GRPO gradient) that the attribution channel alone gave one. A figure a
run did not log is "—" (what the held-out samples did: ``benchmarks/evidence/heldout_calls.py``).
Prints a markdown table; takes seconds.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from training_groups import print_table, run_stores, store_arguments  # benchmarks/, the script's own folder

from evolvekit.attributing.credit import group_step_advantages
from evolvekit.config import config_from_dict, migrate_stored
from evolvekit.report.evidence import total, weighted
from evolvekit.report.figures import RunSummary
from evolvekit.types import StepLabel


def load_run(run_dir: Path) -> RunSummary:
    """The run's per-iteration metrics (``metrics.jsonl``) and its evaluations before and after (``summary.json``),
    read once, as the report's ``RunSummary``."""
    path, summary_path = run_dir / "metrics.jsonl", run_dir / "summary.json"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    evaluations = {phase: summary[f"eval_{phase}"] for phase in ("before", "after") if summary.get(f"eval_{phase}")}
    return RunSummary(run_dir, {int(m.get("iteration", i)): m for i, m in enumerate(rows)}, evaluations)


def curve(run_dir: Path) -> list[float]:
    """Held-out avg@k before training and after each evaluated iteration (``RunSummary.heldout_curve``: the last one
    from the summary's ``eval_after`` when the metrics do not hold it)."""
    return load_run(run_dir).heldout_curve()[1]


def mechanism_cells(run_dir: Path) -> list[str]:
    m = load_run(run_dir).metrics
    cells = []
    for kind in ("guided", "vanilla"):  # mean training reward of the kind's rollouts, weighted by their counts
        reward, n = weighted(m, f"navigating/{kind}_reward", f"navigating/{kind}_rollouts")
        cells.append(f"{reward / n:.2f}" if n else "—")
    clip = [it["train/guided_clip_frac"] for it in m.values() if it.get("train/guided_tokens", 0.0) > 0]
    has_attr = any("attribution/mixed_groups" in it for it in m.values())
    live, mixed = total(m, "attribution/mixed_groups_nondegenerate"), total(m, "attribution/mixed_groups")
    return [
        *cells,
        f"{sum(clip) / len(clip):.4f}" if clip else "—",
        f"{live:.0f} of {mixed:.0f}" if has_attr else "—",
    ]


def attribution_cells(store: Path) -> list[str]:
    """The attribution channel's share of |step advantage| and the unmixed groups it alone gave a gradient."""
    alphas = {
        it: m["attribution/alpha"] for it, m in load_run(store.parent).metrics.items() if "attribution/alpha" in m
    }
    if not alphas:
        return ["—", "—"]
    config_path = store.parent / "config.json"  # the run's validated config; defaults for what older runs lack
    stored = migrate_stored(json.loads(config_path.read_text())) if config_path.is_file() else {}
    population = config_from_dict(stored, str(config_path)).attributing.normalization
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
        both = group_step_advantages(labels, outcomes, steps, alpha, "both", population=population)  # type: ignore[arg-type]
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
