"""orchestrator/build.py's wiring against recorders: what the composition root hands each part from the config and
the run (issue 53: written from the builder's mutation look). The parts are replaced through ``build.Parts`` inside
these unit tests only; each part's own factory is test_parts.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evolvekit.config import load_config
from evolvekit.engine.base import Engine
from evolvekit.llm.base import Completion
from evolvekit.types import Task


class _Policy:
    name = "scripted"

    def chat(self, conversations, params):
        return [[Completion(text="Done.")] for _ in conversations]


@pytest.fixture()
def no_model():
    """build_loop without loading a model: ``no_model.parts`` builds a scripted policy (``no_model.policy``) and a
    trainer over it (the trainer's own wiring is build_trainer's test)."""
    from types import SimpleNamespace

    from evolvekit.orchestrator import build

    policy = _Policy()

    def trainer(cfg, store, console=None, parallel=None):
        return policy, SimpleNamespace(engine=Engine(policy), cfg=cfg, reference=None)

    return SimpleNamespace(policy=policy, parts=replace(build.PARTS, trainer=trainer))


def test_the_task_supply_gets_the_runs_tasks_batch_seed_and_lambda():
    from evolvekit.orchestrator.build import task_supply
    from evolvekit.orchestrator.stages import FixedTaskSupply
    from evolvekit.questioning.supply import HybridTaskSupply

    tasks = [Task(task_id=f"t{i}", env_name="bfcl", query="q") for i in range(3)]
    base = ["train.tasks_per_iteration=2", "run.seed=11"]
    fixed = task_supply(load_config(None, [*base, "questioning.enabled=false"]), None, tasks, None, None)
    assert type(fixed) is FixedTaskSupply and fixed.pool == tasks and (fixed.per_iteration, fixed.seed) == (2, 11)
    on = [*base, "questioning.enabled=true", "questioning.hybrid_lambda=0.5", "coevolve.enabled=false"]
    hybrid = task_supply(load_config(None, on), None, tasks, None, None)
    assert type(hybrid) is HybridTaskSupply and hybrid.real == tasks and hybrid.synthetic == []
    assert (hybrid.per_iteration, hybrid.lam, hybrid.seed, hybrid.coevolve) == (2, 0.5, 11, None)
    # a curriculum: one supply per family (its generator's train split), each with the batch and seed
    from evolvekit.orchestrator.curriculum import CurriculumTaskSupply

    sets = [*base, "env.curriculum=[arith,arith_wide]", "env.curriculum_threshold=0.6", "env.curriculum_window=3"]
    sets += ["env.family_tasks=5"]
    ladder = task_supply(load_config(None, sets), None, tasks, None, None)
    assert type(ladder) is CurriculumTaskSupply and ladder.families == ["arith", "arith_wide"]
    assert (ladder.threshold, ladder.window) == (0.6, 3) and [len(s.pool) for s in ladder.supplies] == [5, 5]
    assert {(s.per_iteration, s.seed) for s in ladder.supplies} == {(2, 11)}


class _Embedder:
    def embed(self, texts):
        import numpy as np

        return np.ones((len(texts), 2)) / np.sqrt(2)


def test_build_loop_evaluates_the_eval_split_with_the_runs_k_seed_and_policy_environment(
    tmp_path, monkeypatch, no_model
):
    """The held-out evaluator build_loop hands the loop: the first train.eval_tasks tasks of env.eval_split, k =
    train.eval_k (else the group size), the seed it is called with, the run's template and rendering; the stages
    and the person-written tasks it trained on recorded (a one-step test environment and a scripted policy)."""
    from pathlib import Path

    from evolvekit.agent import evaluate
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    asked: list = []

    class _Report:
        def summary(self):
            return {"avg@3": 0.5}

    def record(tasks, make_env, engine, rollout, params, k, rendering="compact", show_progress=True, **kw):
        asked.append(([t.task_id for t in tasks], k, params.seed, rendering, kw["template"].template, show_progress))
        return _Report(), []

    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    sets = [
        f"run.out_dir={tmp_path / 'runs'}",
        "env.name=coin",
        "env.plugins=[coin_env]",
        "env.eval_split=dev",
        "env.tool_rendering=json",
        "rollout.group_size=4",
        "rollout.template=reasoning",
        "train.eval_tasks=2",
        "train.eval_k=3",
        "train.kl_beta=0",
        "questioning.enabled=false",
        "navigating.enabled=false",
        "attributing.enabled=false",
    ]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    loop = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
    summary, trajs = loop.evaluator(9)
    assert summary == {"avg@3": 0.5, "split": "dev"} and trajs == []
    assert asked == [(["coin-dev-0", "coin-dev-1"], 3, 9, "json", "reasoning", False)]
    assert loop.train_task_ids == [f"coin-train-{i}" for i in range(6)]  # the loop records them when it runs
    assert store.get_meta("train_tasks") is None  # building the loop writes nothing
    assert loop.warmup is None and loop.stages.synthesis is None
    loop.cfg = load_config(None, [*sets, "train.iterations=0", "train.eval_before=false", "train.eval_after=false"])
    loop.run()
    assert store.get_meta("train_tasks") == json.dumps(loop.train_task_ids)  # recorded by the loop, not the root
    store.close()
    unset = [s for s in sets if not s.startswith(("train.eval_k", "train.eval_tasks"))]
    cfg, run_dir, store = open_run(load_config(None, unset), None)
    build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts).evaluator(1)
    assert asked[-1][:2] == ([f"coin-dev-{i}" for i in range(6)], 4)  # every task, k = the group size
    store.close()


def test_a_data_parallel_rank_takes_part_in_every_update_rank_0_announces(monkeypatch):
    from evolvekit.orchestrator import build

    class _Trainer:
        def __init__(self):
            self.updates = []

        def update(self, samples):
            self.updates.append(samples)

    class _Parallel:
        def __init__(self, messages):
            self.messages, self.sent = list(messages), []

        def broadcast(self, value):
            self.sent.append(value)
            return self.messages.pop(0)

    trainer, made = _Trainer(), []
    parts = replace(
        build.PARTS,
        trainer=lambda cfg, store, console, parallel: made.append((cfg, store, parallel)) or (None, trainer),
    )
    parallel = _Parallel([["s1"], ["s2", "s3"], None, ["never"]])
    cfg = load_config(None, [])
    assert build.serve_updates(cfg, "store", parallel, parts) == 2  # type: ignore[arg-type]
    assert trainer.updates == [["s1"], ["s2", "s3"]] and parallel.sent == [None, None, None]
    assert made == [(cfg, "store", parallel)]  # the same trainer as rank 0's: this run's config and store


def test_build_loop_scores_synthesized_tasks_with_the_configured_judge(tmp_path, monkeypatch, no_model):
    """questioning.reward: judge wraps the rollouts with the judge role's model and its retries; state needs no judge;
    the synthesis stage runs before the loop (a scripted policy, a one-step test environment)."""
    from pathlib import Path

    from evolvekit.llm import factory
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.questioning.judge import LLMJudge
    from evolvekit.questioning.reward import SyntheticRewardRollouts

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    judge_llm = _Policy()
    real_role = factory.role_llm
    asked: list = []

    def role(models, name):
        asked.append((models, name))
        return judge_llm if name == "judge" else real_role(models, name)

    monkeypatch.setattr(factory, "role_llm", role)
    sets = [
        f"run.out_dir={tmp_path / 'runs'}",
        "env.name=coin",
        "env.plugins=[coin_env]",
    ]
    sets += ["questioning.enabled=true", "navigating.enabled=false", "attributing.enabled=false", "train.kl_beta=0"]
    sets += ["questioning.judge_constrained=off", "questioning.judge_retries=4", "questioning.reward=judge"]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    loop = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
    rollouts = loop.stages.rollouts
    assert isinstance(rollouts, SyntheticRewardRollouts) and rollouts.mode == "judge"
    assert isinstance(rollouts.judge, LLMJudge) and rollouts.judge.llm is judge_llm and rollouts.judge.max_retries == 4
    assert rollouts.judge.params == factory.sampling_for(cfg.models.judge) and asked == [(cfg.models, "judge")]
    assert loop.stages.synthesis is not None
    store.close()
    # the constrained judge (judge_constrained: on) gets the judge role's model and sampling
    from evolvekit.questioning import judge as judge_mod

    made: list = []
    monkeypatch.setattr(judge_mod, "ConstrainedJudge", lambda llm, params: made.append((llm, params)) or "constrained")
    on = [s for s in sets if not s.startswith("questioning.judge_constrained")] + ["questioning.judge_constrained=on"]
    cfg, run_dir, store = open_run(load_config(None, on), None)
    assert (
        build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts).stages.rollouts.judge
        == "constrained"
    )
    assert made == [(judge_llm, factory.sampling_for(cfg.models.judge))]
    store.close()
    cfg, run_dir, store = open_run(load_config(None, [*sets, "questioning.reward=state"]), None)
    state = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts).stages.rollouts
    assert isinstance(state, SyntheticRewardRollouts) and state.mode == "state" and state.judge is None
    store.close()


def test_a_bad_held_out_task_file_is_named_as_not_a_task(tmp_path):
    from evolvekit.env.task_file import load_task_file
    from evolvekit.errors import ConfigError

    bad = tmp_path / "held.jsonl"
    bad.write_text('{"query": 3}\n')
    with pytest.raises(ConfigError, match=r"held\.jsonl:1: not a task: "):
        load_task_file(str(bad))


def test_at_lambda_1_no_person_written_training_task_reaches_the_training_side(tmp_path, monkeypatch, no_model):
    """Issue 51: a run that trains on its own tasks alone (questioning on, λ = 1) reads nothing of the person-written
    train split: its synthesis dedups against no person-written request and the stored list of training tasks is
    empty. At λ < 1 the run trains on those tasks, and both hold them."""
    from pathlib import Path

    from evolvekit.llm import factory
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.questioning import pipeline

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: _Embedder())
    monkeypatch.setattr(factory, "role_llm", lambda models, role: _Policy())
    existing: list = []

    def record(settings, n, explorer, eparams, synth, sparams, make_env, embed, **kw):
        existing.append([t.task_id for t in kw["existing"]])
        return [], "funnel", None

    monkeypatch.setattr(pipeline, "synthesize_tasks", record)
    person = [f"coin-train-{i}" for i in range(6)]
    for lam, want in ((1.0, []), (0.5, person)):
        sets = [
            f"run.out_dir={tmp_path / str(lam)}",
            "env.name=coin",
            "env.plugins=[coin_env]",
            "train.kl_beta=0",
            "questioning.enabled=true",
            f"questioning.hybrid_lambda={lam}",
            "questioning.reward=state",
            "navigating.enabled=false",
            "attributing.enabled=false",
        ]
        cfg, run_dir, store = open_run(load_config(None, sets), None)
        loop = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
        assert loop.stages.synthesis is not None
        loop.stages.synthesis.synthesize([], pipeline.Funnel(), lambda *a: None)
        assert existing[-1] == want
        assert loop.train_task_ids == want
        store.close()


def test_the_run_trains_from_its_newest_intact_checkpoint_and_says_so_on_its_console(tmp_path, monkeypatch):
    """trainer_from_store hands build_trainer the run's newest intact checkpoint, reporting a damaged one on the
    run's console (then the configured model)."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from evolvekit.orchestrator import build
    from evolvekit.store.sqlite import RunStore
    from evolvekit.train import parts

    asked: list = []
    monkeypatch.setattr(parts, "build_trainer", lambda cfg, ckpt, parallel: asked.append((cfg, ckpt, parallel)) or "t")
    store = RunStore(tmp_path / "run.sqlite")
    with store.transaction() as c:
        store.put_checkpoint(c, 0, str(tmp_path / "gone"))
    out = io.StringIO()
    cfg, group = load_config(None, []), SimpleNamespace()
    assert build.trainer_from_store(cfg, store, Console(file=out, width=400), group) == "t"
    assert asked == [(cfg, None, group)] and "is damaged" in out.getvalue()
    store.close()


@pytest.mark.parametrize("oracle", [False, True])
def test_the_environments_build_loop_makes_measure_person_written_distances_only_under_the_oracle(
    tmp_path, monkeypatch, no_model, oracle
):
    """Every environment the composition builds (rollouts and evaluation share its factory) is told once whether a
    person-written task's reference distances may be computed: only under run.oracle (src/evolvekit/boundary.py)."""
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    sets = [
        f"run.out_dir={tmp_path / 'runs'}",
        f"run.oracle={str(oracle).lower()}",
        "env.name=bfcl",
        "questioning.enabled=false",
        "navigating.enabled=false",
        "attributing.enabled=false",
    ]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    loop = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
    env = loop.stages.rollouts.make_env()
    from evolvekit.env.examples import ShownExamples, unwrapped

    assert isinstance(env, ShownExamples)  # the run's own worked examples, not the environment's (issue 76)
    assert isinstance(unwrapped(env), BfclEnv) and unwrapped(env).person_reference_distances is oracle
    assert env.person_reference_distances is oracle  # read through the wrapper
    env.close()
    store.close()


@pytest.mark.parametrize("flag", ["train.eval_before", "train.eval_after", "train.eval_every"])
def test_any_one_kind_of_held_out_evaluation_needs_tasks_to_evaluate(tmp_path, monkeypatch, no_model, flag):
    """An environment with no tasks of its own and no held-out synthesized file: each evaluation switch alone is
    refused at build time, naming what to do; with all three off the loop builds."""
    from evolvekit.errors import EnvError
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    off = ["train.eval_before=false", "train.eval_after=false", "train.eval_every=0"]
    on = "train.eval_every=1" if flag == "train.eval_every" else f"{flag}=true"
    base = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin_notask", "env.plugins=[notask_env]"]
    base += ["questioning.enabled=true", "questioning.hybrid_lambda=1.0", "navigating.enabled=false"]
    base += ["attributing.enabled=false"]
    cfg, run_dir, store = open_run(load_config(None, base + [s for s in off if not s.startswith(flag)] + [on]), None)
    with pytest.raises(EnvError, match=r"turn train\.eval_before, train\.eval_after and train\.eval_every off$"):
        build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
    store.close()
    cfg, run_dir, store = open_run(load_config(None, base + off), None)
    assert (
        build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts).evaluator is None
    )  # nothing to evaluate
    store.close()


def test_build_loop_hands_its_collaborators_the_runs_own_objects(tmp_path, monkeypatch, no_model):
    """build_loop's wiring: the environment's preflight with the first person-written training task, the trainer
    built with the run's console and data-parallel group, the task supply with the run's store, policy and
    environment factory; and the tokenizers' threads turned off unless the user set them."""
    from rich.console import Console

    from evolvekit.orchestrator import build
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    preflights: list = []
    trainers: list = []
    scripted = no_model.parts.trainer
    supplies: list = []
    parts = replace(
        no_model.parts,
        environment=lambda env, task: preflights.append((env, task)),
        trainer=lambda *args: trainers.append(args) or scripted(*args),
        task_supply=lambda *args: supplies.append(args) or build.task_supply(*args),
    )
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin", "env.plugins=[coin_env]", "train.kl_beta=0"]
    sets += ["questioning.enabled=false", "navigating.enabled=false", "attributing.enabled=false"]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    console, group = Console(), object()
    loop = build.build_loop(cfg, run_dir, store, console, show_progress=False, parallel=group, parts=parts)  # type: ignore[arg-type]
    assert [(e, t.task_id) for e, t in preflights] == [(cfg.env, "coin-train-0")]
    assert trainers == [(cfg, store, console, group)] and loop.stages.updater.parallel is group
    assert loop.console is console
    [(c, s, train_tasks, policy, env_factory)] = supplies
    assert c is cfg and s is store and policy is loop.stages.rollouts.llm
    assert [t.task_id for t in train_tasks][:2] == ["coin-train-0", "coin-train-1"]
    assert env_factory is loop.stages.rollouts.make_env
    assert __import__("os").environ["TOKENIZERS_PARALLELISM"] == "false"
    store.close()


def test_build_loop_hands_synthesis_navigation_and_evolving_rl_the_runs_objects(tmp_path, monkeypatch, no_model):
    """The stages build_loop composes get its own objects: self-questioning's synthesis the run's person-written
    tasks, policy, environment factory and the supply's receiver; the navigating pair the policy's engine, the
    environment factory, the run's sampling, progress setting, training set and template; Evolving-RL's stages the
    config, the rollouts' engine (the trainer's), environment, sampling, the embedder's function, the template, and
    as related tasks the person-written training tasks with the synthesized ones (and no other)."""
    from types import SimpleNamespace

    from evolvekit.agent.parts import policy_sampling, rollout_template
    from evolvekit.navigating.parts import navigation
    from evolvekit.orchestrator import build
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.types import TaskSource

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    synth: list = []
    navs: list = []
    evolving: list = []
    embedder = SimpleNamespace(embed=lambda texts: [])
    embedders: list = []
    parts = replace(
        no_model.parts,
        synthesis=lambda *args: synth.append(args) or "synthesis",
        navigation=lambda *args: navs.append(args) or navigation(*args),
        embedder=lambda cfg: embedders.append(cfg) or embedder,
        evolving_rl=lambda *args, **kw: evolving.append((args, kw)) or ("r", "e", "s"),
    )
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin", "env.plugins=[coin_env]", "train.kl_beta=0"]
    sets += ["questioning.enabled=true", "questioning.hybrid_lambda=0.5", "questioning.reward=state"]
    sets += ["navigating.enabled=false", "attributing.enabled=false", "evolving_rl.enabled=true"]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    loop = build.build_loop(cfg, run_dir, store, show_progress=False, parts=parts)
    assert loop.stages.synthesis == "synthesis" and loop.stages.samples == "s"
    [(c, train_tasks, policy, engine, env_factory, receive)] = synth
    assert c is cfg and [t.task_id for t in train_tasks][:1] == ["coin-train-0"]
    assert policy is no_model.policy
    [(c, s, backend, factory_, params, progress, training_set, template, shown)] = navs
    assert engine is backend  # the pass probe samples through the engine the rollouts use
    assert (c, s, backend.llm, factory_, progress) == (cfg, store, no_model.policy, env_factory, False)
    assert shown is loop.prepare  # the run's own examples, made once: Ray workers show the same
    assert params == policy_sampling(cfg) and template == rollout_template(cfg)
    assert training_set == loop.stages.supply.training_set
    [(args, kw)] = evolving
    assert embedders == [cfg.embedding]
    assert args[:4] == (cfg, backend, env_factory, params) and args[5] is embedder.embed  # the rollouts' engine
    assert kw == {"template": template}
    syn = Task(task_id="syn", env_name="coin", query="q", source=TaskSource.SYNTHETIC)
    receive([syn])
    assert [t.task_id for t in args[4]()] == [t.task_id for t in train_tasks] + ["syn"]
    store.close()


def test_the_cold_start_teaches_search_with_the_answer_of_the_runs_own_pool(tmp_path, monkeypatch, no_model):
    """With experience search as an action, the cold start's search answer is the search tool's own: the run's pool,
    the query, navigating.search_k results, the text shown to the policy; without the action there is none."""
    import numpy as np

    from evolvekit.llm import factory
    from evolvekit.navigating.tool_env import ExperienceToolEnv, search_answer
    from evolvekit.orchestrator import build
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.types import Experience

    class _WordEmbedder:  # "add" near one axis, anything else near the other
        def embed(self, texts):
            return np.array([[1.0, 0.0] if "add" in t else [0.0, 1.0] for t in texts])

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    monkeypatch.setattr(factory, "role_llm", lambda models, role: _Policy())
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: _WordEmbedder())
    cold: list = []
    scripted = no_model.parts.trainer  # with the KL reference the cold start is handed
    trainers: list = []

    def with_reference(*args):
        policy, trainer = scripted(*args)
        trainer.reference = "the reference"
        trainers.append(trainer)
        return policy, trainer

    parts = replace(no_model.parts, trainer=with_reference, cold_start=lambda *args: cold.append(args) or "warm-up")
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin", "env.plugins=[coin_env]", "train.kl_beta=0"]
    sets += ["questioning.enabled=true", "questioning.reward=state", "attributing.enabled=false"]
    sets += ["cold_start.enabled=true"]
    tool = ["navigating.enabled=true", "navigating.as_tool=true", "navigating.search_k=1"]
    cfg, run_dir, store = open_run(load_config(None, sets + tool), None)
    loop = build.build_loop(cfg, run_dir, store, show_progress=False, parts=parts)
    assert loop.warmup == "warm-up"
    [(c, s, trainer, reference, env_factory, search)] = cold
    assert (c, s, reference) == (cfg, store, "the reference") and trainer is trainers[-1]
    env = env_factory()  # the environment itself: the pairs call the search answer directly
    assert env.name == "coin" and not isinstance(env, ExperienceToolEnv)
    pool = loop.stages.experience.pool
    pool.add(Experience(when_to_use="adding numbers", content="call add"), vector=np.array([1.0, 0.0]))
    pool.add(Experience(when_to_use="other", content="call multiply"), vector=np.array([0.0, 1.0]))
    assert (
        search("how do I add")
        == search_answer(pool, "how do I add", 1)[0]
        == "[Principle 0], type: guiding, metric score: 0.50, description: When to use: adding numbers | call add"
    )
    store.close()
    cfg, run_dir, store = open_run(load_config(None, sets + ["navigating.enabled=true"]), None)
    build.build_loop(cfg, run_dir, store, show_progress=False, parts=parts)
    assert cold[-1][-1] is None  # experience injected into prompts, not searched: nothing to teach
    store.close()
    cfg, run_dir, store = open_run(
        load_config(None, sets + ["navigating.enabled=false", "navigating.as_tool=true"]), None
    )
    build.build_loop(cfg, run_dir, store, show_progress=False, parts=parts)
    assert cold[-1][-1] is None  # no navigating, no pool to search
    store.close()


def test_an_environment_without_tasks_is_evaluated_on_the_held_out_synthesized_file(tmp_path, monkeypatch, no_model):
    """train.eval_synthetic on an environment with no tasks of its own: the evaluator scores those tasks alone, and
    its summary says there was no split to evaluate."""
    from evolvekit.agent import evaluate
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.types import TaskSource

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))

    class _Report:
        def summary(self):
            return {"avg@2": 0.25, "tasks": 1}

    seen: list = []

    def record(tasks, make_env, engine, rollout, params, k, rendering="compact", show_progress=True, **kw):
        seen.append([t.task_id for t in tasks])
        return _Report(), ["a trajectory"]

    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    held = tmp_path / "held.jsonl"
    task = Task(task_id="held-1", env_name="coin_notask", query="q", source=TaskSource.SYNTHETIC)
    held.write_text(task.model_dump_json() + "\n")
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin_notask", "env.plugins=[notask_env]"]
    sets += ["questioning.enabled=true", "questioning.hybrid_lambda=1.0", "questioning.reward=state"]
    sets += ["navigating.enabled=false", "attributing.enabled=false", f"train.eval_synthetic={held}"]
    cfg, run_dir, store = open_run(load_config(None, sets), None)
    summary, trajs = build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts).evaluator(1)
    assert seen == [["held-1"]] and trajs == ["a trajectory"]
    assert summary == {
        "split": "none (the environment has no tasks of its own)",
        "synthetic/avg@2": 0.25,
        "synthetic/tasks": 1,  # what the figure rests on
    }
    store.close()


def test_the_task_supply_regenerates_with_the_coevolve_hook_of_the_runs_objects(monkeypatch):
    """CoEvolve on: the hybrid supply gets the hook built from the run's config, store, policy and environment."""
    from evolvekit.orchestrator import build
    from evolvekit.questioning.supply import HybridTaskSupply

    hooks: list = []
    tasks = [Task(task_id=f"t{i}", env_name="bfcl", query="q") for i in range(3)]
    cfg = load_config(None, ["questioning.enabled=true", "questioning.hybrid_lambda=0.5", "coevolve.enabled=true"])
    store, policy, env_factory = object(), object(), object()
    supply = build.task_supply(
        cfg, store, tasks, policy, env_factory, coevolve=lambda *a: hooks.append(a) or "the hook"
    )
    assert type(supply) is HybridTaskSupply and supply.coevolve == "the hook"
    assert hooks == [(cfg, store, policy, env_factory)]


def test_experience_as_a_tool_reaches_evaluation_with_no_injection_and_no_boost(tmp_path, monkeypatch, no_model):
    """The fast twin of test_run_loop's slow as_tool test (issue 77.2): with navigating.as_tool, held-out evaluation
    and training rollouts act in the environment that offers search_experience, no rollout of a group is injected
    (Eq. 15's N_e = 0) and the trainer gets no boost (Eq. 17); with injection, N_e = ⌊η·N⌋ and the boost is set."""
    from evolvekit.agent import evaluate
    from evolvekit.navigating.stage import NavigationSettings
    from evolvekit.navigating.tool_env import ExperienceToolEnv
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.train.parts import guided_boost

    made: list = []

    class _Report:
        def summary(self):
            return {"avg@1": 0.0}

    def record(tasks, make_env, engine, rollout, params, k, rendering="compact", show_progress=True, **kw):
        made.append(make_env())
        return _Report(), []

    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin", "env.plugins=[coin_env]", "env.eval_split=dev"]
    sets += ["train.eval_tasks=1", "train.eval_k=1", "train.kl_beta=0", "rollout.group_size=4"]
    sets += ["questioning.enabled=false", "attributing.enabled=false", "navigating.enabled=true"]
    sets += ["navigating.rerank=false", "navigating.rewrite=false", "navigating.extraction=grounded"]
    sets += ["navigating.eta=0.5", "navigating.eps_high_boost=0.45", "env.worked_examples=none"]
    sets += ["models.summarizer.backend=openai", "models.summarizer.base_url=http://127.0.0.1:9/v1"]  # not called
    cfg, run_dir, store = open_run(load_config(None, [*sets, "navigating.as_tool=true"]), None)
    loop = build_loop(
        cfg, run_dir, store, show_progress=False, parts=no_model.parts
    )  # one build (it loads the summarizer and embedder)
    loop.evaluator(1)
    assert isinstance(made[-1], ExperienceToolEnv)  # the tool at evaluation
    rollouts = loop.stages.rollouts
    assert isinstance(rollouts.make_env(), ExperienceToolEnv)  # and in training
    assert rollouts.guided_per_group() == 0 and guided_boost(cfg) is None
    store.close()
    injected = load_config(None, [*sets, "navigating.as_tool=false"])
    rollouts.nav = NavigationSettings.of(injected)  # the same stage under injection: N_e = ⌊0.5 · 4⌋
    assert rollouts.guided_per_group() == 2 and guided_boost(injected) == 0.45
    assert guided_boost(load_config(None, ["navigating.enabled=false"])) is None


@pytest.mark.parametrize("mode", ["self", "person"])
def test_the_policy_acts_in_the_environment_with_the_runs_own_examples_unless_a_persons(
    tmp_path, monkeypatch, no_model, mode
):
    """env.worked_examples: self wraps every environment the stages make so its resets show the run's own examples,
    made once by the policy (no explorer model configured) when the loop prepares; person leaves the environment's
    own (the switch), unwrapped."""
    from evolvekit.env.examples import ShownExamples
    from evolvekit.orchestrator import build
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.questioning import parts as qparts

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    explorers: list = []
    monkeypatch.setattr(qparts, "run_examples", lambda cfg, llm, bare_env, funnel=None: explorers.append(llm) or [])
    sets = [f"run.out_dir={tmp_path / 'runs'}", "env.name=coin", "env.plugins=[coin_env]", "train.kl_beta=0"]
    sets += ["questioning.enabled=false", "navigating.enabled=false", "attributing.enabled=false"]
    cfg, run_dir, store = open_run(load_config(None, [*sets, f"env.worked_examples={mode}"]), None)
    loop = build.build_loop(cfg, run_dir, store, show_progress=False, parts=no_model.parts)
    env = loop.stages.rollouts.make_env()
    if mode == "self":
        # the environment's own wrapper shows no person's examples; the stages' wrapper shows the run's own
        assert isinstance(env, ShownExamples) and object.__getattribute__(env, "_examples") is loop.prepare
        assert loop.prepare() == [] and explorers == [no_model.policy]
    else:
        assert loop.prepare is None and explorers == []
        assert not isinstance(env, ShownExamples)  # the environment's own, the person's, as make_env gives it
    env.close()
    store.close()
