"""EKS: eks_cluster_*, eks_compute_config, eks_ip_family, eks_role_propagation_s, the tag and field
gaps (eks_tag_associations, eks_access_entry_tags, eks_association_fields) and deferred deletes."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid

from .wire import Req, eks_error


class Eks:
    """The EKS behaviours of lagproxy.Lag."""

    def handle_eks(self, req: Req):
        status, headers, body, lag = self._handle_eks(req)
        fields = self.rule("eks_association_fields", req.cluster_name())
        if fields and req.operation == "DescribePodIdentityAssociation" and status == 200:
            try:
                doc = json.loads(body)
                doc["association"].update(fields)
                return status, headers, json.dumps(doc).encode(), lag or "eks_association_fields"
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
        return status, headers, body, lag

    def _handle_eks(self, req: Req):
        cluster = req.cluster_name()
        if self.cluster_gone(cluster):
            return (*eks_error(404, "ResourceNotFoundException", f"No cluster found for name: {cluster}."),
                    "eks_cluster_gone")
        op = req.operation
        if op in ("CreateAccessEntry", "CreatePodIdentityAssociation"):
            field = "principalArn" if op == "CreateAccessEntry" else "roleArn"
            arn = (req.json or {}).get(field)
            role = arn.rsplit("/", 1)[-1] if isinstance(arn, str) and ":role/" in arn else None
            with self.lock:
                w = self.role_windows.get(role) if role else None
                w = dict(w) if w and w["until"] > time.monotonic() else None
            if w is not None:
                if op == "CreateAccessEntry":
                    msg = "The specified principalArn is invalid: invalid principal"
                elif w["kind"] == "trust":
                    msg = "Trust policy of the role provided is invalid"
                else:
                    msg = "Role provided in the request does not exist"
                return (*eks_error(400, "InvalidParameterException", msg), "eks_role_propagation_s")
        tagged = self.handle_eks_association_tags(req)
        if tagged is not None:
            return tagged
        tagged = self.handle_eks_access_entry_tags(req)
        if tagged is not None:
            return tagged
        deferred = self.handle_eks_deferred_delete(req, cluster)
        if deferred is not None:
            return deferred
        status, headers, body = self.forward(req)
        if op == "DescribeCluster" and status == 200:
            want = self.rule("eks_cluster_status", cluster)
            compute = self.rule("eks_compute_config", cluster)
            family = self.rule("eks_ip_family", cluster)
            if want or compute or family:
                try:
                    doc = json.loads(body)
                    if want:
                        doc["cluster"]["status"] = want
                    if compute:
                        doc["cluster"]["computeConfig"] = compute
                    if family:
                        doc["cluster"].setdefault("kubernetesNetworkConfig", {})["ipFamily"] = family
                    lag = "eks_cluster_status" if want else "eks_compute_config" if compute else "eks_ip_family"
                    return (status, headers, json.dumps(doc).encode(), lag)
                except (ValueError, KeyError, TypeError):
                    pass
        return status, headers, body, None

    def handle_eks_access_entry_tags(self, req: Req):
        """eks_access_entry_tags: TagResource/UntagResource on the cluster's access entry ARNs are
        kept here (ministack drops some untagged keys), and DescribeAccessEntry answers with the
        entry's tags: those ministack keeps (ListTagsForResource) under the ones kept here. None:
        not ours."""
        parts = [urllib.parse.unquote(x) for x in urllib.parse.urlsplit(req.target).path.strip("/").split("/", 1)]
        if parts[0] == "tags" and len(parts) == 2 and ":access-entry/" in parts[1]:
            arn = parts[1]
            cluster = arn.split(":access-entry/", 1)[1].split("/", 1)[0]
            if not self.rule("eks_access_entry_tags", cluster):
                return None
            ok = (200, [("Content-Type", "application/json")], b"{}")
            with self.lock:
                cur = self.entry_tags.setdefault(arn, {})
                if req.method == "POST":
                    cur.update((req.json or {}).get("tags") or {})
                    return (*ok, "eks_access_entry_tags")
                if req.method == "DELETE":
                    q = urllib.parse.parse_qs(urllib.parse.urlsplit(req.target).query)
                    for k in q.get("tagKeys", []):
                        cur[k] = None
                    return (*ok, "eks_access_entry_tags")
            return None
        if req.operation != "DescribeAccessEntry" or req.method != "GET":
            return None
        if not self.rule("eks_access_entry_tags", req.cluster_name()):
            return None
        status, headers, body = self.forward(req)
        try:
            doc = json.loads(body)
            entry = doc["accessEntry"]
            arn = entry["accessEntryArn"]
            get = Req("GET", "/tags/" + urllib.parse.quote(arn, safe=""),
                      [h for h in req.headers if h[0].lower() != "content-type"], b"")
            _, _, tbody = self.forward(get)
            tags = dict(json.loads(tbody).get("tags") or {})
            with self.lock:
                for k, v in self.entry_tags.get(arn, {}).items():
                    if v is None:
                        tags.pop(k, None)
                    else:
                        tags[k] = v
            entry["tags"] = tags
            return status, headers, json.dumps(doc).encode(), "eks_access_entry_tags"
        except (ValueError, KeyError, TypeError):
            pass
        return status, headers, body, None

    def handle_eks_association_tags(self, req: Req):
        """eks_tag_associations: tags on Pod Identity association ARNs kept here. None: not ours."""
        parts = [urllib.parse.unquote(x) for x in urllib.parse.urlsplit(req.target).path.strip("/").split("/", 1)]
        if parts[0] == "tags" and len(parts) == 2 and ":podidentityassociation/" in parts[1]:
            arn = parts[1]
            cluster = arn.split(":podidentityassociation/", 1)[1].split("/", 1)[0]
            if not self.rule("eks_tag_associations", cluster):
                return None
            ok = (200, [("Content-Type", "application/json")], b"{}")
            with self.lock:
                cur = self.assoc_tags.setdefault(arn, {})
                if req.method == "POST":
                    cur.update((req.json or {}).get("tags") or {})
                    return (*ok, "eks_tag_associations")
                if req.method == "DELETE":
                    q = urllib.parse.parse_qs(urllib.parse.urlsplit(req.target).query)
                    for k in q.get("tagKeys", []):
                        cur[k] = None
                    return (*ok, "eks_tag_associations")
            return None
        if req.operation == "DescribePodIdentityAssociation" and req.method == "GET":
            cluster = req.cluster_name()
            if not self.rule("eks_tag_associations", cluster):
                return None
            status, headers, body = self.forward(req)
            try:
                doc = json.loads(body)
                a = doc["association"]
                with self.lock:
                    extra = dict(self.assoc_tags.get(a.get("associationArn", ""), {}))
                if extra:
                    # Kept tags over the emulator's (those given at create); a removed key is None.
                    tags = dict(a.get("tags") or {})
                    for k, v in extra.items():
                        if v is None:
                            tags.pop(k, None)
                        else:
                            tags[k] = v
                    a["tags"] = tags
                    return status, headers, json.dumps(doc).encode(), "eks_tag_associations"
            except (ValueError, KeyError, TypeError):
                pass
            return status, headers, body, None
        return None

    def handle_eks_deferred_delete(self, req: Req, cluster: str | None):
        """eks_delete_flipflop_s / eks_delete_lag_s: deferred deletes of access entries and Pod
        Identity associations, and how reads and creates see them meanwhile. None: not ours."""
        if cluster is None:
            return None
        op = req.operation
        parts = [urllib.parse.unquote(x) for x in req.path.strip("/").split("/")]
        ident = parts[3] if len(parts) == 4 else None
        kind = {"access-entries": "entry", "pod-identity-associations": "assoc"}.get(parts[2] if len(parts) > 2 else "")
        if kind is None:
            return None
        rule = "eks_delete_flipflop_s" if self.rule("eks_delete_flipflop_s", cluster) else "eks_delete_lag_s"
        n = self.rule(rule, cluster)
        if op in ("DeleteAccessEntry", "DeletePodIdentityAssociation") and n and ident:
            # What the delete would answer, read first (the association's body is its answer).
            get = Req("GET", req.target, [h for h in req.headers if h[0].lower() != "content-type"], b"")
            status, headers, body = self.forward(get)
            if status != 200:
                return (*self.forward(req), None)
            doc = json.loads(body or b"{}")
            if kind == "entry":
                match, answer = ident, b"{}"
            else:
                a = doc.get("association") or {}
                match, answer = (a.get("namespace"), a.get("serviceAccount")), json.dumps({"association": a}).encode()
            key = (cluster, kind, ident)
            timer = threading.Timer(n, self._eks_delete_due, args=(key,))
            timer.daemon = True
            with self.lock:
                self.eks_pending[key] = {"due": time.monotonic() + n, "req": req, "timer": timer,
                                         "mode": "flip" if rule == "eks_delete_flipflop_s" else "lag",
                                         "reads": 0, "match": match}
            timer.start()
            return 200, [("Content-Type", "application/json"), ("x-amzn-RequestId", str(uuid.uuid4()))], answer, rule
        with self.lock:
            pending = {k: v for k, v in self.eks_pending.items() if k[0] == cluster and k[1] == kind}
        if not pending:
            return None
        tag = lambda item: "eks_delete_flipflop_s" if item["mode"] == "flip" else "eks_delete_lag_s"
        if op in ("DescribeAccessEntry", "DescribePodIdentityAssociation") and ident:
            item = pending.get((cluster, kind, ident))
            if item is None:
                return None
            with self.lock:
                gone = self._eks_read_gone(item)
            if gone:
                what = "access entry" if kind == "entry" else "pod identity association"
                return (*eks_error(404, "ResourceNotFoundException", f"The specified {what} could not be found."),
                        tag(item))
            return None
        if op in ("ListAccessEntries", "ListPodIdentityAssociations"):
            status, headers, body = self.forward(req)
            if status != 200:
                return status, headers, body, None
            doc = json.loads(body or b"{}")
            hidden, rules = set(), set()
            with self.lock:
                for (_, _, oid), item in pending.items():
                    if self._eks_read_gone(item):
                        hidden.add(oid)
                        rules.add(tag(item))
            if kind == "entry":
                doc["accessEntries"] = [a for a in doc.get("accessEntries") or [] if a not in hidden]
            else:
                doc["associations"] = [a for a in doc.get("associations") or [] if a.get("associationId") not in hidden]
            return status, headers, json.dumps(doc).encode(), (min(rules) if rules else None)
        if op in ("CreateAccessEntry", "CreatePodIdentityAssociation"):
            j = req.json or {}
            want = j.get("principalArn") if kind == "entry" else (j.get("namespace"), j.get("serviceAccount"))
            for item in pending.values():
                if item["match"] == want:
                    what = "access entry" if kind == "entry" else "association"
                    return (*eks_error(409, "ResourceInUseException",
                                       f"The specified {what} resource is already in use on this cluster."), tag(item))
        return None

    def _send_eks_delete(self, req: Req) -> None:
        self.send_deferred(req, f"{req.operation} {req.path}")

    def _eks_delete_due(self, key: tuple[str, str, str]) -> None:
        with self.lock:
            item = self.eks_pending.pop(key, None)
        if item:
            self._send_eks_delete(item["req"])

    def _eks_read_gone(self, item: dict) -> bool:
        """One read of a deferred-deleted EKS object: whether this read finds it gone."""
        item["reads"] += 1
        return item["mode"] == "lag" or item["reads"] == 1
