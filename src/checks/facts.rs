//! What the checks judge that AWS describes and that `up`, `diff` and doctor all carry: security
//! group rules, a Pod Identity association, a discovery-tagged subnet. Plain data.

/// A subnet carrying `karpenter.sh/discovery=<cluster>`, as the way-out checks see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedSubnet {
    pub candidate: crate::egress::Candidate,
    /// It carries karpctl's marker (`karpctl.io/discovery`): karpctl put the tag there.
    pub karpctls: bool,
}

/// One security group rule, as EC2 describes it (`IpPermissions` / `IpPermissionsEgress`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SgRule {
    /// `-1` (all traffic), `tcp`, `udp`, `icmp`, or a protocol number.
    pub protocol: String,
    pub from_port: Option<i32>,
    pub to_port: Option<i32>,
    /// Source (ingress) or destination (egress) security groups.
    pub groups: Vec<String>,
    /// IPv4 and IPv6 ranges and prefix lists.
    pub cidrs: Vec<String>,
}

impl SgRule {
    /// The rule lets TCP traffic on `port` through.
    pub(super) fn covers_tcp(&self, port: i32) -> bool {
        match self.protocol.as_str() {
            "-1" | "all" => true,
            "tcp" | "6" => match (self.from_port, self.to_port) {
                (Some(f), Some(t)) => f == -1 || (f <= port && port <= t),
                _ => true,
            },
            _ => false,
        }
    }
}

/// A security group's rules.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupRules {
    pub ingress: Vec<SgRule>,
    pub egress: Vec<SgRule>,
}

/// What the two Pod Identity checks need of an association (DescribePodIdentityAssociation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Association {
    pub cluster: String,
    pub id: String,
    /// `<namespace>/<service account>`.
    pub name: String,
    /// The role EKS assumes for it.
    pub role_arn: String,
    pub disable_session_tags: bool,
    /// The inline session policy (JSON text), if any.
    pub session_policy: Option<String>,
    /// The EKS add-on that owns it (changed only through the add-on).
    pub owner_arn: Option<String>,
}

impl Association {
    pub(super) fn resource(&self) -> String {
        format!("podidentityassociation/{}/{}", self.cluster, self.id)
    }
    pub(super) fn label(&self) -> String {
        format!("EKS Pod Identity association {} ({})", self.name, self.id)
    }
    pub(super) fn update_command(&self, args: &str) -> String {
        match &self.owner_arn {
            Some(addon) => format!(
                "the EKS add-on {addon} owns it: change its Pod Identity association through the add-on (aws eks update-addon --cluster-name {} --addon-name <add-on> --pod-identity-associations ...)",
                self.cluster
            ),
            None => format!(
                "aws eks update-pod-identity-association --cluster-name {} --association-id {} {args}",
                self.cluster, self.id
            ),
        }
    }
}
