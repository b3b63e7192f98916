"""lagpolicy: the lag proxy's caller-policy gate (issue 45), stdlib only.

Neither emulator evaluates IAM. With the rule `caller_policy` set (scripts/lagproxy.py), the
proxy evaluates every request against that identity-based policy the way AWS does before it
forwards it: the request's action, each resource ARN the Service Authorization Reference
defines for that action, and the condition keys karpctl's printed policy uses (aws:TagKeys,
aws:RequestTag/*, aws:ResourceTag/*, iam:PassedToService, iam:AWSServiceName, iam:PolicyARN).
A request no statement allows (or one a Deny matches) is answered with AWS's own refusal for
that service, naming the action and the resource:

  IAM, STS        403 AccessDenied (query XML)
  EC2             403 UnauthorizedOperation (EC2 XML)
  EKS             403 AccessDeniedException (x-amzn-ErrorType)
  SQS             403 AccessDenied (JSON, x-amzn-query-error AccessDenied;Sender)
  EventBridge, KMS, Service Quotas, CloudTrail
                  400 AccessDeniedException (awsJson 1.1)
  CloudWatch      403 AccessDenied (Smithy RPC v2 CBOR)

  "User: <principal> is not authorized to perform: <action> on resource: <arn> because no
   identity-based policy allows the <action> action" (or "with an explicit deny in an
   identity-based policy" when a Deny statement applies)

The rule's value is a policy document, `{"parts": [doc, ...]}` (what `karpctl output --format
caller-policy` prints), or a list of documents: the union of their statements, as IAM joins
the policies of one role. sts:GetCallerIdentity needs no permission and is always let through.

Resources AWS names by ARN but a request carries only by name are resolved:
- IAM roles, instance profiles and policies by name: their path is learned from the create
  request (Path) and from every IAM answer that shows an ARN (GetRole, ListRoles, ...); a name
  not learned yet is looked up upstream (GetRole / GetInstanceProfile). An object that does not
  exist has no path to learn: it is authorized as `<kind>/<name>` (no path).
- SQS queue URL -> queue ARN; EventBridge rule name (and bus) -> rule ARN; EKS access entry
  (principal ARN), Pod Identity association (id), add-on and node group -> their ARNs (the ids
  AWS adds to add-on and node group ARNs are learned from answers); EC2 resource ids -> their
  ARNs; KMS key ids and aliases -> key (and alias) ARNs.
- aws:ResourceTag/* is read upstream at the time of the call (EC2 DescribeTags, KMS
  ListResourceTags).
Dependent actions AWS checks too: iam:PassRole for eks:CreatePodIdentityAssociation (to
pods.eks.amazonaws.com) and iam:AddRoleToInstanceProfile (to ec2.amazonaws.com); the Tag*
action of a create that carries tags (iam:CreateRole/CreatePolicy/CreateInstanceProfile,
sqs:CreateQueue).

Each decision is kept (`decisions()`: operation, action, resource, allowed, and the Sids of the
statements that allow it) for GET /_lag/state.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
import uuid

# The principal refusals name (the emulator's account).
PRINCIPAL = "arn:{p}:sts::{a}:assumed-role/karpctl-ci/karpctl"
DEFAULT_ACCOUNT = "000000000000"

IAM_ARN_RE = re.compile(r"arn:([^:<\"]+):iam::(\d{12}):(role|instance-profile|policy|user|group)(/(?:[^<\"]*/)?)([^/<\"]+)")

# IAM operations by the parameter that names their resource.
IAM_ROLE_OPS = {
    "GetRole", "CreateRole", "DeleteRole", "TagRole", "UntagRole", "ListRoleTags", "UpdateRole",
    "UpdateRoleDescription", "UpdateAssumeRolePolicy", "PutRolePermissionsBoundary",
    "DeleteRolePermissionsBoundary", "AttachRolePolicy", "DetachRolePolicy", "PutRolePolicy",
    "DeleteRolePolicy", "GetRolePolicy", "ListAttachedRolePolicies", "ListRolePolicies",
    "ListInstanceProfilesForRole",
}
IAM_POLICY_OPS = {
    "GetPolicy", "GetPolicyVersion", "ListPolicyVersions", "ListEntitiesForPolicy", "DeletePolicy",
    "CreatePolicyVersion", "DeletePolicyVersion", "SetDefaultPolicyVersion", "TagPolicy", "UntagPolicy",
    "ListPolicyTags",
}
IAM_PROFILE_OPS = {
    "GetInstanceProfile", "CreateInstanceProfile", "DeleteInstanceProfile", "AddRoleToInstanceProfile",
    "RemoveRoleFromInstanceProfile", "TagInstanceProfile", "UntagInstanceProfile", "ListInstanceProfileTags",
}
# Actions the Service Authorization Reference gives no resource type: evaluated on "*".
IAM_NO_RESOURCE = {"ListRoles", "ListPolicies", "GetAccountSummary", "ListOpenIDConnectProviders",
                   "ListAccountAliases"}
# A create that carries tags also needs the service's tag action on the new object.
TAG_ON_CREATE = {"CreateRole": "iam:TagRole", "CreatePolicy": "iam:TagPolicy",
                 "CreateInstanceProfile": "iam:TagInstanceProfile"}
EC2_ID_KINDS = {"subnet": "subnet", "sg": "security-group", "vpc": "vpc", "rtb": "route-table", "i": "instance",
                "lt": "launch-template", "eni": "network-interface", "vpce": "vpc-endpoint", "igw": "internet-gateway",
                "nat": "natgateway", "ami": "image", "vol": "volume"}
# EKS operations on the cluster itself (the Service Authorization Reference's `cluster`).
EKS_CLUSTER_OPS = {"DescribeCluster", "DeleteCluster", "UpdateClusterConfig", "ListUpdates", "DescribeUpdate",
                   "ListAccessEntries", "CreateAccessEntry", "ListPodIdentityAssociations",
                   "CreatePodIdentityAssociation", "ListAddons", "CreateAddon", "ListNodegroups", "CreateNodegroup",
                   "ListFargateProfiles", "CreateFargateProfile"}


class BadPolicy(ValueError):
    pass


# ------------------------------------------------------------------ the policy

def _list(v) -> list:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def statements_of(value) -> list[dict]:
    """The statements of a policy rule value (a document, {"parts": [...]}, or a list of
    documents), checked; raises BadPolicy naming what is wrong."""
    if isinstance(value, dict) and "parts" in value:
        docs = value["parts"]
    elif isinstance(value, list):
        docs = value
    else:
        docs = [value]
    if not isinstance(docs, list) or not docs:
        raise BadPolicy("caller_policy: parts must be a non-empty list of policy documents")
    out = []
    for d in docs:
        if not isinstance(d, dict) or "Statement" not in d:
            raise BadPolicy(f"caller_policy: a policy document needs Statement (got {str(d)[:120]!r})")
        for s in _list(d["Statement"]):
            if not isinstance(s, dict) or s.get("Effect") not in ("Allow", "Deny"):
                raise BadPolicy(f"caller_policy: a statement needs Effect Allow or Deny (got {str(s)[:120]!r})")
            if ("Action" in s) == ("NotAction" in s) or ("Resource" in s) == ("NotResource" in s):
                raise BadPolicy(f"caller_policy: statement {s.get('Sid', '?')} needs Action (or NotAction) and "
                                "Resource (or NotResource)")
            cond = s.get("Condition") or {}
            if not isinstance(cond, dict) or not all(isinstance(v, dict) for v in cond.values()):
                raise BadPolicy(f"caller_policy: statement {s.get('Sid', '?')}: Condition must be "
                                "{operator: {key: value(s)}}")
            for op in cond:
                base = op.split(":", 1)[-1].removesuffix("IfExists")
                if base not in OPERATORS:
                    raise BadPolicy(f"caller_policy: statement {s.get('Sid', '?')}: condition operator {op!r} "
                                    f"is not evaluated here (known: {', '.join(sorted(OPERATORS))})")
            out.append(s)
    return out


def wildcard(pattern: str, value: str, fold: bool = False) -> bool:
    """IAM's matching: `*` any run of characters, `?` one character, nothing else special."""
    if fold:
        pattern, value = pattern.lower(), value.lower()
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.DOTALL) is not None


def _str_eq(p, v, fold=False):
    return (p.lower() == v.lower()) if fold else p == v


OPERATORS = {
    "StringEquals": lambda p, v: _str_eq(p, v),
    "StringNotEquals": lambda p, v: _str_eq(p, v),
    "StringEqualsIgnoreCase": lambda p, v: _str_eq(p, v, True),
    "StringNotEqualsIgnoreCase": lambda p, v: _str_eq(p, v, True),
    "StringLike": lambda p, v: wildcard(p, v),
    "StringNotLike": lambda p, v: wildcard(p, v),
    "ArnEquals": lambda p, v: wildcard(p, v),
    "ArnLike": lambda p, v: wildcard(p, v),
    "ArnNotEquals": lambda p, v: wildcard(p, v),
    "ArnNotLike": lambda p, v: wildcard(p, v),
    "Bool": lambda p, v: p.lower() == v.lower(),
    "Null": None,
}


def condition_holds(op: str, key: str, wanted, context: dict) -> bool:
    """One condition operator on one key, as IAM evaluates it (keys case-insensitive; a
    single-valued key missing: a positive operator fails, a negated one holds, ...IfExists
    holds; ForAllValues holds on a missing or empty key, ForAnyValue fails)."""
    ctx = {k.lower(): v for k, v in context.items()}
    present = key.lower() in ctx
    values = [str(x) for x in _list(ctx.get(key.lower()))]
    wanted = [str(w).lower() if isinstance(w, bool) else str(w) for w in _list(wanted)]
    qualifier, _, base = op.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base == "Null":
        return (not present) == (wanted[0].lower() == "true")
    negated = "Not" in base
    match = OPERATORS[base]

    def one(v):
        hit = any(match(w, v) for w in wanted)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in values)
    if qualifier == "ForAnyValue":
        return any(one(v) for v in values)
    if not present:
        return if_exists or negated
    return any(one(v) for v in values)


def statement_applies(s: dict, action: str, resource: str, context: dict) -> bool:
    if "Action" in s:
        if not any(wildcard(a, action, fold=True) for a in _list(s["Action"])):
            return False
    elif any(wildcard(a, action, fold=True) for a in _list(s["NotAction"])):
        return False
    if "Resource" in s:
        if not any(wildcard(r, resource) for r in _list(s["Resource"])):
            return False
    elif any(wildcard(r, resource) for r in _list(s["NotResource"])):
        return False
    for op, keys in (s.get("Condition") or {}).items():
        for key, wanted in keys.items():
            if not condition_holds(op, key, wanted, context):
                return False
    return True


def decide(stmts: list[dict], action: str, resource: str, context: dict) -> str:
    """"allow" (some Allow statement applies, no Deny), "deny" (a Deny applies) or "implicit"."""
    hits = [s for s in stmts if statement_applies(s, action, resource, context)]
    if any(s["Effect"] == "Deny" for s in hits):
        return "deny"
    return "allow" if any(s["Effect"] == "Allow" for s in hits) else "implicit"


def allowed(stmts: list[dict], action: str, resource: str, context: dict) -> bool:
    """Allowed by some Allow statement and denied by no Deny statement."""
    return decide(stmts, action, resource, context) == "allow"


# ------------------------------------------------------------------ requests -> needs

class Need:
    """One authorization a request needs: action on resource with its context keys."""

    def __init__(self, action: str, resource: str, context: dict | None = None):
        self.action, self.resource, self.context = action, resource, dict(context or {})

    def __repr__(self):
        return f"Need({self.action}, {self.resource}, {self.context})"


def tag_context(pairs: list[tuple[str, str]], keys_only: list[str] | None = None) -> dict:
    """aws:TagKeys and aws:RequestTag/<key> of the tags a request sets (or only keys it removes)."""
    ctx: dict = {}
    if keys_only is not None:
        if keys_only:
            ctx["aws:TagKeys"] = list(keys_only)
        return ctx
    if pairs:
        ctx["aws:TagKeys"] = [k for k, _ in pairs]
        for k, v in pairs:
            ctx[f"aws:RequestTag/{k}"] = v
    return ctx


def form_members(form: dict, prefix: str, fields: tuple[str, ...] = ()) -> list:
    """Query-protocol lists: `<prefix>.member.N` (or `<prefix>.N`) values, or with fields the
    tuples of `<prefix>.member.N.<field>`."""
    out = []
    for n in range(1, 1000):
        if fields:
            row = None
            for base in (f"{prefix}.member.{n}", f"{prefix}.{n}"):
                if any(f"{base}.{f}" in form for f in fields):
                    row = tuple(form.get(f"{base}.{f}", "") for f in fields)
                    break
            if row is None:
                break
            out.append(row)
        else:
            v = form.get(f"{prefix}.member.{n}", form.get(f"{prefix}.{n}"))
            if v is None:
                break
            out.append(v)
    return out


class Gate:
    """What the proxy learned about names and ARNs, and the decisions it made."""

    def __init__(self):
        self.lock = threading.RLock()
        self.account: str | None = None
        self.partition: str | None = None
        # kind ("role", "instance-profile", "policy", "user", "group") -> name -> path
        self.paths: dict[str, dict[str, str]] = {}
        # EKS ARNs with ids AWS adds: (cluster, kind, name) -> ARN
        self.eks_arns: dict[tuple[str, str, str], str] = {}
        self.log: list[dict] = []

    def reset(self) -> None:
        with self.lock:
            self.paths.clear()
            self.eks_arns.clear()
            self.log.clear()
            self.account = self.partition = None

    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    def decisions(self) -> list[dict]:
        with self.lock:
            return list(self.log)

    # ------------------------------------------------------------- learning

    def observe(self, req, status: int, body: bytes) -> None:
        """Learn names, paths and ids from a request that went through and its answer."""
        if not 200 <= status < 300:
            return
        try:
            self._observe(req, body)
        except (ValueError, TypeError, AttributeError, KeyError):
            pass  # an answer of a shape not expected here teaches nothing; it still goes out

    def _observe(self, req, body: bytes) -> None:
        text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body or "")
        with self.lock:
            if req.service == "sts" and req.operation == "GetCallerIdentity":
                m = re.search(r"<Arn>arn:([^:<]+):[^:<]*::(\d{12}):", text)
                if m:
                    self.partition, self.account = m.group(1), m.group(2)
            if req.service == "iam":
                for p, a, kind, path, name in IAM_ARN_RE.findall(text):
                    self.paths.setdefault(kind, {})[name] = path
                    self.account = self.account or a
                    self.partition = self.partition or p
                op, f = req.operation, req.form
                made = {"CreateRole": ("role", "RoleName"), "CreateInstanceProfile": ("instance-profile",
                                                                                      "InstanceProfileName"),
                        "CreatePolicy": ("policy", "PolicyName")}
                gone = {"DeleteRole": ("role", "RoleName"), "DeleteInstanceProfile": ("instance-profile",
                                                                                      "InstanceProfileName")}
                if op in made and f.get(made[op][1]):
                    self.paths.setdefault(made[op][0], {})[f[made[op][1]]] = f.get("Path") or "/"
                if op in gone and f.get(gone[op][1]):
                    self.paths.get(gone[op][0], {}).pop(f[gone[op][1]], None)
            if req.service == "eks":
                doc = json.loads(text or "{}")
                for obj in (doc.get("accessEntry"), doc.get("addon"), doc.get("nodegroup")):
                    if isinstance(obj, dict):
                        self._learn_eks(obj)

    def _learn_eks(self, obj: dict) -> None:
        c = obj.get("clusterName")
        if obj.get("accessEntryArn") and obj.get("principalArn"):
            self.eks_arns[(c, "access-entry", obj["principalArn"])] = obj["accessEntryArn"]
        if obj.get("addonArn") and obj.get("addonName"):
            self.eks_arns[(c, "addon", obj["addonName"])] = obj["addonArn"]
        if obj.get("nodegroupArn") and obj.get("nodegroupName"):
            self.eks_arns[(c, "nodegroup", obj["nodegroupName"])] = obj["nodegroupArn"]

    # ------------------------------------------------------------- resolving

    def acct(self, req) -> tuple[str, str, str]:
        """(partition, account, region) of a request."""
        with self.lock:
            return self.partition or "aws", self.account or DEFAULT_ACCOUNT, req.region()

    def iam_arn(self, req, upstream, kind: str, name: str, path: str | None = None) -> str:
        """The ARN of an IAM object by name: with the path given, learned, or read upstream."""
        p, a, _ = self.acct(req)
        if path is None:
            with self.lock:
                path = self.paths.get(kind, {}).get(name)
        if path is None and kind in ("role", "instance-profile"):
            op, param = ("GetRole", "RoleName") if kind == "role" else ("GetInstanceProfile", "InstanceProfileName")
            q = urllib.parse.urlencode({"Action": op, "Version": "2010-05-08", param: name})
            status, _, body = upstream.forward(req, _form_headers(req), q.encode())
            if 200 <= status < 300:
                self.observe_iam_answer(body)
                with self.lock:
                    path = self.paths.get(kind, {}).get(name)
        return f"arn:{p}:iam::{a}:{kind}{path or '/'}{name}"

    def observe_iam_answer(self, body: bytes) -> None:
        text = body.decode("utf-8", "replace")
        with self.lock:
            for _p, _a, kind, path, name in IAM_ARN_RE.findall(text):
                self.paths.setdefault(kind, {})[name] = path

    def needs(self, req, upstream) -> list[Need] | None:
        """What `req` needs allowed; None: nothing (sts:GetCallerIdentity)."""
        svc, op = req.service, req.operation
        p, a, r = self.acct(req)
        if svc == "sts":
            return None if op == "GetCallerIdentity" else [Need(f"sts:{op}", "*")]
        if svc == "iam":
            return self.iam_needs(req, upstream)
        if svc == "eks":
            return self.eks_needs(req, upstream)
        if svc == "sqs":
            j = req.json or {}
            url = j.get("QueueUrl") or req.form.get("QueueUrl")
            name = j.get("QueueName") or req.form.get("QueueName")
            acct = a
            if url:
                parts = urllib.parse.urlsplit(url).path.strip("/").split("/")
                name = parts[-1]
                if len(parts) >= 2 and re.fullmatch(r"\d{12}", parts[-2]):
                    acct = parts[-2]
            if op == "ListQueues" or not name:
                return [Need(f"sqs:{op}", "*")]
            arn = f"arn:{p}:sqs:{r}:{acct}:{name}"
            tags = j.get("Tags") or j.get("tags") or {}
            if op == "UntagQueue":
                return [Need("sqs:UntagQueue", arn, tag_context([], list(j.get("TagKeys") or [])))]
            ctx = tag_context(list(tags.items())) if isinstance(tags, dict) else {}
            out = [Need(f"sqs:{op}", arn, ctx)]
            if op == "CreateQueue" and tags:
                out.append(Need("sqs:TagQueue", arn, ctx))
            return out
        if svc == "events":
            j = req.json or {}
            if op in ("TagResource", "UntagResource", "ListTagsForResource"):
                ctx = {}
                if op == "TagResource":
                    ctx = tag_context([(t.get("Key"), t.get("Value")) for t in j.get("Tags") or []])
                if op == "UntagResource":
                    ctx = tag_context([], list(j.get("TagKeys") or []))
                return [Need(f"events:{op}", j.get("ResourceARN") or "*", ctx)]
            name = j.get("Name") if op in ("PutRule", "DescribeRule", "DeleteRule", "EnableRule",
                                             "DisableRule") else j.get("Rule")
            if not name or op in ("ListRules", "ListRuleNamesByTarget"):
                return [Need(f"events:{op}", "*")]
            bus = j.get("EventBusName") or "default"
            if bus.startswith("arn:"):
                bus = bus.rsplit("/", 1)[-1]
            arn = f"arn:{p}:events:{r}:{a}:rule/{name}" if bus == "default" else f"arn:{p}:events:{r}:{a}:rule/{bus}/{name}"
            ctx = tag_context([(t.get("Key"), t.get("Value")) for t in j.get("Tags") or []]) if op == "PutRule" else {}
            return [Need(f"events:{op}", arn, ctx)]
        if svc == "ec2":
            return self.ec2_needs(req, upstream)
        if svc == "kms":
            return self.kms_needs(req, upstream)
        if svc == "servicequotas":
            j = req.json or {}
            code, quota = j.get("ServiceCode"), j.get("QuotaCode")
            if code and quota:
                return [Need(f"servicequotas:{op}", f"arn:{p}:servicequotas:{r}:{a}:{code}/{quota}")]
            if code:
                return [Need(f"servicequotas:{op}", f"arn:{p}:servicequotas:{r}:{a}:{code}/*")]
            return [Need(f"servicequotas:{op}", "*")]
        if svc == "monitoring":
            return [Need(f"cloudwatch:{op}", "*")]
        return [Need(f"{svc}:{op}", "*")]

    def iam_needs(self, req, upstream) -> list[Need]:
        op, f = req.operation, req.form
        p, a, _ = self.acct(req)
        act = f"iam:{op}"
        ctx: dict = {}
        if f.get("PolicyArn") and op in ("AttachRolePolicy", "DetachRolePolicy", "DetachGroupPolicy",
                                         "DetachUserPolicy", "AttachGroupPolicy", "AttachUserPolicy",
                                         "PutRolePermissionsBoundary"):
            ctx["iam:PolicyARN"] = f["PolicyArn"]
        if f.get("PermissionsBoundary") and op == "PutRolePermissionsBoundary":
            ctx["iam:PermissionsBoundary"] = f["PermissionsBoundary"]
        tags = form_members(f, "Tags", ("Key", "Value"))
        if op.startswith("Untag"):
            ctx.update(tag_context([], form_members(f, "TagKeys")))
        elif tags:
            ctx.update(tag_context(tags))
        if op in IAM_NO_RESOURCE:
            return [Need(act, "*")]
        if op in IAM_ROLE_OPS and f.get("RoleName"):
            path = (f.get("Path") or "/") if op == "CreateRole" else None
            arn = self.iam_arn(req, upstream, "role", f["RoleName"], path)
        elif op in IAM_POLICY_OPS and f.get("PolicyArn"):
            arn = f["PolicyArn"]
        elif op == "CreatePolicy":
            arn = f"arn:{p}:iam::{a}:policy{f.get('Path') or '/'}{f.get('PolicyName', '')}"
        elif op in IAM_PROFILE_OPS and f.get("InstanceProfileName"):
            path = (f.get("Path") or "/") if op == "CreateInstanceProfile" else None
            arn = self.iam_arn(req, upstream, "instance-profile", f["InstanceProfileName"], path)
        elif op == "ListInstanceProfiles":
            arn = f"arn:{p}:iam::{a}:instance-profile{f.get('PathPrefix') or '/'}"
        elif op == "CreateServiceLinkedRole":
            svc = f.get("AWSServiceName", "")
            ctx["iam:AWSServiceName"] = svc
            name = {"spot.amazonaws.com": "AWSServiceRoleForEC2Spot"}.get(svc, f"AWSServiceRoleFor{svc.split('.')[0]}")
            arn = f"arn:{p}:iam::{a}:role/aws-service-role/{svc}/{name}"
        elif op in ("DetachGroupPolicy", "AttachGroupPolicy") and f.get("GroupName"):
            arn = self.iam_arn(req, upstream, "group", f["GroupName"])
        elif op in ("DetachUserPolicy", "AttachUserPolicy") and f.get("UserName"):
            arn = self.iam_arn(req, upstream, "user", f["UserName"])
        elif op in ("SimulatePrincipalPolicy", "GetContextKeysForPrincipalPolicy"):
            arn = f.get("PolicySourceArn") or "*"
        elif op in ("GetOpenIDConnectProvider", "DeleteOpenIDConnectProvider"):
            arn = f.get("OpenIDConnectProviderArn") or "*"
        else:
            arn = "*"
        out = [Need(act, arn, ctx)]
        if op in TAG_ON_CREATE and tags:
            out.append(Need(TAG_ON_CREATE[op], arn, tag_context(tags)))
        if op == "AddRoleToInstanceProfile" and f.get("RoleName"):
            role = self.iam_arn(req, upstream, "role", f["RoleName"])
            out.append(Need("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"}))
        return out

    def eks_needs(self, req, upstream) -> list[Need]:
        op, j = req.operation, req.json or {}
        p, a, r = self.acct(req)
        parts = [urllib.parse.unquote(x) for x in req.path.strip("/").split("/")]
        act = f"eks:{op}"
        if parts[0] == "tags" and len(parts) >= 2:
            arn = urllib.parse.unquote("/".join(parts[1:]))
            ctx = {}
            if op == "TagResource":
                ctx = tag_context(list((j.get("tags") or {}).items()))
            elif op == "UntagResource":
                ctx = tag_context([], [v for k, v in urllib.parse.parse_qsl(req.query) if k == "tagKeys"])
            return [Need(act, arn, ctx)]
        if parts[0] != "clusters" or len(parts) < 2:
            return [Need(act, "*")]
        c = parts[1]
        cluster = f"arn:{p}:eks:{r}:{a}:cluster/{c}"
        ctx = tag_context(list((j.get("tags") or {}).items())) if op.startswith("Create") else {}
        if len(parts) <= 3 or op in EKS_CLUSTER_OPS:
            out = [Need(act, cluster, ctx)]
            if op == "CreatePodIdentityAssociation" and j.get("roleArn"):
                out.append(Need("iam:PassRole", j["roleArn"], {"iam:PassedToService": "pods.eks.amazonaws.com"}))
            return out
        sub, ident = parts[2], parts[3]
        if sub == "access-entries":
            arn = self.eks_arns.get((c, "access-entry", ident))
            if not arn:
                m = re.match(r"arn:[^:]+:(?:iam|sts)::(\d{12}):(role|user|assumed-role)/(?:.*/)?([^/]+)$", ident)
                kind, acct, name = (m.group(2), m.group(1), m.group(3)) if m else ("role", a, ident)
                arn = f"arn:{p}:eks:{r}:{a}:access-entry/{c}/{kind}/{acct}/{name}/{uuid.uuid5(uuid.NAMESPACE_URL, ident)}"
        elif sub == "pod-identity-associations":
            arn = f"arn:{p}:eks:{r}:{a}:podidentityassociation/{c}/{ident}"
            if op == "UpdatePodIdentityAssociation" and j.get("roleArn"):
                return [Need(act, arn), Need("iam:PassRole", j["roleArn"],
                                             {"iam:PassedToService": "pods.eks.amazonaws.com"})]
        elif sub in ("addons", "node-groups"):
            kind = "addon" if sub == "addons" else "nodegroup"
            arn = self.eks_arns.get((c, kind, ident)) or (
                f"arn:{p}:eks:{r}:{a}:{kind}/{c}/{ident}/{uuid.uuid5(uuid.NAMESPACE_URL, c + ident)}")
        elif sub == "fargate-profiles":
            arn = f"arn:{p}:eks:{r}:{a}:fargateprofile/{c}/{ident}/*"
        else:
            arn = cluster
        return [Need(act, arn)]

    def ec2_needs(self, req, upstream) -> list[Need]:
        op, f = req.operation, req.form
        p, a, r = self.acct(req)
        if op.startswith("Describe") or op not in ("CreateTags", "DeleteTags"):
            return [Need(f"ec2:{op}", "*")]
        ids = form_members(f, "ResourceId")
        tags = form_members(f, "Tag", ("Key", "Value"))
        keys = [k for k, _ in tags]
        ctx = {"aws:TagKeys": keys} if keys else {}
        for n, (k, v) in enumerate(tags, 1):
            # DeleteTags may name a key alone (any value): then no request tag for it.
            if op == "CreateTags" or f"Tag.{n}.Value" in f:
                ctx[f"aws:RequestTag/{k}"] = v
        out = []
        for rid in ids:
            kind = EC2_ID_KINDS.get(rid.split("-", 1)[0], rid.split("-", 1)[0])
            arn = f"arn:{p}:ec2:{r}:{a}:{kind}/{rid}"
            rctx = dict(ctx)
            for k, v in self.ec2_tags(req, upstream, rid).items():
                rctx[f"aws:ResourceTag/{k}"] = v
            out.append(Need(f"ec2:{op}", arn, rctx))
        return out or [Need(f"ec2:{op}", "*", ctx)]

    def ec2_tags(self, req, upstream, rid: str) -> dict:
        """The tags of an EC2 resource now (DescribeTags upstream)."""
        q = urllib.parse.urlencode({"Action": "DescribeTags", "Version": "2016-11-15",
                                    "Filter.1.Name": "resource-id", "Filter.1.Value.1": rid})
        status, _, body = upstream.forward(req, _form_headers(req), q.encode())
        if not 200 <= status < 300:
            return {}
        text = body.decode("utf-8", "replace")
        out = {}
        for item in re.findall(r"<item>(.*?)</item>", text, re.DOTALL):
            k = re.search(r"<key>(.*?)</key>", item, re.DOTALL)
            v = re.search(r"<value>(.*?)</value>", item, re.DOTALL)
            if k:
                out[_xml_text(k.group(1))] = _xml_text(v.group(1)) if v else ""
        return out

    def kms_needs(self, req, upstream) -> list[Need]:
        op, j = req.operation, req.json or {}
        p, a, r = self.acct(req)
        act = f"kms:{op}"
        if op == "CreateKey":
            tags = [(t.get("TagKey"), t.get("TagValue")) for t in j.get("Tags") or []]
            return [Need(act, "*", tag_context(tags))]
        if op in ("ListKeys", "ListAliases") and not j.get("KeyId"):
            return [Need(act, "*")]
        out = []
        if op in ("CreateAlias", "DeleteAlias", "UpdateAlias") and j.get("AliasName"):
            out.append(Need(act, f"arn:{p}:kms:{r}:{a}:{j['AliasName']}"))
        ref = j.get("TargetKeyId") or j.get("KeyId") or (j.get("AliasName") if op == "DeleteAlias" else None)
        key = self.kms_key(req, upstream, ref) if ref else None
        if key:
            ctx = {f"aws:ResourceTag/{k}": v for k, v in self.kms_tags(req, upstream, key).items()}
            if op == "TagResource":
                ctx.update(tag_context([(t.get("TagKey"), t.get("TagValue")) for t in j.get("Tags") or []]))
            if op == "UntagResource":
                ctx.update(tag_context([], list(j.get("TagKeys") or [])))
            out.append(Need(act, f"arn:{p}:kms:{r}:{a}:key/{key}", ctx))
        # An alias that names no key: KMS answers NotFoundException to whoever may ask.
        return out

    def kms_key(self, req, upstream, ref: str) -> str | None:
        """The key id a KeyId (id, key ARN, alias name or alias ARN) names, or None."""
        if ":key/" in ref:
            return ref.split(":key/", 1)[1]
        if not ref.startswith("alias/") and ":alias/" not in ref:
            return ref
        status, doc = upstream.json_call(req, "TrentService.DescribeKey", {"KeyId": ref})
        meta = doc.get("KeyMetadata") or {}
        return meta.get("KeyId") if status == 200 else None

    def kms_tags(self, req, upstream, key: str) -> dict:
        status, doc = upstream.json_call(req, "TrentService.ListResourceTags", {"KeyId": key})
        if status != 200:
            return {}
        return {t.get("TagKey"): t.get("TagValue") for t in doc.get("Tags") or [] if isinstance(t, dict)}

    # ------------------------------------------------------------- the gate

    def check(self, req, stmts: list[dict], upstream):
        """None when `req` may go on, else AWS's refusal (status, headers, body). `upstream` is the
        proxy (its `forward` and `json_call`), for the reads a decision needs."""
        needs = self.needs(req, upstream)
        if needs is None:
            return None
        for n in needs:
            decision = decide(stmts, n.action, n.resource, n.context)
            ok = decision == "allow"
            sids = [s.get("Sid", "") for s in stmts
                    if s["Effect"] == "Allow" and statement_applies(s, n.action, n.resource, n.context)]
            with self.lock:
                self.log.append({"operation": req.operation, "action": n.action, "resource": n.resource,
                                 "allowed": ok, "sids": sids})
            if not ok:
                return refusal(req, n, self.acct(req), explicit=decision == "deny")
        return None


def _form_headers(req) -> list:
    return [(k, "application/x-www-form-urlencoded; charset=utf-8") if k.lower() == "content-type" else (k, v)
            for k, v in req.headers]


def _xml_text(s: str) -> str:
    import html
    return html.unescape(s)


# ------------------------------------------------------------------ refusals

def message(need: Need, acct: tuple[str, str, str], explicit: bool = False) -> str:
    p, a, _ = acct
    who = PRINCIPAL.format(p=p, a=a)
    why = ("with an explicit deny in an identity-based policy" if explicit
           else f"because no identity-based policy allows the {need.action} action")
    return f"User: {who} is not authorized to perform: {need.action} on resource: {need.resource} {why}"


def refusal(req, need: Need, acct, explicit: bool = False) -> tuple[int, list, bytes]:
    """AWS's refusal of `req` for the service it went to."""
    import html
    msg = message(need, acct, explicit)
    rid = str(uuid.uuid4())
    svc = req.service
    if svc in ("iam", "sts"):
        body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{html.escape(msg)}"
                f"</Message></Error><RequestId>{rid}</RequestId></ErrorResponse>")
        return 403, [("Content-Type", "text/xml")], body.encode()
    if svc == "ec2":
        text = f"You are not authorized to perform this operation. {msg}. Encoded authorization failure message: {rid}"
        body = (f"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>{html.escape(text)}</Message>"
                f"</Error></Errors><RequestID>{rid}</RequestID></Response>")
        return 403, [("Content-Type", "text/xml")], body.encode()
    if svc == "eks":
        return 403, [("Content-Type", "application/json"), ("x-amzn-RequestId", rid),
                     ("x-amzn-ErrorType", "AccessDeniedException")], json.dumps({"message": msg}).encode()
    if svc == "sqs":
        body = json.dumps({"__type": "com.amazon.coral.service#AccessDeniedException", "message": msg}).encode()
        return 403, [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-RequestId", rid),
                     ("x-amzn-query-error", "AccessDenied;Sender")], body
    if svc == "monitoring":
        return _cbor_refusal(msg, rid)
    body = json.dumps({"__type": "AccessDeniedException", "message": msg}).encode()
    return 400, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", rid)], body


def _cbor_refusal(msg: str, rid: str) -> tuple[int, list, bytes]:
    def text(s: str) -> bytes:
        b = s.encode()
        n = len(b)
        head = bytes([0x60 | n]) if n < 24 else (bytes([0x78, n]) if n < 256 else bytes([0x79]) + n.to_bytes(2, "big"))
        return head + b
    body = bytes([0xA2]) + text("__type") + text("com.amazonaws.cloudwatch#AccessDenied") + text("message") + text(msg)
    return 403, [("Content-Type", "application/cbor"), ("smithy-protocol", "rpc-v2-cbor"), ("x-amzn-RequestId", rid),
                 ("x-amzn-query-error", "AccessDenied;Sender")], body
