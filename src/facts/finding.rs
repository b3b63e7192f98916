//! What a check says: a typed `Code` (its stable kebab-case string is the wire name), a
//! `Severity`, and the `Finding`; the `Read`s a check needs, the `Command` a check runs for, and
//! what a run collects (`Checker`) and returns (`Outcome`). Plain data, no AWS.

use serde::{Serialize, Serializer};
use std::collections::BTreeSet;

macro_rules! codes {
    ($($variant:ident = $text:literal,)*) => {
        /// Every finding's code. `as_str` is the stable string output and JSON carry.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code { $($variant,)* }
        impl Code {
            #[cfg(test)]
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];
            pub const fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }
        }
    };
}

codes! {
    ControllerRoleNotFound = "controller-role-not-found",
    ControllerMissingPermissions = "controller-missing-permissions",
    ControllerPassroleUnscoped = "controller-passrole-unscoped",
    PolicyNearSizeLimit = "policy-near-size-limit",
    PodIdentityAgentMissing = "pod-identity-agent-missing",
    ClusterAuthConfigMap = "cluster-auth-config-map",
    NodeRoleNotFound = "node-role-not-found",
    NodeRoleMissingManagedPolicy = "node-role-missing-managed-policy",
    NodeRoleNoAccessEntry = "node-role-no-access-entry",
    NodeAccessEntryStale = "node-access-entry-stale",
    QueueNotFound = "queue-not-found",
    QueueKmsAwsManaged = "queue-kms-aws-managed",
    QueuePolicyBlocksEventbridge = "queue-policy-blocks-eventbridge",
    QueuePolicyUnconditioned = "queue-policy-unconditioned",
    QueuePolicyRefusesRule = "queue-policy-refuses-rule",
    QueueShared = "queue-shared",
    InterruptionRuleMissing = "interruption-rule-missing",
    InterruptionRuleDisabled = "interruption-rule-disabled",
    EventBusRuleQuota = "event-bus-rule-quota",
    DiscoveryNoSubnets = "discovery-no-subnets",
    DiscoveryAzWithoutSubnet = "discovery-az-without-subnet",
    DiscoveryNoSecurityGroups = "discovery-no-security-groups",
    DiscoveryMultipleSecurityGroups = "discovery-multiple-security-groups",
    DiscoveryOutsideClusterVpc = "discovery-outside-cluster-vpc",
    SubnetNoWayOut = "subnet-no-way-out",
    SubnetWayOutUnconfirmed = "subnet-way-out-unconfirmed",
    NodeSgBlocksControlPlane = "node-sg-blocks-control-plane",
    KmsKeyPolicyEvents = "kms-key-policy-events",
    KmsKeyPolicyController = "kms-key-policy-controller",
    SpotServiceLinkedRoleMissing = "spot-service-linked-role-missing",
    ControllerTrustMismatch = "controller-trust-mismatch",
    PodIdentitySessionTagsDisabled = "pod-identity-session-tags-disabled",
    PodIdentitySessionPolicy = "pod-identity-session-policy",
    AutoModeNodepoolsOverlap = "auto-mode-nodepools-overlap",
    NodegroupsUnreadable = "nodegroups-unreadable",
    ClusterUnreadable = "cluster-unreadable",
    ControllerUnreadable = "controller-unreadable",
    AccessEntriesUnreadable = "access-entries-unreadable",
    PodIdentityAgentUnreadable = "pod-identity-agent-unreadable",
    SpotRoleUnreadable = "spot-role-unreadable",
    ClustersUnreadable = "clusters-unreadable",
    InterruptionRulesUnreadable = "interruption-rules-unreadable",
    SubnetsUnreadable = "subnets-unreadable",
    SecurityGroupsUnreadable = "security-groups-unreadable",
    RouteTablesUnreadable = "route-tables-unreadable",
    QueueUnreadable = "queue-unreadable",
    RuleTagsUnreadable = "rule-tags-unreadable",
    NodeRolesUnreadable = "node-roles-unreadable",
    KmsKeyUnreadable = "kms-key-unreadable",
    // The running Karpenter, as CloudTrail recorded it (checks/running.rs, #36).
    RunningVersionLacksPermissions = "running-version-lacks-permissions",
    RunningVersionUnknown = "running-version-unknown",
    PinNewerThanRunning = "pin-newer-than-running",
    CallsRefused = "calls-refused",
    KarpenterNotSeen = "karpenter-not-seen",
    KarpenterVersionOutOfSupport = "karpenter-version-out-of-support",
    CloudtrailUnreadable = "cloudtrail-unreadable",
    // Launches that failed inside a fleet, and a read cut short by its bound (#42).
    LaunchQuotaExceeded = "launch-quota-exceeded",
    LaunchTypeUnsupported = "launch-type-unsupported",
    LaunchCapacityShort = "launch-capacity-short",
    CloudtrailReadCutShort = "cloudtrail-read-cut-short",
    // What AWS records (CloudWatch) and the policy simulator (`doctor --simulate`): checks/records.rs.
    InterruptionRuleFailing = "interruption-rule-failing",
    QueueUnread = "queue-unread",
    SimulationScpDenied = "simulation-scp-denied",
    SimulationBoundaryDenied = "simulation-boundary-denied",
    SimulationNotRun = "simulation-not-run",
    SimulationScope = "simulation-scope",
    MetricsUnreadable = "metrics-unreadable",
    SimulationUnreadable = "simulation-unreadable",
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How bad a finding is (errors sort first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Karpenter cannot work or misbehaves: `up` exits 1, doctor lists it first.
    Error,
    /// Karpenter works, but something will go wrong later or for some nodes.
    Warning,
    /// Worth knowing, nothing wrong (a pin newer than what runs; nothing recorded yet). Doctor's
    /// exit code and summary count errors and warnings only.
    Note,
}

/// One thing wrong: its code, the object it is about, what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub code: Code,
    pub severity: Severity,
    pub resource: String,
    pub message: String,
    pub fix: String,
}

/// The pinned Karpenter version and its support status on the day (Karpenter's SUPPORT.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinSupport {
    pub version: String,
    /// `Support::word`: lts, lts-security-only, supported, out-of-support, unknown.
    pub support: &'static str,
    /// The status in words (`Support`'s text).
    pub detail: String,
}

/// One piece doctor reads that AWS may refuse: a refused one becomes its `<piece>-unreadable`
/// finding, and every check that needs it (its `reads` in the catalog) is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Read {
    Nodegroups,
    Cluster,
    Controller,
    AccessEntries,
    PodIdentityAgent,
    ListRoles,
    Clusters,
    InterruptionRules,
    Subnets,
    SecurityGroups,
    RouteTables,
    Queue,
    RuleTags,
    NodeRoles,
    KmsKey,
    /// CloudTrail's records of the running Karpenter (cloudtrail:LookupEvents; a warning).
    CloudTrail,
    // What AWS records and the policy simulator (checks/records.rs): warnings when refused.
    Metrics,
    Simulation,
}

impl Read {
    pub const ALL: [Read; 18] = [
        Read::Nodegroups,
        Read::Cluster,
        Read::Controller,
        Read::AccessEntries,
        Read::PodIdentityAgent,
        Read::ListRoles,
        Read::Clusters,
        Read::InterruptionRules,
        Read::Subnets,
        Read::SecurityGroups,
        Read::RouteTables,
        Read::Queue,
        Read::RuleTags,
        Read::NodeRoles,
        Read::KmsKey,
        Read::CloudTrail,
        Read::Metrics,
        Read::Simulation,
    ];

    /// The finding a refused read becomes.
    pub const fn unreadable(self) -> Code {
        match self {
            Read::Nodegroups => Code::NodegroupsUnreadable,
            Read::Cluster => Code::ClusterUnreadable,
            Read::Controller => Code::ControllerUnreadable,
            Read::AccessEntries => Code::AccessEntriesUnreadable,
            Read::PodIdentityAgent => Code::PodIdentityAgentUnreadable,
            Read::ListRoles => Code::SpotRoleUnreadable,
            Read::Clusters => Code::ClustersUnreadable,
            Read::InterruptionRules => Code::InterruptionRulesUnreadable,
            Read::Subnets => Code::SubnetsUnreadable,
            Read::SecurityGroups => Code::SecurityGroupsUnreadable,
            Read::RouteTables => Code::RouteTablesUnreadable,
            Read::Queue => Code::QueueUnreadable,
            Read::RuleTags => Code::RuleTagsUnreadable,
            Read::NodeRoles => Code::NodeRolesUnreadable,
            Read::KmsKey => Code::KmsKeyUnreadable,
            Read::CloudTrail => Code::CloudtrailUnreadable,
            Read::Metrics => Code::MetricsUnreadable,
            Read::Simulation => Code::SimulationUnreadable,
        }
    }

    /// What it reads, as the finding names it.
    pub const fn what(self) -> &'static str {
        match self {
            Read::Nodegroups => "the cluster's managed node groups (eks:ListNodegroups, eks:DescribeNodegroup)",
            Read::Cluster => "the EKS cluster (eks:DescribeCluster)",
            Read::Controller => "Karpenter's controller role and its policies",
            Read::AccessEntries => "the cluster's access entries",
            Read::PodIdentityAgent => "the eks-pod-identity-agent add-on",
            Read::ListRoles => "the account's Spot service-linked role (iam:ListRoles)",
            Read::Clusters => "the region's EKS clusters",
            Read::InterruptionRules => "the EventBridge rules",
            Read::Subnets => "the cluster's and the discovery-tagged subnets",
            Read::SecurityGroups => "the discovery-tagged security groups",
            Read::RouteTables => "the VPC's route tables and endpoints",
            Read::Queue => "the interruption queue",
            Read::RuleTags => "the interruption rules' tags",
            Read::NodeRoles => "the node roles",
            Read::KmsKey => "the queue's KMS key and its key policy",
            Read::CloudTrail => "CloudTrail's records of the running Karpenter",
            Read::Metrics => "the CloudWatch metrics of the interruption rules and queue",
            Read::Simulation => "the IAM policy simulator's decisions for the controller role",
        }
    }

    /// How bad its refusal is: the setup's own pieces are errors (checks that matter did not
    /// run); AWS's records of them and the opt-in simulator are extra evidence, a warning.
    pub const fn severity(self) -> Severity {
        match self {
            Read::CloudTrail | Read::Metrics | Read::Simulation => Severity::Warning,
            _ => Severity::Error,
        }
    }

    /// The read whose refusal is this `<piece>-unreadable` code.
    pub fn of_unreadable(code: Code) -> Option<Read> {
        Read::ALL.into_iter().find(|r| r.unreadable() == code)
    }
}

/// The command a check runs for: its catalog row names the commands that run it, and a few
/// judge the same evidence differently (the running Karpenter's refusals are errors in doctor,
/// warnings beside a plan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Command {
    /// Over the setup as doctor found it.
    #[default]
    Doctor,
    /// Over the setup as `up` leaves it.
    Up,
    /// Over the setup as `up` would leave it.
    Diff,
}

impl Command {
    /// `up` and `diff` judge a plan (what the setup will be), doctor what is.
    pub fn judges_a_plan(self) -> bool {
        self != Command::Doctor
    }
    /// The command's name, as typed.
    pub fn name(self) -> &'static str {
        match self {
            Command::Doctor => "doctor",
            Command::Up => "up",
            Command::Diff => "diff",
        }
    }
}

/// What a run of the checks found (`checks::run`): the checks that ran, in checklist
/// order, and their findings, worst first (notes last: worth knowing, no exit code changes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub checked: Vec<Code>,
    pub findings: Vec<Finding>,
}

impl Outcome {
    pub fn errors(&self) -> usize {
        self.findings.iter().filter(|c| c.severity == Severity::Error).count()
    }
    /// The checks that ran and found nothing, in checklist order.
    pub fn passed(&self) -> Vec<Code> {
        self.checked.iter().copied().filter(|code| !self.findings.iter().any(|f| f.code == *code)).collect()
    }
}

/// What the checks write into: the findings, the checks that ran, and the checks that must not
/// be recorded (their input was refused, or their row does not run them for this command).
#[derive(Default)]
pub struct Checker {
    pub command: Command,
    pub findings: Vec<Finding>,
    pub ran: BTreeSet<Code>,
    pub skip: BTreeSet<Code>,
}

impl Checker {
    pub fn new(command: Command) -> Checker {
        Checker { command, ..Default::default() }
    }
    /// The check ran (unless skipped).
    pub fn ran(&mut self, code: Code) {
        if !self.skip.contains(&code) {
            self.ran.insert(code);
        }
    }
    /// The check ran and found this.
    pub fn add(&mut self, code: Code, severity: Severity, resource: impl Into<String>, message: String, fix: String) {
        if self.skip.contains(&code) {
            return;
        }
        self.ran.insert(code);
        self.findings.push(Finding { code, severity, resource: resource.into(), message, fix });
    }
    /// A check that returns its finding.
    pub fn record(&mut self, code: Code, found: Option<Finding>) {
        self.ran(code);
        if let Some(f) = found {
            self.add(f.code, f.severity, f.resource, f.message, f.fix);
        }
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
