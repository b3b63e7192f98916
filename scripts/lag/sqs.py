"""SQS: sqs_attr_*, sqs_create_*, sqs_delete_*, sqs_deleted_recently_s, sqs_tags_lag_s and
sqs_tag_on_create_unsupported."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

from .wire import Req, sqs_error

SQS_CREATE_LAG_OPS = {"GetQueueAttributes", "SetQueueAttributes", "ListQueueTags", "TagQueue"}


# SQS reads a flip-flop window answers (the operations that find a queue or read its state).
SQS_FLIP_READ_OPS = {"GetQueueAttributes", "ListQueueTags", "GetQueueUrl"}


def written_attributes(req: Req) -> dict:
    """The attributes an SQS SetQueueAttributes writes (JSON wire, or the query wire's
    Attribute.N.Name / Attribute.N.Value)."""
    attrs = (req.json or {}).get("Attributes")
    if isinstance(attrs, dict):
        return {str(k): v for k, v in attrs.items()}
    out = {}
    for k, name in req.form.items():
        m = re.fullmatch(r"Attribute\.(\d+)\.Name", k)
        if m:
            out[name] = req.form.get(f"Attribute.{m.group(1)}.Value", "")
    return out


def non_existent_queue() -> tuple[int, list, bytes]:
    return sqs_error("NonExistentQueue", "QueueDoesNotExist", "The specified queue does not exist.")


class Sqs:
    """The SQS behaviours of lagproxy.Lag."""

    def handle_sqs(self, req: Req):
        op, q = req.operation, req.queue_name()
        now = time.monotonic()
        if q is None:
            return (*self.forward(req), None)

        if op in SQS_CREATE_LAG_OPS:
            with self.lock:
                until = self.create_windows.get(q)
            if until is not None and now < until:
                return (*non_existent_queue(), "sqs_create_lag_s")

        if op in SQS_FLIP_READ_OPS:
            with self.lock:
                flip = self.create_flips.get(q)
                if flip is not None and flip["until"] <= now:
                    del self.create_flips[q]
                    flip = None
                if flip is not None:
                    flip["reads"] += 1
                    if flip["reads"] > 1:
                        flip = "gone"
                dflip = self.delete_flips.get(q)
                if dflip is not None:
                    dflip["reads"] += 1
                    dflip = "gone" if dflip["reads"] == 1 else None
            if flip == "gone":
                return (*non_existent_queue(), "sqs_create_flipflop_s")
            if dflip == "gone":
                return (*non_existent_queue(), "sqs_delete_flipflop_s")

        if op == "ListQueueTags":
            with self.lock:
                until = self.tags_windows.get(q)
            if until is not None and now < until:
                status, headers, body = self.forward(req)
                if status == 200:
                    return status, headers, b"{}", "sqs_tags_lag_s"
                return status, headers, body, None

        if op == "TagQueue":
            status, headers, body = self.forward(req)
            n = self.rule("sqs_tags_lag_s", q)
            if n and status == 200:
                with self.lock:
                    self.tags_windows[q] = time.monotonic() + n
            return status, headers, body, None

        if op == "CreateQueue":
            tagged = bool((req.json or {}).get("tags"))
            if tagged and self.rule("sqs_tag_on_create_unsupported", q):
                return (*sqs_error("UnsupportedOperation", "UnsupportedOperation",
                                   "Tagging a queue on creation is not supported in this partition."),
                        "sqs_tag_on_create_unsupported")
            with self.lock:
                until = self.deleted_recently.get(q)
            if until is not None and now < until:
                return (*sqs_error("QueueDeletedRecently", "QueueDeletedRecently",
                                   "You must wait 60 seconds after deleting a queue before you can create "
                                   "another with the same name."), "sqs_deleted_recently_s")
            n = self.rule("sqs_create_lag_s", q)
            flip_n = self.rule("sqs_create_flipflop_s", q)
            existed = False
            if n or flip_n:
                st, _ = self.sqs_call(req, "GetQueueUrl", {"QueueName": q})
                existed = st == 200
            status, headers, body = self.forward(req)
            tags_n = self.rule("sqs_tags_lag_s", q)
            if tagged and tags_n and status == 200:
                with self.lock:
                    self.tags_windows[q] = time.monotonic() + tags_n
            if (n or flip_n) and not existed and status == 200:
                with self.lock:
                    if n:
                        self.create_windows[q] = time.monotonic() + n
                    if flip_n:
                        self.create_flips[q] = {"until": time.monotonic() + flip_n, "reads": 0}
                return status, headers, body, "sqs_create_lag_s" if n else "sqs_create_flipflop_s"
            return status, headers, body, None

        if op == "SetQueueAttributes":
            flip_n = self.rule("sqs_attr_flipflop_s", q)
            rule = "sqs_attr_flipflop_s" if flip_n else "sqs_attr_lag_s"
            n = flip_n or self.rule("sqs_attr_lag_s", q)
            if not n:
                return (*self.forward(req), None)
            written = set(((req.json or {}).get("Attributes") or {}).keys())
            with self.lock:
                w = self.attr_windows.get(q)
                open_window = w is not None and w["until"] > time.monotonic()
            old = None
            if not open_window:
                url = (req.json or {}).get("QueueUrl")
                st, got = self.sqs_call(req, "GetQueueAttributes", {"QueueUrl": url, "AttributeNames": ["All"]})
                old = got.get("Attributes", {}) if st == 200 else None
            status, headers, body = self.forward(req)
            if status == 200:
                with self.lock:
                    w = self.attr_windows.get(q)
                    if w is not None and w["until"] > time.monotonic():
                        # A write inside the window: readers still see the values from
                        # before the first write; the window restarts.
                        w["keys"] |= written
                        w["until"] = time.monotonic() + n
                        w["reads"] = 0
                    elif old is not None:
                        self.attr_windows[q] = {"until": time.monotonic() + n, "old": old, "keys": written,
                                                "rule": rule, "reads": 0}
                return status, headers, body, rule
            return status, headers, body, None

        if op == "GetQueueAttributes":
            with self.lock:
                w = self.attr_windows.get(q)
                w = w if w and w["until"] > now else None
                if w is not None and w["rule"] == "sqs_attr_flipflop_s":
                    # A flip-flop window: the first read shows the write, the reads after do not.
                    w["reads"] += 1
                    w = None if w["reads"] == 1 else w
                w = dict(w) if w is not None else None
            status, headers, body = self.forward(req)
            if w is None or status != 200:
                return status, headers, body, None
            try:
                doc = json.loads(body)
            except ValueError:
                return status, headers, body, None
            attrs = doc.get("Attributes") or {}
            requested = set((req.json or {}).get("AttributeNames") or [])
            for key in w["keys"]:
                if key in w["old"]:
                    if key in attrs or "All" in requested or key in requested:
                        attrs[key] = w["old"][key]
                else:
                    attrs.pop(key, None)
            doc["Attributes"] = attrs
            if not attrs:
                doc.pop("Attributes")
            return status, headers, json.dumps(doc).encode(), w["rule"]

        if op == "DeleteQueue":
            recently = self.rule("sqs_deleted_recently_s", q)
            if recently:
                with self.lock:
                    self.deleted_recently[q] = time.monotonic() + recently
            flip_n = self.rule("sqs_delete_flipflop_s", q)
            n = flip_n or self.rule("sqs_delete_lag_s", q)
            if not n:
                return (*self.forward(req), None)
            ident = self._defer_delete(req, n)
            if flip_n:
                with self.lock:
                    self.delete_flips[q] = {"ident": ident, "reads": 0}
            return 200, [("Content-Type", "application/x-amz-json-1.0"),
                         ("x-amzn-RequestId", str(uuid.uuid4()))], b"{}", \
                "sqs_delete_flipflop_s" if flip_n else "sqs_delete_lag_s"

        return (*self.forward(req), None)

    def sqs_call(self, like: Req, operation: str, payload: dict) -> tuple[int, dict]:
        """An SQS call of our own, upstream, with the client's headers (the emulators accept
        any signature; microburst is started with --no-resign)."""
        return self.json_call(like, "AmazonSQS." + operation, payload)

    def _send_delete(self, req: Req) -> None:
        self.send_deferred(req, f"DeleteQueue {req.queue_name()}")

    def _delete_due(self, ident: int) -> None:
        with self.lock:
            item = self.pending_deletes.pop(ident, None)
            for q in [q for q, f in self.delete_flips.items() if f["ident"] == ident]:
                del self.delete_flips[q]
        if item:
            self._send_delete(item[1])

    def _defer_delete(self, req: Req, n: float) -> int:
        """Queue `req` (a DeleteQueue) to be sent upstream in n s; its id."""
        with self.lock:
            self._next_id += 1
            ident = self._next_id
            timer = threading.Timer(n, self._delete_due, args=(ident,))
            timer.daemon = True
            self.pending_deletes[ident] = (time.monotonic() + n, req, timer)
        timer.start()
        return ident
