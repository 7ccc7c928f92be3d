"""Bounded HTTP for every outbound client of a server the user points evolvekit at (the env service, AgentEvolver's
protocol, OpenEnv's HTTP routes, the SGLang rollout engine): an overall deadline on the reply, a cap on its size, and
JSON parsed only when it is shallow enough. A leaf module: environments and LLM backends both use it.

A server that trickles its reply (one byte a second never trips a per-read timeout), sends a gigabyte, or nests its
JSON thousands deep becomes one error line (``EnvError`` for an environment, the caller's ``error`` otherwise), not
a hang, an out-of-memory kill or a RecursionError.

The deadline covers the whole exchange, headers included: clients made by ``bounded_client`` open their sockets
through ``_DeadlineBackend``, whose every read and write waits at most until the deadline ``bounded_request`` set
(httpx's own timeouts are per read, so a server trickling its status line and headers was bounded by nothing).
"""

from __future__ import annotations

import json
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from evolvekit.errors import EnvError
from evolvekit.safejson import bracket_depth

MAX_REPLY_BYTES = 8 * 2**20  # 8 MiB: far above any profile, schema or observation an environment sends
MAX_REPLY_DEPTH = 64  # JSON nesting of a reply (BFCL's deepest state trees are far shallower)


_DEADLINE: ContextVar[float | None] = ContextVar("evolvekit_http_deadline", default=None)


def _bounded(timeout: float | None) -> float | None:
    """A socket operation's timeout cut to what is left of the current request's deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _bounded(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, _bounded(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own socket backend, with every connect, read and write bounded by the request's deadline. TCP only:
    the pool below has no Unix socket and no retries, so httpcore never asks it for ``connect_unix_socket`` or
    ``sleep`` (``NetworkBackend``'s own raise ``NotImplementedError``)."""

    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:  # fmt: skip
        return _DeadlineStream(self.inner.connect_tcp(host, port, _bounded(timeout), local_address, socket_options))


class _DeadlineTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=_DeadlineBackend())


def bounded_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` (same arguments) whose requests through ``bounded_request`` end at their deadline, headers
    and body alike. HTTPS trusts the CA bundle ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` names, else certifi's (httpx's
    ``create_ssl_context``); ``verify`` and ``cert`` are not taken (the client's transport is this module's)."""
    return httpx.Client(transport=_DeadlineTransport(), **kwargs)


@dataclass
class Reply:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` for a body that is not JSON or nests deeper than MAX_REPLY_DEPTH."""
        text = self.text
        if bracket_depth(text) > MAX_REPLY_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_REPLY_DEPTH} levels")
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deep to parse") from None


def bounded_request(
    client: httpx.Client | None,
    method: str,
    url: str,
    where: str,
    deadline_s: float,
    max_bytes: int = MAX_REPLY_BYTES,
    error: type[Exception] = EnvError,
    passthrough: tuple[type[Exception], ...] = (),
    timeout_error: type[Exception] | None = None,
    **kwargs: Any,
) -> Reply:
    """One request whose whole reply must arrive within ``deadline_s`` and ``max_bytes``; ``where`` names the
    endpoint in the error (of type ``error``). With a client from ``bounded_client`` (or none: a fresh one is made)
    every socket operation of the exchange waits at most until the deadline; the deadline is also checked as the body
    arrives. ``passthrough``: httpx errors raised as they are, for a caller that retries some of them;
    ``timeout_error``: the type of the deadline's error (default ``error``)."""
    deadline = time.monotonic() + deadline_s
    late = timeout_error or error
    token = _DEADLINE.set(deadline)
    own = client is None
    if client is None:
        client = bounded_client()
    try:
        with client.stream(method, url, **kwargs) as resp:
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise error(f"{where}: the reply is over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise late(f"{where}: no complete reply within {deadline_s:g}s")
                chunks.append(chunk)
            return Reply(resp.status_code, b"".join(chunks))
    except httpx.HTTPError as err:
        if passthrough and isinstance(err, passthrough):  # the caller tells these apart itself (retry or not)
            raise
        if isinstance(err, httpx.TimeoutException) and time.monotonic() >= deadline:
            raise late(f"{where}: no complete reply within {deadline_s:g}s") from None
        raise error(f"{where}: {type(err).__name__}: {str(err)[:200]}") from None
    finally:
        _DEADLINE.reset(token)
        if own:
            client.close()
