"""The training parts of a run, built from config: the trained policy and its trainer (with its rollout engine), and
the cold start's warm-up (orchestrator/build.py connects them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from evolvekit.agent.templates import TemplateSettings
from evolvekit.boundary import InformationBoundary
from evolvekit.config import Config, teach_search_on
from evolvekit.engine.registry import rollout_engine, seam
from evolvekit.env.registry import env_tasks
from evolvekit.env.task_file import load_task_file
from evolvekit.errors import ConfigError
from evolvekit.llm import factory, local  # looked up when called (the wiring tests record what is built)
from evolvekit.llm.base import InProcessLLM
from evolvekit.store.sqlite import RunStore
from evolvekit.train import sft  # looked up when called (the wiring tests record the warm-up)
from evolvekit.train import trainer as trainers
from evolvekit.types import Task, TaskSource

if TYPE_CHECKING:
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.distributed import DataParallel
    from evolvekit.train.trainer import GRPOTrainer

log = logging.getLogger(__name__)


def guided_boost(cfg: Config) -> float | None:
    """Eq. 17's ε_high boost, for experience-guided samples: none exist without navigating or with as_tool (the
    search action replaces injection)."""
    return cfg.navigating.eps_high_boost if cfg.navigating.enabled and not cfg.navigating.as_tool else None


def build_trainer(
    cfg: Config, ckpt: Any | None = None, parallel: DataParallel | None = None
) -> tuple[LocalLLM, GRPOTrainer]:
    """The trained policy (from the checkpoint ``ckpt``, the run's newest intact one, else the configured model) and
    its trainer, with its optimizer state restored; the same on every data-parallel rank."""
    pol = cfg.models.policy
    source = ckpt.path if ckpt else pol.model
    log.info("policy from %s", source)
    # The trained policy is its own instance: frozen roles that name the same model keep the original weights.
    device = pol.device
    if parallel is not None and device == "auto":  # one GPU per rank (cuda:LOCAL_RANK), or the CPU
        device = str(parallel.state.device)
    policy = local.LocalLLM(source, device=device, dtype=pol.dtype, packed_weights=pol.packed_weights)
    reference = None
    if cfg.train.kl_beta > 0 and not cfg.train.lora:
        reference = cast(
            InProcessLLM, factory.build_llm(pol, "reference")
        ).model  # the initial policy, shared with frozen roles
    trainer = trainers.GRPOTrainer(
        policy,
        cfg.train,
        eps_high_boost=guided_boost(cfg),
        reference_model=reference,
        parallel=parallel,
        engine=rollout_engine(cfg, policy) if parallel is None or parallel.rank == 0 else seam(policy),
    )
    if ckpt and not trainer.load_optimizer(Path(ckpt.path)):
        log.warning("checkpoint %s has no optimizer state; AdamW restarts from zero moments", ckpt.path)
    return policy, trainer


def cold_start(cfg: Config, store: RunStore, trainer, reference, env_factory, search_answer=None):
    """The cold-start warm-up (EvolveR): verified (task -> reference) pairs, never held-out tasks; with
    ``search_answer`` (the search tool's answer from the run's pool) each pair first calls search_experience. A
    ``cold_start.tasks_file`` is read and checked here, when the run is built: one that holds only person-written
    tasks is refused before anything runs (their references are gold)."""
    gate = InformationBoundary(cfg.run.oracle)
    given = _warmup_tasks(load_task_file(cfg.cold_start.tasks_file), cfg, gate) if cfg.cold_start.tasks_file else None

    def warmup() -> dict:
        if given is not None:
            tasks = given
        else:  # the run's own synthesized tasks, known once the synthesis stage has run
            own = [t for t in store.tasks() if t.source == TaskSource.SYNTHETIC and t.metadata.get("curation")]
            tasks = _warmup_tasks(own, cfg, gate)
        template = TemplateSettings(template=cfg.rollout.template, token_limit=cfg.rollout.context_token_limit)
        teach = teach_search_on(cfg)
        pairs = sft.reference_pairs(
            tasks,
            env_factory,
            trainer.llm,
            cfg.env.tool_rendering,
            template,
            cfg.cold_start.max_examples,
            cfg.cold_start.closing,
            search=search_answer if teach else None,
        )
        if not pairs:
            raise ConfigError("cold start: no verified tasks with a reference solution to warm up on")
        stats = sft.sft_warmup(trainer, pairs, cfg.cold_start, cfg.run.seed)
        if reference is not None and not cfg.train.lora:  # the KL anchor is the warmed-up policy
            reference.load_state_dict(trainer.model.state_dict())
        return stats.as_metrics()

    return warmup


def _warmup_tasks(tasks: list[Task], cfg: Config, gate: InformationBoundary) -> list[Task]:
    """The warm-up's tasks: none held out (the eval split's or train.eval_synthetic's, by id or request), and only
    those whose gold the boundary lets through; all of them closed is a ConfigError."""
    held = env_tasks(cfg.env, cfg.env.eval_split)
    if cfg.train.eval_synthetic:
        held += load_task_file(cfg.train.eval_synthetic)
    held_ids, held_queries = {t.task_id for t in held}, {str(t.query) for t in held}
    tasks = [t for t in tasks if t.task_id not in held_ids and str(t.query) not in held_queries]
    closed = [t for t in tasks if not gate.gold_allowed(t)]
    if closed and len(closed) == len(tasks):
        raise ConfigError(
            f"cold_start: the {len(closed)} warm-up tasks are person-written; their references are gold "
            "(set run.oracle: true to let them through, or warm up on the run's own synthesized tasks)"
        )
    return [t for t in tasks if gate.gold_allowed(t)]
