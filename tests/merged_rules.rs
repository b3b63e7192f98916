//! `interruption.rules = "merged"` (issue 25): one rule per cluster carries Karpenter's five
//! event patterns, for accounts near EventBridge's 300 rules per bus. Migrated in place from the
//! five-rule layout and back without a moment when an event kind has no rule (the lag proxy's
//! call log of a `--concurrency 1` run shows the new rule's target in place before any old rule
//! loses its target); `diff` shows the difference from upstream; doctor accepts it; and `diff`
//! and doctor warn when the region's default bus nears the quota.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};

fn plan(c: &str, rules: &str) -> String {
    format!("cluster = \"{c}\"\nregion = \"{REGION}\"\n[interruption]\nrules = \"{rules}\"\n")
}

/// Index in the proxy's call log of the first call matching.
fn first(calls: &[Value], op: &str, pred: impl Fn(&str) -> bool) -> Option<usize> {
    calls.iter().position(|c| c["operation"] == op && pred(c["resource"].as_str().unwrap_or("")))
}

fn all_kinds() -> Vec<String> {
    let mut v: Vec<String> = RULE_EVENTS.iter().map(|(_, _, d)| d.to_string()).collect();
    v.sort();
    v
}

#[test]
fn five_rules_become_one_and_back_with_every_kind_always_covered() {
    let c = cluster_name("merged");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let _spot = spot_role_present(&sdk);
    let queue_arn = format!("arn:aws:sqs:{REGION}:000000000000:{}", queue_name(&c));
    wd.plan(&c, &plan(&c, "five"));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert_eq!(rules_to_queue(&sdk, &queue_arn).len(), RULE_EVENTS.len());

    // To one rule: diff says it differs from upstream on purpose.
    wd.plan(&c, &plan(&c, "merged"));
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert!(diff.stdout.contains("deliberate difference"), "{diff:?}");
    let px = LagProxy::start(&cluster_name("merged-px"), &endpoint());
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--concurrency", "1"], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    let calls = px.calls_json();
    let merged = format!("Karpenter-{c}-Interruption");
    let new_target = first(&calls, "PutTargets", |r| r == merged).expect("the merged rule got its target");
    let old_removed = first(&calls, "RemoveTargets", |r| r != merged).expect("an old rule lost its target");
    assert!(new_target < old_removed, "the merged rule was in place before any old rule went: {calls:?}");
    let now = rules_to_queue(&sdk, &queue_arn);
    assert_eq!(now.len(), 1, "one rule: {now:?}");
    let mut kinds = now[&merged].clone();
    kinds.sort();
    assert_eq!(kinds, all_kinds());
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "{diff:?}");
    let doctor = karpctl(&wd, &["doctor", "--cluster", &c]);
    assert_eq!(doctor.code, 0, "doctor accepts one rule carrying every kind: {doctor:?}");

    // And back to five, the merged rule going last.
    wd.plan(&c, &plan(&c, "five"));
    px.reset();
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--concurrency", "1"], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    let calls = px.calls_json();
    let last_new = calls.iter().rposition(|x| x["operation"] == "PutTargets" && x["resource"] != merged.as_str()).unwrap();
    let merged_removed = first(&calls, "RemoveTargets", |r| r == merged).expect("the merged rule lost its target");
    assert!(last_new < merged_removed, "every one of the five was in place first: {calls:?}");
    let now = rules_to_queue(&sdk, &queue_arn);
    assert_eq!(now.len(), RULE_EVENTS.len(), "{now:?}");
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn diff_and_doctor_warn_when_the_bus_nears_its_rule_quota() {
    // A region of its own: its default bus is not the other tests' (they count rules too).
    let region = "ap-southeast-4";
    let c = cluster_name("quota");
    seed(&c, &["--region", region]);
    let conf = aws_types::SdkConfig::builder()
        .endpoint_url(endpoint())
        .region(aws_types::region::Region::new(region))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "tests",
        )))
        .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
        .build();
    let events = aws_sdk_eventbridge::Client::new(&conf);
    rt().block_on(async {
        let puts = (0..297).map(|i| {
            let events = events.clone();
            let c = c.clone();
            async move {
                let pattern = json!({"source": ["my.app"], "detail-type": [format!("thing {i}")]}).to_string();
                events.put_rule().name(format!("other-{c}-{i}")).event_pattern(pattern).send().await.unwrap();
            }
        });
        futures::future::join_all(puts).await;
    });
    let wd = Workdir::new();
    wd.plan(&c, &format!("cluster = \"{c}\"\nregion = \"{region}\"\n"));
    let quota = [("KARPCTL_RULES_PER_BUS", "")]; // AWS's default, 300
    let diff = karpctl_env(&wd, &["diff", "--cluster", &c], &quota);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert!(diff.stdout.contains("Maximum number of rules per event bus"), "{diff:?}");
    assert!(diff.stdout.contains("LimitExceededException"), "297 + 5 > 300 would be refused: {diff:?}");
    let doctor = karpctl_env(&wd, &["doctor", "--cluster", &c, "--output", "json"], &quota);
    let codes: Vec<String> =
        doctor.json()["findings"].as_array().unwrap().iter().map(|f| f["code"].as_str().unwrap().to_string()).collect();
    assert!(codes.contains(&"event-bus-rule-quota".to_string()), "{codes:?}");
    // An account whose quota was raised says so: no warning.
    let raised = karpctl_env(&wd, &["diff", "--cluster", &c], &[("KARPCTL_RULES_PER_BUS", "1000")]);
    assert!(!raised.stdout.contains("rules per event bus"), "{raised:?}");
}
