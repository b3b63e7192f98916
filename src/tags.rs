//! The tag keys karpctl reads and writes, and how a tag map becomes a desired field.

use serde_json::Value;
use std::collections::BTreeMap;

/// Tag naming the cluster that owns an object.
pub const OWNER_TAG: &str = "karpctl.io/cluster";
/// Tag naming the logical id of the object in karpctl's graph.
pub const RESOURCE_TAG: &str = "karpctl.io/resource";
/// The tag Karpenter selects subnets and security groups by.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";
/// karpctl's marker: karpctl added the discovery tag on this object (value: the cluster).
pub const MARKER_TAG: &str = "karpctl.io/discovery";

/// A tag map as the JSON object a `tags` field holds.
pub fn to_value(tags: &BTreeMap<String, String>) -> Value {
    Value::Object(tags.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}
