"""Forwarding a request to the upstream (ministack, moto or a microburst proxy) on kept-alive
connections."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse

from .wire import HOP_BY_HOP, Req, log

# A kept upstream connection idle this long may have been closed by the upstream's keep-alive
# timeout (hypercorn's and aiohttp's are 75 s): a failure on it is retried once on a new one.
STALE_AFTER_S = 5.0


class Upstream:
    """The upstream side of lagproxy.Lag."""

    def forward(self, req: Req, headers: list[tuple[str, str]] | None = None,
                body: bytes | None = None) -> tuple[int, list, bytes]:
        base = urllib.parse.urlsplit(self.upstream_for(req.service))
        body = req.body if body is None else body
        target = (base.path.rstrip("/") + req.target) if base.path not in ("", "/") else req.target
        # One kept-alive upstream connection per handler thread and upstream (a thread serves one
        # client connection, one request at a time): a new TCP connection per call cost this
        # proxy and the server behind it a connect, an accept and a new handler each time. A
        # kept connection that sat idle for a while may
        # have been closed by the upstream (its keep-alive timeout): if it fails that way, the
        # request is sent once more on a new connection. A connection that fails while in use is
        # not retried (a fault proxy upstream may have reset it on purpose): the client gets 502.
        for fresh in (False, True):
            conn, idle = self._upstream_conn(base, fresh)
            try:
                conn.putrequest(req.method, target, skip_host=req.header("host") is not None,
                                skip_accept_encoding=True)
                for k, v in (req.headers if headers is None else headers):
                    if k.lower() not in HOP_BY_HOP:
                        conn.putheader(k, v)
                if body or req.method in ("POST", "PUT", "PATCH"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop_conn(base)
                if fresh or idle < STALE_AFTER_S:
                    raise
                log(f"upstream closed a connection idle for {idle:.0f} s ({e.__class__.__name__}); sending on a new one")
                continue
            except BaseException:
                self._drop_conn(base)
                raise
            if resp.will_close:
                self._drop_conn(base)
            else:
                self.local.conns[(base.scheme, base.netloc)] = (conn, time.monotonic())
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
            return resp.status, out, data
        raise AssertionError("unreachable")

    def _upstream_conn(self, base, fresh: bool) -> tuple[http.client.HTTPConnection, float]:
        """This thread's kept connection to `base` (or a new one) and how long it has been idle."""
        conns = self.local.__dict__.setdefault("conns", {})
        key = (base.scheme, base.netloc)
        if fresh or key not in conns:
            self._drop_conn(base)
            cls = http.client.HTTPSConnection if base.scheme == "https" else http.client.HTTPConnection
            conns[key] = (cls(base.netloc, timeout=120), time.monotonic())
            return conns[key][0], 0.0
        conn, last = conns[key]
        return conn, time.monotonic() - last

    def close_conns(self) -> None:
        """Close this thread's kept upstream connections (its client connection has ended)."""
        for conn, _ in self.local.__dict__.pop("conns", {}).values():
            conn.close()

    def _drop_conn(self, base) -> None:
        kept = self.local.__dict__.setdefault("conns", {}).pop((base.scheme, base.netloc), None)
        if kept is not None:
            kept[0].close()

    def send_deferred(self, req: Req, what: str) -> None:
        """Send upstream a request the proxy held back (a deferred delete) and log the answer:
        it runs from a timer or a reset, with no caller to tell."""
        try:
            status, _, data = self.forward(req)
            log(f"deferred {what} sent upstream: {status} {data[:200]!r}")
        except Exception as e:  # noqa: BLE001 - a background send has no caller to tell
            log(f"deferred {what} failed: {e}")

    def json_call(self, like: Req, target: str, payload: dict) -> tuple[int, dict]:
        """An awsJson call of our own upstream (`target`: the X-Amz-Target, e.g.
        "TrentService.ListResourceTags"), with the client's other headers (the emulators accept
        any signature)."""
        headers = [(k, target) if k.lower() == "x-amz-target" else (k, v) for k, v in like.headers]
        status, _, data = self.forward(like, headers=headers, body=json.dumps(payload).encode())
        try:
            return status, json.loads(data or b"{}")
        except ValueError:
            return status, {}
