//! Pure: the names, ARNs and tags a plan gives the objects it manages, computed from the plan and
//! the account facts. Below both `desired` and the resource kinds, which build nodes from them.

use crate::facts::prepared::Facts;
use crate::model::Tags;
use crate::names;
use crate::spec::Spec;
use crate::tags::{OWNER_TAG, RESOURCE_TAG};

/// The tags every object karpctl creates carries: the user's, then ownership.
pub fn tags_for(spec: &Spec, id: &str) -> Tags {
    let mut t = spec.tags.clone();
    if let Some(track) = crate::tags::track_value(spec.tags.keys()) {
        t.insert(crate::tags::TRACK_TAG.to_string(), track);
    }
    t.insert(OWNER_TAG.to_string(), spec.cluster.clone());
    t.insert(RESOURCE_TAG.to_string(), id.to_string());
    t
}

/// `tags_for` as the JSON value of a node's `tags` field.
pub fn tags_value(spec: &Spec, id: &str) -> serde_json::Value {
    crate::tags::to_value(&tags_for(spec, id))
}

pub fn queue_arn(facts: &Facts, queue_name: &str) -> String {
    format!("arn:{}:sqs:{}:{}:{queue_name}", facts.partition, facts.region, facts.account_id)
}

pub fn rule_name(spec: &Spec, part: &str) -> (String, bool) {
    match spec.interruption.rule_names.get(part) {
        // A rule another tool made, kept under its name (`interruption.rule_names`).
        Some(name) => (name.clone(), false),
        None => names::fit(&format!("Karpenter-{}-{part}", spec.cluster), 64),
    }
}

/// The ARN of an interruption rule (on the default event bus) of this plan.
pub fn rule_arn(facts: &Facts, name: &str) -> String {
    crate::karpenter_iam::event_rule_arn(&facts.partition, &facts.region, &facts.account_id, name)
}

/// The cluster's ARN: as EKS reported it, else `arn:<p>:eks:<r>:<a>:cluster/<c>`.
pub fn cluster_arn(spec: &Spec, facts: &Facts) -> String {
    if !facts.cluster.arn.is_empty() {
        return facts.cluster.arn.clone();
    }
    format!("arn:{}:eks:{}:{}:cluster/{}", facts.partition, facts.region, facts.account_id, spec.cluster)
}

pub fn role_arn(facts: &Facts, path: &str, name: &str) -> String {
    format!("arn:{}:iam::{}:role{path}{name}", facts.partition, facts.account_id)
}

pub fn policy_arn(facts: &Facts, path: &str, name: &str) -> String {
    format!("arn:{}:iam::{}:policy{path}{name}", facts.partition, facts.account_id)
}

pub fn instance_profile_arn(facts: &Facts, path: &str, name: &str) -> String {
    format!("arn:{}:iam::{}:instance-profile{path}{name}", facts.partition, facts.account_id)
}

/// The default name of the node role karpctl creates.
pub fn default_node_role_name(cluster: &str) -> String {
    names::fit(&format!("KarpenterNodeRole-{cluster}"), 64).0
}

/// The node role's ARN: the one karpctl creates, or the existing one the plan names.
pub fn node_role_arn(spec: &Spec, facts: &Facts) -> String {
    let id = &spec.identity;
    match (&id.node_role, &id.existing_node_role) {
        (Some(n), _) => role_arn(facts, &id.path, &n.name),
        (None, Some(e)) if e.starts_with("arn:") => e.clone(),
        (None, Some(_)) if facts.existing_node_role_arn.is_some() => facts.existing_node_role_arn.clone().unwrap_or_default(),
        (None, Some(e)) => role_arn(facts, "/", e),
        (None, None) => String::new(),
    }
}

/// The controller role's ARN.
pub fn controller_role_arn(spec: &Spec, facts: &Facts) -> String {
    role_arn(facts, &spec.identity.path, &spec.identity.controller_role.name)
}

/// What the interruption policy's kms:Decrypt names until the key karpctl makes has an ARN:
/// `iam_policy` puts the ARN in its place when it writes (the policy depends on the key).
pub const ARN_AFTER_APPLY: &str = "(known after apply: the ARN of the KMS key karpctl makes)";
