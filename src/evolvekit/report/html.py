"""``evolvekit report RUN_DIR``: a self-contained HTML report (plus its PNGs) of one run."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from evolvekit.report.figures import efficiency, load_summary, write_figures

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f4f4f4}img{max-width:100%}"""


def _table(rows: list[dict]) -> str:
    if not rows:
        return "<p>(none)</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def write_report(run_dir: Path, out: Path | None = None, baseline: Path | None = None) -> Path:
    run = load_summary(run_dir)
    base = load_summary(baseline) if baseline else None
    out = Path(out or Path(run_dir) / "report")
    figs = write_figures(run, out, base)
    eff = efficiency(run, base)
    key_metrics = [
        "rollout/success_rate",
        "rollout/reward_mean",
        "navigating/guided_reward",
        "navigating/vanilla_reward",
        "navigating/pool_size",
        "navigating/validated_share",
        "attribution/good_ratio",
        "attribution/agreement_with_grounded",
        "attribution/constant_channel_groups",
        "judge/fallback_rate",
        "judge/agreement_with_state",
        "train/loss",
        "time/iteration_s",
    ]
    rows = [
        {"iteration": it, **{k: m.get(k) for k in key_metrics if any(k in mm for mm in run.metrics.values())}}
        for it, m in sorted(run.metrics.items())
    ]
    evals = [
        {"phase": p, **{k: v for k, v in e.items() if "@" in k or k in ("tasks", "split")}}
        for p, e in sorted(run.evaluations.items())
    ]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(run_dir.name)}</title>"
        f"<style>{CSS}</style></head><body>",
        f"<h1>Run report: {html.escape(Path(run_dir).name)}</h1>",
        "<h2>Held-out evaluation</h2>",
        _table(evals),
        "<h2>Learning efficiency</h2>",
        _table([{k: v for k, v in eff.items()}])
        + (
            f"<p>baseline: {html.escape(str(baseline))}</p>"
            if baseline
            else "<p>no baseline run given (--baseline)</p>"
        ),
        "<h2>Helper sources</h2>",
        _table([{"role": k, "source": v} for k, v in run.helper_sources.items()]),
        "<h2>Task set</h2>",
        _table(
            [{"source": k, "tasks": v} for k, v in run.task_sources.items()]
            + [{"source": f"CoEvolve {k}", "tasks": v} for k, v in run.signal_tasks.items()]
        ),
    ]
    for name, path in figs.items():
        parts.append(f"<h2>{html.escape(name)}</h2><img src='{html.escape(path.name)}' alt='{html.escape(name)}'>")
    parts += ["<h2>Per iteration</h2>", _table(rows), "</body></html>"]
    page = out / "index.html"
    page.write_text("\n".join(parts))
    (out / "efficiency.json").write_text(json.dumps(eff, indent=2))
    return page


def write_collection_report(root: Path, out: Path | None = None, baseline: str | None = None) -> Path:
    """Report over a folder of runs (an ablation): held-out results per row (mean ± std over seeds), learning curves
    with one line per seed, Steps@0.9 and AUC of each row's mean curve against the ``baseline`` row, and a linked
    per-run report for every run."""
    from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction
    from evolvekit.errors import ConfigError
    from evolvekit.report.collection import load_groups
    from evolvekit.report.figures import plot_groups

    root = Path(root)
    groups = load_groups(root)
    if not groups:
        raise ConfigError(f"{root} holds no run directories (no */run.sqlite)")
    out = Path(out or root / "report")
    out.mkdir(parents=True, exist_ok=True)
    base = next((g for g in groups if g.name == baseline), None)
    if baseline and base is None:
        raise ConfigError(f"baseline row {baseline!r} not found; rows: {', '.join(g.name for g in groups)}")
    bx, by = base.mean_curve() if base else ([], [])
    target = 0.9 * max(by) if by else None
    keys = sorted({k for g in groups for k in g.final()})
    rows = []
    for g in groups:
        done = sum(1 for r in g.runs if r.evaluations.get("after") or r.evaluations.get("before"))
        row: dict = {"row": g.name, "seeds": f"{done}/{len(g.runs)}"}
        for k, (m, sd, _) in g.final().items():
            row[k] = f"{m:.3f} ± {sd:.3f}"
        xs, ys = g.mean_curve()
        row["auc"] = area_under_curve(xs, ys) if len(ys) > 1 else None
        if target is not None:
            row["steps@0.9"] = steps_to_fraction(xs, ys, target)
        rows.append(
            {c: row.get(c) for c in ["row", "seeds", *keys, "auc", *(["steps@0.9"] if target is not None else [])]}
        )
    figs = plot_groups(groups, out)
    links = []
    for g in groups:
        for r in g.runs:
            page = write_report(r.run_dir)
            href = os.path.relpath(page.resolve(), out.resolve())
            links.append(f"<li><a href='{html.escape(href)}'>{html.escape(str(r.run_dir.relative_to(root)))}</a></li>")
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(root.name)}</title>"
        f"<style>{CSS}</style></head><body>",
        f"<h1>Runs in {html.escape(root.name)}</h1>",
        "<h2>Held-out evaluation after training (mean ± std over seeds)</h2>",
        _table(rows),
        f"<p>baseline row for Steps@0.9: {html.escape(baseline)}</p>"
        if baseline
        else "<p>no baseline row given (--baseline ROW)</p>",
    ]
    for name, path in figs.items():
        parts.append(f"<h2>{html.escape(name)}</h2><img src='{html.escape(path.name)}' alt='{html.escape(name)}'>")
    parts += ["<h2>Per-run reports</h2><ul>", *links, "</ul></body></html>"]
    page = out / "index.html"
    page.write_text("\n".join(parts))
    (out / "rows.json").write_text(json.dumps(rows, indent=2))
    return page
