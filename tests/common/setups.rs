//! Karpenter setups another tool made, built here through the AWS SDK the way the
//! terraform-aws-eks `karpenter` module (v20, v21, its example) and Karpenter's getting-started
//! CloudFormation stack make them: what `import` takes over and `doctor` diagnoses.

use super::*;
use aws_sdk_eventbridge::types::{RuleState, Target};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};

/// The Terraform provider's generated name suffix for this cluster: a UTC timestamp (18 digits)
/// and a counter (8 hex digits), `n` telling a setup's names apart.
pub fn ts(c: &str, n: u32) -> String {
    let h = c.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!("202403151200001234{:08x}", h.wrapping_add(n))
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Shape {
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
pub fn tf_name(part: &str) -> &'static str {
    catalog::rule(part).expect("a rule part").tf_name
}

/// The stack's rule logical id of a `RULES` part.
pub fn cfn_id(part: &str) -> &'static str {
    catalog::rule(part).expect("a rule part").cfn_id
}

/// A setup as made: its cluster, names and what a test checks against.
pub struct Made {
    pub c: String,
    /// The account id.
    pub a: String,
    pub wd: Workdir,
    /// The seed's JSON (subnet and security group ids...).
    pub seed: Value,
    pub node_role: String,
    pub node_arn: String,
    pub controller_role: String,
    pub controller_arn: String,
    pub queue_name: String,
    pub queue_url: String,
    pub queue_arn: String,
    /// (part, name) of the rules the tool made.
    pub rules: Vec<(&'static str, String)>,
    /// The tool's own controller policies (ARNs) that karpctl's replace.
    pub old_policies: Vec<String>,
    /// Policies on the controller role that are not Karpenter's: kept.
    pub kept_policies: Vec<String>,
    /// The managed node group's role (never Karpenter's), when the shape has one.
    pub nodegroup_role: Option<String>,
    /// Public subnets tagged for discovery that give no public IP.
    pub unusable_subnets: Vec<String>,
    /// The Spot role stays present for the test's length.
    _spot: std::sync::RwLockReadGuard<'static, ()>,
}

impl Made {
    /// The name of the rule for `part`.
    pub fn rule(&self, part: &str) -> &str {
        &self.rules.iter().find(|(p, _)| *p == part).unwrap().1
    }

    /// `doctor --output json` on this setup, with `extra` arguments.
    pub fn doctor(&self, extra: &[&str]) -> Run {
        let mut args = vec!["doctor", "--cluster", &self.c, "--output", "json"];
        args.extend_from_slice(extra);
        karpctl(&self.wd, &args)
    }
}

/// How names get their generated suffix.
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub enum Suffixes {
    /// The provider's: `ts(c, n)` (import's tests, whose cluster names are short).
    #[default]
    Provider,
    /// A fixed date and the cluster name's tail, short enough for doctor's longer cluster names.
    Short,
}

/// The fixed part of `Suffixes::Short`.
pub const SHORT_SUFFIX: &str = "20240101abcdef";

impl Suffixes {
    /// The suffix of the `n`th name: 1 the node role, 2 the controller role, 3 its policy, 4
    /// the rules.
    fn of(self, c: &str, n: u32) -> String {
        match (self, n) {
            (Suffixes::Provider, _) => ts(c, n),
            (Suffixes::Short, 1) => SHORT_SUFFIX.to_string(),
            (Suffixes::Short, 2) => format!("{SHORT_SUFFIX}{}", &c[c.len() - 6..]),
            (Suffixes::Short, 3) => format!("{SHORT_SUFFIX}{}", &c[c.len() - 8..]),
            (Suffixes::Short, _) => c[c.len() - 8..].to_string(),
        }
    }
}

/// What a test changes of a shape.
#[derive(Default)]
pub struct Options<'a> {
    /// Arguments for scripts/seed.py (e.g. `--no-pod-identity-agent`).
    pub seed_args: &'a [&'a str],
    /// The queue's name instead of the shape's.
    pub queue_name: Option<&'a str>,
    /// The queue policy's SqsWrite statement conditioned on `aws:SourceAccount`.
    pub account_condition: bool,
    /// AmazonSSMManagedInstanceCore on the node role too (`node_iam_role_additional_policies`).
    pub ssm: bool,
    pub suffixes: Suffixes,
}

/// A policy document of `stmts`.
pub fn doc(stmts: Vec<Value>) -> String {
    json!({"Version": "2012-10-17", "Statement": stmts}).to_string()
}

/// The trust policy of a Pod Identity role.
pub fn trust_pods() -> String {
    doc(vec![
        json!({"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}),
    ])
}

/// The queue policy of the Terraform module (SqsWrite + DenyHTTP), with the account condition
/// when `conditioned`.
pub fn tf_queue_policy(queue_arn: &str, account: &str, conditioned: bool) -> String {
    let mut write = json!({"Sid": "SqsWrite", "Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}, "Action": "sqs:SendMessage", "Resource": queue_arn});
    if conditioned {
        write["Condition"] = json!({"StringEquals": {"aws:SourceAccount": account}});
    }
    doc(vec![
        write,
        json!({"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
    ])
}

/// The pre-v1 controller policy (the module's `v033` document, abridged): its statement Sids
/// are v0.33's.
pub fn pre_v1_policy(c: &str, a: &str, node_arn: &str, queue_arn: &str) -> Vec<Value> {
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
pub fn make(prefix: &str, shape: Shape) -> Made {
    make_with(prefix, shape, &Options::default())
}

/// `make`, with what `opt` changes.
pub fn make_with(prefix: &str, shape: Shape, opt: &Options) -> Made {
    let c = cluster_name(prefix);
    let seed = seed(&c, opt.seed_args);
    let a = seed["account_id"].as_str().unwrap_or("000000000000").to_string();
    let sdk = sdk();
    let spot = spot_role_present(&sdk);
    let cfn = shape == Shape::Cfn;
    let v20 = matches!(shape, Shape::TfV20 | Shape::TfV20Defaults);
    let node_role = match shape {
        Shape::Cfn => format!("KarpenterNodeRole-{c}"),
        // The module's example: `node_iam_role_use_name_prefix = false`, `node_iam_role_name = <cluster>`.
        Shape::TfExample => c.clone(),
        _ => format!("Karpenter-{c}-{}", opt.suffixes.of(&c, 1)),
    };
    let controller_role = if cfn { format!("{c}-karpenter") } else { format!("KarpenterController-{}", opt.suffixes.of(&c, 2)) };
    let queue_name = match opt.queue_name {
        Some(q) => q.to_string(),
        None if cfn => c.clone(),
        None => format!("Karpenter-{c}"),
    };
    let queue_arn = format!("arn:aws:sqs:{REGION}:{a}:{queue_name}");
    let registry = if v20 { "AmazonEC2ContainerRegistryReadOnly" } else { "AmazonEC2ContainerRegistryPullOnly" };
    let mut node_policies = vec!["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", registry];
    if matches!(shape, Shape::Cfn | Shape::TfExample) || opt.ssm {
        // The guide's stack, and the example's `node_iam_role_additional_policies`.
        node_policies.push("AmazonSSMManagedInstanceCore");
    }
    // Karpenter's node role is mapped by aws-auth in the guide and the example (no access entry).
    let node_entry = !matches!(shape, Shape::Cfn | Shape::TfExample);
    let nodegroup_role = matches!(shape, Shape::Cfn | Shape::TfExample).then(|| format!("{c}-ng"));
    let (node_arn, controller_arn, queue_url, rules, old_policies, kept_policies) = rt().block_on(async {
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
            let subnets = str_list(&seed["private_subnets"]);
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
            let arn = create(format!("KarpenterController-{}", opt.suffixes.of(&c, 3)), pre_v1_policy(&c, &a, &node_arn, &queue_arn)).await;
            attach.push(arn.clone());
            old.push(arn);
        } else {
            let all: Vec<Value> = parts.values().flatten().cloned().collect();
            let arn = create(format!("KarpenterController-{}", opt.suffixes.of(&c, 3)), all).await;
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
            .attributes(QueueAttributeName::Policy, tf_queue_policy(&queue_arn, &a, opt.account_condition))
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
                format!("Karpenter{}-{}", tf_name(part), opt.suffixes.of(&c, 4))
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
        let mut ids = str_list(&seed["private_subnets"]);
        ids.push(seed["node_security_group"].as_str().unwrap().to_string());
        sdk.ec2
            .create_tags()
            .set_resources(Some(ids))
            .tags(aws_sdk_ec2::types::Tag::builder().key(DISCOVERY).value(&c).build())
            .send()
            .await
            .unwrap();
        (node_arn, controller_arn, q.queue_url().unwrap().to_string(), rules, old, kept)
    });
    let mut unusable_subnets = Vec::new();
    if shape == Shape::TfExample {
        // terraform-aws-vpc's public subnets: tagged for discovery (`public_subnet_tags`), no
        // public IP on launch.
        unusable_subnets = str_list(&seed["public_subnets"]);
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
        a,
        wd: Workdir::new(),
        seed,
        node_role,
        node_arn,
        controller_role,
        controller_arn,
        queue_name,
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
