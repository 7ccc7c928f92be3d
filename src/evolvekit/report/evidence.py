"""Learning results as claims: per-row held-out figures over seeds (mean ± std and a t-interval, 95% unless the spec
names another level), Steps@0.9 and AUC against the baseline row (AgentEvolver Table 6), and each run's
helper-health figures.

``benchmarks/evidence/evidence.py`` writes a results file of this shape (``EvidenceFile``); a run configured with
``train.compare_with`` prints the baseline row's figures next to its own when the family and budget match
(``budget_of``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction
from evolvekit.config import Config
from evolvekit.report.collection import RunGroup
from evolvekit.report.figures import RunSummary

# what must match for two runs' held-out figures to be compared: the family, the training budget and the evaluation
BUDGET_FIELDS = (
    "env.family",
    "rollout.max_steps",
    "rollout.group_size",
    "train.iterations",
    "train.tasks_per_iteration",
    "train.learning_rate",
    "train.eval_tasks",
    "train.eval_k",
    "models.policy.max_new_tokens",
)


def budget_of(cfg: Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in BUDGET_FIELDS:
        value: Any = cfg
        for part in path.split("."):
            value = getattr(value, part)
        out[path] = value
    return out


DEFAULT_CONFIDENCE = 0.95


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t quantile t_{(1 + confidence) / 2, df} (12.706 for 95% at df = 1)."""
    from scipy import stats

    return float(stats.t.ppf((1 + confidence) / 2, df))


def level(confidence: float) -> str:
    """``0.975`` -> ``97.5%``."""
    return f"{confidence * 100:g}%"


class Interval(BaseModel):
    """Mean ± sample std over seeds and the t-interval of the mean at ``confidence`` (a point when n = 1)."""

    model_config = ConfigDict(extra="forbid")
    mean: float
    std: float
    n: int
    low: float
    high: float
    confidence: float = DEFAULT_CONFIDENCE


def interval(values: list[float], confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """mean ± t_{(1 + confidence) / 2, n-1} · s / √n over the seeds' values."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if n == 1:
        return Interval(mean=mean, std=0.0, n=1, low=mean, high=mean, confidence=confidence)
    std = statistics.stdev(values)
    half = t_quantile(confidence, n - 1) * std / math.sqrt(n)
    return Interval(mean=mean, std=std, n=n, low=mean - half, high=mean + half, confidence=confidence)


def sign_flip_p(diffs: Sequence[float]) -> float:
    """The exact two-sided sign-flip (permutation) test of paired differences against 0: the share of the 2^n sign
    assignments whose |mean| is at least the observed |mean| (the observed one included, so p >= 2^-n; ten
    differences of one sign give 2/1024 = 0.00195). Exact enumeration: at most 24 differences."""
    n = len(diffs)
    if n == 0:
        raise ValueError("no differences")
    if n > 24:
        raise ValueError(f"exact sign-flip enumeration is for at most 24 differences, got {n}")
    observed = abs(sum(diffs)) - 1e-12
    hits = 0
    for mask in range(1 << n):
        total = sum(-d if mask >> i & 1 else d for i, d in enumerate(diffs))
        hits += abs(total) >= observed
    return hits / (1 << n)


def improved_share(diffs: Sequence[float]) -> float:
    """The share of seeds whose paired difference is above 0 (a tie is not an improvement)."""
    if not diffs:
        raise ValueError("no differences")
    return sum(d > 0 for d in diffs) / len(diffs)


class Paired(BaseModel):
    """A seed-paired difference: its interval, the exact sign-flip p and the share of seeds above 0."""

    model_config = ConfigDict(extra="forbid")
    interval: Interval
    sign_flip_p: float
    improved: float
    diffs: list[float]


def paired(after: Sequence[float], before: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> Paired:
    """after − before per seed (same seeds, same order) with its interval, sign-flip p and improved share."""
    if len(after) != len(before):
        raise ValueError("paired difference needs the same seeds on both sides")
    diffs = [a - b for a, b in zip(after, before)]
    return Paired(
        interval=interval(diffs, confidence),
        sign_flip_p=sign_flip_p(diffs),
        improved=improved_share(diffs),
        diffs=diffs,
    )


def recovered_share(lift: float, reference_lift: float) -> float | None:
    """The share of a reference row's mean lift over the base model that a row recovers (None when the reference
    did not lift: a share of a non-positive lift means nothing)."""
    return lift / reference_lift if reference_lift > 0 else None


def difference(a: list[float], b: list[float], confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The row-minus-baseline difference of seed-paired values (same seeds), as an interval over the pairs."""
    if len(a) != len(b):
        raise ValueError("paired difference needs the same seeds in both rows")
    return interval([x - y for x, y in zip(a, b)], confidence)


def seed_paired(
    ours: dict[int, float], theirs: dict[int, float], confidence: float = DEFAULT_CONFIDENCE
) -> Interval | None:
    """``difference`` over the seeds both rows have (values by seed); None below two pairs."""
    seeds = [s for s in ours if s in theirs]
    if len(seeds) < 2:
        return None
    return difference([ours[s] for s in seeds], [theirs[s] for s in seeds], confidence)


class RunHealth(BaseModel):
    """One run's helper-health figures (None: the helper was off in the run)."""

    model_config = ConfigDict(extra="forbid")
    seed: int
    helper_sources: dict[str, str] = Field(default_factory=dict)
    attribution_mixed_groups: float | None = None  # groups with mixed outcomes whose attribution channel was live
    attribution_agreement_with_grounded: float | None = None
    judge_calls: float | None = None
    judge_fallback_rate: float | None = None
    extraction_jobs: float | None = None
    validated_share: float | None = None
    synthetic_tasks: float | None = None
    minutes: float | None = None
    # person-written training tasks whose gold was closed, and the share of them step credit had a self-derived
    # reference for (the group's own success, or an earlier one): None where no such task was trained on
    closed_tasks: float | None = None
    self_referenced_share: float | None = None
    # of those, the ones credited from a borrowed success on a similar task (attributing.similar_success_min);
    # None where no such task was trained on or the run did not log it (runs made before 436091b)
    similar_referenced: float | None = None


class RowResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    seeds: list[int]
    before: dict[str, Interval] = Field(default_factory=dict)
    after: dict[str, Interval] = Field(default_factory=dict)
    per_seed_after: dict[str, list[float]] = Field(default_factory=dict)
    vs_baseline: dict[str, Interval] = Field(default_factory=dict)  # paired after-training difference
    # after − before per seed (the base model is every run's evaluation before training): interval, sign-flip p
    vs_before: dict[str, Paired] = Field(default_factory=dict)
    oracle: bool = False  # some run of the row let person-written gold reach training (run.oracle)
    person_examples: bool = False  # some run of the row showed person-written worked examples (env.worked_examples)
    steps_at_09: float | None = None  # iterations to reach 90% of the baseline's best held-out avg (mean curve)
    target: float | None = None  # the value Steps@0.9 was measured against (None: not measurable)
    auc: float | None = None  # area under the mean held-out curve
    health: list[RunHealth] = Field(default_factory=list)
    curve: list[tuple[float, float]] = Field(default_factory=list)  # the mean held-out curve (iteration, value)
    commit: str | None = None  # the code the row's runs were made at (None: the file's commit)


class EvidenceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    family: str
    budget: dict[str, Any]
    baseline: str
    rows: dict[str, RowResult]
    command: str
    commit: str
    lift_reference: str | None = None  # the row whose lift over the base model the others' recovered share is of
    # rows left out because not all their pre-registered seeds have finished (benchmarks/evidence/evidence.py
    # --complete-only): name -> finished seeds; their figures are not reported until every seed is in
    pending: dict[str, int] = {}


def load_evidence(path: Path | str) -> EvidenceFile:
    return EvidenceFile.model_validate_json(Path(path).read_text())


def _figure(name: str, row: RowResult, key: str) -> str:
    iv, b = row.after[key], row.before.get(key)
    return (
        f"{name} {'' if b is None else f'{b.mean:.3f} -> '}{iv.mean:.3f} ± {iv.std:.3f} "
        f"({level(iv.confidence)} CI {iv.low:.3f}..{iv.high:.3f}, {iv.n} seed{'s' if iv.n != 1 else ''})"
    )


def comparison_line(path: Path | str, cfg: Config, after: dict | None, code: str | None = None) -> str:
    """The line a run prints at its end: the baseline row's committed figures for the same family and budget, and
    those of the row named like the run (``run.name``: this configuration over seeds, so one run's seed is seen
    against its own spread), with the seed-paired difference between the two; while the baseline row has not
    finished, the run's own row alone (its lift over the base model), the baseline said to be missing. ``code``:
    the commit of the code that made this run; when the rows were made by other code, the line says so."""
    path = Path(path)
    if not path.is_file():
        return f"no committed baseline figures at {path} (train.compare_with)"
    try:
        ev = load_evidence(path)
    except ValueError as err:
        return f"{path}: not a results file ({str(err).splitlines()[0]})"
    found = ev.rows.get(ev.baseline)
    row = found if found is not None and found.after else None
    ours = budget_of(cfg)
    diff = [k for k in BUDGET_FIELDS if ev.budget.get(k) != ours[k]]
    name = cfg.train.compare_row or cfg.run.name
    mine = ev.rows.get(name) if name != ev.baseline else None
    own = mine if mine is not None and mine.after else None
    if row is None and own is None:
        return f"{path}: no finished '{ev.baseline}' row yet"
    if diff:
        return f"{path}: not comparable (its budget differs in {', '.join(diff)})"
    parts = []
    shown = row if row is not None else own
    assert shown is not None  # returned above when neither is there
    for key in shown.after:
        figures = [_figure(ev.baseline, row, key) if row is not None else f"{ev.baseline} not finished yet"]
        if own is not None and key in own.after:
            figures.append(_figure(f"{name} (this config)", own, key))
            if (d := own.vs_baseline.get(key)) is not None:
                figures.append(f"Δ {d.mean:+.3f} ({level(d.confidence)} CI {d.low:+.3f}..{d.high:+.3f})")
            if (p := own.vs_before.get(key)) is not None:
                iv, up = p.interval, round(p.improved * len(p.diffs))
                figures.append(
                    f"{name} over the base model {iv.mean:+.3f} ({level(iv.confidence)} CI {iv.low:+.3f}.."
                    f"{iv.high:+.3f}, sign-flip p {p.sign_flip_p:.4f}, {up} of {len(p.diffs)} seeds improve)"
                )
        if (ours_after := (after or {}).get(key)) is not None:
            figures.append(f"this run -> {ours_after}")
        parts.append(f"{key}: " + ", ".join(figures))
    commits = (row.commit if row is not None else None) or ev.commit
    if own is not None and own.commit and own.commit != commits:
        commits += f" ({name}: {own.commit})"
    line = f"same family and budget, committed at {commits}: " + "; ".join(parts)
    if code and not any(c.strip() and code.startswith(c.strip()) for c in commits.replace("(", ",").split(",")):
        line += f" (this run's code is {code}, not the rows': a difference from them includes the code's changes)"
    return line


def total(metrics: dict[int, dict[str, float]], key: str) -> float:
    """Σ over iterations of one metric."""
    return sum(float(m.get(key, 0.0)) for m in metrics.values())


def weighted(metrics: dict[int, dict[str, float]], share: str, count: str) -> tuple[float, float]:
    """(Σ share·count, Σ count) over iterations."""
    return sum(float(m.get(share, 0.0)) * float(m.get(count, 0.0)) for m in metrics.values()), total(metrics, count)


def run_health(run: RunSummary, seed: int) -> RunHealth:
    """The helper-health figures of one run, from its per-iteration metrics."""
    m = run.metrics
    has = {k for it in m.values() for k in it}
    mixed = total(m, "attribution/mixed_groups")
    judged = total(m, "judge/calls")
    closed = total(m, "attribution/closed_tasks")
    v1, n1 = weighted(m, "navigating/validated_share", "navigating/extraction_jobs")
    v0, n0 = weighted(m, "navigating/cold_start_validated_share", "navigating/cold_start_extraction_jobs")
    agree = [
        it["attribution/agreement_with_grounded"] for it in m.values() if "attribution/agreement_with_grounded" in it
    ]
    pool = [it["tasks/synthetic_pool"] for it in m.values() if "tasks/synthetic_pool" in it]
    return RunHealth(
        seed=seed,
        helper_sources=run.helper_sources,
        attribution_mixed_groups=(total(m, "attribution/mixed_groups_nondegenerate") / mixed if mixed else None)
        if "attribution/mixed_groups" in has
        else None,
        attribution_agreement_with_grounded=statistics.fmean(agree) if agree else None,
        judge_calls=judged if "judge/calls" in has else None,
        judge_fallback_rate=total(m, "judge/fallbacks") / judged if judged else None,
        extraction_jobs=n0 + n1 if {"navigating/extraction_jobs"} & has else None,
        validated_share=(v0 + v1) / (n0 + n1) if n0 + n1 else None,
        synthetic_tasks=pool[0] if pool else None,
        minutes=total(m, "time/iteration_s") / 60 if m else None,
        closed_tasks=closed if closed else None,
        self_referenced_share=total(m, "attribution/self_referenced") / closed if closed else None,
        similar_referenced=total(m, "attribution/similar_referenced")
        if closed and "attribution/similar_referenced" in has
        else None,
    )


def _seed_of(run: RunSummary) -> int:
    name = run.run_dir.name
    return int(name[4:]) if name.startswith("seed") and name[4:].isdigit() else -1


def only_seeds(groups: list[RunGroup], seeds: Sequence[int]) -> list[RunGroup]:
    """Each group with only the runs of ``seeds`` (``<row>/seed<k>``): evidence files that share one run folder (an
    original set of seeds and its replication) each report their own seeds."""
    keep = set(seeds)
    return [RunGroup(g.name, [r for r in g.runs if _seed_of(r) in keep]) for g in groups]


def row_results(groups: list[RunGroup], baseline: str, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, RowResult]:
    """Every row's figures over its finished seeds, with paired differences and Steps@0.9/AUC against ``baseline``
    (intervals at ``confidence``)."""
    finished = {g.name: [r for r in g.runs if r.evaluations.get("after")] for g in groups}
    base_runs = {_seed_of(r): r for r in finished.get(baseline, [])}
    base = next((g for g in groups if g.name == baseline), None)
    bx, by = base.mean_curve() if base else ([], [])
    # Steps@0.9 is undefined when the baseline never left 0 (every row would "reach" 0.9 · 0 before training)
    target = 0.9 * max(by) if by and max(by) > 0 else None
    out: dict[str, RowResult] = {}
    for g in groups:
        runs = sorted(finished[g.name], key=_seed_of)
        if not runs:
            continue
        keys = sorted({k for r in runs for k, v in r.evaluations["after"].items() if "@" in k and _is_num(v)})
        res = RowResult(name=g.name, seeds=[_seed_of(r) for r in runs])
        for k in keys:
            lacking = [str(r.run_dir) for r in runs if not _is_num(r.evaluations["after"].get(k))]
            if lacking:  # a row's figures are over the same seeds (per_seed_after is parallel to seeds)
                raise ValueError(f"row {g.name!r}: {k} after training is not a number in {', '.join(lacking)}")
            res.per_seed_after[k] = [float(r.evaluations["after"][k]) for r in runs]
            res.after[k] = interval(res.per_seed_after[k], confidence)
            before = [float(r.evaluations["before"][k]) for r in runs if k in (r.evaluations.get("before") or {})]
            if before:
                res.before[k] = interval(before, confidence)
            if before and len(before) == len(runs):
                res.vs_before[k] = paired(res.per_seed_after[k], before, confidence)
            # paired with the baseline's runs of the same seeds that have this figure (as merge_rows pairs)
            theirs = {s: float(v) for s, b in base_runs.items() if _is_num(v := b.evaluations["after"].get(k))}
            diff = seed_paired(dict(zip(res.seeds, res.per_seed_after[k])), theirs, confidence)
            if g.name != baseline and diff is not None:
                res.vs_baseline[k] = diff
        xs, ys = RunGroup(g.name, runs).mean_curve()
        res.curve = list(zip(xs, ys))
        res.auc = area_under_curve(xs, ys) if len(ys) > 1 else None
        res.steps_at_09 = steps_to_fraction(xs, ys, target) if target is not None and ys else None
        res.target = target if ys else None
        res.health = [run_health(r, _seed_of(r)) for r in runs]
        res.oracle = any(h.helper_sources.get("gold") == "oracle" for h in res.health)
        res.person_examples = any(h.helper_sources.get("examples", "").startswith("PERSON") for h in res.health)
        codes = {r.code for r in runs if r.code}
        # None when some run was made before runs recorded their code
        res.commit = ", ".join(sorted(codes)) if all(r.code for r in runs) else None
        out[g.name] = res
    return out


def _is_num(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def baseline_best(base: RowResult, last: int) -> float | None:
    """The best value of the baseline's mean held-out curve: the curve's maximum; for a row committed without its
    curve, its mean final avg@k when its own Steps@0.9 is ``last`` (the final evaluated iteration): a higher
    earlier point would have reached 90% of the best before the end, so the best is the final point. None when
    neither is known."""
    if base.curve:
        return max(y for _, y in base.curve)
    final = next((iv.mean for k, iv in sorted(base.after.items()) if k.startswith("avg@")), None)
    return final if base.steps_at_09 is not None and last > 0 and base.steps_at_09 == last else None


def merge_rows(
    fresh: dict[str, RowResult],
    committed: EvidenceFile,
    baseline: str,
    commit: str,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[str, RowResult]:
    """``fresh`` rows (finished runs here, made at ``commit``) over a committed results file: every committed row
    without fresh runs keeps its committed figures (and commit); a fresh row whose baseline has no runs here is
    paired with the committed baseline's per-seed values (same seeds); committed rows whose file paired them with
    another baseline are paired again with this one (their old differences would sit under this one's header).
    Every row with a curve (fresh or committed) gets its Steps@0.9 against the baseline's best mean value, when
    that is known (``baseline_best``)."""
    out = {
        name: row.model_copy(update={"commit": row.commit or committed.commit}) for name, row in committed.rows.items()
    }
    base = fresh.get(baseline) or committed.rows.get(baseline)

    def paired_with_base(row: RowResult) -> dict[str, Interval]:
        if base is None or row.name == baseline:
            return {}
        theirs = {k: dict(zip(base.seeds, v)) for k, v in base.per_seed_after.items()}
        diffs = {
            k: seed_paired(dict(zip(row.seeds, ours)), theirs.get(k, {}), confidence)
            for k, ours in row.per_seed_after.items()
        }
        return {k: d for k, d in diffs.items() if d is not None}

    if committed.baseline != baseline:  # committed differences are against another row: paired again, with this one
        out = {name: row.model_copy(update={"vs_baseline": paired_with_base(row)}) for name, row in out.items()}
    for name, row in fresh.items():
        row = row.model_copy(update={"commit": row.commit or commit})
        if baseline not in fresh:
            row.vs_baseline = paired_with_base(row)
        out[name] = row
    best = baseline_best(base, int(committed.budget.get("train.iterations", 0))) if base is not None else None
    target = 0.9 * best if best else None
    for name, row in out.items():
        if name != baseline and row.curve:
            xs, ys = [x for x, _ in row.curve], [y for _, y in row.curve]
            row.steps_at_09 = steps_to_fraction(xs, ys, target) if target is not None else None
            row.target = target
    return out


HAND_MARK = "<!-- written by hand below: kept when the report is regenerated -->"


def with_hand_part(generated: str, previous: str | None) -> str:
    """A regenerated results file keeps what was written by hand: everything of ``previous`` from ``HAND_MARK`` on
    (the runs' explanation and their reading) follows the ``generated`` tables; without the mark, nothing is kept."""
    if not previous or HAND_MARK not in previous:
        return generated
    return generated.rstrip("\n") + "\n\n" + previous[previous.index(HAND_MARK) :]
