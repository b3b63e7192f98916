//! A full quota is not throttling (issue 33, item 10): EventBridge answers PutRule with
//! `LimitExceededException` when the event bus holds its quota of rules, PutTargets when the rule
//! holds its quota of targets, and KMS answers CreateKey when the Region holds its quota of keys.
//! The SDK's standard retry classifier lists that code among throttling codes, so karpctl retried
//! it 16 times per call with its pace cut and then reported throttling (80 PutRule attempts over
//! 70 s). Now `up` fails at once (exit 1), the error names the quota and how to raise it, and no
//! throttling is counted. The lag proxy's `events_rules_full`, `events_targets_full` and
//! `kms_keys_full` answer as AWS does.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Calls of `operation` the proxy saw, by resource (rule name, key), and the total.
fn calls_by_resource(px: &LagProxy, operation: &str) -> (BTreeMap<String, usize>, usize) {
    let mut by = BTreeMap::new();
    let mut total = 0;
    for c in px.calls_json().iter().filter(|c| c["operation"] == operation) {
        *by.entry(c["resource"].as_str().unwrap_or("").to_string()).or_default() += 1;
        total += 1;
    }
    (by, total)
}

/// `up` through a proxy with `rules`: the run, and the proxy.
fn up_against(prefix: &str, plan_extra: &str, rules: Value) -> (Run, LagProxy) {
    let c = cluster_name(prefix);
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan_for(&c, plan_extra);
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    px.set(rules);
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    (up, px)
}

/// No throttling reported: none counted in the stats, none said on stderr.
fn assert_not_throttling(up: &Run, service: &str) {
    let doc = up.json();
    let throttled = doc["stats"]["throttled"].as_object().cloned().unwrap_or_default();
    assert!(!throttled.contains_key(service), "a full quota is not throttling: {throttled:?}");
    assert!(!up.stderr.contains("AWS is throttling") && !up.stderr.contains("AWS throttled"), "no throttling said: {up:?}");
}

#[test]
fn a_full_event_bus_fails_up_at_once_naming_the_quota_and_how_to_raise_it() {
    let (up, px) = up_against("quota-bus", "", json!({"events_rules_full": {"*": true}}));
    assert_eq!(up.code, 1, "{up:?}");
    let all = up.all();
    for needle in [
        "LimitExceededException",
        "rules per event bus",
        "Service Quotas",
        "request-service-quota-increase",
        "KARPCTL_RULES_PER_BUS",
    ] {
        assert!(all.contains(needle), "{needle}: {all}");
    }
    let (by_rule, total) = calls_by_resource(&px, "PutRule");
    assert!(total >= 1, "PutRule was tried: {:?}", px.calls());
    assert!(by_rule.values().all(|n| *n == 1), "one PutRule per rule, not retried: {by_rule:?}");
    assert!(total <= 5, "at most one per rule of the plan: {by_rule:?}");
    assert_not_throttling(&up, "events");
}

#[test]
fn a_rule_full_of_targets_fails_up_at_once_naming_the_quota() {
    let (up, px) =
        up_against("quota-targets", "[interruption]\nrules = \"merged\"\n", json!({"events_targets_full": {"*": true}}));
    assert_eq!(up.code, 1, "{up:?}");
    let all = up.all();
    for needle in ["LimitExceededException", "targets", "list-targets-by-rule", "Service Quotas"] {
        assert!(all.contains(needle), "{needle}: {all}");
    }
    let (by_rule, total) = calls_by_resource(&px, "PutTargets");
    assert_eq!(total, 1, "one PutTargets on the one rule, not retried: {by_rule:?}");
    assert_not_throttling(&up, "events");
}

#[test]
fn a_full_kms_keys_quota_fails_up_at_once_naming_the_quota() {
    let (up, px) = up_against("quota-kms", "[interruption]\nkms_key_id = \"create\"\n", json!({"kms_keys_full": {"*": true}}));
    assert_eq!(up.code, 1, "{up:?}");
    let all = up.all();
    for needle in ["LimitExceededException", "KMS keys", "request-service-quota-increase --service-code kms"] {
        assert!(all.contains(needle), "{needle}: {all}");
    }
    assert_eq!(px.count("CreateKey"), 1, "CreateKey not retried: {:?}", px.calls());
    assert_not_throttling(&up, "kms");
}
