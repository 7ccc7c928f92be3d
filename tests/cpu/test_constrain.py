"""Guided choice: a row restricted by a TokenTrie can only produce one of the allowed token sequences."""

import pytest
import torch

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.constrain import TokenTrie, mask_logits
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model


def test_trie_walks_allowed_sequences_and_ends_at_a_complete_one():
    trie = TokenTrie.build([[5, 6, 7], [5, 9], [8]])
    assert sorted(trie.allowed()) == [5, 8]
    node = trie.advance(5)
    assert sorted(node.allowed()) == [6, 9]
    assert node.advance(9) is None  # [5, 9] complete: the constraint ends
    assert node.advance(6).allowed() == [7]
    assert trie.advance(8) is None
    assert trie.advance(42) is None  # unknown token: no constraint left to apply
    with pytest.raises(ValueError):
        TokenTrie.build([])
    with pytest.raises(ValueError):
        TokenTrie.build([[]])


def test_mask_logits_keeps_only_allowed_entries_of_constrained_rows():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    out = mask_logits(logits, [[0, 2], None])
    assert out[0].tolist() == [1.0, float("-inf"), 3.0, float("-inf")]
    assert out[1].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert mask_logits(logits, [None, None]) is logits
    assert logits[0, 1] == 2.0  # the input is not modified


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("m") / "m")), device="cpu")


def test_constrained_rows_of_a_decode_batch_produce_an_allowed_sequence(llm):
    allowed = [[301, 302, 303], [301, 310], [320, 321]]
    trie = TokenTrie.build(allowed)
    batch = llm.decode_batch(SamplingParams(temperature=1.0, max_new_tokens=5, seed=0))
    batch.add([(k, [10 + k, 11, 12]) for k in range(6)], constraints=[trie] * 5 + [None])
    out = batch.run()
    for k in range(5):
        toks = out[k].token_ids
        assert any(toks[:len(a)] == a for a in allowed), toks
    # the unconstrained row is sampled freely (a random tiny model picks none of these ids at every step)
    assert not any(out[5].token_ids[:len(a)] == a for a in allowed)
