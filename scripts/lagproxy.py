#!/usr/bin/env python3
"""lagproxy: an HTTP proxy that emulates AWS behaviours that depend on time.

Neither emulator (ministack, moto) nor microburst (errors and latency only) can
show what real AWS does between a write and the moment it takes effect. This
proxy sits between an AWS SDK client and an upstream (ministack, moto or a
microburst proxy), forwards every request unchanged, and, for the resources a
test names, answers the way AWS does during such a window:

  sqs_attr_lag_s         {queue: N}    after SetQueueAttributes, GetQueueAttributes shows the
                                       attributes that write changed as they were BEFORE it,
                                       for N s (AWS: up to 60 s to propagate)
  sqs_create_lag_s       {queue: N}    for N s after CreateQueue made the queue,
                                       GetQueueAttributes/SetQueueAttributes/ListQueueTags/
                                       TagQueue answer AWS.SimpleQueueService.NonExistentQueue
  sqs_delete_lag_s       {queue: N}    DeleteQueue answers success at once and is sent
                                       upstream N s later; reads still work meanwhile
  eks_cluster_status     {cluster: S}  DescribeCluster shows cluster.status = S
  eks_compute_config     {cluster: {...}} DescribeCluster shows cluster.computeConfig = that
                                       object (EKS Auto Mode: {"enabled": true, ...}), which
                                       ministack 1.5.33 neither stores nor returns
  eks_ip_family          {cluster: F}  DescribeCluster shows cluster.kubernetesNetworkConfig.ipFamily = F
                                       ("ipv6"), which ministack 1.5.33 always answers "ipv4"
  eks_cluster_gone       [cluster]     every EKS request whose path names the cluster answers
                                       404 ResourceNotFoundException
  eks_role_propagation_s {role: N}     for N s after IAM CreateRole/UpdateAssumeRolePolicy of
                                       the role, EKS CreateAccessEntry naming its ARN and
                                       CreatePodIdentityAssociation naming it answer 400
                                       InvalidParameterException
  iam_policy_version_lag_s {policy: N} for N s after a CreatePolicyVersion that sets the
                                       default, GetPolicy of that policy (by name) still shows
                                       the previous DefaultVersionId
  throttle_rps {service: N}           AWS's request-rate throttling: a token bucket per service
                                       (the proxy is one account), N requests a second, a burst
                                       of N; a request with no token is answered as AWS throttles
                                       it: IAM/STS 400 Throttling "Rate exceeded", EC2 503
                                       RequestLimitExceeded, EKS 429 TooManyRequestsException, SQS
                                       400 RequestThrottled, EventBridge and KMS 400
                                       ThrottlingException. Services by signing name: iam, ec2,
                                       eks, sqs, events, sts, kms
  eks_tag_associations {cluster: true}
                                       not a lag: an emulator gap. EKS TagResource/UntagResource
                                       on the cluster's Pod Identity association ARNs (ministack
                                       refuses them, AWS takes them) are kept by the proxy, and
                                       DescribePodIdentityAssociation answers carry those tags
  eks_access_entry_tags {cluster: true}
                                       not a lag: an emulator gap. ministack keeps TagResource's
                                       tags on an access entry ARN (ListTagsForResource shows
                                       them) but DescribeAccessEntry answers the tags given at
                                       create, never updated, and UntagResource drops only some
                                       keys; AWS answers the entry's tags. The proxy keeps
                                       TagResource/UntagResource on the cluster's entry ARNs and
                                       answers DescribeAccessEntry with the emulator's tags
                                       (ListTagsForResource) under the ones it kept
  eks_association_fields {cluster: {field: value}}
                                       not a lag: an emulator gap. DescribePodIdentityAssociation
                                       answers for the cluster's associations carry these fields
                                       (e.g. "ownerArn" of an EKS add-on, which ministack 1.5.33
                                       cannot set; "disableSessionTags", "policy"), over what
                                       the emulator stored
  iam_watch_role {role: true}          not a lag: after every IAM write the proxy forwards, it
                                       reads the role's policies upstream (attached managed
                                       ones' default versions and inline ones) and records the
                                       actions they allow, under GET /_lag/state "iam_watch":
                                       {role: [{"after": operation, "actions": [...]}, ...]}
                                       (a test checks that no write ever took a permission away)
  Replicas that disagree (AWS answers SQS and EKS reads from replicas; for a while after a
  change the first read may show it and the next ones not). A "flipflop" window's FIRST read
  shows the change and every later read in the window shows the old state again, so that
  "shown once" proves nothing and only reads that agree after the window do; the pattern is the
  same for any number of concurrent readers (a strict alternation would let some reader see
  the same answer three times in a row while the window is open):
  sqs_attr_flipflop_s    {queue: N}    after SetQueueAttributes, for N s: GetQueueAttributes
                                       shows the written values on its first read, the values
                                       from before the write on the reads after it
  sqs_create_flipflop_s  {queue: N}    for N s after CreateQueue made the queue: the first
                                       GetQueueAttributes/ListQueueTags/GetQueueUrl finds it,
                                       the ones after answer NonExistentQueue
  sqs_delete_flipflop_s  {queue: N}    DeleteQueue answers success at once and is sent upstream
                                       N s later; meanwhile the first read answers
                                       NonExistentQueue and the reads after find the queue
  sqs_deleted_recently_s {queue: N}    for N s after a DeleteQueue (answered or deferred),
                                       CreateQueue of that name answers 400
                                       AWS.SimpleQueueService.QueueDeletedRecently (AWS: 60 s)
  sqs_tags_lag_s         {queue: N}    for N s after a CreateQueue with tags or a TagQueue,
                                       ListQueueTags answers with no tags at all
  sqs_tag_on_create_unsupported {queue: true} a CreateQueue that carries tags answers 400
                                       AWS.SimpleQueueService.UnsupportedOperation (partitions
                                       where tag-on-create is not offered); untagged creates
                                       and TagQueue work
  eks_delete_flipflop_s  {cluster: N}  DeleteAccessEntry / DeletePodIdentityAssociation answer
                                       success at once and are sent upstream N s later;
                                       meanwhile the first read of the object (Describe*, or a
                                       List* that would list it) finds it gone and the reads
                                       after find it; a Create* of the same principal /
                                       namespace+service account answers 409
                                       ResourceInUseException
  eks_delete_lag_s       {cluster: N}  the same deferred delete, but every read in the window
                                       finds the object gone (404 / left out of List*) while a
                                       Create* of it answers 409 ResourceInUseException
  kms_key_lag_s          {name: N}     KMS is eventually consistent. For N s after a CreateKey of a
                                       key tagged with the value `name` (karpctl tags its key with
                                       the cluster's name): CreateAlias naming the key, EnableKey and
                                       DescribeKey of it (by id or ARN) answer 400 NotFoundException;
                                       then for N s after a CreateAlias of that key, DescribeKey by
                                       the alias answers NotFoundException. For N s after a
                                       CancelKeyDeletion of such a key: EnableKey and CreateAlias
                                       answer 400 KMSInvalidStateException (still pending deletion)
  A full quota (not throttling: AWS answers 400 LimitExceededException, which the SDK's standard
  retry classifier takes for throttling):
  events_rules_full      {rule: true}  the event bus is at its rules quota: PutRule of a rule of
                                       that name that does not exist yet (DescribeRule upstream)
                                       answers 400 LimitExceededException; an update of an
                                       existing rule goes through
  events_targets_full    {rule: true}  the rule is at its targets quota: PutTargets on it answers
                                       400 LimitExceededException
  kms_keys_full          {name: true}  the Region is at its KMS keys quota: CreateKey of a key
                                       tagged with the value `name` answers 400
                                       LimitExceededException
  sts_partition          "aws-cn"      GetCallerIdentity answers with the caller's ARN in that
                                       partition (a proxy of the test's own: not scoped by name)
  iam_account_summary    {key: N}      not a lag: IAM GetAccountSummary answers with these
                                       SummaryMap entries over the upstream's (e.g.
                                       {"AttachedPoliciesPerRoleQuota": 20}: an account whose
                                       quota was raised); "AccessDenied" instead answers 403
                                       AccessDenied (credentials without iam:GetAccountSummary).
                                       Account-wide like sts_partition: not scoped by name
  Records AWS keeps that neither emulator has, answered by the proxy itself (account-wide like
  sts_partition: not scoped by name, except iam_simulate):
  cloudtrail_events      [record, ...] | "AccessDenied"
                                       CloudTrail LookupEvents (awsJson 1.1, signing name
                                       cloudtrail) answered from these records as AWS does: at most
                                       one lookup attribute (EventId, EventName, ReadOnly, Username,
                                       ResourceType, ResourceName, EventSource, AccessKeyId; more is
                                       InvalidLookupAttributesException), StartTime <= EventTime <=
                                       EndTime, the last 90 days, newest first, MaxResults 1-50
                                       (default 50) a page with NextToken, and two lookups a second
                                       (a bucket of two tokens refilled at 2/s; beyond: 400
                                       ThrottlingException). A list replaces the records. A record is
                                       AWS's Event shape (EventId, EventName, EventTime, ...,
                                       CloudTrailEvent as a JSON string or object) or a compact entry
                                       the proxy expands into it: {"role": role ARN (the session
                                       issuer of an AssumedRole identity; or "user": an IAM user ARN),
                                       "event": "CreateFleet", "source": "ec2.amazonaws.com",
                                       "agent": a user agent, or just "karpenter.sh-1.12.3" (appended
                                       to a Go SDK agent), "minutes_ago": 5, "error_code",
                                       "error_message", "resource": an ARN or {type, name},
                                       "session", "region", "read_only", "request_parameters",
                                       "web_identity": an OIDC provider ARN,
                                       "fleet_errors": [{code, message, lifecycle, type, zone,
                                       subnet}] (a CreateFleet that succeeded with launches failed
                                       inside it: responseElements.CreateFleetResponse.errorSet.item,
                                       an object for one entry and a list for several, as XML made
                                       JSON)}. A role's session is EKS Pod Identity's by default
                                       (session name eks-<cluster>-<pod>-<id>, webIdFederationData
                                       {}, as AWS records a session not from web identity); with
                                       "web_identity" it is IRSA's: webIdFederationData names the
                                       provider and the session name is the Go SDK's (digits).
                                       Or {"others": N, "source", "region", "minutes_ago":
                                       [newest, oldest]}: N records of other callers of that source
                                       spread over those minutes (the EKS control plane and the VPC
                                       CNI of nodes: DescribeNetworkInterfaces,
                                       AssignPrivateIpAddresses, ...), as a busy account has.
                                       Each Region keeps its own history: a record's Region is
                                       "region", else the partition's global Region for IAM and STS
                                       (us-east-1, cn-north-1, us-gov-west-1, by the caller ARN's
                                       partition), else us-east-1; a lookup sees the records of the
                                       Region its SigV4 credential scope names, and each Region has
                                       its own two lookups a second.
                                       "AccessDenied": every lookup answers 400 AccessDeniedException.
                                       The call log's LookupEvents calls carry "lookup": {attributes,
                                       start, end, max_results, next_token, region}
  cloudtrail_lookup_rps  N             the lookup rate instead of 2 (the bucket holds max(1, N)), so
                                       a test can make the second lookup throttled for sure; per Region
  servicequotas_quotas   {quota code: N | "AccessDenied"}
                                       Service Quotas GetServiceQuota (awsJson 1.1, signing name
                                       servicequotas) of that quota code answered with Value N (EC2's
                                       vCPU quotas: L-1216C47A On-Demand standard, L-34B43A08 Spot
                                       standard), or 400 AccessDeniedException; other codes go upstream
  cloudwatch_metrics     [series, ...] | "AccessDenied"
                                       CloudWatch GetMetricData (Smithy RPC v2 CBOR, the wire the
                                       Rust SDK uses; signing name monitoring) answered per
                                       MetricStat query from these series: {"namespace": "AWS/SQS",
                                       "metric": "ApproximateAgeOfOldestMessage", "dimensions":
                                       {"QueueName": "q"}, "stat": optional (else any), "points":
                                       [[minutes_ago, value], ...]}; a query gets Id, Label,
                                       Timestamps, Values (points in [StartTime, EndTime), newest
                                       first unless ScanBy TimestampAscending), StatusCode Complete;
                                       a query matching no series gets no points (as AWS for a metric
                                       never sent); math expressions are not computed (no points).
                                       "AccessDenied": 403 AccessDenied. The call log's calls carry
                                       "queries": [{id, metric}]
  iam_simulate           {role: {"decisions": {action: decision}, "context_keys": [...]}}
                                       IAM SimulatePrincipalPolicy / GetContextKeysForPrincipalPolicy
                                       with PolicySourceArn naming the role, answered by the proxy
                                       (moto lacks them; ministack ignores context entries). A
                                       decision per action (exact name, then a pattern such as
                                       "ec2:*", then "*", else "allowed") is "allowed",
                                       "explicitDeny", "implicitDeny", "scp" (explicitDeny,
                                       AllowedByOrganizations false), "boundary" (implicitDeny,
                                       AllowedByPermissionsBoundary false) or {"decision",
                                       "organizations": bool, "boundary": bool, "matched": [policy
                                       ids], "unless": {context key: [patterns]}, "resources":
                                       [patterns]}: with "unless", the denial does not apply when
                                       a ContextEntries value of that key matches a pattern (an SCP
                                       exempting aws:PrincipalArn: a missing key denies, as AWS's
                                       negated operators do); with "resources", it applies only to
                                       ResourceArns matching a pattern ("*", no ResourceArns, does
                                       not: an ARN-scoped statement), else "allowed". One result
                                       per action and ResourceArns entry (else
                                       "*"); MaxItems (default 100) a page with IsTruncated/Marker;
                                       MissingContextValues lists the context_keys no ContextEntries
                                       gave; GetContextKeysForPrincipalPolicy answers context_keys.
                                       "AccessDenied": 403 AccessDenied. The call log's Simulate calls
                                       carry "actions", "resources", "context_entries" [{key,
                                       values, type}] and "marker", and their resource is the role name
  upstreams              {service: URL} send that service (SigV4 signing name) elsewhere,
                                       e.g. {"iam": moto} with EKS on ministack
  ec2_shared_vpc         {vpc: account} not a lag: an emulator gap. The VPC is shared with the
                                       caller through AWS RAM by that (owner) account: EC2
                                       DescribeSubnets and DescribeVpcs answers show it as the
                                       owner of the VPC's subnets and of the VPC, and
                                       DescribeVpcEndpoints answers leave out the VPC's endpoints
                                       (a participant sees none of the owner's). Both emulators
                                       make every object the caller's own
  caller_policy          doc | {"parts": [doc, ...]} | [doc, ...]
                                       not a lag: IAM, which neither emulator evaluates. Every
                                       request is authorized against this identity-based policy
                                       (what `karpctl output --format caller-policy` prints) before
                                       it goes on: its action, its resource ARNs as the Service
                                       Authorization Reference defines them, the condition keys
                                       (scripts/lagpolicy.py); a refused one gets the service's
                                       AccessDenied / AccessDeniedException / UnauthorizedOperation
                                       naming action and resource. Account-wide, not scoped by
                                       name. GET /_lag/state "caller_policy" lists each decision
                                       {operation, action, resource, allowed, sids} since the
                                       rule was last set
  ec2_subnet_dns64       {subnet: true} not a lag: an emulator gap. DescribeSubnets answers show
                                       the subnet with enableDns64 true (NAT64's DNS64), which
                                       neither emulator keeps (ModifySubnetAttribute EnableDns64 is
                                       ignored by both)

Names are exact queue / cluster / role names; "*" in a map matches any name.

Control API (JSON in, JSON out), under /_lag/:
  GET  /_lag/health   {"ok": true, "upstream": URL}
  GET  /_lag/rules    the current rules
  POST /_lag/rules    merge a rules object into the current rules: maps merge per name
                      (a null value removes that name), eks_cluster_gone takes a list
                      (added) or a {cluster: bool} map (false/null removes), a top-level
                      null removes the whole rule. Answers the rules after the merge.
  GET  /_lag/calls    {"calls": [{"service", "operation", "time", "resource", "status",
                      "lag"}...]} every request forwarded or answered, oldest first; an SQS
                      SetQueueAttributes also carries "attributes": {name: value} (what it
                      wrote, e.g. the Policy text a test checks)
  GET  /_lag/state    the open windows (for debugging)
  POST /_lag/reset    clear rules, windows and the call log; queued deletions are sent now

Usage: lagproxy.py --upstream URL [--port N] [--host 127.0.0.1]
Stdlib only (Python >= 3.10).
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import html
import http.client
import json
import re
import signal
import struct
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import lagpolicy

# A kept upstream connection idle this long may have been closed by the upstream's keep-alive
# timeout (hypercorn's and aiohttp's are 75 s): a failure on it is retried once on a new one.
STALE_AFTER_S = 5.0

# Headers that belong to one hop, not to the request: never copied across.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "expect", "content-length",
}

SCOPE_RE = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/,\s]+)/([^/,\s]+)/aws4_request")

SQS_CREATE_LAG_OPS = {"GetQueueAttributes", "SetQueueAttributes", "ListQueueTags", "TagQueue"}

# SQS reads a flip-flop window answers (the operations that find a queue or read its state).
SQS_FLIP_READ_OPS = {"GetQueueAttributes", "ListQueueTags", "GetQueueUrl"}

NUMERIC_RULES = ("throttle_rps", "sqs_attr_lag_s", "sqs_create_lag_s", "sqs_delete_lag_s", "eks_role_propagation_s",
                 "iam_policy_version_lag_s", "sqs_attr_flipflop_s", "sqs_create_flipflop_s",
                 "sqs_delete_flipflop_s", "sqs_deleted_recently_s", "sqs_tags_lag_s",
                 "eks_delete_flipflop_s", "eks_delete_lag_s", "kms_key_lag_s")
BOOL_RULES = ("sqs_tag_on_create_unsupported", "iam_watch_role", "eks_tag_associations", "events_rules_full",
              "events_targets_full", "kms_keys_full", "eks_access_entry_tags", "ec2_subnet_dns64")
MAP_RULES = NUMERIC_RULES + BOOL_RULES + ("eks_cluster_status", "eks_compute_config", "upstreams",
                                         "eks_association_fields", "ec2_shared_vpc", "iam_simulate",
                                         "servicequotas_quotas", "eks_ip_family")
OTHER_RULES = ("eks_cluster_gone", "sts_partition", "iam_account_summary", "cloudtrail_events",
               "cloudtrail_lookup_rps", "cloudwatch_metrics", "caller_policy")
DEFAULT_VERSION_RE = re.compile(rb"<DefaultVersionId>([^<]*)</DefaultVersionId>")


def log(msg: str) -> None:
    print(f"lagproxy: {msg}", file=sys.stderr, flush=True)


class BadRules(ValueError):
    pass


# ------------------------------------------------------------------ request parsing

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
# ec2_shared_vpc: the EC2 answers it changes, and the list element each one's items are in.
SHARED_VPC_SETS = {"DescribeSubnets": b"subnetSet", "DescribeVpcs": b"vpcSet", "DescribeVpcEndpoints": b"vpcEndpointSet"}
ITEM_RE = re.compile(rb"<item>|</item>|<item/>")
VPC_ID_RE = re.compile(rb"<vpcId>([^<]*)</vpcId>")
OWNER_ID_RE = re.compile(rb"<ownerId>[^<]*</ownerId>")
SUBNET_ID_RE = re.compile(rb"<subnetId>([^<]*)</subnetId>")
DNS64_RE = re.compile(rb"<enableDns64>[^<]*</enableDns64>")


def top_items(body: bytes, set_tag: bytes) -> list[tuple[int, int]]:
    """(start, end) of each top-level <item> of the first <set_tag> element of an EC2 answer
    (items nest: a subnet's tags are items too)."""
    begin = body.find(b"<" + set_tag + b">")
    close = body.find(b"</" + set_tag + b">", begin)
    if begin < 0 or close < 0:
        return []
    spans, depth, start = [], 0, 0
    for m in ITEM_RE.finditer(body, begin, close):
        tok = m.group()
        if tok == b"<item/>":
            if depth == 0:
                spans.append((m.start(), m.end()))
        elif tok == b"<item>":
            if depth == 0:
                start = m.start()
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                spans.append((start, m.end()))
    return spans


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


# ------------------------------------------------------------------ responses

def sqs_error(code: str, type_: str, message: str, status: int = 400) -> tuple[int, list, bytes]:
    """An SQS error as AWS sends it on the JSON wire (and as microburst renders it): the SDK
    takes the code from x-amzn-query-error (awsQueryCompatible)."""
    body = json.dumps({"__type": f"com.amazonaws.sqs#{type_}", "message": message}).encode()
    return status, [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
        ("x-amzn-query-error", f"AWS.SimpleQueueService.{code};Sender"),
    ], body


def non_existent_queue() -> tuple[int, list, bytes]:
    return sqs_error("NonExistentQueue", "QueueDoesNotExist", "The specified queue does not exist.")


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


QUOTA_MESSAGE = "The requested resource exceeds the maximum number allowed."


def kms_key_id(ref: str | None) -> str:
    """The key id in a KMS KeyId / TargetKeyId (a key id or a key ARN)."""
    ref = ref or ""
    return ref.split(":key/", 1)[1] if ":key/" in ref else ref


def kms_alias(ref: str | None) -> str | None:
    """The alias name (alias/...) in a KMS KeyId that names an alias or an alias ARN, else None."""
    ref = ref or ""
    if ref.startswith("alias/"):
        return ref
    if ref.startswith("arn:") and ":alias/" in ref:
        return "alias/" + ref.split(":alias/", 1)[1]
    return None


def throttled(service: str) -> tuple[int, list, bytes]:
    """The answer AWS gives a throttled request of `service`."""
    if service in ("iam", "sts"):
        return query_error(400, "Throttling", "Rate exceeded")
    if service == "ec2":
        body = (f"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded."
                f"</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>").encode()
        return 503, [("Content-Type", "text/xml")], body
    if service == "eks":
        return eks_error(429, "TooManyRequestsException", "Rate exceeded")
    if service == "sqs":
        # Real SQS does not prefix its throttling code with AWS.SimpleQueueService. (microburst does).
        status, headers, body = sqs_error("RequestThrottled", "RequestThrottled", "Request is throttled.")
        return status, [(k, "RequestThrottled;Sender" if k == "x-amzn-query-error" else v) for k, v in headers], body
    body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
    return 400, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))], body


# ------------------------------------------------------------------ records AWS keeps: CloudTrail,
# CloudWatch, the IAM policy simulator (answered by the proxy itself; neither emulator has them)

# CloudTrail LookupEvents: at most 50 events a page; two lookups a second per account and Region.
CLOUDTRAIL_PAGE = 50
CLOUDTRAIL_LOOKUPS_PER_S = 2.0
LOOKUP_KEYS = ("EventId", "EventName", "ReadOnly", "Username", "ResourceType", "ResourceName", "EventSource",
               "AccessKeyId")
# IAM's default page for SimulatePrincipalPolicy (MaxItems).
IAM_PAGE = 100
RPCV2_PATH_RE = re.compile(r"/service/[^/]+/operation/([^/]+)$")
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


# A minimal CBOR (RFC 8949) for the Smithy RPC v2 CBOR wire (CloudWatch): what the Rust SDK
# sends (maps of indefinite length, tag 1 epoch timestamps, float64) and what it reads.
class CborTag:
    def __init__(self, tag: int, value):
        self.tag, self.value = tag, value


def cbor_decode(data: bytes):
    def head(i):
        ib = data[i]
        major, info = ib >> 5, ib & 0x1F
        i += 1
        if info < 24:
            return major, info, i
        if info == 31:
            return major, None, i
        n = {24: 1, 25: 2, 26: 4, 27: 8}[info]
        return major, (info, int.from_bytes(data[i:i + n], "big")), i + n

    def item(i):
        ib = data[i]
        major, arg, j = head(i)
        if major == 7:
            info = ib & 0x1F
            if info == 25:
                return struct.unpack(">e", data[i + 1:i + 3])[0], i + 3
            if info == 26:
                return struct.unpack(">f", data[i + 1:i + 5])[0], i + 5
            if info == 27:
                return struct.unpack(">d", data[i + 1:i + 9])[0], i + 9
            if info == 31:
                raise ValueError("unexpected break")
            return {20: False, 21: True, 22: None, 23: None}.get(info), j
        n = arg[1] if isinstance(arg, tuple) else arg
        if major == 0:
            return n, j
        if major == 1:
            return -1 - n, j
        if major in (2, 3):
            if n is None:
                chunks = []
                while data[j] != 0xFF:
                    c, j = item(j)
                    chunks.append(c)
                return ("" if major == 3 else b"").join(chunks), j + 1
            raw = data[j:j + n]
            return (raw.decode() if major == 3 else raw), j + n
        if major == 4:
            out = []
            if n is None:
                while data[j] != 0xFF:
                    v, j = item(j)
                    out.append(v)
                return out, j + 1
            for _ in range(n):
                v, j = item(j)
                out.append(v)
            return out, j
        if major == 5:
            out = {}
            while (data[j] != 0xFF) if n is None else len(out) < n:
                k, j = item(j)
                v, j = item(j)
                out[k] = v
            return out, (j + 1 if n is None else j)
        if major == 6:
            v, j = item(j)
            return (v if n == 1 else CborTag(n, v)), j
        raise ValueError(f"CBOR major type {major}")

    value, _ = item(0)
    return value


def cbor_encode(v) -> bytes:
    def head(major: int, n: int) -> bytes:
        if n < 24:
            return bytes([major << 5 | n])
        for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
            if n < 1 << (8 * size):
                return bytes([major << 5 | info]) + n.to_bytes(size, "big")
        raise ValueError("integer too large")

    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, CborTag):
        return head(6, v.tag) + cbor_encode(v.value)
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, float):
        return b"\xfb" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode()
        return head(3, len(raw)) + raw
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, (list, tuple)):
        return head(4, len(v)) + b"".join(cbor_encode(x) for x in v)
    if isinstance(v, dict):
        return head(5, len(v)) + b"".join(cbor_encode(k) + cbor_encode(x) for k, x in v.items())
    raise ValueError(f"cannot encode {type(v).__name__} as CBOR")


def cbor_answer(doc: dict, status: int = 200, query_error: str | None = None) -> tuple[int, list, bytes]:
    headers = [("Content-Type", "application/cbor"), ("smithy-protocol", "rpc-v2-cbor"),
               ("x-amzn-RequestId", str(uuid.uuid4()))]
    if query_error:
        headers.append(("x-amzn-query-error", query_error))
    return status, headers, cbor_encode(doc)


def epoch_of(v) -> float | None:
    if isinstance(v, CborTag):
        v = v.value
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def simulate_params(form: dict) -> dict:
    """What a SimulatePrincipalPolicy request asks (the query wire's member lists)."""
    def members(prefix: str) -> list:
        out = []
        while f"{prefix}.member.{len(out) + 1}" in form:
            out.append(form[f"{prefix}.member.{len(out) + 1}"])
        return out

    entries, n = [], 1
    while f"ContextEntries.member.{n}.ContextKeyName" in form:
        values = members(f"ContextEntries.member.{n}.ContextKeyValues")
        entries.append({"key": form[f"ContextEntries.member.{n}.ContextKeyName"], "values": values,
                        "type": form.get(f"ContextEntries.member.{n}.ContextKeyType")})
        n += 1
    return {"actions": members("ActionNames"), "resources": members("ResourceArns"), "context_entries": entries}


def simulate_decision(rule: dict, action: str, resource: str = "*", context: list | None = None) -> dict:
    """iam_simulate: the decision of `action` on `resource` with `context` (the request's
    ContextEntries) (exact name, then a pattern such as "ec2:*", then "*", else allowed), as
    {decision, organizations, boundary, matched}. A decision's "unless" {key: [patterns]} lifts it
    when a context value of that key matches; its "resources" [patterns] limit it to those ARNs."""
    decisions = rule.get("decisions") or {}
    d = decisions.get(action)
    if d is None:
        for pat, v in decisions.items():
            if pat != "*" and fnmatch.fnmatchcase(action, pat):
                d = v
                break
    if d is None:
        d = decisions.get("*", "allowed")
    if isinstance(d, dict) and d.get("decision") in ("scp", "boundary"):
        d = {**{"scp": {"decision": "explicitDeny", "organizations": False},
                "boundary": {"decision": "implicitDeny", "boundary": False}}[d["decision"]],
             **{k: v for k, v in d.items() if k != "decision"}}
    if isinstance(d, str):
        d = {"scp": {"decision": "explicitDeny", "organizations": False},
             "boundary": {"decision": "implicitDeny", "boundary": False}}.get(d, {"decision": d})
    given = {}
    for entry in context or []:
        given.setdefault(entry["key"].lower(), []).extend(entry["values"])
    exempt = any(fnmatch.fnmatchcase(v, pat) for key, pats in (d.get("unless") or {}).items()
                 for v in given.get(key.lower(), []) for pat in pats)
    scoped = d.get("resources")
    outside = scoped is not None and not any(fnmatch.fnmatchcase(resource, pat) for pat in scoped if resource != "*")
    if exempt or outside:
        d = {"decision": "allowed"}
    out = {"decision": d.get("decision", "allowed"), "organizations": d.get("organizations", True),
           "boundary": d.get("boundary", True), "matched": d.get("matched")}
    if out["matched"] is None:
        out["matched"] = ["KarpenterControllerPolicy"] if out["decision"] == "allowed" else []
    return out


def xml_members(items: list[str]) -> str:
    return "".join(f"<member>{html.escape(x)}</member>" for x in items)


# ------------------------------------------------------------------ the proxy's state

class Lag:
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

    # ------------------------------------------------------------- rules

    def merge(self, patch) -> dict:
        if not isinstance(patch, dict):
            raise BadRules("the rules must be a JSON object")
        with self.lock:
            new = json.loads(json.dumps(self.rules))
            for key, val in patch.items():
                if val is None:
                    new.pop(key, None)
                    continue
                if key in MAP_RULES:
                    if not isinstance(val, dict):
                        raise BadRules(f"{key} must be an object keyed by name (e.g. {{\"my-name\": 2}}); "
                                       "rules are scoped so that parallel tests do not interfere")
                    cur = new.setdefault(key, {})
                    for name, v in val.items():
                        if v is None:
                            cur.pop(name, None)
                        elif key in NUMERIC_RULES and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                            raise BadRules(f"{key}.{name} must be a number of seconds >= 0 (got {v!r})")
                        elif key in BOOL_RULES and not isinstance(v, bool):
                            raise BadRules(f"{key}.{name} must be true or false (got {v!r})")
                        elif key == "eks_ip_family" and v not in ("ipv4", "ipv6"):
                            raise BadRules(f"eks_ip_family.{name} must be \"ipv4\" or \"ipv6\" (got {v!r})")
                        elif key == "eks_cluster_status" and not isinstance(v, str):
                            raise BadRules(f"eks_cluster_status.{name} must be a status string (got {v!r})")
                        elif key == "upstreams" and not (isinstance(v, str) and v.startswith(("http://", "https://"))):
                            raise BadRules(f"upstreams.{name} must be an http(s) URL (got {v!r})")
                        elif key == "eks_association_fields" and not isinstance(v, dict):
                            raise BadRules(f"eks_association_fields.{name} must be an object of fields (got {v!r})")
                        elif key == "iam_simulate" and not (v == "AccessDenied" or isinstance(v, dict)):
                            raise BadRules(f"iam_simulate.{name} must be {{decisions, context_keys}} or "
                                           f"\"AccessDenied\" (got {v!r})")
                        elif key == "servicequotas_quotas" and not (v == "AccessDenied" or (
                                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)):
                            raise BadRules(f"servicequotas_quotas.{name} must be a number >= 0 or \"AccessDenied\" "
                                           f"(got {v!r})")
                        elif key == "ec2_shared_vpc" and not (isinstance(v, str) and re.fullmatch(r"[0-9]{12}", v)):
                            raise BadRules(f"ec2_shared_vpc.{name} must be the owner's 12-digit account id (got {v!r})")
                        else:
                            cur[name] = v
                    if not cur:
                        new.pop(key)
                elif key == "iam_account_summary":
                    ok = val == "AccessDenied" or (isinstance(val, dict) and all(
                        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                        for k, v in val.items()))
                    if not ok:
                        raise BadRules("iam_account_summary must be {SummaryMap key: integer >= 0} "
                                       "(e.g. {\"AttachedPoliciesPerRoleQuota\": 20}) or \"AccessDenied\"")
                    new[key] = val
                elif key == "cloudtrail_events":
                    if val == "AccessDenied":
                        new[key] = val
                    elif isinstance(val, list) and all(isinstance(e, dict) for e in val):
                        new[key] = expand_entries(val, time.time())
                    else:
                        raise BadRules("cloudtrail_events must be a list of records (compact entries or AWS's "
                                       "shape) or \"AccessDenied\"")
                elif key == "cloudtrail_lookup_rps":
                    if isinstance(val, bool) or not isinstance(val, (int, float)) or val <= 0:
                        raise BadRules(f"cloudtrail_lookup_rps must be a number of lookups a second > 0 (got {val!r})")
                    new[key] = val
                elif key == "cloudwatch_metrics":
                    if val == "AccessDenied":
                        new[key] = val
                        continue
                    if not isinstance(val, list):
                        raise BadRules("cloudwatch_metrics must be a list of series or \"AccessDenied\"")
                    now, series = time.time(), []
                    for s in val:
                        ok = (isinstance(s, dict) and isinstance(s.get("namespace"), str)
                              and isinstance(s.get("metric"), str) and isinstance(s.get("dimensions", {}), dict)
                              and isinstance(s.get("points"), list))
                        if not ok:
                            raise BadRules("cloudwatch_metrics: each series needs namespace, metric, dimensions "
                                           f"{{name: value}} and points [[minutes_ago, value], ...] (got {s!r})")
                        pts = []
                        for p in s["points"]:
                            if isinstance(p, dict) and "t" in p:
                                pts.append({"t": float(p["t"]), "value": float(p["value"])})
                            elif isinstance(p, list) and len(p) == 2:
                                pts.append({"t": now - float(p[0]) * 60.0, "value": float(p[1])})
                            else:
                                raise BadRules(f"cloudwatch_metrics: a point is [minutes_ago, value] (got {p!r})")
                        series.append({**s, "points": pts})
                    new[key] = series
                elif key == "caller_policy":
                    try:
                        lagpolicy.statements_of(val)
                    except lagpolicy.BadPolicy as e:
                        raise BadRules(str(e)) from None
                    new[key] = val
                    self.gate.clear_log()
                elif key == "sts_partition":
                    if not (isinstance(val, str) and val.startswith("aws")):
                        raise BadRules("sts_partition must be a partition name such as \"aws-cn\"")
                    new[key] = val
                elif key == "eks_cluster_gone":
                    cur = set(new.get(key, []))
                    if isinstance(val, list) and all(isinstance(x, str) for x in val):
                        cur |= set(val)
                    elif isinstance(val, dict):
                        for name, on in val.items():
                            (cur.add if on else cur.discard)(name)
                    else:
                        raise BadRules("eks_cluster_gone must be a list of cluster names or {name: bool}")
                    if cur:
                        new[key] = sorted(cur)
                    else:
                        new.pop(key, None)
                else:
                    raise BadRules(f"unknown rule {key!r}; known: "
                                   f"{', '.join(MAP_RULES + OTHER_RULES)}")
            self.rules = new
            return json.loads(json.dumps(new))

    def rule(self, key: str, name: str | None):
        """The rule value for `name` (exact name first, then "*"), or None."""
        if name is None:
            return None
        with self.lock:
            m = self.rules.get(key) or {}
            if name in m:
                return m[name]
            return m.get("*")

    def cluster_gone(self, name: str | None) -> bool:
        with self.lock:
            gone = self.rules.get("eks_cluster_gone") or []
            return name is not None and (name in gone or "*" in gone)

    def upstream_for(self, service: str) -> str:
        with self.lock:
            return (self.rules.get("upstreams") or {}).get(service, self.upstream).rstrip("/")

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

    # ------------------------------------------------------------- upstream

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

    def sqs_call(self, like: Req, operation: str, payload: dict) -> tuple[int, dict]:
        """An SQS call of our own, upstream, with the client's headers (the emulators accept
        any signature; microburst is started with --no-resign)."""
        headers = [(k, "AmazonSQS." + operation) if k.lower() == "x-amz-target" else (k, v) for k, v in like.headers]
        status, _, data = self.forward(like, headers=headers, body=json.dumps(payload).encode())
        try:
            return status, json.loads(data or b"{}")
        except ValueError:
            return status, {}

    def _send_delete(self, req: Req) -> None:
        try:
            status, _, data = self.forward(req)
            log(f"deferred DeleteQueue {req.queue_name()} sent upstream: {status} {data[:200]!r}")
        except Exception as e:  # noqa: BLE001 - a background send has no caller to tell
            log(f"deferred DeleteQueue {req.queue_name()} failed: {e}")

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

    def _send_eks_delete(self, req: Req) -> None:
        try:
            status, _, data = self.forward(req)
            log(f"deferred {req.operation} {req.path} sent upstream: {status} {data[:200]!r}")
        except Exception as e:  # noqa: BLE001 - a background send has no caller to tell
            log(f"deferred {req.operation} {req.path} failed: {e}")

    def _eks_delete_due(self, key: tuple[str, str, str]) -> None:
        with self.lock:
            item = self.eks_pending.pop(key, None)
        if item:
            self._send_eks_delete(item["req"])

    def _eks_read_gone(self, item: dict) -> bool:
        """One read of a deferred-deleted EKS object: whether this read finds it gone."""
        item["reads"] += 1
        return item["mode"] == "lag" or item["reads"] == 1

    # ------------------------------------------------------------- behaviours

    def take_token(self, service: str) -> bool:
        """throttle_rps: False when the service's bucket is empty (the request is throttled)."""
        rate = self.rule("throttle_rps", service)
        if not rate:
            return True
        now = time.monotonic()
        with self.lock:
            b = self.buckets.setdefault(service, {"tokens": float(rate), "at": now})
            b["tokens"] = min(float(rate), b["tokens"] + (now - b["at"]) * rate)
            b["at"] = now
            if b["tokens"] < 1.0:
                return False
            b["tokens"] -= 1.0
            return True

    def handle(self, req: Req) -> tuple[int, list, bytes, str | None]:
        if not self.take_token(req.service):
            return (*throttled(req.service), "throttle_rps")
        with self.lock:
            policy = self.rules.get("caller_policy")
        if policy is not None:
            refused = self.gate.check(req, lagpolicy.statements_of(policy), self.forward)
            if refused is not None:
                return (*refused, "caller_policy")
        if req.service == "sqs":
            return self.handle_sqs(req)
        if req.service == "eks":
            return self.handle_eks(req)
        if req.service == "iam" and req.operation in ("SimulatePrincipalPolicy", "GetContextKeysForPrincipalPolicy"):
            answered = self.handle_simulate(req)
            if answered is not None:
                return answered
        if req.service == "iam":
            return self.handle_iam(req)
        if req.service == "cloudtrail" and req.operation == "LookupEvents":
            answered = self.handle_cloudtrail(req)
            if answered is not None:
                return answered
        if req.service == "servicequotas" and req.operation == "GetServiceQuota":
            answered = self.handle_servicequotas(req)
            if answered is not None:
                return answered
        if req.service == "monitoring" and req.operation == "GetMetricData":
            answered = self.handle_cloudwatch(req)
            if answered is not None:
                return answered
        if req.service == "kms":
            return self.handle_kms(req)
        if req.service == "events":
            answered = self.handle_events(req)
            if answered is not None:
                return answered
        if req.service == "ec2" and req.operation in SHARED_VPC_SETS:
            status, headers, body, lag = self.handle_ec2_shared_vpc(req)
            if req.operation == "DescribeSubnets":
                body, dns64 = self.with_dns64(status, body)
                lag = lag or dns64
            return status, headers, body, lag
        if req.service == "sts" and req.operation == "GetCallerIdentity":
            with self.lock:
                partition = self.rules.get("sts_partition")
            status, headers, body = self.forward(req)
            if partition and 200 <= status < 300:
                body = re.sub(rb"<Arn>arn:[^:<]*:", b"<Arn>arn:" + partition.encode() + b":", body)
                return status, headers, body, "sts_partition"
            return status, headers, body, None
        return (*self.forward(req), None)

    def handle_ec2_shared_vpc(self, req: Req):
        """ec2_shared_vpc: the answer as a participant of the owner's shared VPC sees it."""
        with self.lock:
            shared = dict(self.rules.get("ec2_shared_vpc") or {})
        status, headers, body = self.forward(req)
        if not shared or not 200 <= status < 300:
            return status, headers, body, None
        out, last = [], 0
        for start, end in top_items(body, SHARED_VPC_SETS[req.operation]):
            item = body[start:end]
            m = VPC_ID_RE.search(item)
            owner = (shared.get(m.group(1).decode()) or shared.get("*")) if m else None
            if owner is None:
                continue
            if req.operation == "DescribeVpcEndpoints":
                item = b""
            else:
                item = OWNER_ID_RE.sub(b"<ownerId>" + owner.encode() + b"</ownerId>", item, count=1)
            out += [body[last:start], item]
            last = end
        if not out:
            return status, headers, body, None
        return status, headers, b"".join(out) + body[last:], "ec2_shared_vpc"

    def with_dns64(self, status: int, body: bytes) -> tuple[bytes, str | None]:
        """ec2_subnet_dns64: a DescribeSubnets answer with enableDns64 true for the rule's subnets."""
        with self.lock:
            on = dict(self.rules.get("ec2_subnet_dns64") or {})
        if not on or not 200 <= status < 300:
            return body, None
        out, last = [], 0
        for start, end in top_items(body, b"subnetSet"):
            item = body[start:end]
            m = SUBNET_ID_RE.search(item)
            if not m or not (on.get(m.group(1).decode(), on.get("*"))):
                continue
            if DNS64_RE.search(item):
                item = DNS64_RE.sub(b"<enableDns64>true</enableDns64>", item, count=1)
            else:
                close = item.rfind(b"</item>")
                item = item[:close] + b"<enableDns64>true</enableDns64>" + item[close:]
            out += [body[last:start], item]
            last = end
        if not out:
            return body, None
        return b"".join(out) + body[last:], "ec2_subnet_dns64"

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

    def rule_any(self, key: str, names) -> object:
        """The rule value for the first of `names` that has one, else for "*", else None."""
        with self.lock:
            m = self.rules.get(key) or {}
            for n in names:
                if n in m:
                    return m[n]
            return m.get("*")

    def kms_names_of(self, like: Req, key_id: str) -> set:
        """The tag values of a KMS key: as it was made through this proxy, else read upstream."""
        with self.lock:
            known = self.kms_names.get(key_id)
        if known is not None:
            return known
        status, doc = self.json_call(like, "TrentService.ListResourceTags", {"KeyId": key_id})
        names = {t.get("TagValue") for t in doc.get("Tags") or [] if isinstance(t, dict)} if status == 200 else set()
        with self.lock:
            self.kms_names[key_id] = names
        return names

    def kms_window(self, key_id: str) -> dict | None:
        with self.lock:
            w = self.kms_windows.get(key_id)
            if w is not None and w["until"] <= time.monotonic():
                del self.kms_windows[key_id]
                w = None
            return w

    def handle_kms(self, req: Req):
        """kms_key_lag_s and kms_keys_full."""
        op, j, now = req.operation, req.json or {}, time.monotonic()
        if op == "CreateKey":
            names = {t.get("TagValue") for t in j.get("Tags") or [] if isinstance(t, dict)}
            if self.rule_any("kms_keys_full", names):
                return (*json_error("LimitExceededException", "The request was rejected because a quota was exceeded."),
                        "kms_keys_full")
            status, headers, body = self.forward(req)
            kid = None
            if 200 <= status < 300:
                try:
                    kid = (json.loads(body).get("KeyMetadata") or {}).get("KeyId")
                except ValueError:
                    kid = None
            if kid:
                n = self.rule_any("kms_key_lag_s", names)
                with self.lock:
                    self.kms_names[kid] = names
                    if n:
                        self.kms_windows[kid] = {"until": now + n, "after": "CreateKey", "n": n}
                return status, headers, body, "kms_key_lag_s" if n else None
            return status, headers, body, None
        if op == "CancelKeyDeletion":
            status, headers, body = self.forward(req)
            if 200 <= status < 300:
                try:
                    kid = kms_key_id(json.loads(body).get("KeyId") or j.get("KeyId"))
                except ValueError:
                    kid = kms_key_id(j.get("KeyId"))
                n = self.rule_any("kms_key_lag_s", self.kms_names_of(req, kid))
                if n:
                    with self.lock:
                        self.kms_windows[kid] = {"until": now + n, "after": "CancelKeyDeletion", "n": n}
                    return status, headers, body, "kms_key_lag_s"
            return status, headers, body, None
        if op in ("CreateAlias", "EnableKey"):
            ref = j.get("TargetKeyId") if op == "CreateAlias" else j.get("KeyId")
            kid = kms_key_id(ref)
            w = self.kms_window(kid)
            if w is not None:
                if w["after"] == "CreateKey":
                    return (*json_error("NotFoundException", f"Key '{ref}' does not exist"), "kms_key_lag_s")
                return (*json_error("KMSInvalidStateException", f"{ref} is pending deletion."), "kms_key_lag_s")
            status, headers, body = self.forward(req)
            if op == "CreateAlias" and 200 <= status < 300 and j.get("AliasName"):
                n = self.rule_any("kms_key_lag_s", self.kms_names_of(req, kid))
                if n:
                    with self.lock:
                        self.kms_alias_windows[j["AliasName"]] = now + n
                    return status, headers, body, "kms_key_lag_s"
            return status, headers, body, None
        if op == "DescribeKey":
            ref = j.get("KeyId")
            alias = kms_alias(ref)
            if alias is not None:
                with self.lock:
                    until = self.kms_alias_windows.get(alias)
                if until is not None and now < until:
                    return (*json_error("NotFoundException", f"Alias {ref} is not found."), "kms_key_lag_s")
            status, headers, body = self.forward(req)
            if 200 <= status < 300:
                try:
                    kid = (json.loads(body).get("KeyMetadata") or {}).get("KeyId")
                except ValueError:
                    kid = None
                w = self.kms_window(kid) if kid else None
                if w is not None and w["after"] == "CreateKey":
                    return (*json_error("NotFoundException", f"Key '{ref}' does not exist"), "kms_key_lag_s")
            return status, headers, body, None
        return (*self.forward(req), None)

    def handle_events(self, req: Req):
        """events_rules_full and events_targets_full; None: not ours."""
        op, j = req.operation, req.json or {}
        if op == "PutRule" and self.rule("events_rules_full", j.get("Name")):
            # A full bus refuses new rules only: an existing rule can still be updated.
            probe = {"Name": j.get("Name")}
            if j.get("EventBusName"):
                probe["EventBusName"] = j["EventBusName"]
            status, _ = self.json_call(req, "AWSEvents.DescribeRule", probe)
            if status != 200:
                return (*json_error("LimitExceededException", QUOTA_MESSAGE), "events_rules_full")
        if op == "PutTargets" and self.rule("events_targets_full", j.get("Rule")):
            return (*json_error("LimitExceededException", QUOTA_MESSAGE), "events_targets_full")
        return None

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

    def handle_iam(self, req: Req):
        op, arn = req.operation, req.form.get("PolicyArn", "")
        if op == "GetAccountSummary":
            with self.lock:
                summary = self.rules.get("iam_account_summary")
            if summary is not None:
                return (*self.account_summary(req, summary), "iam_account_summary")
        policy = arn.rsplit("/", 1)[-1] if arn else None
        if op == "CreatePolicyVersion" and req.form.get("SetAsDefault", "").lower() == "true":
            n = self.rule("iam_policy_version_lag_s", policy)
            if n:
                # The default before the write, read upstream with the client's headers.
                q = urllib.parse.urlencode({"Action": "GetPolicy", "Version": "2010-05-08", "PolicyArn": arn})
                _, _, before = self.forward(req, body=q.encode())
                m = DEFAULT_VERSION_RE.search(before)
                status, headers, body = self.forward(req)
                if m and 200 <= status < 300:
                    with self.lock:
                        self.version_windows[arn] = {"until": time.monotonic() + n, "old": m.group(1)}
                return status, headers, body, "iam_policy_version_lag_s"
        if op == "GetPolicy" and arn:
            with self.lock:
                w = self.version_windows.get(arn)
                if w and w["until"] <= time.monotonic():
                    del self.version_windows[arn]
                    w = None
            status, headers, body = self.forward(req)
            if w and 200 <= status < 300:
                body = DEFAULT_VERSION_RE.sub(b"<DefaultVersionId>" + w["old"] + b"</DefaultVersionId>", body)
                return status, headers, body, "iam_policy_version_lag_s"
            return status, headers, body, None
        status, headers, body = self.forward(req)
        if not op.startswith(("Get", "List")) and 200 <= status < 300:
            with self.lock:
                watched = [r for r, on in (self.rules.get("iam_watch_role") or {}).items() if on]
            for r in watched:
                actions = self.role_actions(req, r)
                with self.lock:
                    self.iam_watch.setdefault(r, []).append({"after": op, "actions": actions})
        role = req.role_name()
        if op in ("CreateRole", "UpdateAssumeRolePolicy") and role and 200 <= status < 300:
            n = self.rule("eks_role_propagation_s", role)
            if n:
                with self.lock:
                    self.role_windows[role] = {"until": time.monotonic() + n,
                                               "kind": "create" if op == "CreateRole" else "trust"}
                return status, headers, body, "eks_role_propagation_s"
        return status, headers, body, None


    def account_summary(self, req: Req, rule) -> tuple[int, list, bytes]:
        """iam_account_summary: GetAccountSummary with the rule's entries over the upstream's
        (an upstream that does not answer it gives none), or AWS's refusal."""
        if rule == "AccessDenied":
            return query_error(403, "AccessDenied", "User: arn:aws:iam::000000000000:user/test is not authorized "
                                                    "to perform: iam:GetAccountSummary on resource: *")
        status, _, body = self.forward(req)
        entries: dict[str, str] = {}
        if 200 <= status < 300:
            for k, v in re.findall(rb"<entry>\s*<key>([^<]*)</key>\s*<value>([^<]*)</value>\s*</entry>", body):
                entries[k.decode()] = v.decode()
        entries.update({k: str(v) for k, v in rule.items()})
        xml = "".join(f"<entry><key>{html.escape(k)}</key><value>{html.escape(v)}</value></entry>"
                      for k, v in entries.items())
        out = ('<GetAccountSummaryResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/">'
               f"<GetAccountSummaryResult><SummaryMap>{xml}</SummaryMap></GetAccountSummaryResult>"
               f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
               "</GetAccountSummaryResponse>")
        return 200, [("Content-Type", "text/xml")], out.encode()

    def iam_query(self, like: Req, params: dict) -> bytes:
        """One IAM query-protocol call upstream, with the client's headers (the emulator does not
        check signatures); the response body."""
        q = urllib.parse.urlencode({"Version": "2010-05-08", **params})
        _, _, body = self.forward(like, body=q.encode())
        return body

    def role_actions(self, like: Req, role: str) -> list:
        """The actions the role's policies allow (managed: the default version; inline), sorted."""
        docs = []
        listed = self.iam_query(like, {"Action": "ListAttachedRolePolicies", "RoleName": role})
        for arn in re.findall(rb"<PolicyArn>([^<]*)</PolicyArn>", listed):
            pol = self.iam_query(like, {"Action": "GetPolicy", "PolicyArn": arn.decode()})
            m = DEFAULT_VERSION_RE.search(pol)
            if not m:
                continue
            ver = self.iam_query(like, {"Action": "GetPolicyVersion", "PolicyArn": arn.decode(),
                                        "VersionId": m.group(1).decode()})
            docs += re.findall(rb"<Document>([^<]*)</Document>", ver)
        inline = self.iam_query(like, {"Action": "ListRolePolicies", "RoleName": role})
        for name in re.findall(rb"<member>([^<]*)</member>", inline):
            got = self.iam_query(like, {"Action": "GetRolePolicy", "RoleName": role, "PolicyName": name.decode()})
            docs += re.findall(rb"<PolicyDocument>([^<]*)</PolicyDocument>", got)
        actions = set()
        for raw in docs:
            text = html.unescape(urllib.parse.unquote(raw.decode()))
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            stmts = doc.get("Statement", [])
            for st in stmts if isinstance(stmts, list) else [stmts]:
                if str(st.get("Effect", "")).lower() != "allow":
                    continue
                a = st.get("Action", [])
                actions.update(a if isinstance(a, list) else [a])
        return sorted(actions)

    # ------------------------------------------------------------- records AWS keeps

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

    def handle_servicequotas(self, req: Req):
        """servicequotas_quotas: GetServiceQuota of a scripted quota code."""
        j = req.json or {}
        code = j.get("QuotaCode")
        rule = self.rule("servicequotas_quotas", code)
        if rule is None:
            return None
        if rule == "AccessDenied":
            return (*json_error("AccessDeniedException", "User: arn:aws:sts::000000000000:assumed-role/karpctl/session "
                                "is not authorized to perform: servicequotas:GetServiceQuota"), "servicequotas_quotas")
        service = j.get("ServiceCode", "ec2")
        quota = {"ServiceCode": service, "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                 "QuotaArn": f"arn:aws:servicequotas:{req.region()}:000000000000:{service}/{code}", "QuotaCode": code,
                 "QuotaName": code, "Value": float(rule), "Unit": "None", "Adjustable": True, "GlobalQuota": False}
        return (200, [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", str(uuid.uuid4()))],
                json.dumps({"Quota": quota}).encode(), "servicequotas_quotas")

    def handle_cloudwatch(self, req: Req):
        """cloudwatch_metrics: GetMetricData (Smithy RPC v2 CBOR) answered from scripted datapoints."""
        with self.lock:
            rule = self.rules.get("cloudwatch_metrics")
        if rule is None:
            return None
        if rule == "AccessDenied":
            return (*cbor_answer({"__type": "com.amazonaws.cloudwatch#AccessDenied",
                                  "message": "User is not authorized to perform: cloudwatch:GetMetricData"},
                                 403, "AccessDenied;Sender"), "cloudwatch_metrics")
        j = req.cbor if isinstance(req.cbor, dict) else {}
        start, end = epoch_of(j.get("StartTime")), epoch_of(j.get("EndTime"))
        newest_first = j.get("ScanBy", "TimestampDescending") != "TimestampAscending"
        results = []
        for q in j.get("MetricDataQueries") or []:
            if q.get("ReturnData") is False:
                continue
            stat = q.get("MetricStat") or {}
            metric = stat.get("Metric") or {}
            dims = {d.get("Name"): d.get("Value") for d in metric.get("Dimensions") or []}
            points = []
            for s in rule:
                if (s.get("namespace") == metric.get("Namespace") and s.get("metric") == metric.get("MetricName")
                        and (s.get("dimensions") or {}) == dims and s.get("stat") in (None, stat.get("Stat"))):
                    points += [(p["t"], float(p["value"])) for p in s["points"]]
            points = [p for p in points if (start is None or p[0] >= start) and (end is None or p[0] < end)]
            points.sort(key=lambda p: p[0], reverse=newest_first)
            results.append({"Id": q.get("Id"), "Label": q.get("Label") or metric.get("MetricName") or q.get("Id"),
                            "Timestamps": [CborTag(1, float(int(t))) for t, _ in points],
                            "Values": [v for _, v in points], "StatusCode": "Complete"})
        return (*cbor_answer({"MetricDataResults": results, "Messages": []}), "cloudwatch_metrics")

    def handle_simulate(self, req: Req):
        """iam_simulate: SimulatePrincipalPolicy and GetContextKeysForPrincipalPolicy."""
        role = req.form.get("PolicySourceArn", "").rsplit("/", 1)[-1]
        rule = self.rule("iam_simulate", role)
        if rule is None:
            return None
        op = req.operation
        if rule == "AccessDenied":
            return (*query_error(403, "AccessDenied", f"User: arn:aws:iam::000000000000:user/test is not authorized "
                                                      f"to perform: iam:{op} on resource: {req.form.get('PolicySourceArn')}"),
                    "iam_simulate")
        keys = list(rule.get("context_keys") or [])
        rid = f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        ns = 'xmlns="https://iam.amazonaws.com/doc/2010-05-08/"'
        if op == "GetContextKeysForPrincipalPolicy":
            body = (f"<GetContextKeysForPrincipalPolicyResponse {ns}><GetContextKeysForPrincipalPolicyResult>"
                    f"<ContextKeyNames>{xml_members(keys)}</ContextKeyNames>"
                    f"</GetContextKeysForPrincipalPolicyResult>{rid}</GetContextKeysForPrincipalPolicyResponse>")
            return 200, [("Content-Type", "text/xml")], body.encode(), "iam_simulate"
        asked = simulate_params(req.form)
        given = {e["key"].lower() for e in asked["context_entries"]}
        missing = [k for k in keys if k.lower() not in given]
        pairs = [(a, r) for a in asked["actions"] for r in (asked["resources"] or ["*"])]
        try:
            limit = int(req.form.get("MaxItems") or IAM_PAGE)
        except ValueError:
            limit = 0
        offset = page_offset(req.form.get("Marker"))
        if offset is None or not 1 <= limit <= 1000:
            return (*query_error(400, "InvalidInput", "Invalid Marker or MaxItems."), "iam_simulate")
        members = []
        for action, resource in pairs[offset:offset + limit]:
            d = simulate_decision(rule, action, resource, asked["context_entries"])
            matched = "".join(f"<member><SourcePolicyId>{html.escape(m)}</SourcePolicyId>"
                              "<SourcePolicyType>IAM Policy</SourcePolicyType>"
                              "<StartPosition><Line>1</Line><Column>1</Column></StartPosition>"
                              "<EndPosition><Line>1</Line><Column>100</Column></EndPosition></member>"
                              for m in d["matched"])
            members.append(
                f"<member><EvalActionName>{html.escape(action)}</EvalActionName>"
                f"<EvalResourceName>{html.escape(resource)}</EvalResourceName>"
                f"<EvalDecision>{d['decision']}</EvalDecision><MatchedStatements>{matched}</MatchedStatements>"
                f"<MissingContextValues>{xml_members(missing)}"
                "</MissingContextValues>"
                f"<OrganizationsDecisionDetail><AllowedByOrganizations>{str(d['organizations']).lower()}"
                "</AllowedByOrganizations></OrganizationsDecisionDetail>"
                f"<PermissionsBoundaryDecisionDetail><AllowedByPermissionsBoundary>{str(d['boundary']).lower()}"
                "</AllowedByPermissionsBoundary></PermissionsBoundaryDecisionDetail></member>")
        more = offset + limit < len(pairs)
        marker = f"<Marker>{page_token(offset + limit)}</Marker>" if more else ""
        body = (f"<SimulatePrincipalPolicyResponse {ns}><SimulatePrincipalPolicyResult>"
                f"<IsTruncated>{str(more).lower()}</IsTruncated><EvaluationResults>{''.join(members)}"
                f"</EvaluationResults>{marker}</SimulatePrincipalPolicyResult>{rid}</SimulatePrincipalPolicyResponse>")
        return 200, [("Content-Type", "text/xml")], body.encode(), "iam_simulate"


# ------------------------------------------------------------------ HTTP server

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lagproxy"
    # TCP_NODELAY on each client connection: an answer goes out as two writes (the head, then
    # the body), and with Nagle's algorithm on the body waited for the client's delayed ACK of
    # the head, about 40 ms a call on Linux, which AWS does not add.
    disable_nagle_algorithm = True
    lag: Lag  # set on the class by main()

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="URL every request is forwarded to")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    if not args.upstream.startswith(("http://", "https://")):
        ap.error("--upstream must be an http(s) URL")
    lag = Lag(args.upstream)
    Handler.lag = lag
    srv = Server((args.host, args.port), Handler)
    host, port = srv.server_address[:2]
    log(f"listening on http://{host}:{port} -> {lag.upstream}")

    def stop(signum, _frame):
        log(f"signal {signum}: sending queued deletions and stopping")
        threading.Thread(target=lambda: (lag.flush(), srv.shutdown()), daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
