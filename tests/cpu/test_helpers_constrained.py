"""Helpers that always answer at the embedded scale: the constrained judge, constrained and grounded experience
extraction, and the per-role source defaults."""

from __future__ import annotations

import pytest

from evolvekit.config import config_from_dict, helper_sources
from evolvekit.engine.base import Engine
from evolvekit.errors import ConfigError
from evolvekit.llm.base import SamplingParams
from evolvekit.navigating.extract import ExperienceExtractor, grounded_experience, parse_experiences
from evolvekit.questioning.judge import SCORE_LEVELS, ConstrainedJudge, agreement_with_state
from evolvekit.types import RewardParts, Step, Task, TaskSource, ToolCall, Trajectory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.tiny import make_tiny_model

    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("m") / "m")), device="cpu")


# a task the run synthesized: its reference is the run's own, so extraction may read it (issue 51)
TASK = Task(
    task_id="t1",
    env_name="bfcl",
    query="What is 12 plus 30?",
    reference_solution=[[ToolCall(name="add", arguments={"a": 12, "b": 30})]],
    source=TaskSource.SYNTHETIC,
)


def _traj(calls: list[tuple[ToolCall, bool, str]], answer: str, reward: float, tid: str) -> Trajectory:
    steps = [
        Step(index=i, action_text="x", tool_calls=[c], observation=obs, calls=[{"name": c.name, "ok": ok}])
        for i, (c, ok, obs) in enumerate(calls)
    ]
    steps.append(Step(index=len(steps), action_text=answer))
    return Trajectory(trajectory_id=tid, task_id="t1", group_id="g", steps=steps, outcome_reward=reward)


WIN = _traj([(ToolCall(name="add", arguments={"a": 12, "b": 30}), True, '[add] {"result": 42}')], "42", 1.0, "w")
LOSE = _traj(
    [(ToolCall(name="multiply", arguments={"a": 12, "b": 30}), True, '[multiply] {"result": 360}')], "360", 0.0, "l"
)
GARBAGE = _traj(
    [(ToolCall(name="add", arguments={"a": "}}{{", "b": [None]}), False, "Error: ''\"\x00")],
    "Score: banana " * 30,
    0.0,
    "g",
)


def test_constrained_judge_scores_garbage_prone_inputs(tiny):
    judge = ConstrainedJudge(tiny, SamplingParams(temperature=0.0))
    empty = Trajectory(task_id="t1", steps=[])
    report = judge.score([(TASK, WIN), (TASK, GARBAGE), (TASK, empty)])
    assert report.fallbacks == 0 and report.calls == 3
    assert report.prompt_tokens > 3 * 50 and report.completion_tokens == 0  # token counts for every role (issue 54)
    assert all(s in SCORE_LEVELS for s in report.scores)
    # the level is the model's: it is the option with the highest full-sequence log-probability
    prompt = (
        tiny.apply_chat_template(
            __import__("evolvekit.questioning.judge", fromlist=["judge_prompt"]).judge_prompt(TASK, WIN)
        )
        + judge.lead
    )
    _, scores = judge.scorer.pick(prompt, judge.options, 0.0, judge.rng, judge.prior)  # calibrated: log p − prior
    assert judge.prior is not None and len(judge.prior) == len(SCORE_LEVELS)
    assert report.scores[0] == SCORE_LEVELS[max(range(len(scores)), key=scores.__getitem__)]
    sampled = ConstrainedJudge(tiny, SamplingParams(temperature=1.0, seed=3)).score([(TASK, WIN)] * 6)
    assert all(s in SCORE_LEVELS for s in sampled.scores)


def test_judge_agreement_with_the_state_check():
    assert agreement_with_state([0.9, 0.1, 0.8, None], [1.0, 0.0, 0.0, 1.0]) == pytest.approx(2 / 3)
    assert agreement_with_state([None], [1.0]) is None


def test_grounded_experience_contrasts_a_success_with_a_failure():
    when, content = grounded_experience(TASK, WIN, LOSE)
    assert "What is 12 plus 30?" in when and "add" in when
    assert "add(a=<from the request>, b=<from the request>)" in content  # values described by their source
    assert "multiply" in content  # the failure's mistake
    assert parse_experiences(f"When to use: {when}\nContent: {content}", 1) == [(when, content)]
    errored = _traj([(ToolCall(name="add", arguments={"a": "x"}), False, "Error: a must be a number")], "?", 0.0, "e")
    assert "Error: a must be a number" in grounded_experience(TASK, WIN, errored)[1]
    assert grounded_experience(TASK, LOSE.model_copy(update={"steps": [Step(index=0, action_text="hi")]}), LOSE) is None


def test_grounded_and_constrained_extraction_always_yield_structured_experiences(tiny):
    other = TASK.model_copy(update={"task_id": "t2", "query": "Multiply 6 by 7."})
    lone = _traj([(ToolCall(name="multiply", arguments={"a": 6, "b": 7}), True, "42")], "42", 1.0, "s")
    lone = lone.model_copy(update={"task_id": "t2"})
    ex = ExperienceExtractor(
        Engine(tiny),
        SamplingParams(temperature=0.0, max_new_tokens=32),
        validate=False,
        constrained=True,
        grounded=True,
        field_tokens=24,
    )
    third = TASK.model_copy(update={"task_id": "t3", "query": "Divide 8 by 2.", "reference_solution": None})
    miss = LOSE.model_copy(update={"task_id": "t3", "trajectory_id": "m"})
    report = ex.extract([WIN, LOSE, lone, miss], {"t1": TASK, "t2": other, "t3": third}, iteration=0)
    assert report.jobs == 3 and report.grounded == 2  # the comparison and the success-only job, from execution
    kinds = sorted(e.provenance.kind for e in report.experiences if e.provenance.task_ids[0] != "t3")
    assert kinds == ["comparison", "success"]
    # the failure-only job without a readable reference writes nothing and calls no model (issue 51)
    assert report.calls == 0 and report.closed_failures == 1
    assert report.validated_share == len({e.provenance.task_ids[0] for e in report.experiences}) / 3
    # grounded mode splits by the environment's check: a judge's 1.0 on a failed state check is a failure
    judged = LOSE.model_copy(update={"outcome_reward": 1.0, "rewards": RewardParts(state_score=0.0)})
    assert [k for k, _ in ex.jobs([WIN, judged])] == ["comparison"]
    # grounded mode validates against the job's execution, without a model call
    checked = ExperienceExtractor(
        Engine(tiny), SamplingParams(temperature=0.0), validate=True, constrained=True, grounded=True
    ).extract([WIN, LOSE], {"t1": TASK})
    assert len(checked.experiences) == 1 and checked.rejected == 0 and checked.calls == 0
    assert checked.validated_share == 1.0
    # constrained validation alone is a calibrated forced yes/no: kept or rejected, never unparseable
    forced = ExperienceExtractor(
        Engine(tiny),
        SamplingParams(temperature=0.0, max_new_tokens=16),
        validate=True,
        constrained=True,
        field_tokens=12,
    ).extract([lone], {"t2": other})
    assert forced.jobs == 1 and forced.calls == 1 + len(forced.experiences) + forced.rejected
    assert forced.prompt_tokens > 0 and forced.completion_tokens > 0  # the summarizer's token counts (issue 54)


def test_grounded_validation_needs_a_tool_of_the_job_and_real_words():
    from evolvekit.navigating.extract import grounded_valid

    assert grounded_valid("Adding numbers.", "Call add with both numbers from the request.", [WIN])
    assert not grounded_valid("Adding numbers.", "Call plus with both numbers.", [WIN])  # no tool it used
    assert not grounded_valid("Adding.", "add add add add add add the the the", [WIN])  # degenerate
    assert not grounded_valid("Adding.", "Call address_book with numbers.", [WIN])  # a tool name inside a word


def test_helper_sources_follow_the_backend_and_refuse_constraints_on_served_models():
    on = {"attributing": {"enabled": True}, "navigating": {"enabled": True}, "questioning": {"enabled": True}}
    assert helper_sources(config_from_dict(on)) == {
        "attributor": "grounded",
        "judge": "off",  # questioning.reward auto: the state check for an in-process judge
        "extraction": "grounded",
        "gold": "none (environment outcome check only)",
        "examples": "self-made (the run's own executed calls, requests from the tool schemas)",
    }
    judged = {**on, "questioning": {"enabled": True, "reward": "judge"}}
    assert helper_sources(config_from_dict(judged))["judge"] == "llm-constrained"
    assert helper_sources(config_from_dict({**on, "run": {"oracle": True}}))["gold"] == "oracle"
    served = {
        **on,
        "models": {
            r: {"backend": "openai", "base_url": "http://127.0.0.1:9/v1"} for r in ("attributor", "judge", "summarizer")
        },
    }
    assert helper_sources(config_from_dict(served)) == {
        "attributor": "llm",
        "judge": "llm",
        "extraction": "llm",
        "gold": "none (environment outcome check only)",
        "examples": "self-made (the run's own executed calls, requests from the tool schemas)",
    }
    assert (
        helper_sources(config_from_dict({**on, "attributing": {"enabled": True, "source": "llm"}}))["attributor"]
        == "llm-constrained"
    )
    with pytest.raises(ConfigError, match="navigating.extraction: constrained needs an in-process summarizer"):
        config_from_dict({**served, "navigating": {"enabled": True, "extraction": "constrained"}})


def test_yaml_on_off_words_reach_auto_on_off_fields():
    # YAML 1.1 reads a bare `off` as false: every auto/on/off field takes it back as the word
    cfg = config_from_dict({"attributing": {"constrained": False}, "questioning": {"judge_constrained": True}})
    assert cfg.attributing.constrained == "off" and cfg.questioning.judge_constrained == "on"


def test_constrained_merge_check_answers_yes_or_no(tiny):
    from evolvekit.navigating.extract import llm_equivalence
    from evolvekit.types import Experience

    check = llm_equivalence(tiny, SamplingParams(temperature=0.0), constrained=True)
    a = Experience(when_to_use="adding two numbers", content="call add with both numbers")
    b = Experience(when_to_use="}}{{ garbage", content="\x00 ''' ")
    first = check(a, b)
    assert type(first) is bool and check(a, b) is first  # a plain yes/no, deterministic at T = 0


def test_a_failure_only_job_is_written_from_the_tasks_reference():
    from evolvekit.navigating.extract import grounded_valid, reference_experience

    when, content = reference_experience(TASK, LOSE)
    assert "add(a=<from the request>, b=<from the request>)" in content and "multiply" in content
    assert grounded_valid(when, content, [LOSE], TASK)  # names the reference's tool
    assert not grounded_valid("A request with numbers.", "Call plus with them, then answer.", [LOSE], TASK)
    ex = ExperienceExtractor(Engine(None), SamplingParams(temperature=0.0), validate=True, grounded=True)
    report = ex.extract([LOSE], {"t1": TASK})
    assert report.jobs == 1 and report.grounded == 1 and report.validated_share == 1.0 and report.calls == 0
    assert report.experiences[0].provenance.kind == "failure"
    # a person-written task's reference stays closed without run.oracle: the job writes nothing
    person = TASK.model_copy(update={"source": TaskSource.REAL})
    closed = ex.extract([LOSE], {"t1": person})
    assert closed.jobs == 1 and closed.experiences == [] and closed.closed_failures == 1 and closed.calls == 0
    from evolvekit.boundary import InformationBoundary

    oracle = ExperienceExtractor(
        Engine(None),
        SamplingParams(temperature=0.0),
        validate=True,
        grounded=True,
        boundary=InformationBoundary(oracle=True),
    ).extract([LOSE], {"t1": person})
    assert oracle.grounded == 1 and oracle.experiences[0].provenance.kind == "failure"
