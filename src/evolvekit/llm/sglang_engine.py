"""The policy's rollouts through a running SGLang server (``models.policy.engine: sglang``): a served policy that is
trained.

The fourth backend of the token-level seam (``engine/base.py``): token ids in, sampled token ids with their
log-probabilities out (``generate_ids``, SGLang's native ``POST /generate`` with ``input_ids`` and
``return_logprob``), ``update_weights`` and ``reset_prefix_cache`` (``POST /flush_cache``). The trainer keeps the
policy in process; the server holds its own copy of the weights, so it is not ``in_process``: after every update
(``Policy.publish``) the weights are written as a model folder under ``models.policy.engine_weights_dir`` (a folder
the server can read: the same machine, or a shared file system) and the server loads them with
``POST /update_weights_from_disk`` (SGLang's own refit API for RL). The engine pushes the policy's weights when it
starts, so the server samples from the policy (a checkpoint's weights, on resume) and not from whatever it was
started with; the server must serve the same architecture and tokenizer as ``models.policy.model``.

Every request has an overall deadline (``timeout_s``, the whole reply, not each read) and a size cap
(``bounded_http``); a refused request, a trickling, huge, deep or malformed answer or a failed weight load is one
``LLMError`` line. SGLang is not a dependency: the server is whatever the user runs (``python -m
sglang.launch_server --model-path <the policy's folder>``). The conversions below are plain functions, tested
everywhere; ``tests/cpu/test_sglang_engine.py`` runs the engine against a stand-in server over real HTTP.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Sequence

from evolvekit.bounded_http import bounded_client, bounded_request
from evolvekit.errors import LLMError
from evolvekit.llm.base import Completion, SamplingParams, offset_seed
from evolvekit.llm.local import LocalLLM, OverLocal

log = logging.getLogger(__name__)

MAX_REPLY_BYTES = 64 * 2**20  # a /generate reply carries every sampled token's log-probability: ~40 bytes a token


def sglang_generate_request(prompts: Sequence[Sequence[int]], params: SamplingParams) -> dict[str, Any]:
    """The body of SGLang's ``POST /generate`` for ``params.n`` samples of each prompt: each prompt repeated n times
    (in order: prompt 0's n samples first), the same temperature (0: greedy), top-p, token limit and stop strings,
    and the sampled tokens' log-probabilities (``return_logprob``). A seed gives each row its own
    (``sampling_seed``: the seed plus the row's index)."""
    greedy = params.temperature == 0
    rows = [list(p) for p in prompts for _ in range(params.n)]
    sampling: dict[str, Any] = {
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "max_new_tokens": params.max_new_tokens,
    }
    if params.stop:
        sampling["stop"] = list(params.stop)
    body: dict[str, Any] = {"input_ids": rows, "return_logprob": True}
    if params.seed is None:
        body["sampling_params"] = sampling
    else:
        body["sampling_params"] = [{**sampling, "sampling_seed": offset_seed(params.seed, i)} for i in range(len(rows))]
    return body


def completions_from_sglang(answer: Any, prompts: Sequence[Sequence[int]], n: int) -> list[list[Completion]]:
    """Completions from SGLang's ``/generate`` answer (a list, one item per row of ``sglang_generate_request``):
    each row's sampled token ids and their log-probabilities (``meta_info.output_token_logprobs``: ``[logprob,
    token_id, text]`` per token), its text and ``finish_reason`` ("length" when SGLang's is of type "length", else
    "stop"). A malformed answer is an ``LLMError`` naming what is wrong."""
    if isinstance(answer, dict):  # a single row is answered as an object
        answer = [answer]
    if not isinstance(answer, list) or len(answer) != len(prompts) * n:
        got = len(answer) if isinstance(answer, list) else type(answer).__name__
        raise LLMError(f"SGLang /generate answered {got} results for {len(prompts) * n} rows")
    result: list[list[Completion]] = []
    for i, prompt in enumerate(prompts):
        comps = []
        for row in answer[i * n : (i + 1) * n]:
            try:
                meta = row["meta_info"]
                steps = meta["output_token_logprobs"]
                ids = [int(s[1]) for s in steps]
                logprobs = [float(s[0]) for s in steps]
                finish = meta.get("finish_reason") or {}
                text = str(row.get("text", ""))
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise LLMError(
                    f"SGLang /generate answered a row without its tokens' log-probabilities ({err!r})"
                ) from None
            kind = finish.get("type") if isinstance(finish, dict) else finish
            comps.append(
                Completion(
                    text=text,
                    token_ids=ids,
                    logprobs=logprobs,
                    prompt_token_ids=list(prompt),
                    finish_reason="length" if kind == "length" else "stop",
                )
            )
        result.append(comps)
    return result


class SGLangEngine(OverLocal):
    """``generate_ids`` / ``update_weights`` / ``reset_prefix_cache`` over a running SGLang server at ``url``."""

    def __init__(
        self,
        local: LocalLLM,
        url: str,
        weights_dir: str | Path,
        timeout_s: float = 600.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        client: Any = None,
    ) -> None:
        self.local = local
        self.url = url.rstrip("/")
        self.name = f"sglang:{local.name}"
        self.tokenizer, self.eos_ids = local.tokenizer, local.eos_ids
        self.weights_dir = Path(weights_dir)
        self.deadline_s, self.max_reply_bytes = timeout_s, max_reply_bytes
        self.client = client or bounded_client(timeout=timeout_s)
        self.version = 0  # weight pushes so far: each goes to a folder of its own
        for stale in self.weights_dir.glob("push-*"):  # an earlier process's pushes (a resumed run): this engine's own
            shutil.rmtree(stale, ignore_errors=True)
        self.update_weights(local.model.state_dict())  # the policy's weights (a checkpoint's, on resume)
        log.info("SGLang engine at %s (weights through %s)", self.url, self.weights_dir)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """One request whose whole reply arrives within the deadline and the size cap (``bounded_http``), as JSON."""
        where = f"SGLang server {self.url}{path}"
        resp = bounded_request(
            self.client, "POST", self.url + path, where, self.deadline_s, self.max_reply_bytes, LLMError, json=body
        )
        if resp.status_code != 200:
            raise LLMError(f"{where} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()
        except ValueError as err:
            raise LLMError(f"{where} answered something that is not JSON ({err})") from None

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        if not prompts:
            return []
        answer = self._post("/generate", sglang_generate_request(prompts, params))
        return completions_from_sglang(answer, prompts, params.n)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """The trainer's weights as a model folder (the policy's config and safetensors) of their own under
        ``weights_dir``, loaded by the server (``/update_weights_from_disk``, which also drops its prefix cache);
        the previous push's folder is removed once the server holds the new weights. The policy's own prefix cache is
        ``reset_prefix_cache``'s, which ``Policy.publish`` calls next."""
        self.version += 1
        folder = self.weights_dir / f"push-{self.version:06d}"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        self.local.model.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
        answer = self._post("/update_weights_from_disk", {"model_path": str(folder.resolve()), "flush_cache": True})
        if not isinstance(answer, dict) or answer.get("success") is not True:
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise LLMError(f"SGLang server {self.url} did not load the policy's weights: {str(message)[:200]}")
        previous = self.weights_dir / f"push-{self.version - 1:06d}"
        if previous.exists():
            shutil.rmtree(previous, ignore_errors=True)

    def reset_prefix_cache(self) -> None:
        """The server's prefix cache and the policy's own (other callers of the policy, synthesis say, read it)."""
        self._post("/flush_cache", {})
        self.local.reset_prefix_cache()
