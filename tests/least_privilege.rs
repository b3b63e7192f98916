//! Issue 13, least privilege past upstream: only this plan's interruption rules may feed the
//! queue (`aws:SourceArn`), only Karpenter's service account of this cluster may assume the
//! controller role (Pod Identity session tags), the node role's `aws:SourceAccount` option, and
//! the upgrade of a setup made by the previous release (unconditioned documents).
//!
//! Neither emulator evaluates these conditions (ministack and moto deliver EventBridge events to
//! SQS without reading the queue policy, and assume no roles through Pod Identity): the
//! documents are checked as written, and routing is checked on moto, which accepts `aws.*`
//! sources in PutEvents.

use crate::common::*;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// What the previous release wrote (upstream's documents, no conditions).
const OLD_TRUST_POD_IDENTITY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}"#;

fn old_queue_policy(queue_arn: &str) -> String {
    json!({
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {"Sid": "SqsWrite", "Effect": "Allow",
             "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
             "Action": "sqs:SendMessage", "Resource": queue_arn},
            {"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn,
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ]
    })
    .to_string()
}

fn plan(c: &str, identity: &str) -> String {
    plan_toml(c, &format!("\n[identity]\n{identity}\n[interruption]\nenabled = true\n"))
}

fn trust(sdk: &Sdk, role: &str) -> Value {
    let r = rt().block_on(sdk.iam.get_role().role_name(role).send()).expect("iam:GetRole");
    policy_json(r.role().unwrap().assume_role_policy_document().expect("trust policy"))
}

fn has_removed_line(block: &str, needle: &str) -> bool {
    block.lines().any(|l| l.trim_start().starts_with('-') && l.contains(needle))
}

/// The queue policy as written: events.amazonaws.com only, for exactly `rules`, plus DenyHTTP.
fn assert_scoped_queue_policy(doc: &Value, queue_arn: &str, rules: &[String]) {
    let st = statements(doc);
    assert_eq!(st.len(), 2, "{doc:#}");
    let allow = find_sid(&st, "SqsWrite");
    assert_eq!(allow["Effect"], "Allow");
    assert_eq!(strings(&allow["Principal"]["Service"]), ["events.amazonaws.com"], "no sqs.amazonaws.com");
    assert_eq!(strings(&allow["Action"]), ["sqs:SendMessage"]);
    assert_eq!(strings(&allow["Resource"]), [queue_arn.to_string()]);
    let cond = allow["Condition"].as_object().expect("a condition");
    assert_eq!(cond.keys().collect::<Vec<_>>(), ["ArnEquals"], "{allow}");
    let mut want = rules.to_vec();
    want.sort();
    assert_eq!(strings(&allow["Condition"]["ArnEquals"]["aws:SourceArn"]), want);
    let deny = find_sid(&st, "DenyHTTP");
    assert_eq!(deny["Effect"], "Deny");
    assert_eq!(deny["Principal"], json!("*"));
    assert_eq!(strings(&deny["Action"]), ["sqs:*"]);
    assert_eq!(strings(&deny["Condition"]["Bool"]["aws:SecureTransport"]), ["false"]);
}

/// The controller's Pod Identity trust: one statement, both actions, the three session tags.
fn assert_scoped_pod_identity_trust(doc: &Value, cluster_arn: &str, namespace: &str, service_account: &str) {
    let st = statements(doc);
    assert_eq!(st.len(), 1, "{doc:#}");
    let s = &st[0];
    assert_eq!(strings(&s["Principal"]["Service"]), ["pods.eks.amazonaws.com"]);
    assert_eq!(strings(&s["Action"]), ["sts:AssumeRole", "sts:TagSession"]);
    let cond = s["Condition"].as_object().expect("a condition");
    assert_eq!(cond.keys().collect::<Vec<_>>(), ["StringEquals"], "{s}");
    let eq = &s["Condition"]["StringEquals"];
    assert_eq!(eq.as_object().unwrap().len(), 3, "{eq}");
    assert_eq!(strings(&eq["aws:RequestTag/eks-cluster-arn"]), [cluster_arn.to_string()]);
    assert_eq!(strings(&eq["aws:RequestTag/kubernetes-namespace"]), [namespace.to_string()]);
    assert_eq!(strings(&eq["aws:RequestTag/kubernetes-service-account"]), [service_account.to_string()]);
}

fn rule_arns(account: &str, c: &str, parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| format!("arn:aws:events:us-east-1:{account}:rule/{}", rule_name(c, p))).collect()
}

fn cluster_arn(sdk: &Sdk, c: &str) -> String {
    let d = rt().block_on(sdk.eks.describe_cluster().name(c).send()).expect("eks:DescribeCluster");
    d.cluster().unwrap().arn().unwrap().to_string()
}

// ----------------------------------------------------------------------------------- tests

#[test]
fn up_from_nothing_writes_the_scoped_documents_then_a_second_up_writes_nothing() {
    let c = cluster_name("lp-up");
    let s = seed(&c, &[]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "namespace = \"karpenter\"\nservice_account = \"karpenter-controller\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();

    let q = queue(&sdk, &queue_name(&c)).expect("queue");
    let qarn = q.attrs["QueueArn"].clone();
    assert_scoped_queue_policy(&policy_json(&q.attrs["Policy"]), &qarn, &rule_arns(&a, &c, &RULE_PARTS));
    // The condition names the rules as EventBridge reports their ARNs.
    for part in RULE_PARTS {
        let d = rt().block_on(sdk.events.describe_rule().name(rule_name(&c, part)).send()).expect("rule");
        assert!(rule_arns(&a, &c, &RULE_PARTS).contains(&d.arn().unwrap().to_string()), "{part}: {:?}", d.arn());
    }

    let carn = cluster_arn(&sdk, &c);
    assert_eq!(carn, format!("arn:aws:eks:us-east-1:{a}:cluster/{c}"));
    assert_scoped_pod_identity_trust(&trust(&sdk, &controller_role(&c)), &carn, "karpenter", "karpenter-controller");
    let node = trust(&sdk, &node_role(&c));
    assert!(statements(&node)[0].get("Condition").is_none(), "node trust has no condition by default: {node}");

    // The association passes the session tags the trust policy requires.
    let assoc = rt().block_on(async {
        let l = sdk
            .eks
            .list_pod_identity_associations()
            .cluster_name(&c)
            .namespace("karpenter")
            .service_account("karpenter-controller")
            .send()
            .await
            .unwrap();
        let id = l.associations()[0].association_id().unwrap().to_string();
        describe_association(&sdk, &c, &id).await
    });
    assert_ne!(assoc.association().unwrap().disable_session_tags(), Some(true), "session tags on: {assoc:?}");

    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn the_queue_policy_follows_the_rules_of_the_pinned_version() {
    let c = cluster_name("lp-ver");
    let s = seed(&c, &[]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "karpenter_version = \"1.9\"\n"));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    let before_1_10: Vec<&str> = catalog::RULES.iter().filter(|r| r.since_minor < 10).map(|r| r.part).collect();
    assert_scoped_queue_policy(&policy_json(&q.attrs["Policy"]), &q.attrs["QueueArn"], &rule_arns(&a, &c, &before_1_10));

    // 1.10 adds the capacity-reservation rule, and with it its ARN in the condition.
    wd.plan(&c, &plan(&c, "karpenter_version = \"1.10\"\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let st = steps(&r);
    assert_eq!(st.get("queue-policy").map(String::as_str), Some("update"), "{st:?}");
    assert_eq!(st.get("rule-CapacityReservation").map(String::as_str), Some("create"), "{st:?}");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    assert_scoped_queue_policy(&policy_json(&q.attrs["Policy"]), &q.attrs["QueueArn"], &rule_arns(&a, &c, &RULE_PARTS));
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn node_trust_source_account_is_an_option() {
    let c = cluster_name("lp-node");
    let s = seed(&c, &[]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "node_trust_source_account = true\n"));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let node = trust(&sdk, &node_role(&c));
    let st = statements(&node);
    assert_eq!(st.len(), 1, "{node}");
    assert_eq!(strings(&st[0]["Principal"]["Service"]), ["ec2.amazonaws.com"]);
    assert_eq!(strings(&st[0]["Action"]), ["sts:AssumeRole"]);
    let cond = st[0]["Condition"].as_object().expect("a condition");
    assert_eq!(cond.keys().collect::<Vec<_>>(), ["StringEquals"], "{node}");
    assert_eq!(cond["StringEquals"].as_object().unwrap().len(), 1, "{node}");
    assert_eq!(strings(&cond["StringEquals"]["aws:SourceAccount"]), [a.clone()], "{node}");
    assert_second_up_writes_nothing(&wd, &c);

    // Switched off again: the node role's trust changes in place, nothing else.
    wd.plan(&c, &plan(&c, ""));
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(steps(&r), BTreeMap::from([("node-role".to_string(), "update".to_string())]));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    assert!(statements(&trust(&sdk, &node_role(&c)))[0].get("Condition").is_none());
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn a_setup_made_by_the_previous_release_is_upgraded_by_the_next_up() {
    let c = cluster_name("lp-upg");
    let s = seed(&c, &[]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();

    // What the previous release left: both documents without conditions.
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    let qarn = q.attrs["QueueArn"].clone();
    rt().block_on(async {
        sdk.sqs
            .set_queue_attributes()
            .queue_url(&q.url)
            .attributes(QueueAttributeName::Policy, old_queue_policy(&qarn))
            .send()
            .await
            .expect("sqs:SetQueueAttributes");
        sdk.iam
            .update_assume_role_policy()
            .role_name(controller_role(&c))
            .policy_document(OLD_TRUST_POD_IDENTITY)
            .send()
            .await
            .expect("iam:UpdateAssumeRolePolicy");
    });
    let old = policy_json(&queue(&sdk, &queue_name(&c)).unwrap().attrs["Policy"]);
    assert_eq!(strings(&find_sid(&statements(&old), "SqsWrite")["Principal"]["Service"]).len(), 2, "old policy in place");

    // diff: exactly those two documents, as field-level policy changes.
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let want = BTreeMap::from([
        ("controller-role".to_string(), "update".to_string()),
        ("queue-policy".to_string(), "update".to_string()),
    ]);
    assert_eq!(steps(&r), want, "exactly the queue policy and the controller role");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("Plan: 0 to add, 2 to change, 0 to destroy."), "{r:?}");
    let qp = block(&r.stdout, "~ queue-policy");
    assert!(qp.contains("Policy"), "the Policy field is named: {qp}");
    assert!(has_added_line(qp, "aws:SourceArn"), "{qp}");
    assert!(has_removed_line(qp, "sqs.amazonaws.com"), "{qp}");
    let cr = block(&r.stdout, "~ controller-role");
    assert!(cr.contains("AssumeRolePolicyDocument"), "{cr}");
    assert!(has_added_line(cr, "aws:RequestTag/kubernetes-service-account"), "{cr}");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    assert_scoped_queue_policy(&policy_json(&q.attrs["Policy"]), &qarn, &rule_arns(&a, &c, &RULE_PARTS));
    assert_scoped_pod_identity_trust(&trust(&sdk, &controller_role(&c)), &cluster_arn(&sdk, &c), "kube-system", "karpenter");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "converged: {r:?}");
}

/// Every Karpenter event still reaches the queue through its rule, on moto (which evaluates no
/// queue policy, so this shows the routing, not the condition: see the module comment).
#[test]
fn strict_every_interruption_event_reaches_the_queue_through_its_rule() {
    let c = cluster_name("lp-route");
    let s = seed_strict(&c, &[]);
    let a = s["account_id"].as_str().unwrap().to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    let r = karpctl_strict(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk_strict();
    let q = queue(&sdk, &queue_name(&c)).expect("queue in moto");
    assert_scoped_queue_policy(&policy_json(&q.attrs["Policy"]), &q.attrs["QueueArn"], &rule_arns(&a, &c, &RULE_PARTS));

    let events: Vec<(&str, &str)> = RULE_EVENTS.iter().map(|(_, source, detail)| (*source, *detail)).collect();
    let received: BTreeSet<(String, String)> = rt().block_on(async {
        for &(source, detail) in &events {
            let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .source(source)
                .detail_type(detail)
                .detail(json!({"cluster": c}).to_string())
                .build();
            let o = sdk.events.put_events().entries(entry).send().await.expect("events:PutEvents");
            assert_eq!(o.failed_entry_count(), 0, "{source} / {detail}: {o:?}");
        }
        let mut got = BTreeSet::new();
        for _ in 0..10 {
            let m = sdk.sqs.receive_message().queue_url(&q.url).max_number_of_messages(10).send().await.unwrap();
            for msg in m.messages() {
                let body: Value = serde_json::from_str(msg.body().unwrap()).expect("event JSON");
                got.insert((body["source"].as_str().unwrap().to_string(), body["detail-type"].as_str().unwrap().to_string()));
            }
            if got.len() >= events.len() {
                break;
            }
        }
        got
    });
    let want: BTreeSet<(String, String)> = events.iter().map(|(s, d)| (s.to_string(), d.to_string())).collect();
    assert_eq!(received, want, "each of Karpenter's events arrives, through its rule");
}
