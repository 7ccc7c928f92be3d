"""The §3.4 judge (questioning/judge.py): its prompt, the score parser's range, the free judge's batches, retries and
token counts, the constrained judge's forced lead, seed, calibration prompt and prior, and the agreement measures
at their threshold. Stand-ins for the LLM and the choice scorer; no model."""

from __future__ import annotations

import random

import pytest

import evolvekit.questioning.judge as judge_mod
from evolvekit.env.action_text import format_call
from evolvekit.llm.base import RETRY_TEMPERATURE, Completion, SamplingParams
from evolvekit.questioning.judge import (
    SCORE_LEVELS,
    ConstrainedJudge,
    LLMJudge,
    agreement_with_state,
    constant_agreement,
    judge_prompt,
    parse_judge_score,
)
from evolvekit.types import Step, Task, TaskSource, ToolCall, Trajectory

ADD, MUL = ToolCall(name="add", arguments={"a": 1, "b": 2}), ToolCall(name="multiply", arguments={"a": 3, "b": 4})
TASK = Task(
    task_id="s", env_name="x", query=["Add 1 and 2.", "Now 3 times 4."], source=TaskSource.SYNTHETIC,
    reference_solution=[[ADD], [MUL]],
)  # fmt: skip


def test_the_prompt_shows_every_turn_every_reference_call_and_each_step_cut_at_400_characters():
    long = "a" * 500
    traj = Trajectory(
        task_id="s", steps=[Step(index=0, action_text=long, observation="b" * 500), Step(index=1, action_text="7")]
    )
    system, user = judge_prompt(TASK, traj)
    assert system.role == "system" and system.content == judge_mod.JUDGE_SYSTEM
    step0 = f"Step 0: {'a' * 400}\nResult: {'b' * 400}"
    assert user.content == (
        f"TASK:\nAdd 1 and 2.\nNow 3 times 4.\n\nREFERENCE SOLUTION:\n{format_call(ADD)}\n{format_call(MUL)}\n\n"
        f"AGENT TRAJECTORY:\n{step0}\nStep 1: 7\nResult: "
    )
    bare = judge_prompt(Task(task_id="n", env_name="x", query="Q"), Trajectory(task_id="n"))[1].content
    assert bare == "TASK:\nQ\n\nREFERENCE SOLUTION:\n(none)\n\nAGENT TRAJECTORY:\n(no steps)"


def test_the_score_parser_keeps_exactly_the_closed_unit_interval():
    assert parse_judge_score("Score: 0") == 0.0 and parse_judge_score("Score: 1") == 1.0
    assert parse_judge_score("Score: 1.5") is None and parse_judge_score("Score: 1.0001") is None
    assert parse_judge_score("Score: .5") == 0.5 and parse_judge_score("") is None


class _Chat:
    name = "chat"

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def chat(self, convs, params):
        self.calls.append((len(convs), params.temperature))
        out = []
        for _ in convs:
            text, prompt, completion = self.replies.pop(0)
            out.append([Completion(text=text, token_ids=[0] * completion, prompt_token_ids=[0] * prompt)])
        return out


def _pairs(n):
    return [(TASK, Trajectory(task_id="s")) for _ in range(n)]


def test_the_free_judge_batches_sums_tokens_over_calls_and_stops_when_every_answer_parsed():
    llm = _Chat([("Score: 0.9", 10, 3), ("Score: 0.1", 20, 4), ("huh", 30, 5), ("Score: 0.7", 40, 6)])
    judge = LLMJudge(llm, SamplingParams(temperature=0.0), batch=2)
    assert (judge.max_retries, LLMJudge(llm, SamplingParams()).batch) == (2, 8)  # the defaults
    report = judge.score(_pairs(3))
    assert report is not None and report.scores == [0.9, 0.1, 0.7] and report.fallbacks == 0
    # two batches, then the one retry (sampled at the retry temperature), then done
    assert llm.calls == [(2, 0.0), (1, 0.0), (1, RETRY_TEMPERATURE)]
    assert (report.calls, report.prompt_tokens, report.completion_tokens) == (4, 100, 18)
    one = LLMJudge(_Chat([("Score: 1", 5, 1)]), SamplingParams()).score(_pairs(1))
    assert one is not None and one.scores == [1.0] and one.calls == 1  # parsed at once: no retry, a report


class _Tok:
    """Token ids are the characters' code points; the chat template joins role and content."""

    name = "tok"

    def encode(self, text):
        return [ord(c) for c in text]

    def apply_chat_template(self, messages):
        return self.encode("|".join(f"{m.role}:{m.content}" for m in messages))


class _Scorer:
    def __init__(self, llm):
        self.llm, self.priors, self.picks, self.prompts = llm, {}, [], []

    def option_logprobs(self, prompt, options):
        self.prompts.append(list(prompt))
        return [-float(i) for i in range(len(options))]

    def pick(self, prompt, options, temperature, rng, prior=None):
        self.picks.append((list(prompt), options, temperature, rng, prior))
        return len(self.picks) % len(options), []


@pytest.fixture
def scorer(monkeypatch):
    made: list[_Scorer] = []

    def make(llm):
        made.append(_Scorer(llm))
        return made[-1]

    monkeypatch.setattr(judge_mod, "ChoiceScorer", make)
    return made


def test_the_constrained_judge_forces_the_lead_and_calibrates_on_a_content_free_task(scorer):
    tok = _Tok()
    judge = ConstrainedJudge(tok, SamplingParams(temperature=0.0, seed=5))
    (sc,) = scorer
    lead = tok.encode("Score:")
    assert judge.lead == lead and judge.options == [tok.encode(f" {v:.1f}") for v in SCORE_LEVELS]
    blank = Task(task_id="other", env_name="y", query="N/A")
    assert sc.prompts == [tok.apply_chat_template(judge_prompt(blank, Trajectory(task_id="z"))) + lead]
    assert judge.prior == [-float(i) for i in range(len(SCORE_LEVELS))]
    assert judge.rng.random() == random.Random(5).random()
    report = judge.score(_pairs(2))
    assert report.scores == [SCORE_LEVELS[1], SCORE_LEVELS[2]] and report.calls == 2
    prompt = tok.apply_chat_template(judge_prompt(*_pairs(1)[0])) + lead
    assert report.prompt_tokens == 2 * len(prompt)
    assert [p[0] for p in sc.picks] == [prompt, prompt]
    assert all(p[1] == judge.options and p[2] == 0.0 and p[3] is judge.rng and p[4] == judge.prior for p in sc.picks)


def test_without_calibration_there_is_no_prior_and_an_unseeded_judge_draws_from_seed_0(scorer):
    judge = ConstrainedJudge(_Tok(), SamplingParams(temperature=1.0, seed=None), calibrate=False)
    assert judge.prior is None and scorer[0].prompts == []
    assert judge.rng.random() == random.Random(0).random()
    judge.score(_pairs(1))
    assert scorer[0].picks[0][4] is None


def test_the_agreement_measures_count_the_threshold_itself_as_a_pass():
    assert constant_agreement([0.5, 0.5, 0.0]) == pytest.approx(2 / 3)
    assert constant_agreement([0.5, 0.0, 0.0, 0.0], threshold=0.5) == 0.75
    assert agreement_with_state([0.5, 0.5], [1.0, 0.4]) == 0.5  # a judge at the threshold passes
    assert agreement_with_state([0.5], [1.0]) == 1.0 and agreement_with_state([1.0], [0.5]) == 1.0
    assert agreement_with_state([1.0, 0.0], [0.5, 0.5]) == 0.5  # a state at the threshold passes
    assert agreement_with_state([None, 0.3], [1.0, None]) is None
