"""The self-navigating parts of a run, built from config (§4): vanilla rollouts and no experience, or the
experience-mixed rollouts, the experience pool (resumed from the store) and its summarisation, and EvolveR's search
tool (orchestrator/build.py connects them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np

from evolvekit.agent import ray_backend  # looked up when called (the wiring tests record the pool)
from evolvekit.agent.rollout_stage import RolloutSettings, VanillaRollouts
from evolvekit.boundary import InformationBoundary
from evolvekit.config import Config, extraction_constrained, extraction_mode
from evolvekit.engine.base import Engine
from evolvekit.engine.registry import seam
from evolvekit.errors import ConfigError
from evolvekit.llm import factory  # its functions looked up when called (the wiring tests record them)
from evolvekit.navigating import extract  # llm_equivalence looked up when called (the wiring test records it)
from evolvekit.navigating.extract import ExperienceExtractor
from evolvekit.navigating.pool import ExperiencePool
from evolvekit.navigating.stage import (
    ExperienceMixedRollouts,
    ExperienceSummarisation,
    NavigationSettings,
    NoExperience,
)
from evolvekit.navigating.tool_env import ExperienceToolEnv, search_answer
from evolvekit.navigating.utility import UtilityTester
from evolvekit.safejson import read_jsonl
from evolvekit.store.sqlite import RunStore
from evolvekit.types import Experience

log = logging.getLogger(__name__)


def experience_search(cfg: Config, experience: Any) -> Callable[[str], str]:
    """EvolveR's search over the experience pool as an action (navigating.as_tool), for the cold start's teaching."""
    pool = experience.pool

    def search(query: str) -> str:
        return search_answer(pool, query, cfg.navigating.search_k)[0]

    return search


def stored_vectors(stored: list, blobs: dict[str, bytes]):
    """The committed embedding of every stored experience as one matrix, or None when any is missing or damaged
    (then the pool embeds them again; issue 52: a damaged pool must not stop a resume)."""
    if not stored or not all(e.experience_id in blobs for e in stored):
        return None
    try:
        return np.stack([np.frombuffer(blobs[e.experience_id], dtype=np.float32) for e in stored])
    except ValueError:
        log.warning("run store: damaged experience vectors; embedding the %d stored experiences again", len(stored))
        return None


def navigation(
    cfg: Config,
    store: RunStore,
    engine: Engine,
    env_factory,
    params,
    show_progress: bool,
    training_set=None,
    template=None,
    shown=None,
):
    """Vanilla rollouts and no experience, or the self-navigating pair (§4) when ``navigating.enabled``, sampling
    through the trained policy's ``engine`` (built once, with the trainer); and the
    environment factory the policy acts in (with ``navigating.as_tool``, wrapped with EvolveR's search_experience:
    held-out evaluation uses it too, as EvolveR's agent searches at test time)."""
    workers = None
    if cfg.rollout.backend == "ray":  # rollouts on Ray workers, each rebuilding the environment and the policy
        workers = ray_backend.RayRolloutPool(
            ray_backend.WorkerSpec.of(cfg), examples=shown
        )  # workers show the driver's examples
    rollout = RolloutSettings.of(cfg)
    if not cfg.navigating.enabled:
        vanilla = VanillaRollouts(engine, env_factory, rollout, params, show_progress, template, workers)
        return vanilla, NoExperience(), env_factory

    summarizer = factory.role_llm(cfg.models, "summarizer")
    sparams = factory.sampling_for(cfg.models.summarizer)
    embedder = factory.build_embedder(cfg.embedding)
    extraction, constrained = extraction_mode(cfg), extraction_constrained(cfg)
    pool = ExperiencePool(
        embedder.embed, cfg.navigating.theta_sim, extract.llm_equivalence(summarizer, sparams, constrained)
    )
    stored, blobs = store.experiences(), store.experience_vectors()
    vectors = stored_vectors(stored, blobs)
    if vectors is not None:  # the committed vector index, no re-embedding
        pool.load_vectors(stored, vectors)
    else:
        pool.load(stored)  # a resumed run continues with its committed pool (embedded again)
    if not len(pool) and cfg.navigating.seed_file:  # seeded before the first commit (idempotent on resume)
        seed = Path(cfg.navigating.seed_file)
        if not seed.is_file():
            raise ConfigError(f"navigating.seed_file: no such file: {seed}")
        try:  # loaded as given (no merging: curated seeds stay distinct); every line checked first, counters too
            pool.load(read_jsonl(seed, Experience, "an experience"))
        except ConfigError as err:
            raise ConfigError(f"navigating.seed_file: {err}") from None
    refiner = summarizer if (cfg.navigating.rerank or cfg.navigating.rewrite) else None
    if cfg.navigating.as_tool:  # EvolveR: the agent searches experience itself through a tool
        inner_factory = env_factory

        def env_factory():
            return ExperienceToolEnv(inner_factory(), pool, cfg.navigating.search_k)

    extractor = ExperienceExtractor(
        seam(summarizer),
        sparams,
        cfg.navigating.validate_experiences,
        cfg.reward.success_threshold,
        grounded=extraction == "grounded",
        constrained=constrained,
        boundary=InformationBoundary(cfg.run.oracle),
    )
    nav = NavigationSettings.of(cfg)
    rollouts = ExperienceMixedRollouts(
        engine,
        env_factory,
        rollout,
        nav,
        params,
        pool,
        refiner,
        sparams,
        show_progress,
        training_set=training_set,
        template=template,
        cold_extractor=extractor,
        workers=workers,
    )
    utility = None
    if cfg.navigating.utility_test:
        utility = UtilityTester(
            engine,
            env_factory,
            cfg.rollout,
            params,
            cfg.env.tool_rendering,
            embedder.embed,
            cfg.navigating.utility_k,
            template,
        )
    return rollouts, ExperienceSummarisation(nav, pool, extractor, utility), env_factory
