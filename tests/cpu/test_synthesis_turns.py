"""Self-questioning's multi-turn and chained synthesis: carried values link explored calls, follow-up and chain shots
come from the run's own examples, grounding checks each turn, request candidates keep the one that states its values,
and the number constraint (moved out of test_questioning.py)."""

from __future__ import annotations

import pytest
from test_questioning import _ONE_EXPLORATION, PERSON, _synthesize_once

from evolvekit.config import load_config
from evolvekit.engine.base import Engine
from evolvekit.env.base import Action
from evolvekit.env.registry import make_env
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.questioning.curate import replay_feasible
from evolvekit.questioning.explore import (
    ExplorationStep,
)
from evolvekit.types import Task, ToolCall


def test_carried_values_links_and_chains_of_explored_calls():
    from evolvekit.questioning.synthesize import carried, chains, links, result_values

    add = (ToolCall(name="add", arguments={"a": 1, "b": 10}), '[add] {"result": 11}')
    mul = (ToolCall(name="multiply", arguments={"a": 11, "b": 3}), '[multiply] {"result": 33}')
    both = (ToolCall(name="add", arguments={"a": 33, "b": 33}), '[add] {"result": 66}')
    own = (ToolCall(name="add", arguments={"a": 1, "b": 2}), '[add] {"result": 3}')  # 1 is add's own value
    div = (ToolCall(name="divide", arguments={"a": 33, "b": 11.0}), '[divide] {"result": 3.0}')
    assert result_values('[add] {"result": 11}') == [11] and result_values("no json 2.5 here") == [2.5]
    assert carried(add, mul[0]) == [11] and carried(add, own[0]) == [] and carried(mul, div[0]) == [33]
    assert links(add, mul[0]) and not links(mul, both[0])  # add(33, 33) takes both values: nothing left to ask
    calls = [add, mul, both, own, div]
    assert chains(calls, 2, 5) == [[0, 1], [1, 4]]  # divide's nearest linked predecessor is multiply
    assert chains(calls, 3, 5) == [[0, 1, 4]] and chains(calls, 2, 1) == [[0, 1]] and chains(calls, 1, 5) == []


def test_follow_up_shots_come_from_the_real_arith_turns_examples():
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.synthesize import follow_up_shots

    cfg = load_config(None, [*PERSON, "env.family=arith_turns"])
    env = make_env(cfg.env)
    examples = env.reset(None, sandbox_for(cfg.env)).examples
    env.close()
    shots = follow_up_shots(examples)
    assert [r for _, r in shots] == [
        "Now multiply the result by 3.",
        "Multiply that by 2.",
        "Now take that sum times 5.",
    ]
    assert '"a": 12' in shots[0][0] and '"result": 12' in shots[0][0]  # the earlier call's result and the carried 12
    cfg1 = load_config(None, [*PERSON, "env.family=arith"])  # one-call examples have no follow-up turn
    env = make_env(cfg1.env)
    assert follow_up_shots(env.reset(None, sandbox_for(cfg1.env)).examples) == []
    env.close()


def test_grounding_checks_each_turn_and_skips_values_taken_from_a_result():
    from evolvekit.questioning.curate import grounding, numbers_exact

    ref = [
        [ToolCall(name="add", arguments={"a": 15, "b": 5})],
        [ToolCall(name="multiply", arguments={"a": 20, "b": 5})],
    ]
    meta = {"carried_values": [[], [20]]}

    def task(turns, metadata=meta):
        return Task(env_name="bfcl", query=turns, reference_solution=ref, metadata=metadata)

    assert grounding(task(["Add 15 and 5.", "Multiply that by 5."])) == 1.0 and numbers_exact(
        task(["Add 15 and 5.", "Multiply that by 5."])
    )
    assert grounding(task(["Add 15 and 5.", "Multiply that by 2."])) == 2 / 3  # the 5 of turn 2 is stated in turn 1
    assert grounding(task(["Add 15 and 5.", "Multiply that by 5."], {})) == 3 / 4  # 20 must be stated without carry
    assert not numbers_exact(task(["Add 15 and 5.", "Multiply 20 by 5."]))  # the carried value is not to be stated


def test_pipeline_turns_2_writes_two_turn_tasks_from_linked_calls():
    """The scripted explorer calls add(2, 5) -> 7, multiply(7, 3) -> 21, power (refused), divide(21, 7); with
    difficulty.turns = 2 every kept task has two turns, its second call taking the first's result; with 1, none does."""

    def synth(conv):
        ask = conv[-1].content
        if "Solution:" in ask:  # the paper's free prompt (one-turn tasks)
            return "Task: Add 2 and 5.\nSolution: 0\n"
        if "next request" in ask:  # a follow-up turn
            return "Multiply that by 3." if '"multiply"' in ask.split("[1]")[1] else "Divide that by 7."
        return "Add 2 and 5." if '"add"' in ask else "Multiply 7 by 3."

    for turns in (2, 1):
        cfg = load_config(None, _ONE_EXPLORATION + [f"questioning.difficulty.turns={turns}"])
        tasks, funnel, _ = _synthesize_once(cfg, synth)
        if turns == 1:
            assert [len(t.turns) for t in tasks] == [1]
            continue
        assert funnel.unchained == 0 and funnel.infeasible == 0
        assert [t.turns for t in tasks] == [
            ["Add 2 and 5.", "Multiply that by 3."],
            ["Multiply 7 by 3.", "Divide that by 7."],
        ]
        assert [[c.name for turn in t.reference_solution for c in turn] for t in tasks] == [
            ["add", "multiply"],
            ["multiply", "divide"],
        ]
        assert tasks[0].metadata["carried_values"] == [[], [7]] and tasks[1].metadata["carried_values"] == [[], [21]]
        for t in tasks:  # every reference replays turn by turn and passes the official checker
            assert replay_feasible(t, lambda env_cfg=cfg.env: make_env(env_cfg))[0]


def test_pipeline_chained_writes_one_request_over_linked_calls():
    """difficulty.chained with operations = 2: the scripted explorer's add(2, 5) -> 7, multiply(7, 3) -> 21 and
    divide(21, 7) become single-turn tasks whose one request covers two dependent calls; the reference is the chain,
    so an agent that answers after the first call fails the environment's check, and the values taken from a result
    are not asked of the request. Off, the same explorations give one-call tasks."""
    from evolvekit.questioning.curate import grounding, numbers_exact
    from evolvekit.questioning.synthesize import CHAIN_ASK

    seen = []

    def synth(conv):
        ask = conv[-1].content
        if "Solution:" in ask:  # the paper's free prompt (one-request tasks, chosen calls)
            return "Task: Add 2 and 5.\nSolution: 0\n"
        seen.append(conv)
        listing = ask.split("[1]")[0]
        return (
            "Add 2 and 5, then multiply the sum by 3."
            if '"add"' in listing
            else "Multiply 7 by 3, then divide that by 7."
        )

    chained = ["questioning.difficulty.chained=true", "questioning.difficulty.operations=2"]
    cfg = load_config(None, _ONE_EXPLORATION + chained + ["questioning.grounding_threshold=1.0"])
    tasks, funnel, _ = _synthesize_once(cfg, synth)
    assert funnel.unchained == 0 and funnel.infeasible == 0 and funnel.ungrounded == 0
    assert [t.query for t in tasks] == [
        "Add 2 and 5, then multiply the sum by 3.",
        "Multiply 7 by 3, then divide that by 7.",
    ]
    assert [[[c.name for c in turn] for turn in t.reference_solution] for t in tasks] == [
        [["add", "multiply"]],
        [["multiply", "divide"]],
    ]
    assert [t.metadata["carried_values"] for t in tasks] == [[[7]], [[21]]]
    assert all(grounding(t) == 1.0 and numbers_exact(t) for t in tasks)
    # the arith family's examples have no chained request: the synthesizer's chain prompt has no worked example
    assert seen and all(CHAIN_ASK in conv[-1].content for conv in seen)
    assert all(m.role != "assistant" for conv in seen for m in conv)
    for t in tasks:
        assert replay_feasible(t, lambda env_cfg=cfg.env: make_env(env_cfg))[0]
        first_only = t.model_copy(update={"reference_solution": [t.reference_solution[0][:1]]})
        env = make_env(cfg.env)  # the first call alone, judged against the chain: the check fails
        try:
            env.reset(t)
            env.step(Action(tool_calls=first_only.reference_solution[0]))
            env.step(Action(text="done"))
            assert env.evaluate(None).score < 1.0
        finally:
            env.close()
    off = load_config(None, _ONE_EXPLORATION + ["questioning.difficulty.operations=1"])
    tasks, _, _ = _synthesize_once(off, synth)
    assert tasks and all(len(t.reference_solution) == 1 and len(t.reference_solution[0]) == 1 for t in tasks)


def test_a_request_over_a_chain_prefers_each_calls_values_in_order():
    """The 135M synthesizer writes "Compute the sum of 2.5 and 1.5, and multiply it by 2.5." for add(2.5, 1.5) ->
    4.0, multiply(4.0, 1.5): every value stated, the multiplier wrong. Among candidates, one that gives each call
    its own numbers wins."""
    from evolvekit.questioning.synthesize import best_request, states_in_order

    assert states_in_order("Add 2 and 5, then multiply the sum by 3.", [[2, 5], [3]])
    assert states_in_order("Add 2 and 3, then multiply that by 3.", [[2, 3], [3]])  # a value both calls use
    assert not states_in_order("Add 2 and 3, then multiply it by 5.", [[2, 5], [3]])
    assert not states_in_order("Compute the sum of 2.5 and 1.5, and multiply it by 2.5.", [[2.5, 1.5], [1.5]])
    assert states_in_order("Multiply it by 3.", [[2, 5], [3]])  # unstated values are not judged
    calls = [
        ToolCall(name="add", arguments={"a": 2.5, "b": 1.5}),
        ToolCall(name="multiply", arguments={"a": 4.0, "b": 1.5}),
    ]
    texts = [
        "Compute the sum of 2.5 and 1.5, and multiply it by 2.5.",
        "Add 2.5 and 1.5, then multiply the sum by 1.5.",
    ]
    assert best_request(texts, calls, [2.5, 1.5, 1.5]) == texts[0]  # without the order: the first on a tie
    assert best_request(texts, calls, [2.5, 1.5, 1.5], order=[[2.5, 1.5], [1.5]]) == texts[1]


def test_chain_shots_come_from_the_real_arith_chain_examples():
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.synthesize import chain_shots

    cfg = load_config(None, [*PERSON, "env.family=arith_chain"])
    env = make_env(cfg.env)
    shots = chain_shots(env.reset(None, sandbox_for(cfg.env)).examples)
    env.close()
    assert [r for _, r in shots] == [
        "Add 5 and 7, then multiply the sum by 3.",
        "What is (20 plus 4) times 2?",
        "Compute the sum of 9 and 6, and multiply it by 5.",
    ]
    assert '"result": 12' in shots[0][0] and '"a": 12' in shots[0][0]  # the first result and the call that takes it
    for family in ("arith", "arith_turns"):  # one call per request: nothing chained to show
        cfg = load_config(None, [*PERSON, f"env.family={family}"])
        env = make_env(cfg.env)
        assert chain_shots(env.reset(None, sandbox_for(cfg.env)).examples) == []
        env.close()


def test_chained_needs_one_turn_and_two_operations():
    from evolvekit.errors import ConfigError

    for bad in (["questioning.difficulty.operations=1"], ["questioning.difficulty.turns=2"]):
        with pytest.raises(ConfigError, match="questioning.difficulty.chained"):
            load_config(None, ["questioning.difficulty.chained=true", *bad])
    assert load_config(None, ["questioning.difficulty.chained=true", "questioning.difficulty.operations=2"])


class _Candidates:
    """A scripted LLM that answers every conversation with the given candidate texts (n of them)."""

    name = "candidates"

    def __init__(self, texts):
        self.texts = texts

    def chat(self, conversations, params):
        return [[Completion(text=t) for t in self.texts[: params.n]] for _ in conversations]


def test_request_candidates_keep_the_one_that_states_its_values():
    from evolvekit.config import DifficultyConfig
    from evolvekit.questioning.explore import ExplorationTrace
    from evolvekit.questioning.synthesize import TaskSynthesizer

    call = ToolCall(name="add", arguments={"a": 4, "b": 9})
    trace = ExplorationTrace("e1", {}, [ExplorationStep(0, "", [call], '{"result": 13}', True)])
    llm = _Candidates(["Add 3 and 9.", "sure", "Add 4 and 9.", "Add 4 and 9 now."])
    for n, expected in ((1, "Add 3 and 9."), (4, "Add 4 and 9.")):
        rep = TaskSynthesizer(
            Engine(llm),
            SamplingParams(),
            DifficultyConfig(operations=1),
            tasks_per_trace=1,
            targeted=True,
            candidates=n,
        ).synthesize([trace], "bfcl")
        assert [t.query for t in rep.tasks] == [expected]


def test_numbers_constrained_needs_an_in_process_synthesizer():
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="questioning.numbers_constrained: on needs an in-process synthesizer"):
        load_config(None, ["questioning.numbers_constrained=on", "models.synthesizer.backend=openai"])
    assert load_config(None, ["questioning.numbers_constrained=auto", "models.synthesizer.backend=openai"])


@pytest.mark.slow
def test_numbers_constrained_synthesizer_states_only_its_calls_values(smollm2):
    """The embedded 135M synthesizer, asked for follow-up turns with the real arith_turns shots: unconstrained it
    writes numbers its call does not have (it copies the shots' 3, 2 and 5); constrained, only the call's own."""
    import re

    from evolvekit.config import DifficultyConfig
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.synthesize import TaskSynthesizer, follow_up_prompt, follow_up_shots

    cfg = load_config(None, [*PERSON, "env.family=arith_turns"])
    env = make_env(cfg.env)
    shots = follow_up_shots(env.reset(None, sandbox_for(cfg.env)).examples)
    env.close()
    pairs = [
        ((ToolCall(name="add", arguments={"a": 14, "b": 8}), '[add] {"result": 22}'), ("multiply", 22, 7)),
        ((ToolCall(name="add", arguments={"a": 30, "b": 11}), '[add] {"result": 41}'), ("multiply", 41, 6)),
    ]
    prompts = [
        follow_up_prompt(prev, (ToolCall(name=n, arguments={"a": a, "b": b}), f'[{n}] {{"result": {a * b}}}'), shots)
        for prev, (n, a, b) in pairs
    ]
    own = [[7], [6]]  # the values each follow-up must state (22 and 41 come from the earlier result)

    def numbers(constrained):
        synth = TaskSynthesizer(
            Engine(smollm2),
            SamplingParams(temperature=1.0, max_new_tokens=24, seed=0),
            DifficultyConfig(),
            candidates=8,
            numbers_constrained=constrained,
        )
        texts = synth._requests(prompts, own)
        return [{float(x) for t in ts for x in re.findall(r"\d+(?:\.\d+)?", t)} for ts in texts]

    free = numbers(False)
    assert any(found - {float(v) for v in vals} for found, vals in zip(free, own))
    for found, vals in zip(numbers(True), own):
        assert found and found <= {float(v) for v in vals}


def test_malformed_carried_values_in_a_task_file_are_ignored_not_trusted():
    """``metadata.carried_values`` comes from task files too: any shape other than a list of lists counts as none, and
    nothing in it is evaluated."""
    from evolvekit.questioning.curate import carried_values, grounding, numbers_exact

    ref = [
        [ToolCall(name="add", arguments={"a": 15, "b": 5})],
        [ToolCall(name="multiply", arguments={"a": 20, "b": 5})],
    ]
    turns = ["Add 15 and 5.", "Multiply that by 5."]
    for bad in ("__import__('os').system('x')", {"a": 1}, [None, "20"], 7, [[{"x": 1}], [[20]]]):
        t = Task(env_name="bfcl", query=turns, reference_solution=ref, metadata={"carried_values": bad})
        assert all(isinstance(vs, list) for vs in carried_values(t))
        assert grounding(t) == 3 / 4 and not numbers_exact(t)  # 20 is not excused: it must be stated
