"""Task curation (questioning/curate.py, AgentEvolver §3.3) with stand-ins: the dedup's thresholds at their edges,
its counts, the text it compares and embeds (once per task), the feasibility replay's verdicts and reasons against a
recording environment, and the grounding checks' value matching and turn pairing."""

from __future__ import annotations

import numpy as np
import pytest

from evolvekit.env.base import CallResult, EvalResult, StepResult, ToolSchema
from evolvekit.errors import EnvError
from evolvekit.questioning.curate import (
    Deduplicator,
    ToolAgreement,
    grounding,
    lexical_overlap,
    passes_without_acting,
    replay_feasible,
    same_value,
)
from evolvekit.types import Task, ToolCall


def _task(query, calls=(), tid="t"):
    refs = [list(turn) for turn in calls] if calls else None
    return Task(task_id=tid, env_name="bfcl", query=query, reference_solution=refs)


def test_lexical_overlap_of_empty_texts():
    assert lexical_overlap("", "?!") == 1.0  # neither states a word: the same request
    assert lexical_overlap("", "add 3") == 0.0 and lexical_overlap("add 3", "") == 0.0


def test_the_default_thresholds_and_their_edges_count_as_duplicates():
    """0.8 lexical and 0.9 semantic are the paper's; a task exactly at a threshold is a duplicate (≥)."""
    dedup = Deduplicator(None)
    dedup.seed([_task("a b c d e")])
    got = dedup.filter([_task("a b c d"), _task("a b c d e f"), _task("a b c x y"), _task("a b c d")])
    # 4/5 = 0.8 and 5/6: duplicates, each counted; 3/7: kept
    assert [t.query for t in got.kept] == ["a b c x y"] and got.lexical_duplicates == 3

    a, b = np.array([1.0, 0.0], np.float32), np.array([0.6, 0.8], np.float32)
    table = {"first one": a, "second": b, "again second": b, "third": np.array([0.0, 1.0], np.float32)}
    edge = float(np.max(np.stack([a]) @ b))  # the cosine the filter computes for "second" against "first one"
    dedup = Deduplicator(
        lambda texts: np.stack([table[t] for t in texts]), lexical_threshold=0.99, semantic_threshold=edge
    )
    dedup.seed([_task("first one")])
    got = dedup.filter([_task("second"), _task("third"), _task("again second")])
    assert [t.query for t in got.kept] == ["third"] and got.semantic_duplicates == 2
    same = Deduplicator(lambda texts: np.stack([a for _ in texts]))  # cosine 1.0: at the default 0.9, a duplicate
    same.seed([_task("one request")])
    assert same.filter([_task("another text entirely")]).semantic_duplicates == 1


def test_dedup_compares_a_multi_turn_task_as_its_turns_joined_by_newlines_and_embeds_each_task_once():
    embedded: list[str] = []

    def embed(texts):
        embedded.extend(texts)
        return np.stack([np.array([1.0, 0.0]) if "add" in t else np.array([0.0, 1.0]) for t in texts])

    dedup = Deduplicator(embed, semantic_threshold=1.1)  # the semantic check never drops here
    dedup.seed([_task(["add 1 and 2", "then multiply 3 by 4"])])
    assert embedded == ["add 1 and 2\nthen multiply 3 by 4"]
    assert dedup.filter([_task("add 1 and 2\nthen multiply 3 by 4")]).lexical_duplicates == 1  # the same words
    got = dedup.filter(
        [_task(["list the files", "in the report folder"]), _task("list the files in the report folder")]
    )
    assert got.lexical_duplicates == 1 and len(got.kept) == 1  # the second repeats the first's words
    # seeding embedded once; the three filtered tasks that reached the semantic check, once each (a kept task's
    # vector is the one the filter computed, not a second call)
    assert embedded == ["add 1 and 2\nthen multiply 3 by 4", "list the files\nin the report folder"]
    assert len(dedup.vectors) == 2


class _Env:
    """A recording stand-in environment: scripted call results per call name, a scripted check."""

    def __init__(self, results=None, score=1.0, reset_error=None, step_error=None):
        self.results, self.score = results or {}, score
        self.reset_error, self.step_error = reset_error, step_error
        self.actions, self.closed = [], False

    def reset(self, task):
        if self.reset_error:
            raise self.reset_error

    def step(self, action):
        self.actions.append(action)
        if self.step_error:
            raise self.step_error
        if not action.tool_calls:
            return StepResult(observation="next")
        name = action.tool_calls[0].name
        return StepResult(
            observation="o" * 300, call_results=self.results.get(name, [CallResult(name=name, ok=True, output="1")])
        )

    def evaluate(self, answer):
        return EvalResult(score=self.score, passed=self.score >= 1.0, details={"diff": "x"})

    def close(self):
        self.closed = True


def _replay(env, task=None, **kw):
    task = task or _task("add then multiply", [[ToolCall(name="add")], [ToolCall(name="multiply")]])
    out = replay_feasible(task, lambda: env, **kw)
    assert env.closed or task.reference_solution is None
    return out


def test_replay_runs_each_reference_call_then_ends_each_turn_and_passes_on_the_check():
    env = _Env()
    assert _replay(env) == (True, "")
    assert [(a.tool_calls[0].name if a.tool_calls else a.text) for a in env.actions] == [
        "add",
        "done",
        "multiply",
        "done",
    ]
    assert replay_feasible(_task("no reference"), lambda: _Env()) == (False, "no reference solution")


def test_replay_reasons_name_the_failing_call_its_output_or_the_check():
    long = "e" * 300
    refused = _Env(
        results={"add": [CallResult(name="add", ok=True, output="ok"), CallResult(name="x", ok=False, output=long)]}
    )
    assert _replay(refused) == (False, "add: " + "e" * 200)
    silent = _Env(results={"multiply": []})  # the environment ran no call: its observation is the reason
    assert _replay(silent) == (False, "multiply: " + "o" * 200)
    assert _replay(_Env(score=0.5)) == (False, "check failed: {'diff': 'x'}")


def test_coevolve_keeps_a_failed_reference_with_a_positive_reward_only_when_switched_on():
    """CoEvolve §3.3 (``coevolve.keep_positive_reward``): a replay that fails but earns a positive reward is retained;
    off (evolvekit's default) it is dropped; a replay with no reward is dropped either way."""
    assert _replay(_Env(score=0.5)) == (False, "check failed: {'diff': 'x'}")
    assert _replay(_Env(score=0.5), keep_positive=True) == (True, "kept with a positive reward (0.5): check failed")
    assert _replay(_Env(score=0.0), keep_positive=True) == (False, "check failed: {'diff': 'x'}")
    # a failing call ends the replay unless switched on; then the rest runs and the reward decides
    refused = {"add": [CallResult(name="add", ok=False, output="no")]}
    env = _Env(results=refused, score=0.5)
    assert _replay(env) == (False, "add: no") and [a.tool_calls[0].name for a in env.actions] == ["add"]
    env = _Env(results=refused, score=0.5)
    assert _replay(env, keep_positive=True) == (True, "kept with a positive reward (0.5): add: no")
    assert [(a.tool_calls[0].name if a.tool_calls else a.text) for a in env.actions] == [
        "add",
        "done",
        "multiply",
        "done",
    ]
    # a pass with a failed call on the way is not a clean pass: kept only under the switch, with its reason
    assert _replay(_Env(results=refused, score=1.0)) == (False, "add: no")
    assert _replay(_Env(results=refused, score=1.0), keep_positive=True)[0]
    assert _replay(_Env(results=refused, score=0.0), keep_positive=True) == (False, "add: no")


def test_curation_passes_its_keep_positive_check_to_the_replay():
    from evolvekit.questioning.pipeline import CurationChecks, Funnel, curate_new

    def tasks():
        return [_task("add then multiply", [[ToolCall(name="add")], [ToolCall(name="multiply")]])]

    class _Env0(_Env):  # fails a no-call episode: not trivial
        def evaluate(self, answer):
            return EvalResult(score=0.5 if self.actions and self.actions[0].tool_calls else 0.0, passed=False)

    funnel = Funnel()
    assert curate_new(tasks(), Deduplicator(None), _Env0, funnel) == [] and funnel.infeasible == 1
    kept = curate_new(tasks(), Deduplicator(None), _Env0, Funnel(), CurationChecks(keep_positive=True))
    assert [t.metadata["curation"]["feasibility"] for t in kept] == ["kept with a positive reward (0.5): check failed"]


def test_replay_errors_are_infeasible_and_only_reset_refusals_raise_when_asked():
    assert _replay(_Env(step_error=RuntimeError("boom"))) == (False, "RuntimeError: boom")
    assert _replay(_Env(step_error=EnvError("bad step")), refuse_invalid=True) == (False, "EnvError: bad step")
    assert _replay(_Env(reset_error=EnvError("no such tool"))) == (False, "EnvError: no such tool")
    env = _Env(reset_error=EnvError("no such tool"))
    with pytest.raises(EnvError, match="no such tool"):
        replay_feasible(_task("q", [[ToolCall(name="add")]]), lambda: env, refuse_invalid=True)
    assert env.closed


def test_same_value_matches_numbers_by_value_and_strings_without_spaces():
    assert same_value(3, 3.0) and same_value(" report ", "report")
    assert not same_value("5", 5) and not same_value(5, "5") and not same_value("a", "b") and not same_value(True, 1)


def test_grounding_of_a_task_with_fewer_requests_than_reference_turns_reads_them_joined_by_spaces():
    cd = ToolCall(name="cd", arguments={"folder": "final report"})
    assert (
        grounding(_task(["go to final", "report and tag it"], [[cd], [ToolCall(name="tag")], [ToolCall(name="ls")]]))
        == 1.0
    )


def _agreement(embedded=None):
    keys = ["multiply", "add", "ls"]

    def embed(texts):
        if embedded is not None:
            embedded.append(list(texts))
        vecs = np.array([[t.lower().count(k) for k in keys] for t in texts], dtype=np.float32)
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)

    tools = [ToolSchema(name=k, description=f"{k} things", parameters={}) for k in keys]
    return ToolAgreement(embed, tools)


def test_tool_agreement_pairs_turns_with_their_reference_turns_and_joins_otherwise():
    add, mul = ToolCall(name="add"), ToolCall(name="multiply")
    agreement = _agreement()
    assert agreement.agrees(_task(["add these", "multiply these"], [[add], [mul]]))
    assert not agreement.agrees(_task(["multiply these", "add these"], [[add], [mul]]))  # each turn asks the other's
    # one request for two reference turns: compared with both tools at once (turn by turn, its tie would name
    # multiply alone)
    assert agreement.agrees(_task(["add and multiply"], [[add], [mul]]))


def test_tool_agreement_embeds_nothing_without_tools():
    embedded: list = []
    agreement = ToolAgreement(lambda texts: embedded.append(list(texts)) or np.zeros((len(texts), 3)), [])
    assert embedded == [] and not agreement.turn_agrees("add", [ToolCall(name="add")])


def test_tool_agreement_embeds_the_joined_request_and_a_request_may_need_every_tool():
    embedded: list = []
    agreement = _agreement(embedded)
    add, mul, ls = ToolCall(name="add"), ToolCall(name="multiply"), ToolCall(name="ls")
    assert agreement.agrees(_task(["add, multiply", "and ls"], [[add], [mul], [ls]]))  # all three tools
    assert embedded[-1] == ["add, multiply and ls"]


def test_tool_agreement_breaks_ties_by_the_tools_order():
    """17 tools (past numpy's insertion-sort size): the request is equally close to every tool i with i % 3 != 0,
    and the k it needs are the first k of those."""
    tools = [ToolSchema(name=f"t{i}", description="", parameters={}) for i in range(17)]
    far = [0.5, float(np.sqrt(0.75))]

    def embed(texts):
        return np.array([[1.0, 0.0] if t == "q" or int(t[1:].split(":")[0]) % 3 else far for t in texts])

    agreement = ToolAgreement(embed, tools)
    assert agreement.turn_agrees("q", [ToolCall(name=n) for n in ("t1", "t2", "t4")])
    assert not agreement.turn_agrees("q", [ToolCall(name=n) for n in ("t1", "t2", "t5")])


def test_a_request_states_negative_and_decimal_values_as_numbers():
    """curate.NUMBER reads "-3" and "2.5" as the numbers -3 and 2.5 (not 3, 2 and 5): a request that states its
    reference's signed and decimal values is exact and grounded, one that drops the sign is not (hand_mutants.py)."""
    from evolvekit.questioning.curate import numbers_exact, stated_count

    call = ToolCall(name="subtract", arguments={"a": -3, "b": 2.5})
    assert numbers_exact(_task("Subtract 2.5 from -3.", [[call]]))
    assert not numbers_exact(_task("Subtract 2.5 from 3.", [[call]]))
    assert stated_count("Subtract 2.5 from -3.", [-3, 2.5]) == 2
    assert stated_count("Subtract 25 from 3.", [-3, 2.5]) == 0


def test_passes_without_acting_answers_done_once_a_reference_turn_and_reads_the_check():
    """The no-call probe: the task reset as it is, one text answer "done" per reference turn (one for a task without
    a reference), then the environment's own check; a full score passes, anything less or a failing episode does
    not, and the environment is closed either way."""
    task = _task("add then multiply", [[ToolCall(name="add")], [ToolCall(name="multiply")]])
    seen = []

    class Recording(_Env):
        def reset(self, t):
            seen.append(t)
            super().reset(t)

    env = Recording(score=1.0)
    assert passes_without_acting(task, lambda: env) and env.closed and seen == [task]
    assert [(a.text, a.tool_calls) for a in env.actions] == [("done", []), ("done", [])]
    bare = _Env(score=1.0)
    assert passes_without_acting(_task("what is there?"), lambda: bare)
    assert [a.text for a in bare.actions] == ["done"]
    assert not passes_without_acting(task, lambda: _Env(score=0.99))
    failing = _Env(step_error=RuntimeError("the episode broke"))
    assert not passes_without_acting(task, lambda: failing) and failing.closed
