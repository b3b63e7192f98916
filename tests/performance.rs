//! Call accounting and concurrency, end to end: what a run costs in AWS calls, whatever
//! `--concurrency` says. (Speed itself is measured by scripts/bench, never asserted here.)

use crate::common::*;
use serde_json::Value;

/// Calls by "service:operation" from a `--output json` document.
fn calls(doc: &Value) -> Vec<(String, u64)> {
    doc["stats"]["operations"]
        .as_object()
        .unwrap_or_else(|| panic!("no stats.operations: {doc}"))
        .iter()
        .map(|(op, c)| (op.clone(), c["calls"].as_u64().unwrap_or(0)))
        .collect()
}

fn count(calls: &[(String, u64)], op: &str) -> u64 {
    calls.iter().filter(|(o, _)| o.ends_with(&format!(":{op}"))).map(|(_, n)| n).sum()
}

#[test]
fn every_object_is_read_once_and_concurrency_changes_no_call() {
    let c = cluster_name("calls");
    seed(&c, &[]);
    let wd = Workdir::new();
    let up = karpctl(&wd, &["up", "--cluster", &c, "--concurrency", "1", "--output", "json"]);
    assert_eq!(up.code, 0, "up works one call at a time: {up:?}");

    let fast = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    let slow = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json", "--concurrency", "1"]);
    assert_eq!((fast.code, slow.code), (0, 0), "converged after an up at --concurrency 1: {fast:?} {slow:?}");
    let (fast_doc, slow_doc) = (fast.json(), slow.json());
    assert_eq!(fast_doc["stats"]["writes"], 0);
    let (f, s) = (calls(&fast_doc), calls(&slow_doc));
    assert_eq!(f, s, "the same calls at any concurrency");
    // Reads made while preflight runs are used, not made again: each object is read once.
    for (op, n) in [
        ("GetCallerIdentity", 1),
        ("DescribeCluster", 1),
        ("DescribeAddon", 1),
        ("GetRole", 2),
        ("ListAttachedRolePolicies", 2),
        // Five controller policies, and the ZonalShift name checked though the plan leaves it off.
        ("GetPolicy", 6),
        ("GetPolicyVersion", 5),
        ("GetQueueUrl", 1),
        ("GetQueueAttributes", 1),
        // One listing of the cluster's rules by name prefix, not a DescribeRule each.
        ("ListRules", 1),
        ("DescribeRule", 0),
        ("ListTargetsByRule", 5),
        ("ListQueueTags", 1),
        ("DescribeAccessEntry", 1),
        ("ListAccessEntries", 1),
        ("ListPodIdentityAssociations", 1),
        ("DescribePodIdentityAssociation", 1),
        ("DescribeTags", 1),
    ] {
        assert_eq!(count(&f, op), n, "{op} calls in a converged diff: {f:?}");
    }
}
