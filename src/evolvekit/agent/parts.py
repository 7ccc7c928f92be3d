"""The agent's parts of a run, built from config: the context template every rollout uses, the policy's sampling
settings, held-out evaluation, and the pass filter's probe (orchestrator/build.py connects them)."""

from __future__ import annotations

from typing import Any, Callable

from evolvekit.agent import evaluate  # evaluate_policy looked up when called (the wiring tests record it)
from evolvekit.agent.templates import TemplateSettings, llm_summariser
from evolvekit.config import Config
from evolvekit.engine.base import Engine
from evolvekit.env.registry import action_max_tokens, action_stop
from evolvekit.llm import factory  # its functions looked up when called (the wiring tests record them)
from evolvekit.llm.base import SamplingParams


def rollout_template(cfg: Config):
    """The context template every rollout of the run uses (§6.2.1). The sliding-window memory and the
    self-managing "compress" are written by the ``summarizer`` role; the self-managing decisions are sampled at the
    policy's temperature and top-p with ``rollout.manage_sampled``, else greedy."""
    summarise, manage = None, None
    if cfg.rollout.template in ("sliding_window", "self_managing"):
        summarise = llm_summariser(
            factory.role_llm(cfg.models, "summarizer"), factory.sampling_for(cfg.models.summarizer)
        )
        if cfg.rollout.template == "self_managing" and cfg.rollout.manage_sampled:
            pol = cfg.models.policy
            manage = SamplingParams(temperature=pol.temperature, top_p=pol.top_p, max_new_tokens=128)
    return TemplateSettings(
        template=cfg.rollout.template,
        token_limit=cfg.rollout.context_token_limit,
        summarise=summarise,
        manage_params=manage,
    )


def policy_sampling(cfg: Config, seed: int | None = None) -> SamplingParams:
    """The policy's sampling settings for rollouts and evaluation: its role's, ended also at the environment's action
    stop strings (``register_env(action_stop=...)``: a text simulator's newline) and capped at its action length
    (``env.action_max_tokens``, else the registered one: ScienceWorld's 32)."""
    pol = cfg.models.policy
    cap = action_max_tokens(cfg.env)
    limit = pol.max_new_tokens if cap is None else min(cap, pol.max_new_tokens)
    return factory.sampling_for(pol, seed=seed, stop=action_stop(cfg.env), max_new_tokens=limit)


_PANEL_KEYS = ("sampling_se", "tasks")  # a panel's figures besides avg@k/best@k/classes: its basis


def evaluator(
    cfg: Config,
    eval_tasks: list,
    held: list[tuple[str, list]],
    policy_env: Callable[[], Any],
    engine: Any,
    template: Any,
    show_progress: bool,
) -> Callable[[int], tuple[dict, list]]:
    """Held-out evaluation: the environment's eval split (first ``train.eval_tasks``), then each held-out set of
    ``held`` (synthesized tasks, panels) under its name, every sample scored by the environment's own check."""
    if cfg.train.eval_tasks:
        eval_tasks = eval_tasks[: cfg.train.eval_tasks]
    k = cfg.train.eval_k or cfg.rollout.group_size

    def evaluator(seed: int) -> tuple[dict, list]:
        eval_params = policy_sampling(cfg, seed=seed)

        def on(tasks):
            return evaluate.evaluate_policy(
                tasks, policy_env, engine, cfg.rollout, eval_params, k, cfg.env.tool_rendering, show_progress,
                template=template,
            )  # fmt: skip

        summary: dict = {"split": "none (the environment has no tasks of its own)"}
        trajs: list = []
        if eval_tasks:
            report, real_trajs = on(eval_tasks)
            summary = {**report.summary(), "split": cfg.env.eval_split}
            trajs = list(real_trajs)
        for name, tasks in held:
            rep, more = on(tasks)
            summary.update({f"{name}/{key}": v for key, v in rep.summary().items() if "@" in key or key in _PANEL_KEYS})
            trajs = list(trajs) + list(more)
        return summary, trajs

    return evaluator


def attempts(cfg: Config, engine: Engine, k: int, tasks, env_factory, rollout=None) -> list[list[float]]:
    """Per task, the environment's own scores of the policy's k attempts at it, through ``engine`` with the run's
    rollout settings (``rollout``: others), in what ``env_factory`` makes (the pass filter's probe and the requests'
    round trip)."""
    report, _ = evaluate.evaluate_policy(
        tasks,
        env_factory,
        engine,
        rollout or cfg.rollout,
        policy_sampling(cfg, seed=cfg.run.seed),
        k,
        cfg.env.tool_rendering,
        show_progress=False,
        template=rollout_template(cfg),
    )
    return [row["scores"] for row in report.per_task]


def pass_probe(cfg: Config, engine: Engine, env_factory):
    """The pass filter's probe (``questioning.pass_filter_samples`` = k > 0, else None): the policy attempts each
    task k times through the run's rollout engine, with the run's rollout settings, and the environment's own check
    scores every attempt."""
    k = cfg.questioning.pass_filter_samples
    return (lambda tasks: attempts(cfg, engine, k, tasks, env_factory)) if k else None


def round_trip(cfg: Config, engine: Engine):
    """The requests' round trip (``questioning.requests.round_trip_samples`` = k > 0, else None): the policy attempts
    each candidate task k times through ``engine`` with the run's rollout settings, in the environment the caller
    gives (which worked examples it shows), and the environment's own check scores every attempt
    (questioning/requests.py, filter 4)."""
    k = cfg.questioning.requests.round_trip_samples
    if not k:
        return None

    def trip(tasks, env_factory):
        # a candidate's reference calls and the answer: an attempt gets no more steps than that (nor than the run's)
        need = max((sum(len(turn) for turn in t.reference_solution or []) for t in tasks), default=1) + 1
        short = cfg.rollout.model_copy(update={"max_steps": min(cfg.rollout.max_steps, need)})
        return attempts(cfg, engine, k, tasks, env_factory, short)

    return trip
