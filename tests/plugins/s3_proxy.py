"""A tiny HTTP proxy on 127.0.0.1 in front of an S3 API server (moto), for tests and benches: it
forwards every request unchanged, counts the bytes each way (request line, headers and bodies), and
can answer chosen requests itself with an S3 error instead of forwarding them (fault injection:
``fail(method, path_part, status, code, times)``; status 0 resets the connection instead). The client (s3fs/botocore) and the server are
the real ones; only the chosen answers are made here."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class S3Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.sent = 0  # bytes from the client, as forwarded
        self.received = 0  # bytes to the client
        self.requests: list[tuple[str, str]] = []
        self._faults: list[list[Any]] = []  # [method, path part, status, code, times left]
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                head = len(self.requestline) + 2 + sum(len(k) + len(v) + 4 for k, v in self.headers.items()) + 2
                with proxy._lock:
                    proxy.sent += head + len(body)
                    proxy.requests.append((self.command, self.path))
                    fault = next(
                        (f for f in proxy._faults if f[0] == self.command and f[1] in self.path and f[4] > 0), None
                    )
                    if fault is not None:
                        fault[4] -= 1
                if fault is not None and fault[2] == 0:  # status 0: reset the connection, no answer
                    self.close_connection = True
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if fault is not None:
                    payload = (
                        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{fault[3]}</Code>"
                        f"<Message>injected by the test proxy</Message></Error>"
                    ).encode()
                    self._answer(fault[2], [("Content-Type", "application/xml")], payload)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                drop = ("transfer-encoding", "connection") + (() if self.command == "HEAD" else ("content-length",))
                kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in drop]
                conn.close()
                self._answer(resp.status, kept, data)

            def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                if self.command != "HEAD":  # a HEAD answers with the object's own Content-Length
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                with proxy._lock:
                    proxy.received += 20 + sum(len(k) + len(v) + 4 for k, v in headers) + 2 + len(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail(self, method: str, path_part: str, status: int = 500, code: str = "InternalError", times: int = 1) -> None:
        with self._lock:
            self._faults.append([method, path_part, status, code, times])

    def reset_counts(self) -> None:
        """Zero the counts and forget the faults not yet used."""
        with self._lock:
            self._faults.clear()
            self.sent = self.received = 0
            self.requests.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
