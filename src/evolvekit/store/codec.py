"""How a trajectory is stored: each step's prompt as the part it shares with the previous step's sequence plus
its new tokens, so a stored episode grows linearly with its length.

A multi-step episode's prompt at step k is (almost always) step k-1's prompt and completion followed by the
observation: stored whole, every step repeats the episode so far and the stored size grows with the square of
the episode's length. Here step k keeps only ``prompt[shared:]``, with ``shared`` the longest common prefix of its
prompt and step k-1's prompt + completion (0 for the first step, or when a context template rewrote the history).
Decoding rebuilds every prompt exactly (tests/cpu/test_store.py checks the round trip and the size).

Rows written before this encoding (store schema 1) carry whole prompts and no ``prompt_shared`` key; they decode
unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from evolvekit.types import Trajectory

SHARED_KEY = "prompt_shared"  # per step: tokens shared with the previous step's prompt + completion


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def encode_trajectory(t: Trajectory) -> str:
    """The stored JSON of a trajectory: each step's prompt as (shared length, new tokens)."""
    data: dict[str, Any] = t.model_dump(mode="json")
    shared: list[int] = []
    previous: list[int] = []
    for step, raw in zip(t.steps, data["steps"]):
        prompt = step.prompt_token_ids
        n = common_prefix(previous, prompt)
        shared.append(n)
        raw["prompt_token_ids"] = prompt[n:]
        previous = prompt + step.completion_token_ids
    if any(shared):
        data[SHARED_KEY] = shared
    return json.dumps(data, separators=(",", ":"))


def decode_trajectory(text: str | bytes, annotations: str | None = None) -> Trajectory:
    """Inverse of ``encode_trajectory`` (with the annotations written after the rollout, if any); also reads rows
    stored with whole prompts."""
    data = json.loads(text)
    if annotations:
        data.update(json.loads(annotations))
    shared = data.pop(SHARED_KEY, None)
    if shared:
        previous: list[int] = []
        for n, raw in zip(shared, data["steps"]):
            raw["prompt_token_ids"] = previous[:n] + list(raw.get("prompt_token_ids") or [])
            previous = raw["prompt_token_ids"] + list(raw.get("completion_token_ids") or [])
    return Trajectory.model_validate(data)


# fields that stages after the rollout annotate (attribution); stored apart so the body is written once
ANNOTATED = ("step_attributions", "attribution_source", "flags")


def encode_annotations(t: Trajectory) -> str:
    """What later stages annotated (step labels, their source, flags), stored beside the rollout's body."""
    return json.dumps(t.model_dump(mode="json", include=set(ANNOTATED)), separators=(",", ":"))
