"""avg@k / best@k evaluation (the papers' TGC-style metrics) on a set of tasks."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from evolvekit.agent.rollout import RolloutJob, require_a_valid_episode, run_rollouts
from evolvekit.config import RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.base import Environment
from evolvekit.errors import EnvError
from evolvekit.llm.base import SamplingParams
from evolvekit.types import Task, Trajectory

log = logging.getLogger(__name__)


def avg_at_k(scores_per_task: Sequence[Sequence[float]]) -> float:
    """Mean over tasks of the mean success over k samples (success = score >= 1)."""
    if not scores_per_task:
        return 0.0
    return sum(sum(1.0 if s >= 1.0 else 0.0 for s in ss) / len(ss) for ss in scores_per_task) / len(scores_per_task)


def best_at_k(scores_per_task: Sequence[Sequence[float]]) -> float:
    """Mean over tasks of whether any of the k samples succeeded."""
    if not scores_per_task:
        return 0.0
    return sum(1.0 if any(s >= 1.0 for s in ss) else 0.0 for ss in scores_per_task) / len(scores_per_task)


def sampling_error(scores_per_task: Sequence[Sequence[float]]) -> float:
    """The run-to-run sampling error of avg@k on these tasks: the standard error of the mean over tasks of each
    task's success share, sqrt(sum_i p_i(1 - p_i)/(k_i - 1)) / n with p_i the task's observed share over its k_i
    samples (the unbiased per-task variance; a task with one sample adds the largest, 1/4)."""
    if not scores_per_task:
        return 0.0
    var = 0.0
    for ss in scores_per_task:
        p = sum(1.0 if s >= 1.0 else 0.0 for s in ss) / len(ss)
        var += p * (1 - p) / (len(ss) - 1) if len(ss) > 1 else 0.25
    return var**0.5 / len(scores_per_task)


# what a held-out sample did (issue 76: say what was learned, not only how much), in order of how far it got
SAMPLE_CLASSES = ("no_call", "malformed", "wrong_tool", "wrong_args", "right")


def classify_sample(traj: Trajectory, reference: Sequence[Sequence] | None) -> str:
    """One held-out sample's class: ``right`` (the environment's check passed); else ``no_call`` (only text),
    ``malformed`` (an action that tried to call but did not parse), ``wrong_tool`` (some tool of the task's reference
    was never called), ``wrong_args`` (every reference tool called, the check still failed: wrong or invalid
    arguments). The reference is read on the evaluation side only, as the environment's check reads it."""
    if (traj.outcome_reward or 0.0) >= 1.0:
        return "right"
    calls = [c for s in traj.steps for c in s.tool_calls]
    if not calls:
        return "malformed" if any(s.parse_error for s in traj.steps) else "no_call"
    called = {c.name for c in calls}
    needed = {c.name for turn in (reference or []) for c in turn}
    return "wrong_tool" if not needed <= called else "wrong_args"


# the range an estimate gives around its point: high / low = ESTIMATE_SPREAD**2 (< 3, so each end is within 3x of
# the truth whenever the truth is inside)
ESTIMATE_SPREAD = 1.7


def pace_sample(left: int, concurrency: int) -> int:
    """How many of the ``left`` episodes an estimate waits for: the first wave (``concurrency`` episodes run at once,
    so the pace is a full batch's) or a tenth, whichever is more; ``left`` itself when that is all of them (no
    estimate then: the progress line gives the time left)."""
    return min(left, max(concurrency, -(-left // 10)))


def eval_minutes(elapsed_s: float, done: int, left: int, spread: float = ESTIMATE_SPREAD) -> tuple[float, float, float]:
    """The minutes the ``left - done`` episodes still to run take at the pace of the ``done`` that finished in
    ``elapsed_s``: (point, point / spread, point x spread)."""
    point = max(elapsed_s, 0.0) / max(done, 1) * max(left - done, 0) / 60.0
    return point, point / spread, point * spread


class PaceEstimate:
    """An evaluation's estimate that costs nothing: it is made from the evaluation's own first episodes (no episode
    is run for it), once ``pace_sample`` of them have finished, and logged with its range. Call it with each
    finished episode; ``start()`` when the episodes start."""

    def __init__(self, left: int, concurrency: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.left, self.after, self.clock = left, pace_sample(left, concurrency), clock
        self.t0: float | None = None
        self.done = 0
        self.logged: tuple[float, float, float] | None = None

    def start(self) -> None:
        self.t0 = self.clock()

    def __call__(self) -> None:
        self.done += 1
        if self.done != self.after or self.after >= self.left or self.t0 is None:
            return
        elapsed = self.clock() - self.t0
        self.logged = point, low, high = eval_minutes(elapsed, self.done, self.left)
        log.info(
            "estimate: the first %d of %d episodes took %.1f s, so the other %d take about %.1f min (%.1f-%.1f min if "
            "they are like the first; --no-estimate skips this line)",
            self.done, self.left, elapsed, self.left - self.done, point, low, high,
        )  # fmt: skip


@dataclass
class EvalReport:
    k: int
    tasks: int
    avg_at_k: float
    best_at_k: float
    mean_score: float
    failed_rollouts: int
    prompt_tokens: int
    completion_tokens: int
    per_task: list[dict] = field(default_factory=list)
    classes: dict[str, int] = field(default_factory=dict)  # SAMPLE_CLASSES: samples of each class
    sampling_se: float = 0.0  # ``sampling_error`` of avg@k

    def summary(self) -> dict:
        n = sum(self.classes.values())
        return {
            f"avg@{self.k}": round(self.avg_at_k, 4),
            f"best@{self.k}": round(self.best_at_k, 4),
            # the share of samples in each class, as figures of their own (before and after, paired like avg@k)
            **{f"class/{c}@{self.k}": round(self.classes.get(c, 0) / n, 4) if n else 0.0 for c in SAMPLE_CLASSES},
            "sampling_se": round(self.sampling_se, 4),
            "tasks": self.tasks,
            "k": self.k,
            "mean_score": round(self.mean_score, 4),
            "failed_rollouts": self.failed_rollouts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def evaluate_policy(
    tasks: Sequence[Task],
    make_env: Callable[[], Environment],
    engine: Engine,
    cfg: RolloutConfig,
    params: SamplingParams,
    k: int,
    rendering: str = "compact",
    show_progress: bool = True,
    experience_for=None,
    template=None,
    journal: EpisodeJournal | None = None,
    pace: PaceEstimate | None = None,
) -> tuple[EvalReport, list[Trajectory]]:
    """avg@k / best@k over ``tasks``; ``experience_for(task) -> (text, ids)`` injects experience (test-time use).
    ``journal``: each episode is written to it as it finishes, and the episodes it already holds are not run again
    (an interrupted evaluation continues). ``pace``: told of each episode as it finishes (the estimate)."""
    jobs = []
    for t in tasks:
        exp, ids = experience_for(t) if experience_for else (None, ())
        jobs += [
            RolloutJob(task=t, group_id=f"eval-{t.task_id}", experience=exp, experience_ids=tuple(ids))
            for _ in range(k)
        ]
    done = journal.finished() if journal is not None else {}
    todo = [i for i in range(len(jobs)) if i not in done]
    if journal is not None and done:
        log.info("evaluation: %d of %d episodes already in %s; running the other %d", len(done), len(jobs),
                 journal.path, len(todo))  # fmt: skip

    def on_done(j: int, traj: Trajectory) -> None:
        if journal is not None:
            journal.write(todo[j], traj)
        if pace is not None:
            pace()

    pending = [jobs[i] for i in todo]
    if pace is not None:
        pace.start()
    fresh = run_rollouts(pending, make_env, engine, cfg, params, rendering, show_progress, template, on_done)
    by_job = {**done, **dict(zip(todo, fresh))}
    trajs = [by_job[i] for i in range(len(jobs)) if i in by_job]
    require_a_valid_episode(trajs, "evaluation")
    by_task: dict[str, list[Trajectory]] = {}
    for tr in trajs:
        by_task.setdefault(tr.task_id, []).append(tr)
    scores = [[tr.outcome_reward or 0.0 for tr in by_task.get(t.task_id, [])] or [0.0] for t in tasks]
    per_task = [
        {
            "task_id": t.task_id,
            "scores": s,
            "steps": [len(tr.steps) for tr in by_task.get(t.task_id, [])],
            "prompt_tokens": [tr.prompt_tokens for tr in by_task.get(t.task_id, [])],
            "completion_tokens": [tr.completion_tokens for tr in by_task.get(t.task_id, [])],
            "errors": [tr.error for tr in by_task.get(t.task_id, []) if tr.error],
        }
        for t, s in zip(tasks, scores)
    ]
    flat = [x for s in scores for x in s]
    classes = {c: 0 for c in SAMPLE_CLASSES}
    for t in tasks:
        for tr in by_task.get(t.task_id, []):
            classes[classify_sample(tr, t.reference_solution)] += 1
    report = EvalReport(
        k=k,
        tasks=len(tasks),
        avg_at_k=avg_at_k(scores),
        best_at_k=best_at_k(scores),
        mean_score=sum(flat) / len(flat) if flat else 0.0,
        failed_rollouts=sum(1 for tr in trajs if tr.flags.failed),
        prompt_tokens=sum(tr.prompt_tokens for tr in trajs),
        completion_tokens=sum(tr.completion_tokens for tr in trajs),
        per_task=per_task,
        classes=classes,
        sampling_se=sampling_error(scores),
    )
    return report, trajs


class EpisodeJournal:
    """``<results>.episodes.jsonl``: one line per finished evaluation episode, written as it finishes, under a first
    line naming the evaluation (``key``: its tasks, k, policy and settings). A re-run with the same ``--out`` and the
    same key continues from the episodes it holds; one with another key is refused (nothing is overwritten)."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self._done: dict[int, Trajectory] = {}
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        if lines:
            if _journal_key(lines[0]) != key:
                raise EnvError(
                    f"{path}: holds episodes of another evaluation (other tasks, k, policy or settings); "
                    "use another --out or remove it"
                )
            for line in lines[1:]:
                try:
                    row = json.loads(line)
                    self._done[int(row["job"])] = Trajectory.model_validate(row["trajectory"])
                except (ValueError, KeyError, TypeError):  # a line cut by the interruption: that episode reruns
                    continue
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"evaluation": key}) + "\n", encoding="utf-8")

    def finished(self) -> dict[int, Trajectory]:
        return dict(self._done)

    def write(self, job: int, traj: Trajectory) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(f'{{"job": {int(job)}, "trajectory": {traj.model_dump_json()}}}\n')
        self._done[job] = traj


def _journal_key(line: str) -> object:
    """The evaluation a journal's first line names (None: the line names none)."""
    try:
        head = json.loads(line)
    except ValueError:
        return None
    return head.get("evaluation") if isinstance(head, dict) else None


def write_results(path: Path, report: EvalReport, trajectories: Sequence[Trajectory]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for row in report.per_task:
            fh.write(json.dumps(row) + "\n")
    with open(path.with_name(path.stem + ".trajectories.jsonl"), "w") as fh:
        for tr in trajectories:
            fh.write(tr.model_dump_json() + "\n")
