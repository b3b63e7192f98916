//! What every IAM kind shares: error codes, tag conversions, the ownership message, and ARN paths.

use crate::aws::Retryable;
use crate::model::{Kind, Owner, Tags};
use anyhow::{Context, Result};
use aws_sdk_iam::types::Tag;

/// IAM's not-found error code.
pub const NO_SUCH_ENTITY: &str = "NoSuchEntity";

/// Attach/DetachRolePolicy while another change to the role is in flight.
pub const CONCURRENT: [Retryable; 1] = [Retryable { code: "ConcurrentModification", message: "" }];

/// IAM tags as a map.
pub fn tags_from(tags: &[Tag]) -> Tags {
    tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// A tag map for an IAM call.
pub fn sdk_tags(tags: &Tags) -> Result<Vec<Tag>> {
    tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build().context("building an IAM tag")).collect()
}

/// Whether every tag the plan wants is set with the wanted value.
pub fn tags_satisfied(live: &Tags, want: &Tags) -> bool {
    want.iter().all(|(k, v)| live.get(k) == Some(v))
}

/// The IAM path inside an IAM ARN (`arn:aws:iam::1:role/a/b/Name` -> `/a/b/`), for any resource
/// type (role, policy, instance-profile). None when the text is not an IAM ARN.
pub fn path_from_arn(arn: &str) -> Option<String> {
    let (_, rest) = arn.split_once(":iam::")?;
    let (_account, rest) = rest.split_once(':')?;
    let slash = rest.find('/')?;
    let resource = &rest[slash..];
    let last = resource.rfind('/')?;
    Some(resource[..=last].to_string())
}

/// The message for an object of the expected name that karpctl does not own.
pub fn not_managed(kind: Kind, name: &str, cluster: &str, owner: &Owner) -> String {
    match owner {
        Owner::OtherCluster(c) => format!(
            "{} {name} exists but is managed by karpctl for cluster {c}, not for cluster {cluster}; it was left untouched",
            kind.label()
        ),
        _ => format!("{} {name} exists but is not managed by karpctl for cluster {cluster}; it was left untouched", kind.label()),
    }
}
