"""Bounded HTTP for every outbound environment client (the env service, AgentEvolver's protocol, OpenEnv's HTTP
routes): an overall deadline on the reply, a cap on its size, and JSON parsed only when it is shallow enough.

A server that trickles its reply (one byte a second never trips a per-read timeout), sends a gigabyte, or nests its
JSON thousands deep becomes one ``EnvError`` line, not a hang, an out-of-memory kill or a RecursionError.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from evolvekit.errors import EnvError
from evolvekit.safejson import bracket_depth

MAX_REPLY_BYTES = 8 * 2**20  # 8 MiB: far above any profile, schema or observation an environment sends
MAX_REPLY_DEPTH = 64  # JSON nesting of a reply (BFCL's deepest state trees are far shallower)


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
    **kwargs: Any,
) -> Reply:
    """One request whose whole reply must arrive within ``deadline_s`` and ``max_bytes``; ``where`` names the
    endpoint in the error. The deadline is checked as the body arrives (each read is also bounded by the client's
    own timeout)."""
    deadline = time.monotonic() + deadline_s
    try:
        stream = client.stream(method, url, **kwargs) if client is not None else httpx.stream(method, url, **kwargs)
        with stream as resp:
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise EnvError(f"{where}: the reply is over {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise EnvError(f"{where}: no complete reply within {deadline_s:g}s")
                chunks.append(chunk)
            return Reply(resp.status_code, b"".join(chunks))
    except httpx.HTTPError as err:
        raise EnvError(f"{where}: {type(err).__name__}: {str(err)[:200]}") from None
