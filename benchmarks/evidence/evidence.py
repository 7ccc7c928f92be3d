"""Evidence: the rows of an ablation file over its seeds, as a results file with the command and the commit.

    .venv/bin/python benchmarks/evidence/evidence.py configs/evidence/evidence_arith_turns.yaml   # run, report
    .venv/bin/python benchmarks/evidence/evidence.py configs/evidence/evidence_arith_turns.yaml --no-run   # report only

Runs every (row, seed) of the file one at a time (``evolvekit ablate``: finished runs are skipped, unfinished ones
resumed), then writes ``<out>.md``, ``<out>.json`` (report/evidence.py: ``EvidenceFile``, which ``train.compare_with``
reads) and ``<out>.png``: held-out avg@k / best@k after training as mean ± std with a t-interval over seeds (95%,
or the spec's ``confidence``),
the seed-paired difference against the baseline row, Steps@0.9 and AUC of the mean held-out curve against the
baseline (AgentEvolver Table 6), and every run's helper-health figures. Run nothing else on the machine meanwhile.
An existing ``<out>.md``'s part written by hand (from report/evidence.py's ``HAND_MARK`` on) is kept below the new
tables.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _steps(r) -> str:
    """A row's Steps@0.9 cell: the iteration, "not reached" within the budget, or n/a (not measurable)."""
    if r.steps_at_09 is None and r.target is not None:
        return f"not reached ({r.target:.3f})"
    return _fmt(r.steps_at_09, 0)


def _other_levels(ev, confidence: float) -> str:
    """A note naming the rows whose intervals are at another level (rows merged from a committed file)."""
    from evolvekit.report.evidence import level

    other = {n: iv.confidence for n, r in ev.rows.items() for iv in r.after.values() if iv.confidence != confidence}
    return (
        (" Intervals at another level: " + ", ".join(f"{n} {level(c)}" for n, c in other.items()) + ".")
        if other
        else ""
    )


def _closed(h) -> str:
    """Person-written training tasks with closed gold, the share step credit found a self-derived reference of the
    task's own for, and (where the run logged it) how many borrowed a success on a similar task."""
    if h.closed_tasks is None:
        return "n/a"
    borrowed = "" if h.similar_referenced is None else f"; borrowed {h.similar_referenced:.0f}"
    return f"{h.closed_tasks:.0f} ({_fmt(h.self_referenced_share)}{borrowed})"


def _name(name: str, row) -> str:
    """A row's name as the tables print it: 'oracle' marked where person-written gold reached its training, and
    'person-written examples' where a person's worked examples were in its prompts (env.worked_examples: person)."""
    marks = (["ORACLE"] if row.oracle else []) + (["PERSON-WRITTEN EXAMPLES"] if row.person_examples else [])
    return f"{name} ({', '.join(marks)})" if marks else name


def over_base_model(ev, keys: list[str], confidence: float) -> list[str]:
    """The table of every row's lift over the base model (each run's evaluation before training, paired by seed):
    mean ± std of after − before, its t-interval, the exact sign-flip p, the share of seeds above 0, and the share of
    the lift-reference row's mean lift that the row recovers."""
    from evolvekit.report.evidence import level, recovered_share

    ref = ev.rows.get(ev.lift_reference) if ev.lift_reference else None
    lines = [
        "",
        "## Lift over the base model (after − before, paired by seed)",
        "",
        "The base model is each run's held-out evaluation before training (same weights, tasks and seed). Δ: mean ± "
        f"std [{level(confidence)} t-interval]; p: exact two-sided sign-flip test; improved: share of seeds with "
        "Δ > 0"
        + (f"; recovered: mean Δ as a share of `{ev.lift_reference}`'s mean Δ" if ev.lift_reference else "")
        + ".",
        "",
        "| row | seeds | "
        + " | ".join(f"Δ{k} | p | improved" + (" | recovered" if ev.lift_reference else "") for k in keys)
        + " |",
        "|" + "---|" * (2 + (4 if ev.lift_reference else 3) * len(keys)),
    ]
    for name, r in ev.rows.items():
        cells = []
        for k in keys:
            d = r.vs_before.get(k)
            if d is None:
                cells += ["—", "—", "—"] + (["—"] if ev.lift_reference else [])
                continue
            iv = d.interval
            cells += [f"{iv.mean:+.3f} ± {iv.std:.3f} [{iv.low:+.3f}, {iv.high:+.3f}]", f"{d.sign_flip_p:.4f}"]
            cells.append(f"{d.improved:.0%} ({round(d.improved * len(d.diffs))}/{len(d.diffs)})")
            if ev.lift_reference:
                rd = ref.vs_before.get(k) if ref is not None else None
                share = recovered_share(iv.mean, rd.interval.mean) if rd is not None else None
                cells.append("n/a" if share is None else f"{share:.0%}")
        lines.append(f"| {_name(name, r)} | {len(r.seeds)} | " + " | ".join(cells) + " |")
    return lines


def markdown(ev, spec) -> str:
    from evolvekit.report.evidence import RowResult, level

    keys = sorted({k for r in ev.rows.values() for k in r.after})
    base: RowResult | None = ev.rows.get(ev.baseline)
    lines = [
        f"$ {ev.command}   # code: commit {ev.commit}",
        "",
        f"# Evidence on `{ev.family}`: {len(spec.seeds)} seeds {spec.seeds}, baseline row `{ev.baseline}`",
        "",
        "Budget (every row): " + ", ".join(f"{k}={v}" for k, v in ev.budget.items()),
        "",
        "Shared overrides: " + (", ".join(spec.budget) or "none"),
        "",
        "Held-out tasks: the family's test split (never trained or tuned on). After training: mean ± std over seeds "
        f"[{level(spec.confidence)} t-interval of the mean]; Δ: seed-paired difference against the baseline row "
        f"[{level(spec.confidence)} t-interval]." + _other_levels(ev, spec.confidence),
        "",
        "| row | seeds | "
        + " | ".join(f"{k} before | {k} after | Δ{k} vs {ev.baseline}" for k in keys)
        + " | Steps@0.9 | AUC | code |",
        "|" + "---|" * (2 + 3 * len(keys) + 3),
    ]
    if ev.pending:
        waiting = ", ".join(f"{name} ({n}/{len(spec.seeds)} seeds)" for name, n in ev.pending.items())
        lines[-2:-2] = [f"Not reported yet (pre-registered: a row's figures once all its seeds finish): {waiting}.", ""]
    for name, r in ev.rows.items():
        cells = []
        for k in keys:
            b, a, d = r.before.get(k), r.after.get(k), r.vs_baseline.get(k)
            cells.append(_fmt(b.mean) if b else "—")
            cells.append(f"{a.mean:.3f} ± {a.std:.3f} [{a.low:.3f}, {a.high:.3f}]" if a else "—")
            cells.append(f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]" if d else "—")
        lines.append(
            f"| {_name(name, r)} | {len(r.seeds)}/{len(spec.seeds)} | "
            + " | ".join(cells)
            + f" | {_steps(r)} | {_fmt(r.auc)} | {r.commit or ev.commit} |"
        )
    lines += over_base_model(ev, keys, spec.confidence)
    if base is not None and base.steps_at_09 is not None:
        lines.append("")
        lines.append(
            f"Steps@0.9: the first evaluated iteration at which a row's mean held-out curve reaches 90% of the "
            f"{ev.baseline} row's best mean value (not reached: never within the budget; n/a: the row or the "
            f"baseline has no curve); AUC: the area under the mean curve over its span."
        )
    lines += [
        "",
        "## Helper health of every run",
        "",
        "attribution live: share of groups with mixed outcomes (by the environment's check) whose attribution "
        "channel was non-degenerate; judge fallback: share of judge calls that fell back; validated: share of "
        "extraction jobs that yielded a validated experience; closed person tasks: person-written training tasks whose "
        "gold the run could not read (summed over iterations), with the share that step credit had a self-derived "
        "reference for (a success of the run's own on that task) and, where the run logged it, how many borrowed the "
        "run's success on a similar task (attributing.similar_success_min); n/a: that helper was off in the run, or "
        "no such task.",
        "",
        "| row | seed | sources | attribution live | attribution agreement with grounded | judge calls | judge "
        "fallback | extraction jobs | validated | synthetic tasks | closed person tasks (self-referenced) | "
        "training minutes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in ev.rows.items():
        for h in r.health:
            src = ", ".join(f"{k}: {v}" for k, v in h.helper_sources.items())
            lines.append(
                f"| {name} | {h.seed} | {src} | {_fmt(h.attribution_mixed_groups)} | "
                f"{_fmt(h.attribution_agreement_with_grounded)} | {_fmt(h.judge_calls, 0)} | "
                f"{_fmt(h.judge_fallback_rate)} | {_fmt(h.extraction_jobs, 0)} | {_fmt(h.validated_share)} | "
                f"{_fmt(h.synthetic_tasks, 0)} | {_closed(h)} | {_fmt(h.minutes, 1)} |"
            )
    return "\n".join(lines) + "\n"


def figure(ev, path: Path) -> None:
    import matplotlib

    from evolvekit.report.evidence import level

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = next((k for r in ev.rows.values() for k in r.after if k.startswith("avg@")), None)
    if key is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, row in ev.rows.items():  # a row merged from a file written before curves were kept has none
        if row.curve:
            xs, ys = zip(*row.curve)
            left.plot(xs, ys, marker="o", label=name, linewidth=2.5 if name == "overall" else 1.2)
    left.set_xlabel("iteration")
    left.set_ylabel(f"held-out {key} (mean over seeds)")
    left.set_title("held-out curve")
    left.legend(fontsize=8)
    names = [n for n, r in ev.rows.items() if key in r.after]
    means = [ev.rows[n].after[key].mean for n in names]
    err = [
        [m - ev.rows[n].after[key].low for n, m in zip(names, means)],
        [ev.rows[n].after[key].high - m for n, m in zip(names, means)],
    ]
    right.bar(range(len(names)), means, yerr=err, capsize=4, color="tab:blue")
    right.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel(f"held-out {key} after training")
    levels = ", ".join(sorted({level(ev.rows[n].after[key].confidence) for n in names}))
    right.set_title(f"after training: mean and {levels} interval over seeds")
    fig.suptitle(f"{ev.family}: {ev.commit}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def default_out(spec: Path, family: str) -> Path:
    """Where a report goes without ``--out``: ``benchmarks/results/<spec name>`` for a spec named ``evidence_*``
    (every committed spec's results carry its name), else ``benchmarks/results/evidence_<family>``. Two specs of
    one family (evidence_arith_chain, evidence_arith_chain_credit) so never overwrite each other's results."""
    name = spec.stem if spec.stem.startswith("evidence_") else f"evidence_{family}"
    return Path("benchmarks/results") / name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="ablation file (base config, budget, seeds, rows)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these rows (the report covers every row)")
    ap.add_argument("--no-run", action="store_true", help="report on finished runs only")
    ap.add_argument(
        "--complete-only",
        action="store_true",
        help="leave out rows whose pre-registered seeds have not all finished (named as not reported yet)",
    )
    ap.add_argument("--baseline", default="grpo")
    ap.add_argument(
        "--out", default=None, help="results prefix (default: benchmarks/results/ and the spec's name, see default_out)"
    )
    ap.add_argument(
        "--merge",
        default=None,
        help="a committed results file (.json): its rows without finished runs here are kept as committed (with "
        "their commit), and new rows are paired with its baseline row when that has no runs here",
    )
    ap.add_argument(
        "--row-commit",
        action="append",
        default=[],
        metavar="ROW=REV",
        help="the code a row's runs were made at, for runs made before runs recorded it (meta.code)",
    )
    args = ap.parse_args()

    from evolvekit.cli.common import setup_logging
    from evolvekit.config import load_config
    from evolvekit.provenance import code_commit
    from evolvekit.report.ablate import load_spec, run_ablation
    from evolvekit.report.collection import load_groups
    from evolvekit.report.evidence import (
        EvidenceFile,
        budget_of,
        load_evidence,
        merge_rows,
        only_seeds,
        row_results,
        with_hand_part,
    )

    setup_logging("INFO")
    spec = load_spec(Path(args.spec))
    base_cfg = Path(args.spec).parent / spec.base
    cfg = load_config(base_cfg, spec.budget)
    if not args.no_run:
        run_ablation(Path(args.spec), args.only)
    groups = only_seeds(load_groups(Path(spec.out_dir)), spec.seeds)
    order = [r.name for r in spec.rows]
    groups = sorted([g for g in groups if g.name in order], key=lambda g: order.index(g.name))
    pending: dict[str, int] = {}
    if args.complete_only:  # a pre-registered row is reported once all its seeds have finished, not before
        done = {g.name: sum(1 for r in g.runs if r.evaluations.get("after")) for g in groups}
        pending = {name: n for name, n in done.items() if n < len(spec.seeds)}
        groups = [g for g in groups if g.name not in pending]
    try:
        rows = row_results(groups, args.baseline, spec.confidence)
    except ValueError as e:  # a run without a figure its row has
        ap.error(str(e))
    commit = code_commit()
    if args.merge:
        merged = merge_rows(rows, load_evidence(args.merge), args.baseline, commit, spec.confidence)
        rows = {n: merged[n] for n in sorted(merged, key=lambda n: order.index(n) if n in order else len(order))}
    for item in args.row_commit:
        name, _, rev = item.partition("=")
        if name not in rows or not rev:
            ap.error(f"--row-commit {item}: no row {name!r} (rows: {', '.join(rows)}) or no commit")
        rows[name] = rows[name].model_copy(update={"commit": rev})
    if rows:  # the code of every row: recorded by its runs, committed, given by --row-commit, or this checkout's
        commit = ", ".join(sorted({c for r in rows.values() for c in (r.commit or commit).split(", ")}))
    ev = EvidenceFile(
        family=cfg.env.family or cfg.env.name,
        budget=budget_of(cfg),
        baseline=args.baseline,
        rows=rows,
        command=" ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv]),
        commit=commit,
        lift_reference=spec.lift_reference,
        pending=pending,
    )
    out = Path(args.out or default_out(Path(args.spec), ev.family))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(ev.model_dump_json(indent=2))
    md = out.with_suffix(".md")  # a part written by hand below HAND_MARK is kept
    md.write_text(with_hand_part(markdown(ev, spec), md.read_text() if md.exists() else None))
    figure(ev, out.with_suffix(".png"))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
