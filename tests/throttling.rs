//! Many clusters at AWS's real request rates (issue 25): the lag proxy's `throttle_rps` answers
//! as AWS does once a service's rate is spent (IAM: 400 Throttling "Rate exceeded"). With IAM at
//! 15 calls a second for the account, `up --all` over ten clusters converges (the SDK's standard
//! retry gave up within a second: its attempts and its one retry budget per process were spent),
//! says it was throttled, and `diff --all` then exits 0.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::json;

#[test]
fn ten_clusters_converge_while_iam_allows_15_calls_a_second() {
    let wd = Workdir::new();
    let clusters: Vec<String> = (0..10).map(|i| cluster_name(&format!("thr{i}"))).collect();
    for c in &clusters {
        seed(c, &[]);
        wd.plan_for(c, "");
    }
    let px = LagProxy::start(&cluster_name("thr-px"), &endpoint());
    px.set(json!({"throttle_rps": {"iam": 15}}));

    let up = karpctl_at(&wd, px.url(), &["up", "--all"], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    let throttled = px.calls_json().into_iter().filter(|c| c["lag"] == "throttle_rps").count();
    assert!(throttled > 0, "IAM throttled some calls: {:?}", px.calls_json().len());
    assert!(up.stderr.contains("AWS throttled") && up.stderr.contains("iam request(s)"), "the throttling is said: {up:?}");
    assert!(up.stderr.contains("AWS is throttling iam requests"), "and while it happens: {up:?}");

    let diff = karpctl_at(&wd, px.url(), &["diff", "--all"], &[]);
    assert_eq!(diff.code, 0, "every cluster in sync: {diff:?}");
}

#[test]
fn every_service_is_throttled_the_way_aws_answers_and_karpctl_slows_down() {
    // One cluster, every service at a low rate: each answers its own throttling error, which
    // the SDK recognises as throttling; `up` converges and `diff` is clean.
    let wd = Workdir::new();
    let c = cluster_name("thr-all");
    seed(&c, &[]);
    let px = LagProxy::start(&cluster_name("thr-all-px"), &endpoint());
    let rates: serde_json::Map<String, serde_json::Value> =
        ["iam", "ec2", "eks", "sqs", "events", "sts", "kms"].iter().map(|s| (s.to_string(), json!(4))).collect();
    px.set(json!({"throttle_rps": rates}));
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    let doc = up.json();
    let mut by_proxy: std::collections::BTreeMap<String, u64> = Default::default();
    for x in px.calls_json().into_iter().filter(|x| x["lag"] == "throttle_rps") {
        *by_proxy.entry(x["service"].as_str().unwrap_or("").to_string()).or_default() += 1;
    }
    assert!(!by_proxy.is_empty(), "the proxy throttled: {:?}", px.calls_json().len());
    let counted = doc["stats"]["throttled"].as_object().cloned().unwrap_or_default();
    for (s, n) in &by_proxy {
        // Each answer once: the SDK classifies an attempt more than once, the count must not.
        assert_eq!(counted.get(s).map(|t| t["answers"].clone()), Some(json!(n)), "karpctl counted {s}'s throttling: {counted:?}");
    }
    let diff = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c], &[]);
    assert_eq!(diff.code, 0, "{diff:?}");
}
