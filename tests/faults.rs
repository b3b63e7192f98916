//! Faults, crashes, races and secrets (issue 6, items 2, 3, 4 and 7): the real binary against the
//! test emulator, behind a microburst proxy of each test's own (scripts/MICROBURST.md).
//!
//! Every test seeds its own cluster, starts its own proxy (stopped on drop, also on panic) and
//! checks the outcome through the AWS SDK straight against the emulator, never through the proxy
//! and never through karpctl's own code. Faults are deterministic counters (`times`,
//! `sequence`), never an unseeded `probability`; consistency deadlines are short, so every test
//! ends in well under a minute.
//!
//! Wire notes that shape the rules below (measured, see MICROBURST.md):
//! - SQS speaks JSON with `awsQueryCompatible`: microburst sends every code as
//!   `AWS.SimpleQueueService.<code>` in `x-amzn-query-error`, so a `ThrottlingException` would not
//!   look like throttling to the SDK. SQS "throttling" and bursts are therefore served as 5xx,
//!   which the SDK retries as transient errors, as it would AWS's own 5xx.
//! - EKS puts the cluster name in the URL path, IAM/SQS/EventBridge have it in the body: narrow
//!   rules use `body` matchers where one step must be singled out.

use crate::common::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ----------------------------------------------------------------------------- running karpctl

/// The environment that sends every AWS call of karpctl through `px`: AWS_ENDPOINT_URL, and
/// no inherited per-service AWS_ENDPOINT_URL_* that would bypass the proxy (an empty value
/// removes a variable, as in `karpctl_env`).
fn via(px: &Proxy) -> Vec<(String, String)> {
    let mut v = vec![("AWS_ENDPOINT_URL".to_string(), px.url().to_string())];
    v.extend(std::env::vars().filter(|(k, _)| k.starts_with("AWS_ENDPOINT_URL_")).map(|(k, _)| (k, String::new())));
    v
}

/// `via(px)` followed by `extra`, as the borrowed pairs `karpctl_env` takes.
fn env_via<'a>(owned: &'a [(String, String)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(extra.iter().copied()).collect()
}

/// karpctl through the proxy.
fn karpctl_via(wd: &Workdir, args: &[&str], px: &Proxy, extra: &[(&str, &str)]) -> Run {
    let owned = via(px);
    karpctl_env(wd, args, &env_via(&owned, extra))
}

/// `karpctl up --cluster c --stats` through the proxy.
fn up_via(wd: &Workdir, c: &str, px: &Proxy, extra: &[(&str, &str)]) -> Run {
    karpctl_via(wd, &["up", "--cluster", c, "--stats"], px, extra)
}

fn diff_direct(wd: &Workdir, c: &str) -> Run {
    karpctl(wd, &["diff", "--cluster", c])
}

/// The command `karpctl_env` runs, with piped output, for tests that must spawn, signal or kill it.
fn karpctl_cmd(wd: &Workdir, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = karpctl_command(wd, args, env);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// A spawned karpctl whose stdout and stderr are drained by threads (so a full pipe never blocks
/// it), with stderr lines also sent as they come.
struct Spawned {
    child: Child,
    lines: mpsc::Receiver<String>,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

/// Spawn karpctl through the proxy.
fn spawn_via(wd: &Workdir, args: &[&str], px: &Proxy) -> Spawned {
    let owned = via(px);
    spawn(wd, args, &env_via(&owned, &[]))
}

fn spawn(wd: &Workdir, args: &[&str], env: &[(&str, &str)]) -> Spawned {
    let mut child = karpctl_cmd(wd, args, env).spawn().expect("spawn karpctl");
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    Spawned { child, lines, out, err }
}

impl Spawned {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
    /// Wait for a stderr line containing `needle` (or the end of stderr, or the timeout).
    fn wait_for_line(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return Some(l),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }
    /// Wait for the exit (killing it after `timeout`, which fails the test) and collect output.
    fn finish(mut self, timeout: Duration) -> Run {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.out.join().unwrap_or_default();
        let stderr = self.err.join().unwrap_or_default();
        let run = Run { code: status.and_then(|s| s.code()).unwrap_or(-1), stdout, stderr };
        assert!(status.is_some(), "karpctl did not end within {timeout:?}: {run:?}");
        run
    }
    /// SIGKILL now, then collect what it printed.
    fn kill9(mut self) -> Run {
        self.child.kill().expect("SIGKILL karpctl");
        self.finish(Duration::from_secs(10))
    }
}

/// `karpctl ... --stats` prints "AWS calls: N (R reads, W writes), K retries": K.
fn stats_retries(r: &Run) -> u64 {
    let line = r.stderr.lines().find(|l| l.starts_with("AWS calls:")).unwrap_or_else(|| panic!("no --stats line: {r:?}"));
    let k = line.rsplit(", ").next().and_then(|t| t.split_whitespace().next()).and_then(|n| n.parse().ok());
    k.unwrap_or_else(|| panic!("cannot read the retry count in {line:?}"))
}

// ------------------------------------------------------------------ checks through the SDK

/// Every object karpctl makes for `c` that exists right now, by kind, with its tags.
#[derive(Debug, Default)]
struct Inventory {
    /// Queue URLs whose name is exactly Karpenter-<c>.
    queues: Vec<(String, BTreeMap<String, String>)>,
    /// Roles under the plan's IAM path (tags from GetRole: ListRoles has none on AWS).
    roles: Vec<(String, BTreeMap<String, String>)>,
    /// Customer managed policies under the IAM path.
    policies: Vec<(String, BTreeMap<String, String>)>,
    /// Instance profiles under the IAM path.
    profiles: Vec<(String, BTreeMap<String, String>, Vec<String>)>,
    /// Rules named Karpenter-<c>-<Part>, with their target count.
    rules: Vec<(String, BTreeMap<String, String>, usize)>,
    /// Access entries of the cluster for the node role.
    access_entries: Vec<(String, BTreeMap<String, String>)>,
    /// Pod Identity associations of kube-system/karpenter.
    pod_identities: Vec<(String, BTreeMap<String, String>)>,
}

fn inventory(sdk: &Sdk, c: &str) -> Inventory {
    let node_role_arn_suffix = format!("role{}{}", iam_path(c), node_role(c));
    rt().block_on(async {
        let mut inv = Inventory::default();

        let qs = sdk.sqs.list_queues().queue_name_prefix(queue_name(c)).send().await.expect("sqs:ListQueues");
        for url in qs.queue_urls() {
            if url.rsplit('/').next() != Some(queue_name(c).as_str()) {
                continue;
            }
            let t = sdk.sqs.list_queue_tags().queue_url(url).send().await.expect("sqs:ListQueueTags");
            inv.queues.push((url.clone(), t.tags().map(|m| m.clone().into_iter().collect()).unwrap_or_default()));
        }

        let roles = sdk.iam.list_roles().path_prefix(iam_path(c)).send().await.expect("iam:ListRoles");
        for r in roles.roles() {
            let g = sdk.iam.get_role().role_name(r.role_name()).send().await.expect("iam:GetRole");
            let tags = g
                .role()
                .map(|r| r.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect())
                .unwrap_or_default();
            inv.roles.push((r.role_name().to_string(), tags));
        }

        let pols = sdk
            .iam
            .list_policies()
            .scope(aws_sdk_iam::types::PolicyScopeType::Local)
            .path_prefix(iam_path(c))
            .send()
            .await
            .expect("iam:ListPolicies");
        for p in pols.policies() {
            let arn = p.arn().unwrap_or_default();
            let t = sdk.iam.list_policy_tags().policy_arn(arn).send().await.expect("iam:ListPolicyTags");
            inv.policies.push((
                p.policy_name().unwrap_or_default().to_string(),
                t.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect(),
            ));
        }

        let profs = sdk.iam.list_instance_profiles().path_prefix(iam_path(c)).send().await.expect("iam:ListInstanceProfiles");
        for p in profs.instance_profiles() {
            let g = sdk
                .iam
                .get_instance_profile()
                .instance_profile_name(p.instance_profile_name())
                .send()
                .await
                .expect("iam:GetInstanceProfile");
            let ip = g.instance_profile();
            inv.profiles.push((
                p.instance_profile_name().to_string(),
                ip.map(|i| i.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()).unwrap_or_default(),
                ip.map(|i| i.roles().iter().map(|r| r.role_name().to_string()).collect()).unwrap_or_default(),
            ));
        }

        let prefix = format!("Karpenter-{c}-");
        let rules = sdk.events.list_rules().name_prefix(&prefix).send().await.expect("events:ListRules");
        for r in rules.rules() {
            let name = r.name().unwrap_or_default();
            if !RULE_PARTS.iter().any(|p| name == rule_name(c, p)) {
                continue;
            }
            let tags = sdk
                .events
                .list_tags_for_resource()
                .resource_arn(r.arn().unwrap_or_default())
                .send()
                .await
                .expect("events:ListTagsForResource");
            let targets = sdk.events.list_targets_by_rule().rule(name).send().await.expect("events:ListTargetsByRule");
            inv.rules.push((
                name.to_string(),
                tags.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect(),
                targets.targets().len(),
            ));
        }

        let entries = sdk.eks.list_access_entries().cluster_name(c).send().await.expect("eks:ListAccessEntries");
        for arn in entries.access_entries() {
            if !arn.ends_with(&node_role_arn_suffix) {
                continue;
            }
            let d =
                sdk.eks.describe_access_entry().cluster_name(c).principal_arn(arn).send().await.expect("eks:DescribeAccessEntry");
            let tags = d.access_entry().and_then(|e| e.tags()).map(|m| m.clone().into_iter().collect()).unwrap_or_default();
            inv.access_entries.push((arn.clone(), tags));
        }

        for a in list_karpenter_associations(sdk, c).await {
            if a.namespace() != Some("kube-system") || a.service_account() != Some("karpenter") {
                continue;
            }
            let id = a.association_id().unwrap_or_default();
            let d = describe_association(sdk, c, id).await;
            let tags = d.association().and_then(|x| x.tags()).map(|m| m.clone().into_iter().collect()).unwrap_or_default();
            inv.pod_identities.push((id.to_string(), tags));
        }
        inv
    })
}

/// Every object that exists carries `karpctl.io/cluster=<c>`: nothing karpctl made is an orphan.
fn assert_all_owned(inv: &Inventory, c: &str, when: &str) {
    let mut untagged = Vec::new();
    let mut check = |what: &str, name: &str, tags: &BTreeMap<String, String>| {
        if tags.get(OWNER_TAG).map(String::as_str) != Some(c) {
            untagged.push(format!("{what} {name} tags={tags:?}"));
        }
    };
    for (n, t) in &inv.queues {
        check("queue", n, t);
    }
    for (n, t) in &inv.roles {
        check("role", n, t);
    }
    for (n, t) in &inv.policies {
        check("policy", n, t);
    }
    for (n, t, _) in &inv.profiles {
        check("instance profile", n, t);
    }
    for (n, t, _) in &inv.rules {
        check("rule", n, t);
    }
    for (n, t) in &inv.access_entries {
        check("access entry", n, t);
    }
    for (n, t) in &inv.pod_identities {
        check("pod identity association", n, t);
    }
    assert!(untagged.is_empty(), "{when}: objects without `{OWNER_TAG}={c}` (orphans): {untagged:#?}");
}

/// Exactly one of everything a converged default plan makes, each tagged as karpctl's.
fn assert_converged_once(sdk: &Sdk, c: &str, instance_profile: bool) -> Inventory {
    let inv = inventory(sdk, c);
    assert_eq!(inv.queues.len(), 1, "exactly one queue {}: {inv:#?}", queue_name(c));
    let roles: BTreeSet<&str> = inv.roles.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(inv.roles.len(), 2, "two roles under {}: {inv:#?}", iam_path(c));
    assert_eq!(roles, BTreeSet::from([controller_role(c).as_str(), node_role(c).as_str()]), "{inv:#?}");
    let pols: BTreeSet<&str> = inv.policies.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(inv.policies.len(), 5, "five controller policies: {inv:#?}");
    assert_eq!(pols.len(), 5, "no policy twice: {inv:#?}");
    assert_eq!(inv.rules.len(), RULE_PARTS.len(), "every rule: {inv:#?}");
    for (n, _, targets) in &inv.rules {
        assert_eq!(*targets, 1, "rule {n} has exactly one target: {inv:#?}");
    }
    assert_eq!(inv.access_entries.len(), 1, "exactly one access entry for the node role: {inv:#?}");
    assert_eq!(inv.pod_identities.len(), 1, "exactly one Pod Identity association kube-system/karpenter: {inv:#?}");
    if instance_profile {
        assert_eq!(inv.profiles.len(), 1, "exactly one instance profile: {inv:#?}");
        assert_eq!(inv.profiles[0].2, vec![node_role(c)], "the profile holds the node role: {inv:#?}");
    } else {
        assert!(inv.profiles.is_empty(), "no instance profile unless asked: {inv:#?}");
    }
    assert_all_owned(&inv, c, "after convergence");
    inv
}

/// `up` succeeded, and `diff` straight to the emulator (no proxy) finds nothing to do.
fn assert_up_converged(wd: &Workdir, c: &str, up: &Run) {
    assert_eq!(up.code, 0, "up must converge despite the faults: {up:?}");
    assert!(!up.stderr.contains("panicked"), "{up:?}");
    let d = diff_direct(wd, c);
    assert_eq!(d.code, 0, "diff after up must be in sync: {d:?}");
    assert!(d.stdout.contains("No changes"), "{d:?}");
}

fn seeded(prefix: &str) -> (String, Workdir) {
    let c = cluster_name(prefix);
    seed(&c, &[]);
    (c, Workdir::new())
}

// ------------------------------------------------------------------- transient faults (item 2)

fn per_service(fail: u32, pass: u32, errors: &[(&str, Value)]) -> Vec<Value> {
    errors.iter().map(|(svc, err)| json!({"service": svc, "sequence": {"fail": fail, "pass": pass}, "error": err})).collect()
}

/// Services every `up` on a fresh cluster calls (EC2 for the discovery tags, KMS for the key
/// karpctl would have made for the queue, CloudTrail for the Karpenter that runs).
const CALLED: [&str; 8] = ["iam", "sts", "sqs", "events", "eks", "ec2", "kms", "cloudtrail"];

fn assert_every_service_faulted(px: &Proxy) {
    let by = px.by_service();
    for svc in CALLED {
        let (req, faulted) = by.get(svc).copied().unwrap_or((0, 0));
        assert!(req > 0 && faulted > 0, "service {svc} saw {req} request(s) and {faulted} fault(s): {by:?}");
    }
    for (svc, (req, faulted)) in &by {
        assert!(*req == 0 || *faulted > 0, "service {svc} was called but never faulted: {by:?}");
    }
}

#[test]
fn thirty_percent_throttling_on_every_service_converges_without_duplicates() {
    let (c, wd) = seeded("f-thr");
    // 3 of every 10 requests per service are throttled, in the service's own throttling shape.
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!(per_service(
            3,
            7,
            &[
                ("iam", json!({"code": "Throttling", "message": "Rate exceeded"})),
                ("sts", json!({"code": "Throttling", "message": "Rate exceeded"})),
                ("sqs", json!({"code": "RequestThrottled", "status": 503, "message": "Rate exceeded"})),
                ("events", json!({"code": "ThrottlingException", "message": "Rate exceeded"})),
                ("eks", json!({"code": "ThrottlingException", "message": "Rate exceeded"})),
                ("ec2", json!({"code": "RequestLimitExceeded", "message": "Request limit exceeded."})),
                ("kms", json!({"code": "ThrottlingException", "message": "Rate exceeded"})),
                ("cloudtrail", json!({"code": "ThrottlingException", "message": "Rate exceeded"})),
            ]
        )),
    );
    let up = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &up);
    assert_every_service_faulted(&px);
    // karpctl's own accounting sees every injected fault as one retried attempt.
    assert_eq!(stats_retries(&up), px.faulted_total(), "--stats retries = faults injected: {up:?}");
    assert_converged_once(&sdk(), &c, false);
}

#[test]
fn five_xx_bursts_on_every_service_converge_without_duplicates() {
    let (c, wd) = seeded("f-5xx");
    // Bursts of 3 server errors, then 4 successes, repeating, on every service.
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!(per_service(
            3,
            4,
            &[
                ("iam", json!({"code": "ServiceFailure", "status": 500, "message": "Internal failure"})),
                ("sts", json!({"code": "InternalFailure", "status": 500, "message": "Internal failure"})),
                ("sqs", json!({"code": "InternalError", "status": 500, "message": "We encountered an internal error."})),
                ("events", json!({"code": "InternalException", "status": 500, "message": "Internal error"})),
                ("eks", json!({"code": "ServerException", "status": 500, "message": "Internal server error"})),
                ("ec2", json!({"code": "Unavailable", "status": 503, "message": "The server is overloaded"})),
                ("kms", json!({"code": "KMSInternalException", "status": 500, "message": "Internal failure"})),
                ("cloudtrail", json!({"code": "InternalFailure", "status": 500, "message": "Internal failure"})),
            ]
        )),
    );
    let up = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &up);
    assert_every_service_faulted(&px);
    assert_converged_once(&sdk(), &c, false);
}

#[test]
fn a_server_error_that_does_not_end_gets_eight_attempts_then_a_clear_failure() {
    let (c, wd) = seeded("f-5xx-end");
    // Every CreateQueue answers 500: the SDK retries it as a transient error, but only up to
    // OTHER_ATTEMPTS (8); throttling alone gets the client's full 16.
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "sqs", "operation": "CreateQueue",
                "error": {"code": "InternalError", "status": 500, "message": "We encountered an internal error."}}]),
    );
    let up = up_via(&wd, &c, &px, &[]);
    assert_eq!(up.code, 1, "{up:?}");
    assert!(up.stderr.contains("CreateQueue"), "the failure names the call: {up:?}");
    assert_eq!(px.fired("CreateQueue"), 8, "8 attempts, not the 16 throttling gets: {up:?}");
}

#[test]
fn connection_resets_and_lost_responses_converge_without_duplicates() {
    let (c, wd) = seeded("f-rst");
    // Lost responses first (narrow rules win): the create reaches the emulator, the client sees
    // the connection die mid-body and tries again, so the retry meets the object it made.
    let mut rules: Vec<Value> = [
        ("iam", "CreateRole"),
        ("iam", "CreatePolicy"),
        ("iam", "AttachRolePolicy"),
        ("sqs", "CreateQueue"),
        ("sqs", "SetQueueAttributes"),
        ("events", "PutRule"),
        ("events", "PutTargets"),
        ("eks", "CreateAccessEntry"),
        ("eks", "CreatePodIdentityAssociation"),
    ]
    .iter()
    .map(|(s, op)| json!({"service": s, "operation": op, "times": 1, "response": {"abort_frac": 0.5}}))
    .collect();
    // Then: every fourth request on every service has its connection reset before forwarding.
    for svc in CALLED {
        rules.push(json!({"service": svc, "sequence": {"fail": 1, "pass": 3}, "reset": true}));
    }
    let px = Proxy::start(&wd, &c, &endpoint(), json!(rules));
    let up = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &up);
    assert_every_service_faulted(&px);
    for op in ["CreateRole", "CreatePolicy", "CreateQueue", "PutRule", "CreateAccessEntry", "CreatePodIdentityAssociation"] {
        assert!(px.fired(op) >= 1, "a response to {op} was lost");
    }
    assert_converged_once(&sdk(), &c, false);
}

#[test]
fn latency_spikes_and_gateway_timeouts_converge_without_duplicates() {
    let (c, wd) = seeded("f-lat");
    let mut rules = vec![
        // Two requests held, then answered 504 RequestTimeout (the SDK retries them).
        json!({"service": "iam", "operation": "GetRole", "times": 1, "timeout_ms": 1500}),
        json!({"service": "events", "operation": "PutRule", "times": 1, "timeout_ms": 1500}),
    ];
    // One request in five on every service waits 1.5 s before it is forwarded.
    for svc in CALLED {
        rules.push(json!({"service": svc, "sequence": {"fail": 1, "pass": 4}, "latency": 1500}));
    }
    let px = Proxy::start(&wd, &c, &endpoint(), json!(rules));
    let up = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &up);
    assert_every_service_faulted(&px);
    for op in ["GetRole", "PutRule"] {
        let timeouts = px.fired_log_of(op).iter().filter(|f| f["action"].as_str().unwrap_or("").contains("timeout")).count();
        assert_eq!(timeouts, 1, "one {op} was held and answered 504: {:?}", px.fired_log_of(op));
    }
    assert_converged_once(&sdk(), &c, false);
}

#[test]
fn requests_queued_for_their_turn_at_concurrency_1_never_time_out() {
    // At --concurrency 1 every request waits for the one slot; with each call taking 800 ms, a
    // request queued behind the read-ahead, discovery and preflight waits many seconds. Waiting
    // is not being on the wire: it must not trip the SDK's stalled-upload check (5 s grace) or a
    // per-attempt timeout, so nothing is retried.
    let (c, wd) = seeded("f-queue");
    let px = Proxy::start(&wd, &c, &endpoint(), json!([{"service": "*", "latency": 800}]));
    let diff = karpctl_via(&wd, &["diff", "--cluster", &c, "--concurrency", "1", "--stats"], &px, &[]);
    assert_eq!(diff.code, 2, "diff of a fresh cluster shows the plan: {diff:?}");
    assert_eq!(stats_retries(&diff), 0, "no request timed out while it waited: {diff:?}");
}

// ------------------------------------------------------ eventual consistency (item 2, docs/aws-behaviour.md section 5)

/// `up` through a proxy injecting `rules`: converges, the injected error was really served
/// `times` times, and the progress on stderr shows each retry of `operation` with `code`.
fn consistency_up(prefix: &str, plan_extra: &str, rules: impl Fn(&str) -> Value, op: &str, times: usize, progress: &str) {
    let (c, wd) = seeded(prefix);
    if !plan_extra.is_empty() {
        wd.plan_for(&c, plan_extra);
    }
    let px = Proxy::start(&wd, &c, &endpoint(), rules(&c));
    let up = up_via(&wd, &c, &px, &[("KARPCTL_CONSISTENCY_DEADLINE_SECS", "20")]);
    assert_eq!(px.fired(op), times, "{op} must have met the injected error {times} times: {up:?}");
    let retries = up.stderr.lines().filter(|l| l.contains(progress) && l.contains("retry")).count();
    assert!(retries >= times, "stderr must show each retry ({progress:?}, {times}x): {up:?}");
    assert_up_converged(&wd, &c, &up);
    assert_converged_once(&sdk(), &c, !plan_extra.is_empty());
}

#[test]
fn create_queue_deleted_recently_is_retried_until_the_name_is_free() {
    consistency_up(
        "f-qdr",
        "",
        |c| {
            json!([{"service": "sqs", "operation": "CreateQueue", "times": 3, "body": format!("QueueName == '{}'", queue_name(c)),
                    "error": {"code": "QueueDeletedRecently",
                              "message": "You must wait 60 seconds after deleting a queue before you can create another with the same name."}}])
        },
        "CreateQueue",
        3,
        "queue: sqs:CreateQueue returned AWS.SimpleQueueService.QueueDeletedRecently",
    );
}

#[test]
fn queue_policy_rejected_while_the_queue_propagates_is_retried() {
    // microburst serves SQS codes as `AWS.SimpleQueueService.<code>` (x-amzn-query-error); real
    // SQS sends this one bare. karpctl must accept both spellings (docs/aws-behaviour.md section 5).
    consistency_up(
        "f-qpol",
        "",
        |_| {
            json!([{"service": "sqs", "operation": "SetQueueAttributes", "times": 2, "body": "Attributes.Policy",
                    "error": {"code": "InvalidAttributeValue", "message": "Invalid value for the parameter Policy."}}])
        },
        "SetQueueAttributes",
        2,
        "queue-policy: sqs:SetQueueAttributes returned",
    );
}

#[test]
fn access_entry_for_a_role_eks_does_not_see_yet_is_retried() {
    consistency_up(
        "f-ae",
        "",
        |_| {
            json!([{"service": "eks", "operation": "CreateAccessEntry", "times": 3,
                    "error": {"code": "InvalidParameterException", "message": "The specified principalArn is invalid: invalid principal"}}])
        },
        "CreateAccessEntry",
        3,
        "node-access-entry: eks:CreateAccessEntry returned InvalidParameterException",
    );
}

#[test]
fn pod_identity_for_a_role_eks_does_not_see_yet_is_retried() {
    consistency_up(
        "f-pia",
        "",
        |_| {
            json!([{"service": "eks", "operation": "CreatePodIdentityAssociation", "times": 3,
                    "error": {"code": "InvalidParameterException", "message": "Role provided in the request does not exist"}}])
        },
        "CreatePodIdentityAssociation",
        3,
        "pod-identity: eks:CreatePodIdentityAssociation returned InvalidParameterException",
    );
}

#[test]
fn add_role_to_instance_profile_before_iam_sees_either_is_retried() {
    consistency_up(
        "f-ip",
        "[identity]\ninstance_profile = true\n",
        |c| {
            json!([
                {"service": "iam", "operation": "AddRoleToInstanceProfile", "times": 2,
                 "error": {"code": "NoSuchEntity", "status": 404, "message": format!("The role with name {} cannot be found.", node_role(c))}},
                {"service": "iam", "operation": "AddRoleToInstanceProfile", "times": 1,
                 "error": {"code": "InvalidParameterValue", "status": 400, "message": "Invalid IAM Instance Profile name"}}
            ])
        },
        "AddRoleToInstanceProfile",
        3,
        "node-instance-profile: iam:AddRoleToInstanceProfile returned",
    );
}

#[test]
fn attach_role_policy_concurrent_modification_is_retried() {
    consistency_up(
        "f-arp",
        "",
        |_| {
            json!([{"service": "iam", "operation": "AttachRolePolicy", "times": 3, "body": "contains(PolicyArn, 'AmazonEKSWorkerNodePolicy')",
                    "error": {"code": "ConcurrentModification", "status": 409,
                              "message": "Cannot perform the operation on the same entity concurrently; another request is in progress."}}])
        },
        "AttachRolePolicy",
        3,
        "node-role-policy-AmazonEKSWorkerNodePolicy: iam:AttachRolePolicy returned ConcurrentModification",
    );
}

/// `up` straight to the emulator, then `down --yes` through a proxy injecting `rules`: every
/// object is gone, the retries were shown, and a second `down` has nothing left to do.
fn consistency_down(prefix: &str, rules: impl Fn(&str) -> Value, op: &str, times: usize, progress: &str) {
    let (c, wd) = seeded(prefix);
    let sdk = sdk();
    let first = karpctl(&wd, &["up", "--cluster", &c]);
    let inv = inventory(&sdk, &c);
    assert!(
        inv.roles.len() == 2 && inv.rules.len() == 5 && inv.queues.len() == 1,
        "set-up up made the roles, queue and rules: {first:?}\n{inv:#?}"
    );

    let px = Proxy::start(&wd, &c, &endpoint(), rules(&c));
    let down = karpctl_via(&wd, &["down", "--cluster", &c, "--yes"], &px, &[("KARPCTL_CONSISTENCY_DEADLINE_SECS", "20")]);
    assert_eq!(px.fired(op), times, "{op} must have met the injected error {times} times: {down:?}");
    let retries = down.stderr.lines().filter(|l| l.contains(progress) && l.contains("retry")).count();
    assert!(retries >= times, "stderr must show each retry ({progress:?}, {times}x): {down:?}");
    assert_eq!(down.code, 0, "down must finish despite the faults: {down:?}");
    let inv = inventory(&sdk, &c);
    assert!(
        inv.queues.is_empty()
            && inv.roles.is_empty()
            && inv.policies.is_empty()
            && inv.rules.is_empty()
            && inv.access_entries.is_empty()
            && inv.pod_identities.is_empty(),
        "down removed everything: {inv:#?}"
    );
    let again = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.writes(), 0, "a second down has nothing to do: {}", again.stdout);
}

#[test]
fn delete_role_conflict_while_detachments_propagate_is_retried() {
    consistency_down(
        "f-drc",
        |c| {
            json!([{"service": "iam", "operation": "DeleteRole", "times": 3, "body": format!("RoleName == '{}'", node_role(c)),
                    "error": {"code": "DeleteConflict", "status": 409, "message": "Cannot delete entity, must detach all policies first."}}])
        },
        "DeleteRole",
        3,
        "node-role: iam:DeleteRole returned DeleteConflict",
    );
}

#[test]
fn delete_rule_that_still_has_targets_is_retried() {
    consistency_down(
        "f-drt",
        |c| {
            json!([{"service": "events", "operation": "DeleteRule", "times": 3, "body": format!("Name == '{}'", rule_name(c, "HealthEvent")),
                    "error": {"code": "ValidationException", "message": "Rule can't be deleted since it has targets."}}])
        },
        "DeleteRule",
        3,
        "rule-HealthEvent: events:DeleteRule returned ValidationException",
    );
}

#[test]
fn a_consistency_error_that_never_clears_fails_at_the_deadline_naming_it() {
    let (c, wd) = seeded("f-dl");
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "eks", "operation": "CreateAccessEntry",
                "error": {"code": "InvalidParameterException", "message": "The specified principalArn is invalid: invalid principal"}}]),
    );
    let t = Instant::now();
    let up = up_via(&wd, &c, &px, &[("KARPCTL_CONSISTENCY_DEADLINE_SECS", "3")]);
    let took = t.elapsed();
    assert_eq!(up.code, 1, "{up:?}");
    assert!(took < Duration::from_secs(20), "the 3 s consistency deadline bounds the run (took {took:?}): {up:?}");
    assert!(px.fired("CreateAccessEntry") >= 2, "retried before giving up: {up:?}");
    assert!(up.stderr.contains("node-access-entry: eks:CreateAccessEntry returned InvalidParameterException"), "{up:?}");
    let err = up.stderr.split("error:").last().unwrap_or_default();
    assert!(
        err.contains("node-access-entry") && err.contains("InvalidParameterException") && err.contains("invalid principal"),
        "the failure names the step, the AWS code and the message: {up:?}"
    );
    px.clear_rules();
    let again = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &again);
    assert_converged_once(&sdk(), &c, false);
}

#[test]
fn a_denied_read_fails_the_run_naming_the_object_and_is_made_once() {
    // Reads start while preflight runs (the read-ahead); a read that fails there is reported as
    // it is once preflight has passed, not made again.
    let (c, wd) = seeded("f-rdeny");
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "events", "operation": "ListRules",
                "error": {"code": "AccessDeniedException", "status": 400, "message": "not authorized to perform: events:ListRules"}}]),
    );
    let diff = karpctl_via(&wd, &["diff", "--cluster", &c], &px, &[]);
    assert_eq!(diff.code, 1, "{diff:?}");
    assert!(diff.stderr.contains("reading aws_cloudwatch_event_rule Karpenter-"), "the error names the object: {diff:?}");
    assert!(diff.stderr.contains("events:ListRules: AccessDeniedException"), "and the AWS code: {diff:?}");
    assert_eq!(
        px.fired("ListRules"),
        1,
        "the cluster's rules listed once (the failure too is shared by the five rule reads), never again after the read-ahead: {diff:?}"
    );
}

#[test]
fn a_permanent_access_denied_fails_cleanly_skips_dependents_and_converges_once_lifted() {
    let (c, wd) = seeded("f-deny");
    let msg = format!(
        "User: arn:aws:sts::000000000000:assumed-role/ci/karpctl is not authorized to perform: sqs:createqueue on resource: arn:aws:sqs:us-east-1:000000000000:Karpenter-{c} because no identity-based policy allows the sqs:createqueue action"
    );
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "sqs", "operation": "CreateQueue", "error": {"code": "AccessDenied", "status": 403, "message": msg}}]),
    );
    let up = up_via(&wd, &c, &px, &[]);
    assert_eq!(up.code, 1, "{up:?}");
    assert!(!up.stderr.contains("panicked"), "{up:?}");
    assert_eq!(px.fired("CreateQueue"), 1, "a permanent error is not retried: {up:?}");
    // The failure names the AWS operation, error code and message.
    let err = up.stderr.split("error:").last().unwrap_or_default();
    assert!(err.contains("queue") && err.contains("sqs:CreateQueue") && err.contains("AccessDenied"), "{up:?}");
    assert!(err.contains("is not authorized to perform: sqs:createqueue"), "the AWS message is shown: {up:?}");
    // Dependents skipped, by name.
    assert!(up.stderr.contains("queue-policy: skipped (queue did not complete)"), "{up:?}");
    for p in RULE_PARTS {
        assert!(up.stderr.contains(&format!("rule-{p}: skipped")), "rule-{p} skipped: {up:?}");
    }
    // Independent steps done.
    assert!(up.stderr.contains("node-role: Creation complete"), "{up:?}");
    assert!(up.stderr.contains("controller-role: Creation complete"), "{up:?}");
    let sdk = sdk();
    let inv = inventory(&sdk, &c);
    assert!(inv.queues.is_empty() && inv.rules.is_empty(), "nothing made for the failed queue: {inv:#?}");
    assert_eq!(inv.roles.len(), 2, "independent IAM roles were made: {inv:#?}");
    assert_eq!(inv.access_entries.len(), 1, "the access entry (independent of the queue) was made: {inv:#?}");
    assert_all_owned(&inv, &c, "after the failed up");

    // The permission is granted: the next up, through the same proxy, converges.
    px.clear_rules();
    let again = up_via(&wd, &c, &px, &[]);
    assert_up_converged(&wd, &c, &again);
    assert_converged_once(&sdk, &c, false);
}

// ------------------------------------------------------------------------------ crashes (item 3)

#[test]
fn up_killed_at_several_points_converges_on_the_next_run_with_no_orphan() {
    // Every call takes 150 ms through the proxy, so there is always a call in flight when it is
    // killed. Kill points, by progress rather than by time (a faster karpctl must not move
    // them): as soon as the first step started (the first wave in flight, nothing done), after
    // 10 of the 29 steps are done, and after 22 are. One cluster per kill point.
    let wd = Workdir::new();
    let px = Proxy::start(&wd, &cluster_name("f-crash-px"), &endpoint(), json!([{"service": "*", "latency": 150}]));
    let sdk = sdk();
    let points = [0usize, 10, 22];
    // Seed the clusters side by side (each seed takes seconds).
    let clusters: Vec<String> = points.iter().map(|_| cluster_name("f-kill")).collect();
    std::thread::scope(|s| {
        for c in &clusters {
            s.spawn(move || seed(c, &[]));
        }
    });
    for (done_before, c) in points.into_iter().zip(&clusters) {
        let c = c.as_str();
        let mut run = spawn_via(&wd, &["up", "--cluster", c], &px);
        assert!(run.wait_for_line(": Creating...", Duration::from_secs(30)).is_some(), "up started applying");
        for k in 0..done_before {
            assert!(
                run.wait_for_line("complete after", Duration::from_secs(30)).is_some(),
                "step {} of {done_before} completed",
                k + 1
            );
        }
        let point = format!("once {done_before} steps were done");
        assert!(run.running(), "up must still be running {point} to be killed mid-flight");
        let killed = run.kill9();
        let started = killed.stderr.lines().filter(|l| l.contains(": Creating...")).count();
        let done = killed.stderr.lines().filter(|l| l.contains("complete after")).count();
        let point = format!("SIGKILL {point} ({started} step(s) started, {done} done)");
        eprintln!("{point}");
        assert!(started > 0, "{point}: killed while applying: {killed:?}");

        // Whatever the kill left behind is already tagged as karpctl's.
        let inv = inventory(&sdk, c);
        assert_all_owned(&inv, c, &format!("after {point}"));

        let up = karpctl(&wd, &["up", "--cluster", c]);
        assert_eq!(up.code, 0, "up after {point} converges: {up:?}\nkilled run: {killed:?}");
        assert_up_converged(&wd, c, &up);
        assert_converged_once(&sdk, c, false);
    }
}

#[test]
fn sigint_waits_for_in_flight_calls_reports_and_exits_130() {
    let (c, wd) = seeded("f-int");
    let px = Proxy::start(&wd, &c, &endpoint(), json!([{"service": "*", "latency": 400}]));
    let run = spawn_via(&wd, &["up", "--cluster", &c], &px);
    let first = run.wait_for_line("Creating...", Duration::from_secs(30));
    assert!(first.is_some(), "up started applying");
    let pid = run.pid().to_string();
    let st = Command::new("kill").args(["-INT", &pid]).status().expect("kill -INT");
    assert!(st.success());
    let r = run.finish(Duration::from_secs(45));
    assert_eq!(r.code, 130, "interrupted runs exit 130: {r:?}");
    assert!(
        r.stderr.contains("Interrupt received") && r.stderr.contains("in-flight"),
        "says it waits for in-flight calls: {r:?}"
    );
    assert!(r.stderr.contains("not started"), "says which steps did not start: {r:?}");
    // Every step that had started was waited for: it finished, failed or was stopped where it
    // waited or retried; none was abandoned.
    for line in r.stderr.lines().filter(|l| l.contains(": Creating...")) {
        let id = line.split(':').next().unwrap();
        let ended = r.stderr.lines().any(|l| {
            ["Creation complete", "failed", "stopped by the interrupt"].iter().any(|e| l.starts_with(&format!("{id}: {e}")))
        });
        assert!(ended, "step {id} was in flight at the interrupt and must have been waited for: {r:?}");
    }
    let sdk = sdk();
    assert_all_owned(&inventory(&sdk, &c), &c, "after SIGINT");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_up_converged(&wd, &c, &up);
    assert_converged_once(&sdk, &c, false);
}

/// Send SIGINT to a spawned karpctl.
fn sigint(run: &Spawned) {
    let st = Command::new("kill").args(["-INT", &run.pid().to_string()]).status().expect("kill -INT");
    assert!(st.success());
}

fn epoch_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn sigint_stops_retries_at_once_prints_the_summary_and_exits_130() {
    let (c, wd) = seeded("f-int-thr");
    // Every PutRule is throttled: each rule's step retries (16 attempts, backing off up to 10 s
    // each: half a minute and more) until Ctrl-C stops it.
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "events", "operation": "PutRule", "error": {"code": "ThrottlingException", "message": "Rate exceeded"}}]),
    );
    let run = spawn_via(&wd, &["up", "--cluster", &c], &px);
    assert!(run.wait_for_line("rule-", Duration::from_secs(60)).is_some(), "the rules' steps started");
    let deadline = Instant::now() + Duration::from_secs(30);
    while px.fired("PutRule") < 8 {
        assert!(Instant::now() < deadline, "PutRule was throttled again and again: {}", px.fired("PutRule"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let (signal, at) = (Instant::now(), epoch_now());
    sigint(&run);
    let r = run.finish(Duration::from_secs(60));
    let took = signal.elapsed();
    assert_eq!(r.code, 130, "{r:?}");
    assert!(r.stdout.contains("Apply incomplete! Resources:"), "the summary: {r:?}");
    assert!(r.stderr.contains("Interrupted:") && r.stderr.contains("not started or stopped part-way"), "{r:?}");
    assert!(r.stderr.contains("rule-HealthEvent: stopped by the interrupt"), "the retrying step says it was stopped: {r:?}");
    // No retry went out after the signal: at most the attempts already on their way (one per
    // rule step, two if one was sent in the instant the signal came).
    let rules = r.stderr.lines().filter(|l| l.starts_with("rule-") && l.contains(": Creating...")).count();
    let after: Vec<Value> = px.fired_log_of("PutRule").into_iter().filter(|f| f["ts"].as_f64().unwrap_or(0.0) > at).collect();
    assert!(after.len() <= 2 * rules, "{} PutRule attempt(s) after the signal for {rules} rule step(s): {after:?}", after.len());
    assert!(took < Duration::from_secs(8), "ended {took:?} after the signal (retries ran 16-31 s before)");
    assert_all_owned(&inventory(&sdk(), &c), &c, "after SIGINT");
}

#[test]
fn a_second_sigint_leaves_the_calls_in_flight_and_still_prints_the_summary() {
    let (c, wd) = seeded("f-int-twice");
    // CreateQueue takes 20 s: the first Ctrl-C waits for it, the second does not.
    let px = Proxy::start(&wd, &c, &endpoint(), json!([{"service": "sqs", "operation": "CreateQueue", "latency": 20000}]));
    let run = spawn_via(&wd, &["up", "--cluster", &c], &px);
    assert!(run.wait_for_line("queue: Creating...", Duration::from_secs(60)).is_some(), "the queue's step started");
    std::thread::sleep(Duration::from_millis(500));
    sigint(&run);
    assert!(run.wait_for_line("Interrupt received", Duration::from_secs(10)).is_some(), "the first Ctrl-C is said");
    std::thread::sleep(Duration::from_millis(1000));
    let mut run = run;
    assert!(run.running(), "the first Ctrl-C waits for the call in flight");
    let signal = Instant::now();
    sigint(&run);
    let r = run.finish(Duration::from_secs(30));
    assert_eq!(r.code, 130, "{r:?}");
    assert!(signal.elapsed() < Duration::from_secs(8), "the second Ctrl-C does not wait: {:?}", signal.elapsed());
    assert!(r.stdout.contains("Apply incomplete! Resources:"), "the summary, even so: {r:?}");
    assert!(r.stderr.contains("queue: stopped by the interrupt"), "{r:?}");
    assert!(r.stderr.contains("Interrupted:") && !r.stderr.contains("leaving without its summary"), "{r:?}");
    // What a second Ctrl-C leaves is a crash's state: the next run converges.
    drop(px);
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_up_converged(&wd, &c, &up);
    assert_converged_once(&sdk(), &c, false);
}

// ------------------------------------------------------------------------------- races (item 4)

fn assert_ended_cleanly(r: &Run, what: &str) {
    let err = r.stderr.lines().skip_while(|l| !l.starts_with("error:")).collect::<Vec<_>>().join("\n");
    eprintln!("{what}: exit {} {err}", r.code);
    assert!(r.code == 0 || r.code == 1, "{what}: exit 0, or 1 with a message: {r:?}");
    assert!(!r.stderr.contains("panicked"), "{what}: {r:?}");
    if r.code == 1 {
        assert!(r.stderr.contains("error:"), "{what} failed without saying why: {r:?}");
    }
}

#[test]
fn two_ups_at_once_for_the_same_cluster_corrupt_nothing() {
    let (c, wd) = seeded("f-race");
    // A little latency so that both runs read "missing" before either creates.
    let px = Proxy::start(&wd, &c, &endpoint(), json!([{"service": "*", "latency": 150}]));
    let a = spawn_via(&wd, &["up", "--cluster", &c], &px);
    let b = spawn_via(&wd, &["up", "--cluster", &c], &px);
    let (a, b) = (a.finish(Duration::from_secs(50)), b.finish(Duration::from_secs(50)));
    assert_ended_cleanly(&a, "first up");
    assert_ended_cleanly(&b, "second up");
    let sdk = sdk();
    assert_all_owned(&inventory(&sdk, &c), &c, "after the race");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_up_converged(&wd, &c, &up);
    assert_converged_once(&sdk, &c, false);
}

#[test]
fn down_racing_up_ends_consistent_after_a_final_up() {
    let (c, wd) = seeded("f-dru");
    let sdk = sdk();
    let first = karpctl(&wd, &["up", "--cluster", &c]);
    assert!(inventory(&sdk, &c).queues.len() == 1, "set-up up made the queue: {first:?}");
    let px = Proxy::start(&wd, &c, &endpoint(), json!([{"service": "*", "latency": 150}]));
    let down = spawn_via(&wd, &["down", "--cluster", &c, "--yes"], &px);
    let up = spawn_via(&wd, &["up", "--cluster", &c], &px);
    let (down, up) = (down.finish(Duration::from_secs(50)), up.finish(Duration::from_secs(50)));
    assert_ended_cleanly(&down, "down");
    assert_ended_cleanly(&up, "up");
    assert_all_owned(&inventory(&sdk, &c), &c, "after down raced up");
    let fin = karpctl(&wd, &["up", "--cluster", &c]);
    assert_up_converged(&wd, &c, &fin);
    assert_converged_once(&sdk, &c, false);
}

// ----------------------------------------------------------------------------- secrets (item 7)

#[test]
fn no_verbosity_prints_the_secret_key_or_session_token() {
    const SECRET: &str = "SECRETsecret123kSkpQxZ9tVb7Lm2Nw4Rj8Hd6Fg0Ye";
    const TOKEN: &str = "TOKENtoken456IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ";
    let (c, wd) = seeded("f-sec");
    let creds = [("AWS_SECRET_ACCESS_KEY", SECRET), ("AWS_SESSION_TOKEN", TOKEN)];
    let leak = |r: &Run, what: &str| {
        let all = r.all();
        // Also the parts: a token split across lines or partly masked is still a leak.
        for needle in [SECRET, TOKEN, &SECRET[6..30], &TOKEN[5..40]] {
            assert!(!all.contains(needle), "{what} printed a credential ({needle}): {r:?}");
        }
    };
    let up = karpctl_env(&wd, &["up", "--cluster", &c, "-vv"], &creds);
    leak(&up, "up -vv");
    assert!(up.stderr.lines().count() > 50, "-vv really logs SDK details: {up:?}");
    let diff = karpctl_env(&wd, &["diff", "--cluster", &c, "-vv"], &creds);
    leak(&diff, "diff -vv");
    assert!(diff.stderr.lines().count() > 20, "{diff:?}");
    let diff = karpctl_env(&wd, &["diff", "--cluster", &c, "-vvv", "--output", "json", "--stats"], &creds);
    leak(&diff, "diff -vvv --output json");
    // Whatever RUST_LOG asks for.
    let diff = karpctl_env(&wd, &["diff", "--cluster", &c], &[creds[0], creds[1], ("RUST_LOG", "trace")]);
    leak(&diff, "diff with RUST_LOG=trace");
    // Error paths, verbose: a step failing on AWS's answer, then a preflight failing on STS.
    let (c2, wd2) = seeded("f-sec2");
    let px = Proxy::start(
        &wd2,
        &c2,
        &endpoint(),
        json!([{"service": "events", "operation": "PutRule", "error": {"code": "AccessDeniedException", "message": "User is not authorized to perform: events:PutRule"}}]),
    );
    let failing = karpctl_via(&wd2, &["up", "--cluster", &c2, "-vv"], &px, &creds);
    assert_eq!(failing.code, 1, "{failing:?}");
    assert!(failing.stderr.contains("AccessDeniedException"), "{failing:?}");
    leak(&failing, "up -vv with a failing step");
    px.add_rules(json!([{"service": "sts", "operation": "GetCallerIdentity", "times": 1,
                         "error": {"code": "ExpiredToken", "status": 400, "message": "The security token included in the request is expired"}}]));
    let failing = karpctl_via(&wd2, &["diff", "--cluster", &c2, "-vv"], &px, &creds);
    assert_eq!(failing.code, 1, "{failing:?}");
    assert!(failing.stderr.contains("ExpiredToken"), "{failing:?}");
    leak(&failing, "diff -vv with a failing preflight");
}
