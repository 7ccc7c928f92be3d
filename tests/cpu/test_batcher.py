"""Continuous batching: rows that join a live batch mid-decode get exactly what they would get alone."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.batcher import balanced_json_end
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model


def test_balanced_json_end():
    assert balanced_json_end('{"name": "add", "arguments": {"a": 1}}')
    assert balanced_json_end(' [{"name": "x"}] and then rambling')
    assert not balanced_json_end('{"name": "add", "arguments": {"a": 1}')
    assert not balanced_json_end('{"name": "a}b"')  # a bracket inside a string does not count
    assert balanced_json_end('{"s": "quote \\" and } inside"}')
    assert not balanced_json_end("The answer is {5}")  # prose first: not a bare JSON action
    assert balanced_json_end('<tool_call>{"name": "x"} rambling')  # a tagged call is complete at its JSON's end
    assert not balanced_json_end('<tool_call>{"name": "x"')
    assert not balanced_json_end("")


@given(st.text(max_size=40))
def test_balanced_json_end_never_crashes(text):
    done = balanced_json_end(text)
    assert type(done) is bool
    if done:  # a complete JSON action closes a bracket somewhere
        assert "}" in text or "]" in text


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LocalLLM(str(make_tiny_model(tmp_path_factory.mktemp("m") / "m")), device="cpu")


def test_rows_joining_mid_decode_match_solo_generation(llm):
    shared = list(range(100, 150))
    prompts = [shared + [7, 8, 9], shared + [11], [3, 4, 5, 6], shared + [12, 13, 14, 15, 16, 17, 18]]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    solo = []
    for p in prompts:
        llm.reset_prefix_cache()
        solo.append(llm.generate_ids([p], params)[0][0])
    llm.reset_prefix_cache()
    batch = llm.decode_batch(params)
    batch.add([(0, prompts[0]), (1, prompts[1])])  # shared prefix prefilled once and kept
    done = {}
    for step in range(20):
        if step == 2:
            batch.add([(2, prompts[2])])  # no shared prefix, shorter cache: padded on the left
        if step == 4:
            batch.add([(3, prompts[3])])  # reuses the kept prefix, prefills only its own suffix
        done.update(batch.step())
        if len(done) == 4:
            break
    assert len(batch) == 0 and llm.prefix_cache_hits >= 1
    for i, want in enumerate(solo):
        assert done[i].token_ids == want.token_ids
        assert done[i].logprobs == pytest.approx(want.logprobs, abs=1e-4)
        assert done[i].prompt_token_ids == prompts[i]


def test_rows_leave_as_they_finish_and_a_joining_prompt_rides_along_a_decode_forward(llm):
    params = SamplingParams(temperature=0.0, max_new_tokens=3)
    batch = llm.decode_batch(params, keep_rows=True)
    batch.add([("long", list(range(10, 90)))])
    batch.step()
    batch.add([("short", [5, 6])])
    calls = batch.forward_calls
    finished = []
    while len(batch):
        finished += [k for k, _ in batch.step()]
    assert finished == ["long", "short"]  # the first row leaves first, the other decodes on
    assert batch.forward_calls - calls == 3  # "short" was prefilled in long's decode forward: 3 forwards, 3 tokens
    for ids, kept in batch.kept.values():  # each row's own KV: prompt + completion but the last token, no padding
        assert len(kept.own) == llm.model.config.num_hidden_layers and kept.start == 0
        assert all(k.shape[2] == v.shape[2] == len(ids) for k, v in kept.own)


def test_generate_ids_stops_at_balanced_json(llm, monkeypatch):
    import torch

    import evolvekit.llm.batcher as local  # the batcher samples every token (llm/sampling.py)

    script = llm.tokenizer.encode('{"name": "add", "arguments": {"a": 1}} and more text', add_special_tokens=False)
    drawn = iter(script)
    monkeypatch.setattr(local, "sample_next", lambda logits, *a: torch.tensor([next(drawn)] * logits.shape[0]))
    out = llm.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=40, stop_on_balanced_json=True))[0][0]
    assert out.finish_reason == "stop" and out.text == '{"name": "add", "arguments": {"a": 1}}'
    drawn = iter(script)
    out = llm.generate_ids([[1, 2, 3]], SamplingParams(max_new_tokens=len(script)))[0][0]
    assert out.finish_reason == "length" and out.text.startswith('{"name": "add", "arguments": {"a": 1}} and more')


def test_a_returning_row_reuses_its_own_kv(llm):
    """The next turn of an episode prefills only its new tokens, and samples what a full prefill would."""
    params = SamplingParams(temperature=0.0, max_new_tokens=5)
    llm.reset_prefix_cache()
    first = llm.generate_ids([[20, 21, 22, 23]], params)[0][0]
    turn2 = [20, 21, 22, 23, *first.token_ids, 30, 31, 32]
    want = llm.generate_ids([turn2], params)[0][0]
    llm.reset_prefix_cache()
    batch = llm.decode_batch(params, keep_rows=True)
    batch.add([("ep", [20, 21, 22, 23])])
    batch.add([("other", [40, 41])])
    done = {}
    while "ep" not in done:
        done.update(batch.step())
    before = batch.prefilled_tokens
    batch.add([("ep", turn2)])  # its previous prompt + completion (but the last token) are in the kept KV
    assert batch.prefilled_tokens - before == 1 + 3
    got = {}
    while "ep" not in got:
        got.update(batch.step())
    assert got["ep"].token_ids == want.token_ids
    assert got["ep"].logprobs == pytest.approx(want.logprobs, abs=1e-4)
    batch.forget("ep")
    assert "ep" not in batch.kept


def test_json_end_index_and_the_cut_completion(llm, monkeypatch):
    import torch

    import evolvekit.llm.batcher as local  # the batcher samples every token (llm/sampling.py)
    from evolvekit.llm.batcher import json_end_index

    assert json_end_index('<tool_call>{"a": 1}}</') == len('<tool_call>{"a": 1}')
    assert json_end_index('  {"a": "}"} x') == len('  {"a": "}"}')
    assert json_end_index('{"a": 1') is None and json_end_index("hello") is None
    # a token that closes the JSON and carries more characters: the text is cut right after the JSON
    script = llm.tokenizer.encode("1}}</tool_call> and more", add_special_tokens=False)
    drawn = iter(script)
    monkeypatch.setattr(local, "sample_next", lambda logits, *a: torch.tensor([next(drawn)] * logits.shape[0]))
    batch = llm.decode_batch(SamplingParams(max_new_tokens=len(script), stop_on_balanced_json=True))
    prefix = '<tool_call>{"name": "add", "arguments": {"a": '
    batch.add([("r", [1, 2, 3])], text_prefixes=[prefix])
    out = batch.run()["r"]
    assert out.finish_reason == "stop" and prefix + out.text == prefix + "1}}"


def test_a_seeded_row_samples_the_same_tokens_whatever_shares_its_batch(llm):
    """Per-key sampling streams: a rollout's tokens do not depend on its batch-mates (batched == sequential)."""
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    alone = llm.decode_batch(params)
    alone.add([("ep", [20, 21, 22])])
    want = alone.run()["ep"]
    crowd = llm.decode_batch(params)
    crowd.add([("x", [5, 6, 7, 8]), ("ep", [20, 21, 22]), ("y", [9])])
    got = crowd.run()
    assert got["ep"].token_ids == want.token_ids
    # every key has its own stream: the other rows do not replay "ep"'s draws
    assert got["x"].token_ids != want.token_ids and got["y"].token_ids != want.token_ids
    other_seed = llm.decode_batch(SamplingParams(temperature=1.0, max_new_tokens=8, seed=4))
    other_seed.add([("ep", [20, 21, 22])])
    assert other_seed.run()["ep"].token_ids != want.token_ids


def test_incremental_json_stop_check_equals_the_full_rescan():
    """The balanced-JSON stop check is fed each new piece once (linear), and says exactly what rescanning the whole
    text at every step says (``json_end_index``), on 20,000 random texts cut into random pieces."""
    import random

    from evolvekit.llm.batcher import JsonEndScanner, json_end_index

    rng = random.Random(0)
    alphabet = ["{", "}", "[", "]", '"', "\\", " ", "\n", "a", "1", ":", ",", "<tool_call>", "<tool_", "call>", "x"]
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        scanner, pos = JsonEndScanner(), 0
        while pos < len(text):
            n = rng.randint(1, 4)
            got = scanner.feed(text[pos : pos + n])
            pos += n
            assert got == (json_end_index(text[:pos]) is not None), text[:pos]


def test_stream_detokenizer_yields_exactly_the_full_decode(llm):
    import random

    from evolvekit.llm.batcher import StreamDetokenizer

    rng = random.Random(1)
    for _ in range(50):
        ids = [rng.randrange(llm.tokenizer.vocab_size) for _ in range(rng.randint(1, 30))]
        detok, text = StreamDetokenizer(llm.tokenizer), ""
        for k in range(1, len(ids) + 1):
            text += detok.delta(ids[:k])
        full = llm.tokenizer.decode(ids, skip_special_tokens=True)
        assert full.startswith(text) and (text == full or full.endswith("\ufffd"))
