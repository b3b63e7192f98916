//! `karpctl import`: take over a Karpenter setup another tool made (the terraform-aws-eks
//! `karpenter` module, Karpenter's getting-started CloudFormation stack, or anything doctor can
//! find). Reads only: finds the pieces as doctor does, writes a plan file naming them so that
//! `up --adopt` manages those objects instead of making new ones, shows what `up --adopt` will
//! then change (the same planner, read-only), and says how to let go of the objects in the tool
//! that made them. What the names mean and where they come from: docs/import.md.

use crate::doctor::model::{IdentityMode, Setup};
use crate::error::UserError;
use crate::facts::Facts;
use crate::karpenter_iam::KarpenterVersion;
use crate::options::Options;
use crate::report::{ImportReport, LetGo};
use crate::resources::iam::path_from_arn;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the user asked of `import` (flags), engine-side.
pub struct ImportOptions {
    pub force: bool,
    pub terraform_module: String,
    pub karpenter_version: Option<String>,
    pub namespace: String,
    pub service_account: String,
}

/// A role as found: name, IAM path, ARN.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoundRole {
    pub name: String,
    pub path: String,
    pub arn: String,
}

impl FoundRole {
    fn of_arn(arn: &str) -> FoundRole {
        FoundRole {
            name: arn.rsplit('/').next().unwrap_or(arn).to_string(),
            path: path_from_arn(arn).unwrap_or_else(|| "/".into()),
            arn: arn.to_string(),
        }
    }
}

/// Which tool made the setup, told by its names (docs/import.md).
#[derive(Clone, Debug, PartialEq)]
pub enum Tool {
    Terraform,
    /// Karpenter's getting-started stack, by its name.
    CloudFormation {
        stack: String,
    },
    Unknown,
}

/// Everything `import` found, as plain data: the plan file and the let-go steps are pure
/// functions of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    pub cluster: String,
    pub region: String,
    pub account_id: String,
    pub mode: Option<IdentityMode>,
    pub namespace: String,
    pub service_account: String,
    pub controller: Option<FoundRole>,
    /// The controller's policies: managed policy ARNs and inline policy names.
    pub controller_policies: Vec<String>,
    pub node_role: Option<FoundRole>,
    /// Every managed policy attached to the node role (ARNs).
    pub node_attached: Vec<String>,
    /// Those the plan's Karpenter release does not attach: kept as `extra_node_policy_arns`, so
    /// that the nodes never lose a permission they have.
    pub extra_node_policies: Vec<String>,
    pub access_entry_type: Option<String>,
    /// The node role's instance profile that is not one Karpenter made: (name, path).
    pub instance_profile: Option<(String, String)>,
    pub association: bool,
    pub queue: Option<String>,
    /// The queue's KMS key (None: SSE-SQS).
    pub queue_kms_key: Option<String>,
    /// Rules that send exactly one of Karpenter's event kinds to the queue: part -> name.
    pub rules: BTreeMap<String, String>,
    /// Rules to the queue that were not kept (a second rule of a kind, or one with several kinds).
    pub rules_left: Vec<String>,
    pub subnets: Vec<String>,
    pub security_group: Option<String>,
    pub version: Option<KarpenterVersion>,
}

/// `s` is `<prefix>` followed by the Terraform provider's generated suffix (a UTC timestamp and
/// a counter: digits, then hex), at least 14 characters.
fn tf_generated(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| rest.len() >= 14 && rest.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The terraform-aws-eks module's rule keys (`aws_cloudwatch_event_rule.this["<key>"]`) by the
/// `<Name>` in its rule names `Karpenter<Name>-<suffix>`.
const TF_RULE_KEYS: [(&str, &str); 5] = [
    ("HealthEvent", "health_event"),
    ("SpotInterrupt", "spot_interrupt"),
    ("InstanceRebalance", "instance_rebalance"),
    ("InstanceStateChange", "instance_state_change"),
    ("CRInterruption", "capacity_reservation_interruption"),
];

/// The node role's AWS managed policies the module attaches, keyed by name since v20.8.
const TF_NODE_POLICY_KEYS: [&str; 5] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonEKS_CNI_Policy",
    "AmazonEKS_CNI_IPv6_Policy",
];

/// The CloudFormation stack's rule logical ids; CloudFormation names an unnamed rule
/// `<stack>-<LogicalId>-<random>`.
const CFN_RULE_IDS: [&str; 5] = [
    "ScheduledChangeRule",
    "SpotInterruptionRule",
    "RebalanceRule",
    "InstanceStateChangeRule",
    "CapacityReservationInterruptionRule",
];

impl Found {
    pub fn tool(&self) -> Tool {
        let c = &self.cluster;
        let tf = self.controller.as_ref().is_some_and(|r| tf_generated(&r.name, "KarpenterController-"))
            || self.node_role.as_ref().is_some_and(|r| tf_generated(&r.name, &format!("Karpenter-{c}-")))
            || self.rules.values().any(|n| TF_RULE_KEYS.iter().any(|(k, _)| tf_generated(n, &format!("Karpenter{k}-"))));
        if tf {
            return Tool::Terraform;
        }
        let stack = self
            .rules
            .values()
            .find_map(|n| CFN_RULE_IDS.iter().find_map(|id| n.find(&format!("-{id}-")).map(|at| n[..at].to_string())));
        let cfn_node = self.node_role.as_ref().is_some_and(|r| r.name == format!("KarpenterNodeRole-{c}"));
        let guide = format!("Karpenter-{c}");
        match stack {
            // CloudFormation cuts the stack's part of a long generated name: the guide's stack
            // name it is the start of is the stack's name.
            Some(stack) if stack.len() < guide.len() && guide.starts_with(&stack) => Tool::CloudFormation { stack: guide },
            Some(stack) => Tool::CloudFormation { stack },
            None if cfn_node && self.queue.as_deref() == Some(c.as_str()) => {
                Tool::CloudFormation { stack: format!("Karpenter-{c}") }
            }
            None => Tool::Unknown,
        }
    }

    /// The IAM path of the plan: the controller role's (karpctl keeps every IAM object of a
    /// cluster under one path; a node role elsewhere is used as it is, `existing_node_role`).
    fn path(&self) -> String {
        self.controller.as_ref().or(self.node_role.as_ref()).map(|r| r.path.clone()).unwrap_or_else(|| "/".into())
    }
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Pure: the plan file naming what was found, and what it could not tell (notes).
pub fn plan_toml(f: &Found, retire: &[String]) -> (String, Vec<String>) {
    let mut notes = Vec::new();
    let mut t = String::new();
    t.push_str(&format!(
        "# Written by `karpctl import` from what it found in account {} ({}).\n# `karpctl diff --cluster {} --adopt` shows what `up --adopt` changes; docs/import.md.\n",
        f.account_id, f.region, f.cluster
    ));
    t.push_str(&format!("cluster = {}\nregion = {}\naccount_id = {}\n", q(&f.cluster), q(&f.region), q(&f.account_id)));

    t.push_str("\n[interruption]\n");
    match &f.queue {
        Some(name) => {
            t.push_str(&format!("queue_name = {}\n", q(name)));
            match &f.queue_kms_key {
                Some(k) if crate::plan_file::is_aws_managed_sqs_key(k) => notes.push(format!(
                    "queue {name} is encrypted with {k}, through which EventBridge can never deliver: the plan switches it to SSE-SQS"
                )),
                Some(k) => t.push_str(&format!("kms_key_id = {}\n", q(k))),
                None => {}
            }
            if !f.rules.is_empty() {
                t.push_str("# Existing rules kept under their names (an EventBridge rule cannot be renamed);\n# a kind not listed gets a new rule.\n");
                t.push_str("rule_names = { ");
                let parts: Vec<String> = f.rules.iter().map(|(p, n)| format!("{p} = {}", q(n))).collect();
                t.push_str(&parts.join(", "));
                t.push_str(" }\n");
            }
        }
        None => notes.push("no interruption queue found: the plan makes a new one (Karpenter-<cluster>)".into()),
    }
    for r in &f.rules_left {
        notes.push(format!("rule {r} targets the queue but is not kept (another rule carries its kind, or it carries several): remove it in its tool, or each event reaches the queue twice"));
    }

    t.push_str("\n[identity]\n");
    let mode = match f.mode {
        Some(IdentityMode::Irsa) => "irsa",
        _ => "pod_identity",
    };
    t.push_str(&format!("mode = {}\n", q(mode)));
    match f.version {
        Some(v) => t.push_str(&format!("karpenter_version = {}\n", q(&v.to_string()))),
        None => {
            t.push_str(&format!(
                "karpenter_version = {}   # the newest: AWS does not say which release runs; set yours\n",
                q(&KarpenterVersion::LATEST.to_string())
            ));
            notes.push(format!(
                "Karpenter's version cannot be read from AWS (it is the cluster's Helm release): the plan pins the newest, {}; set identity.karpenter_version (or import --karpenter-version) to the release you run",
                KarpenterVersion::LATEST
            ));
        }
    }
    let path = f.path();
    t.push_str(&format!("path = {}\n", q(&path)));
    match &f.controller {
        Some(r) => t.push_str(&format!("controller_role_name = {}\n", q(&r.name))),
        None => notes.push("no controller role found: the plan makes a new one".into()),
    }
    match &f.node_role {
        Some(r) if r.path == path => t.push_str(&format!("node_role_name = {}\n", q(&r.name))),
        Some(r) => {
            t.push_str(&format!("existing_node_role = {}\n", q(&r.arn)));
            notes.push(format!(
                "node role {} lives under {} and the controller role under {path}: the plan uses it as it is (existing_node_role), without managing it",
                r.name, r.path
            ));
        }
        None => notes.push("no node role found: the plan makes a new one".into()),
    }
    if let Some((name, p)) = &f.instance_profile {
        if *p == path {
            t.push_str(&format!("instance_profile = true\ninstance_profile_name = {}\n", q(name)));
        } else {
            notes.push(format!("instance profile {name} lives under {p}, not {path}: left alone"));
        }
    }
    if !f.extra_node_policies.is_empty() && f.node_role.as_ref().is_some_and(|r| r.path == path) {
        let arns: Vec<String> = f.extra_node_policies.iter().map(|a| q(a)).collect();
        t.push_str(&format!(
            "# Attached to the node role today; kept so that nodes lose nothing.\nextra_node_policy_arns = [{}]\n",
            arns.join(", ")
        ));
    }
    if let Some(kind) = &f.access_entry_type {
        t.push_str(&format!("access_entry_type = {}\n", q(kind)));
    }
    if f.namespace != "kube-system" {
        t.push_str(&format!("namespace = {}\n", q(&f.namespace)));
    }
    if f.service_account != "karpenter" {
        t.push_str(&format!("service_account = {}\n", q(&f.service_account)));
    }
    if !retire.is_empty() {
        t.push_str("# Replaced by karpctl's split policies: detached once those are attached; a customer\n# managed one that nothing else uses is then deleted.\nretire_policies = [\n");
        for r in retire {
            t.push_str(&format!("  {},\n", q(r)));
        }
        t.push_str("]\n");
    }

    if !f.subnets.is_empty() || f.security_group.is_some() {
        t.push_str("\n[discovery]\n");
        if !f.subnets.is_empty() {
            let ids: Vec<String> = f.subnets.iter().map(|s| q(s)).collect();
            t.push_str(&format!("subnet_ids = [{}]\n", ids.join(", ")));
        }
        if let Some(g) = &f.security_group {
            t.push_str(&format!("security_group_id = {}\n", q(g)));
        }
    }
    (t, notes)
}

/// Pure: the controller's policies that karpctl's own replace (`own` are the ARNs of the
/// plan's policies: those are adopted in place, never retired). An AWS managed one is only
/// detached, never deleted (see `retired_policy`).
pub fn retired(f: &Found, own: &[String]) -> Vec<String> {
    f.controller_policies.iter().filter(|p| !own.contains(p)).cloned().collect()
}

/// Pure: how to let go of the objects in the tool that made them.
pub fn let_go(f: &Found, retire: &[String], module: &str) -> LetGo {
    match f.tool() {
        Tool::Terraform => {
            let mut addresses = Vec::new();
            let m = module;
            if let Some(r) = &f.controller
                && tf_generated(&r.name, "KarpenterController-")
            {
                addresses.push(format!("{m}.aws_iam_role.controller[0]"));
            }
            for p in retire {
                let name = p.rsplit('/').next().unwrap_or(p);
                if tf_generated(name, "KarpenterController-") {
                    if p.starts_with("arn:") {
                        addresses.push(format!("{m}.aws_iam_policy.controller[0]"));
                        addresses.push(format!("{m}.aws_iam_role_policy_attachment.controller[0]"));
                    } else {
                        addresses.push(format!("{m}.aws_iam_role_policy.controller[0]"));
                    }
                }
            }
            if f.association {
                addresses.push(format!("{m}.aws_eks_pod_identity_association.karpenter[0]"));
            }
            if f.queue.is_some() {
                addresses.push(format!("{m}.aws_sqs_queue.this[0]"));
                addresses.push(format!("{m}.aws_sqs_queue_policy.this[0]"));
            }
            for n in f.rules.values() {
                if let Some((_, key)) = TF_RULE_KEYS.iter().find(|(k, _)| tf_generated(n, &format!("Karpenter{k}-"))) {
                    addresses.push(format!("{m}.aws_cloudwatch_event_rule.this[\"{key}\"]"));
                    addresses.push(format!("{m}.aws_cloudwatch_event_target.this[\"{key}\"]"));
                }
            }
            if let Some(r) = &f.node_role
                && tf_generated(&r.name, &format!("Karpenter-{}-", f.cluster))
            {
                addresses.push(format!("{m}.aws_iam_role.node[0]"));
                // The module's node attachments are keyed by the AWS managed policy's name.
                let aws_managed = f.node_attached.iter().filter(|a| a.contains(":iam::aws:policy/"));
                for p in aws_managed.filter_map(|a| a.rsplit('/').next()).filter(|p| TF_NODE_POLICY_KEYS.contains(p)) {
                    addresses.push(format!("{m}.aws_iam_role_policy_attachment.node[\"{p}\"]"));
                }
                if f.access_entry_type.is_some() {
                    addresses.push(format!("{m}.aws_eks_access_entry.node[0]"));
                }
                if f.instance_profile.is_some() {
                    addresses.push(format!("{m}.aws_iam_instance_profile.this[0]"));
                }
            }
            LetGo::Terraform { module: m.to_string(), addresses }
        }
        Tool::CloudFormation { stack } => {
            let mut stacks = vec![stack];
            // eksctl makes the getting-started guide's controller role `<cluster>-karpenter` in a
            // stack of its own.
            if f.controller.as_ref().is_some_and(|r| r.name == format!("{}-karpenter", f.cluster)) {
                stacks.push(format!("eksctl-{}-podidentityrole-{}-{}", f.cluster, f.namespace, f.service_account));
            }
            LetGo::CloudFormation { stacks }
        }
        Tool::Unknown => LetGo::Unknown,
    }
}

/// What doctor read, as `import` needs it (the instance profile is read after: doctor does not).
fn found_of(s: &Setup, version: Option<KarpenterVersion>) -> Found {
    let queue_arn = s.queue.as_ref().filter(|q| q.exists).map(|q| q.arn.clone());
    let mut rules = BTreeMap::new();
    let mut rules_left = Vec::new();
    for r in s.rules.iter().filter(|r| queue_arn.as_ref().is_some_and(|a| r.queue_arns.contains(a)) && r.other_cluster.is_none())
    {
        match r.kinds.as_slice() {
            [one] if !rules.contains_key(*one) => {
                rules.insert(one.to_string(), r.name.clone());
            }
            _ => rules_left.push(r.name.clone()),
        }
    }
    let controller = s.controller.as_ref().filter(|c| c.exists);
    // The node role found most ways (the controller passes it and it has an access entry).
    let node = s.node_roles.iter().filter(|n| n.exists).max_by_key(|n| n.how.len());
    let access_entry_type = node.and_then(|n| s.access_entries.iter().find(|e| e.principal_arn == n.arn)).map(|e| e.kind.clone());
    Found {
        cluster: s.cluster.clone(),
        region: s.region.clone(),
        account_id: s.account_id.clone(),
        mode: s.mode,
        namespace: s.namespace.clone(),
        service_account: s.service_account.clone(),
        controller: controller.map(|c| FoundRole::of_arn(&c.arn)),
        controller_policies: controller
            .map(|c| c.policies.iter().map(|p| p.arn.clone().unwrap_or_else(|| p.name.clone())).collect())
            .unwrap_or_default(),
        node_role: node.map(|n| FoundRole::of_arn(&n.arn)),
        node_attached: node.map(|n| n.attached.clone()).unwrap_or_default(),
        extra_node_policies: vec![],
        access_entry_type,
        instance_profile: None,
        association: controller.is_some_and(|c| c.how.starts_with("Pod Identity association")),
        queue: s.queue.as_ref().filter(|q| q.exists).map(|q| q.name.clone()),
        queue_kms_key: s.queue.as_ref().and_then(|q| q.kms_master_key_id.clone()),
        rules,
        rules_left,
        subnets: s
            .discovery
            .subnets
            .iter()
            .filter(|x| s.cluster_vpc.is_empty() || x.vpc_id == s.cluster_vpc)
            .map(|x| x.id.clone())
            .collect(),
        security_group: match s.discovery.groups.as_slice() {
            [one] => Some(one.id.clone()),
            _ => None,
        },
        version,
    }
}

/// The node role's instance profiles that Karpenter did not make (Karpenter tags its own with
/// `karpenter.k8s.aws/ec2nodeclass`): (name, path).
async fn instance_profiles(aws: &crate::aws::Clients, role: &str) -> Result<Vec<(String, String)>> {
    use crate::aws::{Classify, aws_err};
    let listed = match aws.iam.list_instance_profiles_for_role().role_name(role).send().await {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(vec![]),
        Err(e) => return Err(aws_err("iam:ListInstanceProfilesForRole", e)),
    };
    let mut out = Vec::new();
    for p in listed.instance_profiles() {
        let name = p.instance_profile_name();
        let tags = match aws.iam.get_instance_profile().instance_profile_name(name).send().await {
            Ok(o) => o.instance_profile().map(|p| p.tags().to_vec()).unwrap_or_default(),
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(aws_err("iam:GetInstanceProfile", e)),
        };
        if !tags.iter().any(|t| t.key() == "karpenter.k8s.aws/ec2nodeclass") {
            out.push((name.to_string(), p.path().to_string()));
        }
    }
    Ok(out)
}

/// The plan file `import` writes: `--config FILE`, else `plans/<cluster>.toml`.
fn target(global: &Options, cluster: &str) -> PathBuf {
    global.config.clone().unwrap_or_else(|| PathBuf::from("plans").join(format!("{cluster}.toml")))
}

pub async fn run(global: &Options, args: &ImportOptions) -> Result<ImportReport> {
    let cluster =
        global.cluster.clone().or_else(|| std::env::var("KARPCTL_CLUSTER").ok().filter(|c| !c.is_empty())).ok_or_else(|| {
            UserError::new("karpctl import needs a cluster").hint("pass --cluster NAME (or set KARPCTL_CLUSTER)")
        })?;
    crate::plan_file::validate_cluster_name(&cluster).map_err(|e| UserError::new(format!("--cluster {cluster:?}: {e}")))?;
    let version = args
        .karpenter_version
        .as_deref()
        .map(KarpenterVersion::parse)
        .transpose()
        .map_err(|e| UserError::new(format!("--karpenter-version: {e}")).hint("pass a release such as 1.14"))?;
    let path = target(global, &cluster);
    if path.exists() && !args.force {
        return Err(UserError::new(format!("{} exists; import never overwrites a plan file", path.display()))
            .hint("pass --force to replace it, or --config OTHER.toml to write elsewhere")
            .into());
    }

    let mut spec = crate::plan_file::defaults(&cluster)?;
    spec.region = global.region.clone();
    let connected = crate::prepare::connect_and_identify(global, &spec).await?;
    let Some(facts) = connected.cluster.clone() else {
        return Err(UserError::new(format!(
            "EKS cluster {cluster} does not exist in region {} (or cannot be described)",
            connected.region
        ))
        .hint("check --cluster and --region")
        .into());
    };
    let inputs = crate::doctor::discover::Inputs {
        cluster: facts.clone(),
        account_id: connected.account_id.clone(),
        partition: connected.partition.clone(),
        region: connected.region.clone(),
        version: version.unwrap_or(KarpenterVersion::LATEST),
        namespace: args.namespace.clone(),
        service_account: args.service_account.clone(),
        controller_role: None,
        node_roles: vec![],
        queue: None,
        discovery_tag: (crate::tags::DISCOVERY_TAG.to_string(), cluster.clone()),
        refused: vec![],
    };
    let setup = crate::doctor::discover::gather(&connected.clients, &inputs).await?;
    if let Some(u) = setup.unreadable.first() {
        return Err(UserError::new(format!("import cannot read the setup: {} was refused ({})", u.operation, u.aws_code))
            .hint("import needs the read permissions doctor needs (docs/doctor.md); nothing was written")
            .into());
    }
    let mut found = found_of(&setup, version);
    if let Some(n) = &found.node_role {
        found.instance_profile = instance_profiles(&connected.clients, &n.name).await?.into_iter().next();
    }

    // The plan without retirements, parsed as `up` will parse it: its own policies' ARNs are
    // adopted in place (the getting-started stack names them as karpctl does), never retired.
    let (draft, _) = plan_toml(&found, &[]);
    let spec = crate::plan_file::parse(&draft, &path.display().to_string(), Some(&cluster))?;
    let plan_facts = Facts {
        account_id: connected.account_id.clone(),
        region: connected.region.clone(),
        partition: connected.partition.clone(),
        cluster: facts,
        discovery: Default::default(),
        existing_node_role_arn: None,
        kms_key: None,
    };
    let own: Vec<String> =
        crate::resources::iam_policy::controller_policies(&spec, &plan_facts).into_iter().map(|p| p.arn).collect();
    let ipv6 = plan_facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
    let node_wanted = crate::karpenter_iam::node_managed_policy_arns(
        &plan_facts.partition,
        &plan_facts.account_id,
        ipv6,
        spec.identity.karpenter_version,
    );
    found.extra_node_policies = found.node_attached.iter().filter(|a| !node_wanted.contains(a)).cloned().collect();
    let retire = retired(&found, &own);
    let (text, notes) = plan_toml(&found, &retire);
    crate::plan_file::parse(&text, &path.display().to_string(), Some(&cluster))?;

    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| UserError::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if args.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    use std::io::Write as _;
    open.open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| UserError::new(format!("cannot write {}: {e}", path.display())))?;

    // What `up --adopt` will change: the same read-only diff, with the file just written.
    let mut with_plan = global.clone();
    with_plan.config = Some(path.clone());
    with_plan.cluster = Some(cluster.clone());
    let diff = crate::engine::diff(&with_plan, true, None).await?;
    let let_go = let_go(&found, &retire, &args.terraform_module);
    Ok(ImportReport {
        cluster,
        path,
        text,
        notes,
        found_lines: summary(&found, &retire),
        diff,
        let_go,
        stats: connected.stats.report(),
    })
}

/// One line per piece found, for the report.
fn summary(f: &Found, retire: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let tool = match f.tool() {
        Tool::Terraform => "the terraform-aws-eks karpenter module (by its names)".to_string(),
        Tool::CloudFormation { stack } => format!("Karpenter's CloudFormation stack {stack} (by its names)"),
        Tool::Unknown => "no known tool (names of neither the Terraform module nor the CloudFormation stack)".to_string(),
    };
    out.push(("made by".into(), tool));
    let role =
        |r: &Option<FoundRole>| r.as_ref().map(|r| format!("{} (path {})", r.name, r.path)).unwrap_or_else(|| "none".into());
    out.push(("controller role".into(), role(&f.controller)));
    out.push(("node role".into(), role(&f.node_role)));
    out.push(("queue".into(), f.queue.clone().unwrap_or_else(|| "none".into())));
    let rules: Vec<String> = f.rules.iter().map(|(p, n)| format!("{p}: {n}")).collect();
    out.push(("rules kept".into(), if rules.is_empty() { "none".into() } else { rules.join(", ") }));
    out.push(("policies replaced".into(), if retire.is_empty() { "none".into() } else { retire.join(", ") }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tf() -> Found {
        let c = "say-when-east";
        let ts = "2024031512000012340000000a";
        Found {
            cluster: c.into(),
            region: "us-east-1".into(),
            account_id: "123456789012".into(),
            mode: Some(IdentityMode::PodIdentity),
            namespace: "kube-system".into(),
            service_account: "karpenter".into(),
            controller: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterController-{ts}"))),
            controller_policies: vec![
                format!("arn:aws:iam::123456789012:policy/KarpenterController-{ts}"),
                "ListInstanceProfiles".into(),
                "arn:aws:iam::aws:policy/ReadOnlyAccess".into(),
            ],
            node_role: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/Karpenter-{c}-{ts}"))),
            node_attached: vec![
                "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".into(),
                "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore".into(),
            ],
            access_entry_type: Some("EC2_LINUX".into()),
            association: true,
            queue: Some(format!("Karpenter-{c}")),
            rules: [("SpotInterrupt".to_string(), format!("KarpenterSpotInterrupt-{ts}"))].into_iter().collect(),
            subnets: vec!["subnet-1".into()],
            security_group: Some("sg-1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_terraform_setup_becomes_a_plan_naming_its_objects() {
        let f = tf();
        assert_eq!(f.tool(), Tool::Terraform);
        let retire = retired(&f, &[]);
        assert_eq!(retire.len(), 3, "customer managed, inline and AWS managed: {retire:?}");
        let (text, notes) = plan_toml(&f, &retire);
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert_eq!(spec.identity.path, "/");
        assert_eq!(spec.identity.controller_role.name, "KarpenterController-2024031512000012340000000a");
        assert_eq!(spec.identity.node_role_name(), "Karpenter-say-when-east-2024031512000012340000000a");
        assert_eq!(spec.interruption.queue_name, "Karpenter-say-when-east");
        assert_eq!(spec.interruption.rule_names["SpotInterrupt"], "KarpenterSpotInterrupt-2024031512000012340000000a");
        assert_eq!(spec.identity.retire_policies, retire);
        assert_eq!(spec.discovery.subnet_ids, Some(vec!["subnet-1".to_string()]));
        assert!(notes.iter().any(|n| n.contains("version")), "the version it could not tell is said: {notes:?}");
    }

    #[test]
    fn terraform_let_go_names_the_module_addresses() {
        let f = tf();
        let LetGo::Terraform { addresses, .. } = let_go(&f, &retired(&f, &[]), "module.karpenter") else { panic!() };
        for a in [
            "module.karpenter.aws_iam_role.controller[0]",
            "module.karpenter.aws_iam_policy.controller[0]",
            "module.karpenter.aws_iam_role_policy_attachment.controller[0]",
            "module.karpenter.aws_eks_pod_identity_association.karpenter[0]",
            "module.karpenter.aws_sqs_queue.this[0]",
            "module.karpenter.aws_sqs_queue_policy.this[0]",
            "module.karpenter.aws_cloudwatch_event_rule.this[\"spot_interrupt\"]",
            "module.karpenter.aws_cloudwatch_event_target.this[\"spot_interrupt\"]",
            "module.karpenter.aws_iam_role.node[0]",
            "module.karpenter.aws_iam_role_policy_attachment.node[\"AmazonEKSWorkerNodePolicy\"]",
            "module.karpenter.aws_eks_access_entry.node[0]",
        ] {
            assert!(addresses.iter().any(|x| x == a), "{a} in {addresses:?}");
        }
        assert!(!addresses.iter().any(|x| x.contains("AmazonSSMManagedInstanceCore")), "not the module's: {addresses:?}");
    }

    #[test]
    fn a_cloudformation_setup_is_told_by_its_rule_names() {
        let c = "say-when-east";
        let f = Found {
            cluster: c.into(),
            namespace: "kube-system".into(),
            service_account: "karpenter".into(),
            controller: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/{c}-karpenter"))),
            node_role: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterNodeRole-{c}"))),
            queue: Some(c.into()),
            rules: [("SpotInterrupt".to_string(), format!("Karpenter-{c}-SpotInterruptionRule-AbC123"))].into_iter().collect(),
            ..Default::default()
        };
        assert_eq!(f.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") });
        let mut cut = f.clone();
        cut.rules.insert("SpotInterrupt".into(), "Karpenter-say-whe-SpotInterruptionRule-AbC123".into());
        assert_eq!(cut.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") }, "a cut stack name is made whole");
        let LetGo::CloudFormation { stacks } = let_go(&f, &[], "module.karpenter") else { panic!() };
        assert_eq!(stacks, [format!("Karpenter-{c}"), format!("eksctl-{c}-podidentityrole-kube-system-karpenter")]);
    }
}
