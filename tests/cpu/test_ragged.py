"""Ragged forwards (rows of different lengths packed in one sequence, one KV slot each) equal plain forwards."""

import pytest
import torch

from evolvekit.llm.local import LocalLLM
from evolvekit.llm.ragged import KVSlots, ragged_forward
from evolvekit.llm.tiny import make_tiny_model


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("m") / "m")), device="cpu")


def last_logits(llm, ids):
    with torch.no_grad():
        return llm.model(input_ids=torch.tensor([ids])).logits[0, -1]


def pool(rows: int, spare: int = 128) -> KVSlots:
    slots = KVSlots(spare=spare)
    for _ in range(rows):
        slots.append()
    return slots


def test_prefill_then_decode_of_ragged_rows_matches_each_row_alone(llm):
    a, b, c = list(range(20, 57)), [5, 6, 7], [9]
    slots = pool(3)
    first = ragged_forward(llm.model, slots, [a[:30], b, c])  # prompts of 30, 3 and 1 tokens in one forward
    assert slots.lengths == [30, 3, 1]
    assert torch.allclose(first[1], last_logits(llm, b), atol=1e-4)
    assert torch.allclose(first[2], last_logits(llm, c), atol=1e-4)
    second = ragged_forward(llm.model, slots, [a[30:], [8], [10, 11]])  # a prompt tail next to decode steps
    assert torch.allclose(second[0], last_logits(llm, a), atol=1e-4)
    assert torch.allclose(second[1], last_logits(llm, b + [8]), atol=1e-4)
    assert torch.allclose(second[2], last_logits(llm, c + [10, 11]), atol=1e-4)
    third = ragged_forward(llm.model, slots, [[1], [2], [3]])  # a decode-only step (one indexed KV write)
    for out, ids in zip(third, (a + [1], b + [8, 2], c + [10, 11, 3])):
        assert torch.allclose(out, last_logits(llm, ids), atol=1e-4)


def test_removing_a_row_moves_the_last_one_into_its_slot(llm):
    a, b, c = [4, 5, 6, 7], [8, 9], [10, 11, 12]
    slots = pool(3)
    ragged_forward(llm.model, slots, [a, b, c])
    slots.remove(0)  # c moves into slot 0
    assert slots.lengths == [3, 2]
    out = ragged_forward(llm.model, slots, [[1], [2]])
    assert torch.allclose(out[0], last_logits(llm, c + [1]), atol=1e-4)
    assert torch.allclose(out[1], last_logits(llm, b + [2]), atol=1e-4)


def test_a_row_started_from_an_extracted_prefix_matches_and_leaves_it_untouched(llm):
    prefix = list(range(40, 80))
    source = pool(1)
    ragged_forward(llm.model, source, [prefix])
    layers = source.extract(0).own
    before = [k.clone() for k, _ in layers]
    slots = KVSlots()
    slots.append(layers, 25)  # a fresh pool allocates from the prefix's shapes
    slots.append()  # and a row without prefix next to it
    out = ragged_forward(llm.model, slots, [[3, 4], [6]])
    assert torch.allclose(out[0], last_logits(llm, prefix[:25] + [3, 4]), atol=1e-4)
    assert torch.allclose(out[1], last_logits(llm, [6]), atol=1e-4)
    assert all(torch.equal(k, b) for (k, _), b in zip(layers, before))


def test_buffers_grow_past_their_spare_columns_and_slots(llm):
    slots = pool(1, spare=2)
    ids = [[7]]
    ragged_forward(llm.model, slots, [[7]])
    for t in range(10):  # decode steps and joining rows: several re-allocations of columns and slots
        if t in (3, 6):
            slots.append()
            ids.append([])
        for r in ids:
            r.append(30 + t)
        out = ragged_forward(llm.model, slots, [[30 + t]] * len(ids))  # a new row's first token is its prompt
    assert slots.lengths == [len(r) for r in ids]
    for o, r in zip(out, ids):
        assert torch.allclose(o, last_logits(llm, r), atol=1e-4)


def test_rows_without_new_tokens_are_refused(llm):
    with pytest.raises(ValueError):
        ragged_forward(llm.model, pool(1), [[]])
    with pytest.raises(ValueError):
        ragged_forward(llm.model, pool(2), [[1]])


def two_rows_on_a_prefix(llm, prefix):
    """A pool whose first two rows share the KV of ``prefix``, and that KV."""
    source = pool(1)
    ragged_forward(llm.model, source, [prefix])
    shared = source.extract(0).own
    slots = KVSlots()
    slots.append_shared(shared, len(prefix))
    slots.append_shared(shared, len(prefix))
    return slots, shared


def test_rows_on_a_shared_prefix_attend_to_it_without_copying_it(llm):
    prefix = list(range(60, 100))
    slots, shared = two_rows_on_a_prefix(llm, prefix)
    slots.append()  # a row without the prefix, next to them
    assert slots.prefix is shared and slots.starts == [40, 40, 0] and slots.columns(0) == 0
    a, b, c = [5, 6, 7], [8], [9, 10]
    out = ragged_forward(llm.model, slots, [a, b, c])  # cascade for the last queries and the multi-token rows
    for o, ids in zip(out, (prefix + a, prefix + b, c)):
        assert torch.allclose(o, last_logits(llm, ids), atol=1e-4)
    out = ragged_forward(llm.model, slots, [[1], [2], [3]])  # decode-only step
    for o, ids in zip(out, (prefix + a + [1], prefix + b + [2], c + [3])):
        assert torch.allclose(o, last_logits(llm, ids), atol=1e-4)
    kept = slots.extract(1)  # the prefix is referenced, only the row's own positions are copied
    assert kept.prefix is shared and kept.start == 40 and kept.own[0][0].shape[2] == 2
    slots.remove(1)
    slots.append_copy(kept, 41)  # the next turn reuses prefix + the first own position
    out = ragged_forward(llm.model, slots, [[4], [5], [2, 11]])
    assert torch.allclose(out[2], last_logits(llm, prefix + b + [2, 11]), atol=1e-4)
    other = KVSlots()
    other.append_shared([(k.clone(), v.clone()) for k, v in shared], len(prefix))  # another prefix object
    other.append_copy(kept, 42)  # a pool on another prefix gets a plain copy
    assert other.starts == [40, 0]
    out = ragged_forward(llm.model, other, [[1], [12]])
    assert torch.allclose(out[0], last_logits(llm, prefix + [1]), atol=1e-4)
    assert torch.allclose(out[1], last_logits(llm, prefix + b + [2, 12]), atol=1e-4)


def test_a_long_row_joining_a_pool_of_short_ones_grows_the_buffers(llm):
    slots = pool(3, spare=0)
    ragged_forward(llm.model, slots, [[1, 2], [3], [4]])
    slots.remove(1)
    source = pool(1)
    long = list(range(100, 160))
    ragged_forward(llm.model, source, [long])
    slots.append(source.extract(0).own, 60)  # more columns than the pool has, into a free slot
    out = ragged_forward(llm.model, slots, [[5], [6], [7]])
    for o, ids in zip(out, ([1, 2, 5], [4, 6], long + [7])):
        assert torch.allclose(o, last_logits(llm, ids), atol=1e-4)


def test_cascade_in_bfloat16(tmp_path):
    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu", dtype="bfloat16")
    prefix = list(range(60, 100))
    slots, _ = two_rows_on_a_prefix(llm, prefix)
    out = ragged_forward(llm.model, slots, [[5, 6], [7]])
    assert out.dtype == torch.bfloat16
    for o, ids in zip(out, (prefix + [5, 6], prefix + [7])):
        assert torch.allclose(o.float(), last_logits(llm, ids).float(), atol=0.1)
