"""A request as the proxy reads it off the wire, and the error answers of each AWS wire."""

from __future__ import annotations

import base64
import json
import re
import struct
import sys
import urllib.parse
import uuid

from .cbor import cbor_decode

# Headers that belong to one hop, not to the request: never copied across.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "expect", "content-length",
}


SCOPE_RE = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/,\s]+)/([^/,\s]+)/aws4_request")


RPCV2_PATH_RE = re.compile(r"/service/[^/]+/operation/([^/]+)$")


def log(msg: str) -> None:
    print(f"lagproxy: {msg}", file=sys.stderr, flush=True)


class BadRules(ValueError):
    pass


class Req:
    """One client request as read off the wire, with what the proxy recognised in it."""

    def __init__(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes):
        self.method = method
        self.target = target  # path plus query, as sent
        self.headers = headers
        self.body = body
        split = urllib.parse.urlsplit(target)
        self.path = split.path
        self.query = split.query
        self.service = self._service()
        self.form: dict[str, str] = {}
        self.json: dict | None = None
        self.cbor = None
        self.operation = self._operation()

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def region(self) -> str:
        """The Region of the SigV4 credential scope (us-east-1 when unsigned)."""
        m = SCOPE_RE.search(self.header("authorization") or "")
        return m.group(1) if m else "us-east-1"

    def _service(self) -> str:
        m = SCOPE_RE.search(self.header("authorization") or "")
        if m:
            return m.group(2)
        tgt = self.header("x-amz-target") or ""
        if tgt.startswith("AmazonSQS."):
            return "sqs"
        if tgt.startswith("AWSEvents."):
            return "events"
        if self.path.startswith("/clusters"):
            return "eks"
        return "unknown"

    def _operation(self) -> str:
        tgt = self.header("x-amz-target")
        if tgt and "." in tgt:
            try:
                self.json = json.loads(self.body or b"{}")
            except ValueError:
                self.json = None
            return tgt.rsplit(".", 1)[1]
        ctype = (self.header("content-type") or "").lower()
        if "x-www-form-urlencoded" in ctype or (self.method == "POST" and self.body.startswith(b"Action=")):
            self.form = dict(urllib.parse.parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))
        elif self.query:
            self.form = dict(urllib.parse.parse_qsl(self.query, keep_blank_values=True))
        if "Action" in self.form:
            return self.form["Action"]
        rpc = RPCV2_PATH_RE.search(self.path)
        if rpc and "cbor" in ctype:
            try:
                self.cbor = cbor_decode(self.body) if self.body else {}
            except (ValueError, IndexError, KeyError, UnicodeDecodeError, struct.error):
                self.cbor = None
            return rpc.group(1)
        if self.service == "eks":
            if self.body and ("json" in ctype or self.body.startswith(b"{")):
                try:
                    self.json = json.loads(self.body)
                except ValueError:
                    self.json = None
            return eks_operation(self.method, self.path)
        return f"{self.method} {self.path}"

    # The resource names rules are scoped by.
    def queue_name(self) -> str | None:
        j = self.json or {}
        if isinstance(j.get("QueueName"), str):
            return j["QueueName"]
        url = j.get("QueueUrl") or self.form.get("QueueUrl")
        if isinstance(url, str) and url:
            return url.rstrip("/").rsplit("/", 1)[-1]
        return self.form.get("QueueName")

    def cluster_name(self) -> str | None:
        parts = self.path.split("/")
        if len(parts) >= 3 and parts[1] == "clusters" and parts[2]:
            return urllib.parse.unquote(parts[2])
        return None

    def role_name(self) -> str | None:
        return self.form.get("RoleName")

    def resource(self) -> str | None:
        if self.service == "sqs":
            return self.queue_name()
        if self.service == "eks":
            return self.cluster_name()
        if self.service == "iam":
            return self.role_name()
        if self.service == "events":
            j = self.json or {}
            return j.get("Name") or j.get("Rule")
        if self.service == "kms":
            j = self.json or {}
            return j.get("AliasName") or j.get("KeyId") or j.get("TargetKeyId")
        return None


def eks_operation(method: str, path: str) -> str:
    """The EKS operation for a rest-json request (the routes karpctl and the seed use)."""
    p = [urllib.parse.unquote(x) for x in path.strip("/").split("/")]
    n = len(p)
    if p[0] == "clusters":
        if n == 1:
            return {"GET": "ListClusters", "POST": "CreateCluster"}.get(method, f"{method} /clusters")
        if n == 2:
            return {"GET": "DescribeCluster", "DELETE": "DeleteCluster"}.get(method, f"{method} /clusters/*")
        sub = p[2]
        if sub == "update-config" and method == "POST":
            return "UpdateClusterConfig"
        if sub == "updates":
            return "ListUpdates" if n == 3 else "DescribeUpdate"
        singular = {
            "access-entries": "AccessEntry", "pod-identity-associations": "PodIdentityAssociation",
            "addons": "Addon", "node-groups": "Nodegroup", "fargate-profiles": "FargateProfile",
        }.get(sub)
        if singular:
            if n == 3:
                plural = {"AccessEntry": "AccessEntries", "Nodegroup": "Nodegroups"}.get(singular, singular + "s")
                return {"GET": f"List{plural}", "POST": f"Create{singular}"}.get(method, f"{method} {sub}")
            if sub == "access-entries" and n >= 5 and p[4] == "access-policies":
                if n == 5:
                    return {"GET": "ListAssociatedAccessPolicies", "POST": "AssociateAccessPolicy"}.get(method, method)
                return "DisassociateAccessPolicy" if method == "DELETE" else f"{method} access-policies"
            if n == 4:
                return {"GET": f"Describe{singular}", "DELETE": f"Delete{singular}",
                        "POST": f"Update{singular}"}.get(method, f"{method} {sub}")
            if n == 5 and p[4] == "update-config":
                return f"Update{singular}Config"
    if p[0] == "tags":
        return {"GET": "ListTagsForResource", "POST": "TagResource", "DELETE": "UntagResource"}.get(method, method)
    if p[0] == "access-policies" and method == "GET":
        return "ListAccessPolicies"
    if p[0] == "addons" and n >= 2 and p[1] == "supported-versions":
        return "DescribeAddonVersions"
    return f"{method} {path}"


def sqs_error(code: str, type_: str, message: str, status: int = 400) -> tuple[int, list, bytes]:
    """An SQS error as AWS sends it on the JSON wire (and as microburst renders it): the SDK
    takes the code from x-amzn-query-error (awsQueryCompatible)."""
    body = json.dumps({"__type": f"com.amazonaws.sqs#{type_}", "message": message}).encode()
    return status, [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
        ("x-amzn-query-error", f"AWS.SimpleQueueService.{code};Sender"),
    ], body


def eks_error(status: int, code: str, message: str) -> tuple[int, list, bytes]:
    body = json.dumps({"message": message}).encode()
    return status, [
        ("Content-Type", "application/json"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
        ("x-amzn-ErrorType", code),
    ], body


def query_error(status: int, code: str, message: str) -> tuple[int, list, bytes]:
    """An error on the query wire (IAM, STS)."""
    body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
            f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>").encode()
    return status, [("Content-Type", "text/xml")], body


def json_error(code: str, message: str, status: int = 400) -> tuple[int, list, bytes]:
    """An error on the awsJson 1.1 wire (EventBridge, KMS)."""
    body = json.dumps({"__type": code, "message": message}).encode()
    return status, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))], body


def page_token(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


def page_offset(token) -> int | None:
    """The offset in a NextToken / Marker this proxy issued; None when it is not one."""
    if token in (None, ""):
        return 0
    try:
        off = json.loads(base64.b64decode(str(token), validate=True))["offset"]
    except (ValueError, KeyError, TypeError):
        return None
    return off if isinstance(off, int) and off >= 0 else None
