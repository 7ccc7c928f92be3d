"""OpenAI-compatible chat backend (vLLM, SGLang, Ollama, hosted APIs) over plain HTTP.

Retries with exponential back-off on 429, 5xx and on requests that never reached the server (connection refused or
timed out before sending); a 401/403/404 fails at once with a message that names the setting to fix. A request that
timed out while the server had it (a read or write timeout) is not sent again: the server may still be working on it
(issue 54 saw 16 requests for 4 rollouts); the error names ``models.<role>.timeout_s`` (60 s by default). Requests for
several conversations run concurrently in a thread pool. A server that ignores ``n`` or ``logprobs`` is named in one
warning.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Sequence

import httpx
import tenacity

from evolvekit.bounded_http import bounded_client, bounded_request
from evolvekit.errors import LLMError
from evolvekit.llm.base import Completion, SamplingParams, offset_seed
from evolvekit.types import ChatMessage

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
# the request never reached the server, so sending it again cannot duplicate work
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# one reply's size: n choices of max_new_tokens each with their log-probs fit many times over; a server streaming
# without end is cut here, not at the machine's memory
MAX_CHAT_REPLY_BYTES = 64 * 2**20


class RequestTimedOut(LLMError):
    """No complete reply within ``timeout_s`` (the server had the request and may still be working on it)."""


class _Retryable(Exception):
    """A failure a retry can fix: the request never reached the server, the transport failed, or 408/409/429/5xx."""


class OpenAICompatLLM:
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        concurrency: int = 8,
        role: str = "policy",
        return_token_ids: bool = False,
        drop_timed_out: bool = False,
    ) -> None:
        base_url = base_url or os.environ.get("EVOLVEKIT_OPENAI_BASE_URL")
        if not base_url:
            raise LLMError(f"models.{role}.base_url is not set (nor EVOLVEKIT_OPENAI_BASE_URL) for the openai backend")
        self.name = model
        self.role = role
        self.return_token_ids = return_token_ids
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        api_key = os.environ.get(api_key_env, "")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # every request has one deadline (timeout_s for the whole reply, however slowly it trickles) and a size cap
        self.client = bounded_client(base_url=self.base_url, headers=headers, timeout=timeout_s)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.warned: set[str] = set()  # server habits already warned about (once each)
        # a helper role's request that timed out becomes an empty answer (counted, warned) instead of ending the job
        self.drop_timed_out = drop_timed_out
        self.dropped = 0
        self._dropped_lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    def chat(self, conversations: Sequence[Sequence[ChatMessage]], params: SamplingParams) -> list[list[Completion]]:
        if not conversations:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations))) as pool:
            return list(
                pool.map(
                    lambda i: self._one(conversations[i], replace(params, seed=offset_seed(params.seed, i))),
                    range(len(conversations)),
                )
            )

    def _payload(self, conversation: Sequence[ChatMessage], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.name,
            "messages": [m.model_dump(exclude_none=True) for m in conversation],
            "n": params.n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "logprobs": True,
        }
        if self.return_token_ids:  # vLLM: exact prompt and completion token ids in the response
            body["return_token_ids"] = True
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    def _one(self, conversation: Sequence[ChatMessage], params: SamplingParams) -> list[Completion]:
        """One request, retried by tenacity with exponential back-off (``backoff_s``, doubling) while the failure is
        one a retry can fix: a request that never reached the server, a transport error, or HTTP 408/409/429/5xx."""
        body = self._payload(conversation, params)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, exp_base=2, min=0),
            retry=tenacity.retry_if_exception_type(_Retryable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            return retrying(self._attempt, body, params)
        except RequestTimedOut as err:
            if not self.drop_timed_out:
                raise
            with self._dropped_lock:
                self.dropped += 1
                dropped = self.dropped
            log.warning(
                "models.%s: a request got no answer within %g s and is dropped (an empty answer; %d dropped so far): "
                "%s", self.role, self.timeout_s, dropped, str(err)[:160],
            )  # fmt: skip
            return [Completion(text="", finish_reason="length") for _ in range(params.n)]
        except _Retryable as err:
            last = str(err)
        hint = (
            f"; a slow server may need a longer models.{self.role}.timeout_s (now {self.timeout_s:g} s)"
            if "Timeout" in last
            else ""
        )
        raise LLMError(f"{self.base_url}: gave up after {self.max_retries + 1} attempts ({last}){hint}")

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        err = state.outcome.exception() if state.outcome is not None else None
        log.warning("openai backend: %s, retrying in %.1fs (%d/%d)", err, delay, state.attempt_number, self.max_retries)

    def _attempt(self, body: dict[str, Any], params: SamplingParams) -> list[Completion]:
        """One POST: the completions, ``_Retryable`` for what a retry can fix, ``LLMError`` for what it cannot."""
        try:
            resp = bounded_request(
                self.client,
                "POST",
                "/chat/completions",
                f"{self.base_url}/chat/completions",
                self.timeout_s,
                max_bytes=MAX_CHAT_REPLY_BYTES,
                error=LLMError,
                passthrough=(httpx.TransportError,),
                timeout_error=RequestTimedOut,
                json=body,
            )
        except NOT_SENT as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from None
        except httpx.TimeoutException as err:  # the server had it and may still run it: not sent twice
            raise RequestTimedOut(
                f"{self.base_url}: no answer within models.{self.role}.timeout_s = {self.timeout_s:g} s "
                f"({type(err).__name__}); not re-sent, as the server may still be working on it. A slow server "
                f"needs a longer models.{self.role}.timeout_s"
            ) from None
        except httpx.TransportError as err:
            raise _Retryable(f"{type(err).__name__}: {err}") from None
        if resp.status_code == 200:
            try:
                data = resp.json()
                if not isinstance(data, dict):
                    raise TypeError(f"a JSON {type(data).__name__}, not an object")
                return self._checked(self._parse(data), params)
            except (ValueError, TypeError, AttributeError, KeyError) as err:
                raise LLMError(
                    f"{self.base_url}/chat/completions answered something that is no chat completion "
                    f"({type(err).__name__}: {str(err)[:160]})"
                ) from None
        if resp.status_code in (401, 403):
            raise LLMError(
                f"{self.base_url} refused the credentials (HTTP {resp.status_code}); "
                f"check the API key in ${self.api_key_env} (models.{self.role}.api_key_env)"
            )
        if resp.status_code == 404:
            raise LLMError(
                f"{self.base_url}/chat/completions: model '{self.name}' or endpoint not found "
                f"(HTTP 404); check models.{self.role}.model and models.{self.role}.base_url"
            )
        if resp.status_code not in RETRY_STATUS:
            raise LLMError(f"{self.base_url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        raise _Retryable(f"HTTP {resp.status_code}")

    def _checked(self, out: list[Completion], params: SamplingParams) -> list[Completion]:
        """Warn once per habit when the server ignored what was asked: fewer than ``n`` choices, or no log-probs."""
        if len(out) < params.n and "n" not in self.warned:
            self.warned.add("n")
            log.warning(
                "models.%s at %s answered %d choice(s) for n=%d: the server ignores n; GRPO groups then need one "
                "request per sample", self.role, self.base_url, len(out), params.n,
            )  # fmt: skip
        if any(c.text and not c.logprobs for c in out) and "logprobs" not in self.warned:
            self.warned.add("logprobs")
            log.warning(
                "models.%s at %s returned no log-probs though asked: the server ignores logprobs, so its "
                "samples cannot be trained on (behaviour log-probs are missing)", self.role, self.base_url,
            )  # fmt: skip
        return out

    @staticmethod
    def _parse(data: dict[str, Any]) -> list[Completion]:
        out = []
        prompt_ids = list(data.get("prompt_token_ids") or [])  # vLLM with return_token_ids
        usage: dict[str, Any] = data["usage"] if isinstance(data.get("usage"), dict) else {}
        choices = data.get("choices", [])

        def count(key: str, share: int = 1) -> int:
            value = usage.get(key)
            return int(value) // max(1, share) if isinstance(value, (int, float)) and value >= 0 else 0

        for choice in choices:
            text = (choice.get("message") or {}).get("content") or ""
            lp = choice.get("logprobs") or {}
            content = lp.get("content") or []
            logprobs = [float(t.get("logprob", 0.0)) for t in content]
            token_ids = choice.get("token_ids") or []  # vLLM extension; absent on most servers
            reason = "length" if choice.get("finish_reason") == "length" else "stop"
            out.append(
                Completion(
                    text=text,
                    token_ids=list(token_ids),
                    logprobs=logprobs,
                    finish_reason=reason,
                    prompt_token_ids=prompt_ids,
                    usage_prompt_tokens=count("prompt_tokens"),
                    # usage counts all n choices' completions together: an even share each
                    usage_completion_tokens=count("completion_tokens", len(choices)),
                )
            )
        if not out:
            raise LLMError("openai backend: response had no choices")
        return out
