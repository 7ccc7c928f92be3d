"""Task families: disjoint splits, restricted tools, worked examples, official scoring."""

import pytest

from evolvekit.agent.parser import format_call, parse_action
from evolvekit.config import EnvConfig
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
