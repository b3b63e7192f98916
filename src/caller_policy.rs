//! `karpctl output --format caller-policy`: the IAM policy karpctl itself needs for a plan, per
//! command (docs/security.md), built by a pure function from the plan's names, path and ARNs.
//! Reads use `*` only where the Service Authorization Reference gives no resource type.

use crate::facts::prepared::Facts;
use crate::model::{Kind, NodeSpec};
use crate::spec::{IdentityMode, Spec};
use crate::tags::OWNER_TAG;
use crate::tags::{DISCOVERY_TAG, MARKER_TAG};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// A command whose needs the policy grants (`--for`; the enum lives with the flags in cli.rs).
pub use crate::cli::PolicyFor as For;

/// Every command: what the policy grants without `--for`.
const ALL_COMMANDS: [For; 5] = [For::Diff, For::Up, For::Down, For::Doctor, For::Import];

/// IAM's limit on a role's inline policies (whitespace not counted): a policy within it is
/// printed as one document, for `aws iam put-role-policy`.
pub const INLINE_POLICY_LIMIT: usize = 10240;

/// IAM's limit on a customer managed policy (whitespace not counted): a bigger policy is printed
/// as parts within it, each one managed policy to attach to the role.
pub const MANAGED_POLICY_LIMIT: usize = 6144;

/// One cluster's plan with the account facts its ARNs need.
pub struct Target<'a> {
    pub spec: &'a Spec,
    pub account_id: &'a str,
    pub partition: &'a str,
    pub region: &'a str,
}

/// Actions with no resource type in the Service Authorization Reference: only `*` grants them.
/// (action, the reason docs/security.md gives)
pub const STAR_READS: &[(&str, &str)] = &[
    ("ec2:DescribeSubnets", "EC2 Describe* actions support no resource-level permissions"),
    ("ec2:DescribeSecurityGroups", "EC2 Describe* actions support no resource-level permissions"),
    ("ec2:DescribeRouteTables", "EC2 Describe* actions support no resource-level permissions"),
    ("ec2:DescribeVpcs", "EC2 Describe* actions support no resource-level permissions"),
    ("ec2:DescribeVpcEndpoints", "EC2 Describe* actions support no resource-level permissions"),
    ("ec2:DescribeTags", "EC2 Describe* actions support no resource-level permissions"),
    ("iam:ListRoles", "no resource type (lists the account's roles by path prefix)"),
    ("iam:ListPolicies", "no resource type (lists the account's policies by path prefix)"),
    ("iam:GetAccountSummary", "no resource type (account quotas)"),
    ("events:ListRules", "no resource type (lists the bus's rules by name prefix)"),
    ("events:ListRuleNamesByTarget", "no resource type (the rules sending to the queue, whoever made them)"),
    ("eks:ListClusters", "no resource type (names the clusters when the plan's is missing)"),
    ("cloudtrail:LookupEvents", "no resource type (the running Karpenter's calls)"),
];

/// Reads only doctor makes, also with no resource type.
const DOCTOR_STAR_READS: &[&str] = &["cloudwatch:GetMetricData"];

const IAM_READS: &[&str] = &[
    "iam:GetRole",
    "iam:ListAttachedRolePolicies",
    "iam:ListRolePolicies",
    "iam:ListInstanceProfilesForRole",
    "iam:GetPolicy",
    "iam:GetPolicyVersion",
    "iam:ListPolicyVersions",
    "iam:ListEntitiesForPolicy",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfiles",
];

const EKS_READS: &[&str] = &[
    "eks:DescribeCluster",
    "eks:ListAccessEntries",
    "eks:DescribeAccessEntry",
    "eks:ListPodIdentityAssociations",
    "eks:DescribePodIdentityAssociation",
    "eks:DescribeAddon",
];

/// What doctor and import read besides: another tool's inline policies and node groups.
const WIDE_EXTRA_READS: &[&str] = &["iam:GetRolePolicy", "eks:ListNodegroups", "eks:DescribeNodegroup"];

const SQS_READS: &[&str] = &["sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:ListQueueTags"];
const EVENTS_READS: &[&str] = &["events:DescribeRule", "events:ListTargetsByRule", "events:ListTagsForResource"];
const KMS_READS: &[&str] = &["kms:DescribeKey", "kms:GetKeyPolicy", "kms:ListResourceTags"];

/// One statement before it is written out.
#[derive(Debug, Clone, PartialEq)]
struct Statement {
    sid: String,
    actions: BTreeSet<String>,
    resources: BTreeSet<String>,
    condition: Option<Value>,
}

fn st(sid: &str, actions: &[&str], resources: impl IntoIterator<Item = String>, condition: Option<Value>) -> Statement {
    Statement {
        sid: sid.to_string(),
        actions: actions.iter().map(|a| a.to_string()).collect(),
        resources: resources.into_iter().collect(),
        condition,
    }
}

/// Which of `wanted` need writes (`diff`, `doctor` and `import` only read).
fn writes(wanted: &BTreeSet<For>) -> (bool, bool) {
    (wanted.contains(&For::Up), wanted.contains(&For::Down))
}

/// The names and ARNs of one plan's objects, from the plan's nodes.
struct Owned {
    roles: BTreeSet<String>,
    /// Roles karpctl creates (not `existing_node_role`).
    own_roles: BTreeSet<String>,
    policies: BTreeSet<String>,
    attached: BTreeSet<String>,
    profiles: BTreeSet<String>,
    rules: BTreeSet<String>,
    queue: Option<String>,
    node_role_arns: BTreeSet<String>,
    controller_role_arn: String,
}

fn owned(t: &Target) -> Owned {
    let facts = Facts {
        account_id: t.account_id.to_string(),
        region: t.region.to_string(),
        partition: t.partition.to_string(),
        ..Default::default()
    };
    let iam = |kind: &str, name: &str| format!("arn:{}:iam::{}:{kind}{}{name}", t.partition, t.account_id, t.spec.identity.path);
    let mut o = Owned {
        roles: BTreeSet::new(),
        own_roles: BTreeSet::new(),
        policies: BTreeSet::new(),
        attached: BTreeSet::new(),
        profiles: [iam("instance-profile", &t.spec.identity.instance_profile_name.name)].into(),
        rules: BTreeSet::new(),
        queue: None,
        node_role_arns: BTreeSet::new(),
        controller_role_arn: crate::arns::controller_role_arn(t.spec, &facts),
    };
    // Both rule layouts: `up` deletes the rules of the layout the plan left.
    let mut other = t.spec.clone();
    other.interruption.merged = !other.interruption.merged;
    other.interruption.enabled = true;
    for (i, spec) in [t.spec, &other].into_iter().enumerate() {
        for n in crate::desired::build(spec, &facts) {
            match (&n.kind, &n.spec) {
                (Kind::EventRule, _) => {
                    o.rules.insert(crate::arns::rule_arn(&facts, &n.name));
                }
                _ if i == 1 => {}
                (Kind::IamRole, NodeSpec::IamRole(a)) => {
                    o.roles.insert(a.arn.clone());
                    o.own_roles.insert(a.arn.clone());
                }
                (Kind::IamPolicy, NodeSpec::IamPolicy(a)) => {
                    o.policies.insert(a.arn.clone());
                }
                (Kind::RolePolicyAttachment, NodeSpec::RolePolicyAttachment(a)) => {
                    o.attached.insert(a.policy_arn.clone());
                }
                (Kind::InstanceProfile, NodeSpec::InstanceProfile(a)) if !a.arn.is_empty() => {
                    o.profiles.insert(a.arn.clone());
                }
                (Kind::AccessEntry, NodeSpec::AccessEntry(e)) => {
                    o.node_role_arns.insert(e.principal_arn.clone());
                }
                (Kind::Queue, NodeSpec::Queue(a)) => o.queue = Some(a.arn.clone()),
                _ => {}
            }
        }
    }
    if let Some(e) = &t.spec.identity.existing_node_role {
        let arn = if e.starts_with("arn:") { e.clone() } else { format!("arn:{}:iam::{}:role/{e}", t.partition, t.account_id) };
        o.roles.insert(arn.clone());
        o.node_role_arns.insert(arn);
    }
    o.node_role_arns.retain(|a| !a.is_empty());
    if o.queue.is_none() && t.spec.interruption.enabled {
        o.queue = Some(crate::arns::queue_arn(&facts, &t.spec.interruption.queue_name));
    }
    o
}

/// `arn:<p>:iam::<a>:<kind>/<path>/<name>` as `arn:<p>:iam::<a>:<kind>/<name>`.
fn without_path(arn: &str) -> Option<String> {
    let (head, rest) = arn.split_once(":iam::")?;
    let (account, object) = rest.split_once(':')?;
    let (kind, tail) = object.split_once('/')?;
    let name = tail.rsplit('/').next()?;
    Some(format!("{head}:iam::{account}:{kind}/{name}"))
}

/// The statements one plan needs for the commands `wanted` (pure).
fn statements(t: &Target, wanted: &BTreeSet<For>) -> Vec<Statement> {
    let (p, a, r, c) = (t.partition, t.account_id, t.region, &t.spec.cluster);
    let path = &t.spec.identity.path;
    let o = owned(t);
    let cluster_arn = format!("arn:{p}:eks:{r}:{a}:cluster/{c}");
    let eks_objects =
        ["access-entry", "podidentityassociation", "addon", "nodegroup"].map(|k| format!("arn:{p}:eks:{r}:{a}:{k}/{c}/*"));
    let eks: Vec<String> = std::iter::once(cluster_arn.clone()).chain(eks_objects.iter().cloned()).collect();
    let key_arns = || [format!("arn:{p}:kms:{r}:{a}:key/*")];
    let wide = wanted.contains(&For::Doctor) || wanted.contains(&For::Import);
    let has_key = t.spec.interruption.enabled && t.spec.interruption.kms_key_id.is_some();
    let scoped = wanted.iter().any(|f| matches!(f, For::Diff | For::Up | For::Down));
    let (up, down) = writes(wanted);
    let mut out = Vec::new();

    // Reads.
    let mut star: Vec<&str> = STAR_READS.iter().map(|(a, _)| *a).collect();
    if wanted.contains(&For::Doctor) {
        star.extend(DOCTOR_STAR_READS);
    }
    out.push(st("ReadNoResourceType", &star, ["*".to_string()], None));
    if wanted.iter().any(|f| matches!(f, For::Diff | For::Up | For::Doctor)) {
        // The EC2 vCPU quotas a fleet's launches hit (read only then; the quota's own ARN).
        out.push(st("ReadEc2Quotas", &["servicequotas:GetServiceQuota"], [format!("arn:{p}:servicequotas:{r}:{a}:ec2/*")], None));
    }
    if wide {
        // doctor and import find what another tool made: every name in the account is a candidate.
        let mut iam_reads = IAM_READS.to_vec();
        iam_reads.extend(WIDE_EXTRA_READS.iter().filter(|a| a.starts_with("iam:")));
        let mut eks_reads = EKS_READS.to_vec();
        eks_reads.extend(WIDE_EXTRA_READS.iter().filter(|a| a.starts_with("eks:")));
        out.push(st(
            "ReadIamAccount",
            &iam_reads,
            ["role/*", "policy/*", "instance-profile/*", "oidc-provider/*"].map(|k| format!("arn:{p}:iam::{a}:{k}")),
            None,
        ));
        out.push(st("ReadEksCluster", &eks_reads, eks.clone(), None));
        out.push(st("ReadQueues", SQS_READS, [format!("arn:{p}:sqs:{r}:{a}:*")], None));
        out.push(st("ReadRules", EVENTS_READS, [format!("arn:{p}:events:{r}:{a}:rule/*")], None));
        // import finds the key of another tool's queue; doctor reads the plan's.
        if has_key || wanted.contains(&For::Import) {
            out.push(st("ReadKeys", KMS_READS, key_arns(), None));
        }
        if wanted.contains(&For::Doctor) {
            out.push(st(
                "SimulateRoles",
                &["iam:SimulatePrincipalPolicy", "iam:GetContextKeysForPrincipalPolicy"],
                [format!("arn:{p}:iam::{a}:role/*")],
                None,
            ));
        }
    }
    if scoped && !wide {
        let mut iam: BTreeSet<String> =
            o.roles.iter().chain(&o.policies).chain(&o.attached).chain(&o.profiles).cloned().collect();
        // What karpctl left under its path (found by listing, removed as leftovers).
        iam.extend(["role", "policy", "instance-profile"].map(|k| format!("arn:{p}:iam::{a}:{k}{path}*")));
        // A role or profile that does not exist (yet) has no path IAM could know: a read of it
        // by name is authorized on `<kind>/<name>`.
        iam.extend(o.own_roles.iter().chain(&o.profiles).filter_map(|arn| without_path(arn)));
        if t.spec.identity.mode == IdentityMode::Irsa {
            iam.insert(format!("arn:{p}:iam::{a}:oidc-provider/*"));
        }
        out.push(st("ReadIam", IAM_READS, iam, None));
        out.push(st("ReadEksCluster", EKS_READS, eks.clone(), None));
        if let Some(q) = &o.queue {
            out.push(st("ReadQueue", SQS_READS, [q.clone()], None));
        }
        out.push(st("ReadRules", EVENTS_READS, o.rules.iter().cloned(), None));
        // Without a key in the plan karpctl still looks up `alias/karpenter-<c>`, which KMS
        // answers NotFoundException without asking for a permission (no key to authorize on).
        if has_key {
            out.push(st("ReadKeys", KMS_READS, key_arns(), None));
        }
    }
    if !(up || down) {
        return out;
    }

    // Writes: `up` makes and repairs, `down` removes; both remove what the plan no longer wants.
    let pick = |both: &[&'static str], up_only: &[&'static str]| -> Vec<&'static str> {
        let mut v = both.to_vec();
        if up {
            v.extend(up_only);
        }
        v
    };
    let under_path = |k: &str| format!("arn:{p}:iam::{a}:{k}{path}*");
    let roles: BTreeSet<String> = o.own_roles.iter().cloned().chain([under_path("role")]).collect();
    out.push(st(
        "WriteOwnRoles",
        &pick(
            &["iam:DeleteRole", "iam:DetachRolePolicy", "iam:DeleteRolePolicy", "iam:UntagRole"],
            &[
                "iam:CreateRole",
                "iam:TagRole",
                "iam:UpdateAssumeRolePolicy",
                "iam:PutRolePermissionsBoundary",
                "iam:AttachRolePolicy",
            ],
        ),
        roles,
        None,
    ));
    let policies: BTreeSet<String> = o.policies.iter().cloned().chain([under_path("policy")]).collect();
    out.push(st(
        "WriteOwnPolicies",
        &pick(
            &["iam:DeletePolicy", "iam:DeletePolicyVersion", "iam:UntagPolicy"],
            &["iam:CreatePolicy", "iam:CreatePolicyVersion", "iam:SetDefaultPolicyVersion", "iam:TagPolicy"],
        ),
        policies,
        None,
    ));
    // A policy of karpctl's is detached from whoever holds it before it is deleted.
    out.push(st(
        "DetachOwnPoliciesFromOthers",
        &["iam:DetachRolePolicy", "iam:DetachGroupPolicy", "iam:DetachUserPolicy"],
        ["role/*", "group/*", "user/*"].map(|k| format!("arn:{p}:iam::{a}:{k}")),
        Some(json!({"ArnLike": {"iam:PolicyARN": under_path("policy")}})),
    ));
    let profiles: BTreeSet<String> = o.profiles.iter().cloned().chain([under_path("instance-profile")]).collect();
    out.push(st(
        "WriteOwnInstanceProfiles",
        &pick(
            &["iam:DeleteInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:UntagInstanceProfile"],
            &["iam:CreateInstanceProfile", "iam:AddRoleToInstanceProfile", "iam:TagInstanceProfile"],
        ),
        profiles,
        None,
    ));
    if up {
        if t.spec.identity.mode == IdentityMode::PodIdentity {
            out.push(st(
                "PassControllerRoleToPodIdentity",
                &["iam:PassRole"],
                [o.controller_role_arn.clone()],
                Some(json!({"StringEquals": {"iam:PassedToService": "pods.eks.amazonaws.com"}})),
            ));
        }
        // iam:AddRoleToInstanceProfile passes the node role to EC2 (an access entry passes none).
        if t.spec.identity.instance_profile.is_some() && !o.node_role_arns.is_empty() {
            out.push(st(
                "PassNodeRoleToProfile",
                &["iam:PassRole"],
                o.node_role_arns.iter().cloned(),
                Some(json!({"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}})),
            ));
        }
        if t.spec.create_spot_role {
            out.push(st(
                "CreateSpotServiceLinkedRole",
                &["iam:CreateServiceLinkedRole"],
                [format!("arn:{p}:iam::{a}:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot")],
                Some(json!({"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}})),
            ));
        }
        let mut on_cluster = vec!["eks:CreateAccessEntry", "eks:CreatePodIdentityAssociation"];
        if t.spec.identity.create_pod_identity_agent {
            on_cluster.push("eks:CreateAddon");
        }
        out.push(st("CreateEksObjectsOnCluster", &on_cluster, [cluster_arn.clone()], None));
    }
    out.push(st(
        "WriteEksObjectsOfCluster",
        &pick(
            &["eks:DeleteAccessEntry", "eks:DeletePodIdentityAssociation", "eks:UntagResource"],
            &["eks:UpdatePodIdentityAssociation", "eks:TagResource"],
        ),
        eks_objects.iter().cloned(),
        None,
    ));
    if let Some(q) = &o.queue {
        out.push(st(
            "WriteQueue",
            &pick(&["sqs:DeleteQueue", "sqs:UntagQueue"], &["sqs:CreateQueue", "sqs:SetQueueAttributes", "sqs:TagQueue"]),
            [q.clone()],
            None,
        ));
    }
    out.push(st(
        "WriteRules",
        &pick(
            &["events:RemoveTargets", "events:DeleteRule", "events:UntagResource"],
            &["events:PutRule", "events:PutTargets", "events:TagResource"],
        ),
        o.rules.iter().cloned(),
        None,
    ));
    let tagged = ["subnet/*", "security-group/*"].map(|k| format!("arn:{p}:ec2:{r}:{a}:{k}"));
    let keys = json!([DISCOVERY_TAG, MARKER_TAG]);
    if up {
        let mut req = Map::new();
        req.insert(format!("aws:RequestTag/{DISCOVERY_TAG}"), json!(c));
        req.insert(format!("aws:RequestTag/{MARKER_TAG}"), json!(c));
        out.push(st(
            "TagDiscovery",
            &["ec2:CreateTags"],
            tagged.clone(),
            Some(json!({"ForAllValues:StringEquals": {"aws:TagKeys": keys}, "StringEqualsIfExists": req})),
        ));
    }
    let mut marked = Map::new();
    marked.insert(format!("aws:ResourceTag/{MARKER_TAG}"), json!(c));
    out.push(st(
        "UntagDiscovery",
        &["ec2:DeleteTags"],
        tagged,
        Some(json!({"ForAllValues:StringEquals": {"aws:TagKeys": keys}, "StringEquals": marked})),
    ));
    if t.spec.interruption.create_key {
        let mut owner = Map::new();
        owner.insert(format!("aws:RequestTag/{OWNER_TAG}"), json!(c));
        if up {
            out.push(st(
                "CreateKeyTaggedForCluster",
                &["kms:CreateKey"],
                ["*".to_string()],
                Some(json!({"StringEquals": owner})),
            ));
        }
        let mut mine = Map::new();
        mine.insert(format!("aws:ResourceTag/{OWNER_TAG}"), json!(c));
        out.push(st(
            "WriteKeyOfCluster",
            &pick(
                &["kms:ScheduleKeyDeletion", "kms:DeleteAlias", "kms:UntagResource"],
                &[
                    "kms:CreateAlias",
                    "kms:PutKeyPolicy",
                    "kms:EnableKey",
                    "kms:CancelKeyDeletion",
                    "kms:UpdateKeyDescription",
                    "kms:TagResource",
                ],
            ),
            key_arns(),
            Some(json!({"StringEquals": mine})),
        ));
        out.push(st(
            "WriteKeyAlias",
            &pick(&["kms:DeleteAlias"], &["kms:CreateAlias"]),
            [format!("arn:{p}:kms:{r}:{a}:{}", crate::spec::created_key_alias(c))],
            None,
        ));
    }
    out
}

/// Statements of several plans: one per Sid where actions and condition agree (resources
/// joined), else numbered.
fn merge(all: Vec<Statement>) -> Vec<Statement> {
    let mut out: Vec<Statement> = Vec::new();
    for s in all {
        if let Some(m) = out.iter_mut().find(|m| m.sid == s.sid && m.actions == s.actions && m.condition == s.condition) {
            m.resources.extend(s.resources);
            continue;
        }
        let n = out.iter().filter(|m| m.sid == s.sid || m.sid.starts_with(&format!("{}N", s.sid))).count();
        let sid = if n == 0 { s.sid.clone() } else { format!("{}N{n}", s.sid) };
        out.push(Statement { sid, ..s });
    }
    out
}

fn statement_json(s: &Statement) -> Value {
    let one_or_many = |v: &BTreeSet<String>| {
        if v.len() == 1 { json!(v.iter().next().unwrap()) } else { json!(v.iter().collect::<Vec<_>>()) }
    };
    let mut m = Map::new();
    m.insert("Sid".into(), json!(s.sid));
    m.insert("Effect".into(), json!("Allow"));
    m.insert("Action".into(), one_or_many(&s.actions));
    m.insert("Resource".into(), one_or_many(&s.resources));
    if let Some(c) = &s.condition {
        m.insert("Condition".into(), c.clone());
    }
    Value::Object(m)
}

/// A statement too big for one part, cut into statements of fewer resources (`<Sid>P<n>`).
fn chunks(s: &Statement) -> Vec<Statement> {
    if size(&document(&[statement_json(s)])) <= MANAGED_POLICY_LIMIT / 2 {
        return vec![s.clone()];
    }
    let (mut out, mut cur) = (Vec::new(), Statement { resources: BTreeSet::new(), ..s.clone() });
    for r in &s.resources {
        cur.resources.insert(r.clone());
        if size(&document(&[statement_json(&cur)])) > MANAGED_POLICY_LIMIT / 2 && cur.resources.len() > 1 {
            cur.resources.remove(r);
            out.push(std::mem::replace(&mut cur, Statement { resources: [r.clone()].into(), ..s.clone() }));
        }
    }
    out.push(cur);
    for (i, c) in out.iter_mut().enumerate() {
        c.sid = format!("{}P{}", s.sid, i + 1);
    }
    out
}

#[cfg(test)]
/// Whether an IAM resource pattern (`*` any run, `?` one character) matches an ARN.
pub fn arn_matches(pattern: &str, arn: &str) -> bool {
    fn go(p: &[u8], a: &[u8]) -> bool {
        match (p.first(), a.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], a) || (!a.is_empty() && go(p, &a[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &a[1..]),
            (Some(x), Some(y)) if x == y => go(&p[1..], &a[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), arn.as_bytes())
}

fn document(statements: &[Value]) -> Value {
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// The policy for `targets` and the commands `wanted` (all when empty): one document when it fits
/// an inline role policy, else parts that each fit a managed policy (compact JSON sizes).
pub fn build(targets: &[Target], wanted: &[For]) -> Vec<Value> {
    let wanted: BTreeSet<For> = if wanted.is_empty() { ALL_COMMANDS.into() } else { wanted.iter().copied().collect() };
    let merged = merge(targets.iter().flat_map(|t| statements(t, &wanted)).collect());
    let whole = document(&merged.iter().map(statement_json).collect::<Vec<_>>());
    if size(&whole) <= INLINE_POLICY_LIMIT {
        return vec![whole];
    }
    let mut parts: Vec<Vec<Value>> = vec![Vec::new()];
    for s in merged.iter().flat_map(chunks).map(|s| statement_json(&s)) {
        let last = parts.last_mut().expect("one part");
        last.push(s);
        if size(&document(last)) > MANAGED_POLICY_LIMIT && last.len() > 1 {
            let s = last.pop().expect("just pushed");
            parts.push(vec![s]);
        }
    }
    parts.iter().map(|p| document(p)).collect()
}

/// A document's size as IAM counts it (no whitespace).
pub fn size(doc: &Value) -> usize {
    doc.to_string().len()
}

#[cfg(test)]
/// The actions a policy document allows, by Sid (for docs and tests).
pub fn actions_by_sid(doc: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for s in doc["Statement"].as_array().into_iter().flatten() {
        let acts = match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(v) => v.iter().filter_map(|a| a.as_str().map(String::from)).collect(),
            _ => vec![],
        };
        out.insert(s["Sid"].as_str().unwrap_or_default().to_string(), acts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(c: &str) -> Spec {
        crate::plan_file::defaults(c).expect("defaults")
    }

    fn target(s: &Spec) -> Target<'_> {
        Target { spec: s, account_id: "123456789012", partition: "aws", region: "us-east-1" }
    }

    /// Every part's statements as one document, to look into.
    fn policy(t: &[Target], f: &[For]) -> Value {
        let st: Vec<Value> = build(t, f).iter().flat_map(|d| d["Statement"].as_array().unwrap().clone()).collect();
        document(&st)
    }

    fn all_actions(doc: &Value) -> BTreeSet<String> {
        actions_by_sid(doc).into_values().flatten().collect()
    }

    fn find<'a>(doc: &'a Value, sid: &str) -> &'a Value {
        doc["Statement"].as_array().unwrap().iter().find(|s| s["Sid"] == sid).unwrap_or_else(|| panic!("{sid} in {doc:#}"))
    }

    fn resources(s: &Value) -> Vec<String> {
        match &s["Resource"] {
            Value::String(r) => vec![r.clone()],
            Value::Array(v) => v.iter().map(|r| r.as_str().unwrap().to_string()).collect(),
            _ => vec![],
        }
    }

    const WRITE_VERBS: &[&str] = &[
        "Create", "Delete", "Put", "Tag", "Untag", "Update", "Attach", "Detach", "Remove", "Add", "Set", "Pass", "Schedule",
        "Enable", "Cancel",
    ];

    fn is_write(action: &str) -> bool {
        let op = action.split(':').nth(1).unwrap();
        WRITE_VERBS.iter().any(|v| op.starts_with(v))
    }

    #[test]
    fn diff_and_doctor_get_reads_only() {
        let s = spec("prod-east");
        for f in [For::Diff, For::Doctor, For::Import] {
            let docs = build(&[target(&s)], &[f]);
            assert_eq!(docs.len(), 1);
            let writes: Vec<_> = all_actions(&docs[0]).into_iter().filter(|a| is_write(a)).collect();
            assert!(writes.is_empty(), "{f:?} allows {writes:?}");
        }
    }

    #[test]
    fn star_only_for_actions_without_a_resource_type() {
        let s = spec("prod-east");
        let doc = &policy(&[target(&s)], &[]);
        let star: BTreeSet<&str> = STAR_READS.iter().map(|(a, _)| *a).chain(DOCTOR_STAR_READS.iter().copied()).collect();
        for st in doc["Statement"].as_array().unwrap() {
            if resources(st).iter().any(|r| r == "*") {
                let acts = actions_by_sid(&document(std::slice::from_ref(st))).into_values().flatten().collect::<Vec<_>>();
                for a in acts {
                    assert!(star.contains(a.as_str()) || (a == "kms:CreateKey" && st.get("Condition").is_some()), "{a} on *");
                }
            }
        }
    }

    #[test]
    fn up_writes_are_scoped_to_the_plan() {
        let s = spec("prod-east");
        let doc = &policy(&[target(&s)], &[For::Up]);
        assert_eq!(
            resources(find(doc, "WriteOwnRoles")),
            [
                "arn:aws:iam::123456789012:role/karpctl/prod-east/*",
                "arn:aws:iam::123456789012:role/karpctl/prod-east/KarpenterController-prod-east",
                "arn:aws:iam::123456789012:role/karpctl/prod-east/KarpenterNodeRole-prod-east",
            ]
        );
        assert_eq!(resources(find(doc, "WriteQueue")), ["arn:aws:sqs:us-east-1:123456789012:Karpenter-prod-east"]);
        for r in resources(find(doc, "WriteRules")) {
            assert!(r.starts_with("arn:aws:events:us-east-1:123456789012:rule/Karpenter-prod-east-"), "{r}");
        }
        let pass = find(doc, "PassControllerRoleToPodIdentity");
        assert_eq!(pass["Condition"]["StringEquals"]["iam:PassedToService"], "pods.eks.amazonaws.com");
        assert_eq!(resources(pass), ["arn:aws:iam::123456789012:role/karpctl/prod-east/KarpenterController-prod-east"]);
        let tag = find(doc, "TagDiscovery");
        assert_eq!(tag["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"], json!([DISCOVERY_TAG, MARKER_TAG]));
        assert_eq!(resources(find(doc, "CreateEksObjectsOnCluster")), ["arn:aws:eks:us-east-1:123456789012:cluster/prod-east"]);
        assert!(all_actions(doc).contains("iam:CreateRole"));
    }

    #[test]
    fn down_gets_no_create() {
        let s = spec("prod-east");
        let doc = &policy(&[target(&s)], &[For::Down]);
        let acts = all_actions(doc);
        assert!(acts.contains("iam:DeleteRole") && acts.contains("sqs:DeleteQueue") && acts.contains("ec2:DeleteTags"));
        let creates: Vec<_> =
            acts.iter().filter(|a| a.contains(":Create") || a.contains(":Put") || *a == "iam:PassRole").collect();
        assert!(creates.is_empty(), "{creates:?}");
    }

    #[test]
    fn one_clusters_writes_do_not_reach_a_cluster_whose_name_it_prefixes() {
        let (prod, east) = (spec("prod"), spec("prod-east"));
        let doc = &policy(&[target(&prod)], &[For::Up, For::Down]);
        let theirs = &policy(&[target(&east)], &[For::Up]);
        // Every ARN named in prod-east's policy that is not a pattern, and its path's objects.
        let mut arns: Vec<String> = theirs["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(resources)
            .filter(|r| r.contains("prod-east"))
            .map(|r| r.replace('*', "x"))
            .collect();
        arns.push("arn:aws:eks:us-east-1:123456789012:access-entry/prod-east/role/1/x/y".into());
        assert!(arns.len() > 8, "{arns:?}");
        for st in doc["Statement"].as_array().unwrap() {
            let acts = actions_by_sid(&document(std::slice::from_ref(st))).into_values().flatten().collect::<Vec<_>>();
            if !acts.iter().any(|a| is_write(a)) || st.get("Condition").is_some() {
                continue;
            }
            for r in resources(st) {
                for a in &arns {
                    assert!(!arn_matches(&r, a), "{} on {r} reaches prod-east's {a}", st["Sid"]);
                }
            }
        }
    }

    #[test]
    fn patterns_match_as_iam_does() {
        assert!(arn_matches("arn:aws:iam::1:role/karpctl/c/*", "arn:aws:iam::1:role/karpctl/c/R"));
        assert!(!arn_matches("arn:aws:iam::1:role/karpctl/c/*", "arn:aws:iam::1:role/karpctl/c-2/R"));
        assert!(arn_matches("*", "anything"));
        assert!(arn_matches("a?c", "abc") && !arn_matches("a?c", "ac"));
    }

    #[test]
    fn kms_create_is_conditioned_on_the_clusters_tag() {
        let mut s = spec("prod-east");
        s.interruption.create_key = true;
        s.interruption.kms_key_id = Some(crate::spec::created_key_alias("prod-east"));
        let doc = &policy(&[target(&s)], &[For::Up]);
        let c = find(doc, "CreateKeyTaggedForCluster");
        assert_eq!(c["Resource"], "*");
        assert_eq!(c["Condition"]["StringEquals"][format!("aws:RequestTag/{OWNER_TAG}")], "prod-east");
        let d = &policy(&[target(&spec("prod-east"))], &[For::Up]);
        assert!(!all_actions(d).contains("kms:CreateKey"), "no key, no kms:CreateKey");
    }

    #[test]
    fn spot_role_by_service_name() {
        let mut s = spec("prod-east");
        s.create_spot_role = true;
        let doc = &policy(&[target(&s)], &[For::Up]);
        let st = find(doc, "CreateSpotServiceLinkedRole");
        assert_eq!(st["Condition"]["StringEquals"]["iam:AWSServiceName"], "spot.amazonaws.com");
    }

    #[test]
    fn sizes_fit_iam_and_twenty_clusters_split_into_parts() {
        let one = spec("prod-east");
        let docs = build(&[target(&one)], &[]);
        assert_eq!(docs.len(), 1, "{}", size(&docs[0]));
        assert!(size(&docs[0]) <= INLINE_POLICY_LIMIT);
        let specs: Vec<Spec> = (0..20).map(|i| spec(&format!("cluster-{i:02}"))).collect();
        let targets: Vec<Target> = specs.iter().map(target).collect();
        let docs = build(&targets, &[For::Up]);
        for d in &docs {
            assert!(size(d) <= MANAGED_POLICY_LIMIT, "{}", size(d));
            let sids: Vec<_> = actions_by_sid(d).into_keys().collect();
            assert!(sids.iter().all(|s| s.chars().all(|c| c.is_ascii_alphanumeric())), "{sids:?}");
        }
        // Every cluster's queue is granted somewhere.
        let text: String = docs.iter().map(|d| d.to_string()).collect();
        for i in 0..20 {
            assert!(text.contains(&format!(":Karpenter-cluster-{i:02}\"")), "cluster-{i:02}");
        }
    }

    #[test]
    fn missing_objects_are_read_by_bare_name_and_keys_only_with_a_key() {
        let s = spec("prod-east");
        let diff = &policy(&[target(&s)], &[For::Diff]);
        let reads = resources(find(diff, "ReadIam"));
        for name in ["role/KarpenterNodeRole-prod-east", "role/KarpenterController-prod-east"] {
            assert!(reads.contains(&format!("arn:aws:iam::123456789012:{name}")), "{name}: {reads:?}");
        }
        assert_eq!(without_path("arn:aws:iam::1:role/karpctl/c/R").as_deref(), Some("arn:aws:iam::1:role/R"));
        assert!(!actions_by_sid(diff).contains_key("ReadKeys"), "no key in the plan");
        assert!(actions_by_sid(&policy(&[target(&s)], &[For::Import])).contains_key("ReadKeys"), "another tool's key");
        let mut k = spec("prod-east");
        k.interruption.kms_key_id = Some("alias/queue".into());
        assert!(actions_by_sid(&policy(&[target(&k)], &[For::Diff])).contains_key("ReadKeys"));
    }

    #[test]
    fn the_node_role_is_passed_only_to_an_instance_profile() {
        let s = spec("prod-east");
        assert!(!actions_by_sid(&policy(&[target(&s)], &[For::Up])).contains_key("PassNodeRoleToProfile"));
        let mut p = spec("prod-east");
        p.identity.instance_profile = Some(p.identity.instance_profile_name.clone());
        let doc = &policy(&[target(&p)], &[For::Up]);
        let pass = find(doc, "PassNodeRoleToProfile");
        assert_eq!(pass["Condition"]["StringEquals"]["iam:PassedToService"], "ec2.amazonaws.com");
        assert_eq!(resources(pass), ["arn:aws:iam::123456789012:role/karpctl/prod-east/KarpenterNodeRole-prod-east"]);
    }

    #[test]
    fn grant_command_names_the_command() {
        use crate::policy::doc::grant_command;
        assert_eq!(grant_command("a", "up"), "karpctl output --cluster a --format caller-policy --for up");
    }
}
