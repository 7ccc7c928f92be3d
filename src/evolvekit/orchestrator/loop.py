"""The master loop (AgentEvolver §6.1): (A) tasks → (B) rollouts → (C) experience → (D) samples and update.

Before the first iteration, with self-questioning, the loop runs the synthesis stage (§3): rounds of exploration,
synthesis and curation, each round's explorations and kept tasks committed as it ends, then the final funnel; a
resumed run goes on from the committed rounds, or reuses the tasks once the funnel is stored.

Crash safety: stage B commits the iteration's tasks and trajectories in one transaction (status ``rolled_out``);
stage D writes the checkpoint folder (atomic rename), then commits metrics, the checkpoint row and status ``done``
in one transaction. A resumed run skips done iterations, reuses committed rollouts of a half-finished iteration,
and recomputes only what was never committed.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

from evolvekit.boundary import InformationBoundary
from evolvekit.config import Config, examples_source, synthetic_reward
from evolvekit.orchestrator.informative import group_metrics, refill
from evolvekit.orchestrator.metrics import MetricsSink, rollout_metrics
from evolvekit.orchestrator.stages import (
    ExperienceStage,
    IterationContext,
    RolloutStage,
    SampleStage,
    TaskSupply,
    UpdateStage,
)
from evolvekit.questioning.explore import ExplorationTrace
from evolvekit.questioning.pipeline import Funnel
from evolvekit.store.sqlite import DamagedRows, IterationStatus, RunStore
from evolvekit.train.rewards import shape_rewards
from evolvekit.types import Task, TaskSource, Trajectory

log = logging.getLogger(__name__)

Evaluator = Callable[[int], tuple[dict, list[Trajectory]]]  # seed -> (summary with avg@k/best@k, trajectories)


SYNTHESIS_DONE = "synthesis_funnel"  # run-store meta: the final funnel, written once synthesis has finished
SYNTHESIS_PARTIAL = "synthesis_funnel_partial"  # the funnel as of the last finished round

RoundSink = Callable[[Funnel, list[ExplorationTrace], list[Task]], None]


@dataclass
class SynthesisStage:
    """Self-questioning's synthesis (§3), run once before training. ``synthesize(stored, funnel, on_round)`` goes
    on from the tasks and funnel of the rounds already committed, calls ``on_round`` as each round ends, and returns
    every kept task and the final funnel; ``receive`` hands the tasks to the task supply (λ-mixing, Eq. 12)."""

    synthesize: Callable[[list[Task], Funnel, RoundSink], tuple[list[Task], Funnel]]
    receive: Callable[[Sequence[Task]], None]


@dataclass
class Stages:
    supply: TaskSupply
    rollouts: RolloutStage
    experience: ExperienceStage
    samples: SampleStage
    updater: UpdateStage
    synthesis: SynthesisStage | None = None


def run_synthesis(store: RunStore, stage: SynthesisStage) -> list[Task]:
    """The synthesis stage with its commits: each round's explorations, kept tasks and funnel in one transaction as
    the round ends, the final funnel once it has finished. A run killed in between goes on from its committed rounds;
    a finished one reuses its tasks. The kept tasks go to the supply (``stage.receive``) and are returned."""
    stored = [t for t in store.tasks() if t.source == TaskSource.SYNTHETIC and t.metadata.get("curation")]
    if store.get_meta(SYNTHESIS_DONE) is None:  # not synthesized yet, or interrupted: go on from the stored rounds
        partial = store.get_meta(SYNTHESIS_PARTIAL)
        funnel = Funnel(**json.loads(partial)) if partial else Funnel()
        if stored:
            log.info(
                "resuming self-questioning with %d stored synthetic tasks (funnel so far: %s)",
                len(stored),
                funnel.as_dict(),
            )

        def keep_round(funnel: Funnel, new_traces: list[ExplorationTrace], new_kept: list[Task]) -> None:
            with store.transaction() as c:
                store.put_explorations(c, new_traces, -1)
                store.put_tasks(c, new_kept, -1)
                store.put_meta(c, SYNTHESIS_PARTIAL, json.dumps(funnel.as_dict()))

        stored, funnel = stage.synthesize(stored, funnel, keep_round)
        store.set_meta(SYNTHESIS_DONE, json.dumps(funnel.as_dict()))
        log.info("self-questioning funnel: %s", funnel.as_dict())
    stage.receive(stored)
    return stored


def training_signal(store: RunStore) -> dict:
    """How much the run's training had to learn from: the distinct tasks its updates saw, and the informative groups
    (outcomes not all equal) of each iteration (issue 96; orchestrator/informative.py)."""
    done = store.completed_iterations()
    metrics = store.metrics()
    return {
        "distinct_tasks_trained": len({t.task_id for it in done for t in store.trajectories(it, "train")}),
        "informative_groups": [metrics[it]["groups/informative"] for it in done if "groups/informative" in metrics[it]],
    }


def iteration_seed(seed: int, iteration: int) -> int:
    return seed * 1_000_003 + iteration


class MasterLoop:
    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        store: RunStore,
        stages: Stages,
        evaluator: Evaluator | None = None,
        console: Console | None = None,
        warmup: Callable[[], dict] | None = None,
        boundary: InformationBoundary | None = None,
        prepare: Callable[[], object] | None = None,
        train_task_ids: Sequence[str] = (),
    ) -> None:
        self.cfg, self.run_dir, self.store, self.stages = cfg, Path(run_dir), store, stages
        # the person-written tasks the training side may see, recorded in the store when the run starts
        self.train_task_ids = list(train_task_ids)
        # what the loop's reward shaping may read of a task (src/evolvekit/boundary.py)
        self.boundary = boundary if boundary is not None else InformationBoundary(cfg.run.oracle)
        self.evaluator = evaluator
        self.warmup = warmup  # cold start (EvolveR): supervised warm-up before iteration 0
        # made before anything else runs (the run's own worked examples: never inside a rollout's decode batch)
        self.prepare = prepare
        self.console = console or Console(stderr=True)

    # -- evaluation --------------------------------------------------------------------------------------------
    def _evaluate(self, phase: str, iteration: int) -> dict | None:
        if self.evaluator is None:
            return None
        t0 = time.perf_counter()
        summary, trajs = self.evaluator(iteration_seed(self.cfg.run.seed, 10_000 + iteration))
        trajs = self.boundary.trajectories_view([], trajs)  # held-out tasks: scored by outcome, no step distances
        summary = {**summary, "seconds": round(time.perf_counter() - t0, 1), "iteration": iteration}
        with self.store.transaction() as c:
            self.store.delete_iteration_trajectories(c, iteration, f"eval_{phase}")
            self.store.put_trajectories(c, trajs, iteration, f"eval_{phase}")
            if phase in ("before", "after", "cold_start"):
                self.store.put_evaluation(c, phase, summary)
        self.console.print(
            f"[bold]held-out evaluation ({phase})[/bold]: "
            + " ".join(f"{k}={v}" for k, v in summary.items() if "@" in k)
        )
        return summary

    # -- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg, store = self.cfg, self.store
        start = store.next_iteration()
        if start > 0:
            self.console.print(f"resuming at iteration {start} ({start} done)")
        sink = MetricsSink(
            self.run_dir,
            start,
            tensorboard="tensorboard" in cfg.train.report_to,
            report_to=tuple(cfg.train.report_to),
            config=cfg.model_dump(mode="json"),
        )
        store.set_meta("train_tasks", json.dumps(self.train_task_ids))  # what the training side may see
        try:
            if self.prepare is not None:
                self.prepare()
            if self.stages.synthesis is not None:
                run_synthesis(store, self.stages.synthesis)
            if cfg.train.eval_before and store.evaluation("before") is None:
                self._evaluate("before", -1)
            if self.warmup is not None and start == 0 and store.get_meta("cold_start") is None:
                self._cold_start()
            for it in range(start, cfg.train.iterations):
                self._iteration(it, sink)
            if cfg.train.eval_after and store.evaluation("after") is None:
                self._evaluate("after", cfg.train.iterations)
        finally:
            sink.close()
        evaluations = {p: e for p in ("before", "after") if (e := store.evaluation(p))}
        curve = sink.plot(store.metrics(), evaluations)
        cold = store.get_meta("cold_start")
        signal = training_signal(store)
        summary = {
            "run_dir": str(self.run_dir),
            "gold": "oracle" if cfg.run.oracle else "none",  # src/evolvekit/boundary.py
            "examples": examples_source(cfg),  # where every prompt's worked examples come from (env.worked_examples)
            "iterations": len(store.completed_iterations()),
            "eval_before": evaluations.get("before"),
            "eval_after": evaluations.get("after"),
            **({"cold_start": json.loads(cold), "eval_cold_start": store.evaluation("cold_start")} if cold else {}),
            "metrics": str(self.run_dir / "metrics.jsonl"),
            "tensorboard": str(self.run_dir / "tensorboard"),
            "learning_curve": str(curve),
            "store": str(store.path),
            "checkpoint": (latest.path if (latest := store.latest_checkpoint()) else None),
            **signal,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        if signal["informative_groups"]:
            self.console.print(
                f"training signal: {signal['distinct_tasks_trained']} distinct tasks; informative groups per "
                f"iteration {', '.join(f'{g:g}' for g in signal['informative_groups'])}"
            )
        return summary

    def _cold_start(self) -> None:
        """Warm up, checkpoint the warmed-up policy (iteration -1, so a resumed run starts from it), evaluate."""
        assert self.warmup is not None
        metrics = self.warmup()
        ckpt = self.stages.updater.save(self.run_dir / "checkpoints" / "cold-start")
        with self.store.transaction() as c:
            self.store.put_checkpoint(c, -1, str(ckpt))
            c.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("cold_start", json.dumps(metrics)))
        self.console.print("[bold]cold start[/bold]: " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
        if self.evaluator is not None and (self.cfg.train.eval_before or self.cfg.train.eval_after):
            self._evaluate("cold_start", -1)

    def _iteration(self, it: int, sink: MetricsSink) -> None:
        cfg, store, st = self.cfg, self.store, self.stages
        ctx = IterationContext(iteration=it, seed=iteration_seed(cfg.run.seed, it), run_dir=self.run_dir, store=store)
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        reused: list[Trajectory] | None = None
        if store.iteration_status(it) == IterationStatus.ROLLED_OUT:
            try:  # every committed rollout, or none: a group missing a damaged row would bias its advantages
                reused = store.trajectories(it, "train", strict=True)
                log.info("iteration %d: reusing %d committed rollouts", it, len(reused))
            except DamagedRows as err:
                log.warning("iteration %d: %s among its committed rollouts; rolling out again", it, err)
        refilled: dict[str, float] = {}
        if reused is not None:
            trajectories = reused
            rolled_metrics: dict[str, float] = {}
        else:
            tasks = st.supply.tasks(ctx)
            trajectories = self._rolled(ctx, tasks)
            rolled_metrics = dict(st.rollouts.last_metrics)  # the iteration's own groups' (a refill rolls out again)
            if cfg.train.refill_groups:  # DAPO's dynamic sampling: zero-variance groups replaced before the update
                r = refill(tasks, trajectories, st.supply.training_set(), lambda ts: self._rolled(ctx, ts),
                           cfg.train.refill_groups, ctx.seed)  # fmt: skip
                tasks, trajectories = r.tasks, r.trajectories
                refilled = {
                    "groups/zero_variance_before_refill": float(r.zero_variance),
                    "groups/refill_extra": float(r.extra_groups),
                    "groups/refilled": float(r.replaced),
                }
            with store.transaction() as c:
                store.delete_iteration_trajectories(c, it, "train")
                # at the source: a non-oracle run stores no person-written reference (every reader of the store,
                # CoEvolve's and Evolving-RL's included, sees the training side's view)
                store.put_tasks(c, [self.boundary.task_view(t) for t in tasks], it)
                store.put_trajectories(c, trajectories, it, "train")
                store.set_iteration(c, it, IterationStatus.ROLLED_OUT)
        times["time/rollout_s"] = time.perf_counter() - t0
        metrics = rollout_metrics(trajectories, cfg.reward.success_threshold)
        fmt = [t.rewards.format for t in trajectories if t.rewards.format is not None]
        if fmt:  # recomputed from the stored trajectories, so a resumed iteration reports it too
            metrics["reward/format"] = sum(fmt) / len(fmt)
            metrics["reward/outcome"] = sum(
                t.rewards.outcome for t in trajectories if t.rewards.outcome is not None
            ) / len(fmt)
        metrics.update(rolled_metrics)  # e.g. judge cost, retrievals
        metrics.update(group_metrics(trajectories, cfg.reward.success_threshold))
        metrics.update(refilled)
        metrics.update(st.supply.observe(ctx, trajectories))
        t1 = time.perf_counter()
        metrics.update(st.experience.process(ctx, trajectories))
        times["time/experience_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        samples, sample_metrics = st.samples.build(ctx, trajectories)
        metrics.update(sample_metrics)
        t2 = time.perf_counter()
        times["time/samples_s"] = t2 - t1  # advantages, step credit and tokenisation
        metrics.update(st.updater.update(ctx, samples))
        times["time/update_s"] = time.perf_counter() - t1  # the samples and the optimizer step together
        log.info(
            "iteration %d/%d: update step on %d samples: loss %+.4f in %.1fs (samples and step credit %.1fs before)",
            it + 1,
            cfg.train.iterations,
            len(samples),
            metrics.get("train/loss", 0.0),
            time.perf_counter() - t2,
            times["time/samples_s"],
        )
        ckpt = st.updater.save(self.run_dir / "checkpoints" / f"iter-{it:04d}")
        every, last = cfg.train.eval_every, it + 1 == cfg.train.iterations
        # the last iteration's point is the evaluation after training when there is one (not evaluated twice)
        if every and ((it + 1) % every == 0 or last) and not (last and cfg.train.eval_after):
            ev = self._evaluate("periodic", it)
            if ev:
                metrics.update({f"eval/{k}": float(v) for k, v in ev.items() if "@" in k})
        times["time/iteration_s"] = time.perf_counter() - t0
        metrics.update(times)
        with store.transaction() as c:
            store.update_trajectories(c, trajectories)  # stages C/D may have annotated them (e.g. step labels)
            st.experience.commit(c, store, it)  # e.g. the experience pool, committed with the iteration
            st.supply.commit(c, store, it)  # e.g. CoEvolve's new tasks
            store.put_metrics(c, it, metrics)
            store.put_checkpoint(c, it, str(ckpt))
            store.set_iteration(c, it, IterationStatus.DONE)
        self._prune_checkpoints()
        evaluations = {p: e for p in ("before", "after") if (e := store.evaluation(p))}
        sink.write(it, metrics, store.metrics(), evaluations)
        self.console.print(
            f"iteration {it + 1}/{cfg.train.iterations}: reward {metrics.get('rollout/reward_mean', 0):.3f} "
            f"success {metrics.get('rollout/success_rate', 0):.3f} "
            f"parse-errors {metrics.get('rollout/parse_error_rate', 0):.2f} "
            f"loss {metrics.get('train/loss', 0):+.4f} ({times['time/iteration_s']:.0f}s)"
        )

    def _rolled(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        """Stage B for ``tasks``, as the training side may see it (no person-written task's reference distances),
        each reward computed once from its record: judge mix (§3.4), EvolveR §3.3, reasoning (§6.2.1), partial."""
        cfg = self.cfg
        trajectories = self.boundary.trajectories_view(tasks, self.stages.rollouts.rollout(ctx, tasks))
        # partial credit reads a reference: a person-written task's only under run.oracle
        references = self.boundary.references(tasks) if cfg.reward.w_partial else None
        shape_rewards(
            trajectories,
            cfg.reward.w_outcome,
            cfg.reward.w_format,
            cfg.reward.format,
            cfg.reward.w_reasoning,
            cfg.reward.w_partial,
            references,
            synthetic_reward(cfg),
            cfg.questioning.judge_weight,
        )
        return trajectories

    def _prune_checkpoints(self) -> None:
        """Keep the newest ``keep_checkpoints`` folders; only the newest keeps its optimizer state."""
        rows = self.store.checkpoints()
        keep = max(1, self.cfg.train.keep_checkpoints)
        for i, row in enumerate(rows):
            path = Path(row.path)
            if i < len(rows) - keep:
                shutil.rmtree(path, ignore_errors=True)
            elif i < len(rows) - 1:
                (path / "optimizer.pt").unlink(missing_ok=True)
