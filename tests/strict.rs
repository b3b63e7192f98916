//! The strict run (issue 6, item 8): the core scenarios again with IAM, SQS, EventBridge, EC2 and
//! STS served by moto 5.2.5 (server mode, AWS managed policies loaded) and EKS by ministack, through
//! the SDK's per-service endpoint variables (`karpctl_strict*` in common/mod.rs).
//!
//! What moto enforces that ministack forgives (measured, docs/aws-behaviour.md section 8), and so what these tests
//! prove against AWS's rules rather than the emulator's leniency:
//! - IAM `DeleteRole` refuses (`DeleteConflict`) while managed or inline policies are attached or
//!   the role is in an instance profile; `AttachRolePolicy` of a managed-policy ARN that does not
//!   exist fails `NoSuchEntity`; `CreatePolicyVersion` refuses a sixth version (`LimitExceeded`);
//!   `ListRoles` returns no tags.
//!   Policy documents are validated (`MalformedPolicyDocument`).
//! - EventBridge `DeleteRule` refuses while targets are attached.
//! - EC2 `DeleteTags` deletes a tag only when key and value both match.
//!
//! What neither emulator enforces, injected with microburst (scripts/MICROBURST.md) in front of the
//! emulator that serves the call: the 60-second `QueueDeletedRecently` block after `DeleteQueue`;
//! IAM propagation as EKS sees it (`CreateAccessEntry` "invalid principal",
//! `CreatePodIdentityAssociation` "Role provided in the request does not exist") and as IAM itself
//! sees it (`AddRoleToInstanceProfile` "The role with name ... cannot be found"). moto does not
//! refuse `DeletePolicy` while versions or attachments remain either: the down test records the
//! order of karpctl's IAM calls through a pass-through proxy and checks AWS's order instead.
//!
//! Where moto 5.2.5 is not AWS either (measured):
//! - `SetQueueAttributes` without `Policy` deletes the queue's policy (`Queue._set_attributes`
//!   assigns `self.policy = attributes.get("Policy")` unconditionally; AWS leaves it). Drift below
//!   therefore changes retention and the policy in one call, and karpctl rewrites both in one run.
//! - `ListInstanceProfiles` ignores `PathPrefix` and returns every profile in the account (so the
//!   other tests' clusters show up in karpctl's scoped list; it must, and does, ignore them).
//! - `PutRule` on an existing rule merges the tags it is sent (AWS ignores them, ministack
//!   replaces): the drift test checks a rule's tags are repaired with `TagResource`.
//! - `DeletePolicy` succeeds with attachments or non-default versions (see above); a 65-character
//!   role or rule name is accepted (karpctl validates names itself).
//!
//! Each test seeds its own cluster (VPC, subnets, security groups in moto; the EKS cluster in
//! ministack), uses its own proxies (stopped on drop), checks results through the SDK straight at
//! the emulators, and ends in well under a minute (consistency deadline 20 s, faults counted).

use crate::common::*;
use aws_sdk_iam::types::PolicyScopeType;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const TARGET_ID: &str = "KarpenterInterruptionQueueTarget";

fn plan(c: &str) -> String {
    plan_toml(c, "\n[tags]\nteam = \"platform\"\n\n[identity]\ninstance_profile = true\n\n[interruption]\nenabled = true\n")
}

// ------------------------------------------------------------------------- reading live state

/// (trust policy, tags, ARN) of a role.
fn role(sdk: &Sdk, name: &str) -> Option<(Value, BTreeMap<String, String>, String)> {
    rt().block_on(async {
        let r = sdk.iam.get_role().role_name(name).send().await.ok()?;
        let r = r.role()?;
        Some((
            policy_json(r.assume_role_policy_document().unwrap_or("{}")),
            r.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect(),
            r.arn().to_string(),
        ))
    })
}

/// Names of the roles, policies (with ARNs) and instance profiles under the cluster's IAM path.
/// The path is checked here too: moto 5.2.5's ListInstanceProfiles ignores PathPrefix and returns
/// every profile in the account (AWS filters).
fn owned_iam(sdk: &Sdk, c: &str) -> (Vec<String>, Vec<(String, String)>, Vec<String>) {
    let path = iam_path(c);
    rt().block_on(async {
        let roles = sdk.iam.list_roles().path_prefix(&path).max_items(1000).send().await.unwrap();
        let pols = sdk.iam.list_policies().scope(PolicyScopeType::Local).path_prefix(&path).max_items(1000).send().await.unwrap();
        let ips = sdk.iam.list_instance_profiles().path_prefix(&path).max_items(1000).send().await.unwrap();
        (
            roles.roles().iter().filter(|r| r.path() == path).map(|r| r.role_name().to_string()).collect(),
            pols.policies()
                .iter()
                .filter(|p| p.path() == Some(path.as_str()))
                .map(|p| (p.policy_name().unwrap_or_default().to_string(), p.arn().unwrap_or_default().to_string()))
                .collect(),
            ips.instance_profiles().iter().filter(|p| p.path() == path).map(|p| p.instance_profile_name().to_string()).collect(),
        )
    })
}

fn policy_arn(sdk: &Sdk, c: &str, part: &str) -> String {
    let name = policy_name(c, part);
    owned_iam(sdk, c).1.into_iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("policy {name} missing")).1
}

/// (version id, is default) of a policy, oldest first.
fn versions(sdk: &Sdk, arn: &str) -> Vec<(String, bool)> {
    rt().block_on(async {
        let o = sdk.iam.list_policy_versions().policy_arn(arn).send().await.unwrap();
        let mut v: Vec<(String, bool)> =
            o.versions().iter().map(|v| (v.version_id().unwrap_or_default().to_string(), v.is_default_version())).collect();
        v.sort_by_key(|(id, _)| id.trim_start_matches('v').parse::<u32>().unwrap_or(0));
        v
    })
}

fn default_document(sdk: &Sdk, arn: &str) -> Value {
    let (id, _) = versions(sdk, arn).into_iter().find(|(_, d)| *d).expect("a default version");
    rt().block_on(async {
        let o = sdk.iam.get_policy_version().policy_arn(arn).version_id(&id).send().await.unwrap();
        policy_json(o.policy_version().unwrap().document().unwrap())
    })
}

/// A document's statements as a set of their JSON texts, for comparing documents.
fn statement_set(doc: &Value) -> BTreeSet<String> {
    statements(doc).iter().map(|s| s.to_string()).collect()
}

fn targets(sdk: &Sdk, rule: &str) -> Option<Vec<(String, String)>> {
    rt().block_on(async {
        sdk.events.describe_rule().name(rule).send().await.ok()?;
        let t = sdk.events.list_targets_by_rule().rule(rule).send().await.unwrap();
        Some(t.targets().iter().map(|t| (t.id().to_string(), t.arn().to_string())).collect())
    })
}

fn ec2_tags(sdk: &Sdk, id: &str) -> BTreeMap<String, String> {
    rt().block_on(async {
        let f = aws_sdk_ec2::types::Filter::builder().name("resource-id").values(id).build();
        let o = sdk.ec2.describe_tags().filters(f).send().await.unwrap();
        o.tags().iter().map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string())).collect()
    })
}

fn ec2_tag(sdk: &Sdk, id: &str, key: &str, value: &str) {
    rt().block_on(async {
        let t = aws_sdk_ec2::types::Tag::builder().key(key).value(value).build();
        sdk.ec2.create_tags().resources(id).tags(t).send().await.unwrap();
    });
}

/// principal ARN -> type of the cluster's access entries (ministack).
fn access_entries(sdk: &Sdk, c: &str) -> BTreeMap<String, String> {
    rt().block_on(async {
        let l = sdk.eks.list_access_entries().cluster_name(c).send().await.unwrap();
        let mut out = BTreeMap::new();
        for p in l.access_entries() {
            let d = sdk.eks.describe_access_entry().cluster_name(c).principal_arn(p).send().await.unwrap();
            out.insert(p.to_string(), d.access_entry().and_then(|e| e.r#type()).unwrap_or_default().to_string());
        }
        out
    })
}

/// Role ARNs of the kube-system/karpenter pod identity associations (ministack).
fn pod_identity_roles(sdk: &Sdk, c: &str) -> Vec<String> {
    karpenter_associations(sdk, c).into_iter().map(|(_, role_arn)| role_arn).collect()
}

/// The seed's subnet and security group ids.
struct Seeded {
    account: String,
    private: Vec<String>,
    public: Vec<String>,
    node_sg: String,
    unrelated_sg: String,
}

fn seeded(c: &str) -> Seeded {
    let s = seed_strict(c, &[]);
    // Both emulators must agree on the account, or role ARNs (moto) and cluster ARNs (ministack)
    // would name different accounts (scripts/emulator starts moto with MOTO_ACCOUNT_ID).
    assert_eq!(s["account_id"], s["eks_account_id"], "moto and ministack serve one account: {s}");
    Seeded {
        account: s["account_id"].as_str().unwrap().to_string(),
        private: str_list(&s["private_subnets"]),
        public: str_list(&s["public_subnets"]),
        node_sg: s["node_security_group"].as_str().unwrap().to_string(),
        unrelated_sg: s["unrelated_security_group"].as_str().unwrap().to_string(),
    }
}

/// `up` then a second `up` (no writes) then `diff` (exit 0): the convergence check every test ends with.
fn assert_converged(wd: &Workdir, c: &str) {
    let r = karpctl_strict(wd, &["up", "--cluster", c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "an up after convergence writes nothing: {}", r.stdout);
    let r = karpctl_strict(wd, &["diff", "--cluster", c]);
    assert_eq!(r.code, 0, "in sync: {r:?}");
}

// ----------------------------------------------------------------------------------- tests

#[test]
fn strict_up_creates_everything_then_a_second_up_writes_nothing() {
    let c = cluster_name("s-up");
    let s = seeded(&c);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    let r = karpctl_strict(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["account_id"], s.account, "karpctl's account is moto's STS answer");
    let sdk = sdk_strict();

    // IAM (moto): both roles under the plan's path, with their tags and trust.
    let (trust, tags, node_arn) = role(&sdk, &node_role(&c)).expect("node role");
    assert_eq!(node_arn, format!("arn:aws:iam::{}:role/karpctl/{c}/{}", s.account, node_role(&c)));
    assert_eq!(tags.get(OWNER_TAG), Some(&c));
    assert_eq!(tags.get("karpctl.io/resource").map(String::as_str), Some("node-role"));
    assert_eq!(tags.get("team").map(String::as_str), Some("platform"));
    let st = statements(&trust);
    assert_eq!(st.len(), 1, "{trust}");
    assert_eq!(strings(&st[0]["Principal"]["Service"]), ["ec2.amazonaws.com"]);
    // The four AWS managed policies: moto knows them (MOTO_IAM_LOAD_MANAGED_POLICIES) and would
    // have refused a wrong ARN with NoSuchEntity.
    let want: BTreeSet<String> = NODE_MANAGED_POLICIES.iter().map(|p| aws_managed(p)).collect();
    assert_eq!(attached(&sdk, &node_role(&c)), want);

    let (trust, tags, ctrl_arn) = role(&sdk, &controller_role(&c)).expect("controller role");
    assert_eq!(tags.get(OWNER_TAG), Some(&c));
    let st = statements(&trust);
    assert_eq!(strings(&st[0]["Principal"]["Service"]), ["pods.eks.amazonaws.com"]);
    assert_eq!(strings(&st[0]["Action"]), ["sts:AssumeRole", "sts:TagSession"]);
    let (roles, policies, profiles) = owned_iam(&sdk, &c);
    assert_eq!(roles.into_iter().collect::<BTreeSet<_>>(), BTreeSet::from([node_role(&c), controller_role(&c)]));
    let names: BTreeSet<String> = policies.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, CONTROLLER_PARTS.iter().map(|p| policy_name(&c, p)).collect::<BTreeSet<_>>());
    assert_eq!(attached(&sdk, &controller_role(&c)), policies.iter().map(|(_, a)| a.clone()).collect::<BTreeSet<_>>());
    for (_, arn) in &policies {
        assert_eq!(versions(&sdk, arn), vec![("v1".to_string(), true)], "{arn}: one version");
    }
    assert_eq!(profiles, vec![instance_profile(&c)]);
    let ip = rt().block_on(sdk.iam.get_instance_profile().instance_profile_name(&profiles[0]).send()).unwrap();
    let held: Vec<String> = ip.instance_profile().unwrap().roles().iter().map(|r| r.role_name().to_string()).collect();
    assert_eq!(held, vec![node_role(&c)]);

    // SQS and EventBridge (moto).
    let q = queue(&sdk, &queue_name(&c)).expect("queue");
    assert_eq!(q.attrs["MessageRetentionPeriod"], "300");
    assert_eq!(q.attrs["SqsManagedSseEnabled"], "true");
    assert_eq!(q.tags.get(OWNER_TAG), Some(&c));
    let qarn = q.attrs["QueueArn"].clone();
    assert_eq!(qarn, format!("arn:aws:sqs:us-east-1:{}:{}", s.account, queue_name(&c)));
    let pol = policy_json(&q.attrs["Policy"]);
    assert_eq!(statements(&pol).len(), 2, "{pol}");
    find_sid(&statements(&pol), "DenyHTTP");
    for part in RULE_PARTS {
        assert_eq!(targets(&sdk, &rule_name(&c, part)), Some(vec![(TARGET_ID.to_string(), qarn.clone())]), "{part}");
    }

    // Discovery tags (moto EC2): the cluster's (private) subnets and the node group only.
    for id in s.private.iter().chain([&s.node_sg]) {
        let t = ec2_tags(&sdk, id);
        assert_eq!(t.get(DISCOVERY), Some(&c), "{id}: {t:?}");
        assert_eq!(t.get(MARKER), Some(&c), "{id}: {t:?}");
    }
    for id in s.public.iter().chain([&s.unrelated_sg]) {
        assert!(!ec2_tags(&sdk, id).contains_key(DISCOVERY), "{id} is not tagged");
    }

    // EKS (ministack): the access entry names the moto role's ARN, the association the controller's.
    assert_eq!(access_entries(&sdk, &c).get(&node_arn).map(String::as_str), Some("EC2_LINUX"));
    assert_eq!(pod_identity_roles(&sdk, &c), vec![ctrl_arn]);

    // Nothing fell through to ministack (as it would if AWS_ENDPOINT_URL were read, or a
    // service had no endpoint variable).
    let ms = crate::common::sdk();
    assert!(role(&ms, &node_role(&c)).is_none() && role(&ms, &controller_role(&c)).is_none(), "no role in ministack");
    assert!(queue(&ms, &queue_name(&c)).is_none(), "no queue in ministack");
    assert!(targets(&ms, &rule_name(&c, "HealthEvent")).is_none(), "no rule in ministack");

    assert_converged(&wd, &c);
}

#[test]
fn strict_drift_in_iam_sqs_eventbridge_and_ec2_is_found_and_repaired() {
    let c = cluster_name("s-drift");
    let s = seeded(&c);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    let r = karpctl_strict(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk_strict();
    let nl = policy_arn(&sdk, &c, "NodeLifecycle");
    let nl_doc = default_document(&sdk, &nl);
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    rt().block_on(async {
        // The controller's trust policy rewritten to trust EC2.
        sdk.iam.update_assume_role_policy().role_name(controller_role(&c)).policy_document(TRUST_EC2).send().await.unwrap();
        // A new default version of a controller policy.
        sdk.iam
            .create_policy_version()
            .policy_arn(&nl)
            .policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:*","Resource":"*"}]}"#)
            .set_as_default(true)
            .send()
            .await
            .unwrap();
        // A managed policy detached from the node role.
        sdk.iam
            .detach_role_policy()
            .role_name(node_role(&c))
            .policy_arn("arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore")
            .send()
            .await
            .unwrap();
        // A rule's target removed.
        sdk.events.remove_targets().rule(rule_name(&c, "SpotInterrupt")).ids(TARGET_ID).send().await.unwrap();
        // A plan tag removed from another rule.
        let arn = sdk.events.describe_rule().name(rule_name(&c, "HealthEvent")).send().await.unwrap().arn().unwrap().to_string();
        sdk.events.untag_resource().resource_arn(arn).tag_keys("team").send().await.unwrap();
        // Retention changed, and the DenyHTTP statement dropped, in one call (see the module doc:
        // moto deletes the policy on a SetQueueAttributes without it; AWS would not).
        let mut doc = policy_json(&q.attrs["Policy"]);
        doc["Statement"] = Value::Array(statements(&doc).into_iter().filter(|s| s["Sid"] != "DenyHTTP").collect());
        sdk.sqs
            .set_queue_attributes()
            .queue_url(&q.url)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "600")
            .attributes(QueueAttributeName::Policy, doc.to_string())
            .send()
            .await
            .unwrap();
        // The discovery tag removed from one subnet (moto: only with the matching value).
        let t = aws_sdk_ec2::types::Tag::builder().key(DISCOVERY).value(&c).build();
        sdk.ec2.delete_tags().resources(&s.private[1]).tags(t).send().await.unwrap();
    });
    assert!(!ec2_tags(&sdk, &s.private[1]).contains_key(DISCOVERY));

    let r = karpctl_strict(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let doc = r.json();
    let steps: BTreeMap<String, (String, Vec<String>)> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let fields = s["changes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap_or("").to_string()).collect();
            (s["id"].as_str().unwrap().to_string(), (s["action"].as_str().unwrap().to_string(), fields))
        })
        .collect();
    let expect = |id: &str, action: &str, field: &str| {
        let (a, f) = steps.get(id).unwrap_or_else(|| panic!("no step {id} in {steps:?}"));
        assert_eq!(a, action, "{id}: {steps:?}");
        assert!(field.is_empty() || f.iter().any(|x| x == field), "{id} changes {field}: {steps:?}");
    };
    expect("controller-role", "update", "AssumeRolePolicyDocument");
    expect("controller-policy-NodeLifecycle", "update", "PolicyDocument");
    expect("node-role-policy-AmazonSSMManagedInstanceCore", "create", "");
    expect("rule-SpotInterrupt", "update", "Targets");
    expect("queue", "update", "MessageRetentionPeriod");
    expect("queue-policy", "update", "Policy");
    expect(&format!("discovery-tags-{}", s.private[1]), "update", "tags");
    expect("rule-HealthEvent", "update", "tags");
    assert_eq!(steps.len(), 8, "nothing else drifted: {steps:?}");

    let r = karpctl_strict(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    // AWS ignores tags on PutRule for an existing rule (moto merges them, ministack replaces
    // them): a tag repair must be TagResource.
    let ops = &r.json()["stats"]["operations"];
    assert!(ops["EventBridge:TagResource"]["calls"].as_u64().unwrap_or(0) >= 1, "rule tags repaired with TagResource: {ops}");
    let (trust, _, _) = role(&sdk, &controller_role(&c)).unwrap();
    assert_eq!(strings(&statements(&trust)[0]["Principal"]["Service"]), ["pods.eks.amazonaws.com"]);
    assert_eq!(statement_set(&default_document(&sdk, &nl)), statement_set(&nl_doc), "the plan's document is the default again");
    assert!(versions(&sdk, &nl).len() <= 5);
    assert!(attached(&sdk, &node_role(&c)).contains("arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"));
    assert_eq!(targets(&sdk, &rule_name(&c, "SpotInterrupt")).unwrap().len(), 1);
    let tags = rt().block_on(async {
        let arn = sdk.events.describe_rule().name(rule_name(&c, "HealthEvent")).send().await.unwrap().arn().unwrap().to_string();
        sdk.events.list_tags_for_resource().resource_arn(arn).send().await.unwrap()
    });
    assert!(tags.tags().iter().any(|t| t.key() == "team" && t.value() == "platform"), "{tags:?}");
    let q = queue(&sdk, &queue_name(&c)).unwrap();
    assert_eq!(q.attrs["MessageRetentionPeriod"], "300");
    find_sid(&statements(&policy_json(&q.attrs["Policy"])), "DenyHTTP");
    assert_eq!(ec2_tags(&sdk, &s.private[1]).get(DISCOVERY), Some(&c));
    assert_converged(&wd, &c);
}

#[test]
fn strict_a_policy_at_the_five_version_limit_is_repaired_without_limit_exceeded() {
    let c = cluster_name("s-vers");
    seeded(&c);
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    assert_eq!(karpctl_strict(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk_strict();
    let arn = policy_arn(&sdk, &c, "ResourceDiscovery");
    let want = default_document(&sdk, &arn);
    rt().block_on(async {
        // Three older versions nobody uses, then a drifted default: five in all, IAM's limit.
        for (i, default) in [false, false, false, true].into_iter().enumerate() {
            sdk.iam
                .create_policy_version()
                .policy_arn(&arn)
                .policy_document(format!(
                    r#"{{"Version":"2012-10-17","Statement":[{{"Sid":"Drift{i}","Effect":"Allow","Action":"ec2:DescribeImages","Resource":"*"}}]}}"#
                ))
                .set_as_default(default)
                .send()
                .await
                .unwrap();
        }
        // The emulator enforces the limit (else this test would prove nothing).
        let sixth = sdk
            .iam
            .create_policy_version()
            .policy_arn(&arn)
            .policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:DescribeImages","Resource":"*"}]}"#)
            .send()
            .await;
        let e = sixth.expect_err("moto refuses a sixth version");
        assert_eq!(aws_sdk_iam::error::ProvideErrorMetadata::code(&e), Some("LimitExceeded"), "{e:?}");
    });
    assert_eq!(versions(&sdk, &arn).len(), 5);

    let r = karpctl_strict(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "karpctl deletes the oldest non-default version before CreatePolicyVersion: {r:?}");
    let v = versions(&sdk, &arn);
    assert!(v.len() <= 5, "{v:?}");
    assert!(!v.iter().any(|(id, _)| id == "v1"), "the oldest non-default version went first: {v:?}");
    assert_eq!(statement_set(&default_document(&sdk, &arn)), statement_set(&want));
    assert_converged(&wd, &c);
}

#[test]
fn strict_down_removes_everything_in_the_order_aws_requires() {
    let c = cluster_name("s-down");
    let wd = Workdir::new();
    // Started first (it warms up while the cluster is seeded); rules are added once the policy
    // ARNs exist.
    let mut px = Proxy::start_warm(&wd, &format!("{c}-rec"), &moto_endpoint(), json!([]));
    let s = seeded(&c);
    let sdk = sdk_strict();
    // Someone else tagged one subnet for Karpenter before karpctl ran: never removed.
    ec2_tag(&sdk, &s.private[0], DISCOVERY, &c);
    wd.plan(&c, &plan(&c));
    let r = karpctl_strict(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    // Non-default versions on two policies (the default documents stay the plan's: still in
    // sync). AWS refuses DeletePolicy until they are deleted.
    let mut extra_versions: BTreeMap<String, usize> = BTreeMap::new();
    for (part, n) in [("NodeLifecycle", 2), ("Interruption", 1)] {
        let arn = policy_arn(&sdk, &c, part);
        for i in 0..n {
            rt().block_on(
                sdk.iam
                    .create_policy_version()
                    .policy_arn(&arn)
                    .policy_document(format!(
                        r#"{{"Version":"2012-10-17","Statement":[{{"Sid":"Old{i}","Effect":"Allow","Action":"sqs:GetQueueUrl","Resource":"*"}}]}}"#
                    ))
                    .set_as_default(false)
                    .send(),
            )
            .unwrap();
        }
        extra_versions.insert(arn, n);
    }
    // Record the IAM calls of `down` in order through a pass-through proxy: one rule per
    // (operation, policy) so each fired entry names its policy, then one for any other IAM call.
    let (_, policies, _) = owned_iam(&sdk, &c);
    assert_eq!(policies.len(), 5);
    let mut rules = vec![];
    for (_, arn) in &policies {
        for op in ["DetachRolePolicy", "DeletePolicyVersion", "DeletePolicy"] {
            rules.push(json!({"service": "iam", "operation": op, "body": format!("PolicyArn == '{arn}'"), "latency": 1}));
        }
    }
    rules.push(json!({"service": "iam", "latency": 1}));
    px.add_rules(json!(rules));
    let via = StrictEndpoints::direct().via("IAM", px.url());
    let by_id: HashMap<u64, (String, String)> = px
        .rules()
        .iter()
        .filter_map(|r| {
            let body = r["body"].as_str()?;
            let arn = body.trim_start_matches("PolicyArn == '").trim_end_matches('\'').to_string();
            Some((r["id"].as_u64()?, (r["operation"].as_str()?.to_string(), arn)))
        })
        .collect();
    assert_eq!(by_id.len(), 15, "one recording rule per policy and operation: {:?}", px.rules());

    let r = karpctl_strict_at(&wd, &["down", "--cluster", &c, "--yes"], &via, &[]);
    assert_eq!(r.code, 0, "{r:?}");

    // AWS's order for each customer managed policy: detached everywhere and its non-default
    // versions deleted, then DeletePolicy.
    let log = px.fired_log();
    px.begin_stop();
    for (_, arn) in &policies {
        let mine: Vec<(f64, String)> = log
            .iter()
            .filter_map(|e| {
                let (op, a) = by_id.get(&e["rule_id"].as_u64()?)?;
                (a == arn).then(|| (e["ts"].as_f64().unwrap(), op.clone()))
            })
            .collect();
        let ops: Vec<&str> = mine.iter().map(|(_, o)| o.as_str()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "DeletePolicy").count(), 1, "{arn}: {ops:?}");
        let del = ops.iter().position(|o| *o == "DeletePolicy").unwrap();
        // Detached from the controller role before DeletePolicy. (The role's own delete detaches
        // it too, concurrently: a second DetachRolePolicy, before or after, is harmless.)
        assert!(ops[..del].contains(&"DetachRolePolicy"), "{arn}: detached before DeletePolicy: {ops:?}");
        let want = extra_versions.get(arn).copied().unwrap_or(0);
        assert_eq!(
            ops[..del].iter().filter(|o| **o == "DeletePolicyVersion").count(),
            want,
            "{arn}: non-default versions first: {ops:?}"
        );
        assert!(!ops[del..].contains(&"DeletePolicyVersion"), "{arn}: {ops:?}");
    }
    // Both roles deleted once each; moto refuses DeleteRole while a policy is attached or the
    // role is in an instance profile, so `down` succeeding shows that order too.
    let deletes = log.iter().filter(|e| e["service"] == "iam" && e["operation"] == "DeleteRole").count();
    assert_eq!(deletes, 2, "{log:?}");

    // Nothing of karpctl's is left, in either emulator; what was not karpctl's is.
    assert_eq!(owned_iam(&sdk, &c), (vec![], vec![], vec![]), "no role, policy or instance profile under {}", iam_path(&c));
    assert!(role(&sdk, &node_role(&c)).is_none());
    assert!(queue(&sdk, &queue_name(&c)).is_none());
    for part in RULE_PARTS {
        assert!(targets(&sdk, &rule_name(&c, part)).is_none(), "rule {part} removed");
    }
    assert!(access_entries(&sdk, &c).keys().all(|p| !p.contains(&node_role(&c))), "access entry removed");
    assert!(pod_identity_roles(&sdk, &c).is_empty(), "association removed");
    let t0 = ec2_tags(&sdk, &s.private[0]);
    assert_eq!(t0.get(DISCOVERY), Some(&c), "a pre-existing discovery tag stays: {t0:?}");
    assert!(!t0.contains_key(MARKER), "{t0:?}");
    for id in &s.private[1..] {
        let t = ec2_tags(&sdk, id);
        assert!(!t.contains_key(DISCOVERY) && !t.contains_key(MARKER), "{id}: {t:?}");
    }
    let tsg = ec2_tags(&sdk, &s.node_sg);
    assert!(!tsg.contains_key(DISCOVERY) && !tsg.contains_key(MARKER), "{tsg:?}");
    assert!(rt().block_on(sdk.iam.get_policy().policy_arn("arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy").send()).is_ok());

    let r = karpctl_strict(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "a second down writes nothing: {}", r.stdout);
}

#[test]
fn strict_an_unowned_role_and_queue_stop_up_and_survive_down() {
    let c = cluster_name("s-own");
    seeded(&c);
    let sdk = sdk_strict();
    rt().block_on(async {
        // As the Terraform module leaves them: the role at path "/", with a managed policy.
        let t = aws_sdk_iam::types::Tag::builder().key("owner").value("terraform").build().unwrap();
        sdk.iam.create_role().role_name(node_role(&c)).assume_role_policy_document(TRUST_EC2).tags(t).send().await.unwrap();
        sdk.iam
            .attach_role_policy()
            .role_name(node_role(&c))
            .policy_arn("arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy")
            .send()
            .await
            .unwrap();
        sdk.sqs
            .create_queue()
            .queue_name(queue_name(&c))
            .attributes(QueueAttributeName::MessageRetentionPeriod, "900")
            .tags("owner", "terraform")
            .send()
            .await
            .unwrap();
    });
    let theirs = |sdk: &Sdk| {
        let (_, tags, arn) = role(sdk, &node_role(&c)).expect("their role is still there");
        assert_eq!(arn, format!("arn:aws:iam::000000000000:role/{}", node_role(&c)));
        assert_eq!(tags, BTreeMap::from([("owner".to_string(), "terraform".to_string())]), "role tags untouched");
        assert_eq!(
            attached(sdk, &node_role(&c)),
            BTreeSet::from(["arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".to_string()])
        );
        let q = queue(sdk, &queue_name(&c)).expect("their queue is still there");
        assert_eq!(q.attrs["MessageRetentionPeriod"], "900");
        assert!(!q.attrs.contains_key("Policy"), "no policy added");
        assert_eq!(q.tags, HashMap::from([("owner".to_string(), "terraform".to_string())]));
    };
    let wd = Workdir::new();
    wd.plan(&c, &plan(&c));
    let r = karpctl_strict(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    let msg = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&node_role(&c)) && msg.contains(&queue_name(&c)) && msg.contains("not managed by karpctl"), "{msg}");
    assert_eq!(doc["stats"]["writes"], 0, "up stops before any write: {doc}");
    theirs(&sdk);
    assert_eq!(owned_iam(&sdk, &c), (vec![], vec![], vec![]), "nothing created");

    let r = karpctl_strict(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("left alone"), "down says what it leaves: {r:?}");
    theirs(&sdk);
}

#[test]
fn strict_create_queue_refused_after_down_is_retried_until_the_name_is_free() {
    let c = cluster_name("s-qdr");
    let wd = Workdir::new();
    // Neither emulator blocks the name after DeleteQueue; AWS does for 60 s. Three refusals, on
    // the SQS calls of the `up` that follows the `down` (only that run goes through the proxy).
    let mut px = Proxy::start_warm(
        &wd,
        &format!("{c}-sqs"),
        &moto_endpoint(),
        json!([{
            "service": "sqs", "operation": "CreateQueue", "times": 3,
            "body": format!("QueueName == '{}'", queue_name(&c)),
            "error": {"code": "QueueDeletedRecently",
                      "message": "You must wait 60 seconds after deleting a queue before you can create another with the same name."}
        }]),
    );
    seeded(&c);
    wd.plan(&c, &plan(&c));
    assert_eq!(karpctl_strict(&wd, &["up", "--cluster", &c]).code, 0);
    let r = karpctl_strict(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk_strict();
    assert!(queue(&sdk, &queue_name(&c)).is_none());

    let via = StrictEndpoints::direct().via("SQS", px.url());
    let r = karpctl_strict_at(&wd, &["up", "--cluster", &c], &via, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(px.fired("CreateQueue"), 3, "the block was served");
    px.begin_stop();
    assert!(r.stderr.contains("QueueDeletedRecently"), "the retries are shown: {r:?}");
    let q = queue(&sdk, &queue_name(&c)).expect("queue re-created");
    assert_eq!(q.tags.get(OWNER_TAG), Some(&c));
    let qarn = q.attrs["QueueArn"].clone();
    for part in RULE_PARTS {
        assert_eq!(targets(&sdk, &rule_name(&c, part)), Some(vec![(TARGET_ID.to_string(), qarn.clone())]), "{part}");
    }
    assert_converged(&wd, &c);
}

#[test]
fn strict_iam_propagation_delays_seen_by_eks_and_iam_are_retried_until_the_roles_are_visible() {
    let c = cluster_name("s-prop");
    let wd = Workdir::new();
    // EKS (ministack) and IAM (moto) accept a role the moment it exists; AWS does not for a while.
    let eks = Proxy::start_warm(
        &wd,
        &format!("{c}-eks"),
        &endpoint(),
        json!([
            {"service": "eks", "operation": "CreateAccessEntry", "times": 3,
             "error": {"code": "InvalidParameterException", "message": "The specified principalArn is invalid: invalid principal"}},
            {"service": "eks", "operation": "CreatePodIdentityAssociation", "times": 3,
             "error": {"code": "InvalidParameterException", "message": "Role provided in the request does not exist"}}
        ]),
    );
    let iam = Proxy::start_warm(
        &wd,
        &format!("{c}-iam"),
        &moto_endpoint(),
        json!([
            {"service": "iam", "operation": "AddRoleToInstanceProfile", "times": 2,
             "error": {"code": "NoSuchEntity", "status": 404, "message": format!("The role with name {} cannot be found.", node_role(&c))}}
        ]),
    );
    seeded(&c);
    wd.plan(&c, &plan(&c));
    let via = StrictEndpoints::direct().via("IAM", iam.url()).via("EKS", eks.url());
    let r = karpctl_strict_at(&wd, &["up", "--cluster", &c], &via, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(eks.fired("CreateAccessEntry"), 3);
    assert_eq!(eks.fired("CreatePodIdentityAssociation"), 3);
    assert_eq!(iam.fired("AddRoleToInstanceProfile"), 2);
    assert!(r.stderr.contains("InvalidParameterException") && r.stderr.contains("NoSuchEntity"), "retries are shown: {r:?}");

    let sdk = sdk_strict();
    let (_, _, node_arn) = role(&sdk, &node_role(&c)).unwrap();
    let (_, _, ctrl_arn) = role(&sdk, &controller_role(&c)).unwrap();
    assert_eq!(access_entries(&sdk, &c).get(&node_arn).map(String::as_str), Some("EC2_LINUX"), "one entry, made once");
    assert_eq!(pod_identity_roles(&sdk, &c), vec![ctrl_arn], "one association, made once");
    let ip = rt().block_on(sdk.iam.get_instance_profile().instance_profile_name(instance_profile(&c)).send()).unwrap();
    assert_eq!(ip.instance_profile().unwrap().roles().len(), 1);
    stop_all(vec![eks, iam]);
    assert_converged(&wd, &c);
}

#[test]
fn strict_down_after_a_discovery_tag_was_repointed_leaves_that_tag_and_removes_karpctls_marker() {
    let c = cluster_name("s-repoint");
    let s = seeded(&c);
    let wd = Workdir::new();
    wd.plan_for(&c, "\n[interruption]\nenabled = false\n");
    let r = karpctl_strict(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let sdk = sdk_strict();
    // After karpctl tagged it, a person points one subnet's discovery tag at another cluster.
    let repointed = &s.private[2];
    ec2_tag(&sdk, repointed, DISCOVERY, "someone-else");
    let r = karpctl_strict(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 1, "preflight refuses a chosen subnet tagged for another cluster: {r:?}");
    assert!(r.stderr.contains(repointed.as_str()) && r.stderr.contains("someone-else"), "{r:?}");

    let r = karpctl_strict(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    for id in s.private[..2].iter().chain([&s.node_sg]) {
        let t = ec2_tags(&sdk, id);
        assert!(!t.contains_key(DISCOVERY) && !t.contains_key(MARKER), "{id}: {t:?}");
    }
    let t = ec2_tags(&sdk, repointed);
    // The other cluster's tag stays: DeleteTags names key and value (moto honours the value;
    // ministack would delete the key whatever its value).
    assert_eq!(t.get(DISCOVERY).map(String::as_str), Some("someone-else"), "{t:?}");
    // karpctl's own marker for this cluster does not outlive `down` (tags_to_remove returns exactly
    // the marker for this case; the planner must schedule it).
    assert!(!t.contains_key(MARKER), "down left karpctl's marker {MARKER}={c} on {repointed}: {t:?}\n{r:?}");
}
