//! The validated plan every kind reads: what `plan_file` makes of a TOML file (or the defaults)
//! once it has parsed and checked it. Plain data, no parsing.

use crate::model::Tags;
use std::path::PathBuf;

/// A validated plan.
#[derive(Debug, Clone)]
pub struct Spec {
    pub cluster: String,
    /// The region the plan pins, if any.
    pub region: Option<String>,
    pub account_id: Option<String>,
    /// The role to assume for every call of this cluster (`assume_role_arn`).
    pub assume_role: Option<AssumeRole>,
    /// The user's tags for every object karpctl creates.
    pub tags: Tags,
    pub interruption: Interruption,
    pub identity: Identity,
    pub discovery: Discovery,
    /// `account.create_spot_service_linked_role`.
    pub create_spot_role: bool,
    /// Where the plan came from (None: defaults).
    pub source: Option<PathBuf>,
}

/// `assume_role_arn` with its optional `external_id` and `session_name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRole {
    pub role_arn: String,
    /// The account in the role's ARN.
    pub account_id: String,
    pub external_id: Option<String>,
    pub session_name: String,
}

#[derive(Debug, Clone)]
pub struct Interruption {
    pub enabled: bool,
    pub queue_name: String,
    /// Notes about the name (shortened to fit).
    pub queue_name_note: Option<String>,
    /// SSE-KMS key as the queue's `KmsMasterKeyId` (an id, ARN, alias or alias ARN); None means
    /// SSE-SQS. With `kms_key_id = "create"` it is karpctl's own key's alias
    /// (`alias/karpenter-<cluster>`).
    pub kms_key_id: Option<String>,
    /// `kms_key_id = "create"`: karpctl makes the key (and `down` schedules its deletion).
    pub create_key: bool,
    /// Rules karpctl keeps under the names another tool gave them, by rule part (`RULES`).
    pub rule_names: std::collections::BTreeMap<String, String>,
    /// `interruption.rules = "merged"`: one rule carries every event kind's pattern (for
    /// accounts near EventBridge's 300 rules per bus); false (`"separate"`): upstream's layout,
    /// one rule per event kind of `catalog::RULES`.
    pub merged: bool,
    /// What to say of how `interruption.rules` was written (`"five"`, the old name of
    /// `"separate"`): a note of every plan.
    pub rules_note: Option<String>,
}

/// The value of `interruption.kms_key_id` that asks karpctl to make the key.
pub const CREATE_KEY: &str = "create";

/// The alias of the key karpctl makes for a cluster's queue (`kms_key_id = "create"`).
pub fn created_key_alias(cluster: &str) -> String {
    format!("alias/karpenter-{cluster}")
}

/// How Karpenter's controller gets its role: the plan's `identity.mode`, and what doctor and
/// import find in a setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityMode {
    PodIdentity,
    Irsa,
}

/// A name karpctl derived, and a note when it had to be shortened to fit an AWS limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub note: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Identity {
    pub mode: IdentityMode,
    pub karpenter_version: crate::karpenter_iam::KarpenterVersion,
    /// `karpenter_version = "running"`: follow the version CloudTrail shows the controller
    /// running (`prepare` sets `karpenter_version` to it before anything is built).
    pub follow_running: bool,
    /// IAM path for every IAM object karpctl creates; names the cluster so one scoped list finds them.
    pub path: String,
    /// The node role karpctl creates (None when `existing_node_role` is used).
    pub node_role: Option<Named>,
    /// An existing node role (name or ARN) karpctl uses but never creates or deletes.
    pub existing_node_role: Option<String>,
    pub controller_role: Named,
    pub extra_node_policy_arns: Vec<String>,
    /// Managed policies kept attached to the controller role besides karpctl's own.
    pub extra_controller_policy_arns: Vec<String>,
    pub instance_profile: Option<Named>,
    /// `instance_profile = false` said in the plan (not just left out): the profile karpctl made
    /// for an isolated VPC goes too once the VPC is no longer isolated.
    pub instance_profile_off: bool,
    /// The name the instance profile would have (also when switched off, to find and remove it).
    pub instance_profile_name: Named,
    pub access_entry_type: String,
    pub namespace: String,
    pub service_account: String,
    pub create_pod_identity_agent: bool,
    pub zonal_shift: bool,
    /// The node role's trust requires `aws:SourceAccount` = the account (docs/security.md).
    pub node_trust_source_account: bool,
    /// The permissions boundary of every role karpctl creates (None: karpctl does not manage one).
    pub permissions_boundary: Option<String>,
    /// Policies of another tool on the controller role that karpctl's own replace: managed policy
    /// ARNs or inline policy names, detached once karpctl's are attached (`retired_policy`).
    pub retire_policies: Vec<String>,
}

impl Identity {
    /// The node role's name, whether karpctl creates it or it exists already.
    pub fn node_role_name(&self) -> String {
        match (&self.node_role, &self.existing_node_role) {
            (Some(n), _) => n.name.clone(),
            (None, Some(e)) => e.rsplit('/').next().unwrap_or(e).to_string(),
            (None, None) => String::new(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub subnet_ids: Option<Vec<String>>,
    pub subnet_tags: Option<Tags>,
    pub security_group_id: Option<String>,
    pub security_group_name: Option<String>,
    /// `associate_public_ip`: nodes get public IPs from the EC2NodeClass
    /// (`associatePublicIPAddress: true`), so public subnets without `MapPublicIpOnLaunch` are
    /// usable.
    pub associate_public_ip: bool,
}
