//! What `import` found, as the plan needs it (`Found`: the roles, policies, queue and rules, and
//! which tool made them), and which of the controller's policies karpctl retires or keeps (pure).

use crate::catalog::RULES;
use crate::facts::setup::{NodeRole, Setup};
use crate::karpenter_iam::KarpenterVersion;
use crate::policy::analysis::role_name;
use crate::resources::iam::path_from_arn;
use crate::spec::IdentityMode;
use std::collections::BTreeMap;

/// A role as found: name, IAM path, ARN.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoundRole {
    pub name: String,
    pub path: String,
    pub arn: String,
}

impl FoundRole {
    pub(super) fn of_arn(arn: &str) -> FoundRole {
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
    pub(super) fn managed(&self) -> bool {
        self.id.starts_with("arn:")
    }
    pub(super) fn name(&self) -> &str {
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
pub(super) fn karpenter_actions() -> std::collections::BTreeSet<String> {
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
pub(super) fn pre_v1_note(id: &str, running: &str) -> String {
    format!(
        "{id} is Karpenter's pre-v1 controller policy (v0.33-v0.37), and CloudTrail shows Karpenter {running} still running: \
         the plan keeps it on the controller role. Upgrade Karpenter first; once only 1.0 or later runs, import again (or move it to retire_policies)"
    )
}

/// `s` is `<prefix>` followed by the Terraform provider's generated suffix (a UTC timestamp and
/// a counter: digits, then hex), at least 14 characters.
pub(super) fn tf_generated(s: &str, prefix: &str) -> bool {
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
    pub(super) fn path(&self) -> String {
        self.controller.as_ref().or(self.node_role.as_ref()).map(|r| r.path.clone()).unwrap_or_else(|| "/".into())
    }
}

/// Pure: which node role is Karpenter's, and whether karpctl may own it. The role the controller
/// may `iam:PassRole` is the one Karpenter launches nodes with and wins outright; an access entry
/// decides only when PassRole names none. A role behind a managed node group is never taken as
/// Karpenter's own: used as it is (`existing_node_role`) when the controller passes it, else left.
/// Returns (the role, why it is only used, notes on roles left).
pub(super) fn pick_node_role(s: &Setup) -> (Option<&NodeRole>, Option<String>, Vec<String>) {
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
pub(super) fn found_of(s: &Setup, version: KarpenterVersion) -> Found {
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{TS, doc, managed, tf};
    use super::super::plan_text::plan_toml;
    use super::*;
    use serde_json::json;

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
}
