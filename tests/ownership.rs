//! Ownership: for every kind, a same-named object without karpctl's tags, or with another
//! cluster's, stops `up` with a clear error and survives `down`; `--adopt` takes over unowned
//! objects (never another cluster's).

use crate::common::*;
use aws_sdk_iam::types::Tag as IamTag;
use serde_json::json;

const SOME_POLICY: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:DescribeInstances","Resource":"*"}]}"#;

/// Who a pre-made object claims to belong to.
#[derive(Clone, Copy, Debug)]
enum Claim {
    Nobody,
    OtherCluster,
}

fn tags(claim: Claim) -> Vec<(String, String)> {
    let mut t = vec![("owner".to_string(), "someone-else".to_string())];
    if let Claim::OtherCluster = claim {
        t.push(("karpctl.io/cluster".to_string(), "another-cluster".to_string()));
    }
    t
}

fn iam_tags(claim: Claim) -> Vec<IamTag> {
    tags(claim).into_iter().map(|(k, v)| IamTag::builder().key(k).value(v).build().unwrap()).collect()
}

/// Make the object `kind` for cluster `c` out of band; return a closure-free description.
fn premake(sdk: &Sdk, c: &str, kind: &str, claim: Claim) {
    rt().block_on(async {
        match kind {
            "role" => {
                sdk.iam
                    .create_role()
                    .role_name(node_role(c))
                    .path(iam_path(c))
                    .assume_role_policy_document(TRUST_EC2)
                    .set_tags(Some(iam_tags(claim)))
                    .send()
                    .await
                    .unwrap();
            }
            "policy" => {
                sdk.iam
                    .create_policy()
                    .policy_name(policy_name(c, "NodeLifecycle"))
                    .path(iam_path(c))
                    .policy_document(SOME_POLICY)
                    .set_tags(Some(iam_tags(claim)))
                    .send()
                    .await
                    .unwrap();
            }
            "instance-profile" => {
                sdk.iam
                    .create_instance_profile()
                    .instance_profile_name(instance_profile(c))
                    .path(iam_path(c))
                    .set_tags(Some(iam_tags(claim)))
                    .send()
                    .await
                    .unwrap();
            }
            "queue" => {
                let mut req = sdk.sqs.create_queue().queue_name(queue_name(c));
                for (k, v) in tags(claim) {
                    req = req.tags(k, v);
                }
                req.send().await.unwrap();
            }
            "rule" => {
                let mut req =
                    sdk.events.put_rule().name(rule_name(c, "HealthEvent")).event_pattern(r#"{"source":["aws.health"]}"#);
                for (k, v) in tags(claim) {
                    req = req.tags(aws_sdk_eventbridge::types::Tag::builder().key(k).value(v).build().unwrap());
                }
                req.send().await.unwrap();
            }
            "pod-identity" => {
                let mut req = sdk
                    .eks
                    .create_pod_identity_association()
                    .cluster_name(c)
                    .namespace("kube-system")
                    .service_account("karpenter")
                    .role_arn("arn:aws:iam::000000000000:role/someone-elses-role");
                for (k, v) in tags(claim) {
                    req = req.tags(k, v);
                }
                req.send().await.unwrap();
            }
            other => panic!("unknown kind {other}"),
        }
    });
}

/// The pre-made object is still there, unchanged in what identifies its owner.
fn still_theirs(sdk: &Sdk, c: &str, kind: &str) {
    rt().block_on(async {
        let owner_tag: Option<String> = match kind {
            "role" => {
                let r = sdk.iam.get_role().role_name(node_role(c)).send().await.expect("role still exists");
                let r = r.role().unwrap();
                r.tags().iter().find(|t| t.key() == "owner").map(|t| t.value().to_string())
            }
            "policy" => {
                let arn = format!("arn:aws:iam::000000000000:policy/karpctl/{c}/KarpenterControllerNodeLifecyclePolicy-{c}");
                let p = sdk.iam.get_policy().policy_arn(&arn).send().await.expect("policy still exists");
                let v = p.policy().unwrap().default_version_id().unwrap().to_string();
                assert_eq!(v, "v1", "no new policy version was written");
                p.policy().unwrap().tags().iter().find(|t| t.key() == "owner").map(|t| t.value().to_string())
            }
            "instance-profile" => {
                let p = sdk
                    .iam
                    .get_instance_profile()
                    .instance_profile_name(instance_profile(c))
                    .send()
                    .await
                    .expect("profile still exists");
                assert!(p.instance_profile().unwrap().roles().is_empty(), "no role was added");
                p.instance_profile().unwrap().tags().iter().find(|t| t.key() == "owner").map(|t| t.value().to_string())
            }
            "queue" => {
                let u = sdk.sqs.get_queue_url().queue_name(queue_name(c)).send().await.expect("queue still exists");
                let t = sdk.sqs.list_queue_tags().queue_url(u.queue_url().unwrap()).send().await.unwrap();
                t.tags().and_then(|m| m.get("owner").cloned())
            }
            "rule" => {
                let d = sdk.events.describe_rule().name(rule_name(c, "HealthEvent")).send().await.expect("rule still exists");
                assert_eq!(d.event_pattern(), Some(r#"{"source":["aws.health"]}"#), "pattern untouched");
                let t = sdk.events.list_targets_by_rule().rule(rule_name(c, "HealthEvent")).send().await.unwrap();
                assert!(t.targets().is_empty(), "no target was added");
                let tags = sdk.events.list_tags_for_resource().resource_arn(d.arn().unwrap()).send().await.unwrap();
                tags.tags().iter().find(|t| t.key() == "owner").map(|t| t.value().to_string())
            }
            "pod-identity" => {
                let l = list_karpenter_associations(sdk, c).await;
                let a = l.first().expect("association still exists");
                let d = describe_association(sdk, c, a.association_id().unwrap()).await;
                let d = d.association().unwrap();
                assert_eq!(d.role_arn(), Some("arn:aws:iam::000000000000:role/someone-elses-role"), "role untouched");
                d.tags().and_then(|m| m.get("owner").cloned())
            }
            other => panic!("unknown kind {other}"),
        };
        assert_eq!(owner_tag.as_deref(), Some("someone-else"), "{kind}: tags untouched");
    });
}

fn plan(c: &str) -> String {
    plan_toml(c, "[identity]\ninstance_profile = true\n")
}

fn conflict_case(kind: &str, claim: Claim) {
    let c = cluster_name(&format!("own-{kind}"));
    seed(&c, &[]);
    let sdk = sdk();
    premake(&sdk, &c, kind, claim);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{kind} {claim:?}: {r:?}");
    let doc = r.json();
    let msg = doc["error"]["message"].as_str().unwrap_or_default().to_string();
    match claim {
        Claim::Nobody => assert!(msg.contains("not managed by karpctl"), "{kind}: {msg}"),
        Claim::OtherCluster => assert!(msg.contains("another-cluster"), "{kind}: {msg}"),
    }
    assert_eq!(doc["stats"]["writes"], 0, "{kind}: up stops before any write: {doc}");
    still_theirs(&sdk, &c, kind);
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{kind}: {r:?}");
    still_theirs(&sdk, &c, kind);
    if let Claim::Nobody = claim {
        // --adopt is never needed for another cluster's objects: they are never taken.
    }
    if let Claim::OtherCluster = claim {
        let r = karpctl(&wd, &["up", "--cluster", &c, "--adopt"]);
        assert_eq!(r.code, 1, "another cluster's object is never adopted: {r:?}");
        still_theirs(&sdk, &c, kind);
    }
}

#[test]
fn unowned_role_policy_profile_queue_rule_and_association_stop_up_and_survive_down() {
    for kind in ["role", "policy", "instance-profile", "queue", "rule", "pod-identity"] {
        conflict_case(kind, Claim::Nobody);
    }
}

#[test]
fn another_clusters_objects_stop_up_survive_down_and_are_never_adopted() {
    for kind in ["role", "policy", "instance-profile", "queue", "rule", "pod-identity"] {
        conflict_case(kind, Claim::OtherCluster);
    }
}

#[test]
fn adopt_takes_over_unowned_objects_and_converges_them() {
    let c = cluster_name("adopt");
    seed(&c, &[]);
    let sdk = sdk();
    for kind in ["role", "queue", "rule"] {
        premake(&sdk, &c, kind, Claim::Nobody);
    }
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--adopt"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("adopted"), "adoption is listed in the plan: {r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c, "--adopt"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "converged after adoption: {r:?}");
    rt().block_on(async {
        let role = sdk.iam.get_role().role_name(node_role(&c)).send().await.unwrap();
        let tags = role.role().unwrap().tags();
        assert!(tags.iter().any(|t| t.key() == "karpctl.io/cluster" && t.value() == c));
        let u = sdk.sqs.get_queue_url().queue_name(queue_name(&c)).send().await.unwrap();
        let a = sdk
            .sqs
            .get_queue_attributes()
            .queue_url(u.queue_url().unwrap())
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .unwrap();
        assert_eq!(a.attributes().unwrap()[&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod], "300");
    });
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "adopted objects are karpctl's now: {r:?}");
    let gone = rt().block_on(sdk.iam.get_role().role_name(node_role(&c)).send());
    assert!(gone.is_err(), "the adopted role was removed by down");
}

/// `down` without a plan file, on a setup whose names and IAM path the cluster's name does not
/// give (an IRSA controller role, so no association points at it): with iam:ListRoles refused it
/// cannot look for the controller role, so it refuses before any write, listing what it would
/// have removed; allowed, it finds the role by its trust (this cluster's OIDC provider), and
/// through it the node role and the queue, and removes everything this cluster's tags mark.
#[test]
fn down_without_a_plan_finds_an_irsa_controller_role_or_refuses_to_leave_half() {
    let c = cluster_name("own-loc");
    let a = seed(&c, &[])["account_id"].as_str().unwrap_or("000000000000").to_string();
    let sdk = sdk();
    create_oidc_provider(&sdk, &c);
    let (ctrl, node, q) = (format!("ctl-{c}"), format!("nodes-{c}"), format!("q-{c}"));
    let wd = Workdir::new();
    let plan_path = wd.plan_for(
        &c,
        &format!(
            "\n[interruption]\nqueue_name = \"{q}\"\n\n[identity]\nmode = \"irsa\"\npath = \"/\"\ncontroller_role_name = \"{ctrl}\"\nnode_role_name = \"{node}\"\n"
        ),
    );
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    std::fs::remove_file(&plan_path).unwrap();
    let policies: Vec<String> =
        CONTROLLER_PARTS.iter().map(|p| format!("arn:aws:iam::{a}:policy/KarpenterController{p}Policy-{c}")).collect();
    let all_there = |sdk: &Sdk| {
        rt().block_on(async {
            sdk.iam.get_role().role_name(&ctrl).send().await.is_ok()
                && sdk.iam.get_role().role_name(&node).send().await.is_ok()
                && sdk.sqs.get_queue_url().queue_name(&q).send().await.is_ok()
        })
    };
    assert!(all_there(&sdk));

    let denied = format!(
        "User: arn:aws:sts::{a}:assumed-role/ci/karpctl is not authorized to perform: iam:ListRoles on resource: arn:aws:iam::{a}:role/ because no identity-based policy allows the iam:ListRoles action"
    );
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "iam", "operation": "ListRoles", "error": {"code": "AccessDenied", "status": 403, "message": denied}}]),
    );
    let r = karpctl_at(&wd, px.url(), &["down", "--cluster", &c, "--yes", "--output", "json"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "nothing written: {doc}");
    let msg = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("iam:ListRoles was refused") && msg.contains("controller role"), "{doc}");
    assert!(msg.contains(&rule_name(&c, "HealthEvent")), "names what it would remove: {doc}");
    let hint = doc["error"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains(&format!("--config plans/{c}.toml")), "{doc}");
    assert!(all_there(&sdk), "nothing removed");
    for p in &policies {
        assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_ok(), "{p} stays");
    }

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains(&format!("found controller role {ctrl} (path /), through its trust policy")), "{r:?}");
    assert!(r.stderr.contains(&format!("found interruption queue {q}")), "{r:?}");
    rt().block_on(async {
        assert!(sdk.iam.get_role().role_name(&ctrl).send().await.is_err(), "{ctrl} removed: {r:?}");
        assert!(sdk.iam.get_role().role_name(&node).send().await.is_err(), "{node} removed: {r:?}");
        assert!(sdk.sqs.get_queue_url().queue_name(&q).send().await.is_err(), "{q} removed: {r:?}");
        for p in &policies {
            assert!(sdk.iam.get_policy().policy_arn(p).send().await.is_err(), "{p} removed: {r:?}");
        }
        for part in RULE_PARTS {
            assert!(sdk.events.describe_rule().name(rule_name(&c, part)).send().await.is_err(), "{part} removed: {r:?}");
        }
    });
}
