"""Many runs at once: an ablation directory (``<row>/seed<k>/``) or any folder of run directories.

``evolvekit report`` and ``evolvekit dashboard`` accept such a folder as well as a single run. Runs are grouped by
their parent folder name relative to the root (an ablation row), so each group's held-out curve is drawn with one
line per seed and their mean.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from evolvekit.report.figures import RunSummary, load_summary

STORE = "run.sqlite"


def is_run_dir(path: Path) -> bool:
    return (Path(path) / STORE).is_file()


def find_runs(root: Path, max_depth: int = 3) -> list[Path]:
    """Run directories under ``root`` (not ``root`` itself), sorted, at most ``max_depth`` levels down."""
    root = Path(root)
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        if depth > max_depth:
            return
        for child in sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if is_run_dir(child):
                found.append(child)
            else:
                walk(child, depth + 1)

    if root.is_dir():
        walk(root, 1)
    return found


@dataclass
class RunGroup:
    """Runs that differ only by seed (one ablation row)."""

    name: str
    runs: list[RunSummary] = field(default_factory=list)

    def curves(self) -> list[tuple[str, list[float], list[float]]]:
        return [(r.run_dir.name, *r.heldout_curve()[:2]) for r in self.runs]

    def mean_curve(self) -> tuple[list[float], list[float]]:
        """Mean held-out curve over the seeds, at the steps every seed evaluated."""
        curves = [dict(zip(xs, ys)) for _, xs, ys in self.curves() if xs]
        if not curves:
            return [], []
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        return steps, [statistics.fmean(c[s] for c in curves) for s in steps]

    def final(self, phase: str = "after") -> dict[str, tuple[float, float, int]]:
        """metric -> (mean, std, n) over seeds of one evaluation phase (``after``, else ``before``)."""
        evs = [r.evaluations.get(phase) or r.evaluations.get("before") or {} for r in self.runs]
        keys = sorted({k for ev in evs for k in ev if "@" in k and isinstance(ev[k], (int, float))})
        out = {}
        for k in keys:
            vals = [float(ev[k]) for ev in evs if k in ev]
            out[k] = (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals))
        return out


def load_groups(root: Path) -> list[RunGroup]:
    groups: dict[str, RunGroup] = {}
    for run_dir in find_runs(root):
        rel = run_dir.relative_to(root)
        name = str(rel.parent) if rel.parent != Path(".") else rel.name
        groups.setdefault(name, RunGroup(name)).runs.append(load_summary(run_dir))
    return list(groups.values())
