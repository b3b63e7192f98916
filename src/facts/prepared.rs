//! What karpctl learns before it plans: the account, the region, the cluster and the discovery
//! selection, and what the run is for. Plain data that every layer may import.

/// What the run will do, as far as preflight cares: `diff` (and `output`) never write, `down`
/// skips the checks that only matter for creating things.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    Up,
    Diff,
    Down,
}

/// What preflight learned about where karpctl runs.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Facts {
    pub account_id: String,
    pub region: String,
    pub partition: String,
    pub cluster: ClusterFacts,
    /// Subnets and the security group chosen for discovery tags (filled by `discovery::select`).
    #[serde(default)]
    pub discovery: DiscoveryFacts,
    /// The live ARN (with its path) of `identity.existing_node_role`, read in preflight.
    #[serde(default)]
    pub existing_node_role_arn: Option<String>,
    /// The interruption queue's KMS key (`interruption.kms_key_id`), read in preflight.
    #[serde(default)]
    pub kms_key: Option<KmsKeyFacts>,
}

#[cfg(test)]
impl Facts {
    /// The unit tests' account: 123456789012 in us-east-1 (partition aws), nothing else known.
    pub fn example() -> Facts {
        Facts { account_id: "123456789012".into(), region: "us-east-1".into(), partition: "aws".into(), ..Default::default() }
    }

    /// `example()` with an ACTIVE cluster named `cluster`.
    pub fn example_of(cluster: &str) -> Facts {
        Facts {
            cluster: ClusterFacts { name: cluster.into(), status: "ACTIVE".into(), ..Default::default() },
            ..Facts::example()
        }
    }
}

/// The interruption queue's KMS key as preflight found it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct KmsKeyFacts {
    /// The key's ARN (kms:DescribeKey resolves an alias); None: karpctl makes the key in this
    /// run (`kms_key_id = "create"`), so its ARN is known only after apply.
    pub arn: Option<String>,
    /// Its key policy (kms:GetKeyPolicy), None when not read.
    pub policy: Option<serde_json::Value>,
    /// The read AWS refused (kms:DescribeKey of a key given by ARN, or kms:GetKeyPolicy): the
    /// KMS checks are skipped and the refusal said, as doctor says it (`kms-key-unreadable`).
    #[serde(skip)]
    pub policy_unreadable: Option<crate::facts::setup::Unreadable>,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct DiscoveryFacts {
    pub vpc_id: String,
    /// The subnets to carry `karpenter.sh/discovery=<cluster>`.
    pub subnets: Vec<SubnetFact>,
    /// The one security group to carry it.
    pub security_group: Option<SecurityGroupFact>,
    /// Warnings and notes to show with the plan (capacity per AZ, foreign tagged objects).
    pub notes: Vec<crate::model::Note>,
    /// The chosen subnets have no default route (the VPC has the endpoints instead): Karpenter
    /// needs `settings.isolatedVPC`.
    #[serde(default)]
    pub isolated: bool,
    /// `discovery.associate_public_ip`, and some chosen subnet reaches the internet through an
    /// internet gateway (or a firewall endpoint): the EC2NodeClass sets
    /// `associatePublicIPAddress: true`.
    #[serde(default)]
    pub associate_public_ip: bool,
    /// The subnets Karpenter will see once the plan is applied (the chosen ones and every other
    /// one tagged for the cluster that karpctl does not untag), each with its way out, and the
    /// VPC's network they are judged against: what the way-out checks of `up` and `diff` judge.
    #[serde(skip)]
    pub ways: Vec<crate::facts::observed::SubnetWay>,
    #[serde(skip)]
    pub network: Option<crate::egress::Network>,
    /// Subnets and security groups karpctl tagged for this cluster before that the plan no longer
    /// selects: their tags are removed.
    #[serde(default)]
    pub previously_marked: Vec<String>,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SubnetFact {
    pub id: String,
    pub availability_zone: String,
    pub available_ips: i64,
    pub vpc_id: String,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SecurityGroupFact {
    pub id: String,
    pub name: String,
    /// Its rules, for the readiness check that the control plane can reach nodes.
    #[serde(default)]
    pub rules: crate::facts::observed::GroupRules,
}

/// `ClusterFacts::status` of a cluster that DescribeCluster does not find (`down` only: the
/// cluster was deleted before what surrounds it).
pub const CLUSTER_NOT_FOUND: &str = "NOT_FOUND";

/// What a DescribeCluster status means for karpctl's EKS steps (access entry, Pod Identity
/// association, the Pod Identity agent add-on). IAM, SQS, EventBridge and EC2 never need the
/// cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// ACTIVE: EKS objects can be read and written.
    Active,
    /// CREATING, UPDATING (a version upgrade: minutes to an hour), PENDING: EKS writes wait for
    /// ACTIVE.
    Busy,
    /// Gone (not found), DELETING, FAILED: the cluster's access entries and associations go
    /// with it; `up` cannot work, `down` skips them.
    Going,
}

impl ClusterState {
    pub fn of(status: &str) -> ClusterState {
        match status {
            "ACTIVE" => ClusterState::Active,
            CLUSTER_NOT_FOUND | "DELETING" | "FAILED" => ClusterState::Going,
            // CREATING, UPDATING, PENDING, and any status EKS adds later: wait and see.
            _ => ClusterState::Busy,
        }
    }
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ClusterFacts {
    pub name: String,
    pub arn: String,
    pub status: String,
    pub version: String,
    pub vpc_id: String,
    pub subnet_ids: Vec<String>,
    pub cluster_security_group_id: String,
    /// The cluster's additional control-plane security groups (`resourcesVpcConfig.securityGroupIds`).
    #[serde(default)]
    pub security_group_ids: Vec<String>,
    pub authentication_mode: String,
    /// EKS Auto Mode (`computeConfig.enabled`): AWS runs its own Karpenter and the Pod Identity
    /// agent is built in.
    #[serde(default)]
    pub auto_mode: bool,
    pub oidc_issuer: String,
    pub ip_family: String,
}
