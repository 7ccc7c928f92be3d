"""Build a run from config: the run directory, the store, the policy and trainer, the stages, the evaluator."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from rich.console import Console

from evolvekit.boundary import InformationBoundary
from evolvekit.config import (
    Config,
    attribution_source,
    attributor_constrained,
    extraction_constrained,
    extraction_mode,
    judge_mode,
    synthetic_reward,
    teach_search_on,
)
from evolvekit.engine.base import Engine
from evolvekit.engine.registry import rollout_engine
from evolvekit.env.examples import ShownExamples
from evolvekit.errors import ConfigError, EnvError
from evolvekit.llm.base import InProcessLLM, RolloutEngine, SamplingParams
from evolvekit.orchestrator.loop import (  # noqa: F401 - the synthesis markers, re-exported for callers of the builder
    SYNTHESIS_DONE,
    SYNTHESIS_PARTIAL,
    MasterLoop,
    RoundSink,
    Stages,
    SynthesisStage,
)
from evolvekit.orchestrator.run_dir import intact_checkpoint
from evolvekit.orchestrator.stages import (
    FixedTaskSupply,
    GRPOSamples,
    NoExperience,
    RolloutSettings,
    TrainerUpdate,
    VanillaRollouts,
)
from evolvekit.store.sqlite import RunStore

if TYPE_CHECKING:
    from evolvekit.llm.local import LocalLLM
    from evolvekit.questioning.pipeline import Funnel
    from evolvekit.train.distributed import DataParallel
    from evolvekit.train.trainer import GRPOTrainer
    from evolvekit.types import Task

log = logging.getLogger(__name__)


def rollout_template(cfg: Config):
    """The context template every rollout of the run uses (§6.2.1). The sliding-window memory and the
    self-managing "compress" are written by the ``summarizer`` role; the self-managing decisions are sampled at the
    policy's temperature and top-p with ``rollout.manage_sampled``, else greedy."""
    from evolvekit.agent.templates import TemplateSettings, llm_summariser

    summarise, manage = None, None
    if cfg.rollout.template in ("sliding_window", "self_managing"):
        from evolvekit.llm.factory import role_llm, sampling_for

        summarise = llm_summariser(role_llm(cfg.models, "summarizer"), sampling_for(cfg.models.summarizer))
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
    from evolvekit.env.registry import action_max_tokens, action_stop
    from evolvekit.llm.factory import sampling_for

    pol = cfg.models.policy
    cap = action_max_tokens(cfg.env)
    limit = pol.max_new_tokens if cap is None else min(cap, pol.max_new_tokens)
    return sampling_for(pol, seed=seed, stop=action_stop(cfg.env), max_new_tokens=limit)


def guided_boost(cfg: Config) -> float | None:
    """Eq. 17's ε_high boost, for experience-guided samples: none exist without navigating or with as_tool (the
    search action replaces injection)."""
    return cfg.navigating.eps_high_boost if cfg.navigating.enabled and not cfg.navigating.as_tool else None


def build_trainer(
    cfg: Config, store: RunStore, console: Console | None = None, parallel: DataParallel | None = None
) -> tuple[LocalLLM, GRPOTrainer]:
    """The trained policy (from the newest intact checkpoint, else the configured model) and its trainer, with its
    optimizer state restored; the same on every data-parallel rank."""
    from evolvekit.llm.factory import build_llm
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.trainer import GRPOTrainer

    pol = cfg.models.policy
    ckpt = intact_checkpoint(store, console)
    source = ckpt.path if ckpt else pol.model
    log.info("policy from %s", source)
    # The trained policy is its own instance: frozen roles that name the same model keep the original weights.
    device = pol.device
    if parallel is not None and device == "auto":  # one GPU per rank (cuda:LOCAL_RANK), or the CPU
        device = str(parallel.state.device)
    policy = LocalLLM(source, device=device, dtype=pol.dtype, packed_weights=pol.packed_weights)
    reference = None
    if cfg.train.kl_beta > 0 and not cfg.train.lora:
        reference = cast(
            InProcessLLM, build_llm(pol, "reference")
        ).model  # the initial policy, shared with frozen roles
    trainer = GRPOTrainer(
        policy,
        cfg.train,
        eps_high_boost=guided_boost(cfg),
        reference_model=reference,
        parallel=parallel,
        engine=rollout_engine(cfg, policy) if parallel is None or parallel.rank == 0 else Engine(policy),
    )
    if ckpt and not trainer.load_optimizer(Path(ckpt.path)):
        log.warning("checkpoint %s has no optimizer state; AdamW restarts from zero moments", ckpt.path)
    return policy, trainer


def serve_updates(cfg: Config, store: RunStore, parallel: DataParallel) -> int:
    """A data-parallel rank other than 0: build the same trainer, then take part in every update rank 0 announces
    (its samples arrive by broadcast) until rank 0 announces the end. Returns the number of updates."""
    _, trainer = build_trainer(cfg, store, parallel=parallel)
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
) -> MasterLoop:
    from evolvekit.env.base import ReferenceDistances
    from evolvekit.env.registry import env_tasks, has_task_source, make_env, preflight
    from evolvekit.questioning.supply import HybridTaskSupply

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    own_tasks = has_task_source(cfg.env)
    # an environment nobody wrote tasks for trains on its own synthesized tasks alone (λ = 1); otherwise its
    # person-written tasks are needed, and their absence is one line naming what to do (env_tasks)
    alone = cfg.questioning.enabled and cfg.questioning.hybrid_lambda == 1.0
    person = env_tasks(cfg.env, cfg.env.train_split) if own_tasks or not alone else []
    # λ = 1 trains on the run's own tasks: no person-written training task reaches the training side, not even its
    # request (synthesis's dedup, Evolving-RL's related-task pool, the stored list; issue 51)
    train_tasks = [] if alone else person
    heldout_synthetic = load_task_file(cfg.train.eval_synthetic) if cfg.train.eval_synthetic else []
    panels = [(Path(p).stem, load_task_file(p)) for p in cfg.train.eval_panels]  # held out, scored by the check only
    evaluating = cfg.train.eval_before or cfg.train.eval_after or cfg.train.eval_every
    if evaluating and not own_tasks and not heldout_synthetic and not panels:
        raise EnvError(
            f"held-out evaluation: environment '{cfg.env.name}' has no tasks of its own; give held-out synthesized "
            "tasks (train.eval_synthetic: a file from `evolvekit tasks synthesize` with another seed) or turn "
            "train.eval_before, train.eval_after and train.eval_every off"
        )
    # the environment starts before any model loads (exit 2 if it cannot)
    preflight(cfg.env, person[0] if person else None)  # starts the environment only (some need a task)
    policy, trainer = build_trainer(cfg, store, console, parallel)
    engine = trainer.engine  # what rollouts and evaluation generate with: the trained model, through its engine
    backend: RolloutEngine = engine.llm

    def bare_env():
        env = make_env(cfg.env)
        if isinstance(env, ReferenceDistances):  # told once, as it is built: no person-written gold distances
            env.person_reference_distances = cfg.run.oracle  # unless run.oracle (src/evolvekit/boundary.py)
        return env

    shown = shown_examples(cfg, store, policy, bare_env)  # the worked examples every prompt shows

    def env_factory():
        env = bare_env()
        return env if shown is None else ShownExamples(env, shown)

    params = policy_sampling(cfg)
    supply = _task_supply(cfg, store, train_tasks, policy, env_factory)
    synthesis = (
        synthesis_stage(cfg, train_tasks, policy, env_factory, supply.receive)
        if isinstance(supply, HybridTaskSupply)
        else None
    )  # the loop runs it before anything else: the stages below read the training set only once it exists
    template = rollout_template(cfg)
    rollouts, experience, policy_env = _navigation(
        cfg, store, backend, env_factory, params, show_progress, supply.training_set, template, shown
    )  # policy_env: what the policy acts in, in training and held-out evaluation (with as_tool: search_experience)
    samples = _sample_stage(cfg)
    if cfg.evolving_rl.enabled:  # Evolving-RL replaces stages B, C and D(samples) with its own structure
        from evolvekit.llm.factory import build_embedder
        from evolvekit.navigating.evolving_stage import evolving_rl_stages
        from evolvekit.types import TaskSource

        def candidates() -> list:  # Evolving-RL's related-task pool, once the synthesis stage has run
            return list(train_tasks) + [t for t in supply.training_set() if t.source == TaskSource.SYNTHETIC]

        rollouts, experience, samples = evolving_rl_stages(
            cfg, policy, env_factory, params, candidates, build_embedder(cfg.embedding).embed, template=template
        )
    if cfg.questioning.enabled:
        rollouts = _synthetic_rewards(cfg, rollouts)
    stages = Stages(
        supply=supply,
        rollouts=rollouts,
        experience=experience,
        samples=samples,
        updater=TrainerUpdate(trainer, parallel),
        synthesis=synthesis,
    )

    evaluator = None
    if evaluating:
        eval_tasks = env_tasks(cfg.env, cfg.env.eval_split) if own_tasks else []
        held = ([("synthetic", heldout_synthetic)] if heldout_synthetic else []) + panels
        evaluator = _evaluator(cfg, eval_tasks, held, policy_env, engine, template, show_progress)

    store.set_meta("train_tasks", json.dumps([t.task_id for t in train_tasks]))
    search = _experience_search(cfg, experience) if cfg.navigating.enabled and cfg.navigating.as_tool else None
    warmup = (
        _cold_start(cfg, store, trainer, trainer.reference, env_factory, search) if cfg.cold_start.enabled else None
    )
    return MasterLoop(cfg, run_dir, store, stages, evaluator, console, warmup=warmup, prepare=shown)


_PANEL_KEYS = ("sampling_se", "tasks")  # a panel's figures besides avg@k/best@k/classes: its basis


def _synthetic_rewards(cfg: Config, rollouts: Any) -> Any:
    """§3.3: synthesized tasks' rewards from the environment's state check or the reference-based judge."""
    from evolvekit.llm.factory import role_llm, sampling_for
    from evolvekit.questioning.judge import ConstrainedJudge, LLMJudge
    from evolvekit.questioning.reward import SyntheticRewardRollouts

    judge: LLMJudge | ConstrainedJudge | None = None
    if synthetic_reward(cfg) != "state":
        jllm, jparams = role_llm(cfg.models, "judge"), sampling_for(cfg.models.judge)
        judge = (
            ConstrainedJudge(jllm, jparams)
            if judge_mode(cfg) == "constrained"
            else LLMJudge(jllm, jparams, cfg.questioning.judge_retries)
        )
    return SyntheticRewardRollouts(rollouts, synthetic_reward(cfg), judge)


def _evaluator(
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
    from evolvekit.agent.evaluate import evaluate_policy

    if cfg.train.eval_tasks:
        eval_tasks = eval_tasks[: cfg.train.eval_tasks]
    k = cfg.train.eval_k or cfg.rollout.group_size

    def evaluator(seed: int) -> tuple[dict, list]:
        eval_params = policy_sampling(cfg, seed=seed)

        def on(tasks):
            return evaluate_policy(
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


def _experience_search(cfg: Config, experience: Any) -> Callable[[str], str]:
    """EvolveR's search over the experience pool as an action (navigating.as_tool), for the cold start's teaching."""
    from evolvekit.navigating.tool_env import search_answer

    pool = experience.pool

    def search(query: str) -> str:
        return search_answer(pool, query, cfg.navigating.search_k)[0]

    return search


WORKED_EXAMPLES = "worked_examples"  # run-store meta: the run's own worked examples (env.worked_examples: self)


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
    from evolvekit.questioning.self_examples import demos_from_json, demos_to_json, example_messages, run_examples

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
            stored = demos_to_json(run_examples(cfg, role_llm_or_policy(cfg, policy), bare_env))
            store.set_meta(WORKED_EXAMPLES, stored)
        return example_messages(demos_from_json(stored))

    from evolvekit.env.examples import Once

    return Once(make)


def role_llm_or_policy(cfg: Config, policy):
    """The explorer's model: the policy itself where the explorer is the same local model (no second copy loaded)."""
    from evolvekit.llm.factory import role_llm_or

    return role_llm_or(cfg.models, "explorer", policy)


def _cold_start(cfg: Config, store: RunStore, trainer, reference, env_factory, search_answer=None):
    """The cold-start warm-up (EvolveR): verified (task -> reference) pairs, never held-out tasks; with
    ``search_answer`` (the search tool's answer from the run's pool) each pair first calls search_experience."""

    def warmup() -> dict:
        from evolvekit.agent.templates import TemplateSettings
        from evolvekit.env.registry import env_tasks
        from evolvekit.train.sft import reference_pairs, sft_warmup
        from evolvekit.types import TaskSource

        if cfg.cold_start.tasks_file:
            tasks = load_task_file(cfg.cold_start.tasks_file)
        else:
            tasks = [t for t in store.tasks() if t.source == TaskSource.SYNTHETIC and t.metadata.get("curation")]
        held = env_tasks(cfg.env, cfg.env.eval_split)
        if cfg.train.eval_synthetic:
            held += load_task_file(cfg.train.eval_synthetic)
        held_ids, held_queries = {t.task_id for t in held}, {str(t.query) for t in held}
        tasks = [t for t in tasks if t.task_id not in held_ids and str(t.query) not in held_queries]
        gate = InformationBoundary(cfg.run.oracle)
        closed = [t for t in tasks if not gate.gold_allowed(t)]
        if closed and len(closed) == len(tasks):
            raise ConfigError(
                f"cold_start: the {len(closed)} warm-up tasks are person-written; their references are gold "
                "(set run.oracle: true to let them through, or warm up on the run's own synthesized tasks)"
            )
        tasks = [t for t in tasks if gate.gold_allowed(t)]
        template = TemplateSettings(template=cfg.rollout.template, token_limit=cfg.rollout.context_token_limit)
        teach = teach_search_on(cfg)
        pairs = reference_pairs(
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
        stats = sft_warmup(trainer, pairs, cfg.cold_start, cfg.run.seed)
        if reference is not None and not cfg.train.lora:  # the KL anchor is the warmed-up policy
            reference.load_state_dict(trainer.model.state_dict())
        return stats.as_metrics()

    return warmup


def load_task_file(path: str) -> list:
    """Tasks from a JSONL file (one Task per line), with a clear error for a missing or malformed file. A task's
    origin is where it came from, never a label inside an outside file: every task read from a file is
    person-written (``TaskSource.REAL``), whatever its ``source`` says; only tasks this run synthesized, and
    recorded as such in its own store, are synthetic (src/evolvekit/boundary.py)."""
    from evolvekit.safejson import read_jsonl
    from evolvekit.types import Task, TaskSource

    tasks = read_jsonl(path, Task, "a task")
    relabelled = sum(t.source != TaskSource.REAL for t in tasks)
    if relabelled:
        log.info(
            "%s: %d tasks say they are synthetic; read from a file, they count as person-written", path, relabelled
        )
    return [t if t.source == TaskSource.REAL else t.model_copy(update={"source": TaskSource.REAL}) for t in tasks]


def _sample_stage(cfg: Config):
    """Plain GRPO samples, or self-attributing ones (§5) when ``attributing.enabled``; under hybrid
    self-questioning (λ < 1) either one down-weights proxy-task advantages (§3.3)."""
    import evolvekit.attributing.estimators  # noqa: F401 - registers dual_channel and gigpo

    scale = None
    q = cfg.questioning
    if q.enabled and q.hybrid_lambda < 1.0:
        from evolvekit.questioning.supply import hybrid_advantage_scale

        scale = hybrid_advantage_scale(q.synthetic_advantage_decay)
    if not cfg.attributing.enabled:
        return GRPOSamples.from_config(cfg, scale)
    from evolvekit.attributing.attributor import StepAttributor
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.llm.factory import role_llm, sampling_for

    attributor = None
    # grounded and gigpo credit need no helper model
    if cfg.attributing.mode != "outcome_only" and attribution_source(cfg) == "llm":
        llm = role_llm(cfg.models, "attributor")
        attributor = StepAttributor(
            llm,
            sampling_for(cfg.models.attributor),
            cfg.attributing.max_retries,
            cfg.attributing.concurrency,
            constrained=attributor_constrained(cfg),
        )
    return AttributedSamples.from_config(cfg, attributor, scale, InformationBoundary(cfg.run.oracle))


def _stored_vectors(stored: list, blobs: dict[str, bytes]):
    """The committed embedding of every stored experience as one matrix, or None when any is missing or damaged
    (then the pool embeds them again; issue 52: a damaged pool must not stop a resume)."""
    import numpy as np

    if not stored or not all(e.experience_id in blobs for e in stored):
        return None
    try:
        return np.stack([np.frombuffer(blobs[e.experience_id], dtype=np.float32) for e in stored])
    except ValueError:
        log.warning("run store: damaged experience vectors; embedding the %d stored experiences again", len(stored))
        return None


def _navigation(
    cfg: Config,
    store: RunStore,
    policy,
    env_factory,
    params,
    show_progress: bool,
    training_set=None,
    template=None,
    shown=None,
):
    """Vanilla rollouts and no experience, or the self-navigating pair (§4) when ``navigating.enabled``; and the
    environment factory the policy acts in (with ``navigating.as_tool``, wrapped with EvolveR's search_experience:
    held-out evaluation uses it too, as EvolveR's agent searches at test time)."""
    workers = None
    if cfg.rollout.backend == "ray":  # rollouts on Ray workers, each rebuilding the environment and the policy
        from evolvekit.agent.ray_backend import RayRolloutPool, WorkerSpec

        workers = RayRolloutPool(WorkerSpec.of(cfg), examples=shown)  # workers show the driver's examples
    rollout = RolloutSettings.of(cfg)
    if not cfg.navigating.enabled:
        vanilla = VanillaRollouts(policy, env_factory, rollout, params, show_progress, template, workers)
        return vanilla, NoExperience(), env_factory
    from evolvekit.llm.factory import build_embedder, role_llm, sampling_for
    from evolvekit.navigating.extract import ExperienceExtractor, llm_equivalence
    from evolvekit.navigating.pool import ExperiencePool
    from evolvekit.navigating.stage import ExperienceMixedRollouts, ExperienceSummarisation, NavigationSettings

    summarizer = role_llm(cfg.models, "summarizer")
    sparams = sampling_for(cfg.models.summarizer)
    embedder = build_embedder(cfg.embedding)
    extraction, constrained = extraction_mode(cfg), extraction_constrained(cfg)
    pool = ExperiencePool(embedder.embed, cfg.navigating.theta_sim, llm_equivalence(summarizer, sparams, constrained))
    stored, blobs = store.experiences(), store.experience_vectors()
    vectors = _stored_vectors(stored, blobs)
    if vectors is not None:  # the committed vector index, no re-embedding
        pool.load_vectors(stored, vectors)
    else:
        pool.load(stored)  # a resumed run continues with its committed pool (embedded again)
    if not len(pool) and cfg.navigating.seed_file:  # seeded before the first commit (idempotent on resume)
        seed = Path(cfg.navigating.seed_file)
        if not seed.is_file():
            raise ConfigError(f"navigating.seed_file: no such file: {seed}")
        from evolvekit.safejson import read_jsonl
        from evolvekit.types import Experience

        try:  # loaded as given (no merging: curated seeds stay distinct); every line checked first, counters too
            pool.load(read_jsonl(seed, Experience, "an experience"))
        except ConfigError as err:
            raise ConfigError(f"navigating.seed_file: {err}") from None
    refiner = summarizer if (cfg.navigating.rerank or cfg.navigating.rewrite) else None
    if cfg.navigating.as_tool:  # EvolveR: the agent searches experience itself through a tool
        from evolvekit.navigating.tool_env import ExperienceToolEnv

        inner_factory = env_factory

        def env_factory():
            return ExperienceToolEnv(inner_factory(), pool, cfg.navigating.search_k)

    extractor = ExperienceExtractor(
        summarizer,
        sparams,
        cfg.navigating.validate_experiences,
        cfg.reward.success_threshold,
        grounded=extraction == "grounded",
        constrained=constrained,
        boundary=InformationBoundary(cfg.run.oracle),
    )
    nav = NavigationSettings.of(cfg)
    rollouts = ExperienceMixedRollouts(
        policy,
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
        from evolvekit.navigating.utility import UtilityTester

        utility = UtilityTester(
            policy,
            env_factory,
            cfg.rollout,
            params,
            cfg.env.tool_rendering,
            embedder.embed,
            cfg.navigating.utility_k,
            template,
        )
    return rollouts, ExperienceSummarisation(nav, pool, extractor, utility), env_factory


def _task_supply(cfg: Config, store: RunStore, train_tasks, policy, env_factory):
    """Real training tasks, or — with self-questioning — synthetic tasks built once per run (stored, reused on
    resume) mixed with real ones by λ (Eq. 12; the paper's default λ = 1 trains on synthetic tasks only)."""
    if cfg.env.curriculum:
        from evolvekit.env.bfcl.families import get_family
        from evolvekit.orchestrator.curriculum import CurriculumTaskSupply

        return CurriculumTaskSupply(
            cfg.env.curriculum,
            [get_family(f).tasks(cfg.env.train_split, cfg.env.family_tasks) for f in cfg.env.curriculum],
            cfg.train.tasks_per_iteration,
            cfg.run.seed,
            cfg.env.curriculum_threshold,
            cfg.env.curriculum_window,
        )
    if not cfg.questioning.enabled:
        return FixedTaskSupply(train_tasks, cfg.train.tasks_per_iteration, cfg.run.seed)
    from evolvekit.questioning.supply import HybridTaskSupply

    coevolve = _coevolve_hook(cfg, store, policy, env_factory) if cfg.coevolve.enabled else None
    # the synthetic tasks come from the loop's synthesis stage (``synthesis_stage``) before the first draw
    return HybridTaskSupply(
        None, train_tasks, cfg.train.tasks_per_iteration, cfg.questioning.hybrid_lambda, cfg.run.seed, coevolve
    )


def synthesis_stage(cfg: Config, train_tasks, policy, env_factory, receive) -> SynthesisStage:
    """Self-questioning's synthesis as a stage of the loop (orchestrator/loop.py: ``run_synthesis`` commits each
    round and resumes from them): rounds until ``questioning.synthetic_tasks`` are kept (or ``max_rounds`` more
    rounds ran). Its helper models are loaded when it runs, not when a finished run is resumed."""

    def synthesize(stored: list[Task], funnel: Funnel, on_round: RoundSink) -> tuple[list[Task], Funnel]:
        from evolvekit.llm.factory import build_embedder, role_llm, sampling_for
        from evolvekit.questioning.pipeline import SynthesisSettings, known_tasks, synthesize_tasks

        explorer = role_llm_or_policy(cfg, policy)  # the initial policy explores (no second copy of the same weights)
        settings = SynthesisSettings.of(cfg)
        tasks, funnel, _ = synthesize_tasks(
            settings,
            cfg.questioning.synthetic_tasks,
            explorer,
            sampling_for(cfg.models.explorer, seed=cfg.run.seed),  # run.seed pins self-questioning's samples too
            role_llm(cfg.models, "synthesizer"),
            sampling_for(cfg.models.synthesizer, seed=cfg.run.seed + 1),
            env_factory,
            build_embedder(cfg.embedding).embed,
            existing=known_tasks(settings.env, settings.eval_synthetic, train_tasks),
            on_round=on_round,
            resume=stored,
            funnel=funnel,
            probe=pass_probe(cfg, policy, env_factory),
        )
        return tasks, funnel

    return SynthesisStage(synthesize=synthesize, receive=receive)


def pass_probe(cfg: Config, policy, env_factory):
    """The pass filter's probe (``questioning.pass_filter_samples`` = k > 0, else None): the policy attempts each
    task k times with the run's rollout settings and the environment's own check scores every attempt."""
    k = cfg.questioning.pass_filter_samples
    if not k:
        return None
    from evolvekit.agent.evaluate import evaluate_policy

    engine = Engine(policy)  # its capabilities, found once

    def probe(tasks):
        report, _ = evaluate_policy(
            tasks,
            env_factory,
            engine,
            cfg.rollout,
            policy_sampling(cfg, seed=cfg.run.seed),
            k,
            cfg.env.tool_rendering,
            show_progress=False,
            template=rollout_template(cfg),
        )
        return [row["scores"] for row in report.per_task]

    return probe


# CoEvolve's re-exploration seeds sit between the first synthesis's (run.seed + 1000 per exploration + step)
_COEVOLVE_SEED = 500


def _coevolve_hook(cfg: Config, store: RunStore, policy, env_factory):
    from evolvekit.llm.factory import build_embedder, role_llm, sampling_for
    from evolvekit.questioning.coevolve import CoEvolveRegenerator, SignalTracker
    from evolvekit.questioning.curate import Deduplicator
    from evolvekit.questioning.pipeline import Funnel, SynthesisSettings, goal_explorer
    from evolvekit.questioning.supply import CoEvolveHook

    co, q = cfg.coevolve, cfg.questioning
    tracker = SignalTracker(co.forgetting_window, co.rare_theta_percent, co.rare_min_patterns, co.success_threshold)
    for it in store.completed_iterations():  # a resumed run rebuilds its score windows and pattern counts
        tracker.observe(store.trajectories(it, "train"))
    # seeded with the real and synthesized tasks once the synthesis stage has run (HybridTaskSupply.receive)
    dedup = Deduplicator(build_embedder(cfg.embedding).embed, q.lexical_dedup_threshold, q.semantic_dedup_threshold)
    explorer = role_llm_or_policy(cfg, policy)  # the current policy re-explores
    seed = cfg.run.seed + _COEVOLVE_SEED  # run.seed pins re-exploration too, apart from the first synthesis's draws
    run = goal_explorer(
        SynthesisSettings.of(cfg),
        co.reexplore_rounds,
        co.reexplore_steps,
        explorer,
        sampling_for(cfg.models.explorer, seed=seed),
        role_llm(cfg.models, "synthesizer"),
        sampling_for(cfg.models.synthesizer, seed=seed + 1),
        env_factory,
        dedup,
        Funnel(),
        keep_positive=co.keep_positive_reward,
    )
    regen = CoEvolveRegenerator(
        role_llm(cfg.models, "synthesizer"),
        sampling_for(cfg.models.synthesizer, seed=seed + 2),
        run,
        max_contexts=co.max_contexts,
    )
    return CoEvolveHook(tracker, regen, co.every_iterations, know=dedup.seed)
