import pytest

from evolvekit.llm.base import SamplingParams
from evolvekit.types import ChatMessage

pytestmark = pytest.mark.gpu


def test_local_backend_on_cuda():
    from evolvekit.llm.local import LocalLLM

    llm = LocalLLM(device="cuda")
    [[c]] = llm.chat(
        [[ChatMessage(role="user", content="What is 2+2?")]], SamplingParams(temperature=0, max_new_tokens=16)
    )
    assert c.token_ids and c.text
