//! The IAM policy simulator over the controller role (doctor `--simulate`): the context Karpenter's
//! statements test and what the decisions say; what the simulator cannot see is `BLIND_SPOTS`
//! (docs/aws-behaviour.md, "What AWS records of the Karpenter that runs").

use crate::karpenter_iam::ec2_principal;
use std::collections::BTreeMap;

/// What the simulator cannot see, for the report.
pub const BLIND_SPOTS: &str = "the simulator does not evaluate resource control policies, session policies (a Pod Identity association's policy), trust policies, or SCPs that test global condition keys";

/// One context entry (`ContextEntries`): a key, its values and its type (`string`,
/// `stringList`, ...; IAM's `ContextKeyTypeEnum` spelling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextValue {
    pub key: String,
    pub values: Vec<String>,
    pub kind: &'static str,
}

/// Values for the context keys the role's policies use (`GetContextKeysForPrincipalPolicy`), as
/// a Karpenter launch in `cluster` would carry them: the region, the cluster's tags, a node pool
/// and node class, `ec2:CreateAction` CreateFleet, `iam:PassedToService` EC2. Returns the
/// entries and the keys it has no value for (to be named as unseen). `aws:TagKeys` is left out
/// on purpose: one context serves every action, and the scoped-tagging statement's
/// ForAllValues test passes when the key is absent.
pub fn karpenter_context(keys: &[String], cluster: &str, region: &str, partition: &str) -> (Vec<ContextValue>, Vec<String>) {
    let (mut entries, mut unknown) = (vec![], vec![]);
    for key in keys {
        let tag = key.strip_prefix("aws:RequestTag/").or_else(|| key.strip_prefix("aws:ResourceTag/"));
        let value: Option<&str> = match (key.as_str(), tag) {
            ("aws:RequestedRegion", _) => Some(region),
            ("ec2:CreateAction", _) => Some("CreateFleet"),
            ("iam:PassedToService", _) => Some(ec2_principal(partition)),
            (_, Some(t)) if t == format!("kubernetes.io/cluster/{cluster}") => Some("owned"),
            (_, Some("eks:eks-cluster-name")) => Some(cluster),
            (_, Some("karpenter.sh/nodepool" | "karpenter.k8s.aws/ec2nodeclass")) => Some("default"),
            (_, Some("topology.kubernetes.io/region")) => Some(region),
            _ => None,
        };
        match value {
            Some(v) => entries.push(ContextValue { key: key.clone(), values: vec![v.to_string()], kind: "string" }),
            None => unknown.push(key.clone()),
        }
    }
    (entries, unknown)
}

/// The keys of the principal itself, as AWS sets them for the role's sessions (Pod Identity and
/// IRSA credentials are an assumed role): `aws:PrincipalArn` (the role's ARN, path included),
/// `aws:PrincipalAccount`, `aws:PrincipalType` and the role's `aws:PrincipalTag/*`. SCPs and
/// boundaries test them (the usual exemption: "deny unless aws:PrincipalArn is one of ours") and
/// `GetContextKeysForPrincipalPolicy` never lists an SCP's keys; a missing key makes a negated
/// condition true, so the exemption would read as a deny.
pub fn principal_context(role_arn: &str, account: &str, tags: &BTreeMap<String, String>) -> Vec<ContextValue> {
    let one = |key: &str, v: &str| ContextValue { key: key.to_string(), values: vec![v.to_string()], kind: "string" };
    let mut out =
        vec![one("aws:PrincipalArn", role_arn), one("aws:PrincipalAccount", account), one("aws:PrincipalType", "AssumedRole")];
    out.extend(tags.iter().map(|(k, v)| one(&format!("aws:PrincipalTag/{k}"), v)));
    out
}

/// `principal` then the entries of `policy_keys` whose key it does not give (keys compare
/// without case, as IAM's do); the unknown keys it gives are no longer unknown.
pub fn with_principal(
    principal: Vec<ContextValue>,
    (entries, unknown): (Vec<ContextValue>, Vec<String>),
) -> (Vec<ContextValue>, Vec<String>) {
    let given = |k: &str| principal.iter().any(|p| p.key.eq_ignore_ascii_case(k));
    let entries: Vec<ContextValue> = entries.into_iter().filter(|e| !given(&e.key)).collect();
    let unknown = unknown.into_iter().filter(|k| !given(k)).collect();
    (principal.into_iter().chain(entries).collect(), unknown)
}

/// Where a controller runs, for the resources karpctl knows the shape of.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub partition: &'a str,
    pub region: &'a str,
    pub account: &'a str,
    pub cluster: &'a str,
    pub node_role_arn: Option<&'a str>,
    pub queue_arn: Option<&'a str>,
}

/// The resource an action of Karpenter's acts on, as an ARN pattern karpctl knows the shape
/// of (the simulator's `ResourceArns`; one per action, so no EC2 resource-handling scenario is
/// needed); None: `*` (actions with no resource type, and those karpctl does not know).
pub fn resource_of(action: &str, p: &Place) -> Option<String> {
    let (part, r, a) = (p.partition, p.region, p.account);
    let ec2 = |t: &str| Some(format!("arn:{part}:ec2:{r}:{a}:{t}/*"));
    match action {
        "ec2:RunInstances" | "ec2:TerminateInstances" | "ec2:CreateTags" => ec2("instance"),
        "ec2:CreateFleet" => ec2("fleet"),
        "ec2:CreateLaunchTemplate" | "ec2:DeleteLaunchTemplate" => ec2("launch-template"),
        "iam:PassRole" => p.node_role_arn.map(str::to_string),
        "ssm:GetParameter" => Some(format!("arn:{part}:ssm:{r}::parameter/aws/service/*")),
        "eks:DescribeCluster" => Some(format!("arn:{part}:eks:{r}:{a}:cluster/{}", p.cluster)),
        _ if action.starts_with("iam:") && action.ends_with("InstanceProfile") => {
            Some(format!("arn:{part}:iam::{a}:instance-profile/*"))
        }
        _ if action.starts_with("sqs:") => p.queue_arn.map(str::to_string),
        _ => None,
    }
}

/// `actions` grouped by their resource ([`resource_of`]), in the order first met.
pub fn by_resource(actions: &[String], p: &Place) -> Vec<(Option<String>, Vec<String>)> {
    let mut out: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for a in actions {
        let r = resource_of(a, p);
        match out.iter_mut().find(|(x, _)| *x == r) {
            Some((_, v)) => v.push(a.clone()),
            None => out.push((r, vec![a.clone()])),
        }
    }
    out
}

/// One action's decision as the simulator gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: String,
    /// The resource it was simulated on (`*` without `ResourceArns`).
    pub resource: String,
    /// `allowed`, `explicitDeny` or `implicitDeny`.
    pub decision: String,
    /// `OrganizationsDecisionDetail.AllowedByOrganizations` (None: not reported).
    pub allowed_by_organizations: Option<bool>,
    /// `PermissionsBoundaryDecisionDetail.AllowedByPermissionsBoundary`.
    pub allowed_by_boundary: Option<bool>,
    /// The policies whose statements matched.
    pub matched: Vec<String>,
    /// Context keys the policies test that no entry gave.
    pub missing_context: Vec<String>,
}

/// What refused an action in the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denial {
    Scp,
    PermissionsBoundary,
    /// The role's own policies (an explicit deny, or none allows it).
    IdentityPolicy,
}

/// The denied actions, each with what denied it, in the order given (once per action and kind,
/// whatever the resources).
pub fn denials(decisions: &[Decision]) -> Vec<(String, Denial)> {
    let mut out: Vec<(String, Denial)> = decisions
        .iter()
        .filter(|d| d.decision != "allowed")
        .map(|d| {
            let why = if d.allowed_by_organizations == Some(false) {
                Denial::Scp
            } else if d.allowed_by_boundary == Some(false) {
                Denial::PermissionsBoundary
            } else {
                Denial::IdentityPolicy
            };
            (d.action.clone(), why)
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|d| seen.insert(d.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_fills_the_keys_karpenter_tests_and_names_the_rest() {
        let keys: Vec<String> = [
            "aws:RequestedRegion",
            "aws:RequestTag/kubernetes.io/cluster/c1",
            "aws:ResourceTag/eks:eks-cluster-name",
            "aws:RequestTag/karpenter.sh/nodepool",
            "aws:ResourceTag/topology.kubernetes.io/region",
            "ec2:CreateAction",
            "iam:PassedToService",
            "aws:PrincipalOrgID",
        ]
        .map(String::from)
        .to_vec();
        let (entries, unknown) = karpenter_context(&keys, "c1", "cn-north-1", "aws-cn");
        let got: Vec<(&str, &str)> = entries.iter().map(|e| (e.key.as_str(), e.values[0].as_str())).collect();
        assert_eq!(
            got,
            [
                ("aws:RequestedRegion", "cn-north-1"),
                ("aws:RequestTag/kubernetes.io/cluster/c1", "owned"),
                ("aws:ResourceTag/eks:eks-cluster-name", "c1"),
                ("aws:RequestTag/karpenter.sh/nodepool", "default"),
                ("aws:ResourceTag/topology.kubernetes.io/region", "cn-north-1"),
                ("ec2:CreateAction", "CreateFleet"),
                ("iam:PassedToService", "ec2.amazonaws.com.cn"),
            ]
        );
        assert_eq!(unknown, ["aws:PrincipalOrgID"]);
        let (_, other) = karpenter_context(&["aws:RequestTag/kubernetes.io/cluster/c2".to_string()], "c1", "r", "aws");
        assert_eq!(other.len(), 1, "another cluster's tag is not this cluster's");
    }

    #[test]
    fn denials_say_whether_an_scp_a_boundary_or_the_role_denied() {
        let d = |a: &str, dec: &str, org: Option<bool>, b: Option<bool>| Decision {
            action: a.into(),
            resource: "*".into(),
            decision: dec.into(),
            allowed_by_organizations: org,
            allowed_by_boundary: b,
            matched: vec![],
            missing_context: vec![],
        };
        let got = denials(&[
            d("ec2:CreateFleet", "explicitDeny", Some(false), Some(true)),
            d("iam:PassRole", "implicitDeny", Some(true), Some(false)),
            d("ssm:GetParameter", "implicitDeny", None, None),
            d("ec2:DescribeSubnets", "allowed", Some(true), Some(true)),
        ]);
        assert_eq!(
            got,
            [
                ("ec2:CreateFleet".to_string(), Denial::Scp),
                ("iam:PassRole".to_string(), Denial::PermissionsBoundary),
                ("ssm:GetParameter".to_string(), Denial::IdentityPolicy),
            ]
        );
    }

    #[test]
    fn the_principal_is_in_the_context_and_each_action_on_the_resource_karpctl_knows() {
        let tags = BTreeMap::from([("team".to_string(), "platform".to_string())]);
        let role = "arn:aws:iam::111122223333:role/karpctl/c1/KarpenterController-c1";
        let principal = principal_context(role, "111122223333", &tags);
        let got: Vec<(&str, &str)> = principal.iter().map(|e| (e.key.as_str(), e.values[0].as_str())).collect();
        assert_eq!(
            got,
            [
                ("aws:PrincipalArn", role),
                ("aws:PrincipalAccount", "111122223333"),
                ("aws:PrincipalType", "AssumedRole"),
                ("aws:PrincipalTag/team", "platform"),
            ]
        );
        let keys = ["aws:RequestedRegion".to_string(), "aws:principalarn".to_string(), "aws:PrincipalOrgID".to_string()];
        let (entries, unknown) = with_principal(principal, karpenter_context(&keys, "c1", "us-east-2", "aws"));
        assert_eq!(entries.len(), 5, "the principal's four and the Region: {entries:?}");
        assert_eq!(unknown, ["aws:PrincipalOrgID"]);

        let p = Place {
            partition: "aws",
            region: "us-east-2",
            account: "111122223333",
            cluster: "c1",
            node_role_arn: Some("arn:aws:iam::111122223333:role/KarpenterNodeRole-c1"),
            queue_arn: Some("arn:aws:sqs:us-east-2:111122223333:Karpenter-c1"),
        };
        let r = |a: &str| resource_of(a, &p);
        assert_eq!(r("ec2:RunInstances").as_deref(), Some("arn:aws:ec2:us-east-2:111122223333:instance/*"));
        assert_eq!(r("ec2:CreateFleet").as_deref(), Some("arn:aws:ec2:us-east-2:111122223333:fleet/*"));
        assert_eq!(r("iam:PassRole"), p.node_role_arn.map(str::to_string));
        assert_eq!(r("iam:CreateInstanceProfile").as_deref(), Some("arn:aws:iam::111122223333:instance-profile/*"));
        assert_eq!(r("sqs:ReceiveMessage"), p.queue_arn.map(str::to_string));
        assert_eq!(r("ec2:DescribeSubnets"), None, "no resource type: *");
        let groups = by_resource(
            &[
                "ec2:DescribeSubnets".into(),
                "ec2:RunInstances".into(),
                "ec2:DescribeImages".into(),
                "ec2:TerminateInstances".into(),
            ],
            &p,
        );
        let sizes: Vec<usize> = groups.iter().map(|(_, a)| a.len()).collect();
        assert_eq!(sizes, [2, 2]);
    }
}
