import pytest

from evolvekit.types import (
    SCHEMA_VERSION,
    Difficulty,
    Experience,
    ExperienceProvenance,
    SpanKind,
    Step,
    StepLabel,
    Task,
    TaskSource,
    TokenSpan,
    ToolCall,
    TrainingSample,
    Trajectory,
)


def _roundtrip(obj):
    again = type(obj).model_validate_json(obj.model_dump_json())
    assert again == obj
    return again


def test_all_models_round_trip():
    call = ToolCall(name="add", arguments={"a": 1, "b": [2, 3]})
    task = Task(
        env_name="bfcl",
        query=["turn one", "turn two"],
        initial_config={"MathAPI": {}},
        reference_solution=[[call], []],
        source=TaskSource.SYNTHETIC,
        difficulty=Difficulty(entities=2, attributes=3, operations=3),
        metadata={"k": "v"},
    )
    step = Step(
        index=0,
        action_text='{"name": "add"}',
        tool_calls=[call],
        observation="3",
        prompt_token_ids=[1, 2],
        completion_token_ids=[3],
        completion_logprobs=[-0.1],
        spans=[TokenSpan(start=0, end=2, kind=SpanKind.PROMPT)],
    )
    traj = Trajectory(
        task_id=task.task_id,
        steps=[step],
        outcome_reward=1.0,
        step_attributions=[StepLabel.GOOD],
        experience_used=["exp-1"],
    )
    exp = Experience(when_to_use="when adding", content="use add", provenance=ExperienceProvenance(kind="failure"))
    sample = TrainingSample(
        trajectory_id=traj.trajectory_id,
        group_id="g",
        token_ids=[1, 2, 3],
        loss_mask=[0, 0, 1],
        token_advantages=[0, 0, 0.5],
        experience_mask=[0, 0, 0],
    )
    for obj in (call, task, step, traj, exp, sample):
        again = _roundtrip(obj)
        assert again.schema_version == SCHEMA_VERSION
    assert task.turns == ["turn one", "turn two"]
    assert Task(env_name="x", query="one").turns == ["one"]


def test_unknown_fields_rejected():
    with pytest.raises(ValueError):
        ToolCall.model_validate({"name": "x", "argumentz": {}})


def test_training_sample_lengths_checked():
    with pytest.raises(ValueError, match="loss_mask"):
        TrainingSample(
            trajectory_id="t",
            group_id="g",
            token_ids=[1, 2],
            loss_mask=[1],
            token_advantages=[0, 0],
            experience_mask=[0, 0],
        )


def test_experience_score_is_evolver_formula():
    e = Experience(when_to_use="w", content="c")
    assert e.score == pytest.approx(0.5)
    e.use_count, e.success_count = 8, 1
    assert e.score == pytest.approx(2 / 10)


def test_schema_1_steps_and_trajectories_migrate_to_typed_fields():
    """Run folders written before schema 2 stay readable: the free ``info``, reward parts in ``outcome_details``
    and Evolving-RL roles in ``metadata`` become typed fields."""
    old = {
        "schema_version": 1,
        "task_id": "t",
        "outcome_reward": 0.6,
        "outcome_details": {"error_type": "x", "outcome": 1.0, "format": 0.5, "state_score": 0.0},
        "metadata": {"role": "solver", "source": 2, "skill": 1, "task_index": 3, "prompt_tokens": 40, "note": "keep"},
        "steps": [
            {
                "schema_version": 1,
                "index": 0,
                "action_text": "a",
                "info": {
                    "turn_index": 1,
                    "new_turn": True,
                    "finish_reason": "length",
                    "calls": [{"name": "add", "ok": False, "unknown_tool": True}],
                    "format_ok": True,
                    "think_words": 7,
                    "context_events": ["summarise: x"],
                    "state_key": "abc",
                },
            },
        ],
    }
    t = Trajectory.model_validate(old)
    s = t.steps[0]
    assert (s.turn_index, s.new_turn, s.finish_reason, s.format_ok, s.think_words, s.state_key) == (
        1,
        True,
        "length",
        True,
        7,
        "abc",
    )
    assert s.calls[0].unknown_tool and not s.calls[0].ok and s.context_events == ["summarise: x"]
    assert (t.rewards.outcome, t.rewards.format, t.rewards.state_score) == (1.0, 0.5, 0.0)
    assert t.outcome_details == {"error_type": "x"} and t.checked_outcome == 0.0
    assert t.evolving is not None and (t.evolving.role, t.evolving.source, t.evolving.skill, t.evolving.task_index) == (
        "solver",
        2,
        1,
        3,
    )
    assert t.prompt_tokens == 40 and t.metadata == {"note": "keep"}
    again = Trajectory.model_validate_json(t.model_dump_json())  # schema 2 round-trips unchanged
    assert again == t
