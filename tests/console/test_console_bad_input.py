"""The console's API under bad input (issue 40, item 6), against a `trocket up` process: no
request-body limit (a 300 MB POST grew the broker by 590 MB), 500s for JSON Python's parser
lets through, wrong types coerced (``"timestamp": false`` reset a group to epoch 0), a
sign-in that installed its keys before checking them (failing sign-ins locked a signed-in
admin out) and accepted a key without admin rights."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import socket
from urllib.parse import urlsplit

import pytest

from tests.interop.conftest import RunningBroker, start_broker
from trocket.cli.defaults import TROCKET_DEFAULTS

ACL = """
accounts:
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: reader-key
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def _console(tmp_path, *plugins: str) -> tuple[RunningBroker, str]:
    names = ", ".join(f'"{name}"' for name in (*TROCKET_DEFAULTS.plugins, *plugins, "console"))
    broker = start_broker(
        tmp_path, f"plugins = [{names}]", tables='[console]\nport = 0\nmax_body = "64KiB"\n'
    )
    url = next(
        line.split()[1] for line in broker.log.read_text().splitlines() if line.startswith("console: ")
    )
    return broker, url.rstrip("/")


def _request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=20)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}
    finally:
        connection.close()


def _answer(sock: socket.socket) -> bytes:
    """One whole HTTP response (head and its Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


@pytest.fixture
def console(tmp_path):
    broker, url = _console(tmp_path)
    try:
        yield broker, url
    finally:
        broker.stop()


def test_a_body_over_the_limit_is_refused_before_it_is_read(console):
    broker, url = console
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(
            b"POST /api/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 314572800\r\n\r\n" + b"{" * 65536
        )  # 300 MB announced, 64 KiB sent: the answer comes without the rest
        head = _answer(sock)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"the console takes at most 65536" in head

    chunked = b"".join(b"%x\r\n%s\r\n" % (8192, b"x" * 8192) for _ in range(16)) + b"0\r\n\r\n"
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(b"POST /api/topics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        head = _answer(sock)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]

    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(b'POST /api/topics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"to')
    status, _ = _request(url, "GET", "/api/cluster")
    assert status == 200
    log = broker.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log


@pytest.mark.parametrize(
    ("method", "path", "body", "said"),
    [
        ("POST", "/api/topics", b'{"topic": "T", "writeQueueNums": 1e999}', "not JSON"),
        ("POST", "/api/topics", b'{"topic": "\\ud800x"}', "not JSON"),
        ("POST", "/api/topics/T/messages", b'{"body": "\\udc80"}', "not JSON"),
        ("POST", "/api/topics", b"[" * 20_000 + b"]" * 20_000, "not JSON"),
        ("POST", "/api/topics", b'{"topic": "T", "writeQueueNums": true}', "writeQueueNums must be"),
        ("POST", "/api/topics", b'{"topic": "T", "readQueueNums": 2.9}', "readQueueNums must be"),
        ("POST", "/api/topics", b'{"topic": {"a": 1}}', "topic must be a string"),
        ("POST", "/api/groups/G/reset", b'{"topic": "T", "timestamp": false}', "timestamp must be"),
        ("POST", "/api/groups/G/reset", b'{"topic": "T", "timestamp": -1e999}', "not JSON"),
        ("GET", "/api/messages?msgId=" + "F" * 32, None, "is not an offset message id"),
    ],
)
def test_bad_values_are_400_with_a_sentence(console, method, path, body, said):
    broker, url = console
    status, answer = _request(url, method, path, body)
    assert status == 400, answer
    assert said in answer["error"]
    assert "Traceback" not in broker.log.read_text()


def test_sign_in_checks_admin_rights_and_failing_sign_ins_never_lock_out_the_admin(tmp_path):
    (tmp_path / "plain_acl.yml").write_text(ACL)
    broker, url = _console(tmp_path, "acl")
    try:
        refused, answer = _request(
            url,
            "POST",
            "/api/session",
            json.dumps({"accessKey": "reader-key", "secretKey": "reader-secret"}).encode(),
        )
        assert refused == 403 and "Need admin permission" in answer["error"]
        assert _request(url, "GET", "/api/session") == (200, {"accessKey": ""})
        signed = json.dumps({"accessKey": "operator-key", "secretKey": "operator-secret"}).encode()
        assert _request(url, "POST", "/api/session", signed)[0] == 200

        wrong = json.dumps({"accessKey": "operator-key", "secretKey": "wrong-secret"}).encode()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            attacks = [pool.submit(_request, url, "POST", "/api/session", wrong) for _ in range(60)]
            reads = [pool.submit(_request, url, "GET", "/api/cluster") for _ in range(100)]
            statuses = [future.result()[0] for future in reads]
            assert {future.result()[0] for future in attacks} == {403}
        assert statuses.count(200) == 100, statuses
        assert _request(url, "GET", "/api/session") == (200, {"accessKey": "operator-key"})
    finally:
        broker.stop()
