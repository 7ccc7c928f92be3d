"""Grounded step credit: GOOD/BAD per step from execution, against the task's reference solution and the
environment's state — the attributor that needs no helper model (``attributing.source: grounded``).

The labels feed the same Eq. 18-21 path as the LLM attributor's (attributing/credit.py). The rules, in order, for
step t of turn k (a step without tool calls ends its turn):

1. **Errors.** A step whose action could not be parsed, or with a call that errored or was refused (BFCL: an unknown
   tool, a schema error, an exception, or an ``{"error": ...}`` result) is BAD.
2. **Answer steps** (no tool calls). The last turn's answer follows the response check: GOOD when the episode
   passed the environment's check (``passed``), else BAD. An earlier turn's answer is GOOD when the turn is
   complete — every reference call of turn k was executed, or the state equals the reference's end state of the
   turn — else BAD (the turn was ended short).
3. **Reference calls.** A step that executes a not-yet-executed reference call of turn k is GOOD. Calls match
   after normalising argument forms (agent/calls.py): numbers by value (3 = 3.0), strings stripped and
   case-folded, lists and objects element by element; each reference call is matched at most once.
4. **Repeats.** A step whose every call repeats an earlier call of the episode (normalised) and that left the
   state unchanged is BAD.
5. **State progress** (``Step.grounding``, where the environment reports it). A step that brings the state closer
   to the reference's end state of turn k (fewer differing state leaves) is GOOD; one that does not is BAD — it
   "does nothing toward the reference's end state". On stateless backends (BFCL's MathAPI: no state, distance
   None) a call that is not a reference call is BAD for the same reason.
6. **Other solutions the check accepted.** In an episode that passed the environment's check, a turn that ended
   with reference calls not executed was solved another way (``add(a=2, b=1)`` for the reference ``add(a=1,
   b=2)``; the check compares results and state, not call text): its steps labelled BAD by rule 2 (turn ended
   short) or by rule 5 on a stateless backend are GOOD. Errors (rule 1) and repeats (rule 4) stay BAD. Without
   this rule the process channel punished the very calls that passed the check (the evidence audit in
   benchmarks/results/evidence_arith_turns.md).

Environments without a reference solution (or without ``Step.grounding`` for rule 5) get the generic fallback:
rule 1 still makes errors BAD; the episode's final answer (its last step, when that step makes no call) follows the
environment's check as in rule 2 (``answer_from_check``); every other step is NEUTRAL (attribution reward 0: no
evidence either way). Without the answer rule, a failed group's unjudged text answers sat above its one errored
call once Eq. 18 standardised them, so the only gradient pushed away from calling tools (the collapse of
grpo_person_nav_attr's seed 3 in benchmarks/results/evidence_env_only.md); with it, a failed episode's answer is BAD
whether or not it called a tool.

BFCL (env/bfcl/env.py) reports, per step, whether the state changed and the distance — the number of differing
leaves of every stateful backend's attribute tree — to the state the reference solution reaches by the end of the
turn, replayed on a private copy of the backends at reset.
"""

from __future__ import annotations

import re
from typing import Callable, Hashable, Literal, Sequence

from evolvekit.agent.calls import call_key
from evolvekit.types import Step, StepLabel, ToolCall, Trajectory


def name_key(call: ToolCall) -> Hashable:
    """A call's tool name only: the match of a reference borrowed from another task (its arguments are that task's)."""
    return call.name


_KEYS: dict[str, Callable[[ToolCall], Hashable]] = {"call": call_key, "name": name_key}


def _calls_ok(step: Step) -> list[bool]:
    if len(step.calls) == len(step.tool_calls):
        return [c.ok for c in step.calls]
    return [True] * len(step.tool_calls)


def grounded_labels(
    steps: Sequence[Step],
    reference: Sequence[Sequence[ToolCall]] | None,
    passed: bool,
    match: Literal["call", "name"] = "call",
    answer_from_check: bool = True,
) -> list[StepLabel]:
    """One label per step by the rules of this module's docstring. ``reference`` is the task's reference solution
    (per turn; None = the generic fallback), ``passed`` the environment's check of the whole episode. ``match``:
    rule 3 compares whole calls (``call``) or tool names only (``name``: a reference borrowed from a similar task,
    whose arguments are not this task's); rule 4's repeats always compare whole calls. ``answer_from_check``: in
    the fallback, the episode's final answer is GOOD when it passed, BAD when it failed (off: NEUTRAL, the rule
    before 2026-11-27)."""
    labels: list[StepLabel] = []
    turn = 0
    key = _KEYS[match]
    remaining = [[key(c) for c in t] for t in reference] if reference is not None else None
    seen: set[Hashable] = set()
    other_way: list[tuple[int, int]] = []  # (step, turn) labelled BAD by rule 2 or stateless rule 5
    for i, step in enumerate(steps):
        label, by_reference_only = _label(step, turn, reference, remaining, seen, passed, key)
        labels.append(label)
        if by_reference_only:
            other_way.append((i, turn))
        seen.update(call_key(c) for c in step.tool_calls)
        if not step.tool_calls and step.parse_error is None:
            turn += 1
    if passed and remaining is not None:  # rule 6
        for i, k in other_way:
            if k < len(remaining) and remaining[k]:
                labels[i] = StepLabel.GOOD
    if reference is None and answer_from_check and steps:  # the fallback's rule 2: the final answer
        if not steps[-1].tool_calls and steps[-1].parse_error is None:
            labels[-1] = StepLabel.GOOD if passed else StepLabel.BAD
    return labels


def _label(
    step: Step,
    turn: int,
    reference: Sequence[Sequence[ToolCall]] | None,
    remaining: list[list[Hashable]] | None,
    seen: set[Hashable],
    passed: bool,
    key: Callable[[ToolCall], Hashable] = call_key,
) -> tuple[StepLabel, bool]:
    """The step's label by rules 1-5, and whether it is BAD only for not matching the reference (rule 2's turn
    ended short, or rule 5 on a stateless backend), which rule 6 revisits once the episode is known to have passed."""
    if step.parse_error is not None and not step.tool_calls:
        return StepLabel.BAD, False  # rule 1: nothing executable
    if not all(_calls_ok(step)):
        return StepLabel.BAD, False  # rule 1: an errored or refused call
    if reference is None or remaining is None:
        return StepLabel.NEUTRAL, False  # generic fallback
    todo = remaining[turn] if turn < len(remaining) else []
    g = step.grounding
    if not step.tool_calls:  # rule 2: the answer step
        if turn >= len(reference) - 1:
            return (StepLabel.GOOD if passed else StepLabel.BAD), False
        at_end = g is not None and g.distance_before == 0
        return (StepLabel.GOOD, False) if not todo or at_end else (StepLabel.BAD, True)
    matched = False
    for call in step.tool_calls:  # rule 3: reference calls, each matched once
        k = key(call)
        if k in todo:
            todo.remove(k)
            matched = True
    if matched:
        return StepLabel.GOOD, False
    changed = g is not None and g.state_changed
    if not changed and all(call_key(c) in seen for c in step.tool_calls):
        return StepLabel.BAD, False  # rule 4: a repeat without effect
    if g is None:
        return StepLabel.NEUTRAL, False  # no state facts from this environment
    if g.distance_before is None or g.distance_after is None:
        return StepLabel.BAD, True  # rule 5, stateless: not a reference call, so nothing toward the reference
    return (StepLabel.GOOD if g.distance_after < g.distance_before else StepLabel.BAD), False  # rule 5


def agreement(labels: Sequence[StepLabel], grounded: Sequence[StepLabel]) -> tuple[int, int]:
    """(agreeing steps, compared steps) between another source's labels and grounded ones; NEUTRAL grounded
    steps carry no verdict and are not compared."""
    pairs = [(a, b) for a, b in zip(labels, grounded) if b != StepLabel.NEUTRAL]
    return sum(a == b for a, b in pairs), len(pairs)


def self_reference(group: Sequence[Trajectory], success_threshold: float) -> list[list[ToolCall]] | None:
    """A reference the run derived itself: the executed calls, per turn, of the group's shortest episode that passed
    the environment's check (fewest steps; the first among equals). None when no episode passed. Only calls that ran
    without error count; a step without calls ends its turn, as in ``grounded_labels``."""
    passed = [t for t in group if t.checked_outcome >= success_threshold]
    if not passed:
        return None
    best = min(passed, key=lambda t: len(t.steps))
    turns: list[list[ToolCall]] = [[]]
    for step in best.steps:
        if not step.tool_calls:
            if step.parse_error is None:
                turns.append([])
            continue
        turns[-1].extend(c for c, ok in zip(step.tool_calls, _calls_ok(step)) if ok)
    if not turns[-1] and len(turns) > 1:
        turns.pop()
    return turns


_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W_]+|[^\w\s]")  # words, and each symbol on its own (+, *, /: an operation's sign)


def request_words(request: str) -> frozenset[str]:
    """A request's words and symbols for similarity: lower-cased, every number one placeholder (tasks of one kind
    differ in their numbers, not in their verbs or operation signs)."""
    return frozenset(_WORD.findall(_NUMBER.sub("#", request.lower())))


def request_similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity |a ∩ b| / |a ∪ b| of two requests' words (0 for two empty requests)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def most_similar(
    words: frozenset[str], candidates: dict[str, frozenset[str]], minimum: float
) -> tuple[str, float] | None:
    """The candidate (id, similarity) most similar to ``words``, at least ``minimum`` (ties: the first id in sorted
    order); None when none reaches it."""
    best: tuple[str, float] | None = None
    for cid in sorted(candidates):
        sim = request_similarity(words, candidates[cid])
        if sim >= minimum and (best is None or sim > best[1]):
            best = (cid, sim)
    return best
