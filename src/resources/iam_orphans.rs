//! IAM objects under the plan's IAM path that the plan does not name (renamed, or switched off):
//! roles, customer managed policies and instance profiles, found with one scoped list call each.
//! They become nodes without desired fields; their normal reads decide ownership by tags.

use super::ctx::Ctx;
use super::iam::plan_iam_path;
use crate::model::{ArnSpec, Kind, Node, NodeSpec};
use anyhow::Result;
use std::collections::BTreeSet;

/// Names of `kind` the plan already has, case-folded (IAM names are unique case-insensitively,
/// and a discovered object must never shadow a planned one).
fn known(nodes: &[Node], kind: Kind) -> BTreeSet<String> {
    nodes.iter().filter(|n| n.kind == kind).map(|n| n.name.to_lowercase()).collect()
}

fn orphan(spec: NodeSpec, prefix: &str, name: &str, path: &str, deps: Vec<String>) -> Node {
    Node::new(format!("unlisted-{prefix}-{name}"), name, spec)
        .with_deps(deps)
        .with_notes([format!("under karpctl's IAM path {path} but not in the plan")])
        .unlisted()
}

/// IAM objects under the plan's path that the plan does not name (renamed, or switched off):
/// roles, customer managed policies and instance profiles. Their reads decide ownership by tags;
/// only karpctl's for this cluster are then deleted. Orphan policies and instance profiles list
/// every role node as a dependency, so a role being deleted goes after them.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let Some(path) = plan_iam_path(nodes) else { return Ok(vec![]) };
    if path == "/" {
        // Not scoped to karpctl: listing would read every role, policy and profile in the account.
        return Ok(vec![]);
    }
    let (roles, policies, profiles) =
        tokio::try_join!(list_roles(ctx, &path), list_policies(ctx, &path), list_profiles(ctx, &path))?;

    let mut out = Vec::new();
    let known_roles = known(nodes, Kind::IamRole);
    for (name, arn) in roles {
        if !known_roles.contains(&name.to_lowercase()) {
            out.push(orphan(NodeSpec::IamRole(ArnSpec::new(arn)), "role", &name, &path, vec![]));
        }
    }
    let role_ids: Vec<String> =
        nodes.iter().filter(|n| n.kind == Kind::IamRole).map(|n| n.id.clone()).chain(out.iter().map(|n| n.id.clone())).collect();
    let known_policies = known(nodes, Kind::IamPolicy);
    for (name, arn) in policies {
        if !known_policies.contains(&name.to_lowercase()) {
            out.push(orphan(NodeSpec::IamPolicy(ArnSpec::new(arn)), "policy", &name, &path, role_ids.clone()));
        }
    }
    let known_profiles = known(nodes, Kind::InstanceProfile);
    for (name, arn) in profiles {
        if !known_profiles.contains(&name.to_lowercase()) {
            out.push(orphan(NodeSpec::InstanceProfile(ArnSpec::new(arn)), "instance-profile", &name, &path, role_ids.clone()));
        }
    }
    Ok(out)
}

// Scoped lists, paginated by the SDK. They give names and ARNs only: ownership is always
// decided by the normal read (tags), never by a list.
async fn list_roles(ctx: &Ctx, path: &str) -> Result<Vec<(String, String)>> {
    Ok(ctx.readers.iam.roles(Some(path)).await?.into_iter().map(|r| (r.name, r.arn)).collect())
}

async fn list_policies(ctx: &Ctx, path: &str) -> Result<Vec<(String, String)>> {
    ctx.readers.iam.local_policies(path).await
}

async fn list_profiles(ctx: &Ctx, path: &str) -> Result<Vec<(String, String)>> {
    ctx.readers.iam.instance_profiles(path).await
}
