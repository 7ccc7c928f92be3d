"""The parts the composition root connects, each built by its package's factory (issue 79.1: agent/parts.py,
train/parts.py, questioning/parts.py, navigating/parts.py, attributing/parts.py, and the engine registry), against
recorders: what each factory hands its collaborators from the config (issue 53: written from the builder's mutation
look). The collaborators are replaced inside these unit tests only. The root's own wiring is test_build_wiring.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_build_wiring import _Embedder, _Policy

from evolvekit.config import load_config
from evolvekit.engine.base import Engine
from evolvekit.llm.base import Completion
from evolvekit.types import Task, ToolCall


def test_the_pass_probe_runs_the_policy_with_the_runs_rendering_template_seed_and_k(monkeypatch):
    from evolvekit.agent import evaluate
    from evolvekit.agent.parts import pass_probe

    cfg = load_config(
        None,
        [
            "questioning.pass_filter_samples=3",
            "env.tool_rendering=json",
            "rollout.template=reasoning",
            "run.seed=7",
        ],
    )
    asked: list = []

    class _Report:
        per_task = [{"scores": [1.0, 0.0, 1.0]}]

    def record(tasks, make_env, used, rollout, params, k, rendering="compact", show_progress=True, **kw):
        asked.append((list(tasks), rollout, params, k, rendering, show_progress, {**kw, "engine": used}))
        return _Report(), []

    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    engine = Engine(_Policy())  # the run's rollout engine
    probe = pass_probe(cfg, engine, lambda: None)
    task = Task(env_name="bfcl", query="What is 2 plus 5?")
    assert probe([task]) == [[1.0, 0.0, 1.0]]
    ((tasks, rollout, params, k, rendering, show_progress, kw),) = asked
    assert tasks == [task] and k == 3 and rendering == "json" and show_progress is False
    assert rollout is cfg.rollout and params.seed == 7
    assert kw["template"].template == "reasoning" and kw["engine"] is engine  # the run's engine, not a new one
    off = load_config(None, ["questioning.pass_filter_samples=0"])
    assert pass_probe(off, engine, lambda: None) is None


def test_the_round_trip_runs_the_policy_in_the_callers_environment_with_its_own_k(monkeypatch):
    from evolvekit.agent import evaluate
    from evolvekit.agent.parts import round_trip

    cfg = load_config(None, ["questioning.requests.round_trip_samples=5", "run.seed=3", "env.tool_rendering=json"])
    asked: list = []

    class _Report:
        per_task = [{"scores": [1.0, 0.0, 0.0, 0.0, 1.0]}]

    def record(tasks, make_env, used, rollout, params, k, rendering="compact", show_progress=True, **kw):
        asked.append((list(tasks), make_env, params.seed, k, rendering, show_progress, used))
        steps.append(rollout.max_steps)
        return _Report(), []

    steps: list = []
    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    engine = Engine(_Policy())
    trip = round_trip(cfg, engine)
    call = ToolCall(name="add", arguments={"a": 2, "b": 5})
    task = Task(env_name="bfcl", query="What is 2 plus 5?", reference_solution=[[call]])

    def shown():  # the environment the caller chose: which worked examples the policy sees
        return None

    assert trip([task], shown) == [[1.0, 0.0, 0.0, 0.0, 1.0]]
    assert asked == [([task], shown, 3, 5, "json", False, engine)]
    assert steps == [2] and cfg.rollout.max_steps == 30  # the reference call and the answer: no 30-step attempts
    assert round_trip(load_config(None, ["questioning.requests.round_trip_samples=0"]), engine) is None


class _Ctx:
    """What the hybrid advantage scale reads of an iteration: the run's stored tasks."""

    def __init__(self, tasks):
        self.store = self
        self._tasks = {t.task_id: t for t in tasks}

    def task_index(self):
        return self._tasks


def test_the_sample_stage_gets_its_scale_attributor_settings_and_boundary(monkeypatch):
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.llm import factory
    from evolvekit.orchestrator.build import sample_stage_for
    from evolvekit.train.sample_stage import GRPOSamples
    from evolvekit.types import TaskSource, Trajectory

    plain = sample_stage_for(load_config(None, ["questioning.enabled=false", "attributing.enabled=false"]))
    assert type(plain) is GRPOSamples and plain.advantage_scale is None
    # hybrid self-questioning (λ < 1): proxy tasks' advantages scaled by the decay (§3.3)
    hybrid = sample_stage_for(
        load_config(
            None,
            [
                "questioning.enabled=true",
                "questioning.hybrid_lambda=0.5",
                "questioning.synthetic_advantage_decay=0.25",
                "attributing.enabled=false",
            ],
        )
    )
    syn = Task(task_id="s", env_name="bfcl", query="q", source=TaskSource.SYNTHETIC)
    real = Task(task_id="r", env_name="bfcl", query="q")
    scale = hybrid.advantage_scale(_Ctx([syn, real]))
    assert scale(Trajectory(task_id="s")) == 0.25 and scale(Trajectory(task_id="r")) == 1.0
    assert (
        sample_stage_for(
            load_config(None, ["questioning.enabled=true", "questioning.hybrid_lambda=1.0"])
        ).advantage_scale
        is None
    )
    # the LLM attributor is built with the attributing section's settings, from the attributor role
    roles: list = []
    made: list = []
    monkeypatch.setattr(
        factory, "role_llm", lambda models, role: roles.append(role) or made.append((models, _Policy())) or made[-1][1]
    )  # fmt: skip
    sets = ["attributing.enabled=true", "attributing.source=llm", "attributing.constrained=off"]
    sets += ["attributing.max_retries=5", "attributing.concurrency=3", "questioning.enabled=false"]
    cfg = load_config(None, sets)
    stage = sample_stage_for(cfg)
    assert isinstance(stage, AttributedSamples) and roles == ["attributor"]
    assert (stage.attributor.max_retries, stage.attributor.concurrency, stage.attributor.labeler) == (5, 3, None)
    assert made[-1][0] is cfg.models and stage.attributor.llm is made[-1][1]
    assert stage.attributor.params == factory.sampling_for(cfg.models.attributor)
    # constrained labels (attributing.constrained: on) from the attributor role's model and sampling
    from evolvekit.attributing import constrained as constrained_mod

    labelers: list = []
    monkeypatch.setattr(constrained_mod, "ConstrainedLabeler", lambda *args: labelers.append(args) or "labeler")
    on = sample_stage_for(load_config(None, [*sets, "attributing.constrained=on"]))
    params = on.attributor.params
    assert on.attributor.labeler == "labeler" and labelers == [(made[-1][1], params.temperature, params.seed or 0)]
    roles.pop()
    assert stage.source == "llm" and stage.boundary.oracle is False
    oracle = sample_stage_for(load_config(None, [*sets, "run.oracle=true"]))
    assert oracle.boundary.oracle is True
    # outcome_only has no attribution channel: no attributor is asked
    outcome_only = sample_stage_for(load_config(None, [*sets, "attributing.mode=outcome_only"]))
    assert outcome_only.attributor is None and roles == ["attributor"] * 2
    # grounded credit needs no helper model
    grounded = sample_stage_for(load_config(None, ["attributing.enabled=true", "attributing.source=grounded"]))
    assert grounded.attributor is None and grounded.source == "grounded" and roles == ["attributor"] * 2


def test_the_navigation_stages_get_the_pool_extractor_tool_and_utility_settings(tmp_path, monkeypatch):
    from evolvekit.agent.rollout_stage import RolloutSettings, VanillaRollouts
    from evolvekit.config import extraction_constrained, extraction_mode
    from evolvekit.llm import factory
    from evolvekit.navigating.parts import navigation
    from evolvekit.navigating.stage import ExperienceMixedRollouts, ExperienceSummarisation
    from evolvekit.navigating.tool_env import ExperienceToolEnv
    from evolvekit.orchestrator.stages import NoExperience
    from evolvekit.store.sqlite import RunStore

    summarizer = _Policy()
    monkeypatch.setattr(factory, "role_llm", lambda models, role: summarizer if role == "summarizer" else None)
    factory_embedder = _Embedder()
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: factory_embedder)
    store = RunStore(tmp_path / "run.sqlite")
    policy, params, template = _Policy(), object(), object()
    engine = Engine(policy)

    def env_factory():
        return "the environment"

    def training_set():
        return []

    off = load_config(None, ["navigating.enabled=false"])
    rollouts, experience, policy_env = navigation(off, store, engine, env_factory, params, False, None, template)
    assert type(rollouts) is VanillaRollouts and isinstance(experience, NoExperience) and policy_env is env_factory
    assert (rollouts.llm, rollouts.params, rollouts.show_progress, rollouts.template) == (
        policy,
        params,
        False,
        template,
    )

    sets = ["navigating.enabled=true", "navigating.theta_sim=0.7", "navigating.rerank=true", "run.oracle=true"]
    sets += ["navigating.validate_experiences=false", "reward.success_threshold=0.75", "navigating.as_tool=true"]
    sets += ["navigating.search_k=2", "navigating.utility_test=true", "navigating.utility_k=3"]
    cfg = load_config(None, sets)
    rollouts, experience, policy_env = navigation(cfg, store, engine, env_factory, params, True, training_set, template)
    assert isinstance(rollouts, ExperienceMixedRollouts) and isinstance(experience, ExperienceSummarisation)
    pool = rollouts.experiences
    assert experience.pool is pool and pool.theta_sim == 0.7 and rollouts.refiner is summarizer
    assert rollouts.training_set is training_set and rollouts.template is template and rollouts.params is params
    extractor = experience.extractor
    assert rollouts.cold_extractor is extractor and extractor.engine.llm is summarizer
    assert (extractor.validate, extractor.success_threshold, extractor.boundary.oracle) == (False, 0.75, True)
    assert extractor.params == factory.sampling_for(cfg.models.summarizer) == rollouts.refine_params
    grounded, constrained = extraction_mode(cfg) == "grounded", extraction_constrained(cfg)
    assert (extractor.grounded, extractor.constrained) == (grounded, constrained) and grounded and constrained
    assert rollouts.nav.navigating is cfg.navigating and rollouts.nav.success_threshold == 0.75
    assert rollouts.llm is policy and rollouts.settings == RolloutSettings.of(cfg) and rollouts.show_progress is True
    # EvolveR's search action: the policy acts in the wrapped environment, in training and in evaluation
    env = policy_env()
    assert isinstance(env, ExperienceToolEnv) and env.env == "the environment" and (env.pool, env.k) == (pool, 2)
    assert rollouts.make_env is policy_env and experience.utility.make_env is policy_env
    assert (experience.utility.k, experience.utility.template, experience.utility.rendering) == (3, template, "compact")
    utility = experience.utility
    assert utility.llm is policy and utility.rollout_cfg is cfg.rollout and utility.params is params
    assert utility.embed == factory_embedder.embed and experience.nav == rollouts.nav
    # no re-ranking or rewriting: no refiner; no utility test unless asked
    plain = load_config(None, ["navigating.enabled=true", "navigating.rerank=false", "navigating.rewrite=false"])
    rollouts, experience, policy_env = navigation(plain, store, engine, env_factory, params, True)
    assert rollouts.refiner is None and experience.utility is None and policy_env is env_factory
    rewrite = load_config(None, ["navigating.enabled=true", "navigating.rerank=false", "navigating.rewrite=true"])
    assert navigation(rewrite, store, engine, env_factory, params, True)[0].refiner is summarizer
    store.close()


def test_policy_sampling_caps_the_action_and_takes_the_seed():
    from evolvekit.agent.parts import policy_sampling

    cfg = load_config(None, ["models.policy.max_new_tokens=64", "models.policy.temperature=0.9"])
    params = policy_sampling(cfg, seed=3)
    assert (params.max_new_tokens, params.temperature, params.seed, params.stop) == (64, 0.9, 3, ())
    assert (
        policy_sampling(
            load_config(None, ["models.policy.max_new_tokens=64", "env.action_max_tokens=16"])
        ).max_new_tokens
        == 16
    )
    assert (
        policy_sampling(
            load_config(None, ["models.policy.max_new_tokens=64", "env.action_max_tokens=100"])
        ).max_new_tokens
        == 64
    )


def test_the_rollout_template_summarises_with_the_summarizer_role_only_when_it_manages_context(monkeypatch):
    from evolvekit.agent.parts import rollout_template
    from evolvekit.llm import factory
    from evolvekit.types import ChatMessage

    class _Summarizer:
        name = "summarizer"

        def __init__(self):
            self.asked = []

        def chat(self, conversations, params):
            self.asked.append(params)
            return [[Completion(text="short")] for _ in conversations]

    summarizer = _Summarizer()
    roles: list = []
    models: list = []
    monkeypatch.setattr(
        factory, "role_llm", lambda m, role: roles.append(role) or models.append(m) or summarizer
    )  # fmt: skip
    basic = rollout_template(load_config(None, ["rollout.template=basic"]))
    assert basic.template == "basic" and basic.summarise is None and roles == []
    cfg = load_config(None, ["rollout.template=sliding_window", "rollout.context_token_limit=512"])
    window = rollout_template(cfg)
    assert (window.template, window.token_limit, roles) == ("sliding_window", 512, ["summarizer"])
    assert models == [cfg.models]
    assert window.summarise([ChatMessage(role="user", content="hi")]) == "short"
    assert summarizer.asked[0].max_new_tokens == cfg.models.summarizer.max_new_tokens
    managing = rollout_template(load_config(None, ["rollout.template=self_managing"]))
    assert managing.summarise is not None and managing.manage_params is None  # greedy decisions by default
    sets = ["rollout.template=self_managing", "rollout.manage_sampled=true", "models.policy.temperature=0.8"]
    sets += ["models.policy.top_p=0.95"]
    manage = rollout_template(load_config(None, sets)).manage_params
    assert manage is not None and (manage.temperature, manage.top_p) == (0.8, 0.95)
    assert manage.max_new_tokens == 128  # the greedy decisions' budget (agent/templates.py), sampled or not
    assert rollout_template(load_config(None, [*sets[1:], "rollout.template=sliding_window"])).manage_params is None


def test_the_synthesis_stage_explores_with_the_policy_and_seeds_from_the_run(monkeypatch, tmp_path):
    from evolvekit.llm import factory
    from evolvekit.orchestrator.build import synthesis_stage
    from evolvekit.questioning import pipeline

    synthesizer, policy = _Policy(), _Policy()
    engine = Engine(policy)  # the trainer's rollout engine
    roles: list = []

    explorer_role = _Policy()

    def role(models, name):
        roles.append((models, name))
        return synthesizer if name == "synthesizer" else explorer_role

    monkeypatch.setattr(factory, "role_llm", role)
    embedder, embedded = _Embedder(), []
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: embedded.append(cfg) or embedder)
    asked: list = []

    def record(settings, n, explorer, eparams, synth, sparams, make_env, embed, **kw):
        asked.append((settings, n, explorer, eparams, synth, sparams, make_env, {**kw, "embed": embed}))
        return ["kept"], "funnel", None

    monkeypatch.setattr(pipeline, "synthesize_tasks", record)
    train = [Task(task_id="p1", env_name="bfcl", query="What is 1 plus 2?")]
    received: list = []
    sets = ["questioning.enabled=true", "questioning.synthetic_tasks=5", "run.seed=4"]
    cfg = load_config(None, sets)

    def env_factory():
        return None

    stage = synthesis_stage(cfg, train, policy, engine, env_factory, received.extend)
    stored, funnel, sink = [Task(task_id="s0", env_name="bfcl", query="q")], object(), object()
    assert stage.synthesize(stored, funnel, sink) == (["kept"], "funnel")
    ((settings, n, explorer, eparams, synth, sparams, make_env, kw),) = asked
    assert n == 5 and explorer is policy and synth is synthesizer and make_env is env_factory
    assert (eparams.seed, sparams.seed) == (4, 5)  # run.seed pins self-questioning's samples (the synthesizer's + 1)
    assert (eparams.temperature, sparams.temperature) == (
        cfg.models.explorer.temperature,
        cfg.models.synthesizer.temperature,
    )
    assert kw["existing"] == train and kw["resume"] is stored and kw["funnel"] is funnel and kw["on_round"] is sink
    assert kw["probe"] is None and settings.env == cfg.env
    assert kw["embed"] == embedder.embed and embedded == [cfg.embedding]
    stage.receive(["t"])
    assert received == ["t"]
    # an explorer of another model is its own role's
    other = load_config(None, [*sets, "models.explorer.model=another"])
    asked.clear()
    synthesis_stage(other, train, policy, engine, env_factory, received.extend).synthesize([], funnel, sink)
    assert asked[0][2] is explorer_role and all(models is other.models for models, _ in roles[-2:])
    assert [name for _, name in roles[-2:]] == ["explorer", "synthesizer"]
    # the pass filter's probe, when asked for (questioning.pass_filter_samples): the policy attempts, in the run's
    # environment
    from evolvekit.agent import evaluate

    ran: list = []

    class _Report:
        per_task: list = []

    def evaluated(tasks, make_env, used, *args, **kw):
        ran.append((make_env, used))
        return _Report(), []

    monkeypatch.setattr(evaluate, "evaluate_policy", evaluated)
    asked.clear()
    probed = load_config(None, [*sets, "questioning.pass_filter_samples=2"])
    synthesis_stage(probed, train, policy, engine, env_factory, received.extend).synthesize([], funnel, sink)
    asked[0][7]["probe"]([])
    assert ran == [(env_factory, engine)]  # the policy attempts through the run's engine, in the run's environment
    # the synthetic held-out file (train.eval_synthetic) is deduplicated against too: no synthesized task copies one
    held = tmp_path / "held.jsonl"
    held.write_text(Task(task_id="held_1", env_name="bfcl", query="Add 4 and 5.").model_dump_json() + "\n")
    asked.clear()
    with_held = load_config(None, [*sets, f"train.eval_synthetic={held}"])
    synthesis_stage(with_held, train, policy, engine, env_factory, received.extend).synthesize([], funnel, sink)
    assert [t.task_id for t in asked[0][7]["existing"]] == ["p1", "held_1"]


@pytest.mark.slow
def test_the_trainer_gets_the_boost_only_for_injected_experience_and_a_reference_only_for_kl(tmp_path, monkeypatch):
    """Eq. 17's boost applies to experience-guided samples, which exist only when navigating injects experience
    (not with EvolveR's search action); the KL reference is the initial policy, loaded only when β > 0 and the whole
    model trains (LoRA's reference is the base under the adapter)."""
    from evolvekit.llm import factory
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.train.parts import build_trainer

    tiny = make_tiny_model(tmp_path / "tiny")
    base = [f"models.policy.model={tiny}", "train.autocast=off"]
    loaded: list = []
    real_build = factory.build_llm
    monkeypatch.setattr(factory, "build_llm", lambda cfg, role: loaded.append(role) or real_build(cfg, role))

    def trainer(*sets):
        return build_trainer(load_config(None, [*base, *sets]))

    policy, nav = trainer("navigating.enabled=true", "navigating.eps_high_boost=0.45", "train.kl_beta=0.01")
    assert nav.eps_high_boost == 0.45 and nav.reference is not None and nav.engine.llm is policy
    assert trainer("navigating.enabled=true", "navigating.as_tool=true", "train.kl_beta=0")[1].eps_high_boost is None
    off = trainer("navigating.enabled=false", "train.kl_beta=0")[1]
    assert off.eps_high_boost is None and off.reference is None
    assert loaded == ["reference"]  # loaded for the β > 0 trainer only


def test_the_coevolve_hook_gets_its_section_dedup_and_seeds(tmp_path, monkeypatch):
    from evolvekit.llm import factory
    from evolvekit.questioning import pipeline
    from evolvekit.questioning.parts import coevolve_hook
    from evolvekit.store.sqlite import IterationStatus, RunStore
    from evolvekit.types import Trajectory

    synthesizer, explorer, policy, embedder = _Policy(), _Policy(), _Policy(), _Embedder()
    roles: list = []

    def role(models, name):
        roles.append((models, name))
        return synthesizer if name == "synthesizer" else explorer

    embedded: list = []
    monkeypatch.setattr(factory, "role_llm", role)
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: embedded.append(cfg) or embedder)
    asked: list = []

    def record(settings, rounds, steps, explorer, eparams, synth, sparams, make_env, dedup, funnel, keep_positive):
        asked.append((settings, rounds, steps, explorer, eparams.seed, synth, sparams.seed, make_env, dedup, funnel))
        asked.append(keep_positive)
        return "explore"

    monkeypatch.setattr(pipeline, "goal_explorer", record)
    sets = ["questioning.enabled=true", "coevolve.enabled=true", "run.seed=3", "coevolve.forgetting_window=7"]
    sets += ["coevolve.success_threshold=0.25", "coevolve.rare_theta_percent=2", "coevolve.rare_min_patterns=9"]
    sets += ["coevolve.reexplore_rounds=4", "coevolve.reexplore_steps=6", "coevolve.every_iterations=3"]
    sets += ["coevolve.max_contexts=2", "questioning.lexical_dedup_threshold=0.7"]
    sets += ["questioning.semantic_dedup_threshold=0.95", "coevolve.keep_positive_reward=true"]
    cfg = load_config(None, sets)
    # a resumed run: iteration 0 finished (two training episodes, one evaluation episode), iteration 1 did not
    store = RunStore(tmp_path / "run.sqlite")
    with store.transaction() as c:
        store.put_trajectories(c, [Trajectory(task_id="a", outcome_reward=1.0), Trajectory(task_id="b")], 0, "train")
        store.put_trajectories(c, [Trajectory(task_id="e")], 0, "eval")
        store.set_iteration(c, 0, IterationStatus.DONE)
        store.put_trajectories(c, [Trajectory(task_id="c")], 1, "train")
        store.set_iteration(c, 1, IterationStatus.ROLLED_OUT)

    def env_factory():
        return None

    hook = coevolve_hook(cfg, store, policy, env_factory)
    tracker, regen = hook.tracker, hook.regenerator
    assert (tracker.window, tracker.theta, tracker.n_min, tracker.threshold) == (7, 2.0, 9, 0.25)
    assert sum(tracker.patterns.values()) == 2 and set(tracker.history) == {"a", "b"}  # iteration 0's training
    assert hook.every == 3 and regen.max_contexts == 2 and regen.explore_fn == "explore" and regen.llm is synthesizer
    ((settings, rounds, steps, explorer_llm, eseed, synth, sseed, make_env, dedup, funnel), keep_positive) = asked
    assert keep_positive is True  # coevolve.keep_positive_reward (CoEvolve §3.3)
    assert (rounds, steps, explorer_llm, synth, make_env) == (4, 6, policy, synthesizer, env_factory)
    assert settings.env == cfg.env and isinstance(funnel, pipeline.Funnel) and funnel.kept == 0
    assert (eseed, sseed, regen.params.seed) == (503, 504, 505)  # run.seed + 500, + 1, + 2
    assert (dedup.lexical_threshold, dedup.semantic_threshold, dedup.embed) == (0.7, 0.95, embedder.embed)
    assert hook.know == dedup.seed  # the run's tasks, once synthesized, seed the re-exploration's dedup
    assert all(models is cfg.models for models, _ in roles) and embedded == [cfg.embedding]
    # the explorer is the policy itself: its role's model is not loaded at all
    assert [name for _, name in roles] == ["synthesizer", "synthesizer"]
    # an explorer of another model (or a served one) is its role's, not the policy
    asked.clear()
    coevolve_hook(load_config(None, [*sets, "models.explorer.model=other"]), store, policy, env_factory)
    assert asked[0][3] is explorer
    asked.clear()
    served = [*sets, "models.explorer.backend=openai", "models.explorer.base_url=http://127.0.0.1:9/v1"]
    coevolve_hook(load_config(None, served), store, policy, env_factory)
    assert asked[0][3] is explorer
    store.close()


def test_the_cold_start_warms_up_on_curated_run_made_tasks_never_held_out_ones(tmp_path, monkeypatch):
    """EvolveR's warm-up pairs: the run's curated synthesized tasks (or cold_start.tasks_file), without held-out
    tasks (by id or request), person-written ones only through run.oracle; the cold-start settings and the run's
    seed reach the SFT step; the KL reference becomes the warmed-up policy."""
    from pathlib import Path

    from evolvekit.errors import ConfigError
    from evolvekit.store.sqlite import RunStore
    from evolvekit.train import sft
    from evolvekit.train.parts import cold_start
    from evolvekit.types import TaskSource

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    paired: list = []
    warmed: list = []

    class _Stats:
        def as_metrics(self):
            return {"cold_start/examples": 1.0}

    def pairs(tasks, make_env, llm, rendering, template, limit, closing="Done.", search=None):
        paired.append(([t.task_id for t in tasks], make_env, llm, rendering, template, limit, closing, search))
        return ["pair"]

    monkeypatch.setattr(sft, "reference_pairs", pairs)
    monkeypatch.setattr(
        sft, "sft_warmup", lambda trainer, p, ccfg, seed: warmed.append((trainer, p, ccfg, seed)) or _Stats()
    )

    class _Model:
        def state_dict(self):
            return {"w": 1}

    class _Trainer:
        llm, model = object(), _Model()

    class _Reference:
        loaded: list = []

        def load_state_dict(self, state):
            self.loaded.append(state)

    def syn(tid, query, curated=True):
        meta = {"curation": {"kept": True}} if curated else {}
        return Task(task_id=tid, env_name="coin", query=query, source=TaskSource.SYNTHETIC, metadata=meta)

    store = RunStore(tmp_path / "run.sqlite")
    with store.transaction() as c:
        store.put_tasks(c, [syn("s1", "Say hi."), syn("s2", "Say ho.", curated=False)], -1)
        store.put_tasks(c, [syn("s3", "Say something (test 0)."), syn("coin-test-1", "Other words.")], -1)
        store.put_tasks(c, [Task(task_id="p1", env_name="coin", query="Say yes.")], -1)
    sets = ["env.name=coin", "env.plugins=[coin_env]", "env.eval_split=test", "env.tool_rendering=json", "run.seed=6"]
    sets += [
        "cold_start.enabled=true",
        "cold_start.max_examples=7",
        "cold_start.closing=Bye.",
        "rollout.template=reasoning",
    ]
    sets += ["rollout.context_token_limit=640", "cold_start.teach_search=off", "questioning.enabled=true"]
    cfg = load_config(None, sets)
    trainer, reference = _Trainer(), _Reference()

    def env_factory():
        return None

    assert cold_start(cfg, store, trainer, reference, env_factory)() == {"cold_start/examples": 1.0}
    ((ids, make_env, llm, rendering, template, limit, closing, search),) = paired
    assert ids == ["s1"]  # not uncurated, not a held-out request or id, not person-written
    assert (make_env, llm, rendering, limit, closing, search) == (env_factory, trainer.llm, "json", 7, "Bye.", None)
    assert (template.template, template.token_limit) == ("reasoning", 640)
    assert warmed == [(trainer, ["pair"], cfg.cold_start, 6)] and reference.loaded == [{"w": 1}]

    # the search action taught when asked; no reference to refresh without KL
    def answer(query):
        return "found"

    cold_start(load_config(None, [*sets, "cold_start.teach_search=on"]), store, trainer, None, env_factory, answer)()
    assert paired[-1][-1] is answer and reference.loaded == [{"w": 1}]
    cold_start(cfg, store, trainer, None, env_factory, answer)()  # teach_search off: the answer is not used
    assert paired[-1][-1] is None
    # a task file of person-written tasks is gold: refused unless run.oracle
    person = tmp_path / "person.jsonl"
    person.write_text(Task(task_id="p2", env_name="coin", query="Say no.").model_dump_json() + "\n")
    gold = (
        r"^cold_start: the 1 warm-up tasks are person-written; their references are gold \(set run.oracle: true to "
        r"let them through, or warm up on the run's own synthesized tasks\)$"
    )
    with pytest.raises(ConfigError, match=gold):
        cold_start(load_config(None, [*sets, f"cold_start.tasks_file={person}"]), store, trainer, None, env_factory)()
    oracle = load_config(None, [*sets, f"cold_start.tasks_file={person}", "run.oracle=true"])
    cold_start(oracle, store, trainer, None, env_factory)()
    assert paired[-1][0] == ["p2"]
    # nothing verified to warm up on: one line saying so
    monkeypatch.setattr(sft, "reference_pairs", lambda *a, **k: [])
    with pytest.raises(ConfigError, match="^cold start: no verified tasks with a reference solution to warm up on$"):
        cold_start(cfg, store, trainer, None, env_factory)()
    monkeypatch.setattr(sft, "reference_pairs", pairs)
    # a file's tasks are person-written whatever they say: "source": "synthetic" in an outside file is not believed
    # (issue 76: a task's origin is where it came from); under run.oracle they are let through
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(person.read_text() + syn("s9", "Say maybe.").model_dump_json() + "\n")
    with pytest.raises(ConfigError, match="the 2 warm-up tasks are person-written"):
        cold_start(load_config(None, [*sets, f"cold_start.tasks_file={mixed}"]), store, trainer, None, env_factory)()
    cold_start(load_config(None, [*sets, f"cold_start.tasks_file={mixed}", "run.oracle=true"]), store, trainer, None,
                env_factory)()  # fmt: skip
    assert paired[-1][0] == ["p2", "s9"]
    # held-out synthesized tasks (train.eval_synthetic) are held out too, beside the environment's split
    held = tmp_path / "held.jsonl"
    held.write_text(syn("h1", "Say hi.").model_dump_json() + "\n")
    cold_start(load_config(None, [*sets, f"train.eval_synthetic={held}"]), store, trainer, None, env_factory)()
    assert paired[-1][0] == []  # s1's request is a held-out one now; s3's is still the split's
    store.close()


def test_the_rollout_backend_is_the_configured_engine_over_the_policy(monkeypatch):
    """models.policy.engine picks the registered rollout engine build_trainer hands the trainer: the policy itself
    (native), or continuous batching, vLLM (with its memory share, the run's seed and eager mode) or SGLang (its URL,
    weights folder and the role's timeout) over the policy."""
    from evolvekit.engine.registry import rollout_engine
    from evolvekit.llm import continuous, sglang_engine, vllm_engine

    def rollout_backend(pol, policy, seed):
        cfg = load_config(None, [f"run.seed={seed}"])
        return rollout_engine(
            cfg.model_copy(update={"models": cfg.models.model_copy(update={"policy": pol})}), policy
        ).llm

    made: list = []
    monkeypatch.setattr(continuous, "ContinuousBatchingLLM", lambda policy: made.append(("cb", policy)) or "cb")
    monkeypatch.setattr(vllm_engine, "VLLMEngine", lambda policy, **kw: made.append(("vllm", policy, kw)) or "vllm")
    monkeypatch.setattr(
        sglang_engine, "SGLangEngine", lambda policy, *a, **kw: made.append(("sglang", policy, a, kw)) or "sglang"
    )
    policy = object()

    def pol(*sets):
        return load_config(None, list(sets)).models.policy

    assert rollout_backend(pol(), policy, 3) is policy and made == []
    assert rollout_backend(pol("models.policy.engine=continuous_batching"), policy, 3) == "cb"
    vllm = pol(
        "models.policy.engine=vllm", "models.policy.gpu_memory_utilization=0.4", "models.policy.engine_eager=true"
    )
    assert rollout_backend(vllm, policy, 3) == "vllm"
    served = ["models.policy.engine=sglang", "models.policy.engine_url=http://h:30000"]
    served += ["models.policy.engine_weights_dir=/srv/w", "models.policy.timeout_s=45"]
    assert rollout_backend(pol(*served), policy, 3) == "sglang"
    assert made == [
        ("cb", policy),
        ("vllm", policy, {"gpu_memory_utilization": 0.4, "seed": 3, "eager": True, "kv_cache_bytes": None}),
        ("sglang", policy, ("http://h:30000", "/srv/w"), {"timeout_s": 45.0}),
    ]


def test_build_trainer_wires_the_checkpoint_device_reference_boost_and_engine(monkeypatch, caplog):
    """build_trainer against recorders (fast): the policy from the newest intact checkpoint (the console named for
    its warnings), else the configured model, on the role's device, dtype and packing (a data-parallel rank's own
    device under `auto`); the optimizer state restored from that checkpoint, a warning when it has none; the KL
    reference only at β > 0 without LoRA; Eq. 17's boost only for injected experience; the rollout engine over the
    policy on rank 0 only."""
    from types import SimpleNamespace

    from evolvekit.llm import factory, local
    from evolvekit.train import trainer as trainer_mod
    from evolvekit.train.parts import build_trainer

    ckpt = SimpleNamespace(path="/runs/x/checkpoints/iter-3")
    llms: list = []

    class _LLM:
        def __init__(self, source, device, dtype, packed_weights):
            llms.append((source, device, dtype, packed_weights))

    class _Trainer:
        def __init__(self, policy, train, **kw):
            self.policy, self.train, self.kw = policy, train, kw
            self.engine = kw["engine"]

        def load_optimizer(self, path):
            loads.append(path)
            return has_state[0]

    loads: list = []
    has_state = [True]
    monkeypatch.setattr(local, "LocalLLM", _LLM)
    monkeypatch.setattr(trainer_mod, "GRPOTrainer", _Trainer)
    references: list = []
    monkeypatch.setattr(
        factory, "build_llm", lambda cfg, role: references.append(role) or SimpleNamespace(model="reference-model")
    )
    sets = ["models.policy.device=cpu", "models.policy.dtype=bfloat16", "models.policy.packed_weights=false"]
    sets += ["train.kl_beta=0.02", "navigating.enabled=true", "navigating.eps_high_boost=0.4"]
    cfg = load_config(None, sets)
    with caplog.at_level("INFO", logger="evolvekit.train.parts"):
        policy, tr = build_trainer(cfg, ckpt)
    assert loads == [Path("/runs/x/checkpoints/iter-3")]
    assert llms == [("/runs/x/checkpoints/iter-3", "cpu", "bfloat16", False)] and isinstance(policy, _LLM)
    assert [r.getMessage() for r in caplog.records] == ["policy from /runs/x/checkpoints/iter-3"]
    assert tr.policy is policy and tr.train is cfg.train and tr.engine.llm is policy
    assert tr.kw["eps_high_boost"] == 0.4 and tr.kw["reference_model"] == "reference-model"
    assert tr.kw["parallel"] is None and references == ["reference"]
    # a checkpoint without optimizer state: a warning; no checkpoint: the configured model, nothing restored
    has_state[0] = False
    with caplog.at_level("WARNING", logger="evolvekit.train.parts"):
        build_trainer(cfg, ckpt)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ["checkpoint /runs/x/checkpoints/iter-3 has no optimizer state; AdamW restarts from zero moments"]
    loads.clear()
    caplog.clear()
    plain = load_config(None, ["train.kl_beta=0", "navigating.enabled=true", "navigating.as_tool=true"])
    with caplog.at_level("INFO", logger="evolvekit.train.parts"):
        _, tr = build_trainer(plain)
    assert llms[-1][0] == plain.models.policy.model and loads == []
    assert [r.getMessage() for r in caplog.records] == [f"policy from {llms[-1][0]}"]
    assert tr.kw["reference_model"] is None and tr.kw["eps_high_boost"] is None and len(references) == 2
    lora = load_config(None, ["train.kl_beta=0.02", "train.lora=true", "navigating.enabled=false"])
    assert build_trainer(lora)[1].kw["reference_model"] is None and len(references) == 2
    # a data-parallel rank: its own device under `auto`, and the policy itself as its engine (no serving engine)
    rank = SimpleNamespace(state=SimpleNamespace(device="cuda:1"), rank=1)
    served = load_config(None, ["models.policy.engine=continuous_batching", "train.kl_beta=0"])
    _, tr = build_trainer(served, parallel=rank)  # type: ignore[arg-type]
    assert llms[-1][1] == "cuda:1" and tr.kw["parallel"] is rank and tr.engine.llm is tr.policy


def test_build_trainer_puts_the_configured_engine_over_the_policy_with_the_runs_seed(monkeypatch):
    """Rank 0 (and a run without data parallelism) generates through the registered engine the config names, built
    over the trained policy with the run's seed (vLLM's sampling seed); another rank through the policy itself."""
    from types import SimpleNamespace

    from evolvekit.engine import registry
    from evolvekit.engine.spec import EngineBackend
    from evolvekit.llm import local
    from evolvekit.train import trainer as trainer_mod
    from evolvekit.train.parts import build_trainer

    monkeypatch.setattr(local, "LocalLLM", lambda source, **kw: SimpleNamespace(source=source))

    class _Trainer:
        def __init__(self, policy, train, **kw):
            self.policy, self.engine = policy, kw["engine"]

    monkeypatch.setattr(trainer_mod, "GRPOTrainer", _Trainer)
    asked: list = []
    served = object()
    recorder = EngineBackend("recorder", "records what it is built from", build=lambda r: asked.append(r) or served)
    monkeypatch.setitem(registry.ENGINES, "recorder", recorder)
    cfg = load_config(None, ["models.policy.engine=recorder", "train.kl_beta=0", "run.seed=13"])
    for parallel in (None, SimpleNamespace(state=SimpleNamespace(device="cpu"), rank=0)):
        policy, tr = build_trainer(cfg, parallel=parallel)  # type: ignore[arg-type]
        r = asked[-1]
        assert tr.engine.llm is served and (r.settings, r.policy, r.seed, r.options) == (
            cfg.models.policy,
            policy,
            13,
            None,
        )
    other = SimpleNamespace(state=SimpleNamespace(device="cpu"), rank=1)
    policy, tr = build_trainer(cfg, parallel=other)  # type: ignore[arg-type]
    assert tr.engine.llm is policy and len(asked) == 2


def test_the_experience_pool_embeds_merges_and_resumes_as_configured(tmp_path, monkeypatch):
    """The navigating pool: the embedder's function, θ_sim, EvolveR's merge check from the summariser role with
    its sampling and constrained setting; a resumed run's committed pool with its committed vectors (nothing
    embedded again), else embedded again; a seed file only for an empty pool, and a missing one named. Ray rollouts
    get a worker pool built from the run's config, on both paths."""
    import numpy as np

    from evolvekit.agent import ray_backend
    from evolvekit.config import extraction_constrained
    from evolvekit.errors import ConfigError
    from evolvekit.llm import factory
    from evolvekit.navigating import extract
    from evolvekit.navigating.parts import navigation
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Experience

    embedded: list = []

    class _Counting:
        def embed(self, texts):
            embedded.extend(texts)
            return np.ones((len(texts), 2)) / np.sqrt(2)

    embedder = _Counting()
    summarizer = _Policy()
    monkeypatch.setattr(factory, "role_llm", lambda models, role: summarizer)
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: embedder)
    checks: list = []
    monkeypatch.setattr(
        extract,
        "llm_equivalence",
        lambda llm, params, constrained: checks.append((llm, params, constrained)) or "same?",
    )
    store = RunStore(tmp_path / "run.sqlite")
    sets = ["navigating.enabled=true", "navigating.theta_sim=0.6"]
    cfg = load_config(None, sets)
    policy = Engine(_Policy())
    _, experience, _ = navigation(cfg, store, policy, lambda: None, object(), False)
    pool = experience.pool
    assert (pool.embed, pool.theta_sim, pool.equivalent) == (embedder.embed, 0.6, "same?") and len(pool) == 0
    constrained = extraction_constrained(cfg)
    assert checks == [(summarizer, factory.sampling_for(cfg.models.summarizer), constrained)] and constrained

    def navigate(config):
        return navigation(config, store, Engine(_Policy()), lambda: None, object(), False)

    # a seed file fills an empty pool (as given); a missing one is named
    seeds = [Experience(when_to_use=f"case {i}", content=f"do {i}") for i in range(2)]
    seed = tmp_path / "seed.jsonl"
    seed.write_text("".join(e.model_dump_json() + "\n" for e in seeds))
    seeded = navigate(load_config(None, [*sets, f"navigating.seed_file={seed}"]))[1].pool
    assert [e.experience_id for e in seeded.items] == [e.experience_id for e in seeds]
    with pytest.raises(ConfigError, match=f"navigating.seed_file: no such file: {tmp_path / 'nope.jsonl'}"):
        navigate(load_config(None, [*sets, f"navigating.seed_file={tmp_path / 'nope.jsonl'}"]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"when_to_use": "x"}\n')
    wanted = f"^navigating.seed_file: {bad}:1: not an experience: content: Field required$"
    with pytest.raises(ConfigError, match=wanted):
        navigate(load_config(None, [*sets, f"navigating.seed_file={bad}"]))
    # a resumed run: the committed pool and its vectors, embedded no more; the seed file is not read again
    vectors = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    with store.transaction() as c:
        store.put_experiences(c, seeds, 0, vectors)
    embedded.clear()
    resumed = navigate(load_config(None, [*sets, f"navigating.seed_file={tmp_path / 'nope.jsonl'}"]))[1].pool
    assert [e.experience_id for e in resumed.items] == [e.experience_id for e in seeds] and embedded == []
    assert np.allclose(resumed._buf[:2], vectors)
    with store.transaction() as c:  # a vector missing: the committed pool embedded again
        store.put_experiences(c, seeds[:1], 0)
    again = navigate(cfg)[1].pool
    assert len(again) == 2 and sorted(embedded) == ["case 0", "case 1"]
    # Ray rollouts: the worker pool from the run's config, with or without navigating
    specs: list = []
    monkeypatch.setattr(ray_backend.WorkerSpec, "of", classmethod(lambda cls, c: specs.append(c) or "spec"))
    shown = object()  # the run's own examples, which the workers show with every batch
    monkeypatch.setattr(ray_backend, "RayRolloutPool", lambda spec, examples: f"workers of {spec}, {examples is shown}")
    for navigating in ("true", "false"):
        ray = load_config(None, ["rollout.backend=ray", f"navigating.enabled={navigating}"])
        rollouts = navigation(ray, store, Engine(_Policy()), lambda: None, object(), False, shown=shown)[0]
        assert rollouts.pool == "workers of spec, True" and specs[-1] is ray and rollouts.show_progress is False
    store.close()


def test_shown_examples_by_mode_and_the_warnings_that_label_a_persons(caplog):
    """env.worked_examples: none shows nothing (no exploration for examples), person shows the environment's own
    and says PERSON-WRITTEN in the log, self makes the run's own and names each person-written example list of the
    config that it leaves unshown."""
    import logging
    from types import SimpleNamespace

    from evolvekit.questioning.parts import log, shown_examples

    def cfg(mode, mcp=(), openenv=()):
        env = SimpleNamespace(
            worked_examples=mode,
            mcp=SimpleNamespace(examples=list(mcp)),
            openenv=SimpleNamespace(examples=list(openenv)),
        )
        return SimpleNamespace(env=env)

    with caplog.at_level(logging.WARNING, logger=log.name):
        assert shown_examples(cfg("none", ["x"]), None, None, None) is list and caplog.messages == []
        assert shown_examples(cfg("person"), None, None, None) is None
        assert caplog.messages == [
            "worked examples: PERSON-WRITTEN (env.worked_examples: person); every output of this run says so"
        ]
        caplog.clear()
        assert shown_examples(cfg("self", ["x"], ["y"]), None, None, None) is not None
    tail = (
        " are person-written worked examples; with env.worked_examples: self they are not shown (the run makes its "
        "own; env.worked_examples: person shows them, and every output then says so)"
    )
    assert caplog.messages == ["env.mcp.examples" + tail, "env.openenv.examples" + tail]


def test_the_runs_own_examples_are_stored_once_so_a_resumed_run_shows_the_same(monkeypatch):
    """self: the first use explores for examples and stores them under the run's meta key; a run resumed on the same
    store shows the stored ones without exploring again."""

    from evolvekit.questioning import parts as qparts

    class Store:
        def __init__(self) -> None:
            self.meta: dict = {}

        def get_meta(self, key):
            return self.meta.get(key)

        def set_meta(self, key, value):
            self.meta[key] = value

    explored: list = []
    monkeypatch.setattr(qparts, "run_examples", lambda cfg, llm, bare_env, funnel=None: explored.append(llm) or [])
    cfg = load_config(None, ["env.worked_examples=self"])
    store = Store()
    first = qparts.shown_examples(cfg, store, _Policy(), None)
    assert first is not None and first() == [] and len(explored) == 1
    assert sorted(store.meta) == sorted([qparts.WORKED_EXAMPLES, qparts.EXAMPLE_REQUESTS])
    assert json.loads(store.meta[qparts.EXAMPLE_REQUESTS])["calls"] == 0  # their requests' funnel, stored beside them
    resumed = qparts.shown_examples(cfg, store, _Policy(), None)
    assert resumed is not None and resumed() == [] and len(explored) == 1  # read back, not explored again
