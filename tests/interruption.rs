//! Interruption handling end to end: queue, queue policy, one rule per event kind with its target.

use crate::common::*;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::HashMap;

const PARTS: [(&str, &str, &str); RULE_EVENTS.len()] = RULE_EVENTS;

fn plan_body(cluster: &str, extra: &str) -> String {
    plan_toml(cluster, &format!("\n[tags]\nteam = \"platform\"\n\n[interruption]\nenabled = true\n{extra}"))
}

/// (pattern, targets as (id, arn)) of a rule, or None when it does not exist.
fn rule(sdk: &Sdk, name: &str) -> Option<(Value, Vec<(String, String)>, HashMap<String, String>)> {
    rt().block_on(async {
        let d = sdk.events.describe_rule().name(name).send().await.ok()?;
        let t = sdk.events.list_targets_by_rule().rule(name).send().await.unwrap();
        let tags = sdk.events.list_tags_for_resource().resource_arn(d.arn().unwrap()).send().await.unwrap();
        Some((
            serde_json::from_str(d.event_pattern().unwrap()).unwrap(),
            t.targets().iter().map(|t| (t.id().to_string(), t.arn().to_string())).collect(),
            tags.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect(),
        ))
    })
}

#[test]
fn up_creates_queue_policy_rules_and_targets_exactly_then_is_idempotent() {
    let c = cluster_name("intr");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");

    let sdk = sdk();
    let qname = queue_name(&c);
    let q = queue(&sdk, &qname);
    assert!(q.is_some(), "queue exists");
    let q = q.unwrap();
    assert_eq!(q.attrs["MessageRetentionPeriod"], "300");
    assert_eq!(q.attrs["SqsManagedSseEnabled"], "true");
    assert!(!q.attrs.contains_key("KmsMasterKeyId") || q.attrs["KmsMasterKeyId"].is_empty());
    assert_eq!(q.tags["karpctl.io/cluster"], c);
    assert_eq!(q.tags["karpctl.io/resource"], "queue");
    assert_eq!(q.tags["team"], "platform");
    let qarn = q.attrs["QueueArn"].clone();

    // The policy: exactly the two statements of docs/aws-behaviour.md, compared after parsing.
    let doc = policy_json(&q.attrs["Policy"]);
    let st = statements(&doc);
    assert_eq!(st.len(), 2, "{doc}");
    let allow = st.iter().find(|s| s["Effect"] == "Allow").expect("allow statement");
    assert_eq!(strings(&allow["Action"]), ["sqs:SendMessage"]);
    assert_eq!(strings(&allow["Resource"]), [qarn.clone()]);
    // Only EventBridge, and only for this plan's rules (issue 13; docs/security.md).
    assert_eq!(strings(&allow["Principal"]["Service"]), ["events.amazonaws.com"]);
    let account = qarn.rsplit(':').nth(1).unwrap().to_string();
    let mut rule_arns: Vec<String> =
        PARTS.iter().map(|(p, _, _)| format!("arn:aws:events:us-east-1:{account}:rule/{}", rule_name(&c, p))).collect();
    rule_arns.sort();
    assert_eq!(allow["Condition"].as_object().unwrap().len(), 1, "{allow}");
    assert_eq!(strings(&allow["Condition"]["ArnEquals"]["aws:SourceArn"]), rule_arns);
    let deny = find_sid(&st, "DenyHTTP");
    assert_eq!(deny["Effect"], "Deny");
    assert_eq!(strings(&deny["Action"]), ["sqs:*"]);
    assert_eq!(deny["Principal"], json!("*"));
    assert_eq!(strings(&deny["Resource"]), [qarn.clone()]);
    assert_eq!(strings(&deny["Condition"]["Bool"]["aws:SecureTransport"]), ["false"]);

    for (part, source, detail) in PARTS {
        let (pattern, targets, tags) = rule(&sdk, &rule_name(&c, part)).unwrap_or_else(|| panic!("rule {part} missing"));
        assert_eq!(pattern, json!({"source": [source], "detail-type": [detail]}), "{part}");
        assert_eq!(targets, vec![("KarpenterInterruptionQueueTarget".to_string(), qarn.clone())], "{part}");
        assert_eq!(tags["karpctl.io/cluster"], c);
    }

    // Second run: nothing to write.
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn out_of_band_changes_are_found_by_diff_and_repaired_by_up() {
    let c = cluster_name("drift");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let qname = queue_name(&c);
    let q = queue(&sdk, &qname).unwrap();
    let url = q.url.clone();
    rt().block_on(async {
        // A rule deleted.
        let r = rule_name(&c, "Rebalance");
        sdk.events.remove_targets().rule(&r).ids("KarpenterInterruptionQueueTarget").send().await.unwrap();
        sdk.events.delete_rule().name(&r).send().await.unwrap();
        // A target removed from another rule.
        sdk.events
            .remove_targets()
            .rule(rule_name(&c, "SpotInterrupt"))
            .ids("KarpenterInterruptionQueueTarget")
            .send()
            .await
            .unwrap();
        // Retention changed.
        sdk.sqs
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "600")
            .send()
            .await
            .unwrap();
        // The DenyHTTP statement removed.
        let mut doc = policy_json(&q.attrs["Policy"]);
        let kept: Vec<Value> = statements(&doc).into_iter().filter(|s| s["Sid"] != "DenyHTTP").collect();
        doc["Statement"] = Value::Array(kept);
        sdk.sqs
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(QueueAttributeName::Policy, doc.to_string())
            .send()
            .await
            .unwrap();
    });

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("+ rule-Rebalance"), "deleted rule shown as a create: {r:?}");
    assert!(r.stdout.contains("~ rule-SpotInterrupt"), "{r:?}");
    assert!(r.stdout.contains("Targets"), "{r:?}");
    assert!(r.stdout.contains("MessageRetentionPeriod = \"600\" -> \"300\""), "{r:?}");
    assert!(r.stdout.contains("~ queue-policy"), "{r:?}");
    assert!(r.stdout.contains("DenyHTTP"), "the changed statement is shown: {r:?}");
    assert!(r.stdout.contains("Plan: 1 to add, 3 to change, 0 to destroy."), "{r:?}");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "repaired: {r:?}");
    let q = queue(&sdk, &qname).unwrap();
    assert_eq!(q.attrs["MessageRetentionPeriod"], "300");
    assert_eq!(statements(&policy_json(&q.attrs["Policy"])).len(), 2);
    assert_eq!(rule(&sdk, &rule_name(&c, "SpotInterrupt")).unwrap().1.len(), 1);
    assert!(rule(&sdk, &rule_name(&c, "Rebalance")).is_some());
}

#[test]
fn down_removes_everything_and_a_second_down_is_a_no_op() {
    let c = cluster_name("down");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let r = karpctl(&wd, &["down", "--cluster", &c]);
    assert_eq!(r.code, 1, "down without a terminal and without --yes refuses: {r:?}");
    assert!(r.stderr.contains("--yes"), "{r:?}");
    let sdk = sdk();
    assert!(queue(&sdk, &queue_name(&c)).is_some(), "refused down changed nothing");

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_none());
    for (part, _, _) in PARTS {
        assert!(rule(&sdk, &rule_name(&c, part)).is_none(), "rule {part} removed");
    }
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "second down writes nothing");
}

#[test]
fn switching_interruption_off_removes_queue_and_rules() {
    let c = cluster_name("off");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    wd.plan(&c, &plan_toml(&c, "[tags]\nteam = \"platform\"\n[interruption]\nenabled = false\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("- queue aws_sqs_queue"), "{r:?}");
    assert!(r.stdout.contains("- rule-HealthEvent"), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();
    assert!(queue(&sdk, &queue_name(&c)).is_none());
    for (part, _, _) in PARTS {
        assert!(rule(&sdk, &rule_name(&c, part)).is_none());
    }
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn an_unowned_queue_of_the_same_name_stops_up_and_survives_down() {
    let c = cluster_name("unowned");
    seed(&c, &[]);
    let sdk = sdk();
    let qname = queue_name(&c);
    rt().block_on(async {
        sdk.sqs
            .create_queue()
            .queue_name(&qname)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "900")
            .tags("owner", "someone-else")
            .send()
            .await
            .unwrap();
    });
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let err = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(err.contains(&qname) && err.contains("not managed by karpctl"), "{err}");
    let q = queue(&sdk, &qname).unwrap();
    assert_eq!(q.attrs["MessageRetentionPeriod"], "900", "untouched");
    assert!(!q.attrs.contains_key("Policy"), "no policy added");
    assert!(!q.tags.contains_key("karpctl.io/cluster"));
    assert!(rule(&sdk, &rule_name(&c, "HealthEvent")).is_none(), "up stopped before any write");

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    let q = queue(&sdk, &qname);
    assert!(q.is_some(), "down leaves a queue that is not ours");
    assert_eq!(q.unwrap().tags["owner"], "someone-else");
}

#[test]
fn a_missing_cluster_a_bad_plan_and_a_wrong_account_pin_fail_without_writes() {
    let wd = Workdir::new();
    let sdk = sdk();
    // Missing cluster.
    let c = cluster_name("nocluster");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("EKS cluster {c} does not exist")), "{r:?}");
    assert!(r.stderr.contains("hint:"), "{r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_none());

    // Bad plan file: unknown key, named with its line.
    let c = cluster_name("badplan");
    seed(&c, &[]);
    wd.plan(&c, &format!("cluster = \"{c}\"\n[interruption]\nenabled = true\nretention = 300\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("{c}.toml:4")), "line number: {r:?}");
    assert!(r.stderr.contains("retention"), "{r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_none());

    // Account pin mismatch.
    wd.plan(&c, &format!("cluster = \"{c}\"\naccount_id = \"111122223333\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("pinned to account 111122223333"), "{r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_none());
}

#[test]
fn diff_exit_codes_follow_the_contract() {
    let c = cluster_name("exit");
    seed(&c, &[]);
    let wd = Workdir::new();
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "changes pending on a bare cluster (defaults, no plan file): {r:?}");
    assert!(r.stdout.contains("to add"), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["format_version"], 2);
    assert_eq!(doc["in_sync"], true);
}

/// The ARNs the queue policy's EventBridge statement lets send (`aws:SourceArn`).
fn senders(sdk: &Sdk, qname: &str) -> Vec<String> {
    let q = queue(sdk, qname).expect("the queue");
    let doc = policy_json(q.attrs.get("Policy").expect("a policy"));
    statements(&doc)
        .iter()
        .filter(|s| s["Effect"] == "Allow")
        .flat_map(|s| strings(&s["Condition"]["ArnEquals"]["aws:SourceArn"]))
        .collect()
}

/// A rule another tool made that targets karpctl's queue is never refused: the plan says so
/// (a warning with what to do), the queue policy keeps letting it send, and a second `up`
/// changes nothing; once the rule is gone, the policy drops its name.
#[test]
fn another_tools_rule_that_targets_the_queue_keeps_sending_and_is_said() {
    let c = cluster_name("foreign");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan_body(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let qname = queue_name(&c);
    let queue_arn = queue(&sdk, &qname).unwrap().attrs["QueueArn"].clone();
    let name = format!("TheirSpotInterrupt-{c}");
    let arn = rt().block_on(async {
        let pattern = json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]});
        let r = sdk.events.put_rule().name(&name).event_pattern(pattern.to_string()).send().await.unwrap();
        let t = aws_sdk_eventbridge::types::Target::builder().id("theirs").arn(&queue_arn).build().unwrap();
        sdk.events.put_targets().rule(&name).targets(t).send().await.unwrap();
        r.rule_arn().unwrap().to_string()
    });

    // Before `up`, doctor sees the policy refuse their rule (karpctl's own rule carries the
    // same events, so a warning).
    let r = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    let doc = r.json();
    let refused = with_code(&findings(&doc), "queue-policy-refuses-rule");
    assert_eq!(refused.len(), 1, "{doc}");
    assert_eq!(refused[0]["severity"], "warning", "{doc}");
    assert!(refused[0]["message"].as_str().unwrap().contains(&name), "{doc}");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "the policy gains the rule's name: {r:?}");
    assert!(
        r.stdout.contains(&format!("warning: aws_cloudwatch_event_rule {name} targets the interruption queue")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("karpctl import"), "says what to do: {}", r.stdout);
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let allowed = senders(&sdk, &qname);
    assert!(allowed.contains(&arn), "never refused: {allowed:?}");
    assert_eq!(allowed.len(), RULE_EVENTS.len() + 1, "the plan's rules and theirs: {allowed:?}");
    assert!(rule(&sdk, &name).is_some(), "their rule is left alone");
    let doc = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]).json();
    assert!(with_code(&findings(&doc), "queue-policy-refuses-rule").is_empty(), "nothing refused after up: {doc}");
    assert_second_up_writes_nothing(&wd, &c);

    rt().block_on(async {
        sdk.events.remove_targets().rule(&name).ids("theirs").send().await.unwrap();
        sdk.events.delete_rule().name(&name).send().await.unwrap();
    });
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    assert!(!senders(&sdk, &qname).contains(&arn), "gone, so no longer named");
}
