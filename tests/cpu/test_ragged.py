"""Ragged forwards (rows of different lengths packed in one sequence, each with its own KV) equal plain forwards."""

import pytest
import torch

from evolvekit.llm.local import LocalLLM
from evolvekit.llm.ragged import RowKV, ragged_forward
from evolvekit.llm.tiny import make_tiny_model


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("m") / "m")), device="cpu")


def last_logits(llm, ids):
    with torch.no_grad():
        return llm.model(input_ids=torch.tensor([ids])).logits[0, -1]


def test_prefill_then_decode_of_ragged_rows_matches_each_row_alone(llm):
    a, b, c = list(range(20, 57)), [5, 6, 7], [9]
    rows = [RowKV(), RowKV(), RowKV()]
    first = ragged_forward(llm.model, rows, [a[:30], b, c])  # prompts of 30, 3 and 1 tokens in one forward
    assert [r.length for r in rows] == [30, 3, 1]
    assert torch.allclose(first[1], last_logits(llm, b), atol=1e-4)
    assert torch.allclose(first[2], last_logits(llm, c), atol=1e-4)
    second = ragged_forward(llm.model, rows, [a[30:], [8], [10, 11]])  # a prompt tail next to decode steps
    assert torch.allclose(second[0], last_logits(llm, a), atol=1e-4)
    assert torch.allclose(second[1], last_logits(llm, b + [8]), atol=1e-4)
    assert torch.allclose(second[2], last_logits(llm, c + [10, 11]), atol=1e-4)


def test_a_row_started_from_a_prefix_copy_matches_and_leaves_the_prefix_untouched(llm):
    prefix = list(range(40, 80))
    source = RowKV()
    ragged_forward(llm.model, [source], [prefix])
    layers = source.layers()
    before = [k.clone() for k, _ in layers]
    row = RowKV.from_prefix(layers, 25)
    out = ragged_forward(llm.model, [row], [[3, 4]])
    assert torch.allclose(out[0], last_logits(llm, prefix[:25] + [3, 4]), atol=1e-4)
    assert all(torch.equal(k, b) for (k, _), b in zip(source.layers(), before))


def test_buffers_grow_past_their_spare_columns(llm):
    row = RowKV(spare=2)
    ids = [7]
    ragged_forward(llm.model, [row], [ids])
    for t in range(10):  # ten decode steps, several re-allocations
        ids.append(30 + t)
        out = ragged_forward(llm.model, [row], [[30 + t]])
    assert row.length == 11
    assert torch.allclose(out[0], last_logits(llm, ids), atol=1e-4)


def test_rows_without_new_tokens_are_refused(llm):
    with pytest.raises(ValueError):
        ragged_forward(llm.model, [RowKV()], [[]])
