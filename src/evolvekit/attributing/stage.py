"""Stage D with self-attributing: LLM step labels → Eq. 18-21 step advantages → token advantages (§5.4)."""

from __future__ import annotations

from typing import Literal, Sequence

import evolvekit.attributing.estimators  # noqa: F401 - registers dual_channel and gigpo
from evolvekit.attributing.attributor import StepAttributor
from evolvekit.attributing.grounded import (
    agreement,
    grounded_labels,
    most_similar,
    request_words,
    self_reference,
)
from evolvekit.attributing.sources import STEP_CREDIT, CreditInputs
from evolvekit.boundary import InformationBoundary
from evolvekit.config import AttributingConfig, Config, attribution_source
from evolvekit.protocols import IterationContext
from evolvekit.train.sample_stage import AdvantageScale, GRPOSamples, SampleSettings
from evolvekit.types import StepLabel, Task, ToolCall, Trajectory


def grounded_for(
    task: Task | None,
    traj: Trajectory,
    success_threshold: float,
    boundary: InformationBoundary | None = None,
    own_reference: list[list[ToolCall]] | None = None,
    borrowed: bool = False,
    answer_from_check: bool = True,
) -> list[StepLabel]:
    """Grounded labels of one trajectory (attributing/grounded.py). The reference is the task's own where the
    boundary lets the training side read it (a synthesized task's, or any under ``run.oracle``), else
    ``own_reference``: the calls of a successful episode of the same task from this run (``self_reference``); with
    neither, the generic fallback (errors BAD, the final answer by the check unless ``answer_from_check`` is off, the
    rest NEUTRAL). ``borrowed``: ``own_reference`` comes from a
    similar task's success, so rule 3 matches tool names only. Closed gold also drops the steps' distances to the
    reference end state (``InformationBoundary.steps_view``)."""
    gate = boundary if boundary is not None else InformationBoundary()
    reference = gate.reference(task)
    steps = gate.steps_view(task, traj.steps)
    match: Literal["call", "name"] = "call"
    if reference is None:
        reference, match = own_reference, ("name" if borrowed else "call")
    return grounded_labels(steps, reference, traj.checked_outcome >= success_threshold, match, answer_from_check)


class AttributedSamples(GRPOSamples):
    """Replaces ``GRPOSamples``' advantages with step-level ones from both channels; the rest of the build is shared."""

    def __init__(
        self,
        settings: SampleSettings,
        attributing: AttributingConfig,
        source: str,
        success_threshold: float,
        attributor: StepAttributor | None,
        advantage_scale: AdvantageScale | None = None,
        boundary: InformationBoundary | None = None,
    ) -> None:
        super().__init__(settings, advantage_scale)
        self.acfg, self.source, self.success_threshold = attributing, source, success_threshold
        self.attributor = attributor
        self.boundary = boundary if boundary is not None else InformationBoundary()
        # per task, the calls of the shortest successful episode this run has seen (the self-derived reference of a
        # task whose gold is closed) and the task's request words (to find it for a similar task); in memory: a
        # resumed run starts them afresh
        self.own_successes: dict[str, list[list[ToolCall]]] = {}
        self.success_words: dict[str, frozenset[str]] = {}

    @classmethod
    def from_config(  # type: ignore[override]
        cls,
        cfg: Config,
        attributor: StepAttributor | None,
        advantage_scale: AdvantageScale | None = None,
        boundary: InformationBoundary | None = None,
    ) -> AttributedSamples:
        """The composition: what this stage reads of the config, gathered here (the stage reads no other section)."""
        return cls(
            SampleSettings.of(cfg),
            cfg.attributing,
            attribution_source(cfg),
            cfg.reward.success_threshold,  # the run's one definition of success
            attributor,
            advantage_scale,
            boundary if boundary is not None else InformationBoundary(cfg.run.oracle),
        )

    def step_advantages(
        self, ctx: IterationContext, live: Sequence[Trajectory]
    ) -> tuple[list[dict[int, float]], dict[str, float]]:
        """Step labels from the registered step-credit source (attributing/sources.py; none for gigpo or ``mode:
        outcome_only``), then the configured advantage estimator (dual_channel: Eq. 18-21; train/advantages.py)."""
        metrics: dict[str, float] = {}
        labels: list = [None] * len(live)
        if self.source in STEP_CREDIT and self.acfg.mode != "outcome_only":
            labels = self._labels(ctx, live, self.source, metrics)
        step_adv, more = self.estimator(self.batch(ctx, live, labels))
        return step_adv, {**metrics, **more}

    def _labels(
        self, ctx: IterationContext, live: Sequence[Trajectory], source: str, metrics: dict[str, float]
    ) -> list[list[StepLabel] | None]:
        """Step labels from the configured source; any source but ``grounded`` is also scored against the grounded
        labels wherever the task has a reference of its own (``attribution/agreement_with_grounded``: the source's
        measured accuracy)."""
        tasks = ctx.store.task_index()
        threshold = self.success_threshold  # the run's one definition of success
        own, borrowed = self._own_references(live, tasks, threshold, metrics)
        grounded = [
            grounded_for(
                tasks.get(t.task_id),
                t,
                threshold,
                self.boundary,
                own.get(t.task_id),
                t.task_id in borrowed,
                self.acfg.answer_from_check,
            )
            for t in live
        ]
        result = STEP_CREDIT[source](CreditInputs(live, self.boundary.tasks_view(tasks), grounded, self.attributor))
        labels = result.labels
        metrics.update(result.metrics)
        if source != "grounded":
            agree = compared = 0
            for t, lab, ground in zip(live, labels, grounded):
                task = tasks.get(t.task_id)
                mine = t.task_id in own and t.task_id not in borrowed  # a borrowed reference is no yardstick
                if lab is not None and (self.boundary.reference(task) is not None or mine):
                    a, n = agreement(lab, ground)
                    agree, compared = agree + a, compared + n
            if compared:
                metrics["attribution/agreement_with_grounded"] = agree / compared
        for t, lab in zip(live, labels):
            t.step_attributions = lab
            t.attribution_source = source if lab is not None else None
            t.flags.attribution_neutralised = lab is None
        return labels

    def _own_references(
        self, live: Sequence[Trajectory], tasks: dict[str, Task], threshold: float, metrics: dict[str, float]
    ) -> tuple[dict[str, list[list[ToolCall]]], set[str]]:
        """Self-derived references for the tasks whose gold the boundary closes, and which of them are borrowed.
        A task's own: this batch's successful episodes of it (the shortest), else an earlier one of this run. With
        ``attributing.similar_success_min`` > 0, a closed task without its own borrows the success of the most
        similar task (request words, ``grounded.request_similarity`` at least that) that has one: the agent's own
        earlier success on a similar task, matched by tool names only. ``attribution/self_referenced`` counts the
        closed tasks with their own, ``attribution/similar_referenced`` those with a borrowed one,
        ``attribution/closed_tasks`` all closed tasks of the batch."""
        closed = {t.task_id for t in live if not self.boundary.gold_allowed(tasks.get(t.task_id))}
        for task_id in sorted({t.task_id for t in live}):
            ref = self_reference([t for t in live if t.task_id == task_id], threshold)
            task = tasks.get(task_id)
            if ref is not None and task is not None:  # every task's success: the agent's own episodes are fair
                self.own_successes[task_id] = ref
                self.success_words[task_id] = request_words(" ".join(task.turns))
        own = {k: self.own_successes[k] for k in closed if k in self.own_successes}
        borrowed: set[str] = set()
        minimum = self.acfg.similar_success_min
        for task_id in sorted(closed - own.keys()) if minimum > 0 else []:
            task = tasks.get(task_id)
            if task is None:
                continue
            found = most_similar(request_words(" ".join(task.turns)), self.success_words, minimum)
            if found is not None:
                own[task_id] = self.own_successes[found[0]]
                borrowed.add(task_id)
        metrics["attribution/closed_tasks"] = float(len(closed))
        metrics["attribution/self_referenced"] = float(len(own) - len(borrowed))
        metrics["attribution/similar_referenced"] = float(len(borrowed))
        return own, borrowed
