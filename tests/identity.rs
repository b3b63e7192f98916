//! Node and controller identity end to end (issue 3): IAM roles and their trust policies, the split
//! controller policies (statements written here from docs/aws-behaviour.md section 3, not from karpctl's code),
//! the node role's managed policies, the access entry, the Pod Identity association, IRSA, an
//! existing node role, drift, a Karpenter version bump, `down` with Karpenter-made instance
//! profiles, preflight failures and a 100-character cluster name. Every result is read back
//! through the AWS SDK.

use crate::common::*;
use aws_sdk_iam::error::ProvideErrorMetadata;
use aws_sdk_iam::types::{PolicyScopeType, Tag as IamTag};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

// ------------------------------------------------------------------------------------- names

fn policy_arn(a: &str, c: &str, part: &str) -> String {
    format!("arn:aws:iam::{a}:policy/karpctl/{c}/{}", policy_name(c, part))
}

fn plan(c: &str, identity: &str) -> String {
    plan_toml(c, &format!("\n[identity]\n{identity}"))
}

/// Seed a cluster and return (its name, the account id the seed reports).
fn seeded(prefix: &str, extra: &[&str]) -> (String, String) {
    let c = cluster_name(prefix);
    let s = seed(&c, extra);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    (c, a)
}

// ----------------------------------------------------------------------------- SDK reads

struct Role {
    arn: String,
    path: String,
    trust: Value,
    tags: BTreeMap<String, String>,
}

fn iam_tags(tags: &[IamTag]) -> BTreeMap<String, String> {
    tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

fn role(sdk: &Sdk, name: &str) -> Option<Role> {
    match rt().block_on(sdk.iam.get_role().role_name(name).send()) {
        Ok(o) => {
            let r = o.role().expect("GetRole returns the role");
            Some(Role {
                arn: r.arn().to_string(),
                path: r.path().to_string(),
                trust: policy_json(r.assume_role_policy_document().expect("trust policy")),
                tags: iam_tags(r.tags()),
            })
        }
        Err(e) => {
            assert_eq!(e.code(), Some("NoSuchEntity"), "GetRole {name}: {e:?}");
            None
        }
    }
}

struct Policy {
    path: String,
    default_version: String,
    doc: Value,
    tags: BTreeMap<String, String>,
}

/// A managed policy and its default version's document (GetPolicy + GetPolicyVersion).
fn policy(sdk: &Sdk, arn: &str) -> Option<Policy> {
    rt().block_on(async {
        let p = match sdk.iam.get_policy().policy_arn(arn).send().await {
            Ok(o) => o.policy().expect("GetPolicy returns the policy").clone(),
            Err(e) => {
                assert_eq!(e.code(), Some("NoSuchEntity"), "GetPolicy {arn}: {e:?}");
                return None;
            }
        };
        let v = p.default_version_id().expect("default version").to_string();
        let pv = sdk.iam.get_policy_version().policy_arn(arn).version_id(&v).send().await.unwrap();
        let doc = policy_json(pv.policy_version().and_then(|x| x.document()).expect("policy document"));
        Some(Policy { path: p.path().unwrap_or_default().to_string(), default_version: v, doc, tags: iam_tags(p.tags()) })
    })
}

/// Names of the customer managed policies under an IAM path.
fn policies_under(sdk: &Sdk, prefix: &str) -> BTreeSet<String> {
    let o = rt().block_on(sdk.iam.list_policies().scope(PolicyScopeType::Local).path_prefix(prefix).send()).unwrap();
    o.policies().iter().map(|p| p.policy_name().unwrap_or_default().to_string()).collect()
}

fn roles_under(sdk: &Sdk, prefix: &str) -> BTreeSet<String> {
    let o = rt().block_on(sdk.iam.list_roles().path_prefix(prefix).send()).unwrap();
    o.roles().iter().map(|r| r.role_name().to_string()).collect()
}

fn profiles_under(sdk: &Sdk, prefix: &str) -> BTreeSet<String> {
    let o = rt().block_on(sdk.iam.list_instance_profiles().path_prefix(prefix).send()).unwrap();
    o.instance_profiles().iter().map(|p| p.instance_profile_name().to_string()).collect()
}

/// The role names an instance profile holds, or None when the profile does not exist.
fn profile_roles(sdk: &Sdk, name: &str) -> Option<Vec<String>> {
    match rt().block_on(sdk.iam.get_instance_profile().instance_profile_name(name).send()) {
        Ok(o) => Some(o.instance_profile().unwrap().roles().iter().map(|r| r.role_name().to_string()).collect()),
        Err(e) => {
            assert_eq!(e.code(), Some("NoSuchEntity"), "GetInstanceProfile {name}: {e:?}");
            None
        }
    }
}

/// (type, principal ARN, tags) of the access entry for `principal`, or None.
fn access_entry(sdk: &Sdk, c: &str, principal: &str) -> Option<(String, String, BTreeMap<String, String>)> {
    match rt().block_on(sdk.eks.describe_access_entry().cluster_name(c).principal_arn(principal).send()) {
        Ok(o) => {
            let e = o.access_entry().expect("access entry");
            Some((
                e.r#type().unwrap_or_default().to_string(),
                e.principal_arn().unwrap_or_default().to_string(),
                e.tags().map(|t| t.clone().into_iter().collect()).unwrap_or_default(),
            ))
        }
        Err(e) => {
            assert_eq!(e.code(), Some("ResourceNotFoundException"), "DescribeAccessEntry {principal}: {e:?}");
            None
        }
    }
}

fn access_entry_principals(sdk: &Sdk, c: &str) -> Vec<String> {
    let o = rt().block_on(sdk.eks.list_access_entries().cluster_name(c).send()).unwrap();
    o.access_entries().to_vec()
}

fn all_associations(sdk: &Sdk, c: &str) -> usize {
    rt().block_on(sdk.eks.list_pod_identity_associations().cluster_name(c).send()).unwrap().associations().len()
}

fn queue_arn(sdk: &Sdk, name: &str) -> Option<String> {
    rt().block_on(async {
        let url = sdk.sqs.get_queue_url().queue_name(name).send().await.ok()?.queue_url()?.to_string();
        let a =
            sdk.sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::QueueArn).send().await.unwrap();
        a.attributes().and_then(|m| m.get(&QueueAttributeName::QueueArn)).cloned()
    })
}

// ------------------------------------------------------------------ expected documents

/// A statement reduced to what matters, with every list sorted: Sid, Effect, Action, Resource and
/// Condition (operator -> key -> sorted values; a string and a one-element array alike).
fn norm(s: &Value) -> Value {
    let keys: BTreeSet<&str> = s.as_object().expect("statement object").keys().map(String::as_str).collect();
    assert!(
        keys.is_subset(&BTreeSet::from(["Sid", "Effect", "Action", "Resource", "Condition"])),
        "unexpected keys in statement {s}"
    );
    let mut cond = Map::new();
    if let Some(c) = s.get("Condition") {
        for (op, kv) in c.as_object().expect("Condition object") {
            let mut m = Map::new();
            for (k, v) in kv.as_object().expect("condition operator object") {
                let vals: Vec<String> = match v {
                    Value::Array(a) => {
                        let mut x: Vec<String> =
                            a.iter().map(|e| e.as_str().map(str::to_string).unwrap_or(e.to_string())).collect();
                        x.sort();
                        x
                    }
                    Value::String(s) => vec![s.clone()],
                    other => vec![other.to_string()],
                };
                m.insert(k.clone(), json!(vals));
            }
            cond.insert(op.clone(), Value::Object(m));
        }
    }
    json!({
        "Sid": s["Sid"],
        "Effect": s["Effect"].as_str().unwrap_or_default().to_ascii_lowercase(),
        "Action": strings(&s["Action"]),
        "Resource": strings(&s["Resource"]),
        "Condition": cond,
    })
}

/// The live document holds exactly the expected statements (by Sid; conditions included).
fn assert_statements(what: &str, live: &Value, expected: &[Value]) {
    assert_eq!(live["Version"], "2012-10-17", "{what}: Version");
    let by_sid = |stmts: &[Value]| -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        for s in stmts {
            let sid = s["Sid"].as_str().unwrap_or_else(|| panic!("{what}: statement without Sid: {s}")).to_string();
            assert!(m.insert(sid.clone(), norm(s)).is_none(), "{what}: Sid {sid} twice");
        }
        m
    };
    let live_stmts = statements(live);
    let have = by_sid(&live_stmts);
    let want = by_sid(expected);
    assert_eq!(have.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{what}: Sids\n{live:#}");
    for (sid, w) in &want {
        assert_eq!(&have[sid], w, "{what}: statement {sid} differs (left live, right docs/aws-behaviour.md)");
    }
}

/// One statement of one Effect/Principal/Action as a trust policy, compared exactly.
fn assert_trust(what: &str, live: &Value, principal_kind: &str, principal: &str, actions: &[&str], condition: Option<Value>) {
    assert_eq!(live["Version"], "2012-10-17", "{what}: Version");
    let st = statements(live);
    assert_eq!(st.len(), 1, "{what}: exactly one statement: {live:#}");
    let s = &st[0];
    let keys: BTreeSet<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    let mut allowed = BTreeSet::from(["Sid", "Effect", "Principal", "Action"]);
    if condition.is_some() {
        allowed.insert("Condition");
    }
    assert!(keys.is_subset(&allowed), "{what}: unexpected keys in {s}");
    assert!(s["Effect"].as_str().unwrap().eq_ignore_ascii_case("Allow"), "{what}: {s}");
    let p = s["Principal"].as_object().unwrap_or_else(|| panic!("{what}: Principal is an object: {s}"));
    assert_eq!(p.keys().collect::<Vec<_>>(), vec![principal_kind], "{what}: principal kinds");
    assert_eq!(strings(&p[principal_kind]), vec![principal.to_string()], "{what}: principal");
    let mut want: Vec<String> = actions.iter().map(|x| x.to_string()).collect();
    want.sort();
    assert_eq!(strings(&s["Action"]), want, "{what}: actions");
    match condition {
        None => assert!(s.get("Condition").is_none(), "{what}: no condition: {s}"),
        Some(c) => assert_eq!(
            norm(&json!({"Condition": s["Condition"]}))["Condition"],
            norm(&json!({"Condition": c}))["Condition"],
            "{what}: condition"
        ),
    }
}

/// The controller's Pod Identity trust: only kube-system/karpenter of cluster `c` (session tags).
fn pod_identity_trust(what: &str, live: &Value, c: &str, a: &str) {
    let condition = json!({"StringEquals": {
        "aws:RequestTag/eks-cluster-arn": format!("arn:{PARTITION}:eks:{REGION}:{a}:cluster/{c}"),
        "aws:RequestTag/kubernetes-namespace": "kube-system",
        "aws:RequestTag/kubernetes-service-account": "karpenter",
    }});
    assert_trust(what, live, "Service", "pods.eks.amazonaws.com", &["sts:AssumeRole", "sts:TagSession"], Some(condition));
}

fn node_trust(what: &str, live: &Value) {
    assert_trust(what, live, "Service", "ec2.amazonaws.com", &["sts:AssumeRole"], None);
}

/// Every action of every statement of a document.
fn all_actions(doc: &Value) -> BTreeSet<String> {
    statements(doc).iter().flat_map(|s| strings(&s["Action"])).collect()
}

// ------------------------------------------------------------------------------------ tests

#[test]
fn up_creates_roles_policies_attachments_access_entry_and_association_exactly_then_is_idempotent() {
    let (c, a) = seeded("ident", &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();

    // Roles: exact trust, the cluster's path, ownership tag.
    let node = role(&sdk, &node_role(&c)).expect("node role exists");
    let ctrl = role(&sdk, &controller_role(&c)).expect("controller role exists");
    for (what, r) in [("node role", &node), ("controller role", &ctrl)] {
        assert_eq!(r.path, iam_path(&c), "{what} path");
        assert_eq!(r.tags.get(OWNER_TAG), Some(&c), "{what} tags: {:?}", r.tags);
    }
    assert_eq!(node.arn, format!("arn:aws:iam::{a}:role/karpctl/{c}/{}", node_role(&c)));
    assert_eq!(ctrl.arn, format!("arn:aws:iam::{a}:role/karpctl/{c}/{}", controller_role(&c)));
    node_trust("node role trust", &node.trust);
    pod_identity_trust("controller role trust", &ctrl.trust, &c, &a);

    // The controller policies: exactly the v1.14 statements of docs/aws-behaviour.md section 3, conditions included.
    let qarn = queue_arn(&sdk, &queue_name(&c)).expect("queue exists");
    let expected = controller_policies_v1_14(&c, REGION, &a, PARTITION, &node.arn, &qarn);
    let names: BTreeSet<String> = CONTROLLER_PARTS.iter().map(|p| policy_name(&c, p)).collect();
    assert_eq!(policies_under(&sdk, &iam_path(&c)), names, "exactly the five parts (no ZonalShift by default)");
    for part in CONTROLLER_PARTS {
        let p = policy(&sdk, &policy_arn(&a, &c, part)).unwrap_or_else(|| panic!("policy {part} exists"));
        assert_eq!(p.path, iam_path(&c), "{part} path");
        assert_eq!(p.tags.get(OWNER_TAG), Some(&c), "{part} tags: {:?}", p.tags);
        assert_statements(part, &p.doc, &expected[part]);
    }
    // Spot checks that do not depend on the helper above.
    let iam_doc = policy(&sdk, &policy_arn(&a, &c, "IAMIntegration")).unwrap().doc;
    let pass = find_sid(&statements(&iam_doc), "AllowPassingInstanceRole").clone();
    assert_eq!(strings(&pass["Resource"]), [node.arn.clone()], "PassRole on the node role only");
    assert_eq!(strings(&pass["Condition"]["StringEquals"]["iam:PassedToService"]), ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]);
    let rd = policy(&sdk, &policy_arn(&a, &c, "ResourceDiscovery")).unwrap().doc;
    assert!(all_actions(&rd).contains("iam:ListInstanceProfiles"), "{rd:#}");
    assert_eq!(strings(&find_sid(&statements(&rd), "AllowUnscopedInstanceProfileListAction")["Resource"]), ["*"]);

    // Attachments.
    let want_node: BTreeSet<String> = NODE_MANAGED_POLICIES.iter().map(|n| aws_managed(n)).collect();
    assert_eq!(attached(&sdk, &node_role(&c)), want_node, "node role managed policies");
    let want_ctrl: BTreeSet<String> = CONTROLLER_PARTS.iter().map(|p| policy_arn(&a, &c, p)).collect();
    assert_eq!(attached(&sdk, &controller_role(&c)), want_ctrl, "controller role policies");

    // Access entry for the node role, EC2_LINUX.
    let (typ, principal, tags) = access_entry(&sdk, &c, &node.arn).expect("access entry exists");
    assert_eq!(typ, "EC2_LINUX");
    assert_eq!(principal, node.arn);
    assert_eq!(tags.get(OWNER_TAG), Some(&c), "access entry tags: {tags:?}");

    // Pod Identity association kube-system/karpenter -> controller role.
    let assoc = karpenter_associations(&sdk, &c);
    assert_eq!(assoc.len(), 1, "{assoc:?}");
    assert_eq!(assoc[0].1, ctrl.arn);

    // Second up: nothing to write; diff in sync.
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn drift_in_trust_policy_statement_attachment_association_and_access_entry_is_found_and_repaired() {
    let (c, a) = seeded("idrift", &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let node = role(&sdk, &node_role(&c)).unwrap();
    let ctrl = role(&sdk, &controller_role(&c)).unwrap();
    let iam_arn = policy_arn(&a, &c, "IAMIntegration");
    let before = policy(&sdk, &iam_arn).unwrap();
    let assoc = karpenter_associations(&sdk, &c);
    assert_eq!(assoc.len(), 1);
    let intruder = format!("Intruder-{c}");

    rt().block_on(async {
        // Trust policy: sts:TagSession dropped from the controller's trust.
        sdk.iam
            .update_assume_role_policy()
            .role_name(controller_role(&c))
            .policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#)
            .send()
            .await
            .unwrap();
        // A policy statement: PassRole widened to every role, as a new default version.
        let mut doc = before.doc.clone();
        for s in doc["Statement"].as_array_mut().unwrap() {
            if s["Sid"] == "AllowPassingInstanceRole" {
                s["Resource"] = json!("*");
            }
        }
        sdk.iam.create_policy_version().policy_arn(&iam_arn).policy_document(doc.to_string()).set_as_default(true).send().await.unwrap();
        // Attachments: one node managed policy and one controller policy detached.
        sdk.iam.detach_role_policy().role_name(node_role(&c)).policy_arn(aws_managed("AmazonSSMManagedInstanceCore")).send().await.unwrap();
        sdk.iam.detach_role_policy().role_name(controller_role(&c)).policy_arn(policy_arn(&a, &c, "Interruption")).send().await.unwrap();
        // The association pointed at another role.
        let other = sdk.iam.create_role().role_name(&intruder).assume_role_policy_document(TRUST_EC2).send().await.unwrap();
        sdk.eks
            .update_pod_identity_association()
            .cluster_name(&c)
            .association_id(&assoc[0].0)
            .role_arn(other.role().unwrap().arn())
            .send()
            .await
            .unwrap();
        // The access entry deleted.
        sdk.eks.delete_access_entry().cluster_name(&c).principal_arn(&node.arn).send().await.unwrap();
    });
    assert_ne!(policy(&sdk, &iam_arn).unwrap().default_version, before.default_version, "a new default version");

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    for header in [
        "~ controller-role ",
        "~ controller-policy-IAMIntegration ",
        "+ node-role-policy-AmazonSSMManagedInstanceCore ",
        "+ controller-policy-attachment-Interruption ",
        "~ pod-identity ",
        "+ node-access-entry ",
    ] {
        assert!(r.stdout.contains(header), "diff names `{header}`: {r:?}");
    }
    assert!(has_added_line(block(&r.stdout, "~ controller-role "), "sts:TagSession"), "{r:?}");
    assert!(block(&r.stdout, "~ controller-policy-IAMIntegration ").contains(&node.arn), "{r:?}");
    assert!(block(&r.stdout, "~ pod-identity ").contains(&intruder), "{r:?}");
    assert!(r.stdout.contains("Plan: 3 to add, 3 to change, 0 to destroy."), "{r:?}");

    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let want: BTreeMap<String, String> = [
        ("controller-role", "update"),
        ("controller-policy-IAMIntegration", "update"),
        ("node-role-policy-AmazonSSMManagedInstanceCore", "create"),
        ("controller-policy-attachment-Interruption", "create"),
        ("pod-identity", "update"),
        ("node-access-entry", "create"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(steps(&r), want, "exactly the drifted objects, nothing else");

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "repaired: {r:?}");

    pod_identity_trust("controller trust repaired", &role(&sdk, &controller_role(&c)).unwrap().trust, &c, &a);
    let qarn = queue_arn(&sdk, &queue_name(&c)).unwrap();
    let after = policy(&sdk, &iam_arn).unwrap();
    assert_statements(
        "IAMIntegration repaired",
        &after.doc,
        &controller_policies_v1_14(&c, REGION, &a, PARTITION, &node.arn, &qarn)["IAMIntegration"],
    );
    let want_node: BTreeSet<String> = NODE_MANAGED_POLICIES.iter().map(|n| aws_managed(n)).collect();
    assert_eq!(attached(&sdk, &node_role(&c)), want_node);
    let want_ctrl: BTreeSet<String> = CONTROLLER_PARTS.iter().map(|p| policy_arn(&a, &c, p)).collect();
    assert_eq!(attached(&sdk, &controller_role(&c)), want_ctrl);
    let now = karpenter_associations(&sdk, &c);
    assert_eq!(now, vec![(assoc[0].0.clone(), ctrl.arn.clone())], "same association, role changed back in place");
    let (typ, principal, _) = access_entry(&sdk, &c, &node.arn).expect("access entry re-created");
    assert_eq!((typ.as_str(), principal.as_str()), ("EC2_LINUX", node.arn.as_str()));
    assert!(role(&sdk, &intruder).is_some(), "the other role is not karpctl's and stays");
}

#[test]
fn karpenter_version_bump_from_1_6_to_1_14_shows_the_added_permissions() {
    let (c, a) = seeded("ivers", &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "karpenter_version = \"1.6\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();
    let rd_arn = policy_arn(&a, &c, "ResourceDiscovery");
    let old = policy(&sdk, &rd_arn).unwrap();
    assert!(!all_actions(&old.doc).contains("iam:ListInstanceProfiles"), "1.6 has no iam:ListInstanceProfiles: {:#}", old.doc);
    assert!(!all_actions(&old.doc).contains("ec2:DescribePlacementGroups"), "1.6 has no placement groups: {:#}", old.doc);
    let nl_old = policy(&sdk, &policy_arn(&a, &c, "NodeLifecycle")).unwrap();
    let access = strings(&find_sid(&statements(&nl_old.doc), "AllowScopedEC2InstanceAccessActions")["Resource"]);
    assert!(!access.iter().any(|x| x.ends_with(":placement-group/*")), "{access:?}");

    wd.plan(&c, &plan(&c, "karpenter_version = \"1.14\"\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    let rd = block(&r.stdout, "~ controller-policy-ResourceDiscovery ");
    assert!(has_added_line(rd, "\"iam:ListInstanceProfiles\""), "ListInstanceProfiles is an added line: {rd}");
    assert!(has_added_line(rd, "\"ec2:DescribePlacementGroups\""), "{rd}");
    assert!(has_added_line(rd, "\"ec2:DescribeInstanceStatus\""), "{rd}");
    let nl = block(&r.stdout, "~ controller-policy-NodeLifecycle ");
    assert!(has_added_line(nl, ":placement-group/*"), "{nl}");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let want: BTreeMap<String, String> = [
        ("controller-policy-NodeLifecycle", "update"),
        ("controller-policy-ResourceDiscovery", "update"),
        // The capacity-reservation interruption rule arrived in v1.10, and the queue policy
        // names every rule the queue accepts (aws:SourceArn).
        ("rule-CapacityReservation", "create"),
        ("queue-policy", "update"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        steps(&r),
        want,
        "only the two policies whose permissions changed between 1.6 and 1.14, the v1.10 rule and the queue policy naming it"
    );

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let new = policy(&sdk, &rd_arn).unwrap();
    assert_ne!(new.default_version, old.default_version, "a new policy version");
    let node = role(&sdk, &node_role(&c)).unwrap();
    let qarn = queue_arn(&sdk, &queue_name(&c)).unwrap();
    let expected = controller_policies_v1_14(&c, REGION, &a, PARTITION, &node.arn, &qarn);
    for part in CONTROLLER_PARTS {
        assert_statements(part, &policy(&sdk, &policy_arn(&a, &c, part)).unwrap().doc, &expected[part]);
    }
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn down_removes_everything_in_order_including_karpenter_made_instance_profiles() {
    let (c, a) = seeded("idown", &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "instance_profile = true\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();
    let node = role(&sdk, &node_role(&c)).unwrap();
    let ours = instance_profile(&c);
    assert_eq!(profile_roles(&sdk, &ours), Some(vec![node_role(&c)]), "the opt-in profile holds the node role");
    assert_eq!(profiles_under(&sdk, &iam_path(&c)), BTreeSet::from([ours.clone()]), "under the cluster's path");

    // What Karpenter v1 makes from EC2NodeClass.spec.role: a profile tagged for this cluster.
    let karpenters = format!("{c}_1234567890123456789");
    // Another cluster's Karpenter profile holding the same role: emptied, never deleted.
    let foreign = format!("other-{c}_987654321");
    let tag = |k: &str, v: &str| IamTag::builder().key(k).value(v).build().unwrap();
    rt().block_on(async {
        sdk.iam
            .create_instance_profile()
            .instance_profile_name(&karpenters)
            .tags(tag(&format!("kubernetes.io/cluster/{c}"), "owned"))
            .tags(tag("karpenter.k8s.aws/ec2nodeclass", "default"))
            .tags(tag("eks:eks-cluster-name", &c))
            .tags(tag("topology.kubernetes.io/region", REGION))
            .send()
            .await
            .unwrap();
        sdk.iam.add_role_to_instance_profile().instance_profile_name(&karpenters).role_name(node_role(&c)).send().await.unwrap();
        sdk.iam
            .create_instance_profile()
            .instance_profile_name(&foreign)
            .tags(tag("kubernetes.io/cluster/another-cluster", "owned"))
            .tags(tag("karpenter.k8s.aws/ec2nodeclass", "default"))
            .tags(tag("eks:eks-cluster-name", "another-cluster"))
            .tags(tag("topology.kubernetes.io/region", REGION))
            .send()
            .await
            .unwrap();
        sdk.iam.add_role_to_instance_profile().instance_profile_name(&foreign).role_name(node_role(&c)).send().await.unwrap();
    });
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0, "Karpenter's profiles are not drift");

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");

    // Gone, checked through the SDK.
    assert!(role(&sdk, &node_role(&c)).is_none(), "node role deleted");
    assert!(role(&sdk, &controller_role(&c)).is_none(), "controller role deleted");
    for part in CONTROLLER_PARTS {
        assert!(policy(&sdk, &policy_arn(&a, &c, part)).is_none(), "policy {part} deleted");
    }
    assert!(policies_under(&sdk, &iam_path(&c)).is_empty());
    assert!(roles_under(&sdk, &iam_path(&c)).is_empty());
    assert!(profiles_under(&sdk, &iam_path(&c)).is_empty());
    assert_eq!(profile_roles(&sdk, &ours), None, "karpctl's instance profile deleted");
    assert_eq!(profile_roles(&sdk, &karpenters), None, "Karpenter's profile for this cluster deleted");
    assert_eq!(profile_roles(&sdk, &foreign), Some(vec![]), "another cluster's profile: role removed, profile kept");
    assert!(access_entry(&sdk, &c, &node.arn).is_none(), "access entry deleted");
    assert_eq!(all_associations(&sdk, &c), 0, "association deleted");
    assert!(queue_arn(&sdk, &queue_name(&c)).is_none());

    // In order: what hangs off a role goes before the role.
    let lines: Vec<&str> = r.stderr.lines().collect();
    let at = |needle: &str| -> usize {
        lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in stderr:\n{}", r.stderr))
    };
    let node_delete = at("node-role: Destroying");
    let ctrl_delete = at("controller-role: Destroying");
    assert!(at("node-access-entry: Destruction complete") < node_delete, "{}", r.stderr);
    assert!(at("node-instance-profile: Destruction complete") < node_delete, "{}", r.stderr);
    assert!(at("pod-identity: Destruction complete") < ctrl_delete, "{}", r.stderr);
    let karp_line = at(&format!("deleted instance profile {karpenters}"));
    assert!(karp_line > node_delete && karp_line < at("node-role: Destruction complete"), "{}", r.stderr);

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "second down writes nothing: {}", r.stdout);
}

fn assert_preflight_failure(r: &Run, message_has: &[&str], hint_has: &[&str]) {
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    let msg = doc["error"]["message"].as_str().unwrap_or_default();
    let hint = doc["error"]["hint"].as_str().unwrap_or_default();
    for m in message_has {
        assert!(msg.contains(m), "message names `{m}`: {msg}");
    }
    for h in hint_has {
        assert!(hint.contains(h), "hint names `{h}`: {hint}");
    }
    assert_eq!(doc["stats"]["writes"].as_u64(), Some(0), "zero writes: {}", r.stdout);
}

fn assert_nothing_created(sdk: &Sdk, c: &str) {
    assert!(role(sdk, &node_role(c)).is_none());
    assert!(role(sdk, &controller_role(c)).is_none());
    assert!(policies_under(sdk, &iam_path(c)).is_empty());
    assert!(queue_arn(sdk, &queue_name(c)).is_none());
    assert_eq!(all_associations(sdk, c), 0);
}

#[test]
fn config_map_authentication_mode_fails_preflight_with_the_remedy_and_no_write() {
    let (c, _) = seeded("icfgmap", &["--auth-mode", "CONFIG_MAP"]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_preflight_failure(&r, &["CONFIG_MAP", &c], &["API_AND_CONFIG_MAP", "update-cluster-config"]);
    let sdk = sdk();
    assert_nothing_created(&sdk, &c);
    let mode = rt().block_on(sdk.eks.describe_cluster().name(&c).send()).unwrap();
    let mode =
        mode.cluster().and_then(|x| x.access_config()).and_then(|x| x.authentication_mode()).map(|m| m.as_str().to_string());
    assert_eq!(mode.as_deref(), Some("CONFIG_MAP"), "karpctl never changes the mode");
}

#[test]
fn a_missing_pod_identity_agent_fails_preflight_with_a_hint_and_no_write() {
    let (c, _) = seeded("inoagent", &["--no-pod-identity-agent"]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_preflight_failure(&r, &["eks-pod-identity-agent", &c], &["create-addon", "create_pod_identity_agent"]);
    let sdk = sdk();
    assert_nothing_created(&sdk, &c);
    assert!(rt().block_on(sdk.eks.describe_addon().cluster_name(&c).addon_name("eks-pod-identity-agent").send()).is_err());

    // With the plan's consent, up installs it and goes on.
    wd.plan(&c, &plan(&c, "create_pod_identity_agent = true\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        rt().block_on(sdk.eks.describe_addon().cluster_name(&c).addon_name("eks-pod-identity-agent").send()).is_ok(),
        "add-on installed"
    );
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1);
}

#[test]
fn irsa_trusts_the_clusters_oidc_provider_and_makes_no_association() {
    let (c, a) = seeded("iirsa", &[]);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "mode = \"irsa\"\nnamespace = \"karpenter\"\nservice_account = \"karpenter-controller\"\n"));
    let sdk = sdk();

    // Without the provider: a clear preflight failure, nothing written.
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_preflight_failure(&r, &["OIDC provider", "does not exist"], &["oidc"]);
    assert_nothing_created(&sdk, &c);

    let (issuer, provider) = create_oidc_provider(&sdk, &c);
    let host_path = issuer.split_once("://").map(|(_, rest)| rest).unwrap_or(&issuer).trim_end_matches('/').to_string();
    assert_eq!(provider, format!("arn:aws:iam::{a}:oidc-provider/{host_path}"));

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let ctrl = role(&sdk, &controller_role(&c)).expect("controller role");
    assert_trust(
        "IRSA trust",
        &ctrl.trust,
        "Federated",
        &provider,
        &["sts:AssumeRoleWithWebIdentity"],
        Some(json!({"StringEquals": {
            format!("{host_path}:aud"): "sts.amazonaws.com",
            format!("{host_path}:sub"): "system:serviceaccount:karpenter:karpenter-controller",
        }})),
    );
    assert_eq!(all_associations(&sdk, &c), 0, "no Pod Identity association in IRSA mode");
    let want_ctrl: BTreeSet<String> = CONTROLLER_PARTS.iter().map(|p| policy_arn(&a, &c, p)).collect();
    assert_eq!(attached(&sdk, &controller_role(&c)), want_ctrl);
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// A role someone else made for nodes: ec2 trust, a tag of theirs, one managed policy.
fn premade_node_role(sdk: &Sdk, name: &str, path: &str) -> Role {
    rt().block_on(async {
        sdk.iam
            .create_role()
            .role_name(name)
            .path(path)
            .assume_role_policy_document(TRUST_EC2)
            .tags(IamTag::builder().key("owner").value("platform").build().unwrap())
            .send()
            .await
            .unwrap();
        sdk.iam.attach_role_policy().role_name(name).policy_arn(aws_managed("AmazonEKSWorkerNodePolicy")).send().await.unwrap();
    });
    role(sdk, name).unwrap()
}

fn assert_untouched(sdk: &Sdk, name: &str, before: &Role) {
    let now = role(sdk, name).expect("the existing role still exists");
    assert_eq!(now.arn, before.arn);
    assert_eq!(now.path, before.path);
    assert_eq!(now.trust, before.trust, "trust untouched");
    assert_eq!(now.tags, before.tags, "tags untouched (no karpctl tags)");
    assert_eq!(attached(sdk, name), BTreeSet::from([aws_managed("AmazonEKSWorkerNodePolicy")]), "attachments untouched");
}

fn existing_role_end_to_end(prefix: &str, role_path: &str, by_arn: bool) {
    let (c, a) = seeded(prefix, &[]);
    let sdk = sdk();
    let name = format!("nodes-{c}");
    let before = premade_node_role(&sdk, &name, role_path);
    assert_eq!(before.arn, format!("arn:aws:iam::{a}:role{role_path}{name}"));
    let wd = Workdir::new();
    let given = if by_arn { before.arn.clone() } else { name.clone() };
    wd.plan(&c, &plan(&c, &format!("existing_node_role = \"{given}\"\ninstance_profile = true\n")));

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(role(&sdk, &node_role(&c)).is_none(), "no node role created");
    assert_untouched(&sdk, &name, &before);
    let entries = access_entry_principals(&sdk, &c);
    assert!(entries.contains(&before.arn), "access entry for the role's real ARN {}: {entries:?}", before.arn);
    let (typ, principal, _) = access_entry(&sdk, &c, &before.arn).expect("access entry for the existing role");
    assert_eq!((typ.as_str(), principal.as_str()), ("EC2_LINUX", before.arn.as_str()));
    let iam_doc = policy(&sdk, &policy_arn(&a, &c, "IAMIntegration")).unwrap().doc;
    assert_eq!(
        strings(&find_sid(&statements(&iam_doc), "AllowPassingInstanceRole")["Resource"]),
        [before.arn.clone()],
        "PassRole on the existing role"
    );
    assert_eq!(profile_roles(&sdk, &instance_profile(&c)), Some(vec![name.clone()]));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_untouched(&sdk, &name, &before);
    assert!(access_entry(&sdk, &c, &before.arn).is_none(), "karpctl's access entry removed");
    assert_eq!(profile_roles(&sdk, &instance_profile(&c)), None, "karpctl's profile removed");
    assert!(role(&sdk, &controller_role(&c)).is_none());
}

#[test]
fn an_existing_node_role_is_used_never_modified_and_survives_down() {
    existing_role_end_to_end("iexist", "/", true);
}

#[test]
fn an_existing_node_role_named_without_its_path_gets_the_access_entry_for_its_real_arn() {
    // `existing_node_role` may be a name (README "Plan files"); a role with a path then has an ARN that
    // includes the path, and that ARN is what the access entry and PassRole must name.
    existing_role_end_to_end("iexpath", "/platform/nodes/", false);
}

#[test]
fn a_100_character_cluster_name_works_end_to_end_with_shortened_names() {
    let base = cluster_name("ilong");
    let c = format!("{base}-{}", "x".repeat(100 - base.len() - 1));
    assert_eq!(c.len(), 100);
    let s = seed(&c, &[]);
    let a = s["account_id"].as_str().unwrap_or("000000000000").to_string();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, "instance_profile = true\n"));

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    for what in
        ["node role name shortened", "controller role name shortened", "policy name shortened", "instance profile name shortened"]
    {
        assert!(r.stdout.contains(what), "plan output reports `{what}`: {r:?}");
    }
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk();

    // Everything under the cluster's path, every name within AWS's limits (the emulator accepts
    // longer names than AWS, so the limits are checked here).
    let roles = roles_under(&sdk, &iam_path(&c));
    assert_eq!(roles.len(), 2, "{roles:?}");
    for n in &roles {
        assert!(n.len() <= 64, "role name {n} is {} characters", n.len());
    }
    let node_name = roles.iter().find(|n| n.starts_with("KarpenterNodeRole-")).expect("node role").clone();
    let ctrl_name = roles.iter().find(|n| n.starts_with("KarpenterController-")).expect("controller role").clone();
    let node = role(&sdk, &node_name).unwrap();
    let ctrl = role(&sdk, &ctrl_name).unwrap();
    assert_eq!(node.tags.get(OWNER_TAG), Some(&c));
    node_trust("node trust", &node.trust);
    pod_identity_trust("controller trust", &ctrl.trust, &c, &a);
    let policies = policies_under(&sdk, &iam_path(&c));
    assert_eq!(policies.len(), 5, "{policies:?}");
    for p in &policies {
        assert!(p.len() <= 128, "policy name {p} is {} characters", p.len());
        let arn = format!("arn:aws:iam::{a}:policy/karpctl/{c}/{p}");
        let doc = policy(&sdk, &arn).unwrap().doc;
        let compact: usize = doc.to_string().chars().filter(|ch| !ch.is_whitespace()).count();
        assert!(compact < 6144, "policy {p} is {compact} characters");
    }
    let want_ctrl: BTreeSet<String> = policies.iter().map(|p| format!("arn:aws:iam::{a}:policy/karpctl/{c}/{p}")).collect();
    assert_eq!(attached(&sdk, &ctrl_name), want_ctrl);
    let profiles = profiles_under(&sdk, &iam_path(&c));
    assert_eq!(profiles.len(), 1, "{profiles:?}");
    let profile = profiles.iter().next().unwrap();
    assert!(profile.len() <= 128, "{profile}");
    assert_eq!(profile_roles(&sdk, profile), Some(vec![node_name.clone()]));
    let (typ, _, _) = access_entry(&sdk, &c, &node.arn).expect("access entry for the shortened role");
    assert_eq!(typ, "EC2_LINUX");
    assert_eq!(karpenter_associations(&sdk, &c).into_iter().map(|x| x.1).collect::<Vec<_>>(), vec![ctrl.arn.clone()]);
    let iam_doc = policy(&sdk, &want_ctrl.iter().find(|x| x.contains("IAMIntegration")).unwrap().clone()).unwrap().doc;
    assert_eq!(strings(&find_sid(&statements(&iam_doc), "AllowPassingInstanceRole")["Resource"]), [node.arn.clone()]);

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(roles_under(&sdk, &iam_path(&c)).is_empty());
    assert!(policies_under(&sdk, &iam_path(&c)).is_empty());
    assert!(profiles_under(&sdk, &iam_path(&c)).is_empty());
    assert!(access_entry(&sdk, &c, &node.arn).is_none());
    assert_eq!(all_associations(&sdk, &c), 0);
}

#[test]
fn a_policy_removed_from_extra_node_policy_arns_is_detached() {
    let c = cluster_name("extra");
    seed(&c, &[]);
    let wd = Workdir::new();
    let s3 = "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess";
    wd.plan_for(&c, &format!("[identity]\nextra_node_policy_arns = [\"{s3}\"]\n"));
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let attached = |sdk: &Sdk| -> Vec<String> {
        let o = rt().block_on(sdk.iam.list_attached_role_policies().role_name(node_role(&c)).send()).unwrap();
        o.attached_policies().iter().filter_map(|p| p.policy_arn().map(str::to_string)).collect()
    };
    assert!(attached(&sdk).contains(&s3.to_string()));
    wd.plan_for(&c, "");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("AmazonS3ReadOnlyAccess"), "{r:?}");
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let now = attached(&sdk);
    assert!(!now.contains(&s3.to_string()), "detached: {now:?}");
    assert_eq!(now.len(), 4, "the four node policies stay: {now:?}");
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn an_unowned_access_entry_of_the_wrong_type_stops_up() {
    let c = cluster_name("aetype");
    seed(&c, &[]);
    let principal = format!("arn:aws:iam::000000000000:role/karpctl/{c}/KarpenterNodeRole-{c}");
    let sdk = sdk();
    rt().block_on(sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&principal).r#type("STANDARD").send()).unwrap();
    let wd = Workdir::new();
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("STANDARD") && msg.contains("EC2_LINUX"), "{msg}");
    assert_eq!(r.json()["stats"]["writes"], 0);
    let e = rt().block_on(sdk.eks.describe_access_entry().cluster_name(&c).principal_arn(&principal).send()).unwrap();
    assert_eq!(e.access_entry().unwrap().r#type(), Some("STANDARD"), "left untouched");
}

/// The codes and severities of doctor's findings.
fn doctor_found(r: &Run) -> BTreeMap<String, (String, String)> {
    findings(r)
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("code"), (s("severity"), s("message")))
        })
        .collect()
}

#[test]
fn session_tags_off_under_a_trust_that_needs_them_is_an_error_in_diff_up_and_doctor() {
    const TAGS: &str = "pod-identity-session-tags-disabled";
    const POLICY: &str = "pod-identity-session-policy";
    let (c, a) = seeded("isess", &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c, ""));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    let checked: Vec<String> = checked(&r);
    assert!(checked.contains(&TAGS.to_string()) && checked.contains(&POLICY.to_string()), "{checked:?}");
    assert!(found_severities(&r).keys().all(|k| k != TAGS && k != POLICY), "{r:?}");

    // Session tags off, and a session policy (AWS takes one only with session tags off), while
    // karpctl's trust requires the tags of this cluster, namespace and service account.
    let (id, _) = karpenter_associations(&sdk, &c).remove(0);
    let session_policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:Describe*","Resource":"*"}]}"#;
    rt().block_on(
        sdk.eks
            .update_pod_identity_association()
            .cluster_name(&c)
            .association_id(&id)
            .disable_session_tags(true)
            .policy(session_policy)
            .send(),
    )
    .expect("UpdatePodIdentityAssociation");

    // doctor judges whatever it finds.
    let d = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    assert_eq!(d.code, 2, "{d:?}");
    let found = doctor_found(&d);
    let (sev, msg) = &found[TAGS];
    assert_eq!(sev, "error", "{d:?}");
    assert!(msg.contains("kube-system/karpenter") && msg.contains("aws:RequestTag/kubernetes-namespace"), "{msg}");
    let (sev, msg) = &found[POLICY];
    assert_eq!(sev, "warning", "{d:?}");
    assert!(msg.contains(&format!("kube-system/karpenter ({id})")), "the association is named: {msg}");
    let human = karpctl(&wd, &["doctor", "--cluster", &c]);
    assert!(human.stdout.contains(TAGS) && human.stdout.contains(POLICY), "{human:?}");

    // An association karpctl manages: `up` turns the tags back on and drops the policy, so
    // `diff` shows that change and no readiness finding.
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(found_severities(&r).keys().all(|k| k != TAGS && k != POLICY), "{r:?}");

    // Owned by an EKS add-on (ownerArn, which the emulator cannot set: the lag proxy lays it
    // over DescribePodIdentityAssociation): karpctl never changes it, so Karpenter cannot work.
    let px = lag::LagProxy::start(&cluster_name("isess-px"), &endpoint());
    let addon = format!("arn:aws:eks:{REGION}:{a}:addon/{c}/karpenter/0123");
    px.set(json!({"eks_association_fields": {&c: {"ownerArn": &addon}}}));
    let diff = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c], &[]);
    // Nothing karpctl may change differs (the add-on's association is left alone), but an
    // error-level check fails: diff exits 1, as up does.
    assert_eq!(diff.code, 1, "{diff:?}");
    assert!(diff.stdout.contains(&format!("error {TAGS}")), "{diff:?}");
    assert!(diff.stdout.contains(&format!("warning {POLICY}")), "{diff:?}");
    assert!(diff.stdout.contains("update-addon"), "the fix goes through the add-on: {diff:?}");
    let json = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c, "--output", "json"], &[]);
    let found = found_severities(&json);
    assert_eq!(found.get(TAGS).map(String::as_str), Some("error"), "{json:?}");
    assert_eq!(found.get(POLICY).map(String::as_str), Some("warning"), "{json:?}");
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(up.code, 1, "{up:?}");
    assert!(up.stdout.contains(TAGS), "{up:?}");
    assert!(up.stderr.contains("Karpenter cannot work here yet"), "{up:?}");

    // karpctl's own again: up fixes both, and every check passes.
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let d = karpctl(&wd, &["doctor", "--cluster", &c, "--output", "json"]);
    let found = doctor_found(&d);
    assert!(!found.contains_key(TAGS) && !found.contains_key(POLICY), "{d:?}");
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}
