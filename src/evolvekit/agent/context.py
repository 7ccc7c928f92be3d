"""Context manager (AgentEvolver §6.2): the live context timeline and the timeline snapshot recorder.

The *live timeline* is the editable message list the policy sees. Every time the policy generates, the recorder
takes an immutable token-level *snapshot*: the exact prompt ids and the exact sampled completion ids. After the
episode, ``merge`` joins snapshots whose prompt extends the previous snapshot's full sequence, so overlapping
prefixes are stored once; a snapshot whose prompt does not extend it (re-tokenisation, or a template that rewrote
the history) starts a new sequence. Loss mask is 1 exactly on sampled tokens. Merging never re-tokenises: every
token in a merged sequence is a token the model really saw or produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evolvekit.types import SpanKind, TokenSpan


@dataclass(frozen=True)
class Snapshot:
    step_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_logprobs: tuple[float, ...] = ()
    prompt_spans: tuple[TokenSpan, ...] = ()  # annotated ranges of the prompt (e.g. inserted experience)


@dataclass
class MergedSequence:
    """One training sequence: tokens, loss mask, sampled logprobs (0 where not sampled) and per-step spans."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    step_spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # step index -> [start, end) of its tokens
    spans: list[TokenSpan] = field(default_factory=list)
    # set by stripping (train/samples.py): the sequence as generated, and where each kept token stood in it
    unstripped_ids: list[int] | None = None
    kept_positions: list[int] | None = None

    def _append(self, ids, mask: int, kind: SpanKind, logprobs=None) -> tuple[int, int]:
        start = len(self.token_ids)
        self.token_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        self.logprobs.extend(list(logprobs) if logprobs else [0.0] * len(ids))
        end = len(self.token_ids)
        if end > start:
            self.spans.append(TokenSpan(start=start, end=end, kind=kind))
        return start, end


class SnapshotRecorder:
    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def record(self, step_index: int, prompt_ids, completion_ids, logprobs=(), spans=()) -> Snapshot:
        snap = Snapshot(step_index, tuple(prompt_ids), tuple(completion_ids), tuple(logprobs), tuple(spans))
        self.snapshots.append(snap)
        return snap

    def merge(self) -> list[MergedSequence]:
        sequences: list[MergedSequence] = []
        current: MergedSequence | None = None
        for snap in self.snapshots:
            n = len(current.token_ids) if current else 0
            if current is not None and len(snap.prompt_ids) >= n and tuple(current.token_ids) == snap.prompt_ids[:n]:
                current._append(snap.prompt_ids[n:], 0, SpanKind.PROMPT)
            else:
                current = MergedSequence()
                sequences.append(current)
                current._append(snap.prompt_ids, 0, SpanKind.PROMPT)
                n = 0
            # The prompt is a prefix-extension of the sequence, so prompt positions are sequence positions; spans
            # inside the already stored prefix were recorded with the earlier snapshot.
            for span in snap.prompt_spans:
                if span.end > n:
                    current.spans.append(TokenSpan(start=max(span.start, n), end=span.end, kind=span.kind))
            current.step_spans[snap.step_index] = current._append(
                snap.completion_ids, 1, SpanKind.POLICY, snap.completion_logprobs
            )
        return sequences
