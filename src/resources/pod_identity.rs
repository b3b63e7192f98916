//! The EKS Pod Identity association that gives Karpenter's service account the controller role.
//!
//! Read: ListPodIdentityAssociations(cluster, namespace, serviceAccount) (it has no role and no
//! tags), then DescribePodIdentityAssociation for the one found -> fields `namespace`,
//! `service_account`, `role_arn`, `tags`; ids `association_id`, `arn`. Create:
//! CreatePodIdentityAssociation with the tags in the call, retried while EKS does not yet see a
//! role IAM just made; 409 ResourceInUseException -> read again, converge only if ours. Update:
//! TagResource by association ARN for tags (first, so that an adopted association is ours before
//! it is changed), UpdatePodIdentityAssociation for the role (same retry). Delete: ownership
//! checked again, DeletePodIdentityAssociation; not found is success.

use super::ctx::eks_cluster_of as cluster_of;
use super::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::arns;
use crate::aws::{self, Classify, Retryable, aws_err};
use crate::facts::Facts;
use crate::model::{Action, Fields, Node, NodeSpec, Observed, Owner, PodIdentitySpec, Step, Tags};
use crate::plan_file::{IdentityMode, Spec};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::BTreeMap;

/// Create/UpdatePodIdentityAssociation right after CreateRole (docs/aws-behaviour.md section 5).
const ROLE_NOT_PROPAGATED: [Retryable; 1] =
    [Retryable { code: "InvalidParameterException", message: "Role provided in the request does not exist" }];

fn namespace_of(node: &Node) -> &str {
    match &node.spec {
        NodeSpec::PodIdentity(p) if !p.namespace.is_empty() => &p.namespace,
        _ => node.name.split_once('/').map(|(n, _)| n).unwrap_or(""),
    }
}

fn service_account_of(node: &Node) -> &str {
    match &node.spec {
        NodeSpec::PodIdentity(p) if !p.service_account.is_empty() => &p.service_account,
        _ => node.name.split_once('/').map(|(_, s)| s).unwrap_or(""),
    }
}

/// Pure: the association (Pod Identity mode only; listed without desired fields in IRSA mode so
/// that one karpctl made before is removed). Fields: `namespace`, `service_account`, `role_arn`,
/// `tags`; the name is `<namespace>/<service account>`.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let id = &spec.identity;
    let fields = (id.mode == IdentityMode::PodIdentity).then(|| {
        crate::model::fields_of(vec![
            ("namespace", json!(id.namespace)),
            ("service_account", json!(id.service_account)),
            ("role_arn", json!(arns::controller_role_arn(spec, facts))),
            ("tags", arns::tags_value(spec, "pod-identity")),
        ])
    });
    let s = PodIdentitySpec {
        cluster: spec.cluster.clone(),
        namespace: id.namespace.clone(),
        service_account: id.service_account.clone(),
    };
    vec![
        Node::new("pod-identity", format!("{}/{}", id.namespace, id.service_account), NodeSpec::PodIdentity(s))
            .with_fields(fields)
            .with_deps(["controller-role"]),
    ]
}

/// The id of the association for (namespace, service account), if any. The list is filtered by
/// the service and checked again here.
async fn find(ctx: &Ctx, node: &Node) -> Result<Option<String>> {
    let (cluster, ns, sa) = (cluster_of(ctx, node), namespace_of(node), service_account_of(node));
    let mut token = None;
    loop {
        let o = match ctx
            .aws
            .eks
            .list_pod_identity_associations()
            .cluster_name(cluster)
            .namespace(ns)
            .service_account(sa)
            .set_next_token(token)
            .send()
            .await
        {
            Ok(o) => o,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(aws_err("eks:ListPodIdentityAssociations", e)),
        };
        if let Some(a) = o
            .associations()
            .iter()
            .find(|a| a.namespace() == Some(ns) && a.service_account() == Some(sa))
            .and_then(|a| a.association_id())
        {
            return Ok(Some(a.to_string()));
        }
        token = o.next_token().map(str::to_string);
        if token.is_none() {
            return Ok(None);
        }
    }
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(id) = find(ctx, node).await? else { return Ok(None) };
    let o = match ctx
        .aws
        .eks
        .describe_pod_identity_association()
        .cluster_name(cluster_of(ctx, node))
        .association_id(&id)
        .send()
        .await
    {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(aws_err("eks:DescribePodIdentityAssociation", e)),
    };
    let Some(a) = o.association() else { return Ok(None) };
    let tags: Tags = a.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
    let opt = |v: Option<&str>| v.map(|s| json!(s)).unwrap_or(serde_json::Value::Null);
    let mut fields = Fields::new();
    fields.insert("namespace".into(), opt(a.namespace()));
    fields.insert("service_account".into(), opt(a.service_account()));
    fields.insert("role_arn".into(), opt(a.role_arn()));
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    ids.insert("association_id".to_string(), a.association_id().unwrap_or(&id).to_string());
    if let Some(arn) = a.association_arn() {
        ids.insert("arn".to_string(), arn.to_string());
    }
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

/// List and describe, fresh: who owns the association now, and its id and ARN.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = read(ctx, node).await?;
    Ok(live.map(|o| {
        let tags = super::ctx::observed_tags(&o);
        Current { owner: o.owner, tags, ids: o.ids }
    }))
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    match step.action {
        Action::Create => create(ctx, step).await,
        // No field forces a replacement today; if one ever does, delete then create.
        Action::Replace => {
            delete(ctx, step, current).await?;
            create(ctx, step).await
        }
        Action::Update | Action::Adopt => {
            let live = current.context("the Pod Identity association disappeared since it was read; run karpctl up again")?;
            update(ctx, step, &live.ids, step.action == Action::Adopt || changed(step, "tags"), changed(step, "role_arn")).await
        }
        Action::Delete => delete(ctx, step, current).await,
    }
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let (cluster, ns, sa) = (cluster_of(ctx, node), namespace_of(node), service_account_of(node));
    let role = want_str(node, "role_arn");
    let tags = wanted_tags(node);
    let r = aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        &step.id,
        "eks:CreatePodIdentityAssociation",
        &ROLE_NOT_PROPAGATED,
        || {
            ctx.aws
                .eks
                .create_pod_identity_association()
                .cluster_name(cluster)
                .namespace(ns)
                .service_account(sa)
                .role_arn(role)
                .set_tags(Some(tags.clone().into_iter().collect()))
                .send()
        },
    )
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if aws::code(&e) == "ResourceInUseException" => {
            // Made meanwhile (a concurrent run, or someone else): converge only if ours.
            let Some(live) = read(ctx, node).await? else {
                bail!("eks:CreatePodIdentityAssociation said {ns}/{sa} exists, but it cannot be read; run karpctl up again")
            };
            if live.owner != Owner::Ours {
                bail!(
                    "EKS Pod Identity association {ns}/{sa} exists but is not managed by karpctl for cluster {}; it was left untouched",
                    ctx.cluster
                );
            }
            let role_differs = live.fields.get("role_arn").and_then(|v| v.as_str()) != Some(role);
            update(ctx, step, &live.ids, false, role_differs).await
        }
        Err(e) => Err(aws_err("eks:CreatePodIdentityAssociation", e)),
    }
}

async fn update(ctx: &Ctx, step: &Step, ids: &BTreeMap<String, String>, tags: bool, role: bool) -> Result<()> {
    let node = &step.node;
    let cluster = cluster_of(ctx, node);
    let id = ids.get("association_id").context("no association id")?;
    if tags {
        let arn = ids.get("arn").context("no association ARN")?;
        if let Err(e) =
            ctx.aws.eks.tag_resource().resource_arn(arn).set_tags(Some(wanted_tags(node).into_iter().collect())).send().await
        {
            // An emulator (ministack 1.5.33) cannot tag an association by ARN; AWS can.
            return Err(aws_err("eks:TagResource", e).context(format!(
                "cannot tag EKS Pod Identity association {}/{} ({arn}){}",
                namespace_of(node),
                service_account_of(node),
                if role { "; its role was not changed either" } else { "" }
            )));
        }
    }
    if role {
        let role_arn = want_str(node, "role_arn");
        aws::with_consistency(
            &ctx.consistency,
            ctx.reporter.as_ref(),
            &step.id,
            "eks:UpdatePodIdentityAssociation",
            &ROLE_NOT_PROPAGATED,
            || ctx.aws.eks.update_pod_identity_association().cluster_name(cluster).association_id(id).role_arn(role_arn).send(),
        )
        .await
        .map_err(|e| aws_err("eks:UpdatePodIdentityAssociation", e))?;
    }
    Ok(())
}

/// Delete the association the dispatcher has just read and found ours.
async fn delete(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let node = &step.node;
    let Some(id) = current.and_then(|c| c.get("association_id")) else { return Ok(()) };
    match ctx.aws.eks.delete_pod_identity_association().cluster_name(cluster_of(ctx, node)).association_id(id).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("eks:DeletePodIdentityAssociation", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_and_service_account_fall_back_to_the_name() {
        let n = Node::new("pod-identity", "kube-system/karpenter", NodeSpec::for_tests(crate::model::Kind::PodIdentity));
        assert_eq!(namespace_of(&n), "kube-system");
        assert_eq!(service_account_of(&n), "karpenter");
    }
}
