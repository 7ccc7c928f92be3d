"""The local backend really generates with the embedded SmolLM2 model."""

import pytest

from evolvekit.llm.base import SamplingParams
from evolvekit.types import ChatMessage

pytestmark = pytest.mark.slow


def _conv(text):
    return [ChatMessage(role="user", content=text)]


def test_greedy_answers_and_returns_tokens_and_logprobs(smollm2):
    [[c]] = smollm2.chat([_conv("What is 2+2?")], SamplingParams(temperature=0, max_new_tokens=32))
    assert "4" in c.text
    assert len(c.token_ids) == len(c.logprobs) > 0
    assert all(lp <= 0 for lp in c.logprobs)
    assert c.prompt_token_ids[-3:] == smollm2.apply_chat_template(_conv("What is 2+2?"))[-3:]
    assert c.finish_reason == "stop" and c.token_ids[-1] in smollm2.eos_ids


def test_batched_greedy_equals_single(smollm2):
    """Left padding and dropping finished rows must not change any sequence."""
    prompts = [_conv("What is 2+2?"), _conv("Name a colour of the sky in one word and explain at length why.")]
    params = SamplingParams(temperature=0, max_new_tokens=24)
    batched = smollm2.chat(prompts, params)
    for prompt, group in zip(prompts, batched):
        [[single]] = smollm2.chat([prompt], params)
        assert group[0].token_ids == single.token_ids


def test_n_samples_seed_and_stop(smollm2):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=24, seed=7)
    a = smollm2.chat([_conv("Say something.")], params)
    b = smollm2.chat([_conv("Say something.")], params)
    assert len(a[0]) == 3
    assert [c.token_ids for c in a[0]] == [c.token_ids for c in b[0]]
    [[c]] = smollm2.chat(
        [_conv("Count: 1, 2, 3, 4, 5, 6, 7, 8")], SamplingParams(temperature=0, max_new_tokens=40, stop=(",",))
    )
    assert "," not in c.text and c.finish_reason == "stop"


def test_length_finish(smollm2):
    [[c]] = smollm2.chat([_conv("Write a long essay about rivers.")], SamplingParams(temperature=0, max_new_tokens=5))
    assert c.finish_reason == "length" and len(c.token_ids) == 5


def test_cli_chat_json(python_exe):
    import json
    import subprocess

    res = subprocess.run(
        [python_exe, "-m", "evolvekit.cli.main", "llm", "chat", "--json", "What is 2+2?"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["tokens_per_s"] > 0 and "4" in out["text"]
