"""Connections cannot pile up: a stalled or trickling request is answered 408 and closed, a
client that reads nothing of its stream is dropped and its generation cancelled, and open
connections are capped. Real sockets on loopback; each bound is generous (the promise is
"closed within seconds", not "open for ever")."""

from __future__ import annotations

import json
import socket
import time

import pytest

from app.server import runner

BOUND_S = 15.0  # the limits below are 1 s; this is what the tests allow


def connect(served, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(BOUND_S + 5)
    sock.connect(("127.0.0.1", served.address.port))
    return sock


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes; and how long that took. Fails (timeout)
    when the server keeps the connection open."""
    start = time.monotonic()
    data = b""
    while True:
        try:
            part = sock.recv(65536)
        except ConnectionResetError:
            break
        if not part:
            break
        data += part
    return data, time.monotonic() - start


@pytest.fixture
def strict(serve, gqa_model_dir):
    return serve(gqa_model_dir, header_timeout_s=1.0, body_timeout_s=1.0, write_timeout_s=1.0)


def test_a_silent_connection_is_closed(strict):
    with connect(strict) as sock:
        data, took = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert b"request_timeout" in data
    assert took < BOUND_S


def test_a_connection_stuck_mid_headers_is_closed(strict):
    with connect(strict) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        data, took = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert took < BOUND_S


def test_slowloris_headers_are_closed_although_bytes_keep_coming(strict):
    line = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-a: b\r\n" * 200
    start = time.monotonic()
    with connect(strict) as sock:
        sock.settimeout(0.2)
        closed = False
        for byte in line:
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(65536) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue  # nothing from the server yet: trickle on
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            else:
                closed = True  # it answered (408) before the headers ended
                break
    assert closed
    assert time.monotonic() - start < BOUND_S


def test_a_connection_stuck_mid_body_is_closed_and_queues_nothing(strict):
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 400\r\n\r\n")
    with connect(strict) as sock:
        sock.sendall(head + b'{"model": "')
        data, took = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert took < BOUND_S
    assert strict.api.admission.served == 0


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_kept_alive_connection_still_serves_requests_in_turn(strict):
    with connect(strict) as sock:
        for _ in range(4):
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.5)  # 2 s in all: longer than the 1 s header deadline


def test_a_client_that_never_reads_its_stream_is_dropped_and_its_generation_stops(
        serve, long_model_dir, monkeypatch):
    bind = runner._bind

    def small_send_buffer(host, port):  # a slow network: the kernel holds 8 KiB, not 4 MiB
        sock = bind(host, port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # accepted ones inherit
        return sock

    monkeypatch.setattr(runner, "_bind", small_send_buffer)
    served = serve(long_model_dir, write_timeout_s=1.0)
    body = json.dumps({"model": served.model.id, "stream": True, "temperature": 0, "seed": 1,
                       "messages": [{"role": "user", "content": "hello there"}]}).encode()
    sock = connect(served, rcvbuf=4096)
    try:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + BOUND_S * 2
        while not served.api.admission.records and time.monotonic() < deadline:
            time.sleep(0.1)  # never reading
        records = list(served.api.admission.records)
    finally:
        sock.close()
    assert len(records) == 1
    assert records[0].status == "cancelled", records
    assert records[0].completion_tokens < 4000  # its reply runs past 4000 tokens uncut


def test_open_connections_are_capped(serve, gqa_model_dir):
    served = serve(gqa_model_dir, max_connections=4, header_timeout_s=30.0)
    held = [connect(served) for _ in range(4)]
    try:
        time.sleep(0.2)  # let the server take them
        with connect(served) as extra:
            data, _ = read_until_closed(extra)
        assert data.startswith(b"HTTP/1.1 503 ")
        assert b"too_many_connections" in data
        held.pop().close()
        time.sleep(0.2)
        with connect(served) as again:
            again.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_response(again).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()


def test_a_refused_client_still_sending_its_request_reads_the_503_sentence(serve,
                                                                           gqa_model_dir):
    """A client beyond the cap usually sends its whole request before it reads. A server that
    wrote its 503 and closed at once resets the connection on the bytes that arrive next: the
    client's send fails ("broken pipe", "connection reset") and it never reads the sentence.
    Deterministic form of that race: the client pauses mid-body, as a slow network would."""
    served = serve(gqa_model_dir, max_connections=2, header_timeout_s=30.0)
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "a" * 200_000}]})
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\n"
               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body.encode())
    held = [connect(served) for _ in range(2)]
    try:
        time.sleep(0.2)  # let the server take them
        with connect(served) as extra:
            extra.sendall(request[:100_000])
            time.sleep(0.3)  # the 503 is written by now
            extra.sendall(request[100_000:])  # without the read-out: reset, or broken pipe
            data, took = read_until_closed(extra)
        assert data.startswith(b"HTTP/1.1 503 "), data[:200]
        assert b"too_many_connections" in data
        assert took < BOUND_S
    finally:
        for sock in held:
            sock.close()


def test_out_of_file_handles_on_accept_is_logged_a_line_at_a_time(caplog):
    import asyncio
    import errno

    from app.server.connections import quiet_accept_errors

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(quiet_accept_errors)
    error = OSError(errno.EMFILE, "Too many open files")
    with caplog.at_level("WARNING"):
        for _ in range(5000):  # what asyncio reports in well under a second when out of fds
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": error})
    loop.close()
    lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert len(lines) == 1
    assert "Too many open files" in lines[0].getMessage()
