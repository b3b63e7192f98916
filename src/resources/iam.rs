//! What every IAM kind shares: the retried conditions, tag conversions, the ownership message, and ARN paths.

use crate::aws::Condition;
use crate::model::{Kind, Node, Owner, Tags};
use anyhow::{Context, Result};
use aws_sdk_iam::types::Tag;

/// Attach/DetachRolePolicy while another change to the role is in flight.
pub const CONCURRENT: [Condition; 1] = [Condition::ConcurrentModification];

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

/// The IAM path the plan puts its objects under: from an IamRole node's desired `path`, else
/// parsed from the spec ARN of any IAM node.
pub fn plan_iam_path(nodes: &[Node]) -> Option<String> {
    let from_fields = nodes
        .iter()
        .filter(|n| matches!(n.kind, Kind::IamRole | Kind::IamPolicy | Kind::InstanceProfile))
        .find_map(|n| n.fields.as_ref()?.get("path")?.as_str().map(str::to_string));
    from_fields.or_else(|| {
        nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::IamRole | Kind::IamPolicy | Kind::InstanceProfile))
            .find_map(|n| path_from_arn(n.spec.arn()))
    })
}

/// Create the Spot service-linked role (`up`, opted in, missing). "Has been taken" means another
/// caller made it meanwhile: done.
pub async fn create_spot_role(ctx: &crate::ctx::Ctx) -> Result<()> {
    use crate::aws::Classify;
    match ctx.aws.iam.create_service_linked_role().aws_service_name("spot.amazonaws.com").send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(crate::aws::aws_err("iam:CreateServiceLinkedRole", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ArnSpec, Fields, NodeSpec};
    use serde_json::json;

    fn node(id: &str, spec: NodeSpec, name: &str, path: Option<&str>) -> Node {
        Node::new(id, name, spec).with_fields(path.map(|p| {
            let mut f = Fields::new();
            f.insert("path".into(), json!(p));
            f
        }))
    }

    #[test]
    fn paths_come_out_of_iam_arns() {
        assert_eq!(path_from_arn("arn:aws:iam::123456789012:role/karpctl/c/KarpenterNodeRole-c").as_deref(), Some("/karpctl/c/"));
        assert_eq!(path_from_arn("arn:aws:iam::123456789012:role/Name").as_deref(), Some("/"));
        assert_eq!(path_from_arn("arn:aws-cn:iam::1:policy/a/b/c/P").as_deref(), Some("/a/b/c/"));
        assert_eq!(path_from_arn("arn:aws:iam::1:instance-profile/karpctl/x/IP").as_deref(), Some("/karpctl/x/"));
        assert_eq!(path_from_arn("arn:aws:sqs:us-east-1:1:q"), None);
        assert_eq!(path_from_arn(""), None);
    }

    #[test]
    fn the_plan_path_prefers_desired_fields_then_arns() {
        let role = |arn: &str| NodeSpec::IamRole(ArnSpec::new(arn));
        let down = vec![node("node-role", role("arn:aws:iam::1:role/karpctl/c/R"), "R", None)];
        assert_eq!(plan_iam_path(&down).as_deref(), Some("/karpctl/c/"));
        let up = vec![
            node("q", NodeSpec::Queue(ArnSpec::new("arn:aws:sqs:us-east-1:1:Q")), "Q", None),
            node("controller-role", role("arn:aws:iam::1:role/old/C"), "C", Some("/new/")),
        ];
        assert_eq!(plan_iam_path(&up).as_deref(), Some("/new/"));
        assert_eq!(plan_iam_path(&[]), None);
    }

    #[test]
    fn wanted_tags_must_all_match() {
        let live: Tags = [("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())].into();
        assert!(tags_satisfied(&live, &[("a".to_string(), "1".to_string())].into()));
        assert!(!tags_satisfied(&live, &[("a".to_string(), "2".to_string())].into()));
        assert!(!tags_satisfied(&live, &[("c".to_string(), "1".to_string())].into()));
    }
}
