"""The context manager's snapshot recorder (agent/context.py, AgentEvolver §6.2) at its edges: a prompt that is
exactly the stored sequence, an empty completion, and experience spans at the start of a sequence and at the end of
the stored prefix."""

from __future__ import annotations

from evolvekit.agent.context import SnapshotRecorder
from evolvekit.types import SpanKind, TokenSpan

EXP = SpanKind.EXPERIENCE


def test_a_prompt_equal_to_the_stored_sequence_extends_it():
    rec = SnapshotRecorder()
    rec.record(0, [1, 2], [3])
    rec.record(1, [1, 2, 3], [4, 5])  # nothing new in the prompt: the next turn starts at once
    (seq,) = rec.merge()
    assert seq.token_ids == [1, 2, 3, 4, 5] and seq.loss_mask == [0, 0, 1, 1, 1]
    assert seq.step_spans == {0: (2, 3), 1: (3, 5)}


def test_empty_ranges_leave_no_span():
    rec = SnapshotRecorder()
    rec.record(0, [1, 2], [])  # an empty completion
    rec.record(1, [1, 2], [3])  # nothing new in the prompt either
    (seq,) = rec.merge()
    assert all(s.end > s.start for s in seq.spans)
    assert [(s.start, s.end, s.kind) for s in seq.spans] == [(0, 2, SpanKind.PROMPT), (2, 3, SpanKind.POLICY)]
    assert seq.step_spans == {0: (2, 2), 1: (2, 3)}


def test_experience_spans_are_kept_once_from_the_start_of_a_sequence():
    rec = SnapshotRecorder()
    rec.record(0, [7, 8, 9], [1], spans=[TokenSpan(start=0, end=1, kind=EXP)])  # at position 0 of a new sequence
    # the next prompt repeats the whole stored sequence (4 tokens) with a span ending exactly there, and adds one
    rec.record(
        1, [7, 8, 9, 1, 6], [2], spans=[TokenSpan(start=0, end=4, kind=EXP), TokenSpan(start=3, end=5, kind=EXP)]
    )
    (seq,) = rec.merge()
    assert [(s.start, s.end) for s in seq.spans if s.kind == EXP] == [(0, 1), (4, 5)]
