//! The Karpenter that runs, as CloudTrail recorded it (issue #36; docs/running-karpenter.md):
//! `up`, `diff`, `doctor` and `import` through the lag proxy, whose `cloudtrail_events` rule
//! answers LookupEvents from scripted records in AWS's shape (neither emulator keeps any).

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const SCP: &str = "You are not authorized to perform this operation. User: arn:aws:sts::000000000000:assumed-role/KarpenterController/s is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:000000000000:fleet/* with an explicit deny in a service control policy. Encoded authorization failure message: EncOdEdScp";
const BOUNDARY: &str = "You are not authorized to perform this operation. User: arn:aws:sts::000000000000:assumed-role/KarpenterController/s is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:000000000000:fleet/* with an explicit deny in a permissions boundary. Encoded authorization failure message: EncOdEdBoundary";

fn role(account: &str, name: &str) -> String {
    format!("arn:aws:iam::{account}:role/{name}")
}

/// A call of `role` naming `version` in its user agent, `minutes_ago`.
fn call(role: &str, version: &str, minutes_ago: u64) -> Value {
    json!({"role": role, "event": "DescribeInstances", "source": "ec2.amazonaws.com", "agent": format!("karpenter.sh-{version}"), "minutes_ago": minutes_ago})
}

fn records(px: &LagProxy, records: Value) {
    // The lookups' pace is karpctl's (two a second); the proxy does not add its own here.
    px.set(json!({"cloudtrail_events": records, "cloudtrail_lookup_rps": 1000}));
}

fn setup(prefix: &str, extra: &str) -> (String, String, Workdir, LagProxy) {
    let c = cluster_name(prefix);
    let s = seed(&c, &[]);
    let account = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan_for(&c, extra);
    let px = LagProxy::start(&c, &endpoint());
    (c, account, wd, px)
}

#[test]
fn the_running_version_is_judged_against_the_pin_and_refusals_are_reported() {
    let (c, a, wd, px) = setup("run-pin", "[identity]\nkarpenter_version = \"1.10\"\n");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let node = role(&a, &format!("KarpenterNodeRole-{c}"));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    // The account's Spot role exists (doctor's exit code below is the running checks' alone).
    let _spot = spot_role_present(&sdk());

    // 1.12.3 runs against a 1.10 pin; another role's calls (1.14.0) are not the controller's.
    records(
        &px,
        json!([call(&controller, "1.12.3", 3), call(&controller, "1.12.3", 1), call(&role(&a, "SomeoneElse"), "1.14.0", 2)]),
    );
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "an error-level check: diff exits 1 as up does: {r:?}");
    let fs = found(&r.json());
    let lacks = with_code(&fs, "running-version-lacks-permissions");
    assert_eq!(lacks.len(), 1, "{fs:?}");
    assert_eq!(lacks[0]["severity"], "error");
    let m = lacks[0]["message"].as_str().unwrap();
    for want in ["1.12.3", "1.10", "ec2:DescribeInstanceStatus", "ec2:DescribePlacementGroups"] {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert!(!m.contains("1.14.0"), "another role's calls: {m}");
    assert!(lacks[0]["fix"].as_str().unwrap().contains("karpenter_version = \"1.12\""), "{}", lacks[0]);
    assert!(px.count("LookupEvents") >= 2, "ec2 and iam looked up");

    // up applies and exits 1: Karpenter cannot work with these permissions.
    let r = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!with_code(&found(&r.json()), "running-version-lacks-permissions").is_empty(), "{}", r.stdout);
    // A saved plan applied later is judged the same way.
    let saved = wd.path().join("saved.json");
    let saved = saved.to_str().unwrap();
    let r = run(&["diff", "--cluster", &c, "--out", saved]);
    assert!(std::path::Path::new(saved).exists(), "{r:?}");
    let r = run(&["up", "--plan-file", saved, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!with_code(&found(&r.json()), "running-version-lacks-permissions").is_empty(), "{}", r.stdout);

    // A rollout: both versions named, the newest to pin.
    records(&px, json!([call(&controller, "1.11.2", 4), call(&controller, "1.12.3", 1)]));
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    let lacks = with_code(&found(&r.json()), "running-version-lacks-permissions");
    let m = lacks[0]["message"].as_str().unwrap_or_else(|| panic!("{r:?}"));
    assert!(m.contains("1.12.3") && m.contains("1.11.2") && m.contains("rollout"), "{m}");

    // Refused calls of the controller (an SCP, a boundary) and of the node role: warnings in
    // diff, one doctor finding per action and kind with the count, the last time and the fix.
    let refused = |r: &str, msg: &str, ago: u64| {
        json!({"role": r, "event": "CreateFleet", "source": "ec2.amazonaws.com", "agent": "karpenter.sh-1.10.1",
               "minutes_ago": ago, "error_code": "Client.UnauthorizedOperation", "error_message": msg})
    };
    let ecr = json!({"role": node, "event": "GetAuthorizationToken", "source": "ecr.amazonaws.com", "agent": "aws-sdk-go/1.55",
        "minutes_ago": 7, "error_code": "AccessDeniedException",
        "error_message": format!("User: x is not authorized to perform: ecr:GetAuthorizationToken on resource: * with an explicit deny in a service control policy")});
    let iam_node = json!({"role": node, "event": "GetInstanceProfile", "source": "iam.amazonaws.com", "agent": "aws-sdk-go/1.55",
        "minutes_ago": 6, "error_code": "AccessDenied",
        "error_message": "User: x is not authorized to perform: iam:GetInstanceProfile on resource: instance profile p because no identity-based policy allows the iam:GetInstanceProfile action"});
    records(
        &px,
        json!([
            call(&controller, "1.10.1", 1),
            refused(&controller, SCP, 5),
            refused(&controller, SCP, 2),
            refused(&controller, BOUNDARY, 3),
            ecr,
            iam_node
        ]),
    );
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "converged; warnings only: {r:?}");
    let fs = found(&r.json());
    let refusals = with_code(&fs, "calls-refused");
    assert!(refusals.iter().all(|f| f["severity"] == "warning"), "{refusals:?}");
    let text = serde_json::to_string(&refusals).unwrap();
    assert!(text.contains("service control policy") && text.contains("permissions boundary"), "{text}");
    assert!(text.contains(&node) && text.contains("iam:GetInstanceProfile"), "the node role's refusals: {text}");
    assert!(with_code(&fs, "running-version-lacks-permissions").is_empty(), "1.10 runs: {fs:?}");

    let r = run(&["doctor", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let doc = r.json();
    let fs = findings(&doc);
    let refusals = with_code(&fs, "calls-refused");
    let scp = refusals
        .iter()
        .find(|f| {
            f["message"].as_str().unwrap().contains("ec2:CreateFleet")
                && f["message"].as_str().unwrap().contains("service control")
        })
        .unwrap_or_else(|| panic!("{refusals:?}"));
    assert!(scp["message"].as_str().unwrap().contains(" 2 time(s)"), "count: {scp}");
    assert_eq!(scp["resource"], "arn:aws:ec2:us-east-1:000000000000:fleet/*");
    assert!(scp["fix"].as_str().unwrap().contains("SCP") && scp["fix"].as_str().unwrap().contains("EncOdEdScp"), "{scp}");
    let boundary = refusals
        .iter()
        .find(|f| f["message"].as_str().unwrap().contains("permissions boundary"))
        .unwrap_or_else(|| panic!("{refusals:?}"));
    assert!(boundary["fix"].as_str().unwrap().contains("boundary"), "{boundary}");
    assert!(refusals.iter().any(|f| f["message"].as_str().unwrap().contains("ecr:GetAuthorizationToken")), "{refusals:?}");
    let kinds: BTreeSet<String> = refusals.iter().map(|f| f["message"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds.len(), 4, "one per action and kind: {refusals:?}");
    // doctor judges with the plan's pin, 1.10, as diff does: what runs, so no pin note.
    assert_eq!(doc["karpenter_version"], "1.10", "{doc}");
    assert!(with_code(&fs, "pin-newer-than-running").is_empty(), "{fs:?}");

    // A lookup AWS refuses: a warning naming the permission; the exit code is unchanged.
    px.set(json!({"cloudtrail_events": "AccessDenied"}));
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let w = with_code(&found(&r.json()), "cloudtrail-unreadable");
    assert_eq!((w.len(), w[0]["severity"].as_str()), (1, Some("warning")), "{r:?}");
    assert!(w[0]["message"].as_str().unwrap().contains("cloudtrail:LookupEvents"), "{w:?}");
    let r = run(&["doctor", "--cluster", &c, "--output", "json", "--karpenter-version", "1.10"]);
    let doc = r.json();
    let w = with_code(&findings(&doc), "cloudtrail-unreadable");
    assert_eq!(w[0]["severity"], "warning", "{doc}");
    assert_eq!(doc["summary"]["errors"], 0, "{doc}");

    // Nothing recorded: no finding in diff; doctor says so as a note, and exits 0.
    records(&px, json!([]));
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    for code in ["running-version-lacks-permissions", "calls-refused", "karpenter-not-seen", "cloudtrail-unreadable"] {
        assert!(with_code(&found(&doc), code).is_empty(), "{code}: {doc}");
    }
    // (judged on a day 1.10 was still supported: an out-of-support pin is a warning of its own)
    let args = ["doctor", "--cluster", &c, "--output", "json", "--karpenter-version", "1.10"];
    let r = karpctl_at(&wd, px.url(), &args, &[("KARPCTL_TODAY", "2026-03-25")]);
    let doc = r.json();
    assert_eq!(r.code, 0, "a note is not a problem: {doc}");
    assert_eq!(with_code(&findings(&doc), "karpenter-not-seen")[0]["severity"], "note", "{doc}");

    // import: no --karpenter-version, the running one is used and said where it came from.
    std::fs::remove_file(wd.path().join("plans").join(format!("{c}.toml"))).unwrap();
    let r = run(&["import", "--cluster", &c]);
    assert_eq!(r.code, 1, "nothing recorded: the flag is needed: {r:?}");
    assert!(r.stderr.contains("--karpenter-version"), "{r:?}");
    records(&px, json!([call(&controller, "1.12.3", 2)]));
    let r = run(&["import", "--cluster", &c, "--trail-window", "30m"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("from CloudTrail") && r.all().contains("karpenter.sh-1.12.3"), "{r:?}");
    let written = std::fs::read_to_string(wd.path().join("plans").join(format!("{c}.toml"))).unwrap();
    assert!(written.contains("karpenter_version = \"1.12\""), "{written}");
    let lookups = px.calls_json().into_iter().filter(|c| c["operation"] == "LookupEvents").collect::<Vec<_>>();
    let last = lookups.last().unwrap();
    let (start, end) = (last["lookup"]["start"].as_f64().unwrap(), last["lookup"]["end"].as_f64().unwrap());
    assert!((end - start - 1800.0).abs() < 2.0, "--trail-window 30m: {last}");
}

/// The controller role's managed policies' actions.
fn controller_actions(sdk: &Sdk, role_name: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for arn in attached(sdk, role_name) {
        let p = rt().block_on(sdk.iam.get_policy().policy_arn(&arn).send()).unwrap();
        let v = p.policy().unwrap().default_version_id().unwrap().to_string();
        let d = rt().block_on(sdk.iam.get_policy_version().policy_arn(&arn).version_id(v).send()).unwrap();
        let doc = policy_json(d.policy_version().unwrap().document().unwrap());
        for st in statements(&doc) {
            out.extend(strings(&st["Action"]));
        }
    }
    out
}

#[test]
fn karpenter_version_running_follows_cloudtrail_and_stops_without_records() {
    let (c, a, wd, px) = setup("run-follow", "[identity]\nkarpenter_version = \"running\"\n");
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    let sdk = sdk();

    // Nothing recorded: exit 1 before any write, saying what to set.
    records(&px, json!([]));
    let r = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let m = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("\"running\"") && m.contains("no call"), "{doc}");
    assert!(doc["error"]["hint"].as_str().unwrap_or_default().contains("karpenter_version"), "{doc}");
    // A refused lookup is the same stop.
    px.set(json!({"cloudtrail_events": "AccessDenied"}));
    let r = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!((r.code, r.writes()), (1, 0), "{r:?}");
    assert!(r.stdout.contains("cloudtrail:LookupEvents"), "{r:?}");

    // 1.10 runs: the permissions are 1.10's (no placement groups, added in 1.11), said so.
    let controller = role(&a, &format!("KarpenterController-{c}"));
    records(&px, json!([call(&controller, "1.10.1", 2)]));
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("Permissions follow Karpenter 1.10"), "{r:?}");
    let actions = controller_actions(&sdk, &format!("KarpenterController-{c}"));
    assert!(actions.contains("ec2:CreateFleet"), "{actions:?}");
    assert!(!actions.contains("ec2:DescribePlacementGroups"), "1.10's set: {actions:?}");

    // A rollout to 1.12: the newest is followed, and said so.
    records(&px, json!([call(&controller, "1.10.1", 5), call(&controller, "1.12.3", 1)]));
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("Permissions follow Karpenter 1.12") && r.all().contains("rollout"), "{r:?}");
    let actions = controller_actions(&sdk, &format!("KarpenterController-{c}"));
    assert!(actions.contains("ec2:DescribePlacementGroups") && actions.contains("ec2:DescribeInstanceStatus"), "{actions:?}");
}

// --- Records where a real account keeps them (issue #42) ----------------------------------------

/// A karpenter.sh user agent's call of `role` of `event` (`source`), `minutes_ago`.
fn event(role: &str, source: &str, name: &str, version: &str, minutes_ago: f64) -> Value {
    json!({"role": role, "event": name, "source": source, "agent": format!("karpenter.sh-{version}"), "minutes_ago": minutes_ago})
}

#[test]
fn an_instance_profile_refusal_recorded_in_us_east_1_is_seen_for_a_cluster_in_us_east_2() {
    let c = cluster_name("run-east2");
    let s = seed(&c, &["--region", "us-east-2"]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan_toml_in(&c, "us-east-2", ""));
    let px = LagProxy::start(&c, &endpoint());
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let boundary = format!(
        "User: arn:aws:sts::{a}:assumed-role/KarpenterController-{c}/s is not authorized to perform: iam:CreateInstanceProfile on resource: arn:aws:iam::{a}:instance-profile/{c}_1234 with an explicit deny in a permissions boundary"
    );
    // The controller's EC2 calls are us-east-2's; its IAM calls are recorded in us-east-1 only.
    let mut refused = event(&controller, "iam.amazonaws.com", "CreateInstanceProfile", "1.14.0", 3.0);
    refused["error_code"] = json!("AccessDenied");
    refused["error_message"] = json!(boundary);
    let mut ec2 = event(&controller, "ec2.amazonaws.com", "DescribeInstances", "1.14.0", 1.0);
    ec2["region"] = json!("us-east-2");
    records(&px, json!([ec2, refused]));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);

    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert!(r.code == 0 || r.code == 2, "{r:?}");
    let refusals = with_code(&found(&r.json()), "calls-refused");
    let f = refusals
        .iter()
        .find(|f| f["message"].as_str().unwrap().contains("iam:CreateInstanceProfile"))
        .unwrap_or_else(|| panic!("the boundary's refusal, from us-east-1's history: {r:?}"));
    assert_eq!(f["severity"], "warning");
    assert!(f["message"].as_str().unwrap().contains("permissions boundary"), "{f}");
    assert!(f["fix"].as_str().unwrap().contains("boundary"), "{f}");
    let lookups: Vec<Value> = px.calls_json().into_iter().filter(|c| c["operation"] == "LookupEvents").collect();
    let by: BTreeSet<(String, String)> = lookups
        .iter()
        .map(|l| {
            (
                l["lookup"]["attributes"][0]["AttributeValue"].as_str().unwrap_or("").to_string(),
                l["lookup"]["region"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(by.contains(&("iam.amazonaws.com".into(), "us-east-1".into())), "IAM looked up in us-east-1: {by:?}");
    assert!(by.contains(&("ec2.amazonaws.com".into(), "us-east-2".into())), "EC2 in the cluster's Region: {by:?}");
    assert!(!by.contains(&("iam.amazonaws.com".into(), "us-east-2".into())), "never IAM in us-east-2: {by:?}");

    // doctor (on what `up` made): the same refusal, an error; pricing looked up where
    // Karpenter's client calls it.
    let up = run(&["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    px.set(json!({"cloudtrail_lookup_rps": 1000}));
    let before = px.calls_json().len();
    let r = run(&["doctor", "--cluster", &c, "--output", "json"]);
    let doc = r.json();
    let fs = findings(&doc);
    let f = with_code(&fs, "calls-refused")
        .into_iter()
        .find(|f| f["message"].as_str().unwrap().contains("iam:CreateInstanceProfile"))
        .unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(f["severity"], "error", "{f}");
    let pricing: Vec<Value> = px
        .calls_json()
        .into_iter()
        .filter(|c| {
            c["operation"] == "LookupEvents" && c["lookup"]["attributes"][0]["AttributeValue"] == "pricelist.amazonaws.com"
        })
        .collect();
    assert!(!pricing.is_empty() && pricing.iter().all(|c| c["lookup"]["region"] == "us-east-1"), "{pricing:?}");
    // Each Region has its own two lookups a second: us-east-1's two (IAM, pricing) do not wait
    // behind us-east-2's five (one pace for all seven would put pricing, the fourth source, 1.5 s
    // after the first lookup).
    let lookups: Vec<Value> = px.calls_json().into_iter().skip(before).filter(|c| c["operation"] == "LookupEvents").collect();
    let t = |c: &Value| c["time"].as_f64().unwrap();
    let first = lookups.iter().map(t).fold(f64::MAX, f64::min);
    let pricing_at = lookups
        .iter()
        .filter(|c| c["lookup"]["attributes"][0]["AttributeValue"] == "pricelist.amazonaws.com")
        .map(t)
        .next()
        .unwrap();
    assert!(pricing_at - first < 1.2, "pricing looked up {:.2} s after the first lookup: {lookups:?}", pricing_at - first);
}

#[test]
fn launches_refused_inside_a_fleet_and_a_vcpu_quota_are_found_with_their_fixes() {
    let (c, a, wd, px) = setup("run-fleet", "");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    let _spot = spot_role_present(&sdk());
    let scp = format!(
        "You are not authorized to perform this operation. User: arn:aws:sts::{a}:assumed-role/KarpenterController-{c}/s is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:{a}:instance/* with an explicit deny in a service control policy. Encoded authorization failure message: EncFleet"
    );
    let mut spot = event(&controller, "ec2.amazonaws.com", "CreateFleet", "1.14.0", 4.0);
    spot["fleet_errors"] = json!([
        {"code": "UnauthorizedOperation", "message": scp, "lifecycle": "spot", "type": "m5.large", "zone": "us-east-1a"},
        {"code": "UnauthorizedOperation", "message": scp, "lifecycle": "spot", "type": "c5.large", "zone": "us-east-1b"}
    ]);
    let mut quota = event(&controller, "ec2.amazonaws.com", "CreateFleet", "1.14.0", 2.0);
    quota["fleet_errors"] = json!([{"code": "VcpuLimitExceeded", "message": "You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to.", "lifecycle": "on-demand", "type": "m5.xlarge", "zone": "us-east-1a"}]);
    records(&px, json!([spot, quota, event(&controller, "ec2.amazonaws.com", "DescribeInstances", "1.14.0", 1.0)]));
    px.set(json!({"servicequotas_quotas": {"L-1216C47A": 32}}));

    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let fs = found(&r.json());
    let refused = with_code(&fs, "calls-refused");
    assert_eq!(refused.len(), 1, "{fs:?}");
    let m = refused[0]["message"].as_str().unwrap();
    for want in
        ["ec2:RunInstances", "service control policy", "2 time(s)", "inside CreateFleet", "spot launches of c5.large, m5.large"]
    {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert_eq!(refused[0]["severity"], "warning");
    assert!(refused[0]["fix"].as_str().unwrap().contains("EncFleet"), "{}", refused[0]);
    let q = with_code(&fs, "launch-quota-exceeded");
    assert_eq!((q.len(), q[0]["severity"].as_str()), (1, Some("warning")), "{fs:?}");
    let m = q[0]["message"].as_str().unwrap();
    for want in ["VcpuLimitExceeded", "L-1216C47A", "is 32 vCPUs", "on-demand launches of m5.xlarge", "us-east-1"] {
        assert!(m.contains(want), "{want}: {m}");
    }
    let hint = q[0]["fix"].as_str().unwrap();
    assert!(
        hint.contains("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-1216C47A --desired-value 64 --region us-east-1"),
        "{hint}"
    );
    assert_eq!(px.count("GetServiceQuota"), 1);

    // doctor (on what `up` made): both errors.
    let up = run(&["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "warnings only: {up:?}");
    let r = run(&["doctor", "--cluster", &c, "--output", "json"]);
    let doc = r.json();
    let fs = findings(&doc);
    assert_eq!(with_code(&fs, "launch-quota-exceeded")[0]["severity"], "error", "{doc}");
    assert!(
        with_code(&fs, "calls-refused")
            .iter()
            .any(|f| f["severity"] == "error" && f["message"].as_str().unwrap().contains("spot launches")),
        "{doc}"
    );

    // The quota's value refused: said so, with the permission; the finding stays.
    px.set(json!({"servicequotas_quotas": {"L-1216C47A": "AccessDenied"}}));
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    let q = with_code(&found(&r.json()), "launch-quota-exceeded");
    let m = q[0]["message"].as_str().unwrap_or_else(|| panic!("{r:?}"));
    assert!(m.contains("servicequotas:GetServiceQuota was refused"), "{m}");
    assert!(q[0]["fix"].as_str().unwrap().contains("--desired-value N"), "{}", q[0]);
}

#[test]
fn in_a_busy_account_running_and_the_version_check_find_karpenters_launches_by_name() {
    let (c, a, wd, px) = setup("run-busy", "[identity]\nkarpenter_version = \"1.10\"\n");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    // 600 EC2 records of other callers (the EKS control plane, the VPC CNI) newer than any of
    // Karpenter's: the 100 newest EC2 records up/diff read are all theirs.
    let busy = |karpenter: Vec<Value>| {
        let mut all = karpenter;
        all.push(json!({"others": 600, "source": "ec2.amazonaws.com", "account": a, "minutes_ago": [0, 10]}));
        records(&px, Value::Array(all));
    };
    busy(vec![
        event(&controller, "ec2.amazonaws.com", "DescribeInstances", "1.12.3", 20.0),
        event(&controller, "ec2.amazonaws.com", "CreateFleet", "1.12.3", 15.0),
    ]);
    let r = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "an error-level check: {r:?}");
    let fs = found(&r.json());
    let lacks = with_code(&fs, "running-version-lacks-permissions");
    assert_eq!(lacks.len(), 1, "Karpenter 1.12.3 found by its CreateFleet: {fs:?}");
    assert!(lacks[0]["message"].as_str().unwrap().contains("1.12.3"), "{}", lacks[0]);
    let cut = with_code(&fs, "cloudtrail-read-cut-short");
    assert_eq!((cut.len(), cut[0]["severity"].as_str()), (1, Some("note")), "{fs:?}");
    let m = cut[0]["message"].as_str().unwrap();
    assert!(m.contains("ec2.amazonaws.com in us-east-1") && m.contains("CreateFleet (1 found)"), "{m}");
    let names: Vec<String> = px
        .calls_json()
        .into_iter()
        .filter(|c| c["operation"] == "LookupEvents" && c["lookup"]["attributes"][0]["AttributeKey"] == "EventName")
        .map(|c| c["lookup"]["attributes"][0]["AttributeValue"].as_str().unwrap().to_string())
        .collect();
    for n in ["CreateFleet", "RunInstances", "CreateLaunchTemplate", "TerminateInstances"] {
        assert!(names.contains(&n.to_string()), "{n} looked up by name: {names:?}");
    }

    // karpenter_version = "running" follows it, before any write.
    wd.plan_for(&c, "[identity]\nkarpenter_version = \"running\"\n");
    let r = run(&["diff", "--cluster", &c]);
    assert!(r.all().contains("Permissions follow Karpenter 1.12"), "{r:?}");

    // No launch in the window: nothing found; the hint reads further back, since the lookups by
    // name reached the window's start, and says which lookup was cut short.
    busy(vec![event(&controller, "ec2.amazonaws.com", "DescribeInstances", "1.12.3", 20.0)]);
    let r = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!((r.code, r.writes()), (1, 0), "{r:?}");
    let doc = r.json();
    let m = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("stopped at their page bound") && m.contains("ec2.amazonaws.com in us-east-1"), "{doc}");
    assert!(doc["error"]["hint"].as_str().unwrap_or_default().contains("--trail-window"), "{doc}");
}

#[test]
fn doctor_and_diff_judge_with_the_same_version() {
    let (c, a, wd, px) = setup("run-same", "[identity]\nkarpenter_version = \"1.10\"\n");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    records(&px, json!([call(&controller, "1.12.3", 2)]));

    // A plan pins 1.10 while 1.12.3 runs: both judge 1.12.3 against the 1.10 pin (doctor on
    // what `up` made).
    let up = run(&["up", "--cluster", &c]);
    assert_eq!(up.code, 1, "1.12.3 lacks permissions under the 1.10 pin: {up:?}");
    let diff = run(&["diff", "--cluster", &c, "--output", "json"]).json();
    let doctor = run(&["doctor", "--cluster", &c, "--output", "json"]).json();
    assert_eq!(diff["checks"]["karpenter"]["version"], "1.10", "{diff}");
    assert_eq!(doctor["karpenter_version"], diff["checks"]["karpenter"]["version"], "{doctor}");
    let from = doctor["karpenter_version_from"].as_str().unwrap();
    assert!(from.contains("plan") && from.contains("identity.karpenter_version"), "{from}");
    for (doc, fs) in [(&diff, found(&diff)), (&doctor, findings(&doctor))] {
        let lacks = with_code(&fs, "running-version-lacks-permissions");
        let m = lacks.first().and_then(|f| f["message"].as_str()).unwrap_or_else(|| panic!("{doc}"));
        assert!(m.contains("1.12.3") && m.contains("pinned to 1.10"), "{m}");
    }
    let human = run(&["doctor", "--cluster", &c]);
    assert!(human.stdout.contains("Karpenter 1.10: the plan's pin"), "{human:?}");

    // No plan: the version that runs, said so; nothing is missing then.
    std::fs::remove_file(wd.path().join("plans").join(format!("{c}.toml"))).unwrap();
    let doctor = run(&["doctor", "--cluster", &c, "--output", "json"]).json();
    assert_eq!(doctor["karpenter_version"], "1.12", "{doctor}");
    assert!(doctor["karpenter_version_from"].as_str().unwrap().contains("karpenter.sh-1.12.3"), "{doctor}");
    assert!(with_code(&findings(&doctor), "running-version-lacks-permissions").is_empty(), "{doctor}");
    // Nothing recorded either: the newest, said why; the flag wins over all.
    records(&px, json!([]));
    let doctor = run(&["doctor", "--cluster", &c, "--output", "json"]).json();
    assert_eq!(doctor["karpenter_version"], "1.14", "{doctor}");
    assert!(doctor["karpenter_version_from"].as_str().unwrap().contains("no plan"), "{doctor}");
    let doctor = run(&["doctor", "--cluster", &c, "--output", "json", "--karpenter-version", "1.11"]).json();
    assert_eq!(
        (doctor["karpenter_version"].as_str(), doctor["karpenter_version_from"].as_str()),
        (Some("1.11"), Some("--karpenter-version"))
    );
}

#[test]
fn a_pin_whose_grants_differ_from_what_runs_is_not_read_as_nothing_missing() {
    // 1.8 runs; the plan pins 1.9: the same action names, but 1.9 dropped capacity reservations
    // from the resources created with tags (the v1.9 split).
    let (c, a, wd, px) = setup("run-grants", "[identity]\nkarpenter_version = \"1.9\"\n");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    records(&px, json!([call(&controller, "1.8.2", 2)]));
    let r = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 1, "an error-level check: diff exits 1 as up does: {r:?}");
    let lacks = with_code(&found(&r.json()), "running-version-lacks-permissions");
    let m = lacks.first().and_then(|f| f["message"].as_str()).unwrap_or_else(|| panic!("{r:?}"));
    assert!(m.contains("1.8.2") && m.contains("pinned to 1.9") && m.contains("on capacity-reservation/*"), "{m}");
}

// --- An upgrade in flight (issue #42 item 7) ----------------------------------------------------

/// The controller role's managed policies' statements.
fn controller_statements(sdk: &Sdk, role_name: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for arn in attached(sdk, role_name) {
        let p = rt().block_on(sdk.iam.get_policy().policy_arn(&arn).send()).unwrap();
        let v = p.policy().unwrap().default_version_id().unwrap().to_string();
        let d = rt().block_on(sdk.iam.get_policy_version().policy_arn(&arn).version_id(v).send()).unwrap();
        out.extend(statements(&policy_json(d.policy_version().unwrap().document().unwrap())));
    }
    out
}

/// Whether a statement lets Karpenter create a capacity reservation's tags on launch (the grant
/// v1.3 to v1.8 have and v1.9 dropped: `RequestTag` conditions on `CreateFleet`).
fn tags_capacity_reservations_on_launch(st: &Value) -> bool {
    strings(&st["Action"]).contains(&"ec2:CreateFleet".to_string())
        && strings(&st["Resource"]).iter().any(|r| r.ends_with(":capacity-reservation/*"))
        && st["Condition"].to_string().contains("aws:RequestTag/karpenter.sh/nodepool")
}

fn upgrade_note(doc: &Value) -> Option<String> {
    doc["notes"].as_array()?.iter().find(|f| f["id"] == "karpenter-upgrade")?["message"].as_str().map(str::to_string)
}

#[test]
fn an_upgrade_in_flight_keeps_what_the_running_version_needs_until_only_the_new_one_runs() {
    // Karpenter 1.8 runs, set up with a 1.8 pin; then the plan pins 1.9, which no longer grants
    // CreateFleet on capacity reservations with tags (the v1.9 split).
    let (c, a, wd, px) = setup("run-upg", "[identity]\nkarpenter_version = \"1.8\"\n");
    let controller = role(&a, &format!("KarpenterController-{c}"));
    let role_name = format!("KarpenterController-{c}");
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);
    let sdk = sdk();
    records(&px, json!([call(&controller, "1.8.2", 2)]));
    let r = run(&["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(controller_statements(&sdk, &role_name).iter().any(tags_capacity_reservations_on_launch), "1.8's own grant");
    wd.plan_for(&c, "[identity]\nkarpenter_version = \"1.9\"\n");

    // diff: the plan keeps what 1.8 needs beside 1.9's, says so and names the order; nothing lacks.
    let diff = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(diff.code, 2, "changes, no error: {diff:?}");
    let doc = diff.json();
    let note = upgrade_note(&doc).unwrap_or_else(|| panic!("{doc}"));
    assert!(note.contains("Karpenter 1.8.2") && note.contains("pins 1.9") && note.contains("capacity-reservation/*"), "{note}");
    let helm = format!("`karpctl output --cluster {c} --format helm > values.yaml` then `helm upgrade --install karpenter");
    assert!(note.contains("1. the permissions first: `karpctl up`") && note.contains(&helm), "{note}");
    assert!(note.contains("once CloudTrail shows only 1.9, `karpctl up` drops"), "{note}");
    assert!(with_code(&found(&doc), "running-version-lacks-permissions").is_empty(), "1.8's grants are kept: {doc}");
    let human = run(&["diff", "--cluster", &c]);
    assert!(
        human.stdout.contains("note: Karpenter upgrade in flight") && human.stdout.contains("# keeps what Karpenter 1.8 needs"),
        "{human:?}"
    );

    // up: the same plan, saved by diff and applied from the file; 1.8's grant is there with 1.9's.
    let saved = run(&["diff", "--cluster", &c, "--out", "upgrade-plan.json"]);
    assert_eq!(saved.code, 2, "{saved:?}");
    let up = run(&["up", "--plan-file", "upgrade-plan.json", "--output", "json"]);
    assert_eq!(up.code, 0, "{up:?}");
    let doc = up.json();
    assert!(upgrade_note(&doc).is_some_and(|n| n.contains("permissions first")), "{}", up.stdout);
    assert!(with_code(&found(&doc), "running-version-lacks-permissions").is_empty(), "{doc}");
    // The hand-off says the old grants stay beside the new ones, and until when.
    let helm = doc["next_steps"]["helm_values"].to_string();
    assert!(
        helm.contains("are now 1.9's, keeping what Karpenter 1.8 still calls until CloudTrail shows only 1.9 running"),
        "{helm}"
    );
    let live = controller_statements(&sdk, &role_name);
    assert!(live.iter().any(tags_capacity_reservations_on_launch), "kept: {live:?}");
    // While 1.8 still runs: in sync, and still said.
    let diff = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(diff.code, 0, "{diff:?}");
    let note = upgrade_note(&diff.json()).unwrap_or_default();
    assert!(note.contains("the permissions are in place") && note.contains("helm upgrade"), "{note}");
    // doctor judges as diff does: the grants 1.8 needs are in the role's policies.
    let doctor = run(&["doctor", "--cluster", &c, "--output", "json"]).json();
    let lacks = with_code(&findings(&doctor), "running-version-lacks-permissions");
    assert!(lacks.is_empty(), "{doctor}");

    // Helm upgraded: CloudTrail shows only 1.9 over the window. diff shows the drop, up makes it.
    records(&px, json!([call(&controller, "1.9.0", 1)]));
    let diff = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(diff.code, 2, "{diff:?}");
    let doc = diff.json();
    let note = upgrade_note(&doc).unwrap_or_else(|| panic!("{doc}"));
    assert!(note.contains("upgrade to 1.9 done") && note.contains("drop what they kept for Karpenter 1.8"), "{note}");
    assert!(doc["steps"].as_array().unwrap().iter().any(|s| s["id"] == "controller-policy-NodeLifecycle"), "{doc}");
    let up = run(&["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let live = controller_statements(&sdk, &role_name);
    assert!(!live.iter().any(tags_capacity_reservations_on_launch), "dropped: {live:?}");
    assert!(!live.iter().any(|s| s["Sid"].as_str().unwrap_or_default().contains("ForKarpenter")), "{live:?}");
    let diff = run(&["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(diff.code, 0, "{diff:?}");
    assert_eq!(upgrade_note(&diff.json()), None);
}
