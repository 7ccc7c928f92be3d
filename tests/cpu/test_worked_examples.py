"""Worked examples are person-written task instances (issue 76): by default the run shows its own, made from its
exploration's executed calls and the tools' documentation; a person's reach a prompt only behind
``env.worked_examples: person``, and every output of such a run says so. Also: held-out wordings kept out of
synthesis, the sample classes of an evaluation, its sampling error, tasks read from files counted as person-written,
and the store keeping no person-written reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolvekit.agent.evaluate import SAMPLE_CLASSES, classify_sample, sampling_error
from evolvekit.config import EnvConfig, examples_source, helper_sources, load_config
from evolvekit.engine.base import Engine
from evolvekit.env.base import ResetResult, ToolSchema
from evolvekit.env.bfcl.families import get_family
from evolvekit.env.examples import ShownExamples
from evolvekit.env.registry import make_env
from evolvekit.questioning.explore import ExplorationStep, ExplorationTrace
from evolvekit.questioning.pipeline import Funnel, HeldoutWordings, wording
from evolvekit.questioning.self_examples import (
    closing_message,
    demos_from_json,
    demos_to_json,
    documented_request,
    example_messages,
    first_calls,
    make_self_examples,
)
from evolvekit.types import ChatMessage, Step, Task, TaskSource, ToolCall, Trajectory

ADD = ToolSchema(name="add", description="Add two numbers. Returns the sum.", parameters={})


def _call(name: str, **args) -> ToolCall:
    return ToolCall(name=name, arguments=args)


# ---- the request and closing message written from the documentation ------------------------------------------------


def test_documented_request_is_the_descriptions_first_sentence_with_every_argument():
    assert documented_request(ADD, _call("add", a=12, b=30)) == "Add two numbers (a = 12, b = 30)."
    assert documented_request(None, _call("ls")) == "Call ls."
    assert documented_request(ToolSchema(name="cd"), _call("cd", folder="games")) == 'Call cd (folder = "games").'
    odd = ToolSchema(name="mv", description="  Move a file!  It keeps its name.")
    assert documented_request(odd, _call("mv", source="a", destination="b")) == (
        'Move a file (source = "a", destination = "b").'
    )


def test_closing_message_states_the_one_value_of_a_one_field_result():
    assert closing_message('{"result": 42}') == "The result is 42."
    assert closing_message('{"a": 1, "b": 2}') == 'The result is {"a": 1, "b": 2}.'
    assert closing_message("None") == "The result is None."
    assert closing_message('{"current_working_directory": "games"}') == "The result is games."


def _trace(*calls: tuple[ToolCall, bool]) -> ExplorationTrace:
    t = ExplorationTrace(exploration_id="x", sandbox={})
    t.steps = [ExplorationStep(i, "", [c], "obs", ok) for i, (c, ok) in enumerate(calls)]
    return t


def test_first_calls_take_one_successful_call_per_tool_step_by_step_across_runs():
    one = _trace((_call("add", a=1, b=2), True), (_call("add", a=5, b=6), True), (_call("divide", a=1, b=0), True))
    two = _trace((_call("multiply", a=3, b=4), False), (_call("subtract", a=9, b=1), True))
    got = first_calls([one, two], 3)
    # step 0: add (run one; run two's multiply failed), step 1: add again (seen), subtract; step 2: divide
    assert [(c.name, c.arguments) for c in got] == [("add", {"a": 1, "b": 2}), ("subtract", {"a": 9, "b": 1}),
                                                    ("divide", {"a": 1, "b": 0})]  # fmt: skip
    assert [c.name for c in first_calls([one, two], 1)] == ["add"]
    assert first_calls([], 3) == []


def test_examples_round_trip_through_the_store_and_become_chat_turns():
    demos = make_self_examples_stub()
    again = demos_from_json(demos_to_json(demos))
    assert again == demos
    msgs = example_messages(again)
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0].content == "Add two numbers (a = 2, b = 5)."
    assert '"name": "add"' in msgs[1].content and '"a": 2' in msgs[1].content
    assert msgs[2].content == 'Tool results:\n[add] {"result": 7}'
    assert msgs[3].content == "The result is 7."


def make_self_examples_stub():
    from evolvekit.env.bfcl.families import Demonstration

    return [
        Demonstration("Add two numbers (a = 2, b = 5).", _call("add", a=2, b=5), '{"result": 7}', "The result is 7.")
    ]


class _Explorer:
    """Stands in for the explorer: returns fixed traces (calls of the real BFCL MathAPI)."""

    def __init__(self, traces):
        self.traces, self.seen = traces, []

    def explore(self, make_env, sandbox, runs, steps):
        env = make_env()
        self.seen.append(env.reset(None, sandbox).examples)
        env.close()
        return self.traces


def test_self_made_examples_replay_the_explorers_calls_on_the_real_environment():
    from evolvekit.questioning.pipeline import sandbox_for

    cfg = EnvConfig(name="bfcl", family="arith")
    traces = [_trace((_call("add", a=12, b=30), True), (_call("divide", a=1, b=0), True), (_call("no_such"), True))]
    explorer = _Explorer(traces)
    demos = make_self_examples(explorer, lambda: make_env(cfg), sandbox_for(cfg), 3)  # type: ignore[arg-type]
    # the explorer was shown no example (the default hides the family's), and divide by zero does not replay
    assert explorer.seen == [[]]
    assert [d.call.name for d in demos] == ["add"]
    assert demos[0].request.startswith("Add two numbers") and "a = 12, b = 30" in demos[0].request
    assert json.loads(demos[0].result) == {"result": 42}
    assert demos[0].final == "The result is 42."


def test_an_environment_without_tools_makes_no_example_and_explores_nothing():
    """ScienceWorld's actions are text: an example is a tool call, so none is made and no exploration is paid for."""

    class _TextEnv:
        def reset(self, task, sandbox):
            return ResetResult(observation="You are in a kitchen.", tools=[])

        def close(self):
            pass

    explorer = _Explorer([_trace((_call("add", a=1, b=2), True))])
    assert make_self_examples(explorer, _TextEnv, {}, 3) == []  # type: ignore[arg-type]
    assert explorer.seen == []


# ---- the switch ---------------------------------------------------------------------------------------------------


def test_make_env_shows_a_persons_examples_only_behind_the_switch():
    person = [m.content for d in get_family("arith").demonstrations for m in d.messages(lambda c: c.name)]
    assert "What is 12 plus 30?" in person
    hidden = make_env(EnvConfig(name="bfcl", family="arith"))
    shown = make_env(EnvConfig(name="bfcl", family="arith", worked_examples="person"))
    task = get_family("arith").tasks("test", 1)[0]
    assert hidden.reset(task).examples == []
    texts = [m.content for m in shown.reset(task).examples]
    assert "What is 12 plus 30?" in texts


def test_shown_examples_replace_the_environments_own_and_pass_everything_else_through():
    class Inner:
        name = "inner"
        flag = False

        def reset(self, task=None, sandbox_config=None):
            return ResetResult(observation="hi", tools=[ADD], examples=[ChatMessage(role="user", content="person")])

        def state_key(self):
            return "k"

    made: list[ChatMessage] = []
    inner = Inner()
    env = ShownExamples(inner, lambda: made)
    assert env.reset().examples == []
    made.append(ChatMessage(role="user", content="own"))  # read at every reset: examples made later reach it
    assert [m.content for m in env.reset().examples] == ["own"]
    assert env.reset().observation == "hi" and env.name == "inner" and env.state_key() == "k"
    env.flag = True  # attributes are the wrapped environment's
    assert inner.flag is True
    from evolvekit.env.base import StateKeyed

    assert isinstance(env, StateKeyed)


def test_every_output_names_where_the_examples_come_from():
    default = load_config("configs/quickstart.yaml")
    assert default.env.worked_examples == "self"
    assert helper_sources(default)["examples"].startswith("self-made")
    person = load_config("configs/quickstart.yaml", ["env.worked_examples=person"])
    assert examples_source(person).startswith("PERSON-WRITTEN")
    assert helper_sources(load_config(None, ["env.worked_examples=none"]))["examples"] == "none"


def test_config_show_flags_person_written_examples():
    from typer.testing import CliRunner

    from evolvekit.cli.main import app

    res = CliRunner().invoke(app, ["config", "show", "configs/quickstart.yaml", "--set", "env.worked_examples=person"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("# PERSON-WRITTEN EXAMPLES")
    res = CliRunner().invoke(app, ["config", "show", "configs/quickstart.yaml"])
    assert "PERSON-WRITTEN" not in res.output.splitlines()[0]
    assert "examples: self-made" in res.output.splitlines()[0]


# ---- held-out wordings ----------------------------------------------------------------------------------------------


def test_wording_masks_numbers_and_punctuation_only():
    assert wording("What is 50 minus 8?") == wording("What is 3 minus 91.5?") == "what is # minus #"
    assert wording("What is 50 minus 8?") != wording("What is 50 plus 8?")
    assert wording(["Add 2 and 3.", "Now times 4."]) == "add # and # now times #"


def _syn(query: str) -> Task:
    return Task(env_name="bfcl", query=query, source=TaskSource.SYNTHETIC)


def test_synthesized_tasks_worded_like_a_held_out_task_are_dropped_and_counted():
    held = HeldoutWordings(split=frozenset({wording("What is 1 minus 2?")}), panels=frozenset({wording("Find 1 + 2.")}))
    funnel = Funnel()
    kept = held.drop([_syn("What is 50 minus 8?"), _syn("Find 7 + 9."), _syn("Subtract 8 from 50.")], funnel)
    assert [t.query for t in kept] == ["Subtract 8 from 50."]
    assert (funnel.heldout_split_wording, funnel.heldout_panel_wording) == (1, 1)


def test_heldout_wordings_of_the_quickstart_cover_the_split_and_the_panel():
    cfg = load_config("configs/quickstart.yaml")
    held = HeldoutWordings.of(cfg)
    assert wording("What is 57 plus 7?") in held.split
    assert len(held.split) == 12  # the family's 12 templates
    panel = cfg.train.eval_panels
    assert panel and len(held.panels) >= 20
    sets = ["train.eval_before=false", "train.eval_after=false", "train.eval_panels=[]"]
    off = HeldoutWordings.of(load_config("configs/quickstart.yaml", sets))
    assert off == HeldoutWordings()


def test_the_second_panel_shares_no_wording_with_the_generator_or_any_worked_example():
    from evolvekit.env.bfcl.families import FAMILIES
    from evolvekit.safejson import read_jsonl

    panel = read_jsonl("configs/panels/arith_panel2_v1.jsonl", Task, "a task")
    assert len(panel) == 48 and {t.reference_solution[0][0].name for t in panel} == {"add", "subtract", "multiply",
                                                                                     "divide"}  # fmt: skip
    split = {wording(t.query) for t in get_family("arith").tasks("test", 200)} | {
        wording(t.query) for t in get_family("arith").tasks("train", 200)
    }
    demos = {wording(d.request) for f in FAMILIES.values() for d in f.demonstrations}
    assert not ({wording(t.query) for t in panel} & (split | demos))


# ---- what a held-out sample did --------------------------------------------------------------------------------------


def _sample(calls: list[list[ToolCall]], parse_error: str | None = None, passed: bool = False) -> Trajectory:
    steps = [Step(index=i, action_text="", tool_calls=c, observation="", parse_error=parse_error) for i, c in
             enumerate(calls)]  # fmt: skip
    return Trajectory(task_id="t", steps=steps, outcome_reward=float(passed))


REF = [[_call("add", a=57, b=7)]]


def test_each_sample_falls_in_exactly_one_class():
    assert classify_sample(_sample([[_call("add", a=57, b=7)]], passed=True), REF) == "right"
    assert classify_sample(_sample([[]]), REF) == "no_call"
    assert classify_sample(_sample([]), REF) == "no_call"
    assert classify_sample(_sample([[]], parse_error="bad json"), REF) == "malformed"
    assert classify_sample(_sample([[_call("subtract", a=57, b=7)]]), REF) == "wrong_tool"
    assert classify_sample(_sample([[_call("add", a=5, b=7)]]), REF) == "wrong_args"
    # a later right tool still counts as the right tool; the check decides "right"
    assert classify_sample(_sample([[_call("subtract", a=1, b=2)], [_call("add", a=1, b=2)]]), REF) == "wrong_args"
    assert SAMPLE_CLASSES == ("no_call", "malformed", "wrong_tool", "wrong_args", "right")


def test_sampling_error_by_hand():
    # two tasks of 4 samples: p = 0.5 and 1.0 -> variances 0.25/3 and 0; se = sqrt(0.25/3) / 2
    assert sampling_error([[1, 0, 1, 0], [1, 1, 1, 1]]) == pytest.approx((0.25 / 3) ** 0.5 / 2)
    assert sampling_error([[1], [0]]) == pytest.approx((0.25 + 0.25) ** 0.5 / 2)
    assert sampling_error([]) == 0.0


# ---- origin by provenance, and the store ----------------------------------------------------------------------------


def test_a_task_file_is_person_written_whatever_its_tasks_say(tmp_path: Path):
    from evolvekit.env.task_file import load_task_file

    f = tmp_path / "t.jsonl"
    f.write_text(_syn("Add 2 and 3.").model_dump_json() + "\n")
    (task,) = load_task_file(str(f))
    assert task.source == TaskSource.REAL


def test_kv_cache_size_is_explicit_on_cpu():
    from evolvekit.llm.vllm_engine import CPU_KV_CACHE_BYTES, kv_cache_size

    assert kv_cache_size("cpu", None) == CPU_KV_CACHE_BYTES == 512 * 2**20
    assert kv_cache_size("cpu", 1234) == 1234
    assert kv_cache_size("cuda", None) is None
    assert kv_cache_size("cuda", 99) == 99


def test_documented_request_skips_bfcls_api_boilerplate():
    bfcl = ToolSchema(
        name="add",
        description="This tool belongs to the Math API, which provides various mathematical operations. Tool "
        "description: Add two numbers.",
    )
    assert documented_request(bfcl, _call("add", a=1, b=2.5)) == "Add two numbers (a = 1, b = 2.5)."


class _ReadOnly:
    """A test environment whose check passes when the state is unchanged: a read-only task passes with no call."""

    name = "readonly"

    def __init__(self, writes_needed: bool) -> None:
        self.writes_needed, self.wrote = writes_needed, False

    def reset(self, task=None, sandbox_config=None):
        return ResetResult(observation="hi", tools=[ADD])

    def step(self, action):
        from evolvekit.env.base import CallResult, StepResult

        self.wrote = self.wrote or bool(action.tool_calls)
        return StepResult(observation="ok", call_results=[CallResult(name="add", ok=True, output="5")] * bool(
            action.tool_calls))  # fmt: skip

    def evaluate(self, trajectory=None):
        from evolvekit.env.base import EvalResult

        passed = self.wrote or not self.writes_needed
        return EvalResult(score=float(passed), passed=passed)

    def close(self):
        pass


def test_a_task_the_check_passes_with_no_call_is_dropped_as_trivial():
    from evolvekit.questioning.curate import passes_without_acting
    from evolvekit.questioning.pipeline import curate_new

    task = _syn("Add 2 and 3.").model_copy(update={"reference_solution": [[_call("add", a=2, b=3)]]})
    assert passes_without_acting(task, lambda: _ReadOnly(writes_needed=False))
    assert not passes_without_acting(task, lambda: _ReadOnly(writes_needed=True))

    class _NoDedup:
        def filter(self, tasks):
            from types import SimpleNamespace

            return SimpleNamespace(kept=list(tasks), lexical_duplicates=0, semantic_duplicates=0)

    funnel = Funnel()
    assert curate_new([task], _NoDedup(), lambda: _ReadOnly(writes_needed=False), funnel) == []  # type: ignore[arg-type]
    assert (funnel.trivial, funnel.kept) == (1, 0)
    funnel = Funnel()
    kept = curate_new([task], _NoDedup(), lambda: _ReadOnly(writes_needed=True), funnel)  # type: ignore[arg-type]
    assert kept == [task] and (funnel.trivial, funnel.kept) == (0, 1)


def test_a_flat_parameter_description_is_refused_with_one_line_naming_the_tool():
    from evolvekit.errors import EnvError
    from evolvekit.llm.base import SamplingParams
    from evolvekit.questioning.explore import Explorer, schema_problem

    flat = ToolSchema(name="deposit", parameters={"amount": {"type": "number"}})
    assert "tool 'deposit'" in (schema_problem(flat) or "") and "JSON schema object" in (schema_problem(flat) or "")
    for ok in ({}, {"type": "object", "properties": {}}, {"type": "dict", "properties": {}}, {"properties": {}}):
        assert schema_problem(ToolSchema(name="t", parameters=ok)) is None

    class _Flat(_ReadOnly):
        def reset(self, task=None, sandbox_config=None):
            return ResetResult(observation="hi", tools=[flat])

    class _NoModel:
        name = "none"

        def chat(self, conversations, params):
            raise AssertionError("no step may run")

    explorer = Explorer(Engine(_NoModel()), SamplingParams())  # type: ignore[arg-type]
    with pytest.raises(EnvError, match=r"^exploration: tool 'deposit': its parameters .* no JSON schema object"):
        explorer.explore(lambda: _Flat(False), {}, runs=1, max_steps=1)


def test_the_docs_counter_example_scores_a_task_without_metadata_by_its_reference():
    import examples.counter_env as counter

    env = counter.CounterEnv()
    task = _syn("Add 3 then 4 to the counter.").model_copy(
        update={"reference_solution": [[_call("add", n=3), _call("add", n=4)]]}
    )
    env.reset(task)
    from evolvekit.env.base import Action

    env.step(Action(tool_calls=[_call("add", n=7)]))
    assert env.evaluate().passed
    env.reset(task)
    assert not env.evaluate().passed
    assert counter.TOOLS[0].parameters["type"] == "object"


def test_the_final_lines_say_what_the_held_out_figures_rest_on_and_warn_when_too_little():
    from evolvekit.report.figures import heldout_lines

    before = {"avg@8": 0.1, "tasks": 32, "k": 8, "split": "test", "sampling_se": 0.021, "p2/tasks": 48,
              "p2/sampling_se": 0.0, "class/no_call@8": 0.6}  # fmt: skip
    after = {**before, "sampling_se": 0.029, "class/no_call@8": 0.1}
    lines = heldout_lines(before, after, ["class/no_call@8"])
    assert lines == [
        "held-out test: 32 tasks x 8 samples (sampling error 0.021/0.029)",
        "held-out p2: 48 tasks x 8 samples (sampling error 0.000/0.000)",
        "samples: class/no_call@8: 0.6 -> 0.1",
    ]
    few = heldout_lines({"tasks": 2, "k": 1, "split": "test"}, {}, [])
    assert few == ["held-out test: 2 tasks x 1 samples (sampling error ); WARNING: too few held-out samples for a "
                   "before/after difference to mean much"]  # fmt: skip
    noisy = heldout_lines({**before, "sampling_se": 0.06}, after, [])[0]
    assert noisy.endswith("WARNING: too few held-out samples for a before/after difference to mean much")
    assert heldout_lines({}, {}, []) == []


def test_commands_outside_a_run_make_their_examples_once_and_only_when_an_environment_resets(monkeypatch):
    """eval and tasks synthesize: nothing is loaded or explored until the first reset (a finished evaluation explores
    nothing), and the examples are made once for every environment after it."""
    from evolvekit.questioning import self_examples

    made: list[int] = []
    loaded: list[int] = []

    def fake_run_examples(cfg, explorer_llm, make_env, funnel=None):
        made.append(1)
        return [self_examples.Demonstration("Add 1 and 2.", _call("add", a=1, b=2), '{"result": 3}', "It is 3.")]

    monkeypatch.setattr(self_examples, "run_examples", fake_run_examples)
    cfg = load_config(None, ["env.family=arith"])

    def explorer():
        loaded.append(1)
        return object()

    factory = self_examples.with_run_examples(cfg, explorer, lambda: make_env(cfg.env))  # type: ignore[arg-type]
    assert made == [] and loaded == []
    first, second = factory(), factory()
    shown = first.reset(None, {"classes": ["MathAPI"]}).examples
    assert [m.role for m in shown][:2] == ["user", "assistant"] and "Add 1 and 2." in shown[0].content
    assert second.reset(None, {"classes": ["MathAPI"]}).examples == shown
    assert made == [1] and loaded == [1]
    person = load_config(None, ["env.family=arith", "env.worked_examples=person"])
    person_env = self_examples.with_run_examples(person, explorer, lambda: make_env(person.env))()
    assert person_env.reset(get_family("arith").tasks("test", 1)[0]).examples
    assert loaded == [1]  # the person-written ones need no explorer


def test_the_explorer_is_the_policy_itself_when_it_is_the_same_local_model(monkeypatch):
    from evolvekit.llm import factory

    built: list[str] = []
    monkeypatch.setattr(factory, "build_llm", lambda cfg, role: built.append(role) or f"model of {role}")
    policy = object()
    assert factory.role_llm_or(load_config(None, []).models, "explorer", policy) is policy and built == []
    other = load_config(None, ["models.explorer.model=some/other-model"]).models
    assert factory.role_llm_or(other, "explorer", policy) == "model of explorer" and built == ["explorer"]


def test_scored_by_replay_compares_end_states_on_a_fresh_instance():
    """Issue 78.1: a plugin's evaluate() by replaying the reference, from the base class: the episode passes when
    its end state equals the reference's on a fresh instance; no reference, no pass (with the reason)."""
    from evolvekit.env.base import Action, EvalResult
    from evolvekit.env.replay import ScoredByReplay

    class Shelf(ScoredByReplay):
        made = 0

        def __init__(self):
            type(self).made += 1
            self.items: list[str] = []

        def reset(self, task=None, sandbox_config=None):
            self.items, self.task = [], task

        def step(self, action):
            self.items += [c.arguments["item"] for c in action.tool_calls]

        def end_state(self):
            return sorted(self.items)

        def close(self):
            pass

    put = lambda item: _call("put", item=item)  # noqa: E731
    task = _syn("Put a pear and a fig on the shelf.").model_copy(
        update={"reference_solution": [[put("pear"), put("fig")]]}
    )
    env = Shelf()
    env.reset(task)
    env.step(Action(tool_calls=[put("fig"), put("pear")]))
    assert env.evaluate() == EvalResult(score=1.0, passed=True) and Shelf.made == 2  # one replica for the replay
    env.reset(task)
    env.step(Action(tool_calls=[put("fig")]))
    assert not env.evaluate().passed
    env.reset(_syn("No reference."))
    assert env.evaluate().details == {"reason": "no task with a reference to compare with"}


def test_every_output_says_where_the_worked_examples_came_from():
    """`evolvekit eval --json` and `run` carry the examples' source; a person's examples carry the label too."""
    from evolvekit.cli.common import PERSON_EXAMPLES_LABEL, examples_provenance

    assert examples_provenance("self") == {"worked_examples": "self"}
    assert examples_provenance("none") == {"worked_examples": "none"}
    assert examples_provenance("person") == {"worked_examples": "person", "label": PERSON_EXAMPLES_LABEL}
    assert PERSON_EXAMPLES_LABEL.startswith("PERSON-WRITTEN EXAMPLES")
