//! The node instance profile (opt-in, or made for isolated subnets), holding the node role; and
//! [`release_role`], which empties every profile holding a role before the role's delete.

use super::iam::{not_managed, sdk_tags, tags_satisfied};
use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::facts::prepared::Facts;
use crate::model::{ArnSpec, Fields, Kind, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::spec::Spec;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Fields that cannot change in place: a change to one replaces the object.
pub const IMMUTABLE: &[&str] = &["path"];
/// Read order among kinds (0 first: the slowest reads start first): IAM, one call.
pub const READ_RANK: u8 = 3;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    InstanceProfile,
    read_ahead: true,
    forget: |_, _| {},
    discover: None,
    apply: standard
);

/// AddRoleToInstanceProfile just after either was created (docs/aws-behaviour.md section 5).
const ADD_ROLE_RETRY: [Condition; 3] =
    [Condition::InstanceProfileNotYetValid, Condition::MissingRole, Condition::MissingInstanceProfile];

/// Whether karpctl makes the node instance profile: the plan asks for it
/// (`identity.instance_profile`), or the nodes' subnets are isolated, where Karpenter cannot
/// create instance profiles (there is no IAM VPC endpoint) and the EC2NodeClass must name one
/// (`spec.instanceProfile`).
pub fn wanted(spec: &Spec, facts: &Facts) -> bool {
    spec.identity.instance_profile.is_some() || facts.discovery.isolated
}

/// Pure: the instance profile (see [`wanted`]), holding the node role. Fields: `path`, `Role`
/// (the role's name), `tags`.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let id = &spec.identity;
    let path = id.path.as_str();
    let ip = &id.instance_profile_name;
    let fields = wanted(spec, facts).then(|| {
        crate::model::fields_of(vec![
            ("path", json!(path)),
            ("Role", json!(id.node_role_name())),
            ("tags", arns::tags_value(spec, "node-instance-profile")),
        ])
    });
    let deps = if id.node_role.is_some() { vec!["node-role"] } else { vec![] };
    let arn = arns::instance_profile_arn(facts, path, &ip.name);
    let node = Node::new("node-instance-profile", &ip.name, NodeSpec::InstanceProfile(ArnSpec::new(arn)))
        .with_fields(fields)
        .with_deps(deps)
        .with_notes(ip.note.iter().cloned().chain(isolated_note(spec, facts)));
    // Made while the subnets were isolated, and not switched off by the plan: nodes may still
    // run with it (the EC2NodeClass names it), so a VPC that gains a way out does not take it.
    if !wanted(spec, facts) && !id.instance_profile_off { vec![node.keep_existing()] } else { vec![node] }
}

/// Why karpctl makes the profile though the plan does not ask for it.
fn isolated_note(spec: &Spec, facts: &Facts) -> Option<String> {
    (facts.discovery.isolated && spec.identity.instance_profile.is_none()).then(|| {
        "made because the nodes' subnets are isolated: without an IAM endpoint Karpenter cannot create instance profiles, so the EC2NodeClass names this one (spec.instanceProfile)".to_string()
    })
}

use crate::aws::read::iam::LiveProfile;

/// GetInstanceProfile; None when missing.
pub async fn get(ctx: &Ctx, name: &str) -> Result<Option<LiveProfile>> {
    ctx.readers.iam.instance_profile(name).await
}

/// Whether Karpenter made this instance profile for `cluster`: an EC2NodeClass tag,
/// `eks:eks-cluster-name=<c>` and `kubernetes.io/cluster/<c>=owned` all together (an `owned` tag
/// alone could be a Terraform or eksctl profile, which is never deleted).
pub fn karpenter_made_for(tags: &Tags, cluster: &str) -> bool {
    let owned = tags.get(&format!("kubernetes.io/cluster/{cluster}")).is_some_and(|v| v == "owned");
    let nodeclass =
        tags.contains_key("karpenter.k8s.aws/ec2nodeclass") && tags.get("eks:eks-cluster-name").is_some_and(|v| v == cluster);
    owned && nodeclass
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(live) = get(ctx, &node.name).await? else { return Ok(None) };
    let mut fields = Fields::new();
    fields.insert("path".into(), json!(live.path));
    fields.insert("Role".into(), live.roles.first().map(|r| json!(r)).unwrap_or(Value::Null));
    fields.insert("tags".into(), Ctx::tags_value(&live.tags));
    let mut ids = BTreeMap::new();
    ids.insert("arn".to_string(), live.arn.clone());
    Ok(Some(Observed { fields, owner: Owner::from_tags(&live.tags, &ctx.cluster), ids }))
}

/// GetInstanceProfile, fresh: who owns the profile now.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = get(ctx, &node.name).await?;
    Ok(live.map(|p| Current::new(Owner::from_tags(&p.tags, &ctx.cluster), p.tags).id("arn", p.arn)))
}

async fn add_role(ctx: &Ctx, step_id: &str, profile: &str, role: &str) -> Result<()> {
    let r = aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        step_id,
        "iam:AddRoleToInstanceProfile",
        &ADD_ROLE_RETRY,
        || ctx.aws.iam.add_role_to_instance_profile().instance_profile_name(profile).role_name(role).send(),
    )
    .await;
    r.map_err(|e| aws_err("iam:AddRoleToInstanceProfile", e))
        .with_context(|| format!("adding IAM role {role} to instance profile {profile}"))?;
    Ok(())
}

/// RemoveRoleFromInstanceProfile; already removed (or no such profile) is success.
async fn remove_role(ctx: &Ctx, profile: &str, role: &str) -> Result<()> {
    match ctx.aws.iam.remove_role_from_instance_profile().instance_profile_name(profile).role_name(role).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("iam:RemoveRoleFromInstanceProfile", e))
            .with_context(|| format!("removing IAM role {role} from instance profile {profile}")),
    }
}

async fn tag(ctx: &Ctx, name: &str, tags: &Tags) -> Result<()> {
    if tags.is_empty() {
        return Ok(());
    }
    ctx.aws
        .iam
        .tag_instance_profile()
        .instance_profile_name(name)
        .set_tags(Some(sdk_tags(tags)?))
        .send()
        .await
        .map_err(|e| aws_err("iam:TagInstanceProfile", e))?;
    Ok(())
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let name = &node.name;
    let r = ctx
        .aws
        .iam
        .create_instance_profile()
        .instance_profile_name(name)
        .path(want_str(node, "path"))
        .set_tags(Some(sdk_tags(&wanted_tags(node))?))
        .send()
        .await;
    match r {
        Ok(_) => add_role(ctx, &step.id, name, want_str(node, "Role")).await,
        Err(e) if e.is_already_exists() => {
            let Some(live) = get(ctx, name).await? else {
                bail!(
                    "iam:CreateInstanceProfile said instance profile {name} already exists, but iam:GetInstanceProfile cannot find it; run karpctl up again"
                )
            };
            let owner = Owner::from_tags(&live.tags, &ctx.cluster);
            if owner != Owner::Ours {
                bail!(not_managed(Kind::InstanceProfile, name, &ctx.cluster, &owner));
            }
            let want_path = want_str(node, "path");
            if live.path != want_path {
                bail!(
                    "instance profile {name} is karpctl's but lives under path {}, not {want_path}; run karpctl up again to replace it",
                    live.path
                );
            }
            let tags = wanted_tags(node);
            if !tags_satisfied(&live.tags, &tags) {
                tag(ctx, name, &tags).await?;
            }
            set_role(ctx, &step.id, name, &live.roles, want_str(node, "Role")).await
        }
        Err(e) => Err(aws_err("iam:CreateInstanceProfile", e)),
    }
}

/// Make the profile hold exactly `want`: remove any other role, then add `want` if missing.
async fn set_role(ctx: &Ctx, step_id: &str, profile: &str, live_roles: &[String], want: &str) -> Result<()> {
    for r in live_roles {
        if !r.eq_ignore_ascii_case(want) {
            remove_role(ctx, profile, r).await?;
        }
    }
    if !live_roles.iter().any(|r| r.eq_ignore_ascii_case(want)) && !want.is_empty() {
        add_role(ctx, step_id, profile, want).await?;
    }
    Ok(())
}

async fn update(ctx: &Ctx, step: &Step, adopt: bool) -> Result<()> {
    let node = &step.node;
    let name = &node.name;
    if adopt || changed(step, "tags") {
        let stale = crate::ctx::stale_tags(step);
        if !stale.is_empty() {
            ctx.aws
                .iam
                .untag_instance_profile()
                .instance_profile_name(name)
                .set_tag_keys(Some(stale))
                .send()
                .await
                .map_err(|e| aws_err("iam:UntagInstanceProfile", e))?;
        }
        tag(ctx, name, &wanted_tags(node)).await?;
    }
    if changed(step, "Role") {
        // Fresh: the profile may have changed since the plan was made.
        let Some(live) = get(ctx, name).await? else {
            bail!("instance profile {name} disappeared since it was read; run karpctl up again")
        };
        set_role(ctx, &step.id, name, &live.roles, want_str(node, "Role")).await?;
    }
    Ok(())
}

async fn delete_profile(ctx: &Ctx, name: &str) -> Result<()> {
    match ctx.aws.iam.delete_instance_profile().instance_profile_name(name).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("iam:DeleteInstanceProfile", e)).with_context(|| format!("deleting instance profile {name}")),
    }
}

async fn delete(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    // The roles it holds now (its ownership was checked just before by the dispatcher).
    let Some(live) = get(ctx, name).await? else { return Ok(()) };
    for r in &live.roles {
        remove_role(ctx, name, r).await?;
    }
    delete_profile(ctx, name).await
}

/// For a role being deleted: take it out of `profile`, and, when the role goes for good
/// (`for_good`: not a replace), delete the profile when Karpenter made it for this cluster or
/// karpctl did (checked on fresh tags). Any other profile is only emptied of the role.
pub async fn release_role(ctx: &Ctx, profile: &str, role: &str, for_good: bool) -> Result<()> {
    let Some(live) = get(ctx, profile).await? else { return Ok(()) };
    remove_role(ctx, profile, role).await?;
    let ours = Owner::from_tags(&live.tags, &ctx.cluster) == Owner::Ours;
    let others = live.roles.iter().any(|r| !r.eq_ignore_ascii_case(role));
    if for_good && (ours || karpenter_made_for(&live.tags, &ctx.cluster)) && !others {
        delete_profile(ctx, profile).await?;
        ctx.reporter.event(crate::events::Event::Info(&format!(
            "deleted instance profile {profile}, which held IAM role {role} ({})",
            if ours { "karpctl's" } else { "made by Karpenter for this cluster" }
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn karpenter_profiles_are_recognised_per_cluster() {
        let karpenter = tags(&[
            ("kubernetes.io/cluster/c1", "owned"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", "c1"),
            ("topology.kubernetes.io/region", "us-east-1"),
        ]);
        assert!(karpenter_made_for(&karpenter, "c1"));
        assert!(!karpenter_made_for(&karpenter, "c2"), "another cluster's profile");
        assert!(!karpenter_made_for(&karpenter, "c"), "a prefix of the cluster name is not the cluster");
        assert!(
            !karpenter_made_for(&tags(&[("kubernetes.io/cluster/c1", "owned")]), "c1"),
            "an owned tag alone may be Terraform's"
        );
        assert!(!karpenter_made_for(&tags(&[("kubernetes.io/cluster/c1", "shared")]), "c1"));
        assert!(!karpenter_made_for(&tags(&[("karpenter.k8s.aws/ec2nodeclass", "x"), ("eks:eks-cluster-name", "c1")]), "c1"));
        assert!(!karpenter_made_for(&tags(&[("eks:eks-cluster-name", "c1")]), "c1"), "EKS's tag alone is not Karpenter's");
        assert!(!karpenter_made_for(&tags(&[("Name", "whatever")]), "c1"));
    }
}
