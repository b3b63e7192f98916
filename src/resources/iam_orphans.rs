//! IAM objects the plan does not name (renamed, or switched off): under its IAM path, one scoped
//! list call each; for `down`, also those of this cluster attached to its roles (a path of `/`).
//! They become nodes without desired fields; their normal reads decide ownership by tags.

use super::iam::plan_iam_path;
use crate::ctx::Ctx;
use crate::model::{ArnSpec, Kind, Node, NodeSpec};
use anyhow::Result;
use std::collections::BTreeSet;

/// Names of `kind` the plan already has, case-folded (IAM names are unique case-insensitively,
/// and a discovered object must never shadow a planned one).
fn known(nodes: &[Node], kind: Kind) -> BTreeSet<String> {
    nodes.iter().filter(|n| n.kind == kind).map(|n| n.name.to_lowercase()).collect()
}

fn orphan(spec: NodeSpec, prefix: &str, name: &str, path: &str, deps: Vec<String>) -> Node {
    unlisted(spec, prefix, name, format!("under karpctl's IAM path {path} but not in the plan"), deps)
}

fn unlisted(spec: NodeSpec, prefix: &str, name: &str, note: String, deps: Vec<String>) -> Node {
    Node::new(format!("unlisted-{prefix}-{name}"), name, spec).with_deps(deps).with_notes([note]).unlisted()
}

/// `down` without a plan file: a role of this cluster found by `locate` that the plan does not
/// name, found `how`; its read decides ownership, as for any node.
pub fn found_role(name: &str, arn: &str, how: &str) -> Node {
    unlisted(NodeSpec::IamRole(ArnSpec::new(arn)), "role", name, format!("found through {how}, but not in the plan"), vec![])
}

/// `down`: this cluster's customer managed policies attached to the plan's roles, and its
/// instance profiles holding them, that the plan does not name, wherever they live (`discover`
/// lists only under a path other than `/`): an older release's policy, say, after a takeover.
/// Found through the roles (their memoised attachment reads), kept only when their own tags name
/// this cluster; every role node is their dependency, so the roles go after them.
pub async fn attached_to_roles(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let roles: Vec<&Node> = nodes.iter().filter(|n| n.kind == Kind::IamRole).collect();
    let role_ids: Vec<String> = roles.iter().map(|n| n.id.clone()).collect();
    let known_policies: BTreeSet<String> =
        nodes.iter().filter(|n| n.kind == Kind::IamPolicy).map(|n| n.spec.arn().to_lowercase()).collect();
    let known_profiles = known(nodes, Kind::InstanceProfile);
    let ours = |tags: &crate::model::Tags| tags.get(crate::tags::OWNER_TAG) == Some(&ctx.cluster);
    let mut out: Vec<Node> = Vec::new();
    for role in roles {
        for a in ctx.readers.iam.attached(&role.name).await?.unwrap_or_default() {
            if a.arn.contains(":iam::aws:policy/")
                || known_policies.contains(&a.arn.to_lowercase())
                || out.iter().any(|n| n.spec.arn() == a.arn)
            {
                continue;
            }
            if ctx.readers.iam.policy(&a.arn).await?.is_some_and(|p| ours(&p.tags)) {
                let note = format!("tagged for cluster {} and attached to role {}, but not in the plan", ctx.cluster, role.name);
                out.push(unlisted(NodeSpec::IamPolicy(ArnSpec::new(a.arn.clone())), "policy", &a.name, note, role_ids.clone()));
            }
        }
        for (name, _) in ctx.readers.iam.profiles_for_role(&role.name).await? {
            if known_profiles.contains(&name.to_lowercase())
                || out.iter().any(|n| n.kind == Kind::InstanceProfile && n.name == name)
            {
                continue;
            }
            if let Some(p) = ctx.readers.iam.instance_profile(&name).await?.filter(|p| ours(&p.tags)) {
                let note = format!("tagged for cluster {} and holding role {}, but not in the plan", ctx.cluster, role.name);
                out.push(unlisted(
                    NodeSpec::InstanceProfile(ArnSpec::new(p.arn)),
                    "instance-profile",
                    &name,
                    note,
                    role_ids.clone(),
                ));
            }
        }
    }
    Ok(out)
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
