"""The HTTP server: client requests go to lagproxy.Lag.handle, /_lag/ to the control API."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .wire import HOP_BY_HOP, BadRules, Req, log


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lagproxy"
    # TCP_NODELAY on each client connection: an answer goes out as two writes (the head, then
    # the body), and with Nagle's algorithm on the body waited for the client's delayed ACK of
    # the head, about 40 ms a call on Linux, which AWS does not add.
    disable_nagle_algorithm = True
    # The proxy (lagproxy.Lag), set on the class by main(); not imported here, so that the
    # entry point alone knows the whole of Lag.
    lag: object

    def log_message(self, fmt, *args):  # quiet: the call log is the record
        pass

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.lag.close_conns()

    def _body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status: int, headers: list, body: bytes) -> None:
        self.send_response_only(status)
        for k, v in headers:
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status: int, doc) -> None:
        self._send(status, [("Content-Type", "application/json")], json.dumps(doc).encode())

    def _control(self, body: bytes) -> None:
        path = urllib.parse.urlsplit(self.path).path.rstrip("/")
        lag = self.lag
        try:
            if path == "/_lag/health" and self.command == "GET":
                return self._json(200, {"ok": True, "upstream": lag.upstream})
            if path == "/_lag/rules" and self.command == "GET":
                with lag.lock:
                    return self._json(200, lag.rules)
            if path == "/_lag/rules" and self.command in ("POST", "PUT", "PATCH"):
                patch = json.loads(body or b"{}")
                return self._json(200, lag.merge(patch))
            if path == "/_lag/calls" and self.command == "GET":
                with lag.lock:
                    return self._json(200, {"calls": list(lag.calls)})
            if path == "/_lag/state" and self.command == "GET":
                return self._json(200, lag.state())
            if path == "/_lag/reset" and self.command == "POST":
                lag.reset()
                return self._json(200, {"ok": True})
            return self._json(404, {"error": f"no control route {self.command} {path}"})
        except (BadRules, ValueError) as e:
            return self._json(400, {"error": str(e)})

    def _handle(self) -> None:
        body = self._body()
        if self.path.startswith("/_lag/") or self.path == "/_lag":
            return self._control(body)
        req = Req(self.command, self.path, list(self.headers.items()), body)
        try:
            status, headers, data, lag = self.lag.handle(req)
        except (OSError, http.client.HTTPException) as e:
            log(f"{req.service} {req.operation}: upstream failed: {e}")
            self.lag.record(req, 502, None)
            self.close_connection = True
            return self._send(502, [("Content-Type", "text/plain")], f"lagproxy: upstream failed: {e}\n".encode())
        self.lag.record(req, status, lag)
        self.lag.gate.observe(req, status, data)
        self._send(status, headers, data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    # socketserver's default listen backlog is 5: a burst of new connections (karpctl opens up to
    # --concurrency at once, many clusters open several times that) overflowed it and the kernel
    # reset them, which the client saw as connection resets and retried.
    request_queue_size = 1024
