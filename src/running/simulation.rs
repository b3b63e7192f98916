//! The IAM policy simulator over the controller role (doctor `--simulate`): the context Karpenter's
//! statements test and what the decisions say; what the simulator cannot see is `BLIND_SPOTS`
//! (docs/aws-behaviour.md, "What AWS records of the Karpenter that runs").

use crate::karpenter_iam::ec2_principal;

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

/// One action's decision as the simulator gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub action: String,
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

/// The denied actions, each with what denied it, in the order given.
pub fn denials(decisions: &[Decision]) -> Vec<(String, Denial)> {
    decisions
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
        .collect()
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
}
