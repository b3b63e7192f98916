//! The IAM roles (the node role and the controller role). A replace (path changed) attaches again
//! the managed policies that are not karpctl's own; a delete empties the role first (inline
//! policies, attachments, instance profiles: [`super::instance_profile::release_role`]).

use super::iam::{CONCURRENT, not_managed, sdk_tags, tags_satisfied};
use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::facts::prepared::Facts;
use crate::karpenter_iam;
use crate::model::{Action, ArnSpec, Fields, Kind, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::policy::doc;
use crate::spec::{IdentityMode, Spec};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Fields that cannot change in place: a change to one replaces the object.
pub const IMMUTABLE: &[&str] = &["path"];
/// Read order among kinds (0 first: the slowest reads start first): IAM, one memoised GetRole.
pub const READ_RANK: u8 = 3;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    IamRole,
    read_ahead: true,
    forget: |ctx, node| forget(ctx, &node.name),
    discover: Some(|ctx, nodes| Box::pin(super::iam_orphans::discover(ctx, nodes)))
);

/// The field holding a role's permissions boundary (a policy ARN). Desired only when the plan sets
/// `identity.permissions_boundary`; otherwise karpctl leaves any boundary alone.
const BOUNDARY: &str = "PermissionsBoundary";

/// Pure: the node role (when karpctl creates it, or to remove one it made before the plan named
/// an existing role) and the controller role. Fields: `path`, `AssumeRolePolicyDocument`
/// (canonical), `tags`.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let id = &spec.identity;
    let path = id.path.as_str();
    let role_fields = |trust: Value, node_id: &str| {
        let mut f = crate::model::fields_of(vec![
            ("path", json!(path)),
            ("AssumeRolePolicyDocument", trust),
            ("tags", arns::tags_value(spec, node_id)),
        ]);
        if let Some(b) = &id.permissions_boundary {
            f.insert(BOUNDARY.into(), json!(b));
        }
        f
    };
    let mut out = Vec::new();
    let created = id.node_role.as_ref();
    let node_role_name = created.map(|n| n.name.clone()).unwrap_or_else(|| arns::default_node_role_name(&spec.cluster));
    let existing_name = id.existing_node_role.as_deref().map(|e| e.rsplit('/').next().unwrap_or(e));
    if created.is_some() || existing_name != Some(node_role_name.as_str()) {
        let arn = arns::role_arn(facts, path, &node_role_name);
        out.push(
            Node::new("node-role", node_role_name, NodeSpec::IamRole(ArnSpec::new(arn)))
                .with_fields(created.map(|_| role_fields(node_trust(spec, facts), "node-role")))
                .with_notes(created.and_then(|n| n.note.clone())),
        );
    }
    let ctrl = &id.controller_role;
    let trust = match id.mode {
        IdentityMode::PodIdentity => karpenter_iam::controller_trust_pod_identity(&karpenter_iam::PodIdentityScope {
            cluster_arn: &arns::cluster_arn(spec, facts),
            namespace: &id.namespace,
            service_account: &id.service_account,
        }),
        IdentityMode::Irsa => {
            let issuer =
                facts.cluster.oidc_issuer.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
            let provider = format!("arn:{}:iam::{}:oidc-provider/{issuer}", facts.partition, facts.account_id);
            karpenter_iam::controller_trust_irsa(&provider, issuer, &id.namespace, &id.service_account)
        }
    };
    out.push(
        Node::new("controller-role", &ctrl.name, NodeSpec::IamRole(ArnSpec::new(arns::controller_role_arn(spec, facts))))
            .with_fields(Some(role_fields(trust, "controller-role")))
            .with_notes(ctrl.note.iter().cloned()),
    );
    out
}

/// The node role's trust: EC2, and with `identity.node_trust_source_account` only for this account.
fn node_trust(spec: &Spec, facts: &Facts) -> Value {
    let account = spec.identity.node_trust_source_account.then_some(facts.account_id.as_str());
    karpenter_iam::node_role_trust(&facts.partition, account)
}

/// DeleteRole while IAM still sees something attached (eventual consistency).
const DELETE_CONFLICT: [Condition; 2] = [Condition::DeleteConflict, Condition::ConcurrentModification];

use crate::aws::read::iam::LiveRole;

/// GetRole without the memo (for writes: ownership must be current). None when missing.
pub async fn get_role_fresh(ctx: &Ctx, name: &str) -> Result<Option<LiveRole>> {
    ctx.readers.iam.role_now(name).await
}

/// GetRole, memoised for the rest of the observation (shared by a role and its attachments).
pub async fn get_role(ctx: &Ctx, name: &str) -> Result<Option<LiveRole>> {
    ctx.readers.iam.role(name).await
}

/// The ARNs of the managed policies attached to a role (ListAttachedRolePolicies, paginated),
/// without the memo. None when the role does not exist.
pub async fn attached_policies(ctx: &Ctx, role: &str) -> Result<Option<Vec<String>>> {
    Ok(ctx.readers.iam.attached_now(role).await?.map(|ps| ps.into_iter().map(|p| p.arn).collect()))
}

/// DetachRolePolicy, retried on ConcurrentModification; already detached (or no such role) is
/// success.
pub async fn detach(ctx: &Ctx, step_id: &str, role: &str, policy_arn: &str) -> Result<()> {
    let r = aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), step_id, "iam:DetachRolePolicy", &CONCURRENT, || {
        ctx.aws.iam.detach_role_policy().role_name(role).policy_arn(policy_arn).send()
    })
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("iam:DetachRolePolicy", e)).with_context(|| format!("detaching {policy_arn} from IAM role {role}")),
    }
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(live) = get_role(ctx, &node.name).await? else { return Ok(None) };
    Ok(Some(observed(ctx, &live)?))
}

fn observed(ctx: &Ctx, live: &LiveRole) -> Result<Observed> {
    let trust = match live.trust.as_deref() {
        Some(t) if !t.trim().is_empty() => {
            doc::parse(t).with_context(|| format!("the trust policy of IAM role {} is not a valid policy document", live.name))?
        }
        _ => serde_json::Value::Null,
    };
    let mut fields = Fields::new();
    fields.insert("path".into(), json!(live.path));
    fields.insert("AssumeRolePolicyDocument".into(), trust);
    fields.insert("tags".into(), Ctx::tags_value(&live.tags));
    if let Some(b) = &live.boundary {
        fields.insert(BOUNDARY.into(), json!(b));
    }
    let mut ids = BTreeMap::new();
    ids.insert("arn".to_string(), live.arn.clone());
    Ok(Observed { fields, owner: Owner::from_tags(&live.tags, &ctx.cluster), ids })
}

/// GetRole, fresh: who owns the role now.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = get_role_fresh(ctx, &node.name).await?;
    Ok(live.map(|r| Current::new(Owner::from_tags(&r.tags, &ctx.cluster), r.tags).id("arn", r.arn)))
}

pub fn forget(ctx: &Ctx, name: &str) {
    ctx.readers.iam.forget_role(name);
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, _current: Option<&Current>) -> Result<()> {
    match step.action {
        Action::Create => create(ctx, step).await,
        Action::Update | Action::Adopt => update(ctx, step, step.action == Action::Adopt).await,
        Action::Replace => replace(ctx, step).await,
        Action::Delete => delete(ctx, step, true).await.map(|_| ()),
    }
}

fn trust_doc(node: &Node) -> Result<&serde_json::Value> {
    node.fields
        .as_ref()
        .and_then(|f| f.get("AssumeRolePolicyDocument"))
        .filter(|v| !v.is_null())
        .context("the plan has no trust policy for this role")
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let name = &node.name;
    let trust = doc::to_wire(trust_doc(node)?);
    let r = ctx
        .aws
        .iam
        .create_role()
        .role_name(name)
        .path(want_str(node, "path"))
        .assume_role_policy_document(&trust)
        // In the create call itself: an organisation's SCP may deny CreateRole without it.
        .set_permissions_boundary(wanted_boundary(node).map(str::to_string))
        .set_tags(Some(sdk_tags(&wanted_tags(node))?))
        .send()
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => {
            // Made since we read it (a concurrent run, or a name differing only in case).
            let Some(live) = get_role_fresh(ctx, name).await? else {
                bail!("iam:CreateRole said IAM role {name} already exists, but iam:GetRole cannot find it; run karpctl up again")
            };
            let owner = Owner::from_tags(&live.tags, &ctx.cluster);
            if owner != Owner::Ours {
                bail!(not_managed(Kind::IamRole, name, &ctx.cluster, &owner));
            }
            converge(ctx, step, &live).await
        }
        Err(e) => Err(aws_err("iam:CreateRole", e)),
    }
}

/// Bring a role of ours that a concurrent run created into line with the plan.
async fn converge(ctx: &Ctx, step: &Step, live: &LiveRole) -> Result<()> {
    let node = &step.node;
    let want_path = want_str(node, "path");
    if live.path != want_path {
        bail!(
            "IAM role {} is karpctl's but lives under path {}, not {want_path}; run karpctl up again to replace it",
            node.name,
            live.path
        );
    }
    let want = trust_doc(node)?;
    let same = live.trust.as_deref().and_then(|t| doc::parse(t).ok()).is_some_and(|d| doc::equivalent(&d, want));
    if !same {
        update_trust(ctx, node).await?;
    }
    let tags = wanted_tags(node);
    if !tags_satisfied(&live.tags, &tags) {
        tag_role(ctx, &node.name, &tags).await?;
    }
    if let Some(b) = wanted_boundary(node)
        && live.boundary.as_deref() != Some(b)
    {
        put_boundary(ctx, &node.name, b).await?;
    }
    Ok(())
}

fn wanted_boundary(node: &Node) -> Option<&str> {
    Some(want_str(node, BOUNDARY)).filter(|b| !b.is_empty())
}

async fn put_boundary(ctx: &Ctx, role: &str, boundary: &str) -> Result<()> {
    ctx.aws
        .iam
        .put_role_permissions_boundary()
        .role_name(role)
        .permissions_boundary(boundary)
        .send()
        .await
        .map_err(|e| aws_err("iam:PutRolePermissionsBoundary", e))?;
    Ok(())
}

async fn update_trust(ctx: &Ctx, node: &Node) -> Result<()> {
    ctx.aws
        .iam
        .update_assume_role_policy()
        .role_name(&node.name)
        .policy_document(doc::to_wire(trust_doc(node)?))
        .send()
        .await
        .map_err(|e| aws_err("iam:UpdateAssumeRolePolicy", e))?;
    Ok(())
}

async fn tag_role(ctx: &Ctx, name: &str, tags: &Tags) -> Result<()> {
    if tags.is_empty() {
        return Ok(());
    }
    ctx.aws.iam.tag_role().role_name(name).set_tags(Some(sdk_tags(tags)?)).send().await.map_err(|e| aws_err("iam:TagRole", e))?;
    Ok(())
}

async fn update(ctx: &Ctx, step: &Step, adopt: bool) -> Result<()> {
    let node = &step.node;
    if adopt || changed(step, "tags") {
        let stale = crate::ctx::stale_tags(step);
        if !stale.is_empty() {
            ctx.aws
                .iam
                .untag_role()
                .role_name(&node.name)
                .set_tag_keys(Some(stale))
                .send()
                .await
                .map_err(|e| aws_err("iam:UntagRole", e))?;
        }
        // Adopting tags first: from here on the role is ours, whatever else fails.
        tag_role(ctx, &node.name, &wanted_tags(node)).await?;
    }
    if changed(step, "AssumeRolePolicyDocument") {
        update_trust(ctx, node).await?;
    }
    if changed(step, BOUNDARY)
        && let Some(b) = wanted_boundary(node)
    {
        put_boundary(ctx, &node.name, b).await?;
    }
    Ok(())
}

/// The path changed: delete the old role (which also detaches its policies), create it under the
/// new path, and attach again what it had, except karpctl's own policies under the old path.
async fn replace(ctx: &Ctx, step: &Step) -> Result<()> {
    let old_path = step.observed.as_ref().and_then(|o| o.fields.get("path")).and_then(|p| p.as_str()).unwrap_or("/").to_string();
    let detached = delete(ctx, step, false).await?;
    // The same name again: wait until IAM shows the old role gone, so that CreateRole does not
    // meet it (docs/aws-behaviour.md section 9).
    let name = &step.node.name;
    let gone = || async { Ok(get_role_fresh(ctx, name).await?.is_none()) };
    aws::wait_until(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "IAM to show the old role deleted", gone).await?;
    create(ctx, step).await?;
    let own_prefix = format!("arn:{}:iam::{}:policy{old_path}", ctx.partition, ctx.account_id);
    for arn in detached {
        if old_path != "/" && arn.starts_with(&own_prefix) {
            continue;
        }
        let r = aws::with_consistency(
            &ctx.consistency,
            ctx.reporter.as_ref(),
            &step.id,
            "iam:AttachRolePolicy",
            &ATTACH_FRESH_ROLE,
            || ctx.aws.iam.attach_role_policy().role_name(&step.node.name).policy_arn(&arn).send(),
        )
        .await;
        r.map_err(|e| aws_err("iam:AttachRolePolicy", e))
            .with_context(|| format!("re-attaching {arn} to the replaced IAM role {}", step.node.name))?;
    }
    Ok(())
}

/// AttachRolePolicy right after CreateRole: a role IAM does not see yet, or a concurrent change.
pub const ATTACH_FRESH_ROLE: [Condition; 2] = [Condition::ConcurrentModification, Condition::MissingRole];

async fn inline_policies(ctx: &Ctx, role: &str) -> Result<Vec<String>> {
    Ok(ctx.readers.iam.inline_names_now(role).await?.unwrap_or_default())
}

async fn profiles_for_role(ctx: &Ctx, role: &str) -> Result<Vec<String>> {
    Ok(ctx.readers.iam.profiles_for_role(role).await?.into_iter().map(|(name, _)| name).collect())
}

/// Delete the role (the dispatcher has just checked it is still ours). Returns the managed
/// policies that were detached. `for_good`: not a replace (Karpenter's own instance profiles are
/// deleted only then).
async fn delete(ctx: &Ctx, step: &Step, for_good: bool) -> Result<Vec<String>> {
    let name = &step.node.name;
    for p in inline_policies(ctx, name).await? {
        match ctx.aws.iam.delete_role_policy().role_name(name).policy_name(&p).send().await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(aws_err("iam:DeleteRolePolicy", e))
                    .with_context(|| format!("deleting inline policy {p} of IAM role {name}"));
            }
        }
    }
    let attached = attached_policies(ctx, name).await?.unwrap_or_default();
    for arn in &attached {
        detach(ctx, &step.id, name, arn).await?;
    }
    for profile in profiles_for_role(ctx, name).await? {
        super::instance_profile::release_role(ctx, &profile, name, for_good).await?;
    }
    let r = aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "iam:DeleteRole", &DELETE_CONFLICT, || {
        ctx.aws.iam.delete_role().role_name(name).send()
    })
    .await;
    match r {
        Ok(_) => Ok(attached),
        Err(e) if e.is_not_found() => Ok(attached),
        Err(e) => Err(aws_err("iam:DeleteRole", e)),
    }
}
