//! `karpctl import` then `up --adopt` on setups made the way the terraform-aws-eks `karpenter`
//! module (v20 and v21) and Karpenter's getting-started CloudFormation stack name them, built
//! here through the AWS SDK: import reads only and writes the plan; `up --adopt --concurrency 1`
//! converges in one run, keeps every role, the queue and the association (same ids), keeps the
//! existing rules (one per event kind to the queue), never takes a permission from the
//! controller mid-way (the lag proxy's `iam_watch_role` reads the role's actions after every IAM
//! write); then `diff` exits 0 and `doctor` finds nothing.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_eventbridge::types::{RuleState, Target};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The Terraform provider's generated name suffix for this cluster: a UTC timestamp (18 digits)
/// and a counter (8 hex digits), `n` telling a setup's names apart.
fn ts(c: &str, n: u32) -> String {
    let h = c.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!("202403151200001234{:08x}", h.wrapping_add(n))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Shape {
    TfV20,
    TfV21,
    Cfn,
}

/// The module's rule `<Name>` (in `Karpenter<Name>-<suffix>`) of a `RULES` part.
fn tf_name(part: &str) -> &str {
    match part {
        "Rebalance" => "InstanceRebalance",
        "StateChange" => "InstanceStateChange",
        "CapacityReservation" => "CRInterruption",
        other => other,
    }
}

/// The stack's rule logical id of a `RULES` part.
fn cfn_id(part: &str) -> &str {
    match part {
        "HealthEvent" => "ScheduledChangeRule",
        "SpotInterrupt" => "SpotInterruptionRule",
        "Rebalance" => "RebalanceRule",
        "StateChange" => "InstanceStateChangeRule",
        _ => "CapacityReservationInterruptionRule",
    }
}

struct Made {
    c: String,
    wd: Workdir,
    node_role: String,
    controller_role: String,
    queue_url: String,
    queue_arn: String,
    /// (part, name) of the rules the tool made.
    rules: Vec<(&'static str, String)>,
    /// The tool's own controller policies (ARNs) that karpctl's replace.
    old_policies: Vec<String>,
    _spot: std::sync::RwLockReadGuard<'static, ()>,
}

fn doc(stmts: Vec<Value>) -> String {
    json!({"Version": "2012-10-17", "Statement": stmts}).to_string()
}

fn trust_pods() -> String {
    doc(vec![
        json!({"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}),
    ])
}

fn queue_policy(queue_arn: &str) -> String {
    doc(vec![
        json!({"Sid": "SqsWrite", "Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}, "Action": "sqs:SendMessage", "Resource": queue_arn}),
        json!({"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
    ])
}

/// Build the setup `shape` makes around a freshly seeded cluster.
fn make(prefix: &str, shape: Shape) -> Made {
    let c = cluster_name(prefix);
    let seed = seed(&c, &[]);
    let a = seed["account_id"].as_str().unwrap_or("000000000000").to_string();
    let sdk = sdk();
    let spot = spot_role_present(&sdk);
    let cfn = shape == Shape::Cfn;
    let node_role = if cfn { format!("KarpenterNodeRole-{c}") } else { format!("Karpenter-{c}-{}", ts(&c, 1)) };
    let controller_role = if cfn { format!("{c}-karpenter") } else { format!("KarpenterController-{}", ts(&c, 2)) };
    let queue_name = if cfn { c.clone() } else { format!("Karpenter-{c}") };
    let queue_arn = format!("arn:aws:sqs:{REGION}:{a}:{queue_name}");
    let registry =
        if shape == Shape::TfV20 { "AmazonEC2ContainerRegistryReadOnly" } else { "AmazonEC2ContainerRegistryPullOnly" };
    let mut node_policies = vec!["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", registry];
    if cfn {
        node_policies.push("AmazonSSMManagedInstanceCore");
    }
    let (queue_url, rules, old_policies) = rt().block_on(async {
        let node = sdk.iam.create_role().role_name(&node_role).assume_role_policy_document(TRUST_EC2).send().await.unwrap();
        let node_arn = node.role().unwrap().arn().to_string();
        for p in &node_policies {
            sdk.iam.attach_role_policy().role_name(&node_role).policy_arn(aws_managed(p)).send().await.unwrap();
        }
        if !cfn {
            // The module's access entry (the getting-started guide maps the role in aws-auth).
            sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&node_arn).r#type("EC2_LINUX").send().await.unwrap();
        }
        let ctrl =
            sdk.iam.create_role().role_name(&controller_role).assume_role_policy_document(trust_pods()).send().await.unwrap();
        let controller_arn = ctrl.role().unwrap().arn().to_string();
        let parts = controller_policies_v1_14(&c, REGION, &a, PARTITION, &node_arn, &queue_arn);
        let mut old = Vec::new();
        let mut attach = Vec::new();
        if cfn {
            // The stack's split policies, named as karpctl names them, at path /.
            for (part, stmts) in &parts {
                let p = sdk
                    .iam
                    .create_policy()
                    .policy_name(format!("KarpenterController{part}Policy-{c}"))
                    .policy_document(doc(stmts.clone()))
                    .send()
                    .await
                    .unwrap();
                attach.push(p.policy().unwrap().arn().unwrap().to_string());
            }
        } else {
            let all: Vec<Value> = parts.values().flatten().cloned().collect();
            let p = sdk
                .iam
                .create_policy()
                .policy_name(format!("KarpenterController-{}", ts(&c, 3)))
                .policy_document(doc(all))
                .send()
                .await
                .unwrap();
            let arn = p.policy().unwrap().arn().unwrap().to_string();
            attach.push(arn.clone());
            old.push(arn);
        }
        for arn in &attach {
            sdk.iam.attach_role_policy().role_name(&controller_role).policy_arn(arn).send().await.unwrap();
        }
        if shape == Shape::TfV20 {
            // The hand-added inline policy v20 users wrote for Karpenter v1.7+.
            let inline = doc(vec![json!({"Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"})]);
            sdk.iam
                .put_role_policy()
                .role_name(&controller_role)
                .policy_name("KarpenterListInstanceProfiles")
                .policy_document(inline)
                .send()
                .await
                .unwrap();
            old.push("KarpenterListInstanceProfiles".to_string());
        }
        sdk.eks
            .create_pod_identity_association()
            .cluster_name(&c)
            .namespace("kube-system")
            .service_account("karpenter")
            .role_arn(&controller_arn)
            .send()
            .await
            .unwrap();
        let q = sdk
            .sqs
            .create_queue()
            .queue_name(&queue_name)
            .attributes(QueueAttributeName::MessageRetentionPeriod, "300")
            .attributes(QueueAttributeName::SqsManagedSseEnabled, "true")
            .attributes(QueueAttributeName::Policy, queue_policy(&queue_arn))
            .send()
            .await
            .unwrap();
        let mut rules = Vec::new();
        // v20 has four rules (no capacity reservation): karpctl adds the fifth.
        let kinds = if shape == Shape::TfV20 { &RULE_EVENTS[..4] } else { &RULE_EVENTS[..] };
        for (part, source, detail) in kinds {
            let name = if cfn {
                // CloudFormation's generated name, `<stack>-<LogicalId>-<random>`, cut to 64.
                let id = cfn_id(part);
                let stack = format!("Karpenter-{c}");
                let keep = 64usize.saturating_sub(id.len() + 2 + 12).min(stack.len());
                format!("{}-{id}-{}", &stack[..keep], "A1B2C3D4E5F6")
            } else {
                format!("Karpenter{}-{}", tf_name(part), ts(&c, 4))
            };
            let pattern = json!({"source": [source], "detail-type": [detail]});
            sdk.events.put_rule().name(&name).event_pattern(pattern.to_string()).state(RuleState::Enabled).send().await.unwrap();
            sdk.events
                .put_targets()
                .rule(&name)
                .targets(Target::builder().id("KarpenterInterruptionQueueTarget").arn(&queue_arn).build().unwrap())
                .send()
                .await
                .unwrap();
            rules.push((*part, name));
        }
        let mut ids: Vec<String> =
            seed["private_subnets"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
        ids.push(seed["node_security_group"].as_str().unwrap().to_string());
        sdk.ec2
            .create_tags()
            .set_resources(Some(ids))
            .tags(aws_sdk_ec2::types::Tag::builder().key(DISCOVERY).value(&c).build())
            .send()
            .await
            .unwrap();
        (q.queue_url().unwrap().to_string(), rules, old)
    });
    Made { c, wd: Workdir::new(), node_role, controller_role, queue_url, queue_arn, rules, old_policies, _spot: spot }
}

fn role_id(sdk: &Sdk, name: &str) -> String {
    rt().block_on(sdk.iam.get_role().role_name(name).send()).expect("iam:GetRole").role().unwrap().role_id().to_string()
}

/// Every action Karpenter v1.14's controller needs (the upstream policy set).
fn needed(m: &Made, a: &str) -> BTreeSet<String> {
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    controller_policies_v1_14(&m.c, REGION, a, PARTITION, &node_arn, &m.queue_arn)
        .values()
        .flatten()
        .filter(|s| s["Effect"] == "Allow")
        .flat_map(|s| strings(&s["Action"]))
        .collect()
}

/// import, then `up --adopt --concurrency 1` with the controller role watched; everything the
/// issue asks is asserted. Returns the import run (for the transcript).
fn import_then_adopt(prefix: &str, shape: Shape) -> (Run, String) {
    let m = make(prefix, shape);
    let sdk = sdk();
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    let (node_id, ctrl_id) = (role_id(&sdk, &m.node_role), role_id(&sdk, &m.controller_role));
    let assoc = karpenter_associations(&sdk, &m.c);
    assert_eq!(assoc.len(), 1);

    // Every run goes through the lag proxy: it keeps the association's tags (ministack refuses
    // TagResource on association ARNs, AWS takes it) and reads the controller role's actions
    // after every IAM write.
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    px.set(json!({"iam_watch_role": {&m.controller_role: true}, "eks_tag_associations": {&m.c: true}}));
    let run = |args: &[&str]| karpctl_at(&m.wd, px.url(), args, &[]);

    // import: reads only, writes the plan file, refuses to overwrite it.
    let json_run = run(&["import", "--cluster", &m.c, "--output", "json"]);
    assert_eq!(json_run.code, 0, "{json_run:?}");
    assert_eq!(json_run.writes(), 0, "import makes no write call: {}", json_run.stdout);
    let doc = json_run.json();
    let plan_path = m.wd.path().join("plans").join(format!("{}.toml", m.c));
    let text = std::fs::read_to_string(&plan_path).expect("import wrote plans/<c>.toml");
    assert_eq!(doc["plan_text"].as_str(), Some(text.as_str()));
    assert!(text.contains(&m.controller_role) && text.contains(&m.node_role), "{text}");
    for (_, name) in &m.rules {
        assert!(text.contains(name.as_str()), "rule {name} kept: {text}");
    }
    let again = run(&["import", "--cluster", &m.c]);
    assert_eq!(again.code, 1, "never overwrites: {again:?}");
    assert!(again.stderr.contains("--force"), "{again:?}");
    let human = run(&["import", "--cluster", &m.c, "--force"]);
    assert_eq!(human.code, 0, "{human:?}");
    match shape {
        Shape::Cfn => {
            assert!(human.stdout.contains("DeletionPolicy: Retain"), "{human:?}");
            // The seeded rule names are cut to 64 characters, as CloudFormation cuts them.
            assert!(human.stdout.contains(&format!("--stack-name Karpenter-{} ", m.c)), "the whole stack name: {human:?}");
        }
        _ => {
            assert!(human.stdout.contains("terraform state rm"), "{human:?}");
            assert!(human.stdout.contains("'module.karpenter.aws_sqs_queue.this[0]'"), "{human:?}");
            assert!(human.stdout.contains("destroy = false"), "{human:?}");
        }
    }

    // up --adopt, one call at a time, the controller role's actions read after every IAM write.
    let up = run(&["up", "--cluster", &m.c, "--adopt", "--concurrency", "1"]);
    assert_eq!(up.code, 0, "{up:?}");
    let want = needed(&m, &a);
    let watched = px.state()["iam_watch"][&m.controller_role].as_array().cloned().unwrap_or_default();
    assert!(!watched.is_empty(), "IAM writes were watched: {:?}", px.state());
    for w in &watched {
        let has: BTreeSet<String> = strings(&w["actions"]).into_iter().collect();
        let missing: Vec<&String> = want.iter().filter(|x| !has.contains(*x)).collect();
        assert!(missing.is_empty(), "after {} the controller lacked {missing:?}\n{up:?}", w["after"]);
    }

    // Nothing remade.
    assert_eq!(role_id(&sdk, &m.node_role), node_id, "the node role is the same role");
    assert_eq!(role_id(&sdk, &m.controller_role), ctrl_id, "the controller role is the same role");
    let url = rt().block_on(sdk.sqs.get_queue_url().queue_name(m.queue_arn.rsplit(':').next().unwrap()).send()).unwrap();
    assert_eq!(url.queue_url(), Some(m.queue_url.as_str()), "the same queue");
    assert_eq!(karpenter_associations(&sdk, &m.c), assoc, "the same association");
    // Exactly one rule per event kind to the queue, the tool's own where it had one.
    let rules = rules_to_queue(&sdk, &m.queue_arn);
    let mut kinds: Vec<String> = rules.values().flatten().cloned().collect();
    kinds.sort();
    let mut all: Vec<String> = RULE_EVENTS.iter().map(|(_, _, d)| d.to_string()).collect();
    all.sort();
    assert_eq!(kinds, all, "one rule per kind: {rules:?}");
    for (_, name) in &m.rules {
        assert!(rules.contains_key(name), "kept {name}: {rules:?}");
    }
    // The tool's policies are off the controller role, and deleted (nothing else used them).
    let attached = attached(&sdk, &m.controller_role);
    for p in &m.old_policies {
        assert!(!attached.contains(p), "{p} detached: {attached:?}");
        if p.starts_with("arn:") {
            assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_err(), "{p} deleted");
        }
    }

    let diff = run(&["diff", "--cluster", &m.c]);
    assert_eq!(diff.code, 0, "diff right after is clean: {diff:?}");
    let doctor = run(&["doctor", "--cluster", &m.c]);
    assert_eq!(doctor.code, 0, "doctor finds nothing: {doctor:?}");
    (human, m.c.clone())
}

#[test]
fn a_terraform_v21_setup_is_imported_and_adopted_in_one_run() {
    let (run, c) = import_then_adopt("im-tf21", Shape::TfV21);
    // Lines only the emulator causes (its made-up VPC id, its small seeded subnets) and the
    // in-sync discovery tags, whose order follows random subnet ids, are left out of the docs.
    let emulator_only = ["note: aws_ec2_tag ", "note: EKS reports VPC", "warning: Availability Zone"];
    let mut text: String =
        run.stdout.lines().filter(|l| !emulator_only.iter().any(|p| l.starts_with(p))).map(|l| format!("{l}\n")).collect();
    for n in 1..=4 {
        text = text.replace(&ts(&c, n), &ts("say-when-east", n));
    }
    crate::common::transcript::check("import.md", "import-terraform", &crate::common::transcript::stable(&text, &c));
}

#[test]
fn a_terraform_v20_setup_with_four_rules_and_an_inline_policy_is_imported_and_adopted() {
    import_then_adopt("im-tf20", Shape::TfV20);
}

#[test]
fn a_cloudformation_setup_is_imported_and_adopted() {
    import_then_adopt("im-cfn", Shape::Cfn);
}
