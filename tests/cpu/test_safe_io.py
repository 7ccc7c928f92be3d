"""The two leaf modules every piece of outside input passes through, tested directly and fast (so a mutation tool
can meet them): safejson.py's linear JSON checks and task-file reader, and bounded_http.py's deadline, size cap and
shallow-JSON reply. test_hostile.py drives them end to end through the clients and the CLI (slower)."""

from __future__ import annotations

import http.server
import json
import threading
import time

import httpcore
import httpx
import pytest
from pydantic import BaseModel, field_validator

from evolvekit import bounded_http
from evolvekit.bounded_http import MAX_REPLY_DEPTH, Reply, bounded_client, bounded_request
from evolvekit.errors import ConfigError, EnvError
from evolvekit.safejson import bracket_depth, json_depth_path, read_jsonl, surely_shallow

# --- safejson -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, depth",
    [("", 0), ("abc", 0), ("{}", 1), ("[[]]", 2), ("[{}][[[]]]", 3), ("]]][[", 2), ("{[}]", 2), ('"[["', 2)],
)
def test_bracket_depth_counts_the_deepest_open_bracket(text, depth):
    """Closing brackets with nothing open are ignored (``]]][[`` is 2 deep, not 0); brackets in strings count."""
    assert bracket_depth(text) == depth


@pytest.mark.parametrize(
    "raw, limit, shallow",
    [(b"", 0, True), (b"1", 0, True), (b"[]", 0, False), (b"[]", 1, True), (b"[[]]", 1, False), (b"[[]]", 2, True),
     (b'{"a": [1, {"b": []}]}', 4, True), (b'{"a": [1, {"b": []}]}', 3, False), (b"[[][]]", 2, True)],
)  # fmt: skip
def test_surely_shallow_at_its_limit(raw, limit, shallow):
    """Exactly ``limit`` levels are shallow, ``limit + 1`` are not."""
    assert surely_shallow(raw, limit) is shallow


def test_json_depth_path_of_lists_dicts_and_scalars():
    assert json_depth_path(5, 0) is None and json_depth_path([], 1) is None
    assert json_depth_path([], 0) == "(root)"
    assert json_depth_path([[1], 2], 1) == "0"
    assert json_depth_path({"k": {"j": {}}}, 2) == "k.j" and json_depth_path({"k": {"j": {}}}, 3) is None
    # the first container past the limit depth-first, its dotted path cut at 80 characters
    long_key = "k" * 100
    assert json_depth_path({long_key: [[]]}, 2) == f"{long_key}.0"[:80] + "..."
    assert json_depth_path({"a": [], "b": [[]]}, 2) == "b.0"


class _Row(BaseModel):
    id: str
    n: int = 0


def test_read_jsonl_reads_every_line_and_skips_blank_ones(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "n": 1}\n\n   \n{"id": "b"}\n')
    assert [(r.id, r.n) for r in read_jsonl(p, _Row, "a row")] == [("a", 1), ("b", 0)]
    assert read_jsonl(str(p), _Row, "a row")[0].id == "a"


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"id": "a"}\n{"n": 2}\n', ":2: not a row: id: Field required"),
        (b'{"id": "a", "n": "x"}\n', ":1: not a row: n: Input should be a valid integer"),
        (b"[1]\n", ":1: not a row: Input should be an object"),
        (b'{"id": "a"}\n\xff\n', ": not UTF-8 text (byte 12); expected JSON lines"),
        (b"[" * 5000 + b"]" * 5000 + b"\n", ":1: not a row: "),
    ],
)
def test_read_jsonl_refuses_a_bad_file_in_one_line_naming_the_line(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        read_jsonl(p, _Row, "a row")
    text = str(err.value)
    assert text.startswith(str(p)) and message in text and "\n" not in text and len(text) < len(str(p)) + 200


def test_read_jsonl_of_a_missing_file_or_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="^no such file: "):
        read_jsonl(tmp_path / "none.jsonl", _Row, "a row")
    with pytest.raises(ConfigError, match="^no such file: "):
        read_jsonl(tmp_path, _Row, "a row")


class _Picky(BaseModel):
    id: str

    @field_validator("id")
    @classmethod
    def _short(cls, v: str) -> str:
        raise ValueError("w" * 500)


def test_read_jsonl_cuts_a_long_validation_message_at_160_characters(tmp_path):
    p = tmp_path / "long.jsonl"
    p.write_text('{"id": "a"}\n')
    with pytest.raises(ConfigError) as err:
        read_jsonl(p, _Picky, "a row")
    head = f"{p}:1: not a row: id: "
    assert str(err.value).startswith(head) and len(str(err.value)) == len(head) + 160


# --- bounded_http ---------------------------------------------------------------------------------------------------


class _Server:
    """A local HTTP server; ``script(handler)`` writes each reply."""

    def __init__(self, script) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    script(self)
                except OSError:
                    self.close_connection = True

            do_GET = do_POST = _reply

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a short poll: shutdown() waits up to one poll interval (0.5 s by default)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _send(status: int, body: bytes, chunks: int = 1, pause: float = 0.0):
    def script(h):
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        step = max(1, -(-len(body) // chunks))
        for i in range(0, len(body), step):
            h.wfile.write(body[i : i + step])
            h.wfile.flush()
            time.sleep(pause)

    return script


def test_a_reply_arrives_whole_with_its_status(tmp_path):
    body = b'{"a": [1, 2, {"b": "c"}]}' * 50
    with _Server(_send(404, body, chunks=7, pause=0.01)) as url:
        reply = bounded_request(None, "GET", url + "/x", "GET /x", 5.0)
    assert reply.status_code == 404 and reply.content == body and reply.text == body.decode()


def test_a_reply_of_exactly_the_cap_passes_and_one_byte_more_is_one_error():
    class Mine(Exception):
        pass

    with _Server(_send(200, b"x" * 1000)) as url:
        assert len(bounded_request(None, "GET", url, "w", 5.0, max_bytes=1000).content) == 1000
        with pytest.raises(Mine, match=r"^GET /big: the reply is over 999 bytes$"):
            bounded_request(None, "GET", url, "GET /big", 5.0, max_bytes=999, error=Mine)


def test_the_default_cap_and_error_type():
    assert bounded_http.MAX_REPLY_BYTES == 8 * 2**20
    with _Server(_send(200, b"y" * (bounded_http.MAX_REPLY_BYTES + 1))) as url:
        with pytest.raises(EnvError, match=f"over {bounded_http.MAX_REPLY_BYTES} bytes"):
            bounded_request(None, "GET", url, "w", 10.0)


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickled_reply_ends_at_the_deadline(part):
    """One byte every 0.05 s never trips a per-read timeout; the deadline (0.6 s) covers the whole exchange, the
    status line and headers included."""

    def trickle(h):
        if part == "body":
            body = b"z" * 200
            h.send_response(200)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            data = body
        else:
            data = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 200 + b"\r\nContent-Length: 2\r\n\r\n{}"
        for b in data:
            h.wfile.write(bytes([b]))
            h.wfile.flush()
            time.sleep(0.05)
        h.close_connection = True

    with _Server(trickle) as url:
        t0 = time.perf_counter()
        with pytest.raises(EnvError, match=r"^POST /s: no complete reply within 0.6s$"):
            bounded_request(None, "POST", url, "POST /s", 0.6, json={"a": 1}, timeout=5.0)
        assert time.perf_counter() - t0 < 3.0


def test_a_refused_connection_names_the_endpoint_and_the_cause():
    with _Server(_send(200, b"")) as url:
        pass  # the server is shut and its port closed
    with pytest.raises(EnvError, match=r"^GET /p: ConnectError: "):
        bounded_request(None, "GET", url + "/p", "GET /p", 5.0)


def test_a_given_client_stays_open_and_is_reused_and_the_deadline_is_cleared():
    with _Server(_send(200, b"{}")) as url, bounded_client(base_url=url) as client:
        for _ in range(3):  # the second and third request reuse the pooled connection
            assert bounded_request(client, "GET", "/a", "GET /a", 5.0).json() == {}
            assert bounded_http._DEADLINE.get() is None
        assert not client.is_closed
    with pytest.raises(EnvError):
        bounded_request(None, "GET", url, "w", 0.5)
    assert bounded_http._DEADLINE.get() is None


def test_an_own_client_is_closed_after_the_request(monkeypatch):
    made: list[httpx.Client] = []
    real = bounded_http.bounded_client

    def spy(**kw):
        made.append(real(**kw))
        return made[-1]

    monkeypatch.setattr(bounded_http, "bounded_client", spy)
    with _Server(_send(200, b"1")) as url:
        bounded_request(None, "GET", url, "w", 5.0)
    assert len(made) == 1 and made[0].is_closed


def test_bounded_cuts_a_socket_timeout_to_what_is_left_of_the_deadline():
    assert bounded_http._bounded(3.0) == 3.0 and bounded_http._bounded(None) is None  # no request running
    token = bounded_http._DEADLINE.set(time.monotonic() + 10.0)
    try:
        assert bounded_http._bounded(2.0) == 2.0
        assert 9.0 < bounded_http._bounded(20.0) <= 10.0
        assert 9.0 < bounded_http._bounded(None) <= 10.0
    finally:
        bounded_http._DEADLINE.reset(token)
    token = bounded_http._DEADLINE.set(time.monotonic() - 0.001)
    try:
        with pytest.raises(httpcore.ReadTimeout, match="deadline"):
            bounded_http._bounded(2.0)
    finally:
        bounded_http._DEADLINE.reset(token)


def test_reply_json_refuses_nesting_past_the_limit_and_non_json():
    at_limit = "[" * MAX_REPLY_DEPTH + "]" * MAX_REPLY_DEPTH
    assert bracket_depth(json.dumps(Reply(200, at_limit.encode()).json())) == MAX_REPLY_DEPTH == 64
    with pytest.raises(ValueError, match="^JSON nested deeper than 64 levels$"):
        Reply(200, ("[" + at_limit + "]").encode()).json()
    with pytest.raises(ValueError):
        Reply(200, b"not json").json()
    assert Reply(200, b'"\xff"').text == '"\ufffd"' and Reply(200, b'"\xff"').json() == "\ufffd"


def test_reply_json_turns_a_recursion_error_into_a_value_error(monkeypatch):
    def deep(text):
        raise RecursionError

    monkeypatch.setattr(bounded_http.json, "loads", deep)
    with pytest.raises(ValueError, match="^JSON nested too deep to parse$"):
        Reply(200, b"[]").json()
