"""CloudTrail: cloudtrail_events and cloudtrail_lookup_rps, LookupEvents answered by the proxy
from scripted records (neither emulator keeps them)."""

from __future__ import annotations

import json
import re
import time
import uuid

from .cbor import epoch_of
from .wire import BadRules, Req, json_error, page_offset, page_token

# CloudTrail LookupEvents: at most 50 events a page; two lookups a second per account and Region.
CLOUDTRAIL_PAGE = 50


CLOUDTRAIL_LOOKUPS_PER_S = 2.0


LOOKUP_KEYS = ("EventId", "EventName", "ReadOnly", "Username", "ResourceType", "ResourceName", "EventSource",
               "AccessKeyId")


DEFAULT_AGENT = ("aws-sdk-go-v2/1.36.3 ua/2.1 os/linux lang/go#1.24.4 md/GOOS#linux md/GOARCH#amd64 "
                 "api/{svc}#1.0.0 m/E,g")


def iso_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def resource_type_of(arn: str) -> str:
    """The CloudTrail ResourceType of an ARN: arn:aws:ec2:r:a:launch-template/lt-1 ->
    AWS::EC2::LaunchTemplate."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return "AWS::Unknown"
    kind = re.split(r"[/:]", parts[5], maxsplit=1)[0]
    return f"AWS::{parts[2].upper()}::" + "".join(w[:1].upper() + w[1:] for w in kind.split("-"))


def expand_record(e: dict, now: float) -> dict:
    """One CloudTrail event as LookupEvents answers it, from a compact scripted entry (see the
    header: role/user, event, source, agent, minutes_ago, error_code, error_message, resource,
    session, region, read_only, request_parameters) or taken as it is when it already has
    AWS's shape (a CloudTrailEvent, as a JSON string or an object)."""
    if "CloudTrailEvent" in e:
        out = dict(e)
        if not isinstance(out["CloudTrailEvent"], str):
            out["CloudTrailEvent"] = json.dumps(out["CloudTrailEvent"])
        out.setdefault("EventId", str(uuid.uuid4()))
        if isinstance(out.get("EventTime"), str):
            out["EventTime"] = time.mktime(time.strptime(out["EventTime"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        out.setdefault("EventTime", now)
        return out
    for key in ("event", "source"):
        if not isinstance(e.get(key), str):
            raise BadRules(f"cloudtrail_events: each entry needs {key!r} (got {e!r})")
    source, name = e["source"], e["event"]
    t = now - float(e.get("minutes_ago", 0)) * 60.0
    caller = e.get("role") or e.get("user") or ""
    region = e.get("region") or home_region(source, caller)
    event_id = e.get("id") or str(uuid.uuid4())
    if isinstance(e.get("role"), str):
        role_arn = e["role"]
        m = re.fullmatch(r"arn:([^:]+):iam::(\d{12}):role/(?:.*/)?([^/]+)", role_arn)
        if not m:
            raise BadRules(f"cloudtrail_events: role must be a role ARN (got {role_arn!r})")
        partition, account, role = m.groups()
        web = web_identity_of(e)
        session = e.get("session", web["session"] if web else "eks-cluster-karpenter-" + event_id[:8])
        principal = "AROA" + account + "EXAMPLE"
        identity = {
            "type": "AssumedRole", "principalId": f"{principal}:{session}",
            "arn": f"arn:{partition}:sts::{account}:assumed-role/{role}/{session}", "accountId": account,
            "accessKeyId": "ASIA" + event_id.replace("-", "")[:16].upper(),
            "sessionContext": {
                "sessionIssuer": {"type": "Role", "principalId": principal, "arn": role_arn, "accountId": account,
                                  "userName": role},
                "attributes": {"creationDate": iso_time(t - 600), "mfaAuthenticated": "false"},
                "webIdFederationData": web["data"] if web else {},
            },
        }
        username = session
    elif isinstance(e.get("user"), str):
        m = re.fullmatch(r"arn:([^:]+):iam::(\d{12}):user/(?:.*/)?([^/]+)", e["user"])
        if not m:
            raise BadRules(f"cloudtrail_events: user must be a user ARN (got {e['user']!r})")
        account, username = m.group(2), m.group(3)
        identity = {"type": "IAMUser", "principalId": "AIDA" + account + "EXAMPLE", "arn": e["user"],
                    "accountId": account, "accessKeyId": "AKIA" + event_id.replace("-", "")[:16].upper(),
                    "userName": username}
    else:
        raise BadRules(f"cloudtrail_events: each entry needs 'role' (a role ARN) or 'user' (got {e!r})")
    svc = source.split(".", 1)[0]
    agent = e.get("agent") or DEFAULT_AGENT.format(svc=svc)
    if re.fullmatch(r"karpenter\.sh-\S+", agent):
        agent = DEFAULT_AGENT.format(svc=svc) + " " + agent
    read_only = e.get("read_only", name.startswith(("Describe", "Get", "List")))
    record = {
        "eventVersion": "1.11", "userIdentity": identity, "eventTime": iso_time(t), "eventSource": source,
        "eventName": name, "awsRegion": region, "sourceIPAddress": "10.0.12.34", "userAgent": agent,
        "requestParameters": e.get("request_parameters"), "responseElements": None,
        "requestID": str(uuid.uuid4()), "eventID": event_id, "readOnly": bool(read_only),
        "eventType": "AwsApiCall", "managementEvent": True, "recipientAccountId": identity["accountId"],
        "eventCategory": "Management",
    }
    for key, wire in (("error_code", "errorCode"), ("error_message", "errorMessage")):
        if e.get(key) is not None:
            record[wire] = e[key]
    if e.get("fleet_errors") is not None:
        errs = e["fleet_errors"]
        if not (isinstance(errs, list) and errs and all(isinstance(x, dict) and isinstance(x.get("code"), str)
                                                        for x in errs)):
            raise BadRules("cloudtrail_events: fleet_errors must be a list of {code, message, lifecycle, type, zone, "
                           f"subnet}} (got {errs!r})")
        items = [{"errorCode": x["code"], "errorMessage": x.get("message", x["code"]),
                  "lifecycle": x.get("lifecycle", "on-demand"),
                  "launchTemplateAndOverrides": {
                      "launchTemplateSpecification": {"launchTemplateId": "lt-0123456789abcdef0", "version": "1"},
                      "overrides": {k2: x[k] for k, k2 in (("type", "instanceType"), ("zone", "availabilityZone"),
                                                           ("subnet", "subnetId")) if x.get(k)}}}
                 for x in errs]
        record["responseElements"] = {"CreateFleetResponse": {
            "xmlns": "http://ec2.amazonaws.com/doc/2016-11-15/", "requestId": str(uuid.uuid4()),
            "fleetId": "fleet-" + event_id.replace("-", "")[:17],
            "errorSet": {"item": items[0] if len(items) == 1 else items}}}
    resources = []
    res = e.get("resource")
    if isinstance(res, str):
        resources = [{"ResourceType": resource_type_of(res), "ResourceName": res}]
    elif isinstance(res, dict):
        resources = [{"ResourceType": res.get("type", "AWS::Unknown"), "ResourceName": res.get("name", "")}]
    if resources:
        record["resources"] = [{"ARN": r["ResourceName"], "accountId": identity["accountId"],
                                "type": r["ResourceType"]} for r in resources]
    return {
        "EventId": event_id, "EventName": name, "ReadOnly": "true" if read_only else "false",
        "AccessKeyId": identity["accessKeyId"], "EventTime": t, "EventSource": source, "Username": username,
        "Resources": resources, "CloudTrailEvent": json.dumps(record), "_region": region,
    }


def web_identity_of(e: dict) -> dict | None:
    """A compact entry's "web_identity" (an OIDC provider ARN): the session came from
    AssumeRoleWithWebIdentity (IRSA). CloudTrail then names the provider in the session's
    webIdFederationData; the Go SDK names the session by the time in nanoseconds (no
    AWS_ROLE_SESSION_NAME). None without it."""
    provider = e.get("web_identity")
    if provider is None:
        return None
    if not isinstance(provider, str) or not re.fullmatch(r"arn:[^:]+:iam::\d{12}:oidc-provider/.+", provider):
        raise BadRules(f"cloudtrail_events: web_identity must be an OIDC provider ARN (got {provider!r})")
    return {"data": {"federatedProvider": provider, "attributes": {}}, "session": str(time.time_ns())}


# The Region whose event history keeps a partition's global services (IAM, STS's global endpoint).
GLOBAL_REGIONS = {"aws": "us-east-1", "aws-cn": "cn-north-1", "aws-us-gov": "us-gov-west-1"}


# Other callers of EC2 in a busy account: (role name, event names), the EKS control plane and the
# VPC CNI on every node.
OTHER_CALLERS = (
    ("AWSServiceRoleForAmazonEKS", ("DescribeNetworkInterfaces", "DescribeInstances", "CreateNetworkInterface")),
    ("eks-node-aws-node", ("AssignPrivateIpAddresses", "DescribeNetworkInterfaces", "AttachNetworkInterface",
                           "UnassignPrivateIpAddresses")),
)


def home_region(source: str, caller_arn: str) -> str:
    """The Region whose history keeps a record of `source` by `caller_arn` when none is named."""
    if source.split(".", 1)[0] in ("iam", "sts"):
        m = re.match(r"arn:([^:]+):", caller_arn)
        return GLOBAL_REGIONS.get(m.group(1) if m else "aws", "us-east-1")
    return "us-east-1"


def expand_entries(entries: list, now: float) -> list:
    """Every scripted entry as LookupEvents answers it; an {"others": N, ...} entry becomes N."""
    out = []
    for e in entries:
        if "others" not in e:
            out.append(expand_record(e, now))
            continue
        n, span = e.get("others"), e.get("minutes_ago", [0, 5])
        ok = (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 100000 and isinstance(e.get("source"), str)
              and isinstance(span, list) and len(span) == 2 and all(isinstance(x, (int, float)) for x in span))
        if not ok:
            raise BadRules("cloudtrail_events: an others entry is {\"others\": N, \"source\", \"region\", "
                           f"\"minutes_ago\": [newest, oldest]}} (got {e!r})")
        account = e.get("account", "000000000000")
        for i in range(n):
            role, names = OTHER_CALLERS[i % len(OTHER_CALLERS)]
            ago = span[0] + (span[1] - span[0]) * (i / max(1, n - 1))
            out.append(expand_record({"role": f"arn:aws:iam::{account}:role/{role}", "source": e["source"],
                                      "event": names[(i // len(OTHER_CALLERS)) % len(names)],
                                      "region": e.get("region", "us-east-1"), "minutes_ago": ago,
                                      "agent": "aws-sdk-go-v2/1.36.3 os/linux lang/go#1.24.4 api/ec2#1.211.0",
                                      "session": f"i-{i:017x}"}, now))
    return out


def event_region(ev: dict) -> str:
    """The Region whose history keeps a scripted event (`_region`, else its record's awsRegion)."""
    if ev.get("_region"):
        return ev["_region"]
    try:
        return json.loads(ev["CloudTrailEvent"]).get("awsRegion") or "us-east-1"
    except (ValueError, TypeError, KeyError):
        return "us-east-1"


def lookup_matches(ev: dict, key: str, value: str) -> bool:
    if key in ("ResourceType", "ResourceName"):
        return any(r.get(key) == value for r in ev.get("Resources") or [])
    if key == "ReadOnly":
        return str(ev.get("ReadOnly", "")).lower() == value.lower()
    return ev.get(key) == value


class CloudTrail:
    """The CloudTrail answers of lagproxy.Lag."""

    def handle_cloudtrail(self, req: Req):
        """cloudtrail_events: LookupEvents answered from the scripted records."""
        with self.lock:
            rule = self.rules.get("cloudtrail_events")
            rate = float(self.rules.get("cloudtrail_lookup_rps", CLOUDTRAIL_LOOKUPS_PER_S))
        if rule is None:
            return None
        if rule == "AccessDenied":
            return (*json_error("AccessDeniedException",
                                "User: arn:aws:sts::000000000000:assumed-role/karpctl/session is not authorized to "
                                "perform: cloudtrail:LookupEvents because no identity-based policy allows the "
                                "cloudtrail:LookupEvents action"), "cloudtrail_events")
        # Two lookups a second per account and Region: a bucket of two tokens per Region (the one
        # the request is signed for), refilled at the rate.
        region = req.region()
        now = time.monotonic()
        with self.lock:
            burst = max(1.0, rate)
            b = self.buckets.setdefault(f"cloudtrail:LookupEvents:{region}", {"tokens": burst, "at": now})
            b["tokens"] = min(burst, b["tokens"] + (now - b["at"]) * rate)
            b["at"] = now
            allowed = b["tokens"] >= 1.0
            if allowed:
                b["tokens"] -= 1.0
        if not allowed:
            return (*json_error("ThrottlingException", "Rate exceeded"), "cloudtrail_events")
        j = req.json or {}
        attrs = j.get("LookupAttributes") or []
        if len(attrs) > 1:
            return (*json_error("InvalidLookupAttributesException",
                                "You cannot specify more than one lookup attribute."), "cloudtrail_events")
        for a in attrs:
            if a.get("AttributeKey") not in LOOKUP_KEYS:
                return (*json_error("InvalidLookupAttributesException",
                                    f"Unknown lookup attribute {a.get('AttributeKey')!r}"), "cloudtrail_events")
        limit = j.get("MaxResults", CLOUDTRAIL_PAGE)
        if not isinstance(limit, int) or not 1 <= limit <= CLOUDTRAIL_PAGE:
            return (*json_error("InvalidMaxResultsException", "MaxResults must be between 1 and 50."),
                    "cloudtrail_events")
        offset = page_offset(j.get("NextToken"))
        if offset is None:
            return (*json_error("InvalidNextTokenException", "Invalid NextToken."), "cloudtrail_events")
        start, end = epoch_of(j.get("StartTime")), epoch_of(j.get("EndTime"))
        wall = time.time()
        events = [e for e in rule
                  if event_region(e) == region
                  and (start is None or e["EventTime"] >= start) and (end is None or e["EventTime"] <= end)
                  and e["EventTime"] >= wall - 90 * 86400
                  and all(lookup_matches(e, a["AttributeKey"], str(a.get("AttributeValue", ""))) for a in attrs)]
        events.sort(key=lambda e: e["EventTime"], reverse=True)
        page = [{k: v for k, v in e.items() if not k.startswith("_")} for e in events[offset:offset + limit]]
        doc = {"Events": page}
        if offset + limit < len(events):
            doc["NextToken"] = page_token(offset + limit)
        return (200, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))],
                json.dumps(doc).encode(), "cloudtrail_events")
