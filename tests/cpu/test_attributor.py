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
