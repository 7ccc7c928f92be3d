"""The composition root: a run connected from its parts, top to bottom. Each part is built by a factory in its own
package (``agent/parts.py``, ``train/parts.py``, ``questioning/parts.py``, ``navigating/parts.py``,
``attributing/parts.py``), which loads what it needs; this module only connects them. ``Parts`` names the factories
``build_loop`` calls, so a test hands its own instead of patching this module."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console

from evolvekit.agent.parts import evaluator, policy_sampling, rollout_template
from evolvekit.attributing.parts import sample_stage
from evolvekit.config import Config
from evolvekit.env.bfcl.families import get_family
from evolvekit.env.examples import ShownExamples
from evolvekit.env.parts import RunTasks, bare_env_factory, run_tasks
from evolvekit.env.registry import preflight
from evolvekit.llm.factory import build_embedder
from evolvekit.navigating.evolving_stage import evolving_rl_stages
from evolvekit.navigating.parts import experience_search, navigation
from evolvekit.orchestrator.curriculum import CurriculumTaskSupply
from evolvekit.orchestrator.loop import (  # noqa: F401 - the synthesis markers, re-exported for callers of the builder
    SYNTHESIS_DONE,
    SYNTHESIS_PARTIAL,
    MasterLoop,
    Stages,
    SynthesisStage,
)
from evolvekit.orchestrator.run_dir import intact_checkpoint
from evolvekit.orchestrator.stages import FixedTaskSupply, TrainerUpdate
from evolvekit.questioning.parts import coevolve_hook, shown_examples, synthesis_work, synthetic_rewards
from evolvekit.questioning.supply import HybridTaskSupply, hybrid_advantage_scale
from evolvekit.store.sqlite import RunStore
from evolvekit.train import parts as train_parts  # build_trainer looked up when called (its wiring test records it)
from evolvekit.train.parts import cold_start
from evolvekit.types import TaskSource

if TYPE_CHECKING:
    from evolvekit.train.distributed import DataParallel


def trainer_from_store(cfg: Config, store: RunStore, console: Console | None = None, parallel=None) -> tuple:
    """The trained policy and its trainer, from the run's newest intact checkpoint (else the configured model)."""
    return train_parts.build_trainer(cfg, intact_checkpoint(store, console), parallel)


def task_supply(cfg: Config, store: RunStore, train_tasks, policy, env_factory, coevolve: Callable = coevolve_hook):
    """Real training tasks (by a curriculum of families, or fixed), or — with self-questioning — synthetic tasks
    built once per run (stored, reused on resume) mixed with real ones by λ (Eq. 12; the paper's default λ = 1
    trains on synthetic tasks only), with CoEvolve's regeneration hook when it is on."""
    e, t = cfg.env, cfg.train
    if e.curriculum:
        per_family = [get_family(f).tasks(e.train_split, e.family_tasks) for f in e.curriculum]
        return CurriculumTaskSupply(
            e.curriculum, per_family, t.tasks_per_iteration, cfg.run.seed, e.curriculum_threshold, e.curriculum_window
        )
    if not cfg.questioning.enabled:
        return FixedTaskSupply(train_tasks, t.tasks_per_iteration, cfg.run.seed)
    hook = coevolve(cfg, store, policy, env_factory) if cfg.coevolve.enabled else None
    # the synthetic tasks come from the loop's synthesis stage (``synthesis_stage``) before the first draw
    return HybridTaskSupply(None, train_tasks, t.tasks_per_iteration, cfg.questioning.hybrid_lambda, cfg.run.seed, hook)


def synthesis_stage(cfg: Config, train_tasks, policy, engine, env_factory, receive) -> SynthesisStage:
    """Self-questioning's synthesis as a stage of the loop (the policy explores; its pass probe samples through the
    rollout ``engine``); its tasks go to the supply's ``receive``."""
    return SynthesisStage(synthesize=synthesis_work(cfg, train_tasks, policy, engine, env_factory), receive=receive)


def sample_stage_for(cfg: Config):
    """(D) the sample stage, handed self-questioning's proxy-task decay under hybrid λ < 1 (§3.3)."""
    q = cfg.questioning
    # self-questioning beside person-written tasks (λ < 1): its proxy tasks' advantages decay
    scale = hybrid_advantage_scale(q.synthetic_advantage_decay) if q.enabled and q.trains_on_real else None
    return sample_stage(cfg, scale)


@dataclass(frozen=True)
class Parts:
    """The factories ``build_loop`` connects; each builds one part from the run's config and objects (loading
    models, reading the store). A test hands its own (``dataclasses.replace(PARTS, trainer=...)``)."""

    tasks: Callable[..., RunTasks] = run_tasks  # (cfg): the run's tasks, read once
    environment: Callable[..., None] = preflight  # (cfg.env, a task): starts the environment, or one line why not
    trainer: Callable[..., tuple[Any, Any]] = trainer_from_store  # (cfg, store, console, parallel)
    task_supply: Callable[..., Any] = task_supply  # (cfg, store, train_tasks, policy, env_factory)
    synthesis: Callable[..., Any] = synthesis_stage  # (cfg, train_tasks, policy, engine, env_factory, receive)
    navigation: Callable[..., tuple[Any, Any, Any]] = navigation  # (rollouts, experience, the policy's environment)
    evolving_rl: Callable[..., tuple[Any, Any, Any]] = evolving_rl_stages  # (rollouts, experience, samples)
    embedder: Callable[..., Any] = build_embedder  # (cfg.embedding), loaded once per process
    cold_start: Callable[..., Any] = cold_start  # (cfg, store, trainer, reference, env_factory, search)


PARTS = Parts()


def serve_updates(cfg: Config, store: RunStore, parallel: DataParallel, parts: Parts = PARTS) -> int:
    """A data-parallel rank other than 0: build the same trainer, then take part in every update rank 0 announces
    (its samples arrive by broadcast) until rank 0 announces the end. Returns the number of updates."""
    _, trainer = parts.trainer(cfg, store, None, parallel)
    updates = 0
    while True:
        samples: list | None = parallel.broadcast(None)
        if samples is None:
            return updates
        trainer.update(samples)
        updates += 1


def build_loop(
    cfg: Config,
    run_dir: Path,
    store: RunStore,
    console: Console | None = None,
    show_progress: bool = True,
    parallel: DataParallel | None = None,
    parts: Parts = PARTS,
) -> MasterLoop:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tasks = parts.tasks(cfg)  # 1. the run's tasks, read once (the training side's, the held-out ones)
    # 2. the environment starts before any model loads (exit 2 if it cannot); then the policy and its trainer
    parts.environment(cfg.env, tasks.first)  # starts the environment only (some need a task)
    policy, trainer = parts.trainer(cfg, store, console, parallel)
    engine = trainer.engine  # what rollouts and evaluation generate with: the trained model, through its engine
    bare_env = bare_env_factory(cfg)

    # 3. what the policy acts in: the environment with the worked examples every prompt shows
    shown = shown_examples(cfg, store, policy, bare_env)

    def env_factory():
        env = bare_env()
        return env if shown is None else ShownExamples(env, shown)

    # 4. the stages: (A) the task supply and its synthesis, (B, C) rollouts and experience, (D) samples and update
    params, template = policy_sampling(cfg), rollout_template(cfg)
    supply = parts.task_supply(cfg, store, tasks.train, policy, env_factory)
    synthesis = (
        parts.synthesis(cfg, tasks.train, policy, engine, env_factory, supply.receive)
        if isinstance(supply, HybridTaskSupply)
        else None
    )  # the loop runs it before anything else: the stages below read the training set only once it exists
    rollouts, experience, policy_env = parts.navigation(
        cfg, store, engine, env_factory, params, show_progress, supply.training_set, template, shown
    )  # policy_env: what the policy acts in, in training and held-out evaluation (with as_tool: search_experience)
    samples = sample_stage_for(cfg)
    if cfg.evolving_rl.enabled:  # Evolving-RL replaces stages B, C and D(samples) with its own structure

        def candidates() -> list:  # Evolving-RL's related-task pool, once the synthesis stage has run
            return list(tasks.train) + [t for t in supply.training_set() if t.source == TaskSource.SYNTHETIC]

        embed = parts.embedder(cfg.embedding).embed
        rollouts, experience, samples = parts.evolving_rl(
            cfg, engine, env_factory, params, candidates, embed, template=template
        )
    if cfg.questioning.enabled:
        rollouts = synthetic_rewards(cfg, rollouts)
    updater = TrainerUpdate(trainer, parallel)
    stages = Stages(supply, rollouts, experience, samples, updater, synthesis=synthesis)

    # 5. held-out evaluation, scored by the environment's own check only
    evaluate = None
    if tasks.evaluating:
        evaluate = evaluator(cfg, tasks.eval_split, tasks.held, policy_env, engine, template, show_progress)

    # 6. the cold start's warm-up (EvolveR), teaching the search action when experience is an action
    search = experience_search(cfg, experience) if cfg.navigating.enabled and cfg.navigating.as_tool else None
    warmup = (
        parts.cold_start(cfg, store, trainer, trainer.reference, env_factory, search)
        if cfg.cold_start.enabled
        else None
    )
    train_ids = [t.task_id for t in tasks.train]  # what the training side may see (the loop records them)
    return MasterLoop(
        cfg, run_dir, store, stages, evaluate, console, warmup=warmup, prepare=shown, train_task_ids=train_ids
    )
