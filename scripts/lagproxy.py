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
  events_list_skips      {rule: true}  ListRules leaves that rule out of its page
                                       (AWS's and ministack's pages are read one after another:
                                       a rule ahead of it deleted between two pages shifts it out
                                       of both); DescribeRule and ListRuleNamesByTarget still
                                       find it
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
import re
import signal
import sys
import threading

import lagpolicy
from lag.cloudtrail import CloudTrail
from lag.cloudwatch import CloudWatch
from lag.ec2 import SHARED_VPC_SETS, Ec2
from lag.eks import Eks
from lag.events import Events
from lag.iam import Iam
from lag.kms import Kms
from lag.rules import Rules
from lag.server import Handler, Server
from lag.servicequotas import ServiceQuotas
from lag.sqs import Sqs
from lag.state import State
from lag.throttle import Throttle, throttled
from lag.upstream import Upstream
from lag.wire import Req, log


class Lag(State, Rules, Upstream, Throttle, Sqs, Eks, Iam, Kms, Events, Ec2, CloudTrail, CloudWatch, ServiceQuotas):
    """The proxy: its state and rules, and each request dispatched to the behaviours of its service
    (a mixin per service in scripts/lag/)."""

    def handle(self, req: Req) -> tuple[int, list, bytes, str | None]:
        if not self.take_token(req.service):
            return (*throttled(req.service), "throttle_rps")
        with self.lock:
            policy = self.rules.get("caller_policy")
        if policy is not None:
            refused = self.gate.check(req, lagpolicy.statements_of(policy), self)
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
