"""The management API's own HTTP/1.1 server (mgmt/httpserver.py) over raw sockets: reason
phrases, keep-alive across requests whose bodies the app did not read, HEAD, 100-continue and
malformed requests."""

from __future__ import annotations

import base64
import socket
import urllib.parse

import httpx

_AUTH = "Authorization: Basic " + base64.b64encode(b"guest:guest").decode() + "\r\n"


def _connect(node) -> socket.socket:
    url = urllib.parse.urlsplit(node.mgmt_url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def _read_response(sock: socket.socket) -> tuple[bytes, dict, bytes]:
    """(status line, headers, body) of one response with a content-length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines)}
    length = int(headers.get(b"content-length", b"0"))
    while len(rest) < length:
        rest += sock.recv(4096)
    return status, headers, rest


def test_keep_alive_across_gets_and_unread_bodies(node):
    with _connect(node) as s:
        s.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n" + _AUTH.encode() + b"\r\n")
        status, headers, body = _read_response(s)
        assert status == b"HTTP/1.1 200 OK" and body.startswith(b"{")
        assert b"date" in headers
        # a refused PUT: the app never reads the body, the server skips it and keeps going
        s.sendall(b"PUT /api/vhosts/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert _read_response(s)[0] == b"HTTP/1.1 401 Unauthorized"
        s.sendall(b"GET /api/whoami HTTP/1.1\r\nHost: x\r\n" + _AUTH.encode() + b"\r\n")
        status, _, body = _read_response(s)
        assert status == b"HTTP/1.1 200 OK" and b'"guest"' in body


def test_head_has_headers_but_no_body(node):
    with _connect(node) as s:
        s.sendall(b"HEAD /api/overview HTTP/1.1\r\nHost: x\r\n" + _AUTH.encode() + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(4096)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert int(data.split(b"content-length: ")[1].split(b"\r\n")[0]) > 0
        s.sendall(b"GET /api/whoami HTTP/1.1\r\nHost: x\r\n" + _AUTH.encode() + b"\r\n")
        rest = data.partition(b"\r\n\r\n")[2]
        while b"guest" not in rest:
            rest += s.recv(4096)
        assert rest.startswith(b"HTTP/1.1 200 OK\r\n")  # nothing of a HEAD body came first


def test_expect_100_continue(node, name):
    body = b'{"durable": false}'
    with _connect(node) as s:
        s.sendall(f"PUT /api/queues/%2F/{name} HTTP/1.1\r\nHost: x\r\n{_AUTH}Expect: 100-continue\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        assert s.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        assert _read_response(s)[0] == b"HTTP/1.1 201 Created"


def test_malformed_request_is_400_and_closes(node):
    with _connect(node) as s:
        s.sendall(b"NOT A REQUEST\r\n\r\n")
        status, headers, _ = _read_response(s)
        assert status == b"HTTP/1.1 400 Bad Request" and headers[b"connection"] == b"close"
        assert s.recv(4096) == b""


def test_metrics_endpoint_reason_phrase(node):
    r = httpx.get(node.metrics_url + "/metrics")
    assert r.status_code == 200 and r.reason_phrase == "OK"
    assert httpx.get(node.metrics_url + "/nope").reason_phrase == "Not Found"
