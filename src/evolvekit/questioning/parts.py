"""The self-questioning parts of a run, built from config (§3): the synthetic tasks' reward, the run's own worked
examples, the synthesis stage's work, and CoEvolve's regeneration hook (orchestrator/build.py connects them)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Callable

from evolvekit.agent.parts import pass_probe, round_trip
from evolvekit.config import Config, judge_mode, synthetic_reward
from evolvekit.engine.base import Engine
from evolvekit.env.examples import Once
from evolvekit.llm import factory  # its functions looked up when called (the wiring tests record them)
from evolvekit.questioning import judge as judges
from evolvekit.questioning import pipeline
from evolvekit.questioning.coevolve import CoEvolveRegenerator, SignalTracker
from evolvekit.questioning.curate import Deduplicator
from evolvekit.questioning.pipeline import Funnel, SynthesisSettings
from evolvekit.questioning.requests import RequestFunnel
from evolvekit.questioning.reward import SyntheticRewardRollouts
from evolvekit.questioning.self_examples import demos_from_json, demos_to_json, example_messages, run_examples
from evolvekit.questioning.supply import CoEvolveHook
from evolvekit.store.sqlite import RunStore

if TYPE_CHECKING:
    from evolvekit.types import Task

log = logging.getLogger(__name__)


def synthetic_rewards(cfg: Config, rollouts: Any) -> Any:
    """§3.3: synthesized tasks' rewards from the environment's state check or the reference-based judge."""

    judge: judges.LLMJudge | judges.ConstrainedJudge | None = None
    if synthetic_reward(cfg) != "state":
        jllm, jparams = factory.role_llm(cfg.models, "judge"), factory.sampling_for(cfg.models.judge)
        judge = (
            judges.ConstrainedJudge(jllm, jparams)
            if judge_mode(cfg) == "constrained"
            else judges.LLMJudge(jllm, jparams, cfg.questioning.judge_retries)
        )
    return SyntheticRewardRollouts(rollouts, synthetic_reward(cfg), judge)


WORKED_EXAMPLES = "worked_examples"  # run-store meta: the run's own worked examples (env.worked_examples: self)
EXAMPLE_REQUESTS = "worked_examples_requests"  # run-store meta: their requests' funnel (questioning.requests)


def shown_examples(cfg: Config, store: RunStore, policy, bare_env) -> Callable[[], list] | None:
    """The worked examples the run's prompts show (``env.worked_examples``), or None for the environment's own
    (``person``: the switch; ``make_env`` shows a person's examples only then). ``self``: made once, before anything
    else, from the explorer's own executed calls and the tools' documentation (questioning/self_examples.py), and
    stored, so a resumed run shows the same ones."""
    mode = cfg.env.worked_examples
    if mode == "person":
        log.warning("worked examples: PERSON-WRITTEN (env.worked_examples: person); every output of this run says so")
        return None
    if mode == "none":
        return list

    for field, given in (
        ("env.mcp.examples", cfg.env.mcp.examples),
        ("env.openenv.examples", cfg.env.openenv.examples),
    ):
        if given:
            log.warning(
                "%s are person-written worked examples; with env.worked_examples: self they are not shown (the run "
                "makes its own; env.worked_examples: person shows them, and every output then says so)",
                field,
            )

    def make() -> list:
        stored = store.get_meta(WORKED_EXAMPLES)
        if stored is None:
            funnel = RequestFunnel()
            stored = demos_to_json(run_examples(cfg, role_llm_or_policy(cfg, policy), bare_env, funnel=funnel))
            store.set_meta(EXAMPLE_REQUESTS, json.dumps(funnel.as_dict()))
            store.set_meta(WORKED_EXAMPLES, stored)
        return example_messages(demos_from_json(stored))

    return Once(make)


def role_llm_or_policy(cfg: Config, policy):
    """The explorer's model: the policy itself where the explorer is the same local model (no second copy loaded)."""
    return factory.role_llm_or(cfg.models, "explorer", policy)


# CoEvolve's re-exploration seeds sit between the first synthesis's (run.seed + 1000 per exploration + step)
_COEVOLVE_SEED = 500


def coevolve_hook(cfg: Config, store: RunStore, policy, env_factory):
    co, q = cfg.coevolve, cfg.questioning
    tracker = SignalTracker(co.forgetting_window, co.rare_theta_percent, co.rare_min_patterns, co.success_threshold)
    for it in store.completed_iterations():  # a resumed run rebuilds its score windows and pattern counts
        tracker.observe(store.trajectories(it, "train"))
    # seeded with the real and synthesized tasks once the synthesis stage has run (HybridTaskSupply.receive)
    dedup = Deduplicator(
        factory.build_embedder(cfg.embedding).embed, q.lexical_dedup_threshold, q.semantic_dedup_threshold
    )
    explorer = role_llm_or_policy(cfg, policy)  # the current policy re-explores
    seed = cfg.run.seed + _COEVOLVE_SEED  # run.seed pins re-exploration too, apart from the first synthesis's draws
    run = pipeline.goal_explorer(
        SynthesisSettings.of(cfg),
        co.reexplore_rounds,
        co.reexplore_steps,
        explorer,
        factory.sampling_for(cfg.models.explorer, seed=seed),
        factory.role_llm(cfg.models, "synthesizer"),
        factory.sampling_for(cfg.models.synthesizer, seed=seed + 1),
        env_factory,
        dedup,
        Funnel(),
        keep_positive=co.keep_positive_reward,
    )
    regen = CoEvolveRegenerator(
        factory.role_llm(cfg.models, "synthesizer"),
        factory.sampling_for(cfg.models.synthesizer, seed=seed + 2),
        run,
        max_contexts=co.max_contexts,
    )
    return CoEvolveHook(tracker, regen, co.every_iterations, know=dedup.seed)


def synthesis_work(cfg: Config, train_tasks, policy, engine: Engine, env_factory) -> Callable:
    """Self-questioning's synthesis, as the work of the loop's synthesis stage (orchestrator/loop.py:
    ``run_synthesis`` commits each round and resumes from them): rounds until ``questioning.synthetic_tasks`` are
    kept (or ``max_rounds`` more rounds ran). Its helper models are loaded when it runs, not when a finished run is
    resumed."""

    def synthesize(stored: list[Task], funnel: Funnel, on_round: Callable) -> tuple[list[Task], Funnel]:

        explorer = role_llm_or_policy(cfg, policy)  # the initial policy explores (no second copy of the same weights)
        settings = SynthesisSettings.of(cfg)
        tasks, funnel, _ = pipeline.synthesize_tasks(
            settings,
            cfg.questioning.synthetic_tasks,
            explorer,
            factory.sampling_for(
                cfg.models.explorer, seed=cfg.run.seed
            ),  # run.seed pins self-questioning's samples too
            factory.role_llm(cfg.models, "synthesizer"),
            factory.sampling_for(cfg.models.synthesizer, seed=cfg.run.seed + 1),
            env_factory,
            factory.build_embedder(cfg.embedding).embed,
            existing=pipeline.known_tasks(settings.env, settings.eval_synthetic, train_tasks),
            on_round=on_round,
            resume=stored,
            funnel=funnel,
            probe=pass_probe(cfg, engine, env_factory),  # the policy attempts through its rollout engine
            trip=round_trip(cfg, engine),  # the requests' round trip, through the same engine
        )
        return tasks, funnel

    return synthesize
