"""attributing/attributor.py's free-text path (§5.1) against a scripted attributor (issue 53: its mutation look):
chunks, retries of unparseable answers, failed calls, neutralisation, cost accounting and the metrics it reports."""

from __future__ import annotations

import logging

import pytest

from evolvekit.attributing.attributor import AttributionCost, AttributionResult, StepAttributor
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.types import Step, StepLabel, Trajectory

G, B = StepLabel.GOOD, StepLabel.BAD


def test_metrics_by_hand():
    result = AttributionResult(
        labels=[[G, B], [G], None, []],
        cost=AttributionCost(calls=3, retries=1, prompt_tokens=10, completion_tokens=5, seconds=0.5),
        failures=1,
    )
    assert result.metrics() == {
        "attribution/good_ratio": pytest.approx(2 / 3),
        "attribution/parse_failure_rate": 0.25,
        "attribution/neutralised": 1.0,
        "attribution/calls": 3.0,
        "attribution/retries": 1.0,
        "attribution/prompt_tokens": 10.0,
        "attribution/completion_tokens": 5.0,
        "attribution/seconds": 0.5,
    }
    empty = AttributionResult(labels=[], failures=0).metrics("x/")
    assert empty["x/good_ratio"] == 0.0 and empty["x/parse_failure_rate"] == 0.0
    one_failed = AttributionResult(labels=[None], failures=1).metrics()
    assert one_failed["attribution/parse_failure_rate"] == 1.0 and one_failed["attribution/good_ratio"] == 0.0


class Scripted:
    """Answers per trajectory id from a script of replies (one per call of that trajectory); "raise" fails the
    whole chat call."""

    name = "scripted"

    def __init__(self, script: dict[str, list[str]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.chats: list[tuple[list[str], float]] = []

    def chat(self, conversations, params):
        ids = [c[1].content.split("TRAJ=")[1].split()[0] for c in conversations]
        self.chats.append((ids, params.temperature))
        replies = [self.script[i].pop(0) for i in ids]
        if "raise" in replies:
            raise RuntimeError("boom")
        return [[Completion(text=r, token_ids=[1, 2, 3], prompt_token_ids=[9] * 7)] for r in replies]


def _traj(tid: str, steps: int) -> Trajectory:
    return Trajectory(
        trajectory_id=tid,
        task_id=f"TRAJ={tid} ",
        steps=[Step(index=k, action_text=f"a{k}") for k in range(steps)],
        outcome_reward=0.0,
    )


def test_chunks_retries_failed_calls_neutralisation_and_cost(caplog):
    llm = Scripted(
        {
            "t1": ["(lost: its chunk's call failed)", "Step 0: GOOD\nStep 1: BAD"],
            "t2": ["raise", "Step 0: bad"],  # its chunk's call fails once: retried with the unparseable ones
            "t3": ["no verdict", "still none", "Step 0: GOOD"],  # parsed at the last retry
            "t4": ["?", "?", "?"],  # never parseable: neutralised
        }
    )
    trajs = [_traj("t3", 1), _traj("t4", 1), _traj("empty", 0), _traj("t1", 2), _traj("t2", 1)]
    attributor = StepAttributor(llm, SamplingParams(temperature=0.0, seed=1), max_retries=2, concurrency=2)
    with caplog.at_level(logging.WARNING, logger="evolvekit.attributing.attributor"):
        result = attributor.attribute(trajs, {})
    assert result.labels == [[G], None, [], [G, B], [B]]
    assert [ids for ids, _ in llm.chats] == [
        ["t3", "t4"],  # attempt 0, chunk 1: both unparseable
        ["t1", "t2"],  # chunk 2 fails as a whole (t2's "raise"): kept with chunk 1's for the retry
        ["t3", "t4"],  # attempt 1
        ["t1", "t2"],
        ["t3", "t4"],  # attempt 2: t3 parses, t4 never does
    ]
    assert result.failures == 1 and result.cost.retries == 4 + 2  # pending at attempts 1 and 2
    assert result.cost.calls == 8  # 5 chat calls of 2; the failed one's two are not counted
    assert (result.cost.prompt_tokens, result.cost.completion_tokens) == (7 * 8, 3 * 8)
    assert [r.getMessage() for r in caplog.records] == ["attributor call failed: boom"]
    assert [temp for _, temp in llm.chats][:2] == [0.0, 0.0] and all(t > 0 for _, t in llm.chats[2:])  # warm retries
    assert result.metrics()["attribution/neutralised"] == 1.0 and result.cost.seconds > 0


def test_a_failed_call_does_not_skip_the_chunks_after_it():
    """The first chunk's call fails: the next chunk is still asked in the same attempt, and the failed one again in
    the next (``continue``, not ``break``: nothing is left unlabelled)."""
    llm = Scripted({"a": ["raise", "Step 0: GOOD"], "b": ["Step 0: BAD"]})
    attributor = StepAttributor(llm, SamplingParams(temperature=0.0), max_retries=1, concurrency=1)
    result = attributor.attribute([_traj("a", 1), _traj("b", 1)], {})
    assert result.labels == [[G], [B]] and result.failures == 0
    assert [ids for ids, _ in llm.chats] == [["a"], ["b"], ["a"]]


class _Labeler:
    """A stand-in for the forced-choice labeler (attributing/constrained.py): GOOD for every step, and the prompt
    and completion token counts 7 + steps and steps."""

    def __init__(self) -> None:
        self.asked: list[tuple[list, int]] = []

    def label(self, conv, n):
        self.asked.append((conv, n))
        return [G] * n, 7 + n, n


def _progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "evolvekit.attributing.attributor"]


def test_the_constrained_path_asks_once_per_trajectory_with_its_task_and_counts_its_cost(caplog):
    from evolvekit.types import Task

    attributor = StepAttributor(Scripted({}), SamplingParams(temperature=0.0))
    attributor.labeler = _Labeler()  # type: ignore[assignment]
    trajs = [_traj("e", 0), _traj("a", 2), _traj("b", 1)]  # no steps first: not asked, and the rest still are
    trajs[2].outcome_reward = None
    task = Task(task_id="TRAJ=a ", env_name="x", query="add the two numbers")
    with caplog.at_level(logging.INFO, logger="evolvekit.attributing.attributor"):
        result = attributor.attribute(trajs, {"TRAJ=a ": task})
    assert result.labels == [[], [G, G], [G]] and result.failures == 0
    asked = attributor.labeler.asked  # type: ignore[attr-defined]
    assert [n for _, n in asked] == [2, 1]
    assert "add the two numbers" in asked[0][0][1].content and "add the two numbers" not in asked[1][0][1].content
    assert "OVERALL PERFORMANCE SCORE 0\n" in asked[1][0][1].content  # no outcome recorded: scored 0, not 1
    assert (result.cost.calls, result.cost.prompt_tokens, result.cost.completion_tokens) == (2, 9 + 8, 3)
    assert 0 < result.cost.seconds < 60
    lines = _progress_lines(caplog)
    assert lines[0] == "step attribution: 2 to do" and lines[-1].startswith("step attribution: 2 done in ")


def test_the_free_path_logs_its_progress_and_times_itself(caplog):
    llm = Scripted({"a": ["Step 0: GOOD"], "b": ["Step 0: BAD"]})
    attributor = StepAttributor(llm, SamplingParams(temperature=0.0))
    with caplog.at_level(logging.INFO, logger="evolvekit.attributing.attributor"):
        result = attributor.attribute([_traj("a", 1), _traj("e", 0), _traj("b", 1)], {})
    assert result.labels == [[G], [], [B]] and 0 < result.cost.seconds < 60
    lines = _progress_lines(caplog)
    assert lines[0] == "step attribution: 2 to do" and lines[-1].startswith("step attribution: 2 done in ")


def test_default_retries_and_chunks_and_the_labelers_settings(monkeypatch):
    """Two retries and chunks of four by default; the forced-choice labeler gets the attributor's temperature and
    seed (0 when none is set)."""
    llm = Scripted({t: ["?"] * 3 for t in "abcde"})
    result = StepAttributor(llm, SamplingParams(temperature=0.0)).attribute([_traj(t, 1) for t in "abcde"], {})
    assert [len(ids) for ids, _ in llm.chats] == [4, 1] * 3 and result.failures == 5
    made = []
    monkeypatch.setattr(
        "evolvekit.attributing.constrained.ConstrainedLabeler", lambda *args: made.append(args) or _Labeler()
    )
    StepAttributor(llm, SamplingParams(temperature=0.3), constrained=True)
    StepAttributor(llm, SamplingParams(temperature=0.0, seed=5), constrained=True)
    assert made == [(llm, 0.3, 0), (llm, 0.0, 5)]


def test_a_long_observation_is_cut_in_the_attributors_prompt():
    """A 6,000-character observation is cut to its first and last 750 characters (attributing/prompts.py:
    MAX_FIELD_CHARS 1500), so one trajectory fits the attributor's context; a short one is kept whole."""
    from evolvekit.attributing.prompts import user_prompt

    long = "A" * 3000 + "B" * 3000
    traj = Trajectory(
        trajectory_id="t", task_id="task", outcome_reward=0.0,
        steps=[Step(index=0, action_text="look", observation=long), Step(index=1, action_text="go", observation="ok")],
    )  # fmt: skip
    prompt = user_prompt(None, traj, 0.0)
    assert "A" * 750 + "\n[...]\n" + "B" * 750 in prompt
    assert "A" * 751 not in prompt and "B" * 751 not in prompt and "ok" in prompt


def test_the_attributors_overall_score_is_the_outcome_before_shaping():
    """Eq. 19, Figs. 8-9: a failed episode whose shaped reward is 0.2 (a format bonus) is shown as scoring 0, so it is
    judged under the rules for a failure; a success keeps its 1."""
    from evolvekit.attributing.attributor import _conversation
    from evolvekit.types import RewardParts

    failed = _traj("f", 1).model_copy(update={"outcome_reward": 0.2, "rewards": RewardParts(outcome=0.0, format=1.0)})
    passed = _traj("p", 1).model_copy(update={"outcome_reward": 1.2, "rewards": RewardParts(outcome=1.0, format=1.0)})
    assert "OVERALL PERFORMANCE SCORE 0\n" in _conversation(None, failed)[1].content
    assert "OVERALL PERFORMANCE SCORE 1\n" in _conversation(None, passed)[1].content
    unshaped = _traj("u", 1).model_copy(update={"outcome_reward": 1.0})  # no shaping: the outcome itself
    assert "OVERALL PERFORMANCE SCORE 1\n" in _conversation(None, unshaped)[1].content


def test_coevolves_reflection_shows_the_outcome_before_shaping():
    from evolvekit.questioning.coevolve import reflection_prompt
    from evolvekit.types import RewardParts

    failed = _traj("f", 1).model_copy(update={"outcome_reward": 0.2, "rewards": RewardParts(outcome=0.0, format=1.0)})
    assert "\nScore: 0\n" in reflection_prompt("failure", None, failed)[1].content
