"""Guided choice and guided JSON: a row restricted by a TokenTrie can only produce one of the allowed token
sequences, and a row under a SchemaConstraint only a JSON object its schema accepts."""

import json

import pytest
import torch

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.constrain import SchemaConstraint, SchemaVocabulary, TokenTrie, json_schema, mask_logits
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
        assert any(toks[: len(a)] == a for a in allowed), toks
    # the unconstrained row is sampled freely (a random tiny model picks none of these ids at every step)
    assert not any(out[5].token_ids[: len(a)] == a for a in allowed)


def test_trie_hands_over_to_the_constraint_that_follows_a_completed_sequence():
    nxt = TokenTrie.build([[1]])
    trie = TokenTrie.build([[5, 6], [7]], thens=[lambda: nxt, None])
    assert trie.advance(5).advance(6) is nxt and trie.advance(7) is None


def test_json_schema_maps_tool_types_closes_objects_and_caps_strings():
    bfcl = {
        "type": "dict",
        "properties": {
            "a": {"type": "float", "default": 1.0},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"type": "string", "enum": ["x", "y"]},
        },
        "required": ["a", "gone"],
    }
    assert json_schema(bfcl, max_string_length=8) == {
        "type": "object",
        "required": ["a"],
        "additionalProperties": False,
        "properties": {
            "a": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}},
            "mode": {"type": "string", "enum": ["x", "y"]},
        },
    }
    assert json_schema({"type": "any"}) == {}


@pytest.fixture(scope="module")
def vocab(llm):
    return SchemaVocabulary(llm.tokenizer, llm.eos_ids)


def test_schema_constrained_rows_produce_objects_the_schema_accepts(llm, vocab):
    schema = {
        "type": "dict",
        "required": ["username", "n"],
        "properties": {"username": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"}},
    }
    close = TokenTrie.build([llm.encode("}")])
    batch = llm.decode_batch(SamplingParams(temperature=1.0, max_new_tokens=80, seed=0, stop_on_balanced_json=True))
    prefix = '{"name": "f", "arguments":'
    batch.add(
        [(k, [10 + k, 11, 12]) for k in range(4)],
        text_prefixes=[prefix] * 4,
        constraints=[SchemaConstraint(vocab, schema, then=lambda: close, max_string_length=12) for _ in range(4)],
    )
    out = batch.run()
    for k in range(4):  # a random tiny model, yet every row is a complete call with the schema's arguments
        call = json.loads(prefix + out[k].text)
        args = call["arguments"]
        assert set(args) <= {"username", "n", "ok"} and {"username", "n"} <= set(args), args
        assert isinstance(args["username"], str) and len(args["username"]) <= 12 and isinstance(args["n"], int)
        assert len(str(args["n"])) <= 13  # a number ends once it has 12 characters (the sign aside)


def test_a_number_is_ended_once_it_is_long_enough_and_takes_no_exponent(vocab):
    ids = {}
    for i, t in vocab.text.items():
        ids.setdefault(t, i)
    c = SchemaConstraint(
        vocab, {"type": "object", "properties": {"x": {"type": "number"}, "s": {"type": "string"}}}, max_number_length=3
    )
    for piece in ('{"', "x", '":'):
        c = c.advance(ids[piece])
    for _ in range(3):
        assert ids["1"] in c.allowed()
        c = c.advance(ids["1"])
        assert ids["e"] not in c.allowed() and ids["E"] not in c.allowed()  # no exponent inside a number
    assert ids["1"] not in c.allowed() and ids[","] in c.allowed()  # three digits: the number ends
    for piece in (",", '"', "s", '":', '"'):
        c = c.advance(ids[piece])
    assert (
        vocab.unsafe and not set(c.allowed().tolist()) & vocab.unsafe
    )  # no piece of a multi-byte character, no "\x19"
    for _ in range(5):  # inside a string, digits and "e" are text: no limit applies
        assert ids["1"] in c.allowed() and ids["e"] in c.allowed()
        c = c.advance(ids["1"])


def test_no_trailing_comma_closes_an_object(vocab):
    ids = {}
    for i, t in vocab.text.items():
        ids.setdefault(t, i)
    c = SchemaConstraint(vocab, {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string"}}})
    for piece in ('{"', "x", '":', "1", ","):
        c = c.advance(ids[piece])
    allowed = {vocab.text[t] for t in c.allowed().tolist()}
    assert allowed and not any(t.lstrip().startswith(("}", "]")) for t in allowed)
    assert any(t.lstrip().startswith('"') for t in allowed)  # the next key


def test_a_single_space_is_allowed_where_json_takes_whitespace_and_no_other_blank(vocab):
    """A small model's most likely token after '"a":' is a space; blocking it moved that mass onto tokens such as
    " -", and the explorer wrote almost only negative numbers (SmolLM2-135M: 0.78 on " " after '"a":')."""
    ids = {}
    for i, t in vocab.text.items():
        ids.setdefault(t, i)
    c = SchemaConstraint(vocab, {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}})
    for piece in ('{"', "x", '":'):
        c = c.advance(ids[piece])
    allowed = set(c.allowed().tolist())
    assert ids[" "] in allowed and vocab.space == {ids[" "]}
    assert not (allowed & (vocab.blank - vocab.space))  # no "\n", "  " or "\n\t\t"
    c = c.advance(ids[" "])
    allowed = {vocab.text[t] for t in c.allowed().tolist()}
    assert "1" in allowed and "-" in allowed and " " not in allowed  # a number follows, one space at a time


def test_number_strings_are_digits_with_one_point():
    from evolvekit.llm.constrain import number_strings

    assert number_strings(25) == {"25"} and number_strings(-3) == {"3"}
    assert number_strings(8.0) == {"8", "8.0"} and number_strings(2.5) == {"2.5"}
    assert number_strings(1e-05) == set() and number_strings(True) == set() and number_strings("25") == set()


class _DigitTokenizer:
    """Eight tokens: three digits, '.', a space, a word, a digit-word mix and an end token."""

    texts = ["1", "2", "5", ".", " ", "and", "1st", "<end>"]
    all_special_ids = [7]

    def __len__(self):
        return len(self.texts)

    def decode(self, ids):
        return "".join(self.texts[i] for i in ids)


def test_number_constraint_lets_only_the_given_numbers_through():
    from evolvekit.llm.constrain import NumberConstraint, NumberVocabulary

    vocab = NumberVocabulary(_DigitTokenizer(), eos_ids=[7])
    c = NumberConstraint(vocab, {"25", "2.5", "1"})
    allowed = lambda: sorted(c.allowed().tolist())  # noqa: E731
    assert allowed() == [0, 1, 3, 4, 5, 7]  # digits that start an allowed number, every digit-free token; not "1st"
    c.advance(1)  # "2": open, incomplete
    assert allowed() == [2, 3]  # only "5" or "." may follow
    c.advance(2)  # "25": complete
    assert allowed() == [3, 4, 5, 7]  # no further digit; the sentence goes on
    c.advance(4)
    c.advance(1)
    c.advance(3)  # "2.": continues towards 2.5 ("2" alone is not allowed)
    assert allowed() == [2]
    c.advance(2)
    assert allowed() == [3, 4, 5, 7]
    c.advance(4)
    c.advance(0)  # "1": complete, and "1." is no prefix, so "." is the full stop
    assert allowed() == [3, 4, 5, 7]
    c.advance(3)
    assert c.run == "" and allowed() == [4, 7]  # after "1." a space or the end: not "2" (1.2), nor "and" (1.and)
    c.advance(4)
    assert allowed() == [0, 1, 3, 4, 5, 7]


def test_number_constrained_sampling_writes_no_other_number(llm):
    """Sampling over the real vocabulary with logits that favour digits: under the constraint every number written is
    an allowed one (and numbers are still written); without it, other numbers appear."""
    import re

    from evolvekit.llm.constrain import NumberConstraint, NumberVocabulary, mask_logits

    vocab = NumberVocabulary(llm.tokenizer, llm.eos_ids)
    numbers = {"25", "3", "2.5"}
    digit_ids = torch.tensor(sorted(vocab.digits) + vocab.dots)

    def sample(constrained: bool) -> str:
        gen = torch.Generator().manual_seed(0)
        c = NumberConstraint(vocab, numbers)
        toks = []
        for _ in range(80):
            logits = torch.randn(1, len(llm.tokenizer), generator=gen)
            logits[0, digit_ids] += 9.0  # a digit-happy model
            if constrained:
                logits = mask_logits(logits, [c.allowed()])
            t = int(torch.multinomial(torch.softmax(logits[0], -1), 1, generator=gen))
            c.advance(t)
            toks.append(t)
        return llm.tokenizer.decode(toks)

    text = sample(True)
    found = re.findall(r"\d+(?:\.\d+)?", text)
    assert found and set(found) <= numbers, text
    assert set(re.findall(r"\d+(?:\.\d+)?", sample(False))) - numbers


def _ids(vocab):
    ids = {}
    for i, t in vocab.text.items():
        ids.setdefault(t, i)
    return ids


def test_every_bfcl_tool_schema_gives_a_grammar_and_its_reference_arguments_pass(vocab, llm):
    """The swap to llguidance (issue 54): every tool schema of every BFCL backend compiles, and the arguments of
    the first reference calls, tokenized as a writer would, are allowed token by token to the end."""
    from evolvekit.env.bfcl import data
    from evolvekit.env.bfcl.env import BfclEnv

    env = BfclEnv()
    env.reset(None, {"classes": list(data.BACKEND_CLASSES)})
    tools = {t.name: t for t in env.tools()}
    env.close()
    assert len(tools) > 100
    for tool in tools.values():
        SchemaConstraint(vocab, dict(tool.parameters or {"type": "object", "properties": {}}))
    checked = 0
    for task in data.load_tasks("multi_turn_base")[:4]:
        for call in [c for turn in task.reference_solution or [] for c in turn if c.name in tools]:
            c = SchemaConstraint(vocab, dict(tools[call.name].parameters or {}))
            for t in llm.tokenizer.encode(json.dumps(call.arguments, separators=(",", ": ")), add_special_tokens=False):
                assert t in c.allowed(), (call, llm.tokenizer.decode([t]))
                c = c.advance(t)
            assert c is None  # complete after the closing brace
            checked += 1
    assert checked > 10


def test_keys_in_the_schemas_order_whole_tokens_and_no_special_token_in_a_string(vocab, llm):
    ids = _ids(vocab)
    schema = {
        "type": "object",
        "properties": {"b": {"type": "string"}, "a": {"type": "integer"}},
        "required": ["b", "a"],
    }
    c = SchemaConstraint(vocab, schema)
    c = c.advance(ids['{"'])
    allowed = {vocab.text[t] for t in c.allowed().tolist()}
    assert "b" in allowed and "a" not in allowed  # required properties in the schema's order
    for piece in ("b", '":', '"'):
        c = c.advance(ids[piece])
    special = set(range(len(llm.tokenizer))) - set(vocab.text)
    assert special and not set(c.allowed().tolist()) & special  # inside a string: text tokens only


def test_a_refused_token_ends_the_constraint(vocab):
    ids = _ids(vocab)
    c = SchemaConstraint(vocab, {"type": "object", "properties": {"x": {"type": "integer"}}})
    assert ids["x"] not in c.allowed()
    assert c.advance(ids["x"]) is None  # an unmasked caller fed a refused token: the row decodes freely


def test_json_schema_caps_arrays_and_strings():
    out = json_schema({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}}}, 64, 8)
    assert out["properties"]["xs"]["maxItems"] == 8 and out["properties"]["xs"]["items"]["maxLength"] == 64
    kept = json_schema({"type": "array", "maxItems": 3}, None, 8)
    assert kept["maxItems"] == 3  # a schema's own cap stays


def test_a_hostile_schema_stays_json_and_a_bad_one_is_a_value_error(vocab, llm):
    """Tool schemas come from outside (MCP, OpenEnv servers): a key written as grammar text is only ever a JSON key,
    and a schema llguidance cannot compile is a ValueError (the explorer then decodes that call freely)."""
    key = 'a"}\nstart: /.*/\nvalue: %json {'
    c = SchemaConstraint(vocab, {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]})
    ids = _ids(vocab)
    c = c.advance(ids['{"'])
    assert ids["}"] not in c.allowed() and ids["x"] not in c.allowed()  # only the key's own text may follow
    with pytest.raises(ValueError, match="no grammar"):
        SchemaConstraint(vocab, {"type": "object", "properties": {"x": {"type": "frobnicate"}}})
