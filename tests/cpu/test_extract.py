"""Experience extraction (navigating/extract.py, AgentEvolver §4.1's Ω_process and Eq. 14's refine) with a
recording stand-in summarizer: the exact prompts and texts it is shown and writes, the split into jobs, the counts
of its report, grounded writing and validation, and the re-ranking's edge cases."""

from __future__ import annotations

import random

from evolvekit.engine.base import Engine
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.navigating.extract import (
    EXTRACT_FORMAT,
    EXTRACT_SYSTEM,
    RERANK_SYSTEM,
    REWRITE_SYSTEM,
    extraction_prompt,
    parse_yes_no,
    reference_experience,
    refine,
    render_trajectory,
)
from evolvekit.types import (
    Experience,
    ExperienceProvenance,
    Step,
    Task,
    TaskSource,
    ToolCall,
    Trajectory,
    TrajectoryFlags,
)


class _Recorder:
    """A stand-in summarizer: answers each conversation with ``answer(conv)``, records conversations and params."""

    def __init__(self, answer, prompt_tokens=0, completion_tokens=0):
        self.answer, self.convs, self.params = answer, [], []
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens

    def chat(self, conversations, params):
        self.convs += [list(c) for c in conversations]
        self.params.append(params)
        return [
            [
                Completion(
                    text=self.answer(c),
                    usage_prompt_tokens=self.prompt_tokens,
                    usage_completion_tokens=self.completion_tokens,
                )
            ]
            for c in conversations
        ]


def _step(i, call=None, ok=True, obs="", text="x", parse_error=None):
    calls = [call] if call else []
    outcomes = [{"name": call.name, "ok": ok}] if call else []
    return Step(index=i, action_text=text, tool_calls=calls, observation=obs, calls=outcomes, parse_error=parse_error)


def _traj(tid, steps, reward, task_id="t1"):
    return Trajectory(trajectory_id=tid, task_id=task_id, group_id="g", steps=steps, outcome_reward=reward)


def _exp(i):
    return Experience(when_to_use=f"w{i}", content=f"c{i}", provenance=ExperienceProvenance(trajectory_ids=["t"]))


ADD = ToolCall(name="add", arguments={"a": 12, "b": 30})


def test_a_trajectory_is_rendered_as_actions_results_and_its_score():
    traj = _traj("a", [_step(0, ADD, obs="r" * 700, text="A" * 700), _step(1, text="42")], None)
    assert render_trajectory(traj) == "\n".join(
        ["Action: " + "A" * 600, "Result: " + "r" * 600, "Action: 42", "Score: 0"]
    )
    assert render_trajectory(_traj("b", [_step(0, text="hi")], 0.5), max_chars=1) == "Action: h\nScore: 0.5"


def test_the_extraction_prompt_of_each_kind():
    win, lose = _traj("w", [_step(0, text="win")], 1.0), _traj("l", [_step(0, text="lose")], 0.0)
    task = Task(task_id="t1", env_name="bfcl", query=["first turn", "second turn"])
    system, user = extraction_prompt("comparison", task, [win, lose])
    assert (system.role, system.content, user.role) == ("system", EXTRACT_SYSTEM, "user")
    assert user.content == (
        "Task:\nfirst turn\nsecond turn\n\nA SUCCESSFUL attempt:\nAction: win\nScore: 1\n\n"
        f"A FAILED attempt:\nAction: lose\nScore: 0\n\nWhat made the difference?\n\n{EXTRACT_FORMAT}"
    )
    assert extraction_prompt("failure", None, [lose])[1].content == (
        f"Task:\n(unknown task)\n\nA FAILED attempt:\nAction: lose\nScore: 0\n\n{EXTRACT_FORMAT}"
    )
    assert extraction_prompt("success", task, [win])[1].content.startswith(
        "Task:\nfirst turn\nsecond turn\n\nA SUCCESSFUL"
    )


def test_yes_no_parsing_edges():
    assert parse_yes_no("yesterday no") is False  # a whole word only
    assert parse_yes_no("") is None and parse_yes_no(None) is None  # type: ignore[arg-type]
    assert parse_yes_no("Xyes") is None


def test_a_reference_experience_by_hand():
    task = Task(
        task_id="t1", env_name="bfcl", query=["Add 12 and 30.", "Then multiply by 2."], source=TaskSource.SYNTHETIC,
        reference_solution=[[ADD], [ToolCall(name="multiply", arguments={"a": 42, "b": 2}), ADD]],
    )  # fmt: skip
    failure = _traj("l", [_step(0, text="42")], 0.0)
    when, content = reference_experience(task, failure)  # type: ignore[misc]
    assert when == 'A request like "Add 12 and 30. Then multiply by 2." that the tools add, multiply can answer.'
    assert content == (
        "Call add(a=<from the request>, b=<from the request>), then multiply(a=42, b=<from the request>), then "
        "add(a=<from the request>, b=<from the request>), one call per message; then answer with the result. "
        "Avoid answering without calling any tool."
    )
    long = task.model_copy(update={"query": "x" * 300 + "\nsecond line", "reference_solution": [[ADD] * 60]})
    when, content = reference_experience(long, failure)  # type: ignore[misc]
    assert when == f'A request like "{"x" * 200}" that the tools add can answer.' and len(content) == 1200
    blank = task.model_copy(update={"query": "  "})
    assert reference_experience(blank, failure)[0].startswith('A request like "a task"')  # type: ignore[index]
    assert reference_experience(task.model_copy(update={"reference_solution": None}), failure) is None


def test_refine_shows_the_reranker_the_numbered_listing_and_the_writer_each_text():
    items = [_exp(i) for i in range(3)]
    params = SamplingParams(temperature=0.3)
    llm = _Recorder(lambda conv: "9, 2, 2, 0" if conv[0].content == RERANK_SYSTEM else "  ")
    out = refine(llm, params, "the task", items, rerank=True, rewrite=True, keep=2)
    # 9 is out of range and the repeated 2 counts once; the unranked 1 keeps its place after the ranked ones
    assert [e for e, _ in out] == [items[2], items[0]]
    assert [t for _, t in out] == ["When to use: w2\nContent: c2", "When to use: w0\nContent: c0"]  # blank rewrite
    rerank, *rewrites = llm.convs
    assert rerank[1].content == (
        "Task: the task\n\n[0] When to use: w0 | Content: c0\n[1] When to use: w1 | Content: c1\n"
        "[2] When to use: w2 | Content: c2\n\nList the numbers, most useful first."
    )
    assert [c[0].content for c in rewrites] == [REWRITE_SYSTEM] * 2
    assert rewrites[0][1].content == (
        "Task: the task\n\nExperience:\nWhen to use: w2\nContent: c2\n\n"
        "Rewrite the experience so it directly helps with this task. Keep it short."
    )
    assert llm.params == [params, params]


def test_refine_reranking_edges():
    items = [_exp(i) for i in range(3)]
    last = _Recorder(lambda conv: "3 1")  # 3 = len(items): out of range
    assert [e for e, _ in refine(last, SamplingParams(), "q", items, True, False, keep=3)] == [
        items[1],
        items[0],
        items[2],
    ]
    zero = _Recorder(lambda conv: "0")
    assert [e for e, _ in refine(zero, SamplingParams(), "q", items, True, False, keep=3)] == items
    second = _Recorder(lambda conv: "1 0 2")  # 0 ranked second stays second, before the later-ranked 2
    got = refine(second, SamplingParams(), "q", items, True, False, keep=3)
    assert [e for e, _ in got] == [items[1], items[0], items[2]]
    one = _Recorder(lambda conv: "0")
    assert refine(one, SamplingParams(), "q", items[:1], True, False) == [(items[0], "When to use: w0\nContent: c0")]
    assert one.convs == []  # nothing to rank with one experience
    assert len(refine(None, SamplingParams(), "q", items, False, False)) == 1  # keep defaults to one


GOOD = "When to use: when adding two numbers\nContent: call add with both numbers, then answer."


def _extraction_run():
    """Five tasks: a comparison (t1), a success (t2), a failure (t3), a crashed rollout (t4) and an empty one (t5)."""
    win = _traj("w1", [_step(0, ADD, obs="42"), _step(1, text="42")], 1.0)
    lose = _traj("l1", [_step(0, text="40")], 0.0)
    only_win = _traj("w2", [_step(0, text="7")], 0.5, task_id="t2")  # at the threshold: a success
    only_lose = _traj("l3", [_step(0, text="9")], 0.25, task_id="t3")
    crashed = _traj("c4", [_step(0, text="x")], 1.0, task_id="t4").model_copy(
        update={"flags": TrajectoryFlags(failed=True)}
    )
    empty = _traj("e5", [], 1.0, task_id="t5")
    return [win, lose, only_win, only_lose, crashed, empty]


def test_llm_extraction_writes_validates_and_counts_each_job_in_batches():
    from evolvekit.navigating.extract import VALIDATE_SYSTEM, ExperienceExtractor

    def answer(conv):
        if conv[0].content == VALIDATE_SYSTEM:
            return "Yes." if "two numbers" in conv[1].content else "no"
        if "A FAILED attempt:\nAction: 9" in conv[1].content:
            return "I cannot tell."  # unparseable
        if "A SUCCESSFUL attempt:\nAction: 7" in conv[1].content:
            return "When to use: when the request is short\nContent: reply with the number alone."
        return GOOD

    llm = _Recorder(answer, prompt_tokens=10, completion_tokens=5)
    params = SamplingParams(temperature=0.7, seed=3)
    ex = ExperienceExtractor(Engine(llm), params, validate=True, batch=2)  # type: ignore[arg-type]
    tasks = {"t1": Task(task_id="t1", env_name="bfcl", query="Add 12 and 30.")}
    report = ex.extract(_extraction_run(), tasks, iteration=4)
    writes = [c for c in llm.convs if c[0].content == EXTRACT_SYSTEM]
    assert [c[1].content.split("\n")[1] for c in writes] == ["Add 12 and 30.", "(unknown task)", "(unknown task)"]
    assert "What made the difference?" in writes[0][1].content and llm.params == [params] * 3  # 2 + 1 writes, 1 check
    checks = [c for c in llm.convs if c[0].content == VALIDATE_SYSTEM]
    assert checks[0][1].content == (
        "When to use: when adding two numbers\nContent: call add with both numbers, then answer.\n\n"
        "Is this experience correct, general and actionable? Answer yes or no."
    )
    assert (report.jobs, report.calls, report.unparseable, report.rejected, report.validated_jobs) == (3, 5, 1, 1, 1)
    assert report.validated_share == 1 / 3 and report.grounded == 0 and report.closed_failures == 0
    assert (report.prompt_tokens, report.completion_tokens) == (50, 25)
    (exp,) = report.experiences
    assert (exp.when_to_use, exp.content) == ("when adding two numbers", "call add with both numbers, then answer.")
    prov = exp.provenance
    assert (prov.kind, prov.trajectory_ids, prov.task_ids, prov.iteration) == ("comparison", ["w1", "l1"], ["t1"], 4)
    again = ex.extract(_extraction_run()[:2], tasks)  # the next report counts its own tokens only
    assert (again.prompt_tokens, again.completion_tokens, again.calls) == (20, 10, 2)
    assert again.experiences[0].provenance.iteration is None


def test_without_validation_every_parsed_experience_is_kept_and_no_check_is_asked():
    from evolvekit.navigating.extract import ExperienceExtractor

    llm = _Recorder(lambda conv: GOOD + "\nWhen to use: when a second lesson applies\nContent: write it down too.")
    report = ExperienceExtractor(Engine(llm), SamplingParams(), validate=False).extract(_extraction_run(), {})  # type: ignore[arg-type]
    assert len(report.experiences) == 6 and report.calls == 3 and report.validated_jobs == 3 and report.rejected == 0
    assert (report.prompt_tokens, report.completion_tokens) == (0, 0)  # a server that reported no counts: none


def test_the_split_reads_the_outcome_or_in_grounded_mode_the_environments_check():
    from evolvekit.navigating.extract import ExperienceExtractor
    from evolvekit.types import RewardParts

    judged = _traj("j", [_step(0, text="x")], 1.0).model_copy(update={"rewards": RewardParts(outcome=1.0, env=0.0)})
    assert ExperienceExtractor(Engine(None), SamplingParams()).jobs([judged]) == [("success", [judged])]  # type: ignore[arg-type]
    grounded = ExperienceExtractor(Engine(None), SamplingParams(), grounded=True)  # type: ignore[arg-type]
    assert grounded.jobs([judged]) == [("failure", [judged])]
    strict = ExperienceExtractor(Engine(None), SamplingParams(), success_threshold=0.9)  # type: ignore[arg-type]
    assert [k for k, _ in strict.jobs(_extraction_run())] == [
        "comparison",
        "failure",
        "failure",
    ]  # 0.5 is no longer one


class _Local:
    """A stand-in in-process model: a fixed chat template, characters as token ids, scripted generations."""

    name = "local"

    def __init__(self, replies):
        self.replies, self.prompts, self.params = list(replies), [], []

    def apply_chat_template(self, conv):
        return [7] * len(conv)

    def encode(self, text):
        return [ord(ch) for ch in text]

    def generate_ids(self, prompts, params):
        self.prompts.append([list(p) for p in prompts])
        self.params.append(params)
        return [[Completion(text=self.replies.pop(0), token_ids=[1, 2, 3])] for _ in prompts]


def _ids(text):
    return [ord(ch) for ch in text]


def test_constrained_writing_lets_the_model_write_only_the_two_lines():
    from evolvekit.navigating.extract import ExperienceExtractor

    local = _Local(["when adding two numbers\nmore", "call add with both numbers.\nmore"])
    params = SamplingParams(temperature=0.6, top_p=0.9, seed=5)
    ex = ExperienceExtractor(Engine(local), params, validate=False, constrained=True, field_tokens=32)  # type: ignore[arg-type]
    report = ex.extract(_extraction_run()[:2], {})
    first, second = local.prompts
    assert first == [[7, 7] + _ids("When to use:")]
    assert second == [[7, 7] + _ids("When to use: when adding two numbers\nContent:")]
    line = SamplingParams(temperature=0.6, top_p=0.9, max_new_tokens=32, stop=("\n",), seed=5)
    assert local.params == [line, line]
    (exp,) = report.experiences
    assert (exp.when_to_use, exp.content) == ("when adding two numbers", "call add with both numbers.")
    # no server count: the prompt ids given are counted, and each completion's ids
    assert (report.prompt_tokens, report.completion_tokens, report.calls) == (len(first[0]) + len(second[0]), 6, 1)


def test_constrained_validation_is_a_forced_choice_per_candidate(monkeypatch):
    import evolvekit.navigating.extract as extract_mod

    asked = []

    def forced_yes(scorer, llm, conv, temperature, rng):
        asked.append((scorer, llm, conv[1].content.split("\n")[0], temperature, rng))
        return len(asked) == 1

    monkeypatch.setattr(extract_mod, "forced_yes", forced_yes)
    local = _Local(["when adding two numbers", "when a tool fails", "call add with both numbers.", "read the error."])
    ex = extract_mod.ExperienceExtractor(Engine(local), SamplingParams(temperature=0.4), constrained=True)  # type: ignore[arg-type]
    run = _extraction_run()
    report = ex.extract(run[:3], {})
    assert [a[2] for a in asked] == ["When to use: when adding two numbers", "When to use: when a tool fails"]
    assert all(a[0] is ex.scorer and a[1] is local and a[3] == 0.4 and a[4] is ex.rng for a in asked)
    assert len(report.experiences) == 1 and report.rejected == 1 and report.calls == 4
    written = sum(len(q) for p in local.prompts for q in p)
    assert report.prompt_tokens == written + 2 * 2  # each check's prompt: the stand-in template's 2 ids


class _Scorer:
    """A stand-in ChoiceScorer: scripted option log-probabilities per prompt, recorded picks."""

    def __init__(self, scores):
        self.scores, self.priors, self.picks, self.scored = scores, {}, [], []

    def option_logprobs(self, prompt, options):
        self.scored.append(list(prompt))
        return self.scores(prompt)

    def pick(self, prompt, options, temperature, rng, prior=None):
        self.picks.append((list(prompt), [list(o) for o in options], temperature, rng, prior))
        scores = self.scores(prompt)
        scores = [s - p for s, p in zip(scores, prior)] if prior is not None else scores
        return (0 if scores[0] >= scores[1] else 1), scores


class _Template:
    def apply_chat_template(self, conv):
        return _ids("|".join(f"{m.role}:{m.content}" for m in conv))

    def encode(self, text):
        return _ids(text)


def test_forced_yes_is_calibrated_against_the_same_question_about_content_free_text():

    from evolvekit.llm.base import ChatMessage
    from evolvekit.navigating.extract import forced_yes

    conv = [ChatMessage(role="system", content="Judge: strictly."), ChatMessage(role="user", content="A) x: 1\nB) y")]
    blank = (
        "system:Judge: strictly.|user:A) x: N/A\nB) y"  # the user's values after a colon become N/A, the system's stay
    )

    def scores(prompt):  # the model prefers "yes" everywhere, and more so without content
        return [-0.5, -1.0] if "N/A" not in "".join(map(chr, prompt)) else [-0.1, -2.0]

    scorer, rng = _Scorer(scores), random.Random(0)
    assert forced_yes(scorer, _Template(), conv, 0.0, rng) is False  # -0.4 against +1.0: "no" once calibrated
    (prompt, options, temperature, got_rng, prior) = scorer.picks[0]
    assert "".join(map(chr, prompt)) == "system:Judge: strictly.|user:A) x: 1\nB) y" + "Answer:"
    assert options == [_ids(" yes"), _ids(" no")] and (temperature, got_rng, prior) == (0.0, rng, [-0.1, -2.0])
    assert ["".join(map(chr, p)) for p in scorer.scored] == [blank + "Answer:"]
    forced_yes(scorer, _Template(), conv, 0.0, rng)
    assert len(scorer.scored) == 1  # the prior is computed once per content-free prompt
    plain = _Scorer(scores)
    assert forced_yes(plain, _Template(), conv, 0.0, rng, calibrate=False) is True and plain.picks[0][4] is None


def test_the_merge_check_asks_whether_two_experiences_give_the_same_advice(monkeypatch):
    import evolvekit.navigating.extract as extract_mod

    old = Experience(when_to_use="w old", content="c old", provenance=ExperienceProvenance(trajectory_ids=["a"]))
    new = Experience(when_to_use="w new", content="c new", provenance=ExperienceProvenance(trajectory_ids=["b"]))
    llm = _Recorder(lambda conv: "Yes, the same.")
    params = SamplingParams(seed=2)
    assert extract_mod.llm_equivalence(llm, params)(new, old) is True  # type: ignore[arg-type]
    (conv,) = llm.convs
    assert conv[0].content == "You compare two pieces of advice for an AI agent."
    assert conv[1].content == (
        "A) When to use: w old\nContent: c old\n\nB) When to use: w new\nContent: c new\n\n"
        "Do A and B give the same advice? Answer yes or no."
    )
    assert llm.params == [params]
    assert extract_mod.llm_equivalence(_Recorder(lambda conv: "No."), params)(new, old) is False  # type: ignore[arg-type]
    seen = []
    monkeypatch.setattr(extract_mod, "ChoiceScorer", lambda model: ("scorer", model))
    monkeypatch.setattr(extract_mod, "forced_yes", lambda *a: seen.append(a) or True)
    assert extract_mod.llm_equivalence("model", SamplingParams(temperature=0.2, seed=4), constrained=True)(new, old)  # type: ignore[arg-type]
    scorer, model, conv, temperature, rng = seen[0]
    assert (scorer, model, temperature) == (("scorer", "model"), "model", 0.2)
    assert rng.random() == random.Random(4).random()


MUL = ToolCall(name="multiply", arguments={"a": 42, "b": 7})


def test_a_grounded_experience_by_hand():
    """Values described by their source (the request, the latest earlier result that holds them, else the value),
    the calls the failure lacked, and its first mistake."""
    from evolvekit.navigating.extract import grounded_experience

    task = Task(task_id="t1", env_name="bfcl", query=["Add 12 and 30,", "then double it."])
    win = _traj(
        "w",
        [
            _step(0, ADD, obs='{"result": 42}'),
            _step(1, ToolCall(name="echo", arguments={"x": 42}), ok=False, obs="Error"),  # a refused call: left out
            _step(2, MUL, obs='{"result": 84}'),
            _step(3, ToolCall(name="note", arguments={"text": "84", "tag": "z" * 80}), obs="ok"),
            _step(4, text="84"),
        ],
        1.0,
    )
    lose = _traj("l", [_step(0, ADD, obs='{"result": 42}'), _step(1, text="42")], 0.0)
    when, content = grounded_experience(task, win, lose)  # type: ignore[misc]
    assert when == 'A request like "Add 12 and 30, then double it." that the tools add, multiply, note can answer.'
    assert content == (
        "Call add(a=<from the request>, b=<from the request>), then multiply(a=<result of add>, b=7), then "
        f'note(text=<result of multiply>, tag="{"z" * 59}), one call per message; then answer with the result. '
        "The successful attempt made 2 call(s) the failed one did not: multiply, note. "
        "Avoid stopping before every needed call was made."
    )
    same = grounded_experience(task, win, win)[1]  # type: ignore[index]
    assert "made the same call(s) the failed one did not." in same
    assert grounded_experience(None, win)[0].startswith('A request like "a task" that')  # type: ignore[index]
    assert grounded_experience(task, win)[1].endswith("then answer with the result.")  # type: ignore[index]
    long = grounded_experience(task, win.model_copy(update={"steps": [_step(0, ADD, obs="x")] * 80}))
    assert len(long[1]) == 1200  # type: ignore[index]
    wide = grounded_experience(task.model_copy(update={"query": "y" * 300}), win)[0]  # type: ignore[index]
    assert wide == f'A request like "{"y" * 200}" that the tools add, multiply, note can answer.'


def test_the_failures_first_mistake():
    from evolvekit.navigating.extract import grounded_experience

    task = Task(task_id="t1", env_name="bfcl", query="Add 12 and 30.")
    win = _traj("w", [_step(0, ADD, obs="42"), _step(1, text="42")], 1.0)

    def avoid(steps):
        return grounded_experience(task, win, _traj("l", steps, 0.0))[1].split(" Avoid ")[1]  # type: ignore[index]

    assert avoid([_step(0, text="<tool_call>{", parse_error="bad json")]) == (
        "writing a message that contains no valid tool call."
    )
    failing = ToolCall(name="add", arguments={"a": "x"})
    assert avoid([_step(0, failing, ok=False, obs="  \nError: a must be a number\nmore")]) == (
        "calling add in a way that fails (Error: a must be a number)."
    )
    assert avoid([_step(0, failing, ok=False, obs="E" * 200)]) == f"calling add in a way that fails ({'E' * 160})."
    assert avoid([_step(0, failing, ok=False, obs="  ")]) == "calling add in a way that fails (an error)."
    other = [_step(0, ToolCall(name="add", arguments={"a": 1, "b": 2}), obs="3"), _step(1, MUL, obs="84")]
    assert avoid(other) == "calling add, multiply with other arguments or where it is not needed."
    assert avoid([_step(0, text="42")]) == "answering without calling any tool."
    # a parse error with a call made is not "no valid tool call"; a call without an outcome counts as run
    assert avoid([_step(0, ADD, parse_error="trailing text"), _step(1, text="42")]) == (
        "stopping before every needed call was made."
    )
    unrecorded = Step(index=0, action_text="x", tool_calls=[ADD, MUL], observation="42", calls=[])
    assert avoid([unrecorded]) == "calling multiply with other arguments or where it is not needed."


def test_grounded_validation_edges():
    from evolvekit.navigating.extract import grounded_valid

    run = [_traj("w", [_step(0, ADD, obs="42")], 1.0)]
    assert grounded_valid("When adding.", "Call add with both numbers, then answer.", run)
    assert not grounded_valid("When adding.", "Call add_all with both numbers.", run)  # another tool's name
    assert not grounded_valid("When adding.", "Call math.add with both numbers.", run)  # a dotted name is another's
    assert grounded_valid("When to add.", "Use add.", run)  # the tool may be named anywhere, the content's words
    assert not grounded_valid("add", "add add add add", run)  # fewer than half of the words distinct
    assert grounded_valid("add", "add it now", run) and grounded_valid("add", "Add add", run)  # exactly half
    assert not grounded_valid("add", "", run) and not grounded_valid("add", "!!", run)
    task = Task(task_id="t1", env_name="bfcl", query="q", reference_solution=[[MUL]])
    assert grounded_valid("w", "Call multiply twice.", run, task) and not grounded_valid("w", "Call multiply.", run)


def test_grounded_extraction_writes_from_execution_and_closes_person_written_failures():
    from evolvekit.boundary import InformationBoundary
    from evolvekit.navigating.extract import ExperienceExtractor

    synthetic = Task(
        task_id="t3", env_name="bfcl", query="Add 12 and 30.", reference_solution=[[ADD]], source=TaskSource.SYNTHETIC
    )
    person = synthetic.model_copy(update={"task_id": "t2", "source": TaskSource.REAL})
    runs = _extraction_run()[:4]  # t1 comparison, t2 success, t3 failure
    runs[2] = _traj("w2", [_step(0, MUL, obs="84"), _step(1, text="84")], 1.0, task_id="t2")
    ex = ExperienceExtractor(Engine(None), SamplingParams(), grounded=True, batch=1)  # type: ignore[arg-type]
    report = ex.extract(runs, {"t2": person, "t3": synthetic}, iteration=1)
    kinds = [e.provenance.kind for e in report.experiences]
    assert kinds == ["comparison", "success", "failure"] and report.grounded == 3 and report.calls == 0
    assert report.experiences[2].content.startswith("Call add(a=<from the request>, b=<from the request>)")
    assert (report.validated_jobs, report.rejected, report.closed_failures, report.unparseable) == (3, 0, 0, 0)
    closed = ex.extract(runs, {"t3": synthetic.model_copy(update={"source": TaskSource.REAL})})
    assert closed.closed_failures == 1 and closed.jobs == 3 and len(closed.experiences) == 2
    no_call = [_traj("n", [_step(0, text="42")], 1.0)]  # a success without a call writes nothing
    empty = ex.extract(no_call, {})
    assert (empty.jobs, empty.grounded, empty.unparseable, empty.experiences) == (1, 0, 1, [])
    oracle = ExperienceExtractor(
        Engine(None), SamplingParams(), grounded=True, boundary=InformationBoundary(oracle=True)
    )  # type: ignore[arg-type]
    assert oracle.extract(runs[3:], {"t3": synthetic.model_copy(update={"source": TaskSource.REAL})}).grounded == 1


def test_parsing_edges_json_shapes_item_limit_field_bounds_and_echo_length():
    from evolvekit.navigating.extract import is_echo, parse_experiences

    one = '{"when_to_use": "when adding numbers", "content": "call add with both."}'
    assert parse_experiences(one) == [("when adding numbers", "call add with both.")]  # one object, not a list
    mixed = (
        '["text", {"when_to_use": 5, "content": "call add with both."}, {"content": "no situation given"}, '
        '{"when_to_use": "when adding numbers", "content": "call add with both."}]'
    )
    assert parse_experiences(mixed) == [("when adding numbers", "call add with both.")]
    four = "\n".join(f"When to use: situation number {i}\nContent: lesson number {i}." for i in range(4))
    assert len(parse_experiences(four)) == 3 and len(parse_experiences(four, 4)) == 4
    assert parse_experiences("When to use: X-ray scans\nContent: Xerox each page.") == [
        ("X-ray scans", "Xerox each page.")
    ]

    def pair(w, c):
        return parse_experiences(f"When to use: {w}\nContent: {c}")

    assert (
        pair("w" * 8, "c" * 8) == [("w" * 8, "c" * 8)] and pair("w" * 7, "c" * 8) == [] and pair("w" * 8, "c" * 7) == []
    )
    assert pair("w" * 400, "c" * 1200) != [] and pair("w" * 401, "c" * 8) == [] and pair("w" * 8, "c" * 1201) == []
    assert is_echo("concrete ins") and not is_echo("concrete in")  # 12 characters of the prompt's words, not 11


def test_grounded_extraction_counts_every_skip_and_rejection_and_writes_comparisons_whole(monkeypatch):
    import evolvekit.navigating.extract as extract_mod

    person = {f"p{i}": Task(task_id=f"p{i}", env_name="bfcl", query="q", reference_solution=[[ADD]]) for i in range(2)}
    task = Task(task_id="t1", env_name="bfcl", query="Add 12 and 30.")
    closed = [_traj(f"f{i}", [_step(0, text="no")], 0.0, task_id=f"p{i}") for i in range(2)]  # first: nothing stops
    no_call = [_traj(f"n{i}", [_step(0, text="42")], 1.0, task_id=f"n{i}") for i in range(2)]
    win = _traj("w", [_step(0, ADD, obs="42"), _step(1, text="42")], 1.0)
    lose = _traj("l", [_step(0, text="40")], 0.0)
    ex = extract_mod.ExperienceExtractor(Engine(None), SamplingParams(), grounded=True)  # type: ignore[arg-type]
    report = ex.extract([*closed, *no_call, win, lose], {**person, "t1": task})
    assert (report.closed_failures, report.unparseable, report.jobs) == (2, 2, 5)
    (exp,) = report.experiences
    assert exp.when_to_use == 'A request like "Add 12 and 30." that the tools add can answer.'
    assert "The successful attempt made 1 call(s) the failed one did not: add." in exp.content
    monkeypatch.setattr(extract_mod, "grounded_valid", lambda *a: False)
    rejected = ex.extract([win, lose, _traj("w2", [_step(0, ADD, obs="42")], 1.0, task_id="t2")], {"t1": task})
    assert rejected.rejected == 2 and rejected.experiences == []


def test_a_score_at_the_threshold_is_a_success_only():
    from evolvekit.navigating.extract import ExperienceExtractor

    assert [k for k, _ in ExperienceExtractor(Engine(None), SamplingParams()).jobs(_extraction_run())] == [  # type: ignore[arg-type]
        "comparison",
        "success",
        "failure",
    ]


def test_a_later_reference_call_takes_no_value_from_an_unrun_result():
    note = ToolCall(name="note", arguments={"text": "X"})
    refs = [[ToolCall(name="add", arguments={"a": 1, "b": 2})], [note]]
    task = Task(
        task_id="t1",
        env_name="bfcl",
        query="Add 1 and 2, note it.",
        source=TaskSource.SYNTHETIC,
        reference_solution=refs,
    )
    content = reference_experience(task, _traj("l", [_step(0, text="3")], 0.0))[1]  # type: ignore[index]
    assert content.startswith('Call add(a=<from the request>, b=<from the request>), then note(text="X"), one call')


def test_the_forced_choices_draw_from_the_seed_or_0_and_the_token_counters_start_at_0(monkeypatch):

    import evolvekit.navigating.extract as extract_mod

    for seed, expect in ((None, 0), (5, 5)):
        ex = extract_mod.ExperienceExtractor(Engine(None), SamplingParams(seed=seed))  # type: ignore[arg-type]
        assert ex.rng.random() == random.Random(expect).random() and (ex.prompt_tokens, ex.completion_tokens) == (0, 0)
        drawn: list[float] = []
        monkeypatch.setattr(extract_mod, "ChoiceScorer", lambda model: "scorer")
        monkeypatch.setattr(extract_mod, "forced_yes", lambda *a, out=drawn: out.append(a[4].random()) or True)
        check = extract_mod.llm_equivalence("m", SamplingParams(seed=seed), constrained=True)  # type: ignore[arg-type]
        check(_exp(0), _exp(1))
        assert drawn == [random.Random(expect).random()]


def test_the_default_batch_is_8_jobs_and_a_constrained_line_64_tokens():
    from evolvekit.navigating.extract import ExperienceExtractor

    runs = [_traj(f"w{i}", [_step(0, text=str(i))], 1.0, task_id=f"t{i}") for i in range(9)]
    llm = _Recorder(lambda conv: GOOD)
    ExperienceExtractor(Engine(llm), SamplingParams(), validate=False).extract(runs, {})  # type: ignore[arg-type]
    assert len(llm.params) == 2 and len(llm.convs) == 9  # 8 + 1 written
    local = _Local(["when adding two numbers", "call add with both numbers."])
    ExperienceExtractor(Engine(local), SamplingParams(), validate=False, constrained=True).extract(runs[:1], {})  # type: ignore[arg-type]
    assert [p.max_new_tokens for p in local.params] == [64, 64]
