"""What the proxy keeps between requests: the open windows, the deferred deletes and the call
log; reset, flush and the /_lag/state view of them."""

from __future__ import annotations

import json
import threading
import time

import lagpolicy

from .iam import simulate_params
from .sqs import written_attributes
from .wire import Req


class State:
    """The state of lagproxy.Lag (each service's mixin reads and writes its own part)."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.lock = threading.RLock()
        # Per thread: its kept-alive upstream connections (see forward).
        self.local = threading.local()
        self.rules: dict = {}
        self.calls: list[dict] = []
        # queue -> {"until": t, "old": {attr: value}, "keys": set(attrs written)}
        self.attr_windows: dict[str, dict] = {}
        # queue -> t (NonExistentQueue until t)
        self.create_windows: dict[str, float] = {}
        # role -> {"until": t, "kind": "create"|"trust"}
        self.role_windows: dict[str, dict] = {}
        # policy ARN -> {"until": t, "old": previous default version id}
        self.version_windows: dict[str, dict] = {}
        # queued DeleteQueue requests: id -> (due, Req, timer)
        self.pending_deletes: dict[int, tuple[float, Req, threading.Timer]] = {}
        # queue -> {"until": t, "reads": n} (sqs_create_flipflop_s)
        self.create_flips: dict[str, dict] = {}
        # queue -> {"ident": pending delete id, "reads": n} (sqs_delete_flipflop_s)
        self.delete_flips: dict[str, dict] = {}
        # queue -> t (CreateQueue answers QueueDeletedRecently until t)
        self.deleted_recently: dict[str, float] = {}
        # queue -> t (ListQueueTags answers no tags until t)
        self.tags_windows: dict[str, float] = {}
        # deferred EKS deletes: (cluster, kind, id) -> {"due", "req", "timer", "mode": "flip"|"lag",
        # "reads", "match": principal ARN or (namespace, service account)}; kind "entry" | "assoc"
        self.eks_pending: dict[tuple[str, str, str], dict] = {}
        # service -> {"tokens": n, "at": t} (throttle_rps)
        self.buckets: dict[str, dict] = {}
        # association ARN -> {key: value, or None once removed} (eks_tag_associations)
        self.assoc_tags: dict[str, dict] = {}
        # access entry ARN -> {key: value, or None once removed} (eks_access_entry_tags)
        self.entry_tags: dict[str, dict] = {}
        # role -> [{"after": operation, "actions": [...]}] (iam_watch_role)
        self.iam_watch: dict[str, list] = {}
        # KMS key id -> the tag values it was made with (or that ListResourceTags showed)
        self.kms_names: dict[str, set] = {}
        # KMS key id -> {"until": t, "after": "CreateKey" | "CancelKeyDeletion", "n": N} (kms_key_lag_s)
        self.kms_windows: dict[str, dict] = {}
        # alias name -> t (DescribeKey by the alias answers NotFoundException until t)
        self.kms_alias_windows: dict[str, float] = {}
        # caller_policy: what it learned (IAM paths, EKS ARNs) and its decisions
        self.gate = lagpolicy.Gate()
        self._next_id = 0

    def reset(self) -> None:
        with self.lock:
            pending = list(self.pending_deletes.items())
            self.pending_deletes.clear()
            self.rules = {}
            self.calls = []
            self.attr_windows.clear()
            self.create_windows.clear()
            self.role_windows.clear()
            self.version_windows.clear()
            self.create_flips.clear()
            self.delete_flips.clear()
            self.deleted_recently.clear()
            self.tags_windows.clear()
            self.iam_watch.clear()
            self.assoc_tags.clear()
            self.buckets.clear()
            self.kms_names.clear()
            self.kms_windows.clear()
            self.kms_alias_windows.clear()
            self.gate.reset()
            eks = list(self.eks_pending.values())
            self.eks_pending.clear()
        for _, (_, req, timer) in pending:
            timer.cancel()
            self._send_delete(req)
        for item in eks:
            item["timer"].cancel()
            self._send_eks_delete(item["req"])

    def flush(self) -> None:
        with self.lock:
            pending = list(self.pending_deletes.values())
            self.pending_deletes.clear()
            self.delete_flips.clear()
            eks = list(self.eks_pending.values())
            self.eks_pending.clear()
        for _, req, timer in pending:
            timer.cancel()
            self._send_delete(req)
        for item in eks:
            item["timer"].cancel()
            self._send_eks_delete(item["req"])

    def state(self) -> dict:
        now = time.monotonic()
        with self.lock:
            return {
                "sqs_attr": {q: {"remaining_s": round(w["until"] - now, 3), "old": w["old"], "keys": sorted(w["keys"])}
                             for q, w in self.attr_windows.items() if w["until"] > now},
                "sqs_create": {q: round(t - now, 3) for q, t in self.create_windows.items() if t > now},
                "sqs_delete": [{"queue": r.queue_name(), "due_in_s": round(due - now, 3)}
                               for due, r, _ in self.pending_deletes.values()],
                "eks_role": {r: {"remaining_s": round(w["until"] - now, 3), "kind": w["kind"]}
                             for r, w in self.role_windows.items() if w["until"] > now},
                "sqs_create_flip": {q: round(w["until"] - now, 3) for q, w in self.create_flips.items()
                                    if w["until"] > now},
                "sqs_deleted_recently": {q: round(t - now, 3) for q, t in self.deleted_recently.items() if t > now},
                "sqs_tags": {q: round(t - now, 3) for q, t in self.tags_windows.items() if t > now},
                "eks_delete": [{"cluster": k[0], "kind": k[1], "id": k[2], "mode": v["mode"],
                                "due_in_s": round(v["due"] - now, 3)} for k, v in self.eks_pending.items()],
                "iam_watch": json.loads(json.dumps(self.iam_watch)),
                "kms_key": {k: {"remaining_s": round(w["until"] - now, 3), "after": w["after"]}
                            for k, w in self.kms_windows.items() if w["until"] > now},
                "kms_alias": {a: round(t - now, 3) for a, t in self.kms_alias_windows.items() if t > now},
                "caller_policy": self.gate.decisions(),
            }

    def record(self, req: Req, status: int, lag: str | None) -> None:
        call = {
            "service": req.service, "operation": req.operation, "time": time.time(),
            "resource": req.resource(), "status": status, "lag": lag,
        }
        if req.service == "sqs" and req.operation == "SetQueueAttributes":
            call["attributes"] = written_attributes(req)
        if req.service == "cloudtrail" and req.operation == "LookupEvents":
            j = req.json or {}
            call["lookup"] = {"attributes": j.get("LookupAttributes") or [], "start": j.get("StartTime"),
                              "end": j.get("EndTime"), "max_results": j.get("MaxResults"),
                              "next_token": j.get("NextToken"), "region": req.region()}
        if req.service == "monitoring" and isinstance(req.cbor, dict):
            call["queries"] = [{"id": q.get("Id"), "metric": ((q.get("MetricStat") or {}).get("Metric") or {})}
                               for q in req.cbor.get("MetricDataQueries") or []]
        if req.service == "iam" and req.operation in ("SimulatePrincipalPolicy", "GetContextKeysForPrincipalPolicy"):
            call["resource"] = req.form.get("PolicySourceArn", "").rsplit("/", 1)[-1] or None
            if req.operation == "SimulatePrincipalPolicy":
                asked = simulate_params(req.form)
                call["actions"], call["context_entries"] = asked["actions"], asked["context_entries"]
                call["resources"] = asked["resources"]
                call["marker"] = req.form.get("Marker")
        with self.lock:
            self.calls.append(call)
