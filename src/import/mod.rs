//! `karpctl import` (reads only): what doctor's discovery found -> a plan file naming those objects
//! for `up --adopt`, what `up --adopt` would then change (the planner, read-only), and the steps to
//! let go of them in the tool that made them (docs/import.md).

use crate::catalog::RULES;
use crate::error::UserError;
use crate::facts::prepared::Facts;
use crate::facts::setup::{NodeRole, Setup};
use crate::karpenter_iam::KarpenterVersion;
use crate::options::Options;
use crate::policy::analysis::role_name;
use crate::report::{HandAddedPolicy, ImportReport, LetGo, ModuleOutput, Stack, TerraformSteps};
use crate::resources::iam::path_from_arn;
use crate::spec::IdentityMode;
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

/// A policy on the controller role as found: a managed policy's ARN or an inline policy's
/// name, and its document when it could be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoundPolicy {
    pub id: String,
    pub document: Option<serde_json::Value>,
}

impl FoundPolicy {
    fn managed(&self) -> bool {
        self.id.starts_with("arn:")
    }
    fn name(&self) -> &str {
        self.id.rsplit('/').next().unwrap_or(&self.id)
    }
}

/// Everything `import` found, as plain data: the plan file and the let-go steps are pure
/// functions of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub cluster: String,
    /// `arn:<p>:eks:<region>:<account>:cluster/<c>`: how Karpenter's policies name this cluster.
    pub cluster_arn: String,
    pub region: String,
    pub account_id: String,
    pub mode: Option<IdentityMode>,
    pub namespace: String,
    pub service_account: String,
    pub controller: Option<FoundRole>,
    /// What was tried when no controller role was found (doctor's words).
    pub controller_searched: String,
    /// The controller's policies: managed (by ARN) and inline (by name).
    pub controller_policies: Vec<FoundPolicy>,
    pub node_role: Option<FoundRole>,
    /// Why the node role is used as it is (`existing_node_role`) and never owned: it backs a
    /// managed node group, or it is not recognisably Karpenter's. None: karpctl takes it over.
    pub node_role_shared: Option<String>,
    /// Node roles found but not taken, with why (a managed node group's, say).
    pub node_roles_left: Vec<String>,
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
    /// Discovery subnets nodes can work from.
    pub subnets: Vec<String>,
    /// Discovery subnets nodes cannot work from: (id, why), left out of the plan.
    pub subnets_left: Vec<(String, String)>,
    pub security_group: Option<String>,
    pub version: KarpenterVersion,
    /// A release before 1.0 that CloudTrail shows the controller running (`0.37.2`): Karpenter's
    /// pre-v1 policy then stays, whatever `version` says.
    pub pre_v1_running: Option<String>,
}

/// What becomes of each controller policy another tool made (pure: `sort_policies`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// Recognisably Karpenter's own, replaced by karpctl's split policies.
    pub retire: Vec<String>,
    /// Managed policies that are not Karpenter's: kept (`extra_controller_policy_arns`).
    pub keep: Vec<String>,
    /// Inline policies that are not Karpenter's: karpctl never touches them.
    pub keep_inline: Vec<String>,
    /// Karpenter's pre-v1 policy, kept: CloudTrail shows a release before 1.0 still running.
    pub pre_v1: Vec<String>,
    /// Karpenter's pre-v1 policies among `retire`: the release that runs is 1.0 or later.
    pub pre_v1_retired: Vec<String>,
    /// A policy grants `arc-zonal-shift:GetManagedResource`: the plan keeps zonal shift on.
    pub zonal_shift: bool,
    /// Why a policy that looks like Karpenter's is kept anyway.
    pub notes: Vec<String>,
}

/// Every action any Karpenter release karpctl knows may need (zonal shift included).
fn karpenter_actions() -> std::collections::BTreeSet<String> {
    let docs: Vec<serde_json::Value> = KarpenterVersion::all()
        .flat_map(|version: KarpenterVersion| {
            let i = crate::karpenter_iam::ControllerPolicyInputs {
                partition: "aws",
                region: "us-east-1",
                account_id: "111122223333",
                cluster: "c",
                node_role_arn: "arn:aws:iam::111122223333:role/n",
                queue_arn: Some("arn:aws:sqs:us-east-1:111122223333:q"),
                kms_key_arn: Some("arn:aws:kms:us-east-1:111122223333:key/k"),
                zonal_shift: true,
                version,
            };
            crate::karpenter_iam::controller_policies(&i).into_iter().map(|(_, d)| d)
        })
        .collect();
    crate::policy::analysis::actions_of(&docs)
}

/// Pure: which controller policies are Karpenter's (retired), and which are someone else's
/// (kept). `own` are the ARNs of the plan's own policies (adopted in place, never retired).
/// Karpenter's own: the module's `KarpenterController-<suffix>`, `KarpenterController<Part>Policy-<c>`,
/// the seed's `KarpenterInstanceProfileGarbageCollection`, a document holding Karpenter's
/// statements, or Karpenter's pre-v1 policy: retired like the others, since the release that runs
/// (`--karpenter-version`, or CloudTrail's) is 1.0 or later, unless CloudTrail shows a pre-v1
/// release still running (then kept, said so).
pub fn sort_policies(f: &Found, own: &[String]) -> Policies {
    use crate::policy::analysis::{allows, is_karpenter_policy, is_pre_v1_policy, names_cluster, pass_role};
    let actions = karpenter_actions();
    let zonal = |p: &FoundPolicy| p.document.as_ref().is_some_and(|d| allows(&[d], "arc-zonal-shift:GetManagedResource"));
    let mut out = Policies {
        // Whichever policy grants it today, the plan's own included.
        zonal_shift: f.controller_policies.iter().any(zonal),
        ..Default::default()
    };
    // The names karpctl's own parts have (the guide's stack names its split policies so) and the
    // module v20's single policy named for the cluster.
    let part_names: Vec<String> = crate::karpenter_iam::PolicyPart::ALL
        .iter()
        .map(|p| format!("KarpenterController{}Policy-{}", p.name(), f.cluster))
        .chain([format!("KarpenterControllerPolicy-{}", f.cluster)])
        .collect();
    let node_arn = f.node_role.as_ref().map(|r| r.arn.as_str());
    for p in f.controller_policies.iter().filter(|p| !own.contains(&p.id)) {
        let name = p.name();
        let doc = p.document.as_ref();
        let by_name = part_names.iter().any(|n| n == name)
            || name == "KarpenterInstanceProfileGarbageCollection"
            || (tf_generated(name, "KarpenterController-") && doc.is_some_and(|d| names_cluster(d, &f.cluster_arn)));
        let by_doc = doc.is_some_and(|d| is_karpenter_policy(d, &actions, &f.cluster_arn));
        // A policy that lets the controller pass another role than Karpenter's node role serves
        // another EC2NodeClass: retiring it would stop those nodes.
        let other_roles: Vec<String> =
            doc.map(|d| pass_role(&[d]).0).unwrap_or_default().into_iter().filter(|r| Some(r.as_str()) != node_arn).collect();
        // karpctl grants zonal shift from Karpenter 1.12 on: below, the policy granting it stays.
        let zonal_kept = zonal(p) && f.version.minor < 12;
        let keep = |out: &mut Policies| {
            if p.managed() { out.keep.push(p.id.clone()) } else { out.keep_inline.push(p.id.clone()) }
        };
        let pre_v1 = doc.is_some_and(is_pre_v1_policy);
        if let (true, Some(running)) = (pre_v1, &f.pre_v1_running) {
            // A managed one is kept attached (`extra_controller_policy_arns`); an inline one is
            // left as it is, like every inline policy karpctl does not retire.
            out.pre_v1.push(p.id.clone());
            out.notes.push(pre_v1_note(&p.id, running));
            continue;
        }
        let by_doc = by_doc || pre_v1;
        if (by_name || by_doc) && !other_roles.is_empty() {
            keep(&mut out);
            out.notes.push(format!(
                "{} looks like Karpenter's, but it lets the controller pass {} besides the node role: kept, since karpctl's policy passes only {}",
                p.id,
                other_roles.join(", "),
                node_arn.unwrap_or("the plan's node role")
            ));
        } else if (by_name || by_doc) && zonal_kept {
            keep(&mut out);
            out.notes.push(format!(
                "{} grants arc-zonal-shift:GetManagedResource, which karpctl grants from Karpenter 1.12 on: kept with {}",
                p.id, f.version
            ));
        } else if by_name || by_doc {
            out.retire.push(p.id.clone());
            if pre_v1 {
                out.pre_v1_retired.push(p.id.clone());
                out.notes.push(format!(
                    "{} is Karpenter's pre-v1 controller policy (v0.33-v0.37); Karpenter {} runs, so karpctl's v1 policies replace it: retired once they are all attached",
                    p.id, f.version
                ));
            }
        } else {
            keep(&mut out);
        }
    }
    out
}

/// What import says of Karpenter's pre-v1 controller policy while CloudTrail shows a pre-v1
/// release (`running`) still calling AWS with the controller role.
fn pre_v1_note(id: &str, running: &str) -> String {
    format!(
        "{id} is Karpenter's pre-v1 controller policy (v0.33-v0.37), and CloudTrail shows Karpenter {running} still running: \
         the plan keeps it on the controller role. Upgrade Karpenter first; once only 1.0 or later runs, import again (or move it to retire_policies)"
    )
}

/// `s` is `<prefix>` followed by the Terraform provider's generated suffix (a UTC timestamp and
/// a counter: digits, then hex), at least 14 characters.
fn tf_generated(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| rest.len() >= 14 && rest.chars().all(|c| c.is_ascii_hexdigit()))
}

impl Found {
    pub fn tool(&self) -> Tool {
        let c = &self.cluster;
        let tf = self.controller.as_ref().is_some_and(|r| tf_generated(&r.name, "KarpenterController-"))
            || self.node_role.as_ref().is_some_and(|r| tf_generated(&r.name, &format!("Karpenter-{c}-")))
            || self.rules.values().any(|n| RULES.iter().any(|r| tf_generated(n, &r.tf_prefix())));
        if tf {
            return Tool::Terraform;
        }
        let stack = self
            .rules
            .values()
            .find_map(|n| RULES.iter().find_map(|r| n.find(&format!("-{}-", r.cfn_id)).map(|at| n[..at].to_string())));
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

/// Pure: the plan file naming what was found, and what it could not tell or left alone (notes).
pub fn plan_toml(f: &Found, pol: &Policies) -> (String, Vec<String>) {
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
    t.push_str(&format!("karpenter_version = {}\n", q(&f.version.to_string())));
    if pol.zonal_shift {
        t.push_str("# The controller may read zonal shift today (settings.enableZonalShift): Karpenter stops at start without it.\nzonal_shift = true\n");
    }
    let path = f.path();
    t.push_str(&format!("path = {}\n", q(&path)));
    match &f.controller {
        Some(r) => t.push_str(&format!("controller_role_name = {}\n", q(&r.name))),
        None if f.controller_searched.is_empty() => notes.push("no controller role found: the plan makes a new one".into()),
        None => notes.push(format!("no controller role found ({}): the plan makes a new one", f.controller_searched)),
    }
    if f.controller.is_some() && !f.association && f.mode != Some(IdentityMode::Irsa) {
        notes.push(format!(
            "controller role {} is trusted by Pod Identity but no association uses it: up --adopt makes the association {}/{}",
            f.controller.as_ref().map(|r| r.name.as_str()).unwrap_or_default(),
            f.namespace,
            f.service_account
        ));
    }
    let node_owned = match (&f.node_role, &f.node_role_shared) {
        (Some(r), Some(why)) => {
            t.push_str(&format!("# Used as it is, never changed or deleted: {why}.\nexisting_node_role = {}\n", q(&r.arn)));
            notes.push(format!("node role {}: {why}; the plan uses it as it is (existing_node_role) and never owns it", r.name));
            false
        }
        (Some(r), None) if r.path == path => {
            t.push_str(&format!("node_role_name = {}\n", q(&r.name)));
            true
        }
        (Some(r), None) => {
            t.push_str(&format!("existing_node_role = {}\n", q(&r.arn)));
            notes.push(format!(
                "node role {} lives under {} and the controller role under {path}: the plan uses it as it is (existing_node_role), without managing it",
                r.name, r.path
            ));
            false
        }
        (None, _) => {
            notes.push("no node role found: the plan makes a new one".into());
            false
        }
    };
    for n in &f.node_roles_left {
        notes.push(n.clone());
    }
    if let Some((name, p)) = &f.instance_profile {
        if *p == path && node_owned {
            t.push_str(&format!("instance_profile = true\ninstance_profile_name = {}\n", q(name)));
        } else {
            notes.push(format!("instance profile {name} is left alone (under {p}, or its role is not karpctl's)"));
        }
    }
    if !f.extra_node_policies.is_empty() && node_owned {
        let arns: Vec<String> = f.extra_node_policies.iter().map(|a| q(a)).collect();
        t.push_str(&format!(
            "# Attached to the node role today; kept so that nodes lose nothing.\nextra_node_policy_arns = [{}]\n",
            arns.join(", ")
        ));
    }
    if let Some(kind) = &f.access_entry_type
        && node_owned
    {
        t.push_str(&format!("access_entry_type = {}\n", q(kind)));
    }
    if f.namespace != "kube-system" {
        t.push_str(&format!("namespace = {}\n", q(&f.namespace)));
    }
    if f.service_account != "karpenter" {
        t.push_str(&format!("service_account = {}\n", q(&f.service_account)));
    }
    let kept: Vec<&String> = pol.keep.iter().chain(pol.pre_v1.iter().filter(|k| k.starts_with("arn:"))).collect();
    if !kept.is_empty() {
        t.push_str("# On the controller role today and not replaced by karpctl's policies: kept attached.\nextra_controller_policy_arns = [\n");
        for k in &kept {
            let why = if pol.pre_v1.contains(k) { "   # Karpenter's pre-v1 policy: see the note" } else { "" };
            t.push_str(&format!("  {},{why}\n", q(k)));
        }
        t.push_str("]\n");
    }
    for k in &pol.keep_inline {
        notes.push(format!("inline policy {k} on the controller role is not Karpenter's: kept as it is"));
    }
    notes.extend(pol.notes.iter().cloned());
    if !pol.retire.is_empty() {
        t.push_str("# Karpenter's own, replaced by karpctl's split policies: detached once those are attached;\n# a customer managed one that nothing else uses is then deleted.\nretire_policies = [\n");
        for r in &pol.retire {
            let why = if pol.pre_v1_retired.contains(r) {
                format!("   # Karpenter's pre-v1 policy: Karpenter {} runs", f.version)
            } else {
                String::new()
            };
            t.push_str(&format!("  {},{why}\n", q(r)));
        }
        t.push_str("]\n");
    }

    if !f.subnets.is_empty() || !f.subnets_left.is_empty() || f.security_group.is_some() {
        t.push_str("\n[discovery]\n");
        for (id, why) in &f.subnets_left {
            t.push_str(&format!("# left out: {id} is tagged for discovery but nodes cannot work from it: {why}\n"));
        }
        if !f.subnets.is_empty() {
            let ids: Vec<String> = f.subnets.iter().map(|s| q(s)).collect();
            t.push_str(&format!("subnet_ids = [{}]\n", ids.join(", ")));
        }
        if let Some(g) = &f.security_group {
            t.push_str(&format!("security_group_id = {}\n", q(g)));
        }
    }
    for (id, why) in &f.subnets_left {
        notes.push(format!(
            "subnet {id} carries the discovery tag but nodes cannot work from it ({why}): left out of the plan; remove its tag where it was set (e.g. Terraform's public_subnet_tags), or Karpenter still picks it"
        ));
    }
    (t, notes)
}

/// Pure: how to let go of the objects in the tool that made them. Terraform forgets the whole
/// module (never a hand-picked list: that misses what the module made for the user's settings,
/// and Terraform destroys what stays in state). CloudFormation: the guide's stack, and eksctl's
/// stack of the controller role (`<c>-karpenter`) when that role is the one found.
pub fn let_go(f: &Found, module: &str) -> LetGo {
    match f.tool() {
        Tool::Terraform => LetGo::Terraform { module: module_address(module), steps: TerraformSteps::default() },
        Tool::CloudFormation { stack } => {
            let mut stacks = vec![Stack { name: stack, parameters: vec!["ClusterName".into()] }];
            // eksctl makes the getting-started guide's controller role `<cluster>-karpenter` in a
            // stack of its own, with no parameters: Pod Identity and IRSA name it differently.
            if f.controller.as_ref().is_some_and(|r| r.name == format!("{}-karpenter", f.cluster)) {
                let kind = match f.mode {
                    Some(IdentityMode::Irsa) => "addon-iamserviceaccount",
                    _ => "podidentityrole",
                };
                stacks.push(Stack {
                    name: format!("eksctl-{}-{kind}-{}-{}", f.cluster, f.namespace, f.service_account),
                    parameters: vec![],
                });
            }
            LetGo::CloudFormation { stacks }
        }
        Tool::Unknown => LetGo::Unknown,
    }
}

/// Pure: what changes in the Terraform configuration before the module block goes. Every output
/// the terraform-aws-eks `karpenter` module (v20, v21) exposes, with the value `karpctl output
/// --format json` gives for it once `up --adopt` manages the objects (read from the plan as
/// written, `spec`, and what was found: the objects are adopted in place), and the controller
/// role's policies the module did not make, retired or kept.
pub fn terraform_steps(f: &Found, pol: &Policies, spec: Option<&crate::spec::Spec>) -> TerraformSteps {
    let partition = f.cluster_arn.split(':').nth(1).unwrap_or("aws");
    let controller = f.controller.as_ref();
    let node = f.node_role.as_ref();
    let queue = match spec {
        Some(s) => s.interruption.enabled.then(|| s.interruption.queue_name.clone()),
        None => f.queue.clone(),
    };
    let profile = spec.and_then(|s| s.identity.instance_profile.as_ref()).map(|n| n.name.clone());
    let (ns, sa) = match spec {
        Some(s) => (s.identity.namespace.clone(), s.identity.service_account.clone()),
        None => (f.namespace.clone(), f.service_account.clone()),
    };
    let out = |name, value: Option<String>, key: &str| ModuleOutput { name, value, source: format!(".{key}") };
    let none = |name, how: String| ModuleOutput { name, value: None, source: how };
    let role_id = |r: Option<&FoundRole>| {
        format!(
            "karpctl output gives none: aws iam get-role --role-name {} --query Role.RoleId --output text",
            r.map(|r| r.name.as_str()).unwrap_or("<role>")
        )
    };
    let node_arn = node.map(|r| r.arn.clone());
    let outputs = vec![
        out("iam_role_name", controller.map(|r| r.name.clone()), "controller_role_name"),
        out("iam_role_arn", controller.map(|r| r.arn.clone()), "controller_role_arn"),
        none("iam_role_unique_id", role_id(controller)),
        out(
            "queue_arn",
            queue.as_ref().map(|q| format!("arn:{partition}:sqs:{}:{}:{q}", f.region, f.account_id)),
            "interruption_queue_arn",
        ),
        out("queue_name", queue.clone(), "interruption_queue"),
        none(
            "queue_url",
            format!(
                "karpctl output gives none: aws sqs get-queue-url --queue-name {} --query QueueUrl --output text",
                queue.as_deref().unwrap_or("<queue>")
            ),
        ),
        none("event_rules", "karpctl output gives none: the rules keep their names (interruption.rule_names in the plan)".into()),
        out("node_iam_role_name", node.map(|r| r.name.clone()), "node_role_name"),
        out("node_iam_role_arn", node_arn.clone(), "node_role_arn"),
        none("node_iam_role_unique_id", role_id(node)),
        none(
            "node_access_entry_arn",
            format!(
                "karpctl output gives none: aws eks describe-access-entry --cluster-name {} --principal-arn {} --query accessEntry.accessEntryArn --output text",
                f.cluster,
                node_arn.as_deref().unwrap_or("<node role ARN>")
            ),
        ),
        none(
            "instance_profile_arn",
            match &profile {
                Some(p) => format!(
                    "karpctl output gives none: aws iam get-instance-profile --instance-profile-name {p} --query InstanceProfile.Arn --output text"
                ),
                None => "none: the nodes use the role (Karpenter makes their instance profiles)".to_string(),
            },
        ),
        out("instance_profile_id", profile.clone(), "instance_profile"),
        out("instance_profile_name", profile.clone(), "instance_profile"),
        none(
            "instance_profile_unique",
            match &profile {
                Some(p) => format!(
                    "karpctl output gives none: aws iam get-instance-profile --instance-profile-name {p} --query InstanceProfile.InstanceProfileId --output text"
                ),
                None => "none: the nodes use the role (Karpenter makes their instance profiles)".to_string(),
            },
        ),
        out("namespace", Some(ns), "service_account.namespace"),
        out("service_account", Some(sa), "service_account.name"),
    ];
    // The module's own controller policy is forgotten with the module; the rest was declared
    // next to it.
    let modules = |id: &String| tf_generated(id.rsplit('/').next().unwrap_or(id), "KarpenterController-");
    let mut policies: Vec<HandAddedPolicy> =
        pol.retire.iter().filter(|id| !modules(id)).map(|id| HandAddedPolicy { id: id.clone(), retired: true }).collect();
    policies.extend(
        pol.keep
            .iter()
            .chain(&pol.keep_inline)
            .chain(&pol.pre_v1)
            .filter(|id| !modules(id))
            .map(|id| HandAddedPolicy { id: id.clone(), retired: false }),
    );
    TerraformSteps { outputs, policies }
}

/// `--terraform-module` as a module address: `karpenter` and `module.karpenter` alike.
fn module_address(m: &str) -> String {
    let m = m.trim();
    if m.starts_with("module.") { m.to_string() } else { format!("module.{m}") }
}

/// Pure: which node role is Karpenter's, and whether karpctl may own it. The role the controller
/// may `iam:PassRole` is the one Karpenter launches nodes with and wins outright; an access entry
/// decides only when PassRole names none. A role behind a managed node group is never taken as
/// Karpenter's own: used as it is (`existing_node_role`) when the controller passes it, else left.
/// Returns (the role, why it is only used, notes on roles left).
fn pick_node_role(s: &Setup) -> (Option<&NodeRole>, Option<String>, Vec<String>) {
    let c = &s.cluster;
    let group_of = |arn: &str| s.nodegroup_roles.iter().find(|(_, r)| role_name(r) == role_name(arn)).map(|(g, _)| g.clone());
    let passed = |n: &NodeRole| n.how.iter().any(|h| h.contains("iam:PassRole") || h == "--node-role");
    let existing = s.node_roles.iter().filter(|n| n.exists);
    let mut left = Vec::new();
    let chosen = match existing.clone().find(|n| passed(n)) {
        Some(n) => Some(n),
        None => existing.clone().find(|n| group_of(&n.arn).is_none()),
    };
    let chosen_name = chosen.map(|x| x.name.as_str());
    let passed_names: Vec<&str> = s.node_roles.iter().filter(|n| n.exists && passed(n)).map(|n| n.name.as_str()).collect();
    if passed_names.len() > 1 {
        left.push(format!(
            "the controller may pass several roles ({}): the plan takes {} as Karpenter's node role; the policy that lets it pass the others is kept",
            passed_names.join(", "),
            chosen_name.unwrap_or_default()
        ));
    }
    for n in existing.filter(|n| Some(n.name.as_str()) != chosen_name && group_of(&n.arn).is_none() && !passed(n)) {
        left.push(format!("role {} ({}) is not the role the controller passes: left alone", n.name, n.how.join("; ")));
    }
    for (g, arn) in s.nodegroup_roles.iter().filter(|(_, r)| Some(role_name(r)) != chosen_name) {
        left.push(format!("role {} backs managed node group {g}: not Karpenter's, left alone", role_name(arn)));
    }
    let Some(n) = chosen else { return (None, None, left) };
    let karpenterish = n.name.to_ascii_lowercase().contains("karpenter") || n.name == *c;
    let shared = match group_of(&n.arn) {
        Some(g) => Some(format!("it also backs managed node group {g}")),
        None if !passed(n) && !karpenterish => {
            Some("it is not recognisably Karpenter's (found by its access entry only, not named for Karpenter)".to_string())
        }
        None => None,
    };
    (Some(n), shared, left)
}

/// What doctor read, as `import` needs it (the instance profile is read after: doctor does not).
fn found_of(s: &Setup, version: KarpenterVersion) -> Found {
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
    let (node, node_role_shared, node_roles_left) = pick_node_role(s);
    let access_entry_type = node.and_then(|n| s.access_entries.iter().find(|e| e.principal_arn == n.arn)).map(|e| e.kind.clone());
    // Subnets nodes cannot work from are left out, with why (the verdict doctor gives).
    let (tagged, net) = crate::checks::network::subnets_as_judged(s, true);
    let (mut subnets, mut subnets_left) = (Vec::new(), Vec::new());
    for t in &tagged {
        // Without route tables read (an emulator's made-up VPC), nothing can be judged: keep.
        match crate::egress::why_unusable(&t.candidate, &net).filter(|_| !s.route_tables.is_empty()) {
            Some(why) => subnets_left.push((t.candidate.id.clone(), why)),
            None => subnets.push(t.candidate.id.clone()),
        }
    }
    Found {
        cluster: s.cluster.clone(),
        cluster_arn: format!("arn:{}:eks:{}:{}:cluster/{}", s.partition, s.region, s.account_id, s.cluster),
        region: s.region.clone(),
        account_id: s.account_id.clone(),
        mode: s.mode,
        namespace: s.namespace.clone(),
        service_account: s.service_account.clone(),
        controller: controller.map(|c| FoundRole::of_arn(&c.arn)),
        controller_searched: s.controller_searched.clone(),
        controller_policies: controller
            .map(|c| {
                c.policies
                    .iter()
                    .map(|p| FoundPolicy { id: p.arn.clone().unwrap_or_else(|| p.name.clone()), document: p.document.clone() })
                    .collect()
            })
            .unwrap_or_default(),
        node_role: node.map(|n| FoundRole::of_arn(&n.arn)),
        node_role_shared,
        node_roles_left,
        node_attached: node.map(|n| n.attached.clone()).unwrap_or_default(),
        extra_node_policies: vec![],
        access_entry_type,
        instance_profile: None,
        association: controller.is_some_and(|c| c.how.contains("Pod Identity association")),
        queue: s.queue.as_ref().filter(|q| q.exists).map(|q| q.name.clone()),
        queue_kms_key: s.queue.as_ref().and_then(|q| q.kms_master_key_id.clone()),
        rules,
        rules_left,
        subnets,
        subnets_left,
        security_group: match s.discovery.groups.as_slice() {
            [one] => Some(one.id.clone()),
            _ => None,
        },
        version,
        pre_v1_running: s
            .running
            .as_ref()
            .and_then(|r| r.versions.iter().find(|v| v.version.major == 0))
            .map(|v| v.version.recorded.clone()),
    }
}

/// The node role's instance profiles that Karpenter did not make (Karpenter tags its own with
/// `karpenter.k8s.aws/ec2nodeclass`): (name, path).
async fn instance_profiles(aws: &crate::aws::read::Readers, role: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, path) in aws.iam.profiles_for_role(role).await? {
        let Some(p) = aws.iam.instance_profile(&name).await? else { continue };
        if !p.tags.contains_key("karpenter.k8s.aws/ec2nodeclass") {
            out.push((name, path));
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
        global.cluster.clone().or_else(|| global.settings.cluster.clone()).ok_or_else(|| {
            UserError::new("karpctl import needs a cluster").hint("pass --cluster NAME (or set KARPCTL_CLUSTER)")
        })?;
    crate::plan_file::validate_cluster_name(&cluster).map_err(|e| UserError::new(format!("--cluster {cluster:?}: {e}")))?;
    // The permissions follow the release that runs: the flag, else the version CloudTrail
    // shows in the controller's calls (`karpenter.sh-<version>` in their user agent). Never
    // guessed: with neither, import stops before it writes.
    let flagged =
        match args.karpenter_version.as_deref() {
            Some(v) => Some(KarpenterVersion::parse(v).map_err(|e| {
                UserError::new(format!("--karpenter-version: {e}")).hint("pass the release that runs, such as 1.14")
            })?),
            None => None,
        };
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
    let inputs = crate::gather::setup::Inputs {
        cluster: facts.clone(),
        account_id: connected.account_id.clone(),
        partition: connected.partition.clone(),
        region: connected.region.clone(),
        version: flagged.unwrap_or(KarpenterVersion::LATEST),
        follow_running: false,
        version_from: String::new(),
        namespace: args.namespace.clone(),
        service_account: args.service_account.clone(),
        controller_role: None,
        node_roles: vec![],
        queue: None,
        discovery_tag: (crate::tags::DISCOVERY_TAG.to_string(), cluster.clone()),
        refused: vec![],
        associate_public_ip: false,
        bus_quota: global.settings.rules_per_bus,
        trail_window: global.settings.trail_window,
        metrics: false,
        simulate: false,
    };
    let mut setup = crate::gather::setup::gather(&connected.readers, &inputs).await?;
    let (version, from_trail) = match flagged {
        Some(v) => (v, None),
        None => running_version(&setup, &args.namespace)?,
    };
    setup.version = version;
    // CloudTrail is the only read import does without: it only names the version.
    if let Some(u) = setup.unreadable.iter().find(|u| u.code != crate::facts::finding::Code::CloudtrailUnreadable) {
        return Err(UserError::new(format!("import cannot read the setup: {} was refused ({})", u.operation, u.aws_code))
            .hint("import needs the read permissions doctor needs (docs/doctor.md); nothing was written")
            .into());
    }
    let mut found = found_of(&setup, version);
    if let Some(n) = found.node_role.as_ref().filter(|_| found.node_role_shared.is_none()) {
        found.instance_profile = instance_profiles(&connected.readers, &n.name).await?.into_iter().next();
    }

    // The plan without retirements, parsed as `up` will parse it: its own policies' ARNs are
    // adopted in place (the getting-started stack names them as karpctl does), never retired.
    let zonal = Policies { zonal_shift: sort_policies(&found, &[]).zonal_shift, ..Default::default() };
    let (draft, _) = plan_toml(&found, &zonal);
    let spec = crate::plan_file::parse_with(&draft, &path.display().to_string(), Some(&cluster), &global.settings)?;
    let plan_facts = Facts {
        account_id: connected.account_id.clone(),
        region: connected.region.clone(),
        partition: connected.partition.clone(),
        cluster: facts,
        discovery: Default::default(),
        existing_node_role_arn: None,
        kms_key: None,
    };
    let own: Vec<String> = crate::resources::iam_policy::controller_policies(&spec, &plan_facts)
        .into_iter()
        .filter(|p| p.doc.is_some())
        .map(|p| p.arn)
        .collect();
    let ipv6 = plan_facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
    let node_wanted = crate::karpenter_iam::node_managed_policy_arns(
        &plan_facts.partition,
        &plan_facts.account_id,
        ipv6,
        spec.identity.karpenter_version,
    );
    found.extra_node_policies = found.node_attached.iter().filter(|a| !node_wanted.contains(a)).cloned().collect();
    let policies = sort_policies(&found, &own);
    let mut let_go = let_go(&found, &args.terraform_module);
    let mut found_lines = summary(&found, &policies);
    if let Some(line) = from_trail {
        found_lines.push(("karpenter version".into(), line));
    }
    let (text, mut notes) = plan_toml(&found, &policies);
    // What was found and how to let go are said even when the plan cannot be used as it is.
    let parsed = crate::plan_file::parse_with(&text, &path.display().to_string(), Some(&cluster), &global.settings);
    if let Err(e) = &parsed {
        notes.push(format!("the plan written needs a change before up --adopt can use it: {}", e.message));
    }
    if let LetGo::Terraform { steps, .. } = &mut let_go {
        *steps = terraform_steps(&found, &policies, parsed.as_ref().ok());
    }

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

    // What `up --adopt` will change: the same read-only diff, with the file just written. A
    // refusal (a preflight check, say) is reported after what was found, not instead of it.
    let diff = match parsed {
        Ok(_) => {
            let mut with_plan = global.clone();
            with_plan.config = Some(path.clone());
            with_plan.cluster = Some(cluster.clone());
            crate::engine::diff_on(&with_plan, true, None, Some(&connected)).await.map_err(|e| {
                let hint = crate::report::hint_of(&e).map(|h| format!("\nhint: {h}")).unwrap_or_default();
                format!("{e:#}{hint}")
            })
        }
        Err(e) => Err(e.message.clone()),
    };
    Ok(ImportReport { cluster, path, text, notes, found_lines, diff, let_go, stats: connected.stats.report() })
}

/// The version CloudTrail shows the controller role running (the newest during a rollout), and
/// the line saying where it came from; without one, the error asking for the flag.
fn running_version(setup: &crate::facts::setup::Setup, namespace: &str) -> Result<(KarpenterVersion, Option<String>)> {
    let running = setup.running.as_ref();
    let why = match running {
        Some(r) if r.problem.is_some() => {
            format!("CloudTrail could not be read ({})", r.problem.as_ref().map(|p| p.warning()).unwrap_or_default())
        }
        Some(r) if r.controller_roles.is_empty() => "no controller role was found to look for in CloudTrail".to_string(),
        Some(r) => format!("CloudTrail shows no call of the controller role in {}{}", r.window_text(), r.cut_short_text()),
        None => "CloudTrail was not read".to_string(),
    };
    let Some(r) = running.filter(|r| r.newest().is_some()) else {
        let window = running.map(|r| r.window_hint()).unwrap_or("");
        return Err(UserError::new(format!("import needs the Karpenter release that runs: pass --karpenter-version ({why})"))
            .hint(format!(
                "read it with `helm list -n {namespace}` (the karpenter chart's APP VERSION, e.g. 1.6.3 -> --karpenter-version 1.6){window}; nothing was written"
            ))
            .into());
    };
    let newest = r.newest().cloned().unwrap_or_else(|| unreachable!());
    if newest.major == 0 {
        return Err(UserError::new(format!(
            "CloudTrail shows Karpenter {newest} running, a release before 1.0: karpctl's permissions start at Karpenter 1.0"
        ))
        .hint("upgrade Karpenter to 1.0 or later first, then import; or pass --karpenter-version with the 1.x release you move to (the pre-v1 policy stays on the role while CloudTrail shows a pre-v1 release); nothing was written")
        .into());
    }
    let Some(v) = newest.known() else {
        return Err(UserError::new(format!(
            "CloudTrail shows Karpenter {newest} running, newer than karpctl knows (up to {})",
            KarpenterVersion::LATEST
        ))
        .hint("upgrade karpctl, or pass --karpenter-version to pin an older permission set; nothing was written")
        .into());
    };
    let rollout = if r.versions.len() > 1 {
        let all: Vec<String> = r.versions.iter().map(|s| s.version.to_string()).collect();
        format!("; a rollout: {} run, the newest is used", all.join(" and "))
    } else {
        String::new()
    };
    Ok((
        v,
        Some(format!(
            "{v} (from CloudTrail: the controller role's calls name karpenter.sh-{newest} in {}{rollout}; --karpenter-version overrides)",
            r.window_text()
        )),
    ))
}

/// One line per piece found, for the report.
fn summary(f: &Found, pol: &Policies) -> Vec<(String, String)> {
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
    let node = match (&f.node_role, &f.node_role_shared) {
        (Some(_), Some(why)) => format!("{}, used as it is: {why}", role(&f.node_role)),
        _ => role(&f.node_role),
    };
    out.push(("node role".into(), node));
    out.push(("queue".into(), f.queue.clone().unwrap_or_else(|| "none".into())));
    let rules: Vec<String> = f.rules.iter().map(|(p, n)| format!("{p}: {n}")).collect();
    out.push(("rules kept".into(), if rules.is_empty() { "none".into() } else { rules.join(", ") }));
    let list = |l: &[String]| if l.is_empty() { "none".to_string() } else { l.join(", ") };
    out.push(("policies replaced".into(), list(&pol.retire)));
    let kept: Vec<String> = pol.keep.iter().chain(&pol.keep_inline).chain(&pol.pre_v1).cloned().collect();
    out.push(("policies kept".into(), list(&kept)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TS: &str = "2024031512000012340000000a";

    fn doc(stmts: serde_json::Value) -> Option<serde_json::Value> {
        Some(json!({"Version": "2012-10-17", "Statement": stmts}))
    }

    fn managed(arn: &str, d: Option<serde_json::Value>) -> FoundPolicy {
        FoundPolicy { id: arn.into(), document: d }
    }

    fn tf() -> Found {
        let c = "say-when-east";
        Found {
            cluster: c.into(),
            cluster_arn: format!("arn:aws:eks:us-east-1:123456789012:cluster/{c}"),
            region: "us-east-1".into(),
            account_id: "123456789012".into(),
            mode: Some(IdentityMode::PodIdentity),
            namespace: "kube-system".into(),
            service_account: "karpenter".into(),
            controller: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterController-{TS}"))),
            controller_searched: String::new(),
            controller_policies: vec![
                managed(
                    &format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"),
                    doc(json!([{"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
                                "Resource": format!("arn:aws:eks:us-east-1:123456789012:cluster/{c}")}])),
                ),
                FoundPolicy {
                    id: "ListInstanceProfiles".into(),
                    document: doc(json!([{"Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"}])),
                },
                managed(
                    "arn:aws:iam::123456789012:policy/ebs-kms",
                    doc(json!([{"Effect": "Allow", "Action": ["kms:CreateGrant", "kms:Decrypt"], "Resource": "*"}])),
                ),
                managed("arn:aws:iam::aws:policy/ReadOnlyAccess", None),
                managed(
                    &format!("arn:aws:iam::123456789012:policy/KarpenterControllerZonalShiftPolicy-{c}"),
                    doc(json!([{"Effect": "Allow", "Action": "arc-zonal-shift:GetManagedResource", "Resource": "*"}])),
                ),
                FoundPolicy {
                    id: "team-s3".into(),
                    document: doc(json!([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}])),
                },
            ],
            node_role: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/{c}"))),
            node_role_shared: None,
            node_roles_left: vec![],
            node_attached: vec![
                "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".into(),
                "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore".into(),
            ],
            extra_node_policies: vec![],
            access_entry_type: Some("EC2_LINUX".into()),
            instance_profile: None,
            association: true,
            queue: Some(format!("Karpenter-{c}")),
            queue_kms_key: None,
            rules: [("SpotInterrupt".to_string(), format!("KarpenterSpotInterrupt-{TS}"))].into_iter().collect(),
            rules_left: vec![],
            subnets: vec!["subnet-1".into()],
            subnets_left: vec![("subnet-2".into(), "public (default route to igw-1) but MapPublicIpOnLaunch is false".into())],
            security_group: Some("sg-1".into()),
            version: KarpenterVersion::LATEST,
            pre_v1_running: None,
        }
    }

    #[test]
    fn only_karpenters_own_policies_are_retired() {
        let f = tf();
        let p = sort_policies(&f, &[]);
        assert_eq!(
            p.retire,
            [
                format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"),
                "ListInstanceProfiles".to_string(),
                "arn:aws:iam::123456789012:policy/KarpenterControllerZonalShiftPolicy-say-when-east".to_string(),
            ],
            "the module's policy, a document of Karpenter's statements, a KarpenterController*Policy-<c>"
        );
        assert_eq!(p.keep, ["arn:aws:iam::123456789012:policy/ebs-kms", "arn:aws:iam::aws:policy/ReadOnlyAccess"]);
        assert_eq!(p.keep_inline, ["team-s3"]);
        assert!(p.zonal_shift, "a found arc-zonal-shift:GetManagedResource keeps zonal shift on");
        // A policy the plan itself names is adopted in place, never retired.
        let own = ["arn:aws:iam::123456789012:policy/KarpenterControllerZonalShiftPolicy-say-when-east".to_string()];
        assert!(!sort_policies(&f, &own).retire.iter().any(|r| r.contains("ZonalShift")));
    }

    #[test]
    fn what_only_looks_like_karpenters_stays() {
        let mut f = tf();
        let other_cluster = "arn:aws:eks:eu-west-1:123456789012:cluster/say-when-east";
        f.controller_policies = vec![
            // Karpenter's statement for a second node role (another EC2NodeClass).
            managed(
                "arn:aws:iam::123456789012:policy/pass-gpu-nodes",
                doc(json!([{"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
                            "Resource": "arn:aws:iam::123456789012:role/gpu-nodes"},
                           {"Effect": "Allow", "Action": "eks:DescribeCluster", "Resource": f.cluster_arn.clone()}])),
            ),
            // A custom AMI lookup: Karpenter's action, scoped elsewhere.
            managed(
                "arn:aws:iam::123456789012:policy/ami-params",
                doc(
                    json!([{"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "arn:aws:ssm:us-east-1::parameter/my-ami/*"}]),
                ),
            ),
            // The module's name, but the same-named cluster of another region.
            managed(
                &format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"),
                doc(
                    json!([{"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster", "Resource": other_cluster}]),
                ),
            ),
            // A user's own policy named after the guide's pattern.
            managed("arn:aws:iam::123456789012:policy/KarpenterControllerKmsPolicy-say-when-east", None),
        ];
        let p = sort_policies(&f, &[]);
        assert!(p.retire.is_empty(), "{p:?}");
        assert_eq!(p.keep.len(), 4, "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("gpu-nodes")), "{:?}", p.notes);
    }

    #[test]
    fn zonal_shift_below_1_12_keeps_the_policy_that_grants_it() {
        let mut f = tf();
        f.version = KarpenterVersion { minor: 11 };
        let p = sort_policies(&f, &[]);
        assert!(p.keep.iter().any(|k| k.contains("ZonalShift")), "{p:?}");
        assert!(!p.retire.iter().any(|k| k.contains("ZonalShift")), "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("1.12")), "{:?}", p.notes);
    }

    /// The module's pre-v1 document (v0.33's instance statement), managed, and an inline copy.
    fn pre_v1_policies() -> Vec<FoundPolicy> {
        let stmts =
            json!([{"Sid": "AllowScopedEC2InstanceActions", "Effect": "Allow", "Action": ["ec2:RunInstances"], "Resource": "*"}]);
        vec![
            managed(&format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"), doc(stmts.clone())),
            FoundPolicy { id: "KarpenterControllerPolicy".into(), document: doc(stmts) },
        ]
    }

    #[test]
    fn the_pre_v1_policy_is_retired_when_the_release_that_runs_is_1_0_or_later() {
        let mut f = tf();
        f.version = KarpenterVersion { minor: 10 };
        f.controller_policies = pre_v1_policies();
        let p = sort_policies(&f, &[]);
        let ids: Vec<String> = f.controller_policies.iter().map(|p| p.id.clone()).collect();
        assert_eq!(p.retire, ids, "managed and inline alike: {p:?}");
        assert_eq!(p.pre_v1_retired, ids);
        assert!(p.pre_v1.is_empty() && p.keep.is_empty() && p.keep_inline.is_empty(), "{p:?}");
        let (text, notes) = plan_toml(&f, &p);
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert_eq!(spec.identity.retire_policies, ids, "{text}");
        assert!(spec.identity.extra_controller_policy_arns.is_empty(), "{text}");
        assert!(text.contains("# Karpenter's pre-v1 policy: Karpenter 1.10 runs"), "{text}");
        assert!(notes.iter().any(|n| n.contains("pre-v1") && n.contains("Karpenter 1.10 runs")), "{notes:?}");
        assert!(!notes.iter().any(|n| n.contains("Upgrade Karpenter first")), "{notes:?}");
    }

    #[test]
    fn the_pre_v1_policy_stays_while_cloudtrail_shows_a_pre_v1_release_running() {
        let mut f = tf();
        f.controller_policies = pre_v1_policies();
        f.pre_v1_running = Some("0.37.2".into());
        let p = sort_policies(&f, &[]);
        assert!(p.retire.is_empty(), "{p:?}");
        assert_eq!(p.pre_v1.len(), 2);
        let (text, notes) = plan_toml(&f, &p);
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert_eq!(spec.identity.extra_controller_policy_arns, p.pre_v1[..1].to_vec(), "the managed one is kept attached");
        assert!(!text.contains("KarpenterControllerPolicy\""), "an inline policy is left as it is: {text}");
        assert!(notes.iter().filter(|n| n.contains("0.37.2") && n.contains("Upgrade Karpenter first")).count() == 2, "{notes:?}");
    }

    #[test]
    fn a_pre_v1_policy_that_passes_another_role_stays() {
        let mut f = tf();
        f.controller_policies = vec![managed(
            &format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"),
            doc(
                json!([{"Sid": "AllowScopedEC2InstanceActions", "Effect": "Allow", "Action": ["ec2:RunInstances"], "Resource": "*"},
                       {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
                        "Resource": "arn:aws:iam::123456789012:role/gpu-nodes"}]),
            ),
        )];
        let p = sort_policies(&f, &[]);
        assert!(p.retire.is_empty() && p.keep.len() == 1, "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("gpu-nodes")), "{:?}", p.notes);
    }

    #[test]
    fn a_terraform_setup_becomes_a_plan_naming_its_objects() {
        let f = tf();
        assert_eq!(f.tool(), Tool::Terraform);
        let p = sort_policies(&f, &[]);
        let (text, notes) = plan_toml(&f, &p);
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert_eq!(spec.identity.path, "/");
        assert_eq!(spec.identity.controller_role.name, format!("KarpenterController-{TS}"));
        assert_eq!(spec.identity.node_role_name(), "say-when-east", "the module example's fixed node role name");
        assert_eq!(spec.interruption.queue_name, "Karpenter-say-when-east");
        assert_eq!(spec.interruption.rule_names["SpotInterrupt"], format!("KarpenterSpotInterrupt-{TS}"));
        assert_eq!(spec.identity.retire_policies, p.retire);
        assert_eq!(spec.identity.extra_controller_policy_arns, p.keep);
        assert!(spec.identity.zonal_shift);
        assert_eq!(spec.discovery.subnet_ids, Some(vec!["subnet-1".to_string()]), "the unusable subnet is left out");
        assert!(text.contains("# left out: subnet-2"), "{text}");
        assert!(notes.iter().any(|n| n.contains("subnet-2") && n.contains("public_subnet_tags")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("team-s3")), "{notes:?}");
    }

    #[test]
    fn a_shared_node_role_is_used_never_owned() {
        let mut f = tf();
        f.node_role_shared = Some("it also backs managed node group ng-1".into());
        let (text, _) = plan_toml(&f, &sort_policies(&f, &[]));
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert!(spec.identity.node_role.is_none(), "{text}");
        assert_eq!(spec.identity.existing_node_role.as_deref(), Some("arn:aws:iam::123456789012:role/say-when-east"));
        assert!(!text.contains("extra_node_policy_arns") && !text.contains("access_entry_type"), "{text}");
    }

    fn setup_with_roles() -> Setup {
        use crate::facts::setup::NodeRole;
        let mut s = Setup::empty("c1");
        let role = |name: &str, how: &str| NodeRole {
            name: name.into(),
            arn: format!("arn:aws:iam::111122223333:role/{name}"),
            how: vec![how.into()],
            exists: true,
            created: None,
            attached: vec![],
        };
        s.node_roles =
            vec![role("KarpenterNodeRole-c1", "the controller's iam:PassRole"), role("ng-role", "EC2_LINUX access entry")];
        s.nodegroup_roles = vec![("ng-1".into(), "arn:aws:iam::111122223333:role/ng-role".into())];
        s
    }

    #[test]
    fn the_passed_role_wins_and_a_node_groups_role_is_never_taken() {
        let s = setup_with_roles();
        let (n, shared, left) = pick_node_role(&s);
        assert_eq!(n.unwrap().name, "KarpenterNodeRole-c1");
        assert_eq!(shared, None);
        assert!(left.iter().any(|l| l.contains("ng-role") && l.contains("ng-1")), "{left:?}");
        // Passed but also a node group's: used as it is.
        let mut s = setup_with_roles();
        s.node_roles.retain(|n| n.name == "ng-role");
        s.node_roles[0].how.push("the controller's iam:PassRole".into());
        let (n, shared, _) = pick_node_role(&s);
        assert_eq!(n.unwrap().name, "ng-role");
        assert!(shared.unwrap().contains("ng-1"));
        // Only a node group's entry: no node role taken.
        let mut s = setup_with_roles();
        s.node_roles.retain(|n| n.name == "ng-role");
        assert!(pick_node_role(&s).0.is_none());
    }

    #[test]
    fn terraform_let_go_forgets_the_whole_module() {
        let f = tf();
        let none = TerraformSteps::default();
        assert_eq!(let_go(&f, "module.karpenter"), LetGo::Terraform { module: "module.karpenter".into(), steps: none.clone() });
        assert_eq!(let_go(&f, "karpenter_prod"), LetGo::Terraform { module: "module.karpenter_prod".into(), steps: none });
        let text = crate::report::import::let_go_text(&let_go(&f, "module.karpenter"));
        assert!(text.lines().any(|l| l.trim() == "terraform state rm 'module.karpenter'"), "its own line: {text}");
        let rm = text.find("terraform state rm").unwrap();
        let removed = text.find("removed {").unwrap();
        let zero = text.find("`terraform plan` must show 0 to destroy before you apply").unwrap();
        assert!(rm < removed && removed < zero, "{text}");
        assert!(!text.contains("aws_iam_role"), "no hand-picked addresses: {text}");
    }

    /// Every `module.<m>.<output>` and `local.<name>` an HCL body reads, and the locals it
    /// declares: what `terraform validate` resolves.
    fn hcl_references(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
        use hcl_edit::expr::{Expression, TraversalOperator};
        use hcl_edit::visit::{Visit, visit_block, visit_traversal};
        #[derive(Default)]
        struct Refs {
            modules: Vec<String>,
            locals: Vec<String>,
            declared: Vec<String>,
        }
        impl Visit for Refs {
            fn visit_block(&mut self, node: &hcl_edit::structure::Block) {
                if node.ident.as_str() == "locals" {
                    self.declared.extend(node.body.attributes().map(|a| a.key.as_str().to_string()));
                }
                if node.ident.as_str() == "module" {
                    self.declared.extend(node.labels.iter().map(|l| format!("module.{}", l.as_str())));
                }
                visit_block(self, node)
            }
            fn visit_traversal(&mut self, node: &hcl_edit::expr::Traversal) {
                let attrs: Vec<&str> = node
                    .operators
                    .iter()
                    .map_while(|o| match o.value() {
                        TraversalOperator::GetAttr(i) => Some(i.as_str()),
                        _ => None,
                    })
                    .collect();
                if let Expression::Variable(root) = &node.expr {
                    match (root.as_str(), attrs.as_slice()) {
                        ("module", [m, output, ..]) => self.modules.push(format!("module.{m}.{output}")),
                        ("local", [name, ..]) => self.locals.push(name.to_string()),
                        _ => {}
                    }
                }
                visit_traversal(self, node)
            }
        }
        let body = hcl_edit::parser::parse_body(text).unwrap_or_else(|e| panic!("not HCL: {e}\n{text}"));
        let mut r = Refs::default();
        r.visit_body(&body);
        (r.modules, r.locals, r.declared)
    }

    /// The module's example, as `terraform validate` would judge it: references to modules that
    /// are not declared, and locals that are not.
    fn undeclared(text: &str) -> Vec<String> {
        let (modules, locals, declared) = hcl_references(text);
        let mut out: Vec<String> = modules
            .into_iter()
            .filter(|m| !declared.iter().any(|d| m.starts_with(&format!("{d}."))))
            .chain(locals.into_iter().filter(|l| !declared.contains(l)).map(|l| format!("local.{l}")))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Drop the top-level block whose header line starts with `header` (to its closing `}`).
    fn drop_block(text: &str, header: &str) -> String {
        let start = text.find(header).unwrap_or_else(|| panic!("no {header}"));
        let end = start + text[start..].find("\n}\n").unwrap() + 3;
        format!("{}{}", &text[..start], &text[end..])
    }

    /// The let-go steps on the module's own example: every output it exposes named with the
    /// value `karpctl output --format json` gives; the locals parse as HCL; done as they say
    /// (locals added, references replaced, the retired policy's resource and the block deleted),
    /// the example has no undeclared reference left, while deleting only the block leaves some.
    #[test]
    fn the_terraform_steps_make_the_modules_example_valid_without_the_module() {
        let example = include_str!("../tests/fixtures/terraform/karpenter-example.tf");
        assert!(undeclared(example).is_empty(), "the fixture is valid as it is: {:?}", undeclared(example));
        let without = drop_block(example, "module \"karpenter\" {");
        assert_eq!(
            undeclared(&without),
            [
                "module.karpenter.iam_role_name",
                "module.karpenter.namespace",
                "module.karpenter.node_iam_role_name",
                "module.karpenter.queue_name"
            ],
            "the oracle sees what validate refuses"
        );

        let mut f = tf();
        f.controller_policies.push(FoundPolicy {
            id: "KarpenterInstanceProfileGarbageCollection".into(),
            document: doc(json!([{"Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"}])),
        });
        let pol = sort_policies(&f, &[]);
        assert!(pol.retire.contains(&"KarpenterInstanceProfileGarbageCollection".to_string()), "{:?}", pol.retire);
        let steps = terraform_steps(&f, &pol, None);
        let module = "module.karpenter";
        let text = crate::report::import::let_go_text(&LetGo::Terraform { module: module.into(), steps: steps.clone() });

        // Every output of the module (v21's outputs.tf), each with its value or why there is none.
        let names: Vec<&str> = steps.outputs.iter().map(|o| o.name).collect();
        assert_eq!(
            names,
            [
                "iam_role_name",
                "iam_role_arn",
                "iam_role_unique_id",
                "queue_arn",
                "queue_name",
                "queue_url",
                "event_rules",
                "node_iam_role_name",
                "node_iam_role_arn",
                "node_iam_role_unique_id",
                "node_access_entry_arn",
                "instance_profile_arn",
                "instance_profile_id",
                "instance_profile_name",
                "instance_profile_unique",
                "namespace",
                "service_account",
            ]
        );
        let c = "say-when-east";
        for (local, value, key) in [
            ("karpenter_queue_name", format!("\"Karpenter-{c}\""), ".interruption_queue"),
            ("karpenter_queue_arn", format!("\"arn:aws:sqs:us-east-1:123456789012:Karpenter-{c}\""), ".interruption_queue_arn"),
            ("karpenter_iam_role_name", format!("\"KarpenterController-{TS}\""), ".controller_role_name"),
            ("karpenter_node_iam_role_name", format!("\"{c}\""), ".node_role_name"),
            ("karpenter_namespace", "\"kube-system\"".to_string(), ".service_account.namespace"),
            ("karpenter_instance_profile_name", "null".to_string(), ".instance_profile"),
        ] {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{local} ")))
                .unwrap_or_else(|| panic!("{local}: {text}"));
            assert!(line.contains(&format!("= {value} # {key}")), "{line}");
        }
        // The order a user follows: locals and policies, then state rm, then the block.
        let (locals_at, rm_at, block_at) = (
            text.find("  locals {").unwrap(),
            text.find("terraform state rm 'module.karpenter'").unwrap(),
            text.find("then delete the").unwrap(),
        );
        assert!(locals_at < rm_at && rm_at < block_at, "{text}");
        assert!(text.contains("KarpenterInstanceProfileGarbageCollection (inline): karpctl's policies replace it"), "{text}");
        assert!(text.contains("arn:aws:iam::123456789012:policy/ebs-kms (managed): kept; keep its resource, with `role = local.karpenter_iam_role_name`"), "{text}");
        assert!(
            !text.contains(&format!("policy/KarpenterController-{TS} (")),
            "the module's own policy goes with the module: {text}"
        );

        // The printed HCL parses: the locals block and the `removed` block.
        let block = |start: &str| {
            let from = text.find(start).unwrap();
            let to = from + text[from..].find("\n  }\n").unwrap() + 4;
            text[from..to].lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect::<Vec<_>>().join("\n")
        };
        let locals = block("  locals {");
        let removed = block("  removed {");
        hcl_edit::parser::parse_body(&removed).unwrap_or_else(|e| panic!("{e}: {removed}"));
        let (_, _, declared) = hcl_references(&locals);
        assert_eq!(declared.len(), 17, "{locals}");

        // Done as the text says, nothing is left undeclared.
        let mut done = drop_block(&without, "resource \"aws_iam_role_policy\" \"karpenter_instance_profile_gc\" {");
        done = done.replace("module.karpenter.", "local.karpenter_");
        done.push_str(&locals);
        assert!(undeclared(&done).is_empty(), "{:?}\n{done}", undeclared(&done));
        assert!(!done.contains("module.karpenter"), "{done}");
    }

    #[test]
    fn a_cloudformation_setup_is_told_by_its_rule_names() {
        let c = "say-when-east";
        let mut f = tf();
        f.controller = Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/{c}-karpenter")));
        f.node_role = Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterNodeRole-{c}")));
        f.queue = Some(c.into());
        f.rules = [("SpotInterrupt".to_string(), format!("Karpenter-{c}-SpotInterruptionRule-AbC123"))].into_iter().collect();
        assert_eq!(f.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") });
        let mut cut = f.clone();
        cut.rules.insert("SpotInterrupt".into(), "Karpenter-say-whe-SpotInterruptionRule-AbC123".into());
        assert_eq!(cut.tool(), Tool::CloudFormation { stack: format!("Karpenter-{c}") }, "a cut stack name is made whole");
        let LetGo::CloudFormation { stacks } = let_go(&f, "module.karpenter") else { panic!() };
        assert_eq!(
            stacks,
            [
                Stack { name: format!("Karpenter-{c}"), parameters: vec!["ClusterName".into()] },
                Stack { name: format!("eksctl-{c}-podidentityrole-kube-system-karpenter"), parameters: vec![] },
            ]
        );
        f.mode = Some(IdentityMode::Irsa);
        let LetGo::CloudFormation { stacks } = let_go(&f, "module.karpenter") else { panic!() };
        assert_eq!(stacks[1].name, format!("eksctl-{c}-addon-iamserviceaccount-kube-system-karpenter"));
    }

    #[test]
    fn cloudformation_steps_are_chained_and_check_retain_before_delete() {
        let l = LetGo::CloudFormation {
            stacks: vec![
                Stack { name: "Karpenter-c1".into(), parameters: vec!["ClusterName".into()] },
                Stack { name: "eksctl-c1-podidentityrole-kube-system-karpenter".into(), parameters: vec![] },
            ],
        };
        let text = crate::report::import::let_go_text(&l);
        assert!(text.contains("--query TemplateBody --output json"), "{text}");
        assert!(text.contains("\n  retained='def ind:"), "the check is defined once, before the blocks: {text}");
        assert!(!text.contains("--output text >"), "text output mangles JSON templates: {text}");
        let blocks: Vec<&str> = text.split("\n  s=").skip(1).collect();
        assert_eq!(blocks.len(), 2, "{text}");
        for b in &blocks {
            let chain = &b[b.find("aws cloudformation update-stack").unwrap()..];
            let chain = &chain[..chain.find("stack-delete-complete").unwrap()];
            // Every step after update-stack is chained, and the Retain check comes before delete-stack.
            let and_steps: Vec<&str> = chain.split("&& ").skip(1).collect();
            assert_eq!(and_steps.len(), 4, "update && wait && check && delete && wait: {b}");
            assert!(
                and_steps[1].starts_with("aws cloudformation get-template") && and_steps[1].contains("jq -e \"$retained\""),
                "{b}"
            );
            assert!(and_steps[2].starts_with("aws cloudformation delete-stack"), "{b}");
        }
        assert!(blocks[0].contains("ParameterKey=ClusterName,UsePreviousValue=true"), "{}", blocks[0]);
        assert!(!blocks[1].contains("--parameters"), "eksctl's role stack has no parameters: {}", blocks[1]);
    }
}
