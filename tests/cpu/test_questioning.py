"""Self-questioning: exploration phases and myopic window, synthesis parsing, both dedup filters, feasibility
replay (a hallucinated reference solution is dropped), and the pipeline on the real BFCL sandbox."""

import json
from pathlib import Path

import numpy as np
import pytest

from evolvekit.config import EnvConfig, load_config
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import format_call
from evolvekit.env.registry import make_env
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.curate import Deduplicator, lexical_overlap, replay_feasible
from evolvekit.questioning.explore import (
    BREADTH_HINT,
    DEPTH_HINT,
    ExplorationStep,
    Explorer,
    context_window,
    explorer_messages,
    phase,
)
from evolvekit.questioning.pipeline import SynthesisSettings, synthesize_tasks
from evolvekit.questioning.synthesize import parse_synthesis
from evolvekit.types import Task, ToolCall


def _steps(n):
    return [ExplorationStep(i, f"a{i}", [], f"o{i}", True) for i in range(n)]


def test_phase_switch_and_myopic_window():
    assert [phase(i, 3) for i in range(5)] == ["breadth", "breadth", "breadth", "depth", "depth"]
    steps = _steps(10)
    assert len(context_window(steps, 2, n_breadth=3, n_depth=4)) == 10  # breadth: everything so far
    assert [s.index for s in context_window(steps, 10, n_breadth=3, n_depth=4)] == [6, 7, 8, 9]  # depth: last N_d
    msgs = explorer_messages([], [], steps, 10, 3, 4)
    assert DEPTH_HINT in msgs[1].content and sum(m.role == "assistant" for m in msgs) == 4
    assert BREADTH_HINT in explorer_messages([], [], steps[:1], 1, 3, 4)[1].content


def test_explorer_context_grows_by_appending_so_a_kept_kv_cache_is_reused():
    from evolvekit.env.base import ToolSchema

    tools = [ToolSchema(name=n) for n in ("add", "subtract", "multiply", "divide")]
    steps = [
        ExplorationStep(i, f"a{i}", [ToolCall(name=tools[i % 4].name, arguments={})], f"o{i}", True) for i in range(8)
    ]
    for t in range(7):  # N_b = 3 breadth steps, then depth with N_d = 10 (no slide yet): pure appends
        now, nxt = explorer_messages(tools, [], steps, t, 3, 10), explorer_messages(tools, [], steps, t + 1, 3, 10)
        assert nxt[: len(now)] == now and len(nxt) == len(now) + 2
    # each past message keeps the hint it was shown with: step 1's nudge named a tool untried after step 0
    assert "Try `multiply`" in explorer_messages(tools, [], steps, 5, 3, 10)[3].content  # untried[1 % 3]
    assert DEPTH_HINT in explorer_messages(tools, [], steps, 5, 3, 10)[-1].content


def test_parse_synthesis():
    text = (
        "Task: Add 3 and 4.\nSolution: 0\n\n**Task:** Multiply then add.\n**Solution:** [1, 0]\nTask: bad\nSolution: 9"
    )
    assert parse_synthesis(text, 2) == [("Add 3 and 4.", [0]), ("Multiply then add.", [1, 0])]
    assert parse_synthesis("nothing", 3) == []


def _task(q, calls, tid="t"):
    return Task(
        task_id=tid,
        env_name="bfcl",
        query=q,
        reference_solution=[calls],
        metadata={
            "category": "synthetic",
            "bfcl_id": tid,
            "involved_classes": ["MathAPI"],
            "allowed_tools": ["add", "subtract", "multiply", "divide"],
        },
    )


def test_lexical_and_semantic_dedup():
    assert lexical_overlap("add 3 and 4", "Add 3 and 4!") == 1.0
    assert lexical_overlap("add 3 and 4", "multiply 9 by 2") == 0.0
    table = {
        "What is 3 plus 4?": [1.0, 0.0],
        "Please compute 3 + 4": [0.95, np.sqrt(1 - 0.95**2)],
        "Divide 10 by 2": [0.0, 1.0],
        "what is 3 plus 4": [1.0, 0.0],
    }
    dedup = Deduplicator(lambda ts: np.array([table[t] for t in ts], dtype=np.float32), 0.8, 0.9)
    dedup.seed([_task("What is 3 plus 4?", [])])
    res = dedup.filter([_task("what is 3 plus 4", []), _task("Please compute 3 + 4", []), _task("Divide 10 by 2", [])])
    assert res.lexical_duplicates == 1 and res.semantic_duplicates == 1
    assert [t.turns[0] for t in res.kept] == ["Divide 10 by 2"]


def test_feasibility_replay_drops_hallucinated_solutions():
    cfg = EnvConfig(name="bfcl")
    good = _task("Add 3 and 4.", [ToolCall(name="add", arguments={"a": 3, "b": 4})], "good")
    assert replay_feasible(good, lambda: make_env(cfg)) == (True, "")
    ghost = _task("Add 3 and 4.", [ToolCall(name="add_numbers", arguments={"x": 3})], "ghost")
    ok, reason = replay_feasible(ghost, lambda: make_env(cfg))
    assert not ok and "unknown tool" in reason
    bad_args = _task("Add.", [ToolCall(name="add", arguments={"a": "three"})], "bad")
    assert not replay_feasible(bad_args, lambda: make_env(cfg))[0]
    assert not replay_feasible(
        _task("x", [], "empty").model_copy(update={"reference_solution": None}), lambda: make_env(cfg)
    )[0]


class _Scripted:
    name = "scripted"

    def __init__(self, fn):
        self.fn = fn

    def chat(self, conversations, params):
        return [[Completion(text=self.fn(c))] for c in conversations]


def _explorer_answer(conv):
    start = next(i for i, m in enumerate(conv) if m.content.startswith("You are exploring"))
    n = sum(m.role == "assistant" for m in conv[start:])  # own steps only (worked examples come before)
    calls = [
        ToolCall(name="add", arguments={"a": 2, "b": 5}),
        ToolCall(name="multiply", arguments={"a": 7, "b": 3}),
        ToolCall(name="power", arguments={"base": 2}),
        ToolCall(name="divide", arguments={"a": 21, "b": 7}),
    ]
    return format_call(calls[n % len(calls)])


def test_explorer_runs_in_the_family_sandbox():
    explorer = Explorer(Engine(_Scripted(_explorer_answer)), SamplingParams(temperature=1.0), n_breadth=2, n_depth=10)
    sandbox = {"classes": ["MathAPI"], "tools": ["add", "subtract", "multiply", "divide"]}
    traces = explorer.explore(lambda: make_env(EnvConfig(name="bfcl")), sandbox, runs=2, max_steps=4)
    assert len(traces) == 2 and all(len(t.steps) == 4 for t in traces)
    t = traces[0]
    assert [s.ok for s in t.steps] == [True, True, False, True]  # `power` is outside the family: an error
    assert [c.name for _, c, _ in t.successful_calls()] == ["add", "multiply", "divide"]
    assert '"result": 7' in t.steps[0].observation


def test_pipeline_keeps_only_feasible_unique_tasks():
    def synth(conv):
        return (
            "Task: What is 2 plus 5?\nSolution: 0\n"
            "Task: What is 2 plus 5 ?\nSolution: 0\n"  # lexical duplicate
            "Task: Multiply 7 by 3, then divide 21 by 7.\nSolution: 1, 2\n"
            "Task: Out of range.\nSolution: 7\n"
        )

    cfg = load_config(
        None,
        [
            *PERSON,
            "env.family=arith",
            "questioning.explore_runs=1",
            "questioning.explore_steps=4",
            "questioning.n_breadth=2",
            "questioning.n_depth=10",
        ],
    )
    rounds = []
    tasks, funnel, traces = synthesize_tasks(
        SynthesisSettings.of(cfg),
        5,
        _Scripted(_explorer_answer),
        SamplingParams(),
        _Scripted(synth),
        SamplingParams(),
        lambda: make_env(cfg.env),
        embed=None,
        max_rounds=1,
        on_round=lambda f, tr, kept: rounds.append((f.kept, tr, kept)),
    )
    assert funnel.explored == 1 and funnel.explored_calls == 3
    assert len(rounds) == 1 and rounds[0][0] == 2 and rounds[0][1] == traces and rounds[0][2] == tasks  # per round
    assert funnel.synthesized == 3 and funnel.deduplicated == 1 and funnel.kept == 2 and funnel.infeasible == 0
    assert [t.turns[0] for t in tasks] == ["What is 2 plus 5?", "Multiply 7 by 3, then divide 21 by 7."]
    assert [c.name for c in tasks[1].reference_solution[0]] == ["multiply", "divide"]
    assert tasks[1].difficulty.operations == 2 and tasks[1].source.value == "synthetic"
    assert tasks[0].metadata["exploration_id"] == traces[0].exploration_id
    for t in tasks:  # every kept task's reference solution replays
        assert replay_feasible(t, lambda: make_env(cfg.env))[0]


def test_grounding_is_the_share_of_reference_values_the_request_states():
    from evolvekit.questioning.curate import argument_values, grounding

    add = lambda a, b: ToolCall(name="add", arguments={"a": a, "b": b})  # noqa: E731
    assert grounding(_task("What is 57 plus 7?", [add(50, 7)], "g1")) == 0.5  # 50 is nowhere in the request
    assert grounding(_task("What is 50 plus 7.0?", [add(50, 7)], "g2")) == 1.0  # 7.0 states 7
    assert grounding(_task("Add -3 and 2.5.", [add(-3, 2.5)], "g3")) == 1.0  # sentence end, signs, decimals
    cd = ToolCall(name="cd", arguments={"folder": "Final  Report", "recursive": True, "tags": ["#a", ""]})
    assert argument_values(cd.arguments) == ["Final  Report", "#a"]  # booleans and empty strings do not count
    assert grounding(_task("Go to final report and tag it #A", [cd], "g4")) == 1.0
    assert grounding(_task("Go to the report folder", [cd], "g5")) == 0.0
    assert grounding(_task("List the files", [ToolCall(name="ls")], "g6")) == 1.0  # nothing to state


# the synthesis mechanics under test read the family's own worked examples as shots (env.worked_examples: person) and
# write requests in the family's templates, which the held-out wording filter (tested on its own) would drop
PERSON = ["env.worked_examples=person", "train.eval_before=false", "train.eval_after=false"]

_ONE_EXPLORATION = [
    *PERSON,
    "env.family=arith",
    "questioning.explore_runs=1",
    "questioning.explore_steps=4",
    "questioning.n_breadth=2",
    "questioning.n_depth=10",
]


def _synthesize_once(cfg, synth, embed=None, probe=None):
    """One round of exploration (the scripted explorer) and synthesis (``synth``) for up to 5 tasks."""
    return synthesize_tasks(
        SynthesisSettings.of(cfg),
        5,
        _Scripted(_explorer_answer),
        SamplingParams(),
        _Scripted(synth),
        SamplingParams(),
        lambda: make_env(cfg.env),
        embed,
        max_rounds=1,
        probe=probe,
    )


def test_pipeline_grounding_filter_drops_requests_that_miss_their_values():
    def synth(conv):
        return (
            "Task: What is 57 plus 5?\nSolution: 0\n"  # add(2, 5): 2 is not stated
            "Task: Multiply 7 by 3.\nSolution: 1\n"
        )

    overrides = _ONE_EXPLORATION
    for threshold, kept in ((0.0, ["What is 57 plus 5?", "Multiply 7 by 3."]), (1.0, ["Multiply 7 by 3."])):
        cfg = load_config(None, overrides + [f"questioning.grounding_threshold={threshold}"])
        tasks, funnel, _ = _synthesize_once(cfg, synth)
        assert [t.turns[0] for t in tasks] == kept and funnel.ungrounded == 2 - len(kept)
    assert tasks[0].metadata["curation"]["grounding"] == 1.0


def test_numbers_exact_counts_each_value_and_refuses_extra_numbers():
    from evolvekit.questioning.curate import numbers_exact

    add = lambda a, b: ToolCall(name="add", arguments={"a": a, "b": b})  # noqa: E731
    assert numbers_exact(_task("Add 3 and 3.", [add(3, 3)]))
    assert numbers_exact(_task("What is -2.5 plus 4?", [add(4, -2.5)]))  # order does not matter
    assert not numbers_exact(_task("Multiply that by -1.", [add(-1, -1)]))  # -1 stated once, used twice
    assert not numbers_exact(_task("Compute the sum of -1 and 2.", [add(-1, -1)]))  # 2 is not the reference's
    assert not numbers_exact(_task("Add 2 and 5, then 4.", [add(2, 5)]))  # a number no call uses
    assert numbers_exact(_task("List the files.", [ToolCall(name="ls")]))  # nothing to state
    two = Task(env_name="bfcl", query=["Add 1 and 2.", "Now times 4."], reference_solution=[[add(1, 2)], [add(3, 4)]])
    assert not numbers_exact(two)  # 3 is the first result: a later turn's value must be stated too


def test_tool_agreement_with_the_embedded_model_on_the_real_math_tools():
    from evolvekit.llm.factory import build_embedder
    from evolvekit.questioning.curate import ToolAgreement

    cfg = load_config(None, [*PERSON, "env.family=arith_turns"])
    env = make_env(cfg.env)
    tools = env.reset(None, {"classes": ["MathAPI"], "tools": ["add", "subtract", "multiply", "divide"]}).tools
    env.close()
    agreement = ToolAgreement(build_embedder(cfg.embedding).embed, tools)
    call = lambda name: ToolCall(name=name, arguments={"a": 3, "b": 5})  # noqa: E731
    assert agreement.agrees(_task("Compute the sum of 3 and 5.", [call("add")]))
    assert agreement.agrees(_task("Multiply 3 by 5.", [call("multiply")]))
    assert agreement.agrees(_task("Subtract 5 from 3.", [call("subtract")]))
    assert not agreement.agrees(_task("Compute the sum of 3 and 5.", [call("multiply")]))
    assert not agreement.agrees(_task("Multiply 3 by 5.", [call("add")]))
    assert not agreement.agrees(_task("Add 3 and 5.", [ToolCall(name="power", arguments={})]))  # not a tool here
    assert agreement.agrees(_task("List nothing.", []))  # no call: nothing to agree with


def test_pipeline_exact_numbers_and_tool_agreement_drop_inconsistent_requests():
    from evolvekit.llm.factory import build_embedder

    def synth(conv):
        return (
            "Task: What is 2 plus 5 plus 5?\nSolution: 0\n"  # add(2, 5): 5 stated twice
            "Task: Multiply 2 by 5.\nSolution: 0\n"  # add(2, 5): the numbers, but another operation
            "Task: Multiply 7 by 3.\nSolution: 1\n"
        )

    overrides = _ONE_EXPLORATION
    embed = build_embedder(load_config(None, []).embedding).embed
    for on, kept in (
        (False, ["What is 2 plus 5 plus 5?", "Multiply 2 by 5.", "Multiply 7 by 3."]),
        (True, ["Multiply 7 by 3."]),
    ):
        cfg = load_config(None, overrides + [f"questioning.grounding_exact={on}", f"questioning.tool_agreement={on}"])
        tasks, funnel, _ = _synthesize_once(cfg, synth, embed)
        assert [t.turns[0] for t in tasks] == kept
        assert (funnel.ungrounded, funnel.tool_disagreement) == ((1, 1) if on else (0, 0))
    assert tasks[0].metadata["curation"]["numbers"] == "exact" and tasks[0].metadata["curation"]["tools"] == "agree"
    cfg = load_config(None, overrides + ["questioning.tool_agreement=true"])
    with pytest.raises(ValueError, match="tool_agreement needs an embedding model"):
        _synthesize_once(cfg, synth)


def test_run_synthesis_stores_each_round_and_a_killed_run_resumes_from_it(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import evolvekit.llm.factory as factory
    from evolvekit.orchestrator.build import SYNTHESIS_DONE, synthesis_stage, task_supply
    from evolvekit.orchestrator.loop import run_synthesis
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.types import TaskSource

    answers = iter(
        [
            "Task: What is 2 plus 5?\nSolution: 0\n",
            RuntimeError("killed"),
            "Task: Multiply 7 by 3, then divide 21 by 7.\nSolution: 1, 2\n",
        ]
    )

    def synth(conv):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    monkeypatch.setattr(factory, "role_llm", lambda models, role: _Scripted(synth))
    monkeypatch.setattr(factory, "build_embedder", lambda cfg: SimpleNamespace(embed=None))
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            *PERSON,
            "env.family=arith",
            "questioning.enabled=true",
            "questioning.synthetic_tasks=2",
            "questioning.explore_runs=1",
            "questioning.explore_steps=4",
            "questioning.n_breadth=2",
            "questioning.n_depth=10",
        ],
    )
    cfg, run_dir, store = open_run(cfg, None)
    policy = _Scripted(_explorer_answer)  # the explorer is the initial policy (same local model)
    make = lambda: make_env(cfg.env)  # noqa: E731

    def synthesized():  # what the loop does before its first iteration: the synthesis stage, with its commits
        supply = task_supply(cfg, store, [], policy, make)
        assert supply.synthetic == []  # building the loop synthesizes nothing
        run_synthesis(store, synthesis_stage(cfg, [], policy, Engine(policy), make, supply.receive))
        return supply

    with pytest.raises(RuntimeError, match="killed"):  # round 1 keeps one task, round 2 dies
        synthesized()
    assert [t.turns[0] for t in store.tasks()] == ["What is 2 plus 5?"]  # round 1 is in the store
    # the round that died is lost whole (its exploration too); the finished round is not
    assert store.count("explorations") == 1 and store.get_meta(SYNTHESIS_DONE) is None

    supply = synthesized()  # resumed: goes on from the stored task
    assert [t.turns[0] for t in supply.synthetic] == ["What is 2 plus 5?", "Multiply 7 by 3, then divide 21 by 7."]
    funnel = json.loads(store.get_meta(SYNTHESIS_DONE))
    assert funnel["explored"] == 2 and funnel["kept"] == 2 and funnel["synthesized"] == 2  # counts carried on
    assert all(t.source == TaskSource.SYNTHETIC for t in store.tasks()) and len(store.tasks()) == 2

    again = synthesized()  # finished: no more synthesis (`answers` is spent)
    assert [t.task_id for t in again.synthetic] == [t.task_id for t in supply.synthetic]
    store.close()


def test_hybrid_mix_and_advantage_decay(tmp_path):
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.questioning.supply import HybridTaskSupply, hybrid_counts, synthetic_advantage_scale
    from evolvekit.types import TaskSource, Trajectory

    assert hybrid_counts(8, 1.0) == (8, 0) and hybrid_counts(8, 0.25) == (2, 6) and hybrid_counts(5, 0.5) == (3, 2)
    # λ is realized over the run: B = 3, λ = 0.5 gives 2, 1, 2, 1 (6 of 12), not 2 of 3 in every batch
    assert [hybrid_counts(3, 0.5, i)[0] for i in range(4)] == [2, 1, 2, 1]
    assert [hybrid_counts(3, 2 / 3, i)[0] for i in range(4)] == [2, 2, 2, 2]
    assert [hybrid_counts(4, 0.1, i)[0] for i in range(5)] == [0, 1, 0, 1, 0]  # 0.4, 0.8, 1.2, 1.6, 2.0 rounded
    for batch, lam in [(3, 0.5), (5, 0.3), (7, 0.9), (2, 0.25)]:
        assert sum(hybrid_counts(batch, lam, i)[0] for i in range(20)) == round(lam * batch * 20)
    syn = [_task(f"s{i}", [], f"s{i}").model_copy(update={"source": TaskSource.SYNTHETIC}) for i in range(3)]
    real = [_task(f"r{i}", [], f"r{i}") for i in range(5)]
    supply = HybridTaskSupply(syn, real, per_iteration=4, lam=0.5, seed=0)
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=None)
    drawn = supply.tasks(ctx)
    assert sum(t.source == TaskSource.SYNTHETIC for t in drawn) == 2 and len(drawn) == 4
    assert [t.task_id for t in supply.tasks(ctx)] == [t.task_id for t in drawn]  # deterministic (resume)
    odd = HybridTaskSupply(syn, real, per_iteration=3, lam=0.5, seed=0)
    runs = [odd.tasks(IterationContext(iteration=i, seed=0, run_dir=tmp_path, store=None)) for i in range(4)]
    assert [sum(t.source == TaskSource.SYNTHETIC for t in b) for b in runs] == [2, 1, 2, 1]
    real_ids = [t.task_id for b in runs for t in b if t.source != TaskSource.SYNTHETIC]
    assert sorted(real_ids[:5]) == [f"r{i}" for i in range(5)]  # the real pool is walked without skipping a task
    syn_ids = [t.task_id for b in runs for t in b if t.source == TaskSource.SYNTHETIC]
    assert sorted(syn_ids[:3]) == ["s0", "s1", "s2"] and sorted(syn_ids[3:6]) == ["s0", "s1", "s2"]
    only_syn = HybridTaskSupply(syn, [], per_iteration=3, lam=1.0, seed=0).tasks(ctx)
    assert sorted(t.task_id for t in only_syn) == ["s0", "s1", "s2"]  # one epoch covers each task once
    from evolvekit.errors import EvolveKitError

    with pytest.raises(EvolveKitError, match="no synthetic tasks"):
        HybridTaskSupply([], real, 4, 1.0, 0)
    scale = synthetic_advantage_scale({t.task_id: t for t in syn + real}, 0.5)
    assert scale(Trajectory(task_id="s1")) == 0.5 and scale(Trajectory(task_id="r1")) == 1.0


@pytest.mark.slow
def test_run_trains_on_synthetic_tasks_and_evaluates_on_real_ones(tmp_path, tiny_sets):
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import SYNTHESIS_DONE, build_loop
    from evolvekit.orchestrator.run_dir import open_run

    tiny = make_tiny_model(tmp_path / "tiny")
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            "env.family=arith",
            "env.family_tasks=6",
            *tiny_sets,  # every helper role tiny too (issue 97)
            f"models.policy.model={tiny}",
            "models.policy.max_new_tokens=8",
            "rollout.max_steps=2",
            "rollout.group_size=2",
            "train.iterations=1",
            "train.tasks_per_iteration=2",
            "train.eval_tasks=2",
            "train.eval_k=1",
            "train.autocast=off",
            "questioning.enabled=true",
            "questioning.explore_runs=1",
            "questioning.explore_steps=4",
            "questioning.n_depth=10",
            "questioning.reward=state",
        ],
    )
    # the synthetic task set as self-questioning would have stored it (explorer/synthesizer scripted here)
    synth = lambda conv: "Task: What is 2 plus 5?\nSolution: 0\nTask: Multiply 7 by 3.\nSolution: 1\n"  # noqa: E731
    tasks, funnel, _ = _synthesize_once(cfg, synth)
    assert funnel.kept == 2
    cfg, run_dir, store = open_run(cfg, None)
    with store.transaction() as c:
        store.put_tasks(c, tasks, -1)
    store.set_meta(SYNTHESIS_DONE, json.dumps(funnel.as_dict()))  # synthesis finished
    build_loop(cfg, run_dir, store, show_progress=False).run()
    trained_on = {t.task_id for t in store.trajectories(0, "train")}
    assert trained_on and trained_on <= {t.task_id for t in tasks}  # λ = 1: synthetic tasks only
    evaluated = {t.task_id for t in store.trajectories(None, "eval_after")}
    assert evaluated and all(tid.startswith("arith-test-") for tid in evaluated)  # the real held-out split
    assert store.metrics()[0]["tasks/synthetic_pool"] == 2.0
    store.close()


def _tr(task, score, calls=("add",), group=None, tid=None):
    from evolvekit.types import Step, Trajectory

    steps = [Step(index=0, action_text="x", tool_calls=[ToolCall(name=c) for c in calls])]
    kw = {"trajectory_id": tid} if tid else {}
    return Trajectory(task_id=task, group_id=group or task, outcome_reward=score, steps=steps, **kw)


def test_coevolve_signal_rules_on_hand_built_histories():
    from evolvekit.questioning.coevolve import SignalTracker, boundary, forgetting, rare

    assert forgetting([0.0, 1.0, 0.0], 0.0) and not forgetting([0.0, 0.4], 0.0) and not forgetting([1.0], 0.5)
    assert boundary([1.0, 0.0]) and not boundary([0.5, 0.0]) and not boundary([1.0, 1.0])
    assert rare(2, 50, 5.0, 50) and not rare(2, 49, 5.0, 50) and not rare(3, 50, 5.0, 50) and not rare(0, 60, 5.0, 50)

    tracker = SignalTracker(window=2, theta_percent=5.0, n_min=4)
    assert tracker.observe([_tr("a", 1.0)]) == []  # success, no history yet
    assert tracker.observe([_tr("a", 0.0)])[0].kind == "forgetting"
    tracker.observe([_tr("a", 0.0)])
    # window W = 2 now holds [0.0, 0.0]: the old success fell out, so no forgetting signal
    assert [s.kind for s in tracker.observe([_tr("a", 0.0)])] == []
    sig = tracker.observe([_tr("b", 1.0, group="g", tid="t1"), _tr("b", 0.0, group="g", tid="t2")])
    assert sorted(s.trajectory_id for s in sig if s.kind == "boundary") == ["t1", "t2"]
    # N = 26 patterns observed, 'cd->ls' seen once: 1/26 < 5% -> rare
    many = [_tr(f"c{i}", 1.0) for i in range(20)] + [_tr("odd", 1.0, calls=("cd", "ls"), tid="rare1")]
    assert [s.trajectory_id for s in tracker.observe(many) if s.kind == "rare"] == ["rare1"]


def test_coevolve_regenerator_makes_signal_tagged_tasks():
    from evolvekit.questioning.coevolve import GOALS, CoEvolveRegenerator, Signal

    seen_goals = []

    def explore_fn(kind, goal):
        seen_goals.append((kind, goal))
        return [_task(f"new task for {kind}", [ToolCall(name="add", arguments={"a": 1, "b": 2})], f"n-{kind}")]

    reflect = _Scripted(lambda conv: "The agent confuses subtract argument order.")
    regen = CoEvolveRegenerator(reflect, SamplingParams(), explore_fn, max_contexts=2)
    trajs = {"t1": _tr("a", 0.0, tid="t1"), "t2": _tr("b", 1.0, tid="t2"), "t3": _tr("c", 0.0, tid="t3")}
    signals = [Signal("boundary", "t2", "b"), Signal("forgetting", "t1", "a"), Signal("rare", "t3", "c")]
    new = regen.regenerate(signals, trajs, {})
    assert [k for k, _ in seen_goals] == ["forgetting", "boundary"]  # forgetting first, at most 2 contexts
    assert "Reinforce Forgotten Skills" in seen_goals[0][1] and "argument order" in seen_goals[0][1]
    assert GOALS["boundary"].split("\n")[0] in seen_goals[1][1]
    assert [t.metadata["signal"]["kind"] for t in new] == ["forgetting", "boundary"]
    assert regen.regenerate([], trajs, {}) == []


def test_judge_parsing_fallback_and_mix():
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.questioning.judge import LLMJudge, judge_prompt, parse_judge_score
    from evolvekit.questioning.reward import SyntheticRewardRollouts
    from evolvekit.train.rewards import mix_reward
    from evolvekit.types import TaskSource

    assert parse_judge_score("Reasoning... Score: 0.85") == 0.85
    assert parse_judge_score("score = 1\nactually **Score:** 0.2") == 0.2  # the last one counts
    assert parse_judge_score("Score: 7") is None and parse_judge_score("great job") is None
    assert mix_reward("state", 1.0, 0.2, 0.5) == 1.0 and mix_reward("judge", 1.0, 0.2, 0.5) == 0.2
    assert mix_reward("mix", 1.0, 0.2, 0.5) == pytest.approx(0.6) and mix_reward("judge", 1.0, None, 0.5) == 1.0

    syn = _task("Add 2 and 5.", [ToolCall(name="add", arguments={"a": 2, "b": 5})], "s1").model_copy(
        update={"source": TaskSource.SYNTHETIC}
    )
    real = _task("Real one.", [], "r1")
    prompt = judge_prompt(syn, _tr("s1", 1.0))
    assert '"name": "add"' in prompt[1].content and "Principle 1" in prompt[0].content

    class Inner:  # a RolloutStage (evolvekit.protocols)
        last_metrics: dict = {}

        def rollout(self, ctx, tasks):
            return [_tr("s1", 1.0, tid="a"), _tr("s1", 0.0, tid="b"), _tr("r1", 1.0, tid="c")]

    answers = iter(["Score: 0.9", "no idea", "still no idea", "nope"])
    judge = LLMJudge(_Scripted(lambda conv: next(answers)), SamplingParams(), max_retries=2)
    stage = SyntheticRewardRollouts(Inner(), "judge", judge)
    out = stage.rollout(IterationContext(0, 0, Path("."), None), [syn, real])
    assert [t.outcome_reward for t in out] == [1.0, 0.0, 1.0]  # recorded, not yet mixed (issue 55: one writer)
    from evolvekit.train.rewards import shape_rewards

    shape_rewards(out, 1.0, 0.0, synthetic_mode="judge", judge_weight=0.5)  # the loop's one reward computation
    assert [t.outcome_reward for t in out] == [0.9, 0.0, 1.0]  # judged; fallback to the state check; real untouched
    assert (out[1].rewards.state_score, out[1].rewards.judge_score) == (0.0, None)
    assert stage.last_metrics["judge/fallbacks"] == 1.0 and stage.last_metrics["judge/calls"] == 4.0
    # the judge's agreement beside the better constant answer's (one pass, one fail: 0.5)
    assert stage.last_metrics["judge/agreement_with_state"] == 1.0
    assert stage.last_metrics["judge/constant_agreement"] == 0.5


def test_the_synthetic_reward_defaults_to_the_judge_only_when_it_is_served():
    """Issue 53 (3): the constrained 135M judge agreed with the state check less often than a constant answer, yet
    was the default under the paper's name. auto = the paper's judge for a served judge, the state check otherwise;
    and the constant answer's agreement is the baseline every judged run reports."""
    from evolvekit.config import load_config, synthetic_reward
    from evolvekit.questioning.judge import constant_agreement

    assert synthetic_reward(load_config(None, [])) == "state"
    served = ["models.judge.backend=openai", "models.judge.base_url=http://127.0.0.1:9/v1"]
    assert synthetic_reward(load_config(None, served)) == "judge"
    assert synthetic_reward(load_config(None, ["questioning.reward=mix"])) == "mix"
    assert constant_agreement([1.0, 0.0, 0.0, None, 0.2]) == 0.75 and constant_agreement([None]) is None


def test_retries_of_a_greedy_call_sample_and_sampled_calls_keep_their_temperature():
    from evolvekit.llm.base import RETRY_TEMPERATURE, retry_params
    from evolvekit.questioning.judge import LLMJudge

    greedy = SamplingParams(temperature=0.0, seed=3)
    assert retry_params(greedy, 0) is greedy
    assert retry_params(greedy, 1).temperature == RETRY_TEMPERATURE and retry_params(greedy, 1).seed == 4
    assert retry_params(greedy, 2).seed == 5 and retry_params(greedy, 2).max_new_tokens == greedy.max_new_tokens
    sampled = SamplingParams(temperature=0.3)
    assert retry_params(sampled, 2) is sampled
    seen = []

    class Recording:
        def chat(self, convs, params):
            seen.append(params.temperature)
            return [[Completion(text="no score here", token_ids=[1])] for _ in convs]

    report = LLMJudge(Recording(), SamplingParams(temperature=0.0), max_retries=2).score(
        [(_task("t", [], "a"), _tr("a", 0.0))]
    )
    assert seen == [0.0, RETRY_TEMPERATURE, RETRY_TEMPERATURE] and report.fallbacks == 1


@pytest.mark.slow
def test_tasks_synthesize_cli_offline_with_the_embedded_model(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "tasks.jsonl"
    cli = [sys.executable, "-m", "evolvekit.cli.main", "tasks"]
    res = subprocess.run(
        cli
        + [
            "synthesize",
            "--env",
            "bfcl",
            "--n",
            "5",
            "--max-rounds",
            "1",
            "--out",
            str(out),
            "--json",
            "--set",
            "env.family=arith",
            "--set",
            "questioning.explore_runs=4",
            "--set",
            "questioning.explore_steps=4",
            "--set",
            "models.explorer.max_new_tokens=48",
            "--set",
            "models.synthesizer.max_new_tokens=160",
            # the scaffolded synthesizer's own requests, as before issue 96 (the back-translated ones are the
            # quickstart's, tested in test_requests.py and by the quickstart runs; one round of them may keep none)
            "--set",
            "questioning.requests.mode=documented",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    funnel = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"explored", "synthesized", "deduplicated", "infeasible", "kept"} <= set(funnel)
    assert funnel["explored"] == 4 and funnel["kept"] <= funnel["synthesized"]
    assert len((tmp_path / "tasks.explorations.jsonl").read_text().splitlines()) == 4  # every exploration kept
    kept = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(kept) == funnel["kept"] >= 1  # the scaffolded embedded explorer/synthesizer produce usable tasks
    if kept:  # every kept task's reference solution replays
        chk = subprocess.run(cli + ["check", str(out), "--json"], capture_output=True, text=True, timeout=300)
        assert chk.returncode == 0 and json.loads(chk.stdout.strip().splitlines()[-1])["feasible"] == len(kept)


def test_coevolve_forgetting_is_over_iterations_not_within_a_group():
    from evolvekit.questioning.coevolve import SignalTracker

    tracker = SignalTracker(window=5, theta_percent=5.0, n_min=10_000)
    first = [_tr("a", r, group="g0", tid=f"i0-{j}") for j, r in enumerate([1, 0, 0, 1, 0, 0, 0, 0])]
    assert [s for s in tracker.observe(first) if s.kind == "forgetting"] == []  # main raised 6 here
    later = [_tr("a", r, group="g1", tid=f"i1-{j}") for j, r in enumerate([0, 0, 1, 0])]
    assert sorted(s.trajectory_id for s in tracker.observe(later) if s.kind == "forgetting") == ["i1-0", "i1-1", "i1-3"]


def test_coevolve_reads_its_success_threshold():
    from evolvekit.questioning.coevolve import SignalTracker

    strict = SignalTracker(window=5, n_min=10_000, threshold=0.9)
    loose = SignalTracker(window=5, n_min=10_000, threshold=0.5)
    for tracker in (strict, loose):
        tracker.observe([_tr("a", 0.8, tid="x")])
    assert [s.kind for s in strict.observe([_tr("a", 0.6, tid="y")])] == []  # 0.8 was never a success at 0.9
    assert [s.kind for s in loose.observe([_tr("a", 0.4, tid="y")])] == ["forgetting"]


def test_coevolve_config_reaches_the_tracker_and_regenerator():
    from evolvekit.config import load_config

    cfg = load_config(
        None,
        [
            "questioning.enabled=true",
            "coevolve.enabled=true",
            "coevolve.success_threshold=0.8",
            "coevolve.max_contexts=7",
        ],
    )
    assert cfg.coevolve.success_threshold == 0.8 and cfg.coevolve.max_contexts == 7


@pytest.mark.slow
def test_the_built_coevolve_hook_carries_every_setting(tmp_path):
    """Issue 53: dropping the threshold argument in the CoEvolve hook's factory (then build._coevolve_hook, now
    questioning/parts.py: coevolve_hook) passed every CoEvolve test (the wiring test searched the source text). The
    hook the run builds is now checked field by field."""
    from evolvekit.config import load_config
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.questioning.parts import coevolve_hook
    from evolvekit.store.sqlite import RunStore

    tiny = make_tiny_model(tmp_path / "tiny")
    roles = [f"models.{r}.model={tiny}" for r in ("policy", "explorer", "synthesizer")]
    cfg = load_config(
        None,
        [
            "questioning.enabled=true",
            "coevolve.enabled=true",
            "coevolve.success_threshold=0.8",
            "coevolve.max_contexts=7",
            "coevolve.forgetting_window=3",
            "coevolve.rare_theta_percent=7.5",
            "coevolve.rare_min_patterns=11",
            "coevolve.every_iterations=4",
            *roles,
        ],
    )
    store = RunStore(tmp_path / "run.sqlite")
    from evolvekit.env.registry import make_env

    hook = coevolve_hook(cfg, store, None, lambda: make_env(cfg.env))
    store.close()
    t = hook.tracker
    assert (t.threshold, t.window, t.theta, t.n_min) == (0.8, 3, 7.5, 11)
    assert hook.regenerator.max_contexts == 7 and hook.every == 4
    # the synthesized and real tasks reach the regeneration's dedup once the synthesis stage hands them over
    from evolvekit.questioning.supply import HybridTaskSupply

    known = _task("What is 2 plus 5?", [ToolCall(name="add", arguments={"a": 2, "b": 5})], "k-1")
    HybridTaskSupply(None, [], per_iteration=1, lam=1.0, seed=0, coevolve=hook).receive([known])
    assert hook.know.__self__.texts == ["What is 2 plus 5?"]


def test_coevolve_new_tasks_are_committed_with_the_iteration_not_by_the_stage(tmp_path):
    """Issue 55: stages do not write the store. The CoEvolve hook wrote its new tasks and exploration traces in a
    transaction of its own, mid-iteration; now the supply hands them to the iteration's final commit, so a run
    killed before the commit has none of them stored (and makes them again on resume)."""
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.questioning.coevolve import CoEvolveRegenerator, Signal
    from evolvekit.questioning.explore import ExplorationTrace
    from evolvekit.questioning.supply import CoEvolveHook, HybridTaskSupply
    from evolvekit.store.sqlite import RunStore

    class Traced:  # like pipeline._Reexplore: keeps the traces it explored
        def __init__(self):
            self.traces = []

        def __call__(self, kind, goal):
            self.traces.append(ExplorationTrace(exploration_id=f"x-{kind}", sandbox={}))
            return [_task(f"new task for {kind}", [ToolCall(name="add", arguments={"a": 1, "b": 2})], f"n-{kind}")]

    class Tracker:
        def observe(self, trajectories):
            return [Signal("forgetting", "t1", "a")]

    regen = CoEvolveRegenerator(_Scripted(lambda conv: "reflection"), SamplingParams(), Traced(), max_contexts=2)
    assert regen.traced is not None  # the traced callable is recognised once, at construction
    hook = CoEvolveHook(Tracker(), regen, every=1)
    seed_task = _task("an earlier synthesized task", [ToolCall(name="add", arguments={"a": 2, "b": 2})], "s-0")
    supply = HybridTaskSupply([seed_task], [], per_iteration=1, lam=1.0, seed=0, coevolve=hook)
    store = RunStore(tmp_path / "run.sqlite")
    ctx = IterationContext(iteration=3, seed=0, run_dir=tmp_path, store=store)
    metrics = supply.observe(ctx, [_tr("a", 0.0, tid="t1")])
    assert metrics["coevolve/new_tasks"] == 1.0 and [t.task_id for t in supply.synthetic] == ["s-0", "n-forgetting"]
    assert store.task_index() == {}  # nothing written by the stage
    with store.transaction() as c:
        supply.commit(c, store, 3)  # what the loop does in the iteration's final transaction
    assert list(store.task_index()) == ["n-forgetting"]
    rows = store._conn.execute("SELECT exploration_id, iteration FROM explorations").fetchall()
    assert rows == [("x-forgetting", 3)]
    assert regen.take_traces() == [] and hook.unsaved == []  # handed over once
    store.close()


def test_coevolve_reexploration_is_seeded_and_each_call_draws_anew():
    """CoEvolve's re-exploration samples with the seeds it is given: one call's explorer seeds are the same in a new
    re-explorer built with the same params (run.seed pins it), a second call's are its own, and the run's hook seeds
    every role it builds from run.seed."""
    from evolvekit.questioning.curate import Deduplicator
    from evolvekit.questioning.pipeline import Funnel, goal_explorer

    def reexplorer(seeds):
        def answer(conv, params):
            seeds.append(params.seed)
            return _explorer_answer(conv)

        class _Recording(_Scripted):
            def chat(self, conversations, params):
                return [[Completion(text=answer(c, params))] for c in conversations]

        co = ["questioning.enabled=true", "coevolve.enabled=true", "coevolve.reexplore_rounds=1"]
        cfg = load_config(None, _ONE_EXPLORATION + co + ["coevolve.reexplore_steps=2"])
        dedup = Deduplicator(lambda texts: np.ones((len(texts), 4)), 0.8, 0.9)
        return goal_explorer(SynthesisSettings.of(cfg), 1, 2, _Recording(None), SamplingParams(seed=500),
                             _Scripted(lambda c: "x"), SamplingParams(seed=501), lambda: make_env(cfg.env), dedup,
                             Funnel())  # fmt: skip

    first: list = []
    run = reexplorer(first)
    run("forgetting", "practise add")
    n = len(first)
    run("forgetting", "practise add")
    again: list = []
    reexplorer(again)("forgetting", "practise add")
    assert n and None not in first and again == first[:n]  # the same seed, the same draws
    assert not set(first[:n]) & set(first[n:])  # the second re-exploration draws anew
    # that the run's hook seeds every role from run.seed is a behaviour test of the builder (test_build_wiring.py:
    # test_the_coevolve_hook_gets_its_section_dedup_and_seeds), no longer a search of its source text


def test_a_synthesis_dedups_against_the_real_training_tasks_and_the_synthetic_heldout_file(tmp_path):
    """`evolvekit tasks synthesize` and a run's synthesis dedup against the same tasks (known_tasks)."""
    from evolvekit.config import load_config
    from evolvekit.env.registry import env_tasks
    from evolvekit.questioning.pipeline import known_tasks
    from evolvekit.types import Task

    held = Task(task_id="held_1", env_name="bfcl", query="Add 4 and 5.")
    path = tmp_path / "held.jsonl"
    path.write_text(held.model_dump_json() + "\n")
    cfg = load_config(None, ["env.family=arith", f"train.eval_synthetic={path}"])
    train = env_tasks(cfg.env, cfg.env.train_split)
    ids = [t.task_id for t in known_tasks(cfg.env, cfg.train.eval_synthetic)]
    assert train and ids == [t.task_id for t in train] + ["held_1"]
    first = known_tasks(cfg.env, cfg.train.eval_synthetic, train[:1])
    assert [t.task_id for t in first] == [train[0].task_id, "held_1"]
    assert [t.task_id for t in known_tasks(load_config(None, ["env.family=arith"]).env, None, [])] == []


def test_pass_filter_keeps_only_tasks_on_which_the_policy_has_mixed_outcomes():
    """questioning.pass_filter_samples = k: the policy attempts each curated task k times (the run's own probe,
    scored by the real environment's check); a task it always solves or never solves is dropped and counted, one it
    solves in some attempts is kept with its attempts' rewards. Off (k = 0), all three are kept."""
    from evolvekit.agent.parts import pass_probe

    def synth(conv):
        return (
            "Task: What is 2 plus 5?\nSolution: 0\n"
            "Task: Multiply 7 by 3.\nSolution: 1\n"
            "Task: Divide 21 by 7.\nSolution: 2\n"
        )

    attempts = {"multiply": 0}

    def policy_answer(conv):
        if conv[-1].content.startswith("Tool results:"):
            return "Done."
        request = conv[-1].content
        if "2 plus 5" in request:  # always solved
            return format_call(ToolCall(name="add", arguments={"a": 2, "b": 5}))
        if "Multiply 7 by 3" in request:  # solved in every other attempt
            attempts["multiply"] += 1
            if attempts["multiply"] % 2:
                return format_call(ToolCall(name="multiply", arguments={"a": 7, "b": 3}))
            return format_call(ToolCall(name="multiply", arguments={"a": 7, "b": 4}))
        return "It is 3."  # never a call: never solved

    for k, kept in ((0, ["What is 2 plus 5?", "Multiply 7 by 3.", "Divide 21 by 7."]), (4, ["Multiply 7 by 3."])):
        cfg = load_config(None, _ONE_EXPLORATION + [f"questioning.pass_filter_samples={k}"])
        probe = pass_probe(cfg, Engine(_Scripted(policy_answer)), lambda: make_env(cfg.env))  # noqa: B023
        tasks, funnel, _ = _synthesize_once(cfg, synth, probe=probe)
        assert [t.turns[0] for t in tasks] == kept
        assert funnel.unlearnable == (2 if k else 0) and funnel.kept == len(kept)
    assert sorted(tasks[0].metadata["curation"]["policy_rewards"]) == [0.0, 0.0, 1.0, 1.0]
    assert attempts["multiply"] == 4


def test_pass_filter_of_one_attempt_is_refused_in_one_line():
    from evolvekit.config import cross_field_problem
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="pass_filter_samples: 1 attempt cannot show mixed outcomes"):
        load_config(None, ["questioning.pass_filter_samples=1"])
    assert cross_field_problem(load_config(None, ["questioning.pass_filter_samples=6"])) is None


@pytest.mark.slow
def test_run_seed_pins_self_questioning_and_rounds_draw_anew(tmp_path):
    """Two syntheses at one `run.seed` explore and write exactly the same tasks (before, the explorer and synthesizer
    sampled unseeded and a run's seed did not pin its self-questioning); within one, each round draws anew."""
    import json
    import subprocess
    import sys

    def synthesize(name: str, seed: int, rounds: int = 2) -> tuple[list, list]:
        out = tmp_path / f"{name}.jsonl"
        sets = ["env.family=arith_chain", "questioning.explore_runs=1", "questioning.explore_steps=2",
                "models.explorer.max_new_tokens=32", "models.synthesizer.max_new_tokens=48",
                "questioning.requests.mode=documented",  # three syntheses within the test's time limit
                f"run.seed={seed}"]  # fmt: skip
        res = subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "tasks", "synthesize", "--n", "8", "--max-rounds",
             str(rounds), "--out", str(out), "--json", *[a for s in sets for a in ("--set", s)]],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        tasks = [(t["query"], t["reference_solution"]) for t in map(json.loads, out.read_text().splitlines())]
        steps = [t["steps"] for t in map(json.loads, out.with_suffix(".explorations.jsonl").read_text().splitlines())]
        return tasks, steps

    tasks_a, steps_a = synthesize("a", 0)
    tasks_b, steps_b = synthesize("b", 0)
    assert (tasks_a, steps_a) == (tasks_b, steps_b) and len(steps_a) == 2  # 2 rounds × 1 exploration
    assert steps_a[0] != steps_a[1]  # the second round is not the first one again
    _, steps_c = synthesize("c", 1, rounds=1)  # another seed: another first round
    assert steps_c[0] != steps_a[0]


def test_each_round_of_exploration_and_synthesis_draws_from_its_own_seed():
    """Seeded roles: a round after ``done`` explorations samples at the role's seed + 1000 · done (a resumed
    synthesis goes on where it stopped); an unseeded role stays unseeded in every round."""
    from evolvekit.config import DifficultyConfig
    from evolvekit.questioning.explore import Explorer
    from evolvekit.questioning.pipeline import _reseed
    from evolvekit.questioning.synthesize import TaskSynthesizer

    explorer = Explorer(Engine(object()), SamplingParams(temperature=0.7, seed=7))  # type: ignore[arg-type]
    synth = TaskSynthesizer(Engine(object()), SamplingParams(seed=11), DifficultyConfig())  # type: ignore[arg-type]
    _reseed(explorer, synth, 4)
    assert (explorer.params.seed, synth.params.seed) == (4007, 4011)
    assert explorer.params.temperature == 0.7 and explorer.params.stop_on_balanced_json  # only the seed moves
    _reseed(explorer, synth, 0)
    assert (explorer.params.seed, synth.params.seed) == (7, 11)  # not cumulative: always from the role's seed
    free = Explorer(Engine(object()), SamplingParams())  # type: ignore[arg-type]
    free_synth = TaskSynthesizer(Engine(object()), SamplingParams(), DifficultyConfig())  # type: ignore[arg-type]
    _reseed(free, free_synth, 3)
    assert free.params.seed is None and free_synth.params.seed is None


def test_the_synthetic_reward_stage_by_hand():
    """SyntheticRewardRollouts (§3.4) with a recording inner stage and judge: the inner stage gets the iteration's
    context and tasks; only synthetic, non-failed, non-extractor trajectories are judged (an Evolving-RL solver is);
    the judge runs only in judge and mix modes; every judge metric is reported under its name; the stored state
    score is the environment's outcome and the judge score the judge's; the mean state score is a metric."""
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.questioning.judge import JudgeReport
    from evolvekit.questioning.reward import SyntheticRewardRollouts
    from evolvekit.types import EvolvingRole, TaskSource, TrajectoryFlags

    syn = _task("Add 2 and 5.", [ToolCall(name="add", arguments={"a": 2, "b": 5})], "s1").model_copy(
        update={"source": TaskSource.SYNTHETIC}
    )
    real = _task("Real one.", [], "r1")
    ctx = IterationContext(3, 0, Path("."), None)
    seen: list = []

    def role(name):
        return EvolvingRole(role=name, source=0)

    class Inner:
        last_metrics = {"rollout/inner": 7.0}

        def rollout(self, c, tasks):
            seen.append((c, list(tasks)))
            return [
                _tr("s1", 1.0, tid="pass"),
                _tr("s1", 0.0, tid="fail"),
                _tr("r1", 1.0, tid="real"),
                _tr("s1", 0.0, tid="crashed").model_copy(update={"flags": TrajectoryFlags(failed=True)}),
                _tr("s1", 1.0, tid="extractor").model_copy(update={"evolving": role("extractor")}),
                _tr("s1", 1.0, tid="solver").model_copy(update={"evolving": role("solver")}),
            ]

    class Judge:
        def __init__(self):
            self.asked: list = []

        def score(self, pairs):
            self.asked.append([t.trajectory_id for _, t in pairs])
            return JudgeReport(scores=[0.9, 0.8, 0.2], calls=5, fallbacks=1, prompt_tokens=40, completion_tokens=6)

    stage = SyntheticRewardRollouts(Inner(), "mix", Judge())
    assert stage.last_metrics == {}
    out = stage.rollout(ctx, [syn, real])
    assert seen == [(ctx, [syn, real])]
    assert stage.judge.asked == [["pass", "fail", "solver"]]
    scores = {t.trajectory_id: (t.rewards.state_score, t.rewards.judge_score) for t in out}
    assert scores == {
        "pass": (1.0, 0.9), "fail": (0.0, 0.8), "solver": (1.0, 0.2),
        "real": (None, None), "crashed": (None, None), "extractor": (None, None),
    }  # fmt: skip
    assert stage.last_metrics == {
        "rollout/inner": 7.0,
        "judge/calls": 5.0,
        "judge/fallbacks": 1.0,
        "judge/fallback_rate": pytest.approx(1 / 3),
        "judge/prompt_tokens": 40.0,
        "judge/completion_tokens": 6.0,
        "judge/agreement_with_state": pytest.approx(1 / 3),  # pass/pass agree; fail/pass and pass/fail do not
        "judge/constant_agreement": pytest.approx(2 / 3),  # two of three pass
        "rollout/synthetic_state_score": pytest.approx(2 / 3),
    }
    # the state check alone, or no judge: nothing is judged, the state score is still recorded
    for mode, judge in (("state", Judge()), ("judge", None)):
        stage = SyntheticRewardRollouts(Inner(), mode, judge)
        out = stage.rollout(ctx, [syn, real])
        assert judge is None or judge.asked == []
        assert {t.trajectory_id: t.rewards.judge_score for t in out if t.rewards.state_score is not None} == {
            "pass": None, "fail": None, "solver": None,
        }  # fmt: skip
        assert stage.last_metrics == {"rollout/inner": 7.0, "rollout/synthetic_state_score": pytest.approx(2 / 3)}
    # nothing synthetic: no metric of its own, and the judge is not asked
    judge = Judge()
    stage = SyntheticRewardRollouts(Inner(), "judge", judge)
    stage.rollout(ctx, [real.model_copy(update={"task_id": "s1"})])
    assert judge.asked == [] and stage.last_metrics == {"rollout/inner": 7.0}
