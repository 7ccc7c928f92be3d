"""Held-out evaluation (agent/evaluate.py) with a chat-only policy double and a tiny environment: no model, no torch.

Each assertion pins a figure the evidence reports read (avg@k, the sample classes, the per-task record, the
journal), so the mutation look of evaluate.py decides its mutants here in milliseconds (issue 77.2).
"""

import json
import logging

import pytest
from episode_doubles import TOOLS, ScriptedChat, TinyEnv, tiny_task

from evolvekit.agent.evaluate import (
    SAMPLE_CLASSES,
    EpisodeJournal,
    EvalReport,
    PaceEstimate,
    eval_minutes,
    evaluate_policy,
    sampling_error,
    write_results,
)
from evolvekit.agent.templates import REASONING_INSTRUCTION, TemplateSettings
from evolvekit.config import RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import format_call
from evolvekit.env.prompts import system_prompt
from evolvekit.errors import EnvError
from evolvekit.llm.base import SamplingParams
from evolvekit.types import Task, ToolCall

ADD, MUL = format_call(ToolCall(name="add")), format_call(ToolCall(name="mul"))


def _run(tasks, script, k=2, **kw):
    policy = ScriptedChat(script)
    cfg = RolloutConfig(max_steps=2, concurrency=1)
    report, trajs = evaluate_policy(tasks, TinyEnv, Engine(policy), cfg, SamplingParams(), k, show_progress=False, **kw)
    return report, trajs, policy


def test_the_report_counts_each_task_and_class_and_the_per_task_record():
    tasks = [tiny_task("t-add", "add"), tiny_task("t-mul", "mul")]
    # t-add: right, right; t-mul: the wrong tool, then text twice (no call; the step limit ends it)
    script = {"please add": [ADD], "please mul": [ADD, "no idea", "still no idea"]}
    report, trajs, _ = _run(tasks, script)
    assert [t.group_id for t in trajs] == ["eval-t-add"] * 2 + ["eval-t-mul"] * 2
    assert report.tasks == 2 and report.k == 2
    assert report.avg_at_k == 0.5 and report.best_at_k == 0.5 and report.mean_score == 0.5
    assert report.classes == {"no_call": 1, "malformed": 0, "wrong_tool": 1, "wrong_args": 0, "right": 2}
    assert report.failed_rollouts == 0
    assert report.prompt_tokens == 10 * 5 and report.completion_tokens == 3 * 5  # five steps in all
    assert report.sampling_se == pytest.approx(sampling_error([[1.0, 1.0], [0.0, 0.0]]))
    assert report.per_task == [
        {"task_id": "t-add", "scores": [1.0, 1.0], "steps": [1, 1], "prompt_tokens": [10, 10],
         "completion_tokens": [3, 3], "errors": []},
        {"task_id": "t-mul", "scores": [0.0, 0.0], "steps": [1, 2], "prompt_tokens": [10, 20],
         "completion_tokens": [3, 6], "errors": []},
    ]  # fmt: skip


def test_a_failed_episode_scores_0_counts_as_failed_and_keeps_its_error():
    tasks = [tiny_task("t-add", "add"), Task(task_id="t-x", env_name="tiny", query="crash", reference_solution=None)]
    report, trajs, _ = _run(tasks, {"please add": [ADD], "crash": [MUL]}, k=1)
    assert report.failed_rollouts == 1 and report.per_task[1]["scores"] == [0.0]
    assert report.mean_score == 0.5 and report.avg_at_k == 0.5
    assert report.per_task[0]["errors"] == [] and "backend died" in report.per_task[1]["errors"][0]
    assert report.classes["no_call"] == 1  # a failed episode made no call
    assert report.sampling_se == pytest.approx(0.5**0.5 / 2)  # one sample a task: each adds 1/4


def test_no_tasks_give_a_report_of_zeros():
    report, trajs, _ = _run([], {})
    assert trajs == [] and report.mean_score == 0.0 and report.avg_at_k == 0.0 and report.tasks == 0


def test_an_evaluation_shows_its_progress_unless_told_not_to(monkeypatch):
    import evolvekit.agent.rollout as rollout

    shown = []

    class _Progress(rollout.StageProgress):
        def __init__(self, name, total, show_bar=True, logger=None):
            shown.append(show_bar)
            super().__init__(name, total, show_bar=False, logger=logger)

    monkeypatch.setattr(rollout, "StageProgress", _Progress)
    cfg, engine = RolloutConfig(max_steps=1), Engine(ScriptedChat({"please add": [ADD]}))
    evaluate_policy([tiny_task("t-add", "add")], TinyEnv, engine, cfg, SamplingParams(), 1)
    evaluate_policy([tiny_task("t-add", "add")], TinyEnv, engine, cfg, SamplingParams(), 1, show_progress=False)
    assert shown == [True, False]


def test_an_evaluation_where_no_episode_ran_is_refused_by_name():
    with pytest.raises(EnvError, match=r"^evaluation: none of the 2 episodes ran; the first error: "):
        _run([Task(task_id="t-x", env_name="tiny", query="crash")], {"crash": [ADD]})


def test_no_episodes_score_0():
    report, trajs, _ = _run([tiny_task("t-add", "add")], {"please add": [ADD]}, k=0)
    assert trajs == [] and report.per_task[0]["scores"] == [0.0] and report.avg_at_k == 0.0


def test_experience_is_asked_per_task_and_reaches_each_episode():
    asked = []

    def experience_for(task):
        asked.append(task.task_id)
        return f"exp of {task.task_id}", [f"id-{task.task_id}"]

    tasks = [tiny_task("t-add", "add"), tiny_task("t-mul", "mul")]
    _, trajs, policy = _run(tasks, {"please add": [ADD], "please mul": [MUL]}, experience_for=experience_for)
    assert asked == ["t-add", "t-mul"]
    assert [t.experience_used for t in trajs] == [["id-t-add"]] * 2 + [["id-t-mul"]] * 2
    assert all(t.flags.experience_guided for t in trajs)
    assert "exp of t-mul" in policy.systems[-1]


def test_the_tools_are_rendered_compact_by_default_and_the_template_is_passed_on():
    _, _, policy = _run([tiny_task("t-add", "add")], {"please add": [ADD]}, k=1)
    assert policy.systems == [system_prompt(TOOLS, "compact")]
    _, trajs, policy = _run(
        [tiny_task("t-add", "add")], {"please add": [ADD]}, k=1, template=TemplateSettings(template="reasoning")
    )
    assert policy.systems[0].endswith(REASONING_INSTRUCTION) and trajs[0].steps[0].format_ok is False


def test_the_summary_holds_every_figure_rounded_to_4_places():
    report = EvalReport(
        k=3, tasks=2, avg_at_k=0.123456, best_at_k=0.654321, mean_score=0.333333, failed_rollouts=1,
        prompt_tokens=10, completion_tokens=20, classes={"no_call": 1, "right": 2}, sampling_se=0.0123456,
    )  # fmt: skip
    assert report.summary() == {
        "avg@3": 0.1235, "best@3": 0.6543,
        "class/no_call@3": 0.3333, "class/malformed@3": 0.0, "class/wrong_tool@3": 0.0, "class/wrong_args@3": 0.0,
        "class/right@3": 0.6667,
        "sampling_se": 0.0123, "tasks": 2, "k": 3, "mean_score": 0.3333, "failed_rollouts": 1,
        "prompt_tokens": 10, "completion_tokens": 20,
    }  # fmt: skip
    empty = EvalReport(k=1, tasks=0, avg_at_k=0, best_at_k=0, mean_score=0, failed_rollouts=0, prompt_tokens=0,
                       completion_tokens=0)  # fmt: skip
    assert all(empty.summary()[f"class/{c}@1"] == 0.0 for c in SAMPLE_CLASSES)


def test_sampling_error_and_the_estimate_at_their_edges():
    assert sampling_error([[1.0, 1.0]]) == 0.0  # two samples that agree: no variance (one sample adds 1/4)
    assert sampling_error([[1.0]]) == 0.5
    assert eval_minutes(0.5, 1, 2)[0] == pytest.approx(0.5 / 60)  # under a second is not rounded up
    assert eval_minutes(60.0, 0, 1)[0] == pytest.approx(1.0)  # none done yet: the elapsed time is one episode's


def test_the_estimate_logs_nothing_before_it_is_started(caplog):
    pace = PaceEstimate(10, 2, clock=lambda: 5.0)
    with caplog.at_level(logging.INFO, logger="evolvekit.agent.evaluate"):
        pace()
        pace()  # the wave is done, but start() was never called
    assert pace.logged is None and not caplog.records


def test_the_journal_continues_past_a_cut_line_and_says_what_it_reuses(tmp_path, caplog):
    path = tmp_path / "deep" / "er" / "res.episodes.jsonl"  # folders that do not exist yet
    tasks = [tiny_task("t-add", "add")]
    with caplog.at_level(logging.INFO, logger="evolvekit.agent.evaluate"):
        first, trajs, _ = _run(tasks, {"please add": [ADD]}, k=3, journal=EpisodeJournal(path, "key"))
    assert not [m for m in caplog.messages if "already in" in m]  # a new journal reuses nothing, and says nothing
    lines = path.read_text().splitlines()
    # the middle episode's line was cut, a later one is whole
    path.write_text("\n".join([lines[0], lines[1], lines[2][:20], lines[3]]) + "\n")
    journal = EpisodeJournal(path, "key")
    assert sorted(journal.finished()) == [json.loads(lines[1])["job"], json.loads(lines[3])["job"]]
    with caplog.at_level(logging.INFO, logger="evolvekit.agent.evaluate"):
        again, trajs2, policy = _run(tasks, {"please add": [ADD]}, k=3, journal=journal)
    assert policy.seen["please add"] == 1 and again.summary() == first.summary()
    assert f"evaluation: 2 of 3 episodes already in {path}; running the other 1" in caplog.messages
    assert len(journal.finished()) == 3 and all(v is not None for v in journal.finished().values())
    with pytest.raises(EnvError, match=r"holds episodes of another evaluation .*; use another --out or remove it$"):
        EpisodeJournal(path, "other")
    for head in ("not json", "[1, 2]", '{"other": "key"}'):  # a first line that names no evaluation fits no key
        path.write_text(head + "\n")
        for key in ("key", ""):
            with pytest.raises(EnvError, match="another evaluation"):
                EpisodeJournal(path, key)


def test_results_are_written_per_task_and_per_episode(tmp_path):
    report, trajs, _ = _run(
        [tiny_task("t-add", "add"), tiny_task("t-mul", "mul")], {"please add": [ADD], "please mul": [ADD]}
    )
    out = tmp_path / "new" / "er" / "res.jsonl"
    write_results(out, report, trajs)
    write_results(out, report, trajs)  # again, over the first: the same files
    assert [json.loads(x) for x in out.read_text().splitlines()] == report.per_task
    episodes = (tmp_path / "new" / "er" / "res.trajectories.jsonl").read_text().splitlines()
    assert [json.loads(x)["task_id"] for x in episodes] == ["t-add", "t-add", "t-mul", "t-mul"]
