//! `interruption.rules = "merged"` (issue 25): one rule per cluster carries Karpenter's event
//! patterns (one per kind of `catalog::RULES`), for accounts near EventBridge's 300 rules per bus.
//! Migrated in place from the separate-rule layout (`"separate"`; `"five"`, its old name, is still
//! read, with a note) and back without a moment when an event kind has no rule (the lag proxy's
//! call log of a `--concurrency 1` run shows the new rule's target in place before any old rule
//! loses its target), and without a moment when a rule that targets the queue may not send to it
//! (issue 33 item 8: the queue policy names the old and the new rules while both exist, the old
//! rules go once that policy is in force, and the same run drops their names); `diff` shows the
//! difference from upstream; doctor accepts it; and `diff` and doctor warn when the region's
//! default bus nears the quota.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn plan(c: &str, rules: &str) -> String {
    plan_toml(c, &format!("[interruption]\nrules = \"{rules}\"\n"))
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

fn rule_arn(name: &str) -> String {
    format!("arn:aws:events:{REGION}:000000000000:rule/{name}")
}

/// The rule ARNs a queue policy lets send (its `aws:SourceArn` conditions).
fn sources(policy: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for st in statements(policy).iter().filter(|st| st["Effect"] == "Allow") {
        for (_, kv) in st["Condition"].as_object().into_iter().flatten() {
            out.extend(strings(&kv["aws:SourceArn"]));
        }
    }
    out
}

/// The rule ARNs the queue's live policy lets send, read directly from the emulator.
fn live_sources(sdk: &Sdk, queue: &str) -> BTreeSet<String> {
    rt().block_on(async {
        let url = sdk.sqs.get_queue_url().queue_name(queue).send().await.unwrap().queue_url().unwrap().to_string();
        let a = sdk
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::Policy)
            .send()
            .await
            .unwrap();
        let text = a.attributes().and_then(|m| m.get(&aws_sdk_sqs::types::QueueAttributeName::Policy)).cloned().unwrap();
        sources(&policy_json(&text))
    })
}

/// Replays one `up`'s call log through the lag proxy, which shows a queue-policy write only
/// after its window (sqs_attr_lag_s, AWS's propagation): a write is in force everywhere once a
/// read of the queue's attributes answered after the window (no `lag` mark); until then the
/// policies written before it may still be in force somewhere. At every moment, every rule that
/// targets the queue must be named by every policy that may be in force (EventBridge drops a
/// delivery the queue refuses). Checks that and returns the index of each policy write.
fn assert_every_sender_always_allowed(
    calls: &[Value],
    queue: &str,
    before: BTreeSet<String>,
    live: BTreeSet<String>,
) -> Vec<usize> {
    let mut targeting: BTreeSet<String> = before.iter().map(|n| rule_arn(n)).collect();
    let mut in_force: Vec<BTreeSet<String>> = vec![live];
    let mut writes = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let ok = c["status"].as_u64().is_some_and(|s| (200..300).contains(&s));
        let (op, res) = (c["operation"].as_str().unwrap_or(""), c["resource"].as_str().unwrap_or(""));
        match op {
            "SetQueueAttributes" if ok && res == queue => {
                let Some(text) = c["attributes"]["Policy"].as_str() else { continue };
                in_force.push(sources(&policy_json(text)));
                writes.push(i);
            }
            "GetQueueAttributes" if ok && res == queue && c["lag"].is_null() && in_force.len() > 1 => {
                in_force.drain(..in_force.len() - 1);
            }
            "PutTargets" if ok => {
                targeting.insert(rule_arn(res));
            }
            "RemoveTargets" if ok => {
                targeting.remove(&rule_arn(res));
            }
            _ => {}
        }
        for p in &in_force {
            let refused: Vec<&String> = targeting.iter().filter(|r| !p.contains(*r)).collect();
            assert!(
                refused.is_empty(),
                "after call {i} ({op} {res}), rules {refused:?} target the queue while a policy that may be in force does not let them send ({p:?})\n{calls:#?}"
            );
        }
    }
    assert_eq!(in_force.last().unwrap(), &targeting, "the policy at the end names exactly the rules that target the queue");
    writes
}

/// `up` from one layout to the other through a lag proxy whose queue-policy reads lag, checked
/// call by call; then `diff` finds nothing.
fn switch(wd: &Workdir, px: &LagProxy, c: &str, to: &str, concurrency: &[&str]) -> Vec<Value> {
    let sdk = sdk();
    let (queue, queue_arn) = (queue_name(c), format!("arn:aws:sqs:{REGION}:000000000000:{}", queue_name(c)));
    let before: BTreeSet<String> = rules_to_queue(&sdk, &queue_arn).into_keys().collect();
    let live = live_sources(&sdk, &queue);
    wd.plan(c, &plan(c, to));
    px.reset();
    px.set(json!({"sqs_attr_lag_s": {&queue: 2}}));
    let mut args = vec!["up", "--cluster", c];
    args.extend_from_slice(concurrency);
    let up = karpctl_at(wd, px.url(), &args, &[("KARPCTL_SQS_POLICY_PROPAGATION_SECS", "1")]);
    assert_eq!(up.code, 0, "{up:?}");
    let calls = px.calls_json();
    let writes = assert_every_sender_always_allowed(&calls, &queue, before.clone(), live);
    // The hand-over: the first policy write names the new rules and the old ones, before any
    // old rule loses its target, and the old rules lose theirs only after that policy shows.
    let after: BTreeSet<String> = rules_to_queue(&sdk, &queue_arn).into_keys().collect();
    let handover = writes.first().copied().expect("the queue policy was written");
    let named = sources(&policy_json(calls[handover]["attributes"]["Policy"].as_str().unwrap()));
    for r in before.union(&after) {
        assert!(named.contains(&rule_arn(r)), "the hand-over names {r}: {named:?}");
    }
    let old_removed =
        first(&calls, "RemoveTargets", |r| before.contains(r) && !after.contains(r)).expect("an old rule lost its target");
    let shown = calls[handover..]
        .iter()
        .position(|x| x["operation"] == "GetQueueAttributes" && x["resource"] == queue.as_str() && x["lag"].is_null())
        .map(|i| i + handover)
        .expect("the hand-over policy was read back after its window");
    assert!(
        handover < shown && shown < old_removed,
        "hand-over {handover}, shown {shown}, old rule's RemoveTargets {old_removed}: {calls:#?}"
    );
    assert!(
        writes.len() >= 2 && writes.iter().any(|w| *w > old_removed),
        "the old names are dropped in the same run: {writes:?}"
    );
    let diff = karpctl(wd, &["diff", "--cluster", c]);
    assert_eq!(diff.code, 0, "a second run has nothing to do: {diff:?}");
    calls
}

#[test]
fn separate_rules_become_one_and_back_with_every_kind_always_covered() {
    let c = cluster_name("merged");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let _spot = spot_role_present(&sdk);
    let queue_arn = format!("arn:aws:sqs:{REGION}:000000000000:{}", queue_name(&c));
    wd.plan(&c, &plan(&c, "separate"));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(!up.stdout.contains("is now"), "no note for \"separate\": {up:?}");
    assert_eq!(rules_to_queue(&sdk, &queue_arn).len(), RULE_EVENTS.len());

    // To one rule: diff says it differs from upstream on purpose, and shows the hand-over.
    wd.plan(&c, &plan(&c, "merged"));
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert!(diff.stdout.contains("deliberate difference"), "{diff:?}");
    assert!(diff.stdout.contains("queue-policy-handover"), "{diff:?}");
    let px = LagProxy::start(&cluster_name("merged-px"), &endpoint());
    let calls = switch(&wd, &px, &c, "merged", &["--concurrency", "1"]);
    let merged = format!("Karpenter-{c}-Interruption");
    let new_target = first(&calls, "PutTargets", |r| r == merged).expect("the merged rule got its target");
    let old_removed = first(&calls, "RemoveTargets", |r| r != merged).expect("an old rule lost its target");
    assert!(new_target < old_removed, "the merged rule was in place before any old rule went: {calls:?}");
    let now = rules_to_queue(&sdk, &queue_arn);
    assert_eq!(now.len(), 1, "one rule: {now:?}");
    let mut kinds = now[&merged].clone();
    kinds.sort();
    assert_eq!(kinds, all_kinds());
    let doctor = karpctl(&wd, &["doctor", "--cluster", &c]);
    assert_eq!(doctor.code, 0, "doctor accepts one rule carrying every kind: {doctor:?}");

    // And back to separate rules, the merged rule going last.
    let calls = switch(&wd, &px, &c, "separate", &["--concurrency", "1"]);
    let last_new = calls.iter().rposition(|x| x["operation"] == "PutTargets" && x["resource"] != merged.as_str()).unwrap();
    let merged_removed = first(&calls, "RemoveTargets", |r| r == merged).expect("the merged rule lost its target");
    assert!(last_new < merged_removed, "every separate rule was in place first: {calls:?}");
    let now = rules_to_queue(&sdk, &queue_arn);
    assert_eq!(now.len(), RULE_EVENTS.len(), "{now:?}");
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn a_layout_switch_at_full_concurrency_never_refuses_a_rule_that_targets_the_queue() {
    let c = cluster_name("merged-par");
    seed(&c, &[]);
    let wd = Workdir::new();
    let _spot = spot_role_present(&sdk());
    // "five", the old name of "separate", is still read, with a note saying so.
    wd.plan(&c, &plan(&c, "five"));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(up.stdout.contains("interruption.rules = \"five\" is now \"separate\""), "{up:?}");
    assert_eq!(rules_to_queue(&sdk(), &format!("arn:aws:sqs:{REGION}:000000000000:{}", queue_name(&c))).len(), RULE_EVENTS.len());
    let px = LagProxy::start(&cluster_name("merged-par-px"), &endpoint());
    switch(&wd, &px, &c, "merged", &[]);
    switch(&wd, &px, &c, "separate", &[]);
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
    wd.plan(&c, &plan_toml_in(&c, region, ""));
    let quota = [("KARPCTL_RULES_PER_BUS", "")]; // AWS's default, 300
    let diff = karpctl_env(&wd, &["diff", "--cluster", &c], &quota);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert!(diff.stdout.contains("Maximum number of rules per event bus"), "{diff:?}");
    assert!(diff.stdout.contains("LimitExceededException"), "297 + 5 > 300 would be refused: {diff:?}");
    let doctor = karpctl_env(&wd, &["doctor", "--cluster", &c, "--output", "json"], &quota);
    let codes = finding_codes(&doctor);
    assert!(codes.contains("event-bus-rule-quota"), "{codes:?}");
    // An account whose quota was raised says so: no warning.
    let raised = karpctl_env(&wd, &["diff", "--cluster", &c], &[("KARPCTL_RULES_PER_BUS", "1000")]);
    assert!(!raised.stdout.contains("rules per event bus"), "{raised:?}");
}
