"""Task families: disjoint splits, restricted tools, worked examples, official scoring."""

import pytest

from evolvekit.config import EnvConfig
from evolvekit.env.action_text import format_call, parse_action
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.env.bfcl.families import get_family
from evolvekit.env.registry import env_tasks
from evolvekit.errors import EnvError


def test_splits_are_disjoint_and_deterministic():
    fam = get_family("arith")
    train, test = fam.tasks("train", 200), fam.tasks("test", 200)
    assert len(train) == len(test) == 200
    assert not {t.query for t in train} & {t.query for t in test}
    assert not {t.query for t in test} & {d.request for d in fam.demonstrations}
    assert [t.query for t in fam.tasks("train", 200)] == [t.query for t in train]
    with pytest.raises(EnvError, match="no split"):
        fam.tasks("bogus", 3)
    with pytest.raises(EnvError, match="unknown task family"):
        get_family("nope")


def test_family_episode_restricts_tools_shows_examples_and_scores():
    task = get_family("arith").tasks("test", 1)[0]
    env = BfclEnv()
    reset = env.reset(task)
    assert sorted(t.name for t in reset.tools) == ["add", "divide", "multiply", "subtract"]
    assert [m.role for m in reset.examples[:4]] == ["user", "assistant", "user", "assistant"]
    assert parse_action(reset.examples[1].content).tool_calls[0].name == "add"
    out = env.step(parse_action('<tool_call>{"name": "power", "arguments": {"base": 2, "exponent": 3}}</tool_call>'))
    assert "unknown tool 'power'" in out.observation  # a MathAPI tool outside the family is not callable
    env.step(parse_action(format_call(task.reference_solution[0][0])))
    env.step(parse_action("The answer is above."))
    assert env.evaluate().score == 1.0
    env.reset(task)
    wrong = task.reference_solution[0][0].model_copy(update={"arguments": {"a": 1, "b": 1}})
    env.step(parse_action(format_call(wrong)))
    env.step(parse_action("done"))
    assert env.evaluate().score == 0.0


def test_env_tasks_uses_the_family_or_bfcl_splits():
    assert len(env_tasks(EnvConfig(family="arith", family_tasks=7), "train")) == 7
    real = env_tasks(EnvConfig(backends=["GorillaFileSystem"]), "train")
    assert real and all(t.metadata["involved_classes"] == ["GorillaFileSystem"] for t in real)


@pytest.mark.parametrize("name", ["arith", "arith_wide", "fs_one"])
def test_every_family_task_replays_its_reference_with_the_official_checker(name):
    fam = get_family(name)
    tasks = fam.tasks("test", 30)
    assert not {t.query for t in tasks} & {t.query for t in fam.tasks("train", 200)}
    used = set()
    for task in tasks:
        env = BfclEnv()
        reset = env.reset(task)
        assert sorted(t.name for t in reset.tools) == sorted(fam.tools)
        for call in task.reference_solution[0]:
            used.add(call.name)
            env.step(parse_action(format_call(call)))
        env.step(parse_action("Done."))
        assert env.evaluate().score == 1.0, task.query
    if name == "arith_wide":
        assert {"power", "absolute_value", "max_value"} <= used  # the wider step really uses the new tools


def test_curriculum_widens_the_family_as_success_grows():
    from evolvekit.orchestrator.curriculum import CurriculumTaskSupply, curriculum_levels
    from evolvekit.orchestrator.stages import IterationContext

    # promotion needs `window` iterations at the level with mean success >= threshold; never back, capped
    assert curriculum_levels([0.5, 0.8, 0.9, 0.2, 0.9], 0.7, 2, 2) == [0, 0, 0, 1, 1, 1]
    assert curriculum_levels([0.9, 0.9, 0.9, 0.9, 0.9], 0.7, 2, 3) == [0, 0, 1, 1, 2, 2]
    assert curriculum_levels([], 0.7, 2, 2) == [0]

    class Store:
        def __init__(self, success):
            self.m = {i: {"rollout/success_rate": s} for i, s in enumerate(success)}

        def metrics(self):
            return self.m

    fams = ["arith", "arith_wide"]
    supply = CurriculumTaskSupply(fams, [get_family(f).tasks("train", 20) for f in fams], 4, 0, 0.7, 2)
    early = supply.tasks(IterationContext(iteration=1, seed=0, run_dir=None, store=Store([0.9])))
    late = supply.tasks(IterationContext(iteration=2, seed=0, run_dir=None, store=Store([0.9, 0.8])))
    assert {t.metadata["family"] for t in early} == {"arith"} and {t.metadata["family"] for t in late} == {"arith_wide"}
    assert supply.observe(IterationContext(iteration=2, seed=0, run_dir=None, store=Store([0.9, 0.8])), []) == {
        "curriculum/level": 1.0
    }


def test_curriculum_config_builds_the_widening_supply():
    from evolvekit.config import load_config
    from evolvekit.orchestrator.build import task_supply
    from evolvekit.orchestrator.curriculum import CurriculumTaskSupply

    cfg = load_config(None, ["env.family=arith", "env.curriculum=[arith, arith_wide]", "env.family_tasks=10"])
    supply = task_supply(cfg, None, [], None, None)
    assert isinstance(supply, CurriculumTaskSupply) and supply.families == ["arith", "arith_wide"]
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="curriculum"):  # a rule of the config tree: refused at load time
        load_config(None, ["env.family=arith", "env.curriculum=[arith, arith_wide]", "questioning.enabled=true"])


@pytest.mark.parametrize("name", ["arith_chain", "fs_chain"])
def test_multi_step_families_need_both_dependent_calls(name):
    """Every task needs two calls: its reference passes the official checker, either call alone fails; the splits
    share no request, and the worked examples are multi-call chat turns."""
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.env.bfcl.families import get_family

    fam = get_family(name)
    train, test = fam.tasks("train", 40), fam.tasks("test", 40)
    assert not {t.query for t in train} & {t.query for t in test}
    assert {c.name for t in train for c in t.reference_solution[0]} == {
        c.name for t in test for c in t.reference_solution[0]
    }
    for task in test[:16]:
        ref = task.reference_solution[0]
        assert len(ref) == 2
        outcomes = []
        for calls in (ref, ref[:1], ref[1:]):
            env = BfclEnv()
            env.reset(task)
            for c in calls:
                env.step(Action(tool_calls=[c]))
            env.step(Action(text="done"))
            outcomes.append(env.evaluate().passed)
        assert outcomes == [True, False, False], task.query
    msgs = fam.demonstrations[0].messages(lambda c: c.name)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]


def _two_turns_pass(task, first, second) -> bool:
    """Whether the official checker passes a two-turn episode of ``task`` that makes ``first`` in the first turn and
    ``second`` in the second (None: no call in that turn)."""
    from evolvekit.env.base import Action
    from evolvekit.env.bfcl.env import BfclEnv

    env = BfclEnv()
    assert env.reset(task).num_turns == 2
    for call, turn in ((first, 0), (second, 1)):
        if call is not None:
            env.step(Action(tool_calls=[call]))
        step = env.step(Action(text="done"))
        if turn == 0:
            assert step.observation == task.turns[1]  # the next user turn
    return env.evaluate().passed


@pytest.mark.parametrize("name", ["arith_turns", "add_turns", "arith_turns_named"])
def test_two_turn_family_needs_the_first_result_in_the_second_turn(name):
    """arith_turns, add_turns and arith_turns_named: two user turns, one call each; the reference passes the
    official checker, a second turn that does not use the first call's result fails, and the worked examples are
    two-turn chat transcripts."""
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.types import ToolCall

    fam = get_family(name)
    train, test = fam.tasks("train", 40), fam.tasks("test", 40)
    assert not {tuple(t.turns) for t in train} & {tuple(t.turns) for t in test}
    for task in test[:12]:
        assert len(task.turns) == 2 and [len(r) for r in task.reference_solution] == [1, 1]
        (add,), (mul,) = task.reference_solution
        assert mul.arguments["a"] == add.arguments["a"] + add.arguments["b"]
        assert str(mul.arguments["a"]) not in task.turns[1]  # the sum is only in the first call's result
        wrong = ToolCall(name=mul.name, arguments={"a": add.arguments["a"], "b": mul.arguments["b"]})
        outcomes = [_two_turns_pass(task, add, second) for second in (mul, wrong, None)]
        assert outcomes == [True, False, False], task.turns
    msgs = fam.demonstrations[0].messages(lambda c: c.name)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"] * 2
    assert msgs[4].content == fam.demonstrations[0].next_turns[0].request
    if name == "arith_turns_named":  # every turn names the tool its call needs
        assert all(c.name in turn for t in test for turn, (c,) in zip(t.turns, t.reference_solution))


def test_file_system_turns_need_the_first_turns_cd():
    """fs_turns: two user turns, one call each; the reference passes the official checker, and the second turn's
    creation without the first turn's cd (it lands in the wrong folder), or the cd alone, fails."""
    from evolvekit.env.bfcl.families import get_family

    fam = get_family("fs_turns")
    train, test = fam.tasks("train", 40), fam.tasks("test", 40)
    assert not {tuple(t.turns) for t in train} & {tuple(t.turns) for t in test}
    assert {c.name for t in test for turn in t.reference_solution for c in turn} == {"cd", "touch", "mkdir"}
    for task in test[:12]:
        (cd,), (make,) = task.reference_solution
        assert cd.name == "cd" and cd.arguments["folder"] in task.turns[0] and len(task.turns) == 2
        outcomes = [_two_turns_pass(task, first, second) for first, second in ((cd, make), (None, make), (cd, None))]
        assert outcomes == [True, False, False], task.turns
    msgs = fam.demonstrations[0].messages(lambda c: c.name)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"] * 2


def test_fs_one_scores_the_end_state_of_its_one_call():
    """issue 76.5's second environment: each of the four kinds of call is needed (the reference scores 1), and the
    same tool with another argument, or no call, leaves another end state and scores 0."""
    fam = get_family("fs_one")
    tasks = fam.tasks("test", 48)
    kinds = {
        (t.reference_solution[0][0].name, "." in str(t.reference_solution[0][0].arguments.get("destination", ".")))
        for t in tasks
    }
    assert kinds == {("touch", True), ("mkdir", True), ("mv", True), ("mv", False)}
    for task in tasks[:8]:
        call = task.reference_solution[0][0]
        wrong = call.model_copy(update={"arguments": {k: "other_" + str(v) for k, v in call.arguments.items()}})
        for calls, score in (([call], 1.0), ([wrong], 0.0), ([], 0.0)):
            env = BfclEnv()
            env.reset(task)
            for c in calls:
                env.step(parse_action(format_call(c)))
            env.step(parse_action("Done."))
            assert env.evaluate().score == score, (task.query, calls)
