"""Requests a person would write, written by the run (issue 96, item 1): each filter by hand and switched off, the
round trip's leave-one-out, the ranking, the counted fallback, and no template around the model's words."""

from __future__ import annotations

import json

import pytest

from evolvekit.config import load_config
from evolvekit.engine.base import Engine
from evolvekit.env.base import ToolSchema
from evolvekit.env.registry import make_env
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.explore import ExplorationStep, ExplorationTrace
from evolvekit.questioning.pipeline import Funnel, add_requests, round_tripped, sandbox_for
from evolvekit.questioning.requests import (
    FRAMINGS,
    Candidate,
    RequestFilters,
    RequestFunnel,
    RequestWriter,
    clean_request,
    framing_prompt,
    identifiers,
    names_identifier,
    near_duplicate,
    pass_rate,
    ranked,
    states_exactly,
    static_survivors,
)
from evolvekit.questioning.self_examples import (
    ExampleRequests,
    make_self_examples,
    unnamed_request,
    written_requests,
)
from evolvekit.types import Task, TaskSource, ToolCall

ADD = ToolSchema(name="add", description="Add two numbers. Returns the sum.", parameters={})


def _call(name: str, **args) -> ToolCall:
    return ToolCall(name=name, arguments=args)


# ---- the text filters, by hand --------------------------------------------------------------------------------------


def test_states_exactly_every_value_and_no_other_number():
    add = _call("add", a=12, b=30)
    assert states_exactly("What is 12 plus 30?", [add])
    assert states_exactly("Sum 30 and 12.0 please", [add])  # by value, in any order
    assert not states_exactly("Add 12 to a number.", [add])  # a value missing
    assert not states_exactly("Add 12 and 30, then 5.", [add])  # another number
    assert not states_exactly("Add 12 and 12.", [add])  # 30 missing, 12 twice
    assert states_exactly("Add 3 and 3.", [_call("add", a=3, b=3)])
    assert not states_exactly("Add 3.", [_call("add", a=3, b=3)])  # each value as often as the call uses it
    cd = _call("cd", folder="Games")
    assert states_exactly("Go into the games folder.", [cd])  # strings case-insensitively
    assert not states_exactly("Go into the documents folder.", [cd])
    assert not states_exactly("Go into folder games 2.", [cd])
    # a later call's value taken from an earlier result is not asked of the request
    assert states_exactly("Multiply the sum by 10.", [_call("multiply", a=11, b=10)], carried=[11])


def test_identifiers_are_the_function_and_every_parameter_name_nested_too():
    call = _call("mv", source="a", options={"force_flag": True, "depth": 2})
    assert identifiers([call]) == {"mv", "source", "options", "force_flag", "depth"}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Add 1 and 2.", False),  # a plain word that is also the tool's name is a request
        ("What is a number plus 2?", False),  # "a" the article, not the parameter
        ("Add a = 1 and b = 2.", True),
        ("Call add(1, 2).", True),
        ("Use `add` on 1 and 2.", True),
        ("Add with a: 1, b: 2", True),
        ("What is 'b' plus 1?", True),
        ("Set mean_of_list for 1 and 2.", True),  # no plain word: named wherever it appears
        ("Compute the MEAN_OF_LIST of 1 and 2.", True),
    ],
)
def test_names_identifier_as_code_only(text: str, named: bool):
    calls = [_call("add", a=1, b=2), _call("mean_of_list", numbers=[1, 2])]
    assert names_identifier(text, calls) is named


def test_near_duplicates_differ_in_numbers_only():
    assert near_duplicate("What is 12 plus 30?", ["What is 1 plus 2?"], 0.8)
    assert not near_duplicate("Could you sum 12 and 30 for me?", ["What is 1 plus 2?"], 0.8)
    assert not near_duplicate("What is 12 plus 30?", ["What is 1 plus 2?"], 2.0)  # a threshold over 1: off


def test_clean_request_takes_the_first_line_without_labels_or_quotes():
    assert clean_request('User: "What is 12 plus 30?"\nmore') == "What is 12 plus 30?"
    assert clean_request("\n  **Question:** How much is 4 times 5?") == "How much is 4 times 5?"
    assert clean_request("ok") is None
    assert clean_request("The user asked: What is 9 over 3?") == "What is 9 over 3?"
    assert clean_request("A user's question was: What is 9 over 3?") == "What is 9 over 3?"
    assert clean_request('The user\'s question stated "subtract 7 from 2." twice') == "subtract 7 from 2."
    assert clean_request("The user wants to multiply 2 by 3.") == "The user wants to multiply 2 by 3."
    assert clean_request("") is None
    assert clean_request("x" * 301) is None


def test_framings_show_the_call_its_result_and_the_tools_description_and_differ():
    prompts = [framing_prompt(f, [(_call("add", a=12, b=30), '{"result": 42}', ADD)]) for f in range(len(FRAMINGS))]
    assert len({p[1].content for p in prompts}) == len(FRAMINGS) >= 3
    for p in prompts:
        assert 'add(a=12, b=30) -> {"result": 42}' in p[1].content and "Add two numbers." in p[1].content


# ---- the text filters in the funnel, each switched off ---------------------------------------------------------------

BAD = {
    "values": "Add 12 and 30 and 7.",
    "identifiers": "Add a = 12 and b = 30.",
    "duplicates": "What is 30 plus 12?",
}


def _survivors(filters: RequestFilters) -> tuple[list[str], RequestFunnel]:
    funnel = RequestFunnel()
    texts = [("What is 12 plus 30?", 0), ("ok", 0), (BAD["values"], 1), (BAD["identifiers"], 1), (BAD["duplicates"], 2)]
    kept = static_survivors(texts, [_call("add", a=12, b=30)], filters, funnel)
    return [c.request for c in kept], funnel


def test_each_text_filter_drops_its_candidate_and_counts_it():
    kept, funnel = _survivors(RequestFilters())
    assert kept == ["What is 12 plus 30?"]
    assert (funnel.candidates, funnel.unparseable, funnel.values, funnel.identifiers, funnel.duplicates) == (
        5, 1, 1, 1, 1,
    )  # fmt: skip


@pytest.mark.parametrize("off", ["values", "identifiers", "duplicates"])
def test_a_text_filter_switched_off_lets_its_candidate_through(off: str):
    filters = {
        "values": RequestFilters(values=False),
        "identifiers": RequestFilters(identifiers=False),
        "duplicates": RequestFilters(dedup_threshold=2.0),
    }[off]
    kept, funnel = _survivors(filters)
    assert BAD[off] in kept and getattr(funnel, off) == 0


def test_the_shortlist_bounds_the_round_trips_work():
    texts = [(f"Please add 12 and 30, variant {w}", 0) for w in ("one", "two", "three")]
    kept = static_survivors(
        texts, [_call("add", a=12, b=30)], RequestFilters(values=False, shortlist=2), RequestFunnel()
    )
    assert len(kept) == 2


def test_the_round_trip_drops_candidates_without_a_success_and_ranks_by_pass_rate():
    a, b, c = Candidate("A", 0, 0.25), Candidate("B", 1, 0.0), Candidate("C", 2, 0.75)
    d = Candidate("D", 0, 0.75)
    funnel = RequestFunnel()
    assert [x.request for x in ranked([a, b, c, d], RequestFilters(), funnel)] == ["C", "D", "A"]
    assert funnel.round_trip == 1
    off = RequestFunnel()
    assert [x.request for x in ranked([a, b, c, d], RequestFilters(round_trip=False), off)] == ["A", "B", "C", "D"]
    assert off.round_trip == 0
    assert pass_rate([1.0, 0.0, 0.0, 1.0]) == 0.5 and pass_rate([]) == 0.0


# ---- worked examples' requests ---------------------------------------------------------------------------------------


class _Writer:
    """A chat model double: per prompt, the replies of ``answers`` for the call the prompt shows."""

    name = "writer"

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers, self.prompts = answers, []

    def chat(self, convs, params):
        out = []
        for conv in convs:
            self.prompts.append(conv)
            name = next(k for k in self.answers if f"{k}(" in conv[-1].content)
            out.append([Completion(text=t) for t in self.answers[name][: params.n]])
        return out


def _requests(answers, trip, filters=RequestFilters(), per_framing: int = 2, shots: int = 0) -> ExampleRequests:
    writer = RequestWriter(Engine(_Writer(answers)), SamplingParams(seed=1), per_framing, framings=1, shots=shots)  # type: ignore[arg-type]
    return ExampleRequests(writer, filters, trip, "bfcl")


def test_the_bootstrap_shows_requests_kept_for_other_calls_never_the_asks_own():
    """Round 1 (zero-shot) keeps one request for add; round 2 shows it to every other ask as a chat turn, and the
    ask for add sees no request of its own call; given seeds, round 1 is skipped."""
    answers = {
        "add": ["What is 12 plus 30?", "Add 12 and 30 please."],
        "divide": ["What is the quotient?", "What is 9 over 3?"],
        "multiply": ["Times table", "Times table"],
    }
    model = _Writer(answers)
    writer = RequestWriter(Engine(model), SamplingParams(seed=1), 2, framings=1, shots=2)  # type: ignore[arg-type]
    executed = _executed() + [(_call("multiply", a=2, b=4), '{"result": 8}', None)]
    funnel = RequestFunnel()
    kept = writer.candidates([[e] for e in executed], RequestFilters(), funnel)
    assert [[c.request for c in sl] for sl in kept] == [
        ["What is 12 plus 30?", "Add 12 and 30 please."],
        ["What is 9 over 3?"],
        [],
    ]
    first, second = model.prompts[:3], model.prompts[3:]
    assert all(len(p) == 2 for p in first)  # zero-shot: system and ask
    shown = [[m.content for m in p[1:-1] if m.role == "assistant"] for p in second]
    assert shown == [["What is 9 over 3?"], ["What is 12 plus 30?"], ["What is 12 plus 30?", "What is 9 over 3?"]]
    assert funnel.candidates == 12 and funnel.duplicates == 3
    seeded = _Writer(answers)
    w2 = RequestWriter(Engine(seeded), SamplingParams(seed=1), 2, framings=1, shots=1)  # type: ignore[arg-type]
    seed = (_call("subtract", a=5, b=1), '{"result": 4}', None, "Take 1 away from 5.")
    w2.candidates([[e] for e in executed], RequestFilters(), RequestFunnel(), seeds=[seed])
    assert len(seeded.prompts) == 3 and all(p[2].content == "Take 1 away from 5." for p in seeded.prompts)
    off = _Writer(answers)
    RequestWriter(Engine(off), SamplingParams(seed=1), 2, framings=1, shots=0).candidates(  # type: ignore[arg-type]
        [[e] for e in executed], RequestFilters(), RequestFunnel()
    )
    assert len(off.prompts) == 3  # no bootstrap round


ARITH = load_config(None, ["env.family=arith"]).env


def _executed():
    return [
        (_call("add", a=12, b=30), '{"result": 42}', ADD),
        (_call("divide", a=9, b=3), '{"result": 3.0}', ToolSchema(name="divide", description="Divide two numbers.")),
    ]


def test_the_round_trip_is_leave_one_out_and_keeps_the_best_candidate_per_call():
    seen: dict[str, list[str]] = {}

    def trip(tasks, env_factory):
        out = []
        for t in tasks:
            env = env_factory()
            shown = [m.content for m in env.reset(t, None).examples if m.role == "user"]
            env.close()
            seen[t.query] = shown
            assert t.source == TaskSource.SYNTHETIC and t.reference_solution[0][0].name in ("add", "divide")
            out.append([1.0, 0.0, 0.0, 0.0] if "What is" in t.query else [1.0, 1.0, 0.0, 0.0])
        return out

    answers = {
        "add": ["What is 12 plus 30?", "Could you sum 12 and 30?"],
        "divide": ["Divide 9 by 3 for me.", "What is 9 over 3?"],
    }
    req = _requests(answers, trip)
    got = written_requests(_executed(), req, lambda: make_env(ARITH), sandbox_for(ARITH))
    assert got == ["Could you sum 12 and 30?", "Divide 9 by 3 for me."]  # 0.5 beats 0.25
    # a candidate for add is attempted with divide's provisional example only, and the reverse
    assert seen["What is 12 plus 30?"] == ["Divide 9 by 3 for me.", 'Tool results:\n[divide] {"result": 3.0}']
    assert seen["Divide 9 by 3 for me."] == ["What is 12 plus 30?", 'Tool results:\n[add] {"result": 42}']
    f = req.funnel
    assert (f.calls, f.candidates, f.round_trip, f.kept, f.fallback) == (2, 4, 0, 4, 0)


def test_a_call_whose_candidates_all_fail_falls_back_to_the_documented_template_counted():
    answers = {"add": ["Add a = 12 and b = 30.", "What is 12 plus 30?"], "divide": ["What is 9 over 3?", "oops"]}
    trip_calls: list[int] = []

    def trip(tasks, env_factory):
        trip_calls.append(len(tasks))
        return [[0.0, 0.0] if "12" in t.query else [1.0, 0.0] for t in tasks]

    req = _requests(answers, trip)
    got = written_requests(_executed(), req, lambda: make_env(ARITH), sandbox_for(ARITH))
    assert got == ["Add two numbers (12, 30).", "What is 9 over 3?"]  # the counted fallback states no name
    assert got[0] == unnamed_request(ADD, _call("add", a=12, b=30)) and not names_identifier(got[0], [_call("add")])
    assert trip_calls == [2]  # one round trip for every shortlisted candidate of every call
    f = req.funnel
    assert (f.identifiers, f.unparseable, f.round_trip, f.kept, f.fallback) == (1, 1, 1, 1, 1)


def test_without_the_round_trip_the_first_text_survivor_is_kept():
    answers = {"add": ["What is 12 plus 30?", "Sum 12 and 30."], "divide": ["What is 9 over 3?"]}
    req = _requests(answers, None)
    got = written_requests(_executed(), req, lambda: make_env(ARITH), sandbox_for(ARITH))
    assert got == ["What is 12 plus 30?", "What is 9 over 3?"]


def _trace(*calls: ToolCall) -> ExplorationTrace:
    t = ExplorationTrace(exploration_id="x", sandbox={})
    t.steps = [ExplorationStep(i, "", [c], "obs", True) for i, c in enumerate(calls)]
    return t


class _Explorer:
    def __init__(self, traces):
        self.traces = traces

    def explore(self, make_env, sandbox, runs, steps):
        return self.traces


def test_the_default_path_writes_the_models_own_words_with_no_template_around_them():
    """The request of a self-made example is the model's reply itself (cleaned of a label and quotes): no tool
    description, no appended arguments, no fixed text before or after it."""
    cfg = load_config(None, ["env.family=arith"])
    assert cfg.questioning.requests.mode == "backtranslate"  # the default
    answers = {"add": ['User: "Please work out 12 plus 30."'], "divide": ["How much is 9 split 3 ways?"]}
    req = _requests(answers, lambda tasks, f: [[1.0] for _ in tasks], per_framing=1)
    traces = [_trace(_call("add", a=12, b=30), _call("divide", a=9, b=3))]
    demos = make_self_examples(_Explorer(traces), lambda: make_env(ARITH), sandbox_for(ARITH), 8, req)  # type: ignore[arg-type]
    assert [d.request for d in demos] == ["Please work out 12 plus 30.", "How much is 9 split 3 ways?"]
    documented = make_self_examples(_Explorer(traces), lambda: make_env(ARITH), sandbox_for(ARITH), 8)  # type: ignore[arg-type]
    assert [d.request for d in documented] == [
        "Add two numbers (a = 12, b = 30).",
        "Divide one number by another (a = 9, b = 3).",
    ]


def test_every_tool_the_exploration_executed_gets_an_example():
    calls = [
        _call("add", a=1, b=2),
        _call("subtract", a=5, b=1),
        _call("multiply", a=2, b=3),
        _call("divide", a=8, b=2),
    ]
    demos = make_self_examples(_Explorer([_trace(*calls)]), lambda: make_env(ARITH), sandbox_for(ARITH), 8)  # type: ignore[arg-type]
    assert [d.call.name for d in demos] == ["add", "subtract", "multiply", "divide"]
    assert load_config(None, []).env.self_examples >= 4


# ---- synthesized tasks -----------------------------------------------------------------------------------------------


def _task(query: str, window: list[int], eid: str = "e1") -> Task:
    return Task(
        task_id=query,
        env_name="bfcl",
        query=query,
        reference_solution=[[_call("add", a=1, b=2)]],
        source=TaskSource.SYNTHETIC,
        metadata={"exploration_id": eid, "explored_steps": window},
    )


def _window_tasks() -> list[Task]:
    return [_task("A", [0]), _task("B", [0]), _task("C", [0]), _task("D", [1]), _task("E", [1], eid="e2")]


def test_synthesized_tasks_keep_one_phrasing_per_window_nearest_the_frontier():
    tasks = _window_tasks()
    rates = {"A": [1.0, 1.0, 1.0, 1.0], "B": [1.0, 0.0, 0.0, 0.0], "C": [1.0, 1.0, 0.0, 0.0], "D": [0.0] * 4}
    rates["E"] = [1.0] * 4
    funnel = Funnel()
    kept = round_tripped(tasks, lambda ts, f: [rates[t.task_id] for t in ts], lambda: None, funnel)  # type: ignore[arg-type,return-value]
    assert [t.query for t in kept] == ["C", "E"]  # p(1-p): 0.25 beats 0.1875 and 0; D never succeeded
    assert kept[0].metadata["curation"]["round_trip"] == {"rewards": [1.0, 1.0, 0.0, 0.0], "pass_rate": 0.5}
    assert (funnel.request_round_trip, funnel.request_other_phrasings) == (1, 2)
    off = Funnel()
    first = round_tripped(_window_tasks(), None, lambda: None, off)  # type: ignore[arg-type,return-value]
    assert [t.query for t in first] == ["A", "D", "E"] and off.request_round_trip == 0
    assert "round_trip" not in json.dumps(first[1].metadata)


def test_zero_shot_asks_under_every_framing_and_the_bootstrap_under_one_rotated():
    model = _Writer({"add": ["What is 12 plus 30?"], "divide": ["What is 9 over 3?"]})
    writer = RequestWriter(Engine(model), SamplingParams(seed=1), 1, framings=3, shots=1)  # type: ignore[arg-type]
    got = writer.sample([[e] for e in _executed()])
    assert [[f for _, f in row] for row in got] == [[0, 1, 2], [0, 1, 2]]
    assert [p[0].content for p in model.prompts] == [FRAMINGS[f][0] for f in (0, 1, 2)] * 2
    model.prompts.clear()
    seed = (_call("subtract", a=5, b=1), '{"result": 4}', None, "Take 1 away from 5.")
    got = writer.sample([[e] for e in _executed()], [[seed], [seed]])
    assert [[f for _, f in row] for row in got] == [[0], [1]]
    assert [p[0].content for p in model.prompts] == [FRAMINGS[0][0], FRAMINGS[1][0]]


def test_the_unnamed_fallback_states_the_values_and_no_name():
    assert unnamed_request(ADD, _call("add", a=12, b=30)) == "Add two numbers (12, 30)."
    assert unnamed_request(None, _call("ls")) == "Do this."
    assert unnamed_request(ToolSchema(name="cd"), _call("cd", folder="games")) == 'Do this ("games").'
    mv = unnamed_request(ToolSchema(name="mv", description="Move a file. Keeps it."), _call("mv", source="a", dest="b"))
    assert mv == 'Move a file ("a", "b").'


def test_a_candidate_request_has_a_one_line_token_budget():
    writer = RequestWriter(Engine(_Writer({})), SamplingParams(max_new_tokens=512, stop=("</x>",)), 3)  # type: ignore[arg-type]
    assert writer.params.max_new_tokens == 64 and writer.params.n == 3 and writer.params.stop == ("</x>", "\n")
    short = RequestWriter(Engine(_Writer({})), SamplingParams(max_new_tokens=48), 2)  # type: ignore[arg-type]
    assert short.params.max_new_tokens == 48


def test_the_synthesis_bootstrap_reads_the_models_own_example_requests_never_a_template():
    from evolvekit.env.action_text import format_call
    from evolvekit.env.bfcl.families import Demonstration
    from evolvekit.questioning.self_examples import example_messages
    from evolvekit.questioning.synthesize import request_seeds

    add, div = _call("add", a=12, b=30), _call("divide", a=9, b=3)
    demos = [
        Demonstration("Please work out 12 plus 30.", add, '{"result": 42}', "The result is 42."),
        Demonstration(unnamed_request(None, div), div, '{"result": 3.0}', "The result is 3.0."),  # a fallback
    ]
    seeds = request_seeds(example_messages(demos), {"add": ADD})
    assert seeds == [(add, '{"result": 42}', ADD, "Please work out 12 plus 30.")]
    assert format_call(add)  # the examples' calls are in the action format the environment shows


class _WriterOrAsk(_Writer):
    """The writer double, except that the documented mode's targeted ask gets ``ask``'s reply."""

    def __init__(self, answers: dict[str, list[str]], ask: str) -> None:
        super().__init__(answers)
        self.ask = ask

    def chat(self, convs, params):
        from evolvekit.questioning.synthesize import TARGETED_ASK

        if all(TARGETED_ASK in c[-1].content for c in convs):
            self.prompts += list(convs)
            return [[Completion(text=self.ask)] * params.n for _ in convs]
        return super().chat(convs, params)


def test_a_synthesis_window_whose_candidates_all_fail_falls_back_to_the_documented_ask_counted():
    """A window no back-translated candidate survived for gets the documented mode's targeted ask (the small model
    seldom writes a path or an id exactly); counted as the fallback, and only the bare window asks."""
    from evolvekit.config import DifficultyConfig
    from evolvekit.questioning.synthesize import TARGETED_ASK, TaskSynthesizer

    answers = {"add": ["What is 12 plus 30?"], "divide": ["Divide some numbers."]}
    model = _WriterOrAsk(answers, "Please divide 9 by 3.")
    writer = RequestWriter(Engine(model), SamplingParams(seed=1), 1, framings=1, shots=0)  # type: ignore[arg-type]
    synth = TaskSynthesizer(
        Engine(model),  # type: ignore[arg-type]
        SamplingParams(seed=1),
        DifficultyConfig(operations=1),
        targeted=True,
        writer=(writer, RequestFilters()),
    )
    rep = synth.synthesize([_trace(_call("add", a=12, b=30), _call("divide", a=9, b=3))], "bfcl")
    assert [t.query for t in rep.tasks] == ["What is 12 plus 30?", "Please divide 9 by 3."]
    assert (rep.requests.values, rep.requests.fallback, rep.unparseable) == (1, 1, 0)
    asked = [p for p in model.prompts if TARGETED_ASK in p[-1].content]
    assert len(asked) == 1 and '"divide"' in asked[0][-1].content and '"add"' not in asked[0][-1].content
    funnel = Funnel()
    add_requests(funnel, rep.requests)
    assert funnel.request_fallback == 1
    model.ask = "[0] divide"  # the targeted ask gives no request either: the window kept nothing
    rep = synth.synthesize([_trace(_call("add", a=12, b=30), _call("divide", a=9, b=3))], "bfcl")
    assert [t.query for t in rep.tasks] == ["What is 12 plus 30?"] and rep.requests.fallback == 0
    assert rep.unparseable == 1
