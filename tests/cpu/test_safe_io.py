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
    [
        ("", 0),
        ("abc", 0),
        ("XxX", 0),
        ("[X[", 2),
        ("{}", 1),
        ("[[]]", 2),
        ("[{}][[[]]]", 3),
        ("[[][[", 3),
        ("]]][[", 2),
        ("{[}]", 2),
        ('"[["', 2),
    ],
)
def test_bracket_depth_counts_the_deepest_open_bracket(text, depth):
    """Closing brackets with nothing open are ignored (``]]][[`` is 2 deep, not 0); brackets in strings count."""
    assert bracket_depth(text) == depth


@pytest.mark.parametrize(
    "raw, limit, shallow",
    [(b"", 0, True), (b"", 2, True), (b"1", 0, True), (b"[]", 0, False), (b"[]", 1, True), (b"[]", 3, True),
     (b"[[]]", 1, False), (b"[[]]", 2, True),
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
    assert json_depth_path({"k" * 78: [[]]}, 2) == "k" * 78 + ".0"  # 80 characters: kept whole
    assert json_depth_path({"k" * 79: [[]]}, 2) == "k" * 79 + ".0"[:1] + "..."  # 81: cut at 80


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


class _Tagged(BaseModel):
    tags: list[int]


def test_read_jsonl_names_a_nested_field_by_its_dotted_path(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"tags": [1, "x"]}\n')
    with pytest.raises(ConfigError, match=r":1: not a row: tags\.1: Input should be a valid integer"):
        read_jsonl(p, _Tagged, "a row")


def test_read_jsonl_of_an_unreadable_file_or_a_parser_failure(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a"}\n')
    with monkeypatch.context() as mp:
        mp.setattr(Path, "read_bytes", lambda self: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
        with pytest.raises(ConfigError, match=r"t\.jsonl: cannot read: Input/output error$"):
            read_jsonl(p, _Row, "a row")

    def recursion(cls, line):
        raise RecursionError

    monkeypatch.setattr(_Row, "model_validate_json", classmethod(recursion))
    with pytest.raises(ConfigError, match=r"t\.jsonl:1: not a row: RecursionError$"):
        read_jsonl(p, _Row, "a row")


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
        with pytest.raises(httpcore.ReadTimeout, match="^the request's deadline has passed$"):
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


class _RawServer:
    """A TCP server on ``host`` that accepts each connection and hands it to ``handle(conn)`` in a thread (the
    connection is closed when it returns): for replies and stalls an HTTP server does not make."""

    def __init__(self, handle, host: str = "127.0.0.1") -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.sock.settimeout(0.05)
        self.handle, self.host, self.stop = handle, host, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        try:
            self.handle(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://{self.host}:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


def _silent(seconds: float):
    """Accept, read nothing, answer nothing, hang up after ``seconds``."""
    return lambda conn: time.sleep(seconds)


def _error_line(call) -> tuple[str, float]:
    t0 = time.perf_counter()
    with pytest.raises(EnvError) as err:
        call()
    return str(err.value), time.perf_counter() - t0


def test_a_per_read_timeout_shorter_than_the_deadline_still_holds():
    """httpx's own per-read timeout (0.3 s) is kept inside the deadline (5 s): a silent server is a ReadTimeout at
    0.3 s, not a wait for the deadline, and is reported as what it is."""

    def read_then_wait(conn):
        conn.recv(65536)
        time.sleep(3.0)

    with _RawServer(read_then_wait) as url:
        line, took = _error_line(lambda: bounded_request(None, "GET", url, "GET /r", 5.0, timeout=0.3))
    assert line.startswith("GET /r: ReadTimeout: ") and took < 2.0


def test_a_server_that_never_reads_the_request_ends_at_the_write_timeout():
    """64 MiB sent to a server that reads nothing fills the socket's buffers; the write waits its timeout (0.3 s),
    not until the server hangs up (3 s)."""
    with _RawServer(_silent(3.0)) as url:
        body = b"x" * 64 * 2**20
        line, took = _error_line(lambda: bounded_request(None, "POST", url, "POST /w", 5.0, content=body, timeout=0.3))
    assert line.startswith("POST /w: WriteTimeout") and took < 2.0


def test_a_server_that_never_accepts_ends_at_the_connect_timeout():
    """A listening socket whose backlog is full leaves the next connect waiting (Linux drops its SYN): the connect
    waits its timeout (0.3 s), within the deadline (5 s)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    held = socket.create_connection(("127.0.0.1", port), timeout=1.0)  # fills the backlog
    try:
        url = f"http://127.0.0.1:{port}"
        line, took = _error_line(lambda: bounded_request(None, "GET", url, "GET /c", 5.0, timeout=0.3))
        assert line.startswith("GET /c: ConnectTimeout") and took < 2.0
        line, took = _error_line(lambda: bounded_request(None, "GET", url, "GET /c", 0.4, timeout=30.0))
        assert line == "GET /c: no complete reply within 0.4s" and took < 2.0  # the deadline bounds the connect
    finally:
        held.close()
        srv.close()


def test_the_request_goes_out_with_its_arguments_to_the_host_named():
    """Method, path, query, headers and JSON body reach the server (on 127.0.0.2: the host is not a default)."""
    seen: list[bytes] = []

    def echo(conn):
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
        while len(body) < length:
            body += conn.recv(65536)
        seen.append(head + b"\r\n\r\n" + body)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    with _RawServer(echo, host="127.0.0.2") as url:
        reply = bounded_request(None, "PUT", url + "/p", "PUT /p", 5.0, params={"q": "1"}, json={"a": [1]},
                                headers={"X-T": "v"})  # fmt: skip
    assert (reply.status_code, reply.content) == (201, b"ok")
    head, body = seen[0].split(b"\r\n\r\n")
    assert head.startswith(b"PUT /p?q=1 HTTP/1.1\r\n") and b"\r\nX-T: v" in head and json.loads(body) == {"a": [1]}


def test_a_pooled_connection_the_server_closed_is_not_reused():
    """A server that hangs up after each reply (without saying so) leaves a dead connection in the pool: the next
    request sees it is readable (closed) and opens a new one."""

    def one_reply(conn):
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    with _RawServer(one_reply, host="127.0.0.2") as url, bounded_client(base_url=url) as client:
        for _ in range(3):
            assert bounded_request(client, "GET", "/k", "GET /k", 5.0).json() == {}
            time.sleep(0.1)


def test_the_loop_checks_the_deadline_as_the_body_arrives(monkeypatch):
    """The second line of defence: with the socket-level deadline off, a body that keeps arriving in small pieces
    still ends at the deadline, checked after each piece."""
    monkeypatch.setattr(bounded_http, "_bounded", lambda timeout: timeout)
    with _Server(_send(200, b"q" * 40, chunks=40, pause=0.05)) as url:
        line, took = _error_line(lambda: bounded_request(None, "GET", url, "GET /l", 0.3))
    assert line == "GET /l: no complete reply within 0.3s" and took < 1.5


def test_an_error_names_its_cause_cut_at_200_characters():
    with _Server(_send(200, b"")) as url:
        pass
    line, _ = _error_line(lambda: bounded_request(None, "GET", url, "GET /e", 5.0))
    assert line.startswith("GET /e: ConnectError: ") and "refused" in line
    line, _ = _error_line(lambda: bounded_request(None, "GET", "a" * 300 + "://x/", "GET /u", 5.0))
    cause = line.removeprefix("GET /u: UnsupportedProtocol: ")
    assert cause != line and len(cause) == 200 and cause.startswith("Request URL has an unsupported protocol 'aaa")


def _self_signed(tmp_path):
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "evolvekit-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def test_https_with_the_ca_of_ssl_cert_file_and_a_stalled_handshake_ends_at_the_deadline(tmp_path, monkeypatch):
    """TLS goes through the same deadline: a server that accepts and never answers the handshake ends at the
    deadline (0.5 s), not when it hangs up (3 s). The bounded client trusts the CA bundle SSL_CERT_FILE names, and
    checks the server's name."""
    import ssl

    cert_file, key_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)

    def tls_reply(conn):
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\n[1,2,3]")

    with _RawServer(tls_reply) as url:
        assert bounded_request(None, "GET", url.replace("http:", "https:"), "GET /t", 5.0).json() == [1, 2, 3]
    with _RawServer(_silent(3.0)) as url:
        line, took = _error_line(lambda: bounded_request(None, "GET", url.replace("http:", "https:"), "GET /h", 0.5))
    assert line == "GET /h: no complete reply within 0.5s" and took < 2.0
    with _RawServer(_silent(3.0)) as url:  # the handshake's own timeout (0.3 s) holds inside the deadline (5 s)
        call = lambda: bounded_request(None, "GET", url.replace("http:", "https:"), "GET /h", 5.0, timeout=0.3)  # noqa: E731
        line, took = _error_line(call)
    assert line.startswith("GET /h: ConnectTimeout: ") and took < 2.0


def test_passthrough_raises_only_the_named_httpx_errors_as_they_are():
    """A caller that retries transport errors (the OpenAI-compatible backend) gets those raw; any other httpx error
    (here a reply body that does not decode) is still the one-line error of its type."""

    def client(exc: Exception) -> httpx.Client:
        def handler(request):
            raise exc

        return httpx.Client(transport=httpx.MockTransport(handler))

    with pytest.raises(httpx.ConnectError):
        bounded_request(client(httpx.ConnectError("refused")), "GET", "http://h/x", "GET /x", 5.0,
                        passthrough=(httpx.TransportError,))  # fmt: skip
    with pytest.raises(EnvError, match=r"^GET /x: DecodingError: bad gzip$"):
        bounded_request(client(httpx.DecodingError("bad gzip")), "GET", "http://h/x", "GET /x", 5.0,
                        passthrough=(httpx.TransportError,))  # fmt: skip
    with pytest.raises(EnvError, match=r"^GET /x: ConnectError: refused$"):
        bounded_request(client(httpx.ConnectError("refused")), "GET", "http://h/x", "GET /x", 5.0)
