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
pub(crate) enum Shape {
    /// v20 with `enable_v1_permissions = true`: four rules, ReadOnly registry, a hand-added
    /// inline policy.
    TfV20,
    /// v20's defaults (the seed's module): the pre-v1 controller policy and no Pod Identity
    /// association.
    TfV20Defaults,
    TfV21,
    /// The module's own example: a fixed node role name (the cluster's), an additional node
    /// policy, a user's KMS policy and the guide's zonal-shift policy on the controller role, a
    /// managed node group whose role has an access entry while Karpenter's node role is mapped
    /// by aws-auth, and the seed's public subnets tagged for discovery without public IPs.
    TfExample,
    /// Karpenter's getting-started guide: the stack, eksctl's controller role and a managed node
    /// group (its role has the access entry; Karpenter's node role is in aws-auth).
    Cfn,
}

/// The module's rule `<Name>` (in `Karpenter<Name>-<suffix>`) of a `RULES` part.
fn tf_name(part: &str) -> &'static str {
    catalog::rule(part).expect("a rule part").tf_name
}

/// The stack's rule logical id of a `RULES` part.
fn cfn_id(part: &str) -> &'static str {
    catalog::rule(part).expect("a rule part").cfn_id
}

pub(crate) struct Made {
    pub(crate) c: String,
    pub(crate) wd: Workdir,
    node_role: String,
    controller_role: String,
    queue_url: String,
    queue_arn: String,
    /// (part, name) of the rules the tool made.
    rules: Vec<(&'static str, String)>,
    /// The tool's own controller policies (ARNs) that karpctl's replace.
    old_policies: Vec<String>,
    /// Policies on the controller role that are not Karpenter's: kept.
    kept_policies: Vec<String>,
    /// The managed node group's role (never Karpenter's), when the shape has one.
    nodegroup_role: Option<String>,
    /// Public subnets tagged for discovery that give no public IP.
    unusable_subnets: Vec<String>,
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

/// The pre-v1 controller policy (the module's `v033` document, abridged): its statement Sids
/// are v0.33's.
fn pre_v1_policy(c: &str, a: &str, node_arn: &str, queue_arn: &str) -> Vec<Value> {
    vec![
        json!({"Sid": "AllowScopedEC2InstanceActions", "Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
               "Resource": [format!("arn:aws:ec2:{REGION}::image/*"), format!("arn:aws:ec2:{REGION}:*:subnet/*")]}),
        json!({"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
               "Resource": [format!("arn:aws:ec2:{REGION}:*:instance/*")],
               "Condition": {"StringEquals": {format!("aws:RequestTag/kubernetes.io/cluster/{c}"): "owned"}}}),
        json!({"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": node_arn,
               "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}),
        json!({"Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
               "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"], "Resource": queue_arn}),
        json!({"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
               "Resource": format!("arn:aws:eks:{REGION}:{a}:cluster/{c}")}),
    ]
}

/// Build the setup `shape` makes around a freshly seeded cluster.
pub(crate) fn make(prefix: &str, shape: Shape) -> Made {
    let c = cluster_name(prefix);
    let seed = seed(&c, &[]);
    let a = seed["account_id"].as_str().unwrap_or("000000000000").to_string();
    let sdk = sdk();
    let spot = spot_role_present(&sdk);
    let cfn = shape == Shape::Cfn;
    let v20 = matches!(shape, Shape::TfV20 | Shape::TfV20Defaults);
    let node_role = match shape {
        Shape::Cfn => format!("KarpenterNodeRole-{c}"),
        // The module's example: `node_iam_role_use_name_prefix = false`, `node_iam_role_name = <cluster>`.
        Shape::TfExample => c.clone(),
        _ => format!("Karpenter-{c}-{}", ts(&c, 1)),
    };
    let controller_role = if cfn { format!("{c}-karpenter") } else { format!("KarpenterController-{}", ts(&c, 2)) };
    let queue_name = if cfn { c.clone() } else { format!("Karpenter-{c}") };
    let queue_arn = format!("arn:aws:sqs:{REGION}:{a}:{queue_name}");
    let registry = if v20 { "AmazonEC2ContainerRegistryReadOnly" } else { "AmazonEC2ContainerRegistryPullOnly" };
    let mut node_policies = vec!["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", registry];
    if matches!(shape, Shape::Cfn | Shape::TfExample) {
        // The guide's stack, and the example's `node_iam_role_additional_policies`.
        node_policies.push("AmazonSSMManagedInstanceCore");
    }
    // Karpenter's node role is mapped by aws-auth in the guide and the example (no access entry).
    let node_entry = !matches!(shape, Shape::Cfn | Shape::TfExample);
    let nodegroup_role = matches!(shape, Shape::Cfn | Shape::TfExample).then(|| format!("{c}-ng"));
    let (queue_url, rules, old_policies, kept_policies) = rt().block_on(async {
        let node = sdk.iam.create_role().role_name(&node_role).assume_role_policy_document(TRUST_EC2).send().await.unwrap();
        let node_arn = node.role().unwrap().arn().to_string();
        for p in &node_policies {
            sdk.iam.attach_role_policy().role_name(&node_role).policy_arn(aws_managed(p)).send().await.unwrap();
        }
        if node_entry {
            sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&node_arn).r#type("EC2_LINUX").send().await.unwrap();
        }
        if let Some(ng) = &nodegroup_role {
            // A managed node group: its own role, with the EC2_LINUX entry EKS gives it.
            let r = sdk.iam.create_role().role_name(ng).assume_role_policy_document(TRUST_EC2).send().await.unwrap();
            let ng_arn = r.role().unwrap().arn().to_string();
            sdk.iam.attach_role_policy().role_name(ng).policy_arn(aws_managed("AmazonEKSWorkerNodePolicy")).send().await.unwrap();
            let subnets: Vec<String> =
                seed["private_subnets"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            sdk.eks
                .create_nodegroup()
                .cluster_name(&c)
                .nodegroup_name("ng-1")
                .node_role(&ng_arn)
                .set_subnets(Some(subnets))
                .send()
                .await
                .unwrap();
            sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&ng_arn).r#type("EC2_LINUX").send().await.unwrap();
        }
        let ctrl =
            sdk.iam.create_role().role_name(&controller_role).assume_role_policy_document(trust_pods()).send().await.unwrap();
        let controller_arn = ctrl.role().unwrap().arn().to_string();
        let parts = controller_policies_v1_14(&c, REGION, &a, PARTITION, &node_arn, &queue_arn);
        let mut old = Vec::new();
        let mut kept = Vec::new();
        let mut attach = Vec::new();
        let create = |name: String, stmts: Vec<Value>| {
            let iam = sdk.iam.clone();
            async move {
                let p = iam.create_policy().policy_name(name).policy_document(doc(stmts)).send().await.unwrap();
                p.policy().unwrap().arn().unwrap().to_string()
            }
        };
        if cfn {
            // The stack's split policies, named as karpctl names them, at path /.
            for (part, stmts) in &parts {
                attach.push(create(format!("KarpenterController{part}Policy-{c}"), stmts.clone()).await);
            }
        } else if shape == Shape::TfV20Defaults {
            // Retired like the module's v1 policy: the release that runs (the tests pass one) is 1.0+.
            let arn = create(format!("KarpenterController-{}", ts(&c, 3)), pre_v1_policy(&c, &a, &node_arn, &queue_arn)).await;
            attach.push(arn.clone());
            old.push(arn);
        } else {
            let all: Vec<Value> = parts.values().flatten().cloned().collect();
            let arn = create(format!("KarpenterController-{}", ts(&c, 3)), all).await;
            attach.push(arn.clone());
            old.push(arn);
        }
        if shape == Shape::TfExample {
            // A user's policy for CMK-encrypted volumes, and the guide's zonal-shift policy.
            let kms = vec![json!({"Effect": "Allow", "Action": ["kms:CreateGrant", "kms:Decrypt", "kms:GenerateDataKeyWithoutPlaintext"], "Resource": "*"})];
            let arn = create(format!("{c}-ebs-kms"), kms).await;
            attach.push(arn.clone());
            kept.push(arn);
            let zonal = vec![json!({"Sid": "AllowZonalShiftRead", "Effect": "Allow", "Action": "arc-zonal-shift:GetManagedResource", "Resource": "*"})];
            // Named as karpctl names its own ZonalShift part: adopted in place.
            attach.push(create(format!("KarpenterControllerZonalShiftPolicy-{c}"), zonal).await);
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
        if shape != Shape::TfV20Defaults {
            // v20's default `create_pod_identity_association = false` makes none.
            sdk.eks
                .create_pod_identity_association()
                .cluster_name(&c)
                .namespace("kube-system")
                .service_account("karpenter")
                .role_arn(&controller_arn)
                .send()
                .await
                .unwrap();
        }
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
        // v20 predates Karpenter 1.10's capacity reservation rule.
        let kinds = RULE_EVENTS.iter().filter(|(p, ..)| !v20 || catalog::rule(p).expect("a rule part").since_minor < 10);
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
        (q.queue_url().unwrap().to_string(), rules, old, kept)
    });
    let mut unusable_subnets = Vec::new();
    if shape == Shape::TfExample {
        // terraform-aws-vpc's public subnets: tagged for discovery (`public_subnet_tags`), no
        // public IP on launch.
        unusable_subnets = seed["public_subnets"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
        rt().block_on(async {
            for s in &unusable_subnets {
                sdk.ec2
                    .modify_subnet_attribute()
                    .subnet_id(s)
                    .map_public_ip_on_launch(aws_sdk_ec2::types::AttributeBooleanValue::builder().value(false).build())
                    .send()
                    .await
                    .unwrap();
            }
            sdk.ec2
                .create_tags()
                .set_resources(Some(unusable_subnets.clone()))
                .tags(aws_sdk_ec2::types::Tag::builder().key(DISCOVERY).value(&c).build())
                .send()
                .await
                .unwrap();
        });
    }
    Made {
        c,
        wd: Workdir::new(),
        node_role,
        controller_role,
        queue_url,
        queue_arn,
        rules,
        old_policies,
        kept_policies,
        nodegroup_role,
        unusable_subnets,
        _spot: spot,
    }
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
/// issue asks is asserted. Returns the import run (for the transcript) and the setup.
fn import_then_adopt(prefix: &str, shape: Shape) -> (Run, Made, LagProxy) {
    import_then_adopt_at(prefix, shape, "1.14")
}

/// `import_then_adopt` with `--karpenter-version version`.
fn import_then_adopt_at(prefix: &str, shape: Shape, version: &str) -> (Run, Made, LagProxy) {
    let m = make(prefix, shape);
    let sdk = sdk();
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    let (node_id, ctrl_id) = (role_id(&sdk, &m.node_role), role_id(&sdk, &m.controller_role));
    let assoc = karpenter_associations(&sdk, &m.c);
    assert_eq!(assoc.len(), usize::from(shape != Shape::TfV20Defaults));
    let ng_before = m.nodegroup_role.as_ref().map(|r| role_tags(&sdk, r));

    // Every run goes through the lag proxy: it keeps the association's tags (ministack refuses
    // TagResource on association ARNs, AWS takes it) and reads the controller role's actions
    // after every IAM write.
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    px.set(json!({
        "iam_watch_role": {&m.controller_role: true},
        "eks_tag_associations": {&m.c: true},
        "eks_access_entry_tags": {&m.c: true},
    }));
    let run = |args: &[&str]| karpctl_at(&m.wd, px.url(), args, &[]);

    // import never guesses the release that runs.
    let plan_path = m.wd.path().join("plans").join(format!("{}.toml", m.c));
    let unpinned = run(&["import", "--cluster", &m.c]);
    assert_eq!(unpinned.code, 1, "{unpinned:?}");
    assert!(
        unpinned.stderr.contains("--karpenter-version") && unpinned.stderr.contains("helm list -n kube-system"),
        "{unpinned:?}"
    );
    assert!(!plan_path.exists(), "nothing written without the version");

    // import: reads only, writes the plan file, refuses to overwrite it.
    let connects = || (px.count("GetCallerIdentity"), px.count("DescribeCluster"));
    let before = connects();
    let json_run = run(&["import", "--cluster", &m.c, "--karpenter-version", version, "--output", "json"]);
    assert_eq!(json_run.code, 0, "{json_run:?}");
    assert_eq!(json_run.writes(), 0, "import makes no write call: {}", json_run.stdout);
    let after = connects();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "import connects once: one GetCallerIdentity and one DescribeCluster, its diff included"
    );
    let doc = json_run.json();
    let text = std::fs::read_to_string(&plan_path).expect("import wrote plans/<c>.toml");
    assert_eq!(doc["plan_text"].as_str(), Some(text.as_str()));
    assert!(text.contains(&m.controller_role) && text.contains(&format!("node_role_name = \"{}\"", m.node_role)), "{text}");
    for (_, name) in &m.rules {
        assert!(text.contains(name.as_str()), "rule {name} kept: {text}");
    }
    for p in &m.kept_policies {
        assert!(text.contains(p.as_str()) && !text.contains(&format!("retire_policies = [\n  \"{p}\"")), "{p} kept: {text}");
    }
    if let Some(ng) = &m.nodegroup_role {
        assert!(
            !text.contains(&format!("role/{ng}\"")) && !text.contains(&format!("\"{ng}\"")),
            "the node group's role is not taken: {text}"
        );
    }
    for s in &m.unusable_subnets {
        assert!(text.contains(&format!("# left out: {s}")), "{s} left out with the reason: {text}");
        let ids = text.lines().find(|l| l.starts_with("subnet_ids")).unwrap_or_default();
        assert!(!ids.contains(s.as_str()), "{ids}");
    }
    let again = run(&["import", "--cluster", &m.c, "--karpenter-version", version]);
    assert_eq!(again.code, 1, "never overwrites: {again:?}");
    assert!(again.stderr.contains("--force"), "{again:?}");
    let human = run(&["import", "--cluster", &m.c, "--karpenter-version", version, "--force"]);
    assert_eq!(human.code, 0, "{human:?}");
    match shape {
        Shape::Cfn => {
            let out = &human.stdout;
            assert!(out.contains("DeletionPolicy: Retain") && out.contains("--output json | jq -r ."), "{human:?}");
            // The seeded rule names are cut to 64 characters, as CloudFormation cuts them.
            assert!(out.contains(&format!("\n  s=Karpenter-{}\n", m.c)), "the whole stack name: {human:?}");
            assert!(out.contains(&format!("\n  s=eksctl-{}-podidentityrole-kube-system-karpenter\n", m.c)), "{human:?}");
            assert!(out.contains("&& aws cloudformation delete-stack"), "chained: {human:?}");
        }
        _ => {
            assert!(human.stdout.lines().any(|l| l.trim() == "terraform state rm 'module.karpenter'"), "{human:?}");
            assert!(human.stdout.contains("destroy = false"), "{human:?}");
            assert!(human.stdout.contains("`terraform plan` must show 0 to destroy before you apply"), "{human:?}");
        }
    }

    // up --adopt, one call at a time, the controller role's actions read after every IAM write.
    let up = run(&["up", "--cluster", &m.c, "--adopt", "--concurrency", "1"]);
    // Subnets left out of the plan that still carry the tag: Karpenter picks them and the nodes
    // never join, so `up` applies and then says so (exit 1), as doctor does.
    assert_eq!(up.code, if m.unusable_subnets.is_empty() { 0 } else { 1 }, "{up:?}");
    for s in &m.unusable_subnets {
        assert!(up.stdout.contains("error subnet-no-way-out") && up.stdout.contains(&format!("--resources {s} ")), "{up:?}");
    }
    let watched = px.state()["iam_watch"][&m.controller_role].as_array().cloned().unwrap_or_default();
    assert!(!watched.is_empty(), "IAM writes were watched: {:?}", px.state());
    // A setup that granted every action Karpenter 1.14 needs never loses one mid-way.
    // The pre-v1 policy never granted them all: what it granted is never lost either, as it goes
    // only once karpctl's policies are attached.
    let want: BTreeSet<String> = if shape == Shape::TfV20Defaults {
        let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
        pre_v1_policy(&m.c, &a, &node_arn, &m.queue_arn).iter().flat_map(|s| strings(&s["Action"])).collect()
    } else {
        needed(&m, &a)
    };
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
    let now = karpenter_associations(&sdk, &m.c);
    if shape == Shape::TfV20Defaults {
        // The role the module made is adopted; the association is made for it (no second role).
        assert_eq!(now.len(), 1, "{now:?}");
        assert!(now[0].1.ends_with(&format!("role/{}", m.controller_role)), "{now:?}");
    } else {
        assert_eq!(now, assoc, "the same association");
    }
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
    // The tool's Karpenter policies are off the controller role, and deleted (nothing else used
    // them); everything else stays.
    let attached = attached(&sdk, &m.controller_role);
    for p in &m.old_policies {
        assert!(!attached.contains(p), "{p} detached: {attached:?}");
        if p.starts_with("arn:") {
            assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_err(), "{p} deleted");
        }
    }
    for p in &m.kept_policies {
        assert!(attached.contains(p), "{p} kept: {attached:?}");
    }
    // The node group's role and its entry are untouched; Karpenter passes its own node role.
    if let Some(ng) = &m.nodegroup_role {
        assert_eq!(Some(role_tags(&sdk, ng)), ng_before, "the node group's role is not tagged");
        let ng_arn = format!("arn:aws:iam::{a}:role/{ng}");
        let seen = sdk_at(px.url());
        let e = rt().block_on(seen.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&ng_arn).send()).unwrap();
        assert!(!e.access_entry().unwrap().tags().is_some_and(|t| t.contains_key(OWNER_TAG)), "its entry is not karpctl's");
    }
    // The node role's access entry is karpctl's now (adopted or made), so `down` removes it.
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    // Read through the proxy: ministack's DescribeAccessEntry leaves out the tags (eks_access_entry_tags).
    let seen = sdk_at(px.url());
    let e = rt().block_on(seen.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&node_arn).send()).unwrap();
    assert_eq!(e.access_entry().unwrap().tags().and_then(|t| t.get(OWNER_TAG)).map(String::as_str), Some(m.c.as_str()));

    let diff = run(&["diff", "--cluster", &m.c]);
    if m.unusable_subnets.is_empty() {
        assert_eq!(diff.code, 0, "diff right after is clean: {diff:?}");
    } else {
        // Nothing to change, but the same error-level check as `up`'s: one verdict (exit 1).
        assert_eq!(diff.code, 1, "{diff:?}");
        assert!(diff.stdout.contains("No changes.") && diff.stdout.contains("error subnet-no-way-out"), "{diff:?}");
    }
    // (judged on a day the release was still supported: out of support is a warning of its own)
    let day: &[(&str, &str)] = if version == "1.14" { &[] } else { &[("KARPCTL_TODAY", "2026-03-25")] };
    let doctor = karpctl_at(&m.wd, px.url(), &["doctor", "--cluster", &m.c, "--karpenter-version", version], day);
    if m.unusable_subnets.is_empty() {
        assert_eq!(doctor.code, 0, "doctor finds nothing: {doctor:?}");
    } else {
        // The tagged public subnets stay tagged (Terraform's public_subnet_tags): doctor says so.
        assert_eq!(doctor.code, 2, "{doctor:?}");
        assert!(m.unusable_subnets.iter().all(|s| doctor.stdout.contains(s.as_str())), "{doctor:?}");
    }
    (human, m, px)
}

fn role_tags(sdk: &Sdk, name: &str) -> Vec<(String, String)> {
    let r = rt().block_on(sdk.iam.get_role().role_name(name).send()).expect("iam:GetRole");
    r.role().unwrap().tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// Whether `down` runs with the plan file `import` wrote, or without any (it was lost, or `down`
/// runs elsewhere): the result must be the same.
#[derive(Clone, Copy, PartialEq, Debug)]
enum PlanFile {
    Kept,
    Gone,
}

/// `down` after a takeover removes everything this cluster's tags mark (the adopted roles,
/// access entry, association, queue and rules, karpctl's own policies) and nothing else: a node
/// group's role and entry and the user's own policies stay.
fn down_removes_only_what_was_taken(m: &Made, px: &LagProxy, plan: PlanFile) {
    let sdk = sdk();
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    if plan == PlanFile::Gone {
        std::fs::remove_file(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    }
    let down = karpctl_at(&m.wd, px.url(), &["down", "--cluster", &m.c, "--yes"], &[]);
    assert_eq!(down.code, 0, "{down:?}");
    if plan == PlanFile::Gone {
        assert!(down.stderr.contains(&format!("Without a plan file, found controller role {}", m.controller_role)), "{down:?}");
    }
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    let entry = rt().block_on(sdk.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&node_arn).send());
    assert!(entry.is_err(), "the node role's adopted access entry went with it: {entry:?}");
    assert!(rt().block_on(sdk.iam.get_role().role_name(&m.node_role).send()).is_err(), "the node role went: {down:?}");
    assert!(
        rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).is_err(),
        "the controller role went: {down:?}"
    );
    // karpctl's own policies, made at the adopted roles' path (/).
    for part in CONTROLLER_PARTS.iter().chain(["ZonalShift"].iter()) {
        let arn = format!("arn:aws:iam::{a}:policy/KarpenterController{part}Policy-{}", m.c);
        assert!(rt().block_on(sdk.iam.get_policy().policy_arn(&arn).send()).is_err(), "{arn} went: {down:?}");
    }
    assert!(queue(&sdk, queue_name_of(m)).is_none(), "the adopted queue went: {down:?}");
    for (_, name) in &m.rules {
        assert!(rt().block_on(sdk.events.describe_rule().name(name).send()).is_err(), "the adopted rule {name} went: {down:?}");
    }
    for part in RULE_PARTS {
        assert!(rt().block_on(sdk.events.describe_rule().name(rule_name(&m.c, part)).send()).is_err(), "{part}: {down:?}");
    }
    assert!(karpenter_associations(&sdk, &m.c).is_empty(), "the association went: {down:?}");
    if let Some(ng) = &m.nodegroup_role {
        assert!(rt().block_on(sdk.iam.get_role().role_name(ng).send()).is_ok(), "the node group's role stays");
        let ng_arn = format!("arn:aws:iam::{a}:role/{ng}");
        let e = rt().block_on(sdk.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&ng_arn).send());
        assert!(e.is_ok(), "the node group's entry stays: {e:?}");
    }
    for p in &m.kept_policies {
        assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_ok(), "{p}, not karpctl's, is never deleted");
    }
}

fn queue_name_of(m: &Made) -> &str {
    m.queue_arn.rsplit(':').next().unwrap()
}

#[test]
fn a_terraform_v21_setup_is_imported_and_adopted_in_one_run() {
    let (run, m, px) = import_then_adopt("im-tf21", Shape::TfV21);
    let c = m.c.clone();
    // Lines only the emulator causes (its made-up VPC id, its small seeded subnets) and the
    // in-sync discovery tags, whose order follows random subnet ids, are left out of the docs.
    let emulator_only = ["note: aws_ec2_tag ", "note: EKS reports VPC", "warning: Availability Zone", "note: Availability Zone"];
    let mut text: String =
        run.stdout.lines().filter(|l| !emulator_only.iter().any(|p| l.starts_with(p))).map(|l| format!("{l}\n")).collect();
    for n in 1..=4 {
        text = text.replace(&ts(&c, n), &ts("say-when-east", n));
    }
    crate::common::transcript::check("import.md", "import-terraform", &crate::common::transcript::stable(&text, &c));
    down_removes_only_what_was_taken(&m, &px, PlanFile::Kept);
}

#[test]
fn a_terraform_v20_setup_with_four_rules_and_an_inline_policy_is_imported_and_adopted() {
    import_then_adopt("im-tf20", Shape::TfV20);
}

#[test]
fn the_v20_defaults_retire_the_pre_v1_policy_and_adopt_the_unassociated_role() {
    // Karpenter 1.10 runs: the module's pre-v1 policy is retired (a counted `-` step), after
    // karpctl's v1 policies are attached (import_then_adopt checks it is gone after up --adopt
    // and that the controller never lost an action it granted).
    let (run, m, _) = import_then_adopt_at("im-tf20d", Shape::TfV20Defaults, "1.10");
    let pre_v1 = &m.old_policies[0];
    let name = pre_v1.rsplit('/').next().unwrap();
    assert!(run.stdout.contains(&format!("  \"{pre_v1}\",   # Karpenter's pre-v1 policy: Karpenter 1.10 runs")), "{run:?}");
    assert!(run.stdout.contains(&format!("  - retired-policy-{name} retired_policy")), "a - step: {run:?}");
    assert!(run.stdout.contains(", 1 to destroy."), "counted: {run:?}");
    assert!(run.stdout.contains("Karpenter 1.10 runs, so karpctl's v1 policies replace it"), "{run:?}");
    assert!(!run.stdout.contains("Upgrade Karpenter first"), "{run:?}");
    assert!(run.stdout.contains("no association uses it"), "{run:?}");
}

/// A call of the controller role naming `version` in its user agent, as CloudTrail records it.
fn call(role: &str, version: &str, minutes_ago: u64) -> Value {
    json!({"role": role, "event": "DescribeInstances", "source": "ec2.amazonaws.com", "agent": format!("karpenter.sh-{version}"), "minutes_ago": minutes_ago})
}

#[test]
fn the_pre_v1_policy_follows_the_release_cloudtrail_shows() {
    let m = make("im-pre1", Shape::TfV20Defaults);
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    let role = format!("arn:aws:iam::{a}:role/{}", m.controller_role);
    let pre_v1 = m.old_policies[0].clone();
    let px = LagProxy::start(&cluster_name("im-pre1-px"), &endpoint());
    let import = |records: Value, extra: &[&str]| {
        px.set(json!({"cloudtrail_events": records, "cloudtrail_lookup_rps": 1000}));
        let mut args = vec!["import", "--cluster", m.c.as_str(), "--force"];
        args.extend_from_slice(extra);
        let r = karpctl_at(&m.wd, px.url(), &args, &[]);
        let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap_or_default();
        (r, text)
    };
    let retired = |text: &str| text.contains(&format!("retire_policies = [\n  \"{pre_v1}\""));

    // CloudTrail shows 1.12.3: the plan follows it and retires the pre-v1 policy.
    let (r, text) = import(json!([call(&role, "1.12.3", 2)]), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(text.contains("karpenter_version = \"1.12\"") && retired(&text), "{text}");
    assert!(r.stdout.contains(", 1 to destroy."), "{r:?}");

    // A rollout from 0.37 is still under way: kept, and said why, whatever the flag says.
    let (r, text) = import(json!([call(&role, "0.37.2", 3), call(&role, "1.12.3", 1)]), &["--karpenter-version", "1.12"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!retired(&text) && text.contains(&format!("  \"{pre_v1}\",   # Karpenter's pre-v1 policy: see the note")), "{text}");
    assert!(r.stdout.contains("0.37.2") && r.stdout.contains("Upgrade Karpenter first"), "{r:?}");
    assert!(r.stdout.contains(", 0 to destroy."), "{r:?}");

    // Only 0.37 runs and no flag: no plan karpctl could apply; said plainly, nothing written.
    std::fs::remove_file(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    let (r, text) = import(json!([call(&role, "0.37.2", 2)]), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("Karpenter 0.37.2 running, a release before 1.0"), "{r:?}");
    assert!(text.is_empty(), "nothing written: {text}");
}

#[test]
fn the_modules_example_keeps_the_users_policies_and_the_node_groups_role() {
    let (run, m, px) = import_then_adopt("im-tfex", Shape::TfExample);
    assert!(run.stdout.contains("zonal_shift = true"), "{run:?}");
    assert!(run.stdout.contains("backs managed node group ng-1"), "{run:?}");
    // Before the module block goes, the let-go names every module output the example reads, as
    // a local with the value `karpctl output --format json` gives for it now that karpctl
    // manages the objects.
    let out = karpctl_at(&m.wd, px.url(), &["output", "--cluster", &m.c, "--format", "json"], &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let doc = out.json();
    let text = &run.stdout;
    let from = text.find("  locals {\n").unwrap_or_else(|| panic!("the locals: {run:?}"));
    let locals = &text[from..from + text[from..].find("\n  }\n").unwrap()];
    let mut checked = Vec::new();
    for line in locals.lines().skip(1) {
        let (name, rest) = line.trim().split_once(" = ").unwrap_or_else(|| panic!("{line}"));
        let (value, source) = rest.split_once(" # ").unwrap_or_else(|| panic!("{line}"));
        let Some(path) = source.strip_prefix('.') else {
            assert_eq!(value, "null", "no karpctl value, said how to read it: {line}");
            continue;
        };
        let got = path.split('.').fold(&doc, |v, k| &v[k]);
        let want: Value = if value == "null" { Value::Null } else { serde_json::from_str(value).unwrap() };
        assert_eq!(&want, got, "{name}: the let-go's value is what output gives at {source}: {out:?}");
        checked.push(name.trim().to_string());
    }
    for name in [
        "karpenter_queue_name",
        "karpenter_node_iam_role_name",
        "karpenter_iam_role_name",
        "karpenter_iam_role_arn",
        "karpenter_namespace",
    ] {
        assert!(checked.contains(&name.to_string()), "{name} checked against output: {checked:?}");
    }
    assert!(text.contains("`module.karpenter.queue_name` to its helm_release"), "{run:?}");
    down_removes_only_what_was_taken(&m, &px, PlanFile::Gone);
}

#[test]
fn a_cloudformation_setup_is_imported_and_adopted() {
    let (_, m, px) = import_then_adopt("im-cfn", Shape::Cfn);
    down_removes_only_what_was_taken(&m, &px, PlanFile::Gone);
}

#[test]
fn a_pod_identity_role_another_namespace_uses_is_not_taken() {
    // v20's defaults, but Karpenter runs in namespace `karpenter`: its association uses the role.
    let m = make("im-ns", Shape::TfV20Defaults);
    let sdk = sdk();
    let arn = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap().role().unwrap().arn().to_string();
    rt().block_on(
        sdk.eks
            .create_pod_identity_association()
            .cluster_name(&m.c)
            .namespace("karpenter")
            .service_account("karpenter")
            .role_arn(&arn)
            .send(),
    )
    .unwrap();
    let trust_before = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap();
    let r = karpctl(&m.wd, &["import", "--cluster", &m.c, "--karpenter-version", "1.14"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("association karpenter/karpenter") && r.stdout.contains("--namespace"), "{r:?}");
    let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    assert!(!text.contains(&m.controller_role), "the running Karpenter's role is not taken: {text}");
    // With the namespace given, it is found through its association.
    let r = karpctl(&m.wd, &["import", "--cluster", &m.c, "--karpenter-version", "1.14", "--namespace", "karpenter", "--force"]);
    assert_eq!(r.code, 0, "{r:?}");
    let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    assert!(text.contains(&format!("controller_role_name = \"{}\"", m.controller_role)), "{text}");
    let trust_after = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap();
    assert_eq!(
        trust_before.role().unwrap().assume_role_policy_document(),
        trust_after.role().unwrap().assume_role_policy_document()
    );
}

/// Plain `up` on the module's own setup stops before any write and names `karpctl import` first;
/// `up --adopt` without the import refuses to make a second controller and node role beside the
/// module's: nothing is written, the association keeps the role the controller uses, and the
/// queue policy still lets every rule of the module send.
#[test]
fn plain_up_on_the_modules_setup_names_import_and_adopt_makes_no_second_set() {
    let m = make("plain-up", Shape::TfV21);
    let sdk = sdk();
    let import = format!("karpctl import --cluster {}", m.c);
    let r = karpctl(&m.wd, &["up", "--cluster", &m.c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let hint = doc["error"]["hint"].as_str().unwrap_or_default();
    let (at_import, at_adopt) = (hint.find(&import), hint.find("--adopt"));
    assert!(at_import.is_some() && at_import < at_adopt, "import first: {hint}");
    let human = karpctl(&m.wd, &["up", "--cluster", &m.c]);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(human.stderr.contains("hint: if another tool made them") && human.stderr.contains(&import), "{human:?}");

    let r = karpctl(&m.wd, &["up", "--cluster", &m.c, "--adopt", "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let conflicts = doc["error"]["conflicts"].as_array().unwrap_or_else(|| panic!("{doc}"));
    for id in ["pod-identity", "queue"] {
        let c = conflicts.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id}: {doc}"));
        let msg = c["message"].as_str().unwrap();
        assert!(msg.contains("second Karpenter setup") && msg.contains("karpctl import"), "{id}: {msg}");
    }
    let pi = conflicts.iter().find(|c| c["id"] == "pod-identity").unwrap()["message"].as_str().unwrap().to_string();
    assert!(pi.contains(&m.controller_role), "names the role the controller uses: {pi}");
    let q = conflicts.iter().find(|c| c["id"] == "queue").unwrap()["message"].as_str().unwrap().to_string();
    assert!(m.rules.iter().all(|(_, name)| q.contains(name.as_str())), "names the module's rules: {q}");

    // Nothing second, nothing repointed, nothing refused.
    for role in [format!("KarpenterController-{}", m.c), format!("KarpenterNodeRole-{}", m.c)] {
        assert!(rt().block_on(sdk.iam.get_role().role_name(&role).send()).is_err(), "{role} was not made");
    }
    let assoc = karpenter_associations(&sdk, &m.c);
    assert_eq!(assoc.len(), 1, "{assoc:?}");
    assert!(assoc[0].1.ends_with(&format!("/{}", m.controller_role)), "{assoc:?}");
    let policy = queue(&sdk, &format!("Karpenter-{}", m.c)).unwrap().attrs["Policy"].clone();
    assert_eq!(policy_json(&policy), policy_json(&queue_policy(&m.queue_arn)), "the module's queue policy is untouched");
    assert_eq!(rules_to_queue(&sdk, &m.queue_arn).len(), m.rules.len(), "every rule of the module still targets the queue");
}
