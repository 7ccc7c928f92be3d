"""Figures and summary numbers of a run, read from its run store (used by the report and the dashboard)."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction


def connect_ro(run_dir: Path) -> sqlite3.Connection:
    """Read-only connection (safe next to a live run: WAL readers never block the writer). A run on a read-only
    mount (a copied or archived run: no live writer) is opened immutable, since SQLite cannot make its shared-memory
    file there."""
    path = Path(run_dir) / "run.sqlite"
    flags = "mode=ro" if os.access(run_dir, os.W_OK) else "mode=ro&immutable=1"
    return sqlite3.connect(f"file:{path}?{flags}", uri=True, check_same_thread=False)


def metrics_table(con: sqlite3.Connection) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for it, name, value in con.execute("SELECT iteration, name, value FROM metrics ORDER BY iteration"):
        out.setdefault(it, {})[name] = value
    return out


@dataclass
class RunSummary:
    run_dir: Path
    metrics: dict[int, dict[str, float]]
    evaluations: dict[str, dict] = field(default_factory=dict)
    task_sources: dict[str, int] = field(default_factory=dict)
    signal_tasks: dict[str, int] = field(default_factory=dict)
    helper_sources: dict[str, str] = field(default_factory=dict)  # role -> where its answers come from
    code: str | None = None  # the commit of the code that made the run (None: made before runs recorded it)

    def heldout_curve(self) -> tuple[list[float], list[float], str]:
        """(steps, values, key): held-out avg@k before training (step 0), periodically (after iteration i's update:
        i + 1), and after training (at the iteration it recorded); steps count policy updates done."""
        key = None
        xs, ys = [], []
        before = self.evaluations.get("before")
        if before:
            key = next((k for k in before if k.startswith("avg@")), None)
            if key:
                xs.append(0.0)
                ys.append(before[key])
        for it in sorted(self.metrics):
            k2 = next((k for k in self.metrics[it] if k.startswith("eval/avg@")), None)
            if k2:
                key = key or k2[5:]
                xs.append(it + 1.0)
                ys.append(self.metrics[it][k2])
        after = self.evaluations.get("after")
        if after and key is None:  # no evaluation before or during training: the curve is the final point
            key = next((k for k in after if k.startswith("avg@")), None)
        if after and key and key in after:
            from evolvekit.orchestrator.metrics import evaluation_x

            x = evaluation_x("after", after, len(self.metrics))
            if not xs or xs[-1] < x:
                xs.append(x)
                ys.append(after[key])
        return xs, ys, key or "avg@k"


def load_summary(run_dir: Path) -> RunSummary:
    import json

    con = connect_ro(run_dir)
    try:
        evaluations = {p: json.loads(j) for p, j in con.execute("SELECT phase, json FROM evaluations")}
        sources: dict[str, int] = {}
        signals: dict[str, int] = {}
        for (j,) in con.execute("SELECT json FROM tasks"):
            t = json.loads(j)
            sources[t.get("source", "real")] = sources.get(t.get("source", "real"), 0) + 1
            sig = (t.get("metadata") or {}).get("signal")
            if sig:
                signals[sig["kind"]] = signals.get(sig["kind"], 0) + 1
        code = con.execute("SELECT value FROM meta WHERE key = 'code'").fetchone()
        return RunSummary(
            Path(run_dir),
            metrics_table(con),
            evaluations,
            sources,
            signals,
            _helper_sources(con),
            code[0] if code else None,
        )
    finally:
        con.close()


def _helper_sources(con) -> dict[str, str]:
    """The run's recorded helper sources; for runs made before they were recorded, resolved from its config."""
    import json

    row = con.execute("SELECT value FROM meta WHERE key = 'helper_sources'").fetchone()
    if row is not None:
        return dict(json.loads(row[0]))
    row = con.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
    if row is None:
        return {}
    from evolvekit.config import Config, helper_sources

    try:
        return helper_sources(Config.model_validate_json(row[0]))
    except ValueError:
        return {}


def efficiency(run: RunSummary, baseline: RunSummary | None) -> dict[str, float | None]:
    """Steps@0.9 (steps to reach 90% of the baseline's best held-out value) and AUC, as in AgentEvolver Table 6."""
    xs, ys, _ = run.heldout_curve()
    out: dict[str, float | None] = {"auc": area_under_curve(xs, ys) if ys else None}
    if baseline is not None:
        bx, by, _ = baseline.heldout_curve()
        if by:
            target = 0.9 * max(by)
            out.update(
                {
                    "baseline_auc": area_under_curve(bx, by),
                    "steps@0.9": steps_to_fraction(xs, ys, target),
                    "baseline_steps@0.9": steps_to_fraction(bx, by, target),
                }
            )
    return out


def _plot(path: Path, title: str, series: list[tuple[str, list[float], list[float]]], ylabel: str = "") -> Path | None:
    series = [s for s in series if s[1]]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, xs, ys in series:
        ax.plot(xs, ys, "o-", label=label, markersize=4)
    ax.set_title(title)
    ax.set_xlabel("iteration")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def series(metrics: dict[int, dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    its = [it for it in sorted(metrics) if key in metrics[it]]
    return [float(i) for i in its], [metrics[i][key] for i in its]


def write_figures(run: RunSummary, out: Path, baseline: RunSummary | None = None) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    m = run.metrics
    figs: dict[str, Path | None] = {}
    hx, hy, key = run.heldout_curve()
    curves = [(f"held-out {key}", hx, hy), ("train success", *series(m, "rollout/success_rate"))]
    if baseline is not None:
        bx, by, _ = baseline.heldout_curve()
        curves.append((f"baseline held-out {key}", bx, by))
    figs["learning"] = _plot(out / "learning.png", "Learning curve", curves, "rate")
    figs["guided"] = _plot(
        out / "guided_vs_vanilla.png",
        "Reward: experience-guided vs vanilla rollouts",
        [("guided", *series(m, "navigating/guided_reward")), ("vanilla", *series(m, "navigating/vanilla_reward"))],
        "reward",
    )
    figs["pool"] = _plot(
        out / "experience_pool.png",
        "Experience pool",
        [
            ("size", *series(m, "navigating/pool_size")),
            ("merged", *series(m, "navigating/merged")),
            ("pruned", *series(m, "navigating/pruned")),
        ],
    )
    figs["attribution"] = _plot(
        out / "attribution.png",
        "Attribution GOOD ratio",
        [
            ("GOOD ratio", *series(m, "attribution/good_ratio")),
            ("parse failures", *series(m, "attribution/parse_failure_rate")),
        ],
        "rate",
    )
    figs["tasks"] = _plot(
        out / "task_growth.png",
        "Task set growth",
        [("synthetic pool", *series(m, "tasks/synthetic_pool"))]
        + [(f"{k} signals", *series(m, f"coevolve/{k}")) for k in ("forgetting", "boundary", "rare")]
        + [("CoEvolve new tasks", *series(m, "coevolve/new_tasks"))],
    )
    return {k: v for k, v in figs.items() if v is not None}


def plot_groups(groups, out: Path) -> dict[str, Path]:
    """Held-out curves (one thin line per seed, a thick mean) and train success (mean over seeds) per run group."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    figs: dict[str, Path] = {}
    finals = [g.final() for g in groups]
    keys = [k for k in sorted({k for f in finals for k in f}) if "avg@" in k]
    if keys:  # the table as bars: mean ± std over seeds of every avg@k after training
        fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(groups) * len(keys)), 4.0))
        width = 0.8 / len(keys)
        for j, k in enumerate(keys):
            xs = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(groups))]
            ax.bar(
                xs,
                [f.get(k, (0, 0, 0))[0] for f in finals],
                width,
                yerr=[f.get(k, (0, 0, 0))[1] for f in finals],
                capsize=3,
                label=k,
            )
        ax.set_xticks(range(len(groups)), [g.name for g in groups], rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("held-out success")
        ax.set_title("Held-out after training (mean ± std over seeds)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        fig.tight_layout()
        figs["held-out after training"] = out / "heldout_final_by_row.png"
        fig.savefig(figs["held-out after training"], dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    for i, g in enumerate(groups):
        color = f"C{i % 10}"
        for _, xs, ys in g.curves():
            ax.plot(xs, ys, "o-", color=color, alpha=0.3, linewidth=0.8, markersize=3)
        mx, my = g.mean_curve()
        ax.plot(mx, my, "s-", color=color, linewidth=2, markersize=6, label=f"{g.name} (n={len(g.runs)})")
    ax.set_title("Held-out avg@k per row (thin: seeds, thick: mean)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("avg@k")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["held-out by row"] = out / "heldout_by_row.png"
    fig.savefig(figs["held-out by row"], dpi=100)
    plt.close(fig)
    train = []
    for g in groups:
        per_it: dict[int, list[float]] = {}
        for r in g.runs:
            for it, m in r.metrics.items():
                if "rollout/success_rate" in m:
                    per_it.setdefault(it, []).append(m["rollout/success_rate"])
        its = sorted(per_it)
        train.append((g.name, [float(i) for i in its], [statistics.fmean(per_it[i]) for i in its]))
    path = _plot(out / "train_success_by_row.png", "Train rollout success per row (mean over seeds)", train, "rate")
    if path:
        figs["train success by row"] = path
    return figs


# fewer held-out samples than this, or a larger sampling error, and a before/after figure means little
FEW_SAMPLES = 100
LARGE_SAMPLING_ERROR = 0.05


def heldout_lines(before: dict, after: dict, classes: list[str]) -> list[str]:
    """What the run's held-out figures rest on, one line per panel (tasks × samples, the sampling error of avg@k
    before and after, a warning where that is too little to mean much), then the samples' classes before -> after."""
    ev = before or after
    if not ev:
        return []
    lines = []
    panels = [""] + sorted({k.split("/")[0] for k in ev if k.endswith("/tasks")})
    for panel in panels:
        at = f"{panel}/" if panel else ""
        tasks, k = ev.get(f"{at}tasks"), ev.get("k")
        if not isinstance(tasks, int) or not isinstance(k, int):
            continue
        se = [e.get(f"{at}sampling_se") for e in (before, after) if e]
        shown = "/".join(f"{x:.3f}" for x in se if isinstance(x, (int, float)))
        line = f"held-out {panel or ev.get('split', 'split')}: {tasks} tasks x {k} samples (sampling error {shown})"
        if tasks * k < FEW_SAMPLES or any(isinstance(x, (int, float)) and x > LARGE_SAMPLING_ERROR for x in se):
            line += "; WARNING: too few held-out samples for a before/after difference to mean much"
        lines.append(line)
    if classes:
        lines.append("samples: " + ", ".join(f"{c}: {before.get(c)} -> {after.get(c)}" for c in classes))
    return lines
