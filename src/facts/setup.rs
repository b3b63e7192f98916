//! What `doctor` and `import` find of a Karpenter setup (`Setup`, plain data read from AWS by
//! `gather::setup`), for the checks to judge. Nothing here calls AWS: the checks test without it.

use crate::facts::finding::Code;
use crate::karpenter_iam::KarpenterVersion;
use crate::spec::IdentityMode;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// One policy of a role: attached managed (customer or AWS) or inline, with its document (None:
/// it could not be read, e.g. a managed policy ARN that does not exist).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolePolicy {
    pub name: String,
    /// The managed policy's ARN; None for an inline policy.
    pub arn: Option<String>,
    /// A customer managed policy (its ARN is in the account, not `iam::aws:policy`).
    pub customer_managed: bool,
    pub document: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControllerRole {
    pub name: String,
    pub arn: String,
    /// How it was found ("Pod Identity association kube-system/karpenter", ...).
    pub how: String,
    /// false: named (by a flag or an association) but GetRole found no such role.
    pub exists: bool,
    pub trust: Option<Value>,
    pub policies: Vec<RolePolicy>,
    /// The association's own role, when this is its target role (cross-account Pod Identity):
    /// EKS assumes this role through that one, so the trust must let that role in.
    pub assumed_through: Option<String>,
    /// The Pod Identity association it was found through (its session tags and session policy).
    pub association: Option<crate::facts::observed::Association>,
    /// Its tags (the simulator's `aws:PrincipalTag/*`).
    pub tags: std::collections::BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRole {
    pub name: String,
    pub arn: String,
    pub how: Vec<String>,
    pub exists: bool,
    /// CreateDate, seconds since the epoch.
    pub created: Option<i64>,
    /// ARNs of the attached managed policies.
    pub attached: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccessEntry {
    pub principal_arn: String,
    pub kind: String,
    /// createdAt, seconds since the epoch.
    pub created: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Queue {
    pub name: String,
    pub arn: String,
    pub url: Option<String>,
    pub how: String,
    /// false: named (by a flag or by rules targeting it) but GetQueueUrl found none.
    pub exists: bool,
    pub kms_master_key_id: Option<String>,
    /// The ARN of its customer managed KMS key (kms:DescribeKey), when it has one.
    pub kms_key_arn: Option<String>,
    /// That key's policy (kms:GetKeyPolicy), when read.
    pub kms_key_policy: Option<Value>,
    pub policy: Option<Value>,
}

/// An EventBridge rule on the default bus whose pattern is one or more of Karpenter's
/// interruption events and that targets an SQS queue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub name: String,
    pub arn: String,
    pub enabled: bool,
    /// The `RULES` parts its pattern matches (HealthEvent, SpotInterrupt, ...).
    pub kinds: Vec<&'static str>,
    /// ARNs of the SQS queues it targets.
    pub queue_arns: Vec<String>,
    /// Another cluster this rule's name or tags point at (only read for rules of our queue).
    pub other_cluster: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TaggedSubnet {
    pub id: String,
    pub az: String,
    pub vpc_id: String,
    /// `MapPublicIpOnLaunch` (a public subnet works only with it).
    #[serde(skip)]
    pub map_public_ip: bool,
    /// `EnableDns64` (NAT64 works only with it).
    #[serde(skip)]
    pub dns64: bool,
    /// It carries karpctl's marker `karpctl.io/discovery=<cluster>`: karpctl put the tag there.
    #[serde(skip)]
    pub karpctls: bool,
    /// The account that owns it (another account's: a VPC shared through AWS RAM).
    #[serde(skip)]
    pub owner_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TaggedGroup {
    pub id: String,
    pub name: String,
    pub vpc_id: String,
    #[serde(skip)]
    pub rules: crate::facts::observed::GroupRules,
}

/// A read AWS refused (AccessDenied, AccessDeniedException, UnauthorizedOperation): the finding
/// code it becomes (`<piece>-unreadable`), the call and what AWS said. The checks that needed it
/// are skipped; every other check still runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unreadable {
    pub code: Code,
    pub operation: String,
    pub aws_code: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Discovery {
    pub tag_key: String,
    pub tag_value: String,
    pub subnets: Vec<TaggedSubnet>,
    pub groups: Vec<TaggedGroup>,
}

/// How a controller role that no association uses was found (`discover`): doctor reports that
/// no association gives it to Karpenter; import adopts it and `up --adopt` makes the association.
pub const UNASSOCIATED: &str =
    "a role trusted by Pod Identity that names this cluster in its policies; no association uses it yet";

/// The subnets Karpenter sees, each with its way out, and the VPC's network they are judged
/// against: computed from the route tables read (doctor), or discovery's choice as `up` leaves it.
#[derive(Clone, Debug, PartialEq)]
pub struct WayOut {
    pub subnets: Vec<crate::facts::observed::SubnetWay>,
    pub network: crate::egress::Network,
}

/// A Karpenter setup for the checks (`checks::run`): everything `doctor` read as it
/// found it, or, for `up` and `diff`, the setup as the plan leaves it (`gather::as_left`).
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    pub cluster: String,
    pub account_id: String,
    pub region: String,
    pub partition: String,
    pub version: KarpenterVersion,
    /// Which version doctor judges with and why: the flag, the plan's pin, the version
    /// CloudTrail shows running, or the newest (empty: not said).
    pub version_from: String,
    /// The day `version`'s support status is judged on (None: not judged).
    pub today: Option<crate::running::support::Ymd>,
    pub namespace: String,
    pub service_account: String,
    pub authentication_mode: String,
    pub ip_family: String,
    /// The cluster's VPC (the VPC of its subnets where EKS reports one EC2 does not know).
    pub cluster_vpc: String,
    /// Availability Zones of the cluster's own subnets.
    pub cluster_azs: BTreeSet<String>,
    pub controller: Option<ControllerRole>,
    /// What was tried when no controller role was found.
    pub controller_searched: String,
    pub mode: Option<IdentityMode>,
    pub pod_identity_agent: bool,
    pub node_roles: Vec<NodeRole>,
    /// (managed node group, its node role ARN): roles that belong to a node group, never
    /// Karpenter's to take.
    pub nodegroup_roles: Vec<(String, String)>,
    /// Every access entry of type EC2_LINUX / EC2_WINDOWS (and those of the node roles).
    pub access_entries: Vec<AccessEntry>,
    pub queue: Option<Queue>,
    /// Queues Karpenter's rules target that were not taken as this cluster's.
    pub other_queues: Vec<String>,
    pub rules: Vec<Rule>,
    /// Every rule on the region's default event bus (for EventBridge's rules-per-bus quota).
    pub bus_rules: usize,
    /// The account's rules-per-bus quota (`KARPCTL_RULES_PER_BUS`, else AWS's default 300).
    pub bus_quota: usize,
    pub discovery: Discovery,
    /// The account has the Spot service-linked role (None: not read).
    pub spot_service_linked_role: Option<bool>,
    /// EKS Auto Mode is on (`computeConfig.enabled`).
    pub auto_mode: bool,
    /// The controller's permission set includes zonal shift (the plan's `identity.zonal_shift`).
    pub zonal_shift: bool,
    /// The groups the control plane's network interfaces carry: EKS's cluster security group and
    /// the cluster's `securityGroupIds`.
    pub control_plane_groups: Vec<String>,
    /// The cluster VPC's route tables (for the tagged subnets' way out).
    pub route_tables: Vec<crate::egress::RouteTable>,
    /// Its VPC endpoints, read only when a tagged subnet has no default route.
    pub endpoints: Vec<crate::egress::Endpoint>,
    /// The tagged subnets with their way out, already judged (None: the way-out checks judge
    /// `discovery.subnets` against `route_tables`).
    pub way_out: Option<WayOut>,
    /// The plan's `discovery.associate_public_ip` (nodes get public IPs from the EC2NodeClass).
    pub associate_public_ip: bool,
    /// Reads AWS refused.
    pub unreadable: Vec<Unreadable>,
    // --- The running Karpenter (#36) ---
    /// What CloudTrail shows of the controller and node roles' calls (None: not read).
    pub running: Option<crate::facts::observed::Running>,
    // What AWS records (CloudWatch) and the policy simulator (`doctor --simulate`).
    /// The interruption rules' and queue's CloudWatch metrics (None: not read).
    pub metrics: Option<crate::facts::records::Metrics>,
    /// `doctor --simulate`'s decisions (None without the flag, or when refused).
    pub simulation: Option<Simulated>,
    /// Those reads failed other than by a refusal (throttled past the retries, no answer, an
    /// answer karpctl cannot read): what failed, said as a note (their checks did not run).
    pub records_failed: Vec<FailedRead>,
}

/// A read that failed otherwise than by a refusal: its `<piece>-unreadable` code, the call, and
/// what failed.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedRead {
    pub code: Code,
    pub operation: String,
    pub message: String,
}

/// What `doctor --simulate` asked the IAM policy simulator and what it answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Simulated {
    /// The controller role simulated (None: no controller role found, nothing simulated).
    pub role_arn: Option<String>,
    /// The pinned action set simulated.
    pub actions: Vec<String>,
    /// The context keys sent (`ContextEntries`).
    pub context: Vec<crate::running::simulation::ContextValue>,
    /// Context keys the role's policies use that karpctl has no value for (absent in the simulation).
    pub unknown_keys: Vec<String>,
    pub decisions: Vec<crate::running::simulation::Decision>,
}

impl Setup {
    /// A setup with nothing found, for tests and as the base the reads fill in.
    pub fn empty(cluster: &str) -> Setup {
        Setup {
            cluster: cluster.to_string(),
            account_id: "111122223333".into(),
            region: "us-east-1".into(),
            partition: "aws".into(),
            version: KarpenterVersion::LATEST,
            version_from: String::new(),
            today: None,
            namespace: "kube-system".into(),
            service_account: "karpenter".into(),
            authentication_mode: "API_AND_CONFIG_MAP".into(),
            ip_family: "ipv4".into(),
            cluster_vpc: String::new(),
            cluster_azs: BTreeSet::new(),
            controller: None,
            controller_searched: String::new(),
            mode: None,
            pod_identity_agent: false,
            node_roles: vec![],
            nodegroup_roles: vec![],
            access_entries: vec![],
            queue: None,
            other_queues: vec![],
            rules: vec![],
            bus_rules: 0,
            bus_quota: crate::settings::DEFAULT_RULES_PER_BUS,
            discovery: Discovery { tag_key: crate::tags::DISCOVERY_TAG.into(), tag_value: cluster.into(), ..Default::default() },
            spot_service_linked_role: None,
            auto_mode: false,
            zonal_shift: false,
            control_plane_groups: vec![],
            route_tables: vec![],
            endpoints: vec![],
            way_out: None,
            associate_public_ip: false,
            unreadable: vec![],
            running: None,
            metrics: None,
            simulation: None,
            records_failed: vec![],
        }
    }
}
