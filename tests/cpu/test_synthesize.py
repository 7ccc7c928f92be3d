"""Task synthesis (questioning/synthesize.py, AgentEvolver §3.2-3.3) without a model: the prompts, the parsers of a
synthesizer's answer, the worked examples made into shots, the values a chain's requests must state, the chains of
dependent calls, and the synthesizer's sampling (plain and numbers-constrained) with stand-ins for the LLM, the decode
batch and the tokenizer. Every expected value is written out by hand."""

from __future__ import annotations

import pytest

from evolvekit.config import DifficultyConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import format_call
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.explore import ExplorationStep, ExplorationTrace
from evolvekit.questioning.synthesize import (
    SYNTH_SYSTEM,
    TARGETED_ASK,
    TaskSynthesizer,
    _ngrams,
    _observation,
    best_request,
    carried,
    chain_prompt,
    chain_shots,
    chain_values,
    chains,
    distill,
    follow_up_prompt,
    follow_up_shots,
    parse_request,
    parse_synthesis,
    result_values,
    shots_from_examples,
    states_in_order,
    synthesis_prompt,
    targeted_prompt,
)
from evolvekit.types import ChatMessage, TaskSource, ToolCall


def _call(name, **arguments):
    return ToolCall(name=name, arguments=arguments)


def _user(text):
    return ChatMessage(role="user", content=text)


def _reply(*calls):
    return ChatMessage(role="assistant", content="".join(format_call(c) for c in calls))


def _result(name, value):
    return ChatMessage(role="user", content=f'Tool results:\n[{name}] {{"result": {value}}}')


def test_the_open_synthesis_prompt_lists_the_calls_the_difficulty_the_style_and_the_answer_format():
    calls = [(_call("add", a=1, b=2), "3"), (_call("ls"), "a b")]
    msgs = synthesis_prompt(calls, DifficultyConfig(entities=4, attributes=5, operations=6), ["short", "polite"], 7)
    assert [m.role for m in msgs] == ["system", "user"] and msgs[0].content == SYNTH_SYSTEM
    assert msgs[1].content == (
        "Executed calls:\n"
        f"[0] {format_call(calls[0][0])} -> 3\n[1] {format_call(calls[1][0])} -> a b\n\n"
        "Each request should involve about 4 entities, 5 attributes and 6 operations (fewer if the calls do not "
        "allow it).\nStyle: short; polite\n\n"
        "Write 7 requests, each exactly as:\nTask: <the user's request, self-contained, with every value it needs>\n"
        "Solution: <the numbers of the calls that solve it, in order, e.g. 0, 2>"
    )
    assert "Style" not in synthesis_prompt(calls, DifficultyConfig(), [], 1)[1].content  # no rubrics, no style line


def test_parse_synthesis_reads_task_and_solution_pairs_and_nothing_from_no_answer():
    text = "**Task:** Add 1 and 2\nSolution: 0\nTask: list\nSolution: [0, 5]\ntask: again\nsolution: 1 and 0"
    assert parse_synthesis(text, 2) == [("Add 1 and 2", [0]), ("again", [1, 0])]  # call 5 is not in the listing
    assert parse_synthesis("Task: list\nSolution: 2", 2) == []  # nor call 2 of two
    assert parse_synthesis(None, 2) == []  # type: ignore[arg-type]


def test_the_targeted_prompt_gives_each_shot_as_a_chat_turn_after_the_system_message():
    calls = [(_call("add", a=1, b=2), "3")]
    msgs = targeted_prompt(calls, [("[0] listing A", "Request A."), ("[0] listing B", "Request B.")])
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0].content == SYNTH_SYSTEM
    assert msgs[1].content == f"Executed calls:\n[0] listing A\n\n{TARGETED_ASK}" and msgs[2].content == "Request A."
    assert msgs[4].content == "Request B."
    assert msgs[5].content == f"Executed calls:\n[0] {format_call(calls[0][0])} -> 3\n\n{TARGETED_ASK}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Task: "Multiply 3 by X"', "Multiply 3 by X"),  # label and quotes go, the X stays
        ("\n\n  Add 2, 3\nmore", "Add 2, 3"),  # the first non-empty line; 8 characters is long enough
        ("Add 2,3", None),  # 7 are not
        ("a" * 400, "a" * 400),
        ("a" * 401, None),
        ('{"a": 1, "b": 2} please', None),  # a call's arguments, not a request
        ("Result of [1] is 1.0.", None),  # points into the listing
        ("Use <tool_call> to add", None),
        ("Write it with every value it needs.", None),  # echoes the instruction
        (None, None),
        ("**Task:** Add `2` and 3", "Add 2 and 3"),  # markdown emphasis and code marks go, then the label
        ("## Request: Add 2 and 3", "Add 2 and 3"),
    ],
)
def test_parse_request_keeps_a_requests_first_line_and_refuses_what_is_no_request(text, expected):
    assert parse_request(text) == expected


def test_ngrams_are_every_run_of_n_words():
    assert _ngrams("A b, c d", 2) == {("a", "b"), ("b", "c"), ("c", "d")}
    assert _ngrams("a b", 3) == set()


class _Agreement:
    """A tool-agreement stand-in: a request agrees when it names the first call's tool; every question is kept."""

    def __init__(self):
        self.asked = []

    def turn_agrees(self, request, calls):
        self.asked.append((request, list(calls)))
        return calls[0].name in request


def test_best_request_prefers_stated_values_then_tool_agreement_then_call_order():
    calls = [_call("add", a=2, b=5)]
    texts = ["Compute 2 and 5 together.", "Please add 2 and 5.", "Add the number 2 please."]
    assert best_request(texts, calls, [2, 5]) == "Compute 2 and 5 together."  # the first of the two stating both
    agreement = _Agreement()
    assert best_request(texts, calls, [2, 5], agreement) == "Please add 2 and 5."
    assert agreement.asked[0] == ("Compute 2 and 5 together.", calls)
    order = [[2, 5], [3]]
    in_order = ["Add 3 to 5 and 2 then.", "Add 2 and 5, then times 3."]
    assert best_request(in_order, calls, [2, 5, 3], order=order) == "Add 2 and 5, then times 3."
    assert best_request(["{}", "[1]"], calls, [2]) is None


@pytest.mark.parametrize(
    ("text", "per_call", "expected"),
    [
        ("Add 2 and 5, then multiply by 3.", [[2, 5], [3]], True),
        ("Add 2 and 3, then multiply by 5.", [[2, 5], [3]], False),
        ("Use 5 then 3.", [["s", 3], [5]], False),  # a string is not judged; the call's other values still are
        ("Use 5 then 3.", [[True, 3], [5]], False),  # nor a bool
        ("Use 5 and 3 and 2.", [[2, 5], [3]], False),  # each call's numbers end where its last one is
        ("2 plus 2", [[2], [2], [2]], False),  # two 2s serve two calls, not three
        ("2 plus 2", [[2], [2]], True),
        ("Add it to 9.", [[4], [9]], True),  # unstated values are not judged
    ],
)
def test_states_in_order_gives_each_call_its_own_values_after_the_previous_calls(text, per_call, expected):
    assert states_in_order(text, per_call) is expected


def test_a_worked_examples_result_is_shown_without_its_header_and_shortened():
    assert _observation(_result("add", 12)) == '[add] {"result": 12}'
    assert _observation(_user("")) == ""
    assert _observation(_user("x" * 301)) == "x" * 300


@pytest.mark.parametrize(
    ("observation", "values"),
    [
        ('[add] {"result": 11}', [11]),
        ('{"a": {"b": "x"}, "n": 3}', ["x", 3]),  # the whole object from its first brace to its last
        ('[ls] {"result": "ok"}; done', ["ok"]),
        ('{"result": "ok"}', ["ok"]),
        ("[add] 11 and 2.5", [11.0, 2.5]),  # no object: the numbers of the text
        ("[add] {broken} 4", [4.0]),
    ],
)
def test_result_values_are_the_leaves_of_the_results_object_else_its_numbers(observation, values):
    assert result_values(observation) == values


def test_a_later_call_carries_only_what_the_earlier_result_shows_and_its_arguments_did_not():
    assert carried((_call("add", a=1, b=10), '{"result": 11}'), _call("multiply", a=11, b=10)) == [11]
    assert carried((_call("add", a=5, b=0), '{"result": 5}'), _call("multiply", a=5, b=3)) == []


def _ladder(n):
    """add(1, 1) -> 2, then add(2, 3) -> 5, add(5, 4) -> 9, ...: each call takes the previous result."""
    calls, total = [(_call("add", a=1, b=1), '[add] {"result": 2}')], 2
    for k in range(1, n):
        b = k + 2
        calls.append((_call("add", a=total, b=b), f'[add] {{"result": {total + b}}}'))
        total += b
    return calls


def test_chains_link_each_call_to_its_nearest_predecessor_and_spread_over_the_exploration():
    calls = _ladder(6)
    assert chains(calls, 2, 5) == [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]
    assert chains(calls, 2, 3) == [[0, 1], [2, 3], [4, 5]]  # indices round(k * 4 / 2)
    assert chains(calls, 2, 2) == [[0, 1], [4, 5]]
    assert chains(calls, 3, 1) == [[0, 1, 2]]
    assert chains(calls, 2, 0) == [] and chains(calls, 1, 5) == []
    # the nearest predecessor two calls back; the list's last call never precedes its first
    gap = [(_call("add", a=1, b=10), '{"result": 11}'), (_call("add", a=7, b=8), '{"result": 15}')]
    gap.append((_call("multiply", a=11, b=3), '{"result": 33}'))
    assert chains(gap, 2, 5) == [[0, 2]]
    wrap = [(_call("multiply", a=11, b=2), '{"result": 22}'), (_call("add", a=1, b=10), '{"result": 11}')]
    assert chains(wrap, 2, 5) == []


def test_chain_values_leave_out_what_each_call_takes_from_the_previous_result():
    calls = _ladder(4)  # add(1, 1), add(2, 3), add(5, 4), add(9, 5)
    assert chain_values(calls, [0, 1, 2, 3]) == [[1, 1], [3], [4], [5]]
    assert chain_values(calls, [2, 3]) == [[5, 4], [5]]  # add(9, 5) takes 9 from add(5, 4)'s result
    loop = [(_call("add", a=17, b=3), '{"result": 20}'), (_call("add", a=20, b=-3), '{"result": 17}')]
    assert chain_values(loop, [0, 1]) == [[17, 3], [-3]]  # the first call takes nothing, not even from the last


def test_shots_from_examples_keep_self_contained_requests_with_their_calls_and_results():
    examples = [
        _user("Add 5 and 7."),
        _reply(_call("add", a=5, b=7)),
        _result("add", 12),
        _user("Multiply that by 3."),  # leaves 12 unstated: not self-contained
        _reply(_call("multiply", a=12, b=3)),
        _result("multiply", 36),
        _user("Add 1 and 2."),
        _user(format_call(_call("add", a=1, b=2))),  # a call the user wrote is no reply
        _result("add", 3),
        _user(""),  # an empty request, though it states every value of a call that has none, is no shot
        _reply(_call("ls")),
        _result("ls", 0),
        _user("Add 4 and 6 twice."),
        _reply(_call("add", a=4, b=6), _call("add", a=4, b=6)),
        _result("add", 10),
    ]
    a, b = format_call(_call("add", a=5, b=7)), format_call(_call("add", a=4, b=6))
    assert shots_from_examples(examples) == [
        (f'[0] {a} -> [add] {{"result": 12}}', "Add 5 and 7."),
        (f'[0] {b} -> [add] {{"result": 10}}\n[1] {b} -> [add] {{"result": 10}}', "Add 4 and 6 twice."),
    ]


def test_follow_up_shots_are_later_user_turns_that_take_a_value_from_the_earlier_result():
    add, mul = _call("add", a=5, b=7), _call("multiply", a=12, b=3)
    first = [_user("Add 5 and 7."), _reply(add), _result("add", 12)]
    later = [_user("Multiply that by 3."), _reply(mul), _result("multiply", 36)]
    listing = f'[0] {format_call(add)} -> [add] {{"result": 12}}\n[1] {format_call(mul)} -> [multiply] {{"result": 36}}'
    assert follow_up_shots(first + later) == [(listing, "Multiply that by 3.")]
    assert follow_up_shots(later) == []  # no earlier turn
    # a second call of the same turn (its "request" would be the tool result), a turn whose result is not a tool
    # result, a turn the user did not write: none is a shot
    assert follow_up_shots([*first, _reply(mul), _result("multiply", 36)]) == []
    assert follow_up_shots([*first, *later[:2], ChatMessage(role="assistant", content="It is 36.")]) == []
    assert follow_up_shots([*first, ChatMessage(role="assistant", content="Sure."), *later[1:]]) == []
    assert follow_up_shots([*first, _user(" "), *later[1:]]) == []  # an empty request is no shot


def test_chain_shots_are_one_request_answered_by_linked_calls():
    add, mul, add2 = _call("add", a=5, b=7), _call("multiply", a=12, b=3), _call("add", a=36, b=4)
    unlinked = [_user("Add 1 and 2, and 5 and 4."), _reply(_call("add", a=1, b=2)), _result("add", 3)]
    unlinked += [_reply(_call("add", a=5, b=4)), _result("add", 9)]  # takes nothing from 3: no link
    twice = [_user("Add 1 and 2 twice."), _reply(_call("add", a=1, b=2), _call("add", a=1, b=2)), _result("add", 3)]
    examples = [
        *unlinked,
        *twice,
        _user("Add 5 and 7, multiply by 3, add 4."),
        _reply(add),
        _result("add", 12),
        _reply(mul),
        _result("multiply", 36),
        _reply(add2),
        _result("add", 40),
    ]
    listing = (
        f'[0] {format_call(add)} -> [add] {{"result": 12}}\n[1] {format_call(mul)} -> [multiply] {{"result": 36}}\n'
        f'[2] {format_call(add2)} -> [add] {{"result": 40}}'
    )
    assert chain_shots(examples) == [(listing, "Add 5 and 7, multiply by 3, add 4.")]
    assert chain_shots([_user(" "), *examples[-6:]]) == []  # an empty request is no shot


def _trace(eid, calls, failed_at=(), sandbox=None):
    """An exploration whose steps are ``calls`` (call, observation); the steps in ``failed_at`` did not execute."""
    steps = [ExplorationStep(i, format_call(c), [c], obs, i not in failed_at) for i, (c, obs) in enumerate(calls)]
    return ExplorationTrace(eid, sandbox if sandbox is not None else {}, steps)


class _Chat:
    """A chat-only synthesizer stand-in: ``answer(conversation, candidate)`` per prompt and candidate; every call
    recorded."""

    name = "chat"

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def chat(self, convs, params):
        self.calls.append((list(convs), params))
        return [[Completion(text=self.answer(conv, c)) for c in range(params.n)] for conv in convs]


def test_open_synthesis_makes_tasks_from_each_usable_traces_answer_with_its_sandbox_and_reference():
    add, mul, ls = _call("add", a=1, b=2), _call("multiply", a=3, c=4), _call("ls")
    sandbox = {"initial_config": {"files": ["x"]}, "seed": 3}
    t1 = _trace("e1", [(add, "3"), (ls, "error"), (mul, "12")], failed_at={1}, sandbox=sandbox)
    t2 = _trace("e2", [(ls, "error")], failed_at={0})  # nothing executed: not usable
    t3 = _trace("e3", [(ls, "a b")])
    cat = _call("cat", path="x")
    t4 = _trace("e4", [(cat, "hello")])
    answers = {"add": "Task: Add 1 and 2, then multiply 3 by 4\nSolution: 0, 1", "ls": "no tasks here"}
    answers["cat"] = "Task: Show the file x\nSolution: 0"
    llm = _Chat(lambda conv, c: next(v for k, v in answers.items() if f'"name": "{k}"' in conv[-1].content))
    difficulty = DifficultyConfig(entities=1, attributes=2, operations=2)
    params = SamplingParams(seed=4, stop=("</x>",))
    synth = TaskSynthesizer(Engine(llm), params, difficulty, rubrics=["short"], tasks_per_trace=5)  # type: ignore[arg-type]
    metadata = {"round": 1}
    report = synth.synthesize([t1, t2, t3, t4], "arith", metadata)
    ((prompts, used),) = llm.calls
    assert used == params  # the role's own sampling, one answer per trace
    assert prompts == [
        synthesis_prompt([(add, "3"), (mul, "12")], difficulty, ["short"], 5),
        synthesis_prompt([(ls, "a b")], difficulty, ["short"], 5),
        synthesis_prompt([(cat, "hello")], difficulty, ["short"], 5),
    ]
    assert report.calls == 3 and report.unparseable == 1 and report.unchained == 0
    task, shown = report.tasks
    assert shown.query == "Show the file x" and shown.initial_config == {}  # a sandbox without a start
    assert task.query == "Add 1 and 2, then multiply 3 by 4" and task.reference_solution == [[add, mul]]
    assert task.env_name == "arith" and task.source == TaskSource.SYNTHETIC and task.task_id.startswith("syn-")
    assert task.initial_config == {"files": ["x"]}  # the explored sandbox's start
    assert task.metadata == {"round": 1, "exploration_id": "e1", "explored_steps": [0, 1]}
    assert (task.difficulty.entities, task.difficulty.attributes, task.difficulty.operations) == (2, 3, 2)
    assert metadata == {"round": 1}  # the caller's metadata is copied, not written
    assert synth.synthesize([t2], "arith").tasks == [] and len(llm.calls) == 1  # nothing usable: no call


def _scripted(difficulty, answers, **kw):
    """A synthesizer whose ``_requests`` is a recorder answering ``answers``, with a tool-agreement stand-in:
    (synthesizer, the recorded (prompts, values) calls, the agreement)."""
    agreement = _Agreement()
    synth = TaskSynthesizer(
        Engine(_Chat(lambda conv, c: "")),  # type: ignore[arg-type]
        SamplingParams(seed=1),
        difficulty,
        agreement=agreement,  # type: ignore[arg-type]
        **kw,
    )
    seen = []

    def requests(prompts, values):
        seen.append((prompts, values))
        return answers

    synth._requests = requests  # type: ignore[method-assign]
    return synth, seen, agreement


def test_targeted_synthesis_asks_for_each_window_and_keeps_the_best_of_its_candidates():
    calls = [(_call("add", a=2, b=5), "7"), (_call("multiply", a=3, b=4), "12"), (_call("add", a=6, b=1), "7")]
    shots = [("[0] listing", "Shot request.")]
    answers = [["Compute 2 and 5 now.", "Please add 2 and 5."], ["{}", "[1] result"], ["short", "{}"]]
    synth, seen, agreement = _scripted(
        DifficultyConfig(operations=1), answers, tasks_per_trace=3, targeted=True, shots=shots, candidates=2
    )
    report = synth.synthesize([_trace("e", calls)], "arith")
    ((prompts, values),) = seen
    assert prompts == [targeted_prompt([c], shots) for c in calls]  # one window per call
    assert values == [[2, 5], [3, 4], [6, 1]]  # each window's own values
    assert report.unparseable == 2 and [t.query for t in report.tasks] == ["Please add 2 and 5."]
    assert report.tasks[0].reference_solution == [[calls[0][0]]] and report.tasks[0].metadata["explored_steps"] == [0]
    assert agreement.asked[0] == ("Compute 2 and 5 now.", [calls[0][0]])


def test_multi_turn_synthesis_asks_one_request_per_turn_of_each_chain():
    ladder = _ladder(4)  # add(1, 1) -> 2, add(2, 3) -> 5, add(5, 4) -> 9, add(9, 5) -> 14
    shots, follow = [("[0] a", "First.")], [("[0] b\n[1] c", "Then.")]
    answers = [["Add 1 and 1."], ["Add 3 to that."], ["Add 2 and 3."], ["{}"], ["{}"], ["Add 5 to it."]]
    synth, seen, agreement = _scripted(
        DifficultyConfig(turns=2), answers, tasks_per_trace=5, shots=shots, follow_shots=follow
    )
    lonely = _trace("none", [(_call("ls"), "a b")])
    report = synth.synthesize([_trace("e", ladder, sandbox={"initial_config": {"n": 1}}), lonely], "arith_turns")
    ((prompts, values),) = seen
    assert prompts == [
        targeted_prompt([ladder[0]], shots),
        follow_up_prompt(ladder[0], ladder[1], follow),
        targeted_prompt([ladder[1]], shots),
        follow_up_prompt(ladder[1], ladder[2], follow),
        targeted_prompt([ladder[2]], shots),
        follow_up_prompt(ladder[2], ladder[3], follow),
    ]
    assert values == [[1, 1], [3], [2, 3], [4], [5, 4], [5]]  # a later turn does not state what it takes
    assert report.unchained == 1 and report.unparseable == 2  # the trace without a chain; chains 2 and 3
    (task,) = report.tasks
    assert task.query == ["Add 1 and 1.", "Add 3 to that."] and task.reference_solution == [
        [ladder[0][0]],
        [ladder[1][0]],
    ]
    assert task.metadata == {"exploration_id": "e", "explored_steps": [0, 1], "carried_values": [[], [2]]}
    assert task.initial_config == {"n": 1}
    assert agreement.asked[1] == ("Add 3 to that.", [ladder[1][0]])  # each turn judged against its own call


def test_chained_synthesis_asks_one_request_over_each_chain_of_dependent_calls():
    ladder = _ladder(4)
    shots = [("[0] a\n[1] b", "Both.")]
    answers = [["First add 3 and 1 and 1.", "Add 1 and 1, then add 3."], ["{}"], ["[0]"]]
    synth, seen, agreement = _scripted(
        DifficultyConfig(operations=2, chained=True), answers, tasks_per_trace=5, chain_shots=shots
    )
    lonely = _trace("none", [(_call("ls"), "a b")])
    report = synth.synthesize([_trace("e", ladder, sandbox={"initial_config": {"n": 2}}), lonely], "arith_chain")
    ((prompts, values),) = seen
    assert prompts == [
        chain_prompt(ladder[:2], shots),
        chain_prompt(ladder[1:3], shots),
        chain_prompt(ladder[2:], shots),
    ]
    assert values == [[1, 1, 3], [2, 3, 4], [5, 4, 5]]
    assert report.unchained == 1 and report.unparseable == 2
    (task,) = report.tasks
    assert task.query == "Add 1 and 1, then add 3."  # both state 1, 1, 3 and ask to add; only this one in call order
    assert task.reference_solution == [[ladder[0][0], ladder[1][0]]]  # one turn: the whole chain
    assert task.metadata == {"exploration_id": "e", "explored_steps": [0, 1], "carried_values": [[2]]}
    assert task.initial_config == {"n": 2}
    assert agreement.asked[0] == ("First add 3 and 1 and 1.", [ladder[0][0], ladder[1][0]])


def test_the_synthesizers_plain_requests_are_its_candidates_per_prompt_each_one_line():
    llm = _Chat(lambda conv, c: f"{conv[-1].content}:{c}")
    synth = TaskSynthesizer(
        Engine(llm), SamplingParams(seed=7, stop=("</x>",)), DifficultyConfig(), candidates=3, numbers_constrained=True
    )  # type: ignore[arg-type]
    assert synth.numbers_constrained is False  # asked for, but a chat-only model cannot be constrained
    plain = TaskSynthesizer(Engine(llm), SamplingParams(), DifficultyConfig())  # type: ignore[arg-type]
    assert (plain.tasks_per_trace, plain.candidates, plain.targeted) == (3, 1, False)  # the defaults
    prompts = [[_user("p")], [_user("q")]]
    assert synth._requests(prompts, [[1], [2]]) == [["p:0", "p:1", "p:2"], ["q:0", "q:1", "q:2"]]
    ((_, params),) = llm.calls
    assert params == SamplingParams(n=3, seed=7, stop=("</x>", "\n"))
    assert synth._requests([], []) == [] and len(llm.calls) == 1
    synth.start_round(5)
    assert synth.params.seed == 12
    synth.start_round(6)
    assert synth.params.seed == 13  # from the role's seed, not the last round's


class _Tokenizer:
    """A twelve-token vocabulary: end and padding, the ten digits, a point, a space, a word and a mixed token."""

    vocab = ["<eos>", "<pad>", *"0123456789", ".", " ", "a", "1st"]
    all_special_ids = [0, 1]

    def __len__(self):
        return len(self.vocab)

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


class _Batch:
    def __init__(self):
        self.generator, self.added = None, []

    def add(self, rows, text_prefixes, constraints):
        assert text_prefixes is None  # a request's reply starts empty
        self.added.append((list(rows), list(constraints)))

    def run(self):
        rows, constraints = self.added[-1]
        return {k: Completion(text=f"{k}:{'/'.join(sorted(c.complete))}") for (k, _), c in zip(rows, constraints)}


class _Local:
    """An in-process synthesizer's stand-in: its tokenizer, a chat template and decode batches, each recorded."""

    name = "local"
    eos_ids = [0]

    def __init__(self):
        self.tokenizer, self.batches = _Tokenizer(), []

    def decode_batch(self, params, keep_rows=False):
        self.batches.append((params, keep_rows, _Batch()))
        return self.batches[-1][2]

    def apply_chat_template(self, messages):
        return [len(m.content) for m in messages]


def test_numbers_constrained_requests_decode_every_candidate_under_its_own_prompts_numbers():
    from evolvekit.llm.constrain import NumberConstraint, NumberVocabulary

    local = _Local()
    params = SamplingParams(seed=7, stop=("</x>",))
    synth = TaskSynthesizer(Engine(local), params, DifficultyConfig(), candidates=2, numbers_constrained=True)  # type: ignore[arg-type]
    assert synth.numbers_constrained
    prompts = [[_user("p")], [_user("qq"), _user("r")]]
    out = synth._requests(prompts, [[14, 8.0], ["s", 7]])
    assert out == [["(0, 0):14/8/8.0", "(0, 1):14/8/8.0"], ["(1, 0):7", "(1, 1):7"]]
    ((used, keep_rows, batch),) = local.batches
    assert used == SamplingParams(n=1, seed=7, stop=("</x>", "\n")) and keep_rows is False  # one row per candidate
    assert batch.generator is not None and batch.generator.initial_seed() == 7
    ((rows, constraints),) = batch.added
    assert rows == [((0, 0), [1]), ((0, 1), [1]), ((1, 0), [2, 1]), ((1, 1), [2, 1])]  # each prompt's template ids
    vocab = synth._numbers
    assert isinstance(vocab, NumberVocabulary) and all(isinstance(c, NumberConstraint) for c in constraints)
    assert all(c.vocab is vocab for c in constraints)
    assert vocab.digits == {i + 2: str(i) for i in range(10)} and vocab.dots == [12]
    assert vocab.after_stop.tolist() == [0, 13]  # the end, and the token that starts with a space
    synth._requests(prompts[:1], [[3]])
    assert synth._numbers is vocab and len(local.batches) == 2  # the vocabulary is sorted once
    unseeded = TaskSynthesizer(Engine(_Local()), SamplingParams(), DifficultyConfig(), numbers_constrained=True)  # type: ignore[arg-type]
    unseeded._requests(prompts[:1], [[3]])
    assert unseeded.engine.llm.batches[0][2].generator is None  # type: ignore[attr-defined]
    assert TaskSynthesizer(Engine(_Local()), params, DifficultyConfig()).numbers_constrained is False  # type: ignore[arg-type]


def test_distill_keeps_the_executed_calls_in_order_with_results_cut_at_300_characters():
    add, ls = _call("add", a=1, b=2), _call("ls")
    trace = _trace("e", [(add, "x" * 301), (ls, "error"), (ls, "a b")], failed_at={1})
    assert distill(trace) == [(add, "x" * 300), (ls, "a b")]
    assert distill(trace, max_chars=2) == [(add, "xx"), (ls, "a ")]


def test_windows_spread_over_the_exploration_by_hand():
    from evolvekit.questioning.synthesize import windows

    assert windows(10, 3, 2) == [[0, 1, 2], [7, 8, 9]]  # the first and the last window
    assert windows(10, 3, 3) == [[0, 1, 2], [4, 5, 6], [7, 8, 9]]
    assert windows(3, 5, 4) == [[0, 1, 2]]  # fewer calls than the size: one window of them all
