//! Managed policies attached to karpctl's roles (the node role's AWS managed policies, the
//! controller role's own policies).
//!
//! Read: ListAttachedRolePolicies for the role (spec `role`), paginated and memoised per role
//! under `iam:ListAttachedRolePolicies:<role>`, so all of a role's attachments cost one call;
//! ownership is the role's, from GetRole's tags through the role's own memo (no extra call when
//! the role is in the plan). None when the role does not exist or the policy is not attached.
//! Converged cost: 1 call per role, shared by its attachments.
//!
//! Create / Update / Adopt: AttachRolePolicy (idempotent), retried on ConcurrentModification, on
//! a role IAM does not see yet, and, when the policy is created by this plan, on a policy IAM
//! does not see yet. A managed policy ARN that does not exist fails with NoSuchEntity on AWS and
//! is reported naming the ARN (ministack accepts any ARN).
//!
//! Delete: GetRole (the role's ownership re-checked right before detaching; a missing role is
//! success), then DetachRolePolicy, retried on ConcurrentModification; NoSuchEntity is success.

use super::ctx::Ctx;
use super::iam_role::{self, ATTACH_FRESH_ROLE, detach, get_role, get_role_fresh};
use crate::aws::{self, Retryable, aws_err};
use crate::model::{Action, Fields, Node, Observed, Owner, Step};
use anyhow::{Result, bail};
use serde_json::json;
use std::collections::BTreeMap;

/// AttachRolePolicy for a policy this plan has just created.
const ATTACH_FRESH_POLICY: [Retryable; 3] = [
    Retryable { code: "ConcurrentModification", message: "" },
    Retryable { code: "NoSuchEntity", message: "The role with name" },
    Retryable { code: "NoSuchEntity", message: "does not exist" },
];

fn attached_key(role: &str) -> String {
    format!("iam:ListAttachedRolePolicies:{role}")
}

/// The role's attached policy ARNs, memoised for the observation. None: no such role.
async fn attached(ctx: &Ctx, role: &str) -> Result<Option<Vec<String>>> {
    ctx.cached(&attached_key(role), || iam_role::attached_policies(ctx, role)).await
}

fn role_name(node: &Node) -> &str {
    let r = node.spec("role");
    if r.is_empty() { node.name.split('/').next().unwrap_or_default() } else { r }
}

fn policy_arn(node: &Node) -> &str {
    let p = node.spec("policy_arn");
    if p.is_empty() {
        node.fields.as_ref().and_then(|f| f.get("PolicyArn")).and_then(|v| v.as_str()).unwrap_or_default()
    } else {
        p
    }
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
            let spec: BTreeMap<String, String> = [
                ("role", role.name.as_str()),
                ("policy_arn", arn.as_str()),
                ("owner_from", role.id.as_str()),
                ("contained_in", role.id.as_str()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            out.push(Node {
                id: format!("unlisted-attachment-{}-{short}", role.id),
                kind: crate::model::Kind::RolePolicyAttachment,
                name: format!("{}/{short}", role.name),
                fields: None,
                deps: vec![role.id.clone()],
                spec,
                notes: vec!["attached to karpctl's role but not in the plan".into()],
            });
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

pub async fn apply(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let role = role_name(node);
    let arn = policy_arn(node);
    let r = match step.action {
        Action::Create | Action::Update | Action::Adopt | Action::Replace => attach(ctx, step, role, arn).await,
        Action::Delete => {
            // Detach only from a role that is still ours.
            match get_role_fresh(ctx, role).await? {
                None => Ok(()),
                Some(live) if Owner::from_tags(&live.tags, &ctx.cluster) != Owner::Ours => {
                    bail!(
                        "IAM role {role} is no longer tagged as karpctl's for cluster {}; not detaching {arn} from it",
                        ctx.cluster
                    )
                }
                Some(_) => detach(ctx, &step.id, role, arn).await,
            }
        }
    };
    ctx.forget_cached(&attached_key(role));
    r
}

async fn attach(ctx: &Ctx, step: &Step, role: &str, arn: &str) -> Result<()> {
    // A dependency other than the role is a policy this plan creates: IAM may not see it yet.
    let owner_from = step.node.spec("owner_from");
    let fresh_policy = step.deps.iter().any(|d| d != owner_from);
    let retry: &[Retryable] = if fresh_policy { &ATTACH_FRESH_POLICY } else { &ATTACH_FRESH_ROLE };
    let r = aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "iam:AttachRolePolicy", retry, || {
        ctx.aws.iam.attach_role_policy().role_name(role).policy_arn(arn).send()
    })
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if aws::code(&e) == "NoSuchEntity" && !aws::message(&e).contains("The role with name") => bail!(
            "managed policy {arn} does not exist or cannot be attached (iam:AttachRolePolicy: NoSuchEntity: {}); \
             check the ARN (extra_node_policy_arns, or for IPv6 clusters create AmazonEKS_CNI_IPv6_Policy first)",
            aws::message(&e)
        ),
        Err(e) => Err(aws_err("iam:AttachRolePolicy", e)),
    }
}
