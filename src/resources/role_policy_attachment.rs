//! Managed policies attached to karpctl's roles. All of a role's attachments share one memoised
//! ListAttachedRolePolicies and take their ownership from the role; attach and detach are retried
//! while IAM has not yet propagated the role or the policy.

use super::iam_role::{ATTACH_FRESH_ROLE, detach, get_role, get_role_fresh};
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current};
use crate::facts::prepared::Facts;
use crate::karpenter_iam;
use crate::model::{Action, AttachmentSpec, Fields, Node, NodeSpec, Observed, Owner, Step};
use crate::spec::Spec;
use anyhow::{Result, bail};
use serde_json::json;
use std::collections::BTreeMap;

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): IAM, one memoised list per role.
pub const READ_RANK: u8 = 3;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    RolePolicyAttachment,
    read_ahead: true,
    forget: forget,
    discover: Some(|ctx, nodes| Box::pin(discover(ctx, nodes)))
);

/// AttachRolePolicy for a policy this plan has just created.
const ATTACH_FRESH_POLICY: [Condition; 3] = [Condition::ConcurrentModification, Condition::MissingRole, Condition::MissingPolicy];

/// The role's attached policy ARNs, memoised for the observation. None: no such role.
pub async fn attached(ctx: &Ctx, role: &str) -> Result<Option<Vec<String>>> {
    Ok(ctx.readers.iam.attached(role).await?.map(|ps| ps.into_iter().map(|p| p.arn).collect()))
}

fn spec_of(node: &Node) -> Option<&AttachmentSpec> {
    match &node.spec {
        NodeSpec::RolePolicyAttachment(a) => Some(a),
        _ => None,
    }
}

fn role_name(node: &Node) -> &str {
    match spec_of(node) {
        Some(a) if !a.role.is_empty() => &a.role,
        _ => node.name.split('/').next().unwrap_or_default(),
    }
}

fn policy_arn(node: &Node) -> &str {
    match spec_of(node) {
        Some(a) if !a.policy_arn.is_empty() => &a.policy_arn,
        _ => node.fields.as_ref().and_then(|f| f.get("PolicyArn")).and_then(|v| v.as_str()).unwrap_or_default(),
    }
}

/// An attachment node of `role_id`'s role: it goes with the role when the role is deleted.
fn attachment(id: String, role_id: &str, role: &str, policy_arn: &str, name_tail: &str) -> Node {
    let spec = AttachmentSpec { role: role.to_string(), policy_arn: policy_arn.to_string(), owner_from: role_id.to_string() };
    Node::new(id, format!("{role}/{name_tail}"), NodeSpec::RolePolicyAttachment(spec)).with_deps([role_id]).contained_in(role_id)
}

/// The last segment of a policy ARN, used in ids and names of attachments.
fn policy_short_name(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

/// Pure: the node role's managed policies (only when karpctl creates the role), and each
/// controller policy's attachment to the controller role. Field: `PolicyArn`. Node policies an
/// older plan (another Karpenter version, IPv4/IPv6) may have attached are listed without
/// desired fields, so that they are detached when no longer wanted.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let id = &spec.identity;
    let mut out = Vec::new();
    if id.node_role.is_some() {
        let node_role_name = id.node_role_name();
        let ipv6 = facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
        let mut arns = karpenter_iam::node_managed_policy_arns(&facts.partition, &facts.account_id, ipv6, id.karpenter_version);
        for extra in &id.extra_node_policy_arns {
            if !arns.contains(extra) {
                arns.push(extra.clone());
            }
        }
        let mut previous: Vec<String> = Vec::new();
        for v in [karpenter_iam::KarpenterVersion { minor: 0 }, karpenter_iam::KarpenterVersion::LATEST] {
            for six in [false, true] {
                previous.extend(karpenter_iam::node_managed_policy_arns(&facts.partition, &facts.account_id, six, v));
            }
        }
        previous.sort();
        previous.dedup();
        previous.retain(|a| !arns.contains(a));
        let wanted = arns.iter().map(|a| (a, true));
        let unwanted = previous.iter().map(|a| (a, false));
        for (arn, want) in wanted.chain(unwanted) {
            let short = policy_short_name(arn);
            out.push(
                attachment(format!("node-role-policy-{short}"), "node-role", &node_role_name, arn, short)
                    .with_fields(want.then(|| crate::model::fields_of(vec![("PolicyArn", json!(arn))]))),
            );
        }
    }
    let ctrl = &id.controller_role.name;
    for p in super::iam_policy::controller_policies(spec, facts) {
        let wanted = p.doc.is_some();
        let mut n =
            attachment(format!("controller-policy-attachment-{}", p.part.name()), "controller-role", ctrl, &p.arn, &p.name)
                .with_fields(wanted.then(|| crate::model::fields_of(vec![("PolicyArn", json!(p.arn))])));
        n.deps.push(p.id.clone());
        out.push(n);
    }
    // Policies kept on the controller role besides karpctl's own (`extra_controller_policy_arns`):
    // attached and kept, never detached as unlisted.
    for arn in &id.extra_controller_policy_arns {
        let short = policy_short_name(arn);
        out.push(
            attachment(format!("controller-extra-policy-{short}"), "controller-role", ctrl, arn, short)
                .with_fields(Some(crate::model::fields_of(vec![("PolicyArn", json!(arn))]))),
        );
    }
    out
}

/// Managed policies attached to a role karpctl creates that the plan does not list (removed
/// from `extra_node_policy_arns`, say): nodes without desired fields, so that they are detached.
/// Uses the memoised list the attachments' reads share: no extra call.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let roles: Vec<&Node> = nodes.iter().filter(|n| n.kind == crate::model::Kind::IamRole && n.fields.is_some()).collect();
    let mut out = Vec::new();
    for role in roles {
        let known: std::collections::BTreeSet<&str> = nodes
            .iter()
            .filter(|n| n.kind == crate::model::Kind::RolePolicyAttachment && role_name(n) == role.name)
            .map(policy_arn)
            .collect();
        for arn in attached(ctx, &role.name).await?.unwrap_or_default() {
            if known.contains(arn.as_str()) {
                continue;
            }
            let short = arn.rsplit('/').next().unwrap_or(&arn).to_string();
            out.push(
                attachment(format!("unlisted-attachment-{}-{short}", role.id), &role.id, &role.name, &arn, &short)
                    .with_notes(["attached to karpctl's role but not in the plan".to_string()])
                    .unlisted(),
            );
        }
    }
    Ok(out)
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let role = role_name(node);
    let arn = policy_arn(node);
    let (list, live_role) = tokio::try_join!(attached(ctx, role), get_role(ctx, role))?;
    let (Some(list), Some(live_role)) = (list, live_role) else { return Ok(None) };
    if !list.iter().any(|a| a == arn) {
        return Ok(None);
    }
    let mut fields = Fields::new();
    fields.insert("PolicyArn".into(), json!(arn));
    let mut ids = BTreeMap::new();
    ids.insert("role".to_string(), live_role.name.clone());
    ids.insert("policy_arn".to_string(), arn.to_string());
    Ok(Some(Observed { fields, owner: Owner::from_tags(&live_role.tags, &ctx.cluster), ids }))
}

/// GetRole, fresh: an attachment is its role's, so the role's owner is the attachment's (None:
/// the role is gone, and the attachment with it).
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = get_role_fresh(ctx, role_name(node)).await?;
    Ok(live.map(|r| Current::new(Owner::from_tags(&r.tags, &ctx.cluster), r.tags).id("role", r.name)))
}

pub fn forget(ctx: &Ctx, node: &Node) {
    forget_role(ctx, role_name(node));
}

/// Drop the memoised list of `role`'s attached policies.
pub fn forget_role(ctx: &Ctx, role: &str) {
    ctx.readers.iam.forget_attached(role);
}

/// The role's ownership was checked just now by the dispatcher, for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, _current: Option<&Current>) -> Result<()> {
    let node = &step.node;
    let role = role_name(node);
    let arn = policy_arn(node);
    match step.action {
        Action::Create | Action::Update | Action::Adopt | Action::Replace => attach(ctx, step, role, arn).await,
        Action::Delete => detach(ctx, &step.id, role, arn).await,
    }
}

async fn attach(ctx: &Ctx, step: &Step, role: &str, arn: &str) -> Result<()> {
    // A dependency other than the role is a policy this plan creates: IAM may not see it yet.
    let owner_from = spec_of(&step.node).map(|a| a.owner_from.as_str()).unwrap_or_default();
    let fresh_policy = step.deps.iter().any(|d| d != owner_from);
    let retry: &[Condition] = if fresh_policy { &ATTACH_FRESH_POLICY } else { &ATTACH_FRESH_ROLE };
    let r = aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "iam:AttachRolePolicy", retry, || {
        ctx.aws.iam.attach_role_policy().role_name(role).policy_arn(arn).send()
    })
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_missing_policy() => bail!(
            "managed policy {arn} does not exist or cannot be attached ({}); \
             check the ARN (extra_node_policy_arns, or for IPv6 clusters create AmazonEKS_CNI_IPv6_Policy first)",
            aws_err("iam:AttachRolePolicy", e)
        ),
        Err(e) => Err(aws_err("iam:AttachRolePolicy", e)),
    }
}
