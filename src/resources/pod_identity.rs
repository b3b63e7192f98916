//! The EKS Pod Identity association that gives Karpenter's service account the controller role.
//! The list call shows neither role nor tags, so a read describes the association it finds; a 409
//! on create reads again and converges only an association of ours.

use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::eks_cluster_of as cluster_of;
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::facts::prepared::Facts;
use crate::model::{Action, Fields, Node, NodeSpec, Observed, Owner, PodIdentitySpec, Step, Tags};
use crate::spec::{IdentityMode, Spec};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): EKS, two calls in a row (list, then describe).
pub const READ_RANK: u8 = 0;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    PodIdentity,
    read_ahead: true,
    forget: |_, _| {},
    discover: None
);

/// Create/UpdatePodIdentityAssociation right after CreateRole (docs/aws-behaviour.md section 5).
const ROLE_NOT_PROPAGATED: [Condition; 1] = [Condition::RoleNotYetVisible];

/// EKS checks the role's trust policy (pods.eks.amazonaws.com, sts:AssumeRole + sts:TagSession),
/// and right after CreateRole or UpdateAssumeRolePolicy (an irsa -> pod_identity switch), it
/// still sees the old trust policy for a few seconds: the same answer, but propagation.
const ROLE_OR_TRUST_NOT_PROPAGATED: [Condition; 2] = [Condition::RoleNotYetVisible, Condition::TrustPolicyRefused];

/// The controller role's node id (this association's role).
const CONTROLLER_ROLE: &str = "controller-role";

/// What to retry: a refused trust policy only when this run created the controller role or set
/// its trust policy just now; otherwise the trust policy really is wrong.
fn retryable(ctx: &Ctx) -> &'static [Condition] {
    if ctx.wrote(CONTROLLER_ROLE, None) || ctx.wrote(CONTROLLER_ROLE, Some("AssumeRolePolicyDocument")) {
        &ROLE_OR_TRUST_NOT_PROPAGATED
    } else {
        &ROLE_NOT_PROPAGATED
    }
}

/// An AWS error of Create/UpdatePodIdentityAssociation, with the cause spelled out when EKS
/// refused the role's trust policy.
fn assoc_err<E>(
    ctx: &Ctx,
    op: &str,
    role: &str,
    e: aws_smithy_runtime_api::client::result::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> anyhow::Error
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let trust = e.is_trust_policy_refused();
    let err = aws_err(op, e);
    if !trust {
        return err;
    }
    let when = if retryable(ctx).len() > 1 {
        format!(" (still, {} s after this run changed it)", ctx.consistency.deadline.as_secs())
    } else {
        String::new()
    };
    err.context(format!(
        "EKS refused the trust policy of the controller role {role}{when}: it must allow the service principal pods.eks.amazonaws.com the actions sts:AssumeRole and sts:TagSession; fix the role's trust policy (karpctl writes it so when it manages the role) and run karpctl up again"
    ))
}

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
            // No role chaining, EKS's session tags on, no session policy: the controller role's
            // own permissions, as Karpenter's docs set it up.
            ("target_role_arn", Value::Null),
            ("disable_session_tags", json!(false)),
            ("session_policy", Value::Null),
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

/// The association as `up` leaves it (pure, over the observed nodes), for the readiness checks
/// (`gather::as_left` puts it in the setup `checks::run` judges). One karpctl manages
/// gets the plan's fields, so only one karpctl never changes (an EKS add-on's) can fail them;
/// the role's trust is the one `up` writes.
/// Nothing to judge without Pod Identity (IRSA, `down`).
pub fn as_left(entries: &[(Node, Option<Observed>)]) -> crate::facts::observed::AssociationAsLeft {
    use crate::facts::observed::{Association, AssociationAsLeft};
    let Some((node, live)) = entries.iter().find(|(n, _)| n.kind == crate::model::Kind::PodIdentity) else {
        return AssociationAsLeft::Unjudged;
    };
    if node.fields.is_none() {
        return AssociationAsLeft::Unjudged;
    }
    let role = entries.iter().find(|(n, _)| n.id == CONTROLLER_ROLE);
    let trust = role.and_then(|(n, o)| {
        let want = n.fields.as_ref().and_then(|f| f.get("AssumeRolePolicyDocument"));
        want.or_else(|| o.as_ref()?.fields.get("AssumeRolePolicyDocument"))
    });
    let Some(o) = live.as_ref().filter(|o| o.owner == Owner::External) else { return AssociationAsLeft::Ours };
    let text = |f: &str| o.fields.get(f).and_then(Value::as_str).map(str::to_string);
    let association = Association {
        cluster: match &node.spec {
            NodeSpec::PodIdentity(p) => p.cluster.clone(),
            _ => String::new(),
        },
        id: o.ids.get("association_id").cloned().unwrap_or_default(),
        name: node.name.clone(),
        role_arn: text("role_arn").unwrap_or_default(),
        disable_session_tags: o.fields.get("disable_session_tags").and_then(Value::as_bool).unwrap_or(false),
        session_policy: text("session_policy"),
        owner_arn: text("owner_arn"),
    };
    AssociationAsLeft::Theirs { association, trust: trust.cloned() }
}

/// The id of the association for (namespace, service account), if any. The list is filtered by
/// the service and checked again here.
async fn find(ctx: &Ctx, node: &Node) -> Result<Option<String>> {
    let (cluster, ns, sa) = (cluster_of(ctx, node), namespace_of(node), service_account_of(node));
    let found = match ctx.readers.eks.associations(cluster, Some((ns, sa))).await {
        Ok(f) => f,
        Err(e) if crate::aws::read::is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(found.into_iter().find(|a| a.namespace == ns && a.service_account == sa).map(|a| a.id).filter(|id| !id.is_empty()))
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(id) = find(ctx, node).await? else { return Ok(None) };
    let Some(a) = ctx.readers.eks.association(cluster_of(ctx, node), &id).await? else { return Ok(None) };
    let tags: Tags = a.tags.clone();
    let opt = |v: Option<&str>| v.map(|s| json!(s)).unwrap_or(serde_json::Value::Null);
    let owner_arn = a.owner_arn.as_deref().filter(|o| !o.is_empty());
    if let Some(msg) = addon_conflict(node, owner_arn, a.role_arn.as_deref()) {
        return Err(crate::error::UserError::new(msg)
            .hint("karpctl never changes an association an EKS add-on owns: change it through the add-on (aws eks update-addon ... --pod-identity-associations), or set identity.namespace / identity.service_account to another service account in the plan")
            .into());
    }
    let mut fields = Fields::new();
    fields.insert("namespace".into(), opt(a.namespace.as_deref()));
    fields.insert("service_account".into(), opt(a.service_account.as_deref()));
    fields.insert("role_arn".into(), opt(a.role_arn.as_deref()));
    fields.insert("target_role_arn".into(), opt(a.target_role_arn.as_deref().filter(|t| !t.is_empty())));
    // Set by EKS for a target role (the target role's trust matches on it): shown, not compared.
    if let Some(x) = a.external_id.as_deref().filter(|x| !x.is_empty()) {
        fields.insert("external_id".into(), json!(x));
    }
    fields.insert("disable_session_tags".into(), json!(a.disable_session_tags.unwrap_or(false)));
    fields.insert("session_policy".into(), opt(a.policy.as_deref().filter(|p| !p.is_empty())));
    if let Some(o) = owner_arn {
        fields.insert("owner_arn".into(), json!(o));
    }
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    ids.insert("association_id".to_string(), a.id.as_deref().unwrap_or(&id).to_string());
    if let Some(arn) = a.arn.as_deref() {
        ids.insert("arn".to_string(), arn.to_string());
    }
    Ok(Some(Observed { fields, owner: owner(&tags, owner_arn, &ctx.cluster), ids }))
}

/// Who owns an association: an EKS add-on when `ownerArn` is set (someone else's: it satisfies
/// the plan and is never changed or deleted), else karpctl's tags decide.
pub fn owner(tags: &Tags, owner_arn: Option<&str>, cluster: &str) -> Owner {
    match owner_arn {
        Some(o) if !o.is_empty() => Owner::External,
        _ => Owner::from_tags(tags, cluster),
    }
}

/// An add-on's association for the service account that gives it another role than the plan's:
/// karpctl cannot fix that, so it is an error (before any write) saying who owns it.
fn addon_conflict(node: &Node, owner_arn: Option<&str>, live_role: Option<&str>) -> Option<String> {
    let owner_arn = owner_arn.filter(|o| !o.is_empty())?;
    let want = node.fields.as_ref()?.get("role_arn")?.as_str()?;
    let live = live_role.unwrap_or("");
    (live != want).then(|| {
        format!(
            "EKS Pod Identity association {}/{} is owned by the EKS add-on {owner_arn} and gives the role {live}, not karpctl's controller role {want}",
            namespace_of(node),
            service_account_of(node)
        )
    })
}

/// List and describe, fresh: who owns the association now, and its id and ARN.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = read(ctx, node).await?;
    Ok(live.map(|o| {
        let tags = crate::ctx::observed_tags(&o);
        Current { owner: o.owner, tags, ids: o.ids }
    }))
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
/// Every action waits for an ACTIVE cluster first (`eks::gate`); a delete on a cluster that is
/// gone is skipped (the association went with it). The Pod Identity agent add-on, when `up` put
/// its install off until the cluster is ACTIVE, is installed here.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    if !super::eks::gate(ctx, step).await? {
        return Ok(());
    }
    if step.action != Action::Delete {
        super::eks::install_pending_agent(ctx, cluster_of(ctx, &step.node)).await?;
    }
    match step.action {
        Action::Create => create(ctx, step).await,
        // No field forces a replacement today; if one ever does, delete then create.
        Action::Replace => {
            delete(ctx, step, current).await?;
            create(ctx, step).await
        }
        Action::Update | Action::Adopt => {
            let live = current.context("the Pod Identity association disappeared since it was read; run karpctl up again")?;
            let fix = Fix {
                tags: step.action == Action::Adopt || changed(step, "tags"),
                role: changed(step, "role_arn"),
                target: changed(step, "target_role_arn"),
                session_tags: changed(step, "disable_session_tags"),
                policy: changed(step, "session_policy"),
            };
            update(ctx, step, &live.ids, fix).await
        }
        Action::Delete => delete(ctx, step, current).await,
    }
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let (cluster, ns, sa) = (cluster_of(ctx, node), namespace_of(node), service_account_of(node));
    let role = want_str(node, "role_arn");
    let tags = wanted_tags(node);
    let mut race = aws::Retry::new(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "eks:CreatePodIdentityAssociation");
    let (r, live) = loop {
        let r = aws::with_consistency(
            &ctx.consistency,
            ctx.reporter.as_ref(),
            &step.id,
            "eks:CreatePodIdentityAssociation",
            retryable(ctx),
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
            Err(e) if e.is_resource_in_use() => match read(ctx, node).await? {
                Some(live) => break (Err(e), Some(live)),
                // The create says it exists, the read says it does not: EKS's replicas disagree
                // (an association deleted a moment ago; docs/aws-behaviour.md section 9.18). A
                // consistency race, retried.
                None if race.again("ResourceInUseException (no association reads back)").await => continue,
                None => bail!(
                    "eks:CreatePodIdentityAssociation kept answering that {ns}/{sa} exists while reads find none, for {} s; run karpctl up again",
                    ctx.consistency.deadline.as_secs()
                ),
            },
            r => break (r, None),
        }
    };
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_resource_in_use() => {
            // Made meanwhile (a concurrent run, or someone else): converge only if ours.
            let Some(live) = live else { return Err(assoc_err(ctx, "eks:CreatePodIdentityAssociation", role, e)) };
            if live.owner != Owner::Ours {
                bail!(
                    "EKS Pod Identity association {ns}/{sa} exists but is not managed by karpctl for cluster {}; it was left untouched",
                    ctx.cluster
                );
            }
            let want = node.fields.clone().unwrap_or_default();
            let differs = |f: &str| live.fields.get(f).unwrap_or(&Value::Null) != want.get(f).unwrap_or(&Value::Null);
            let fix = Fix {
                tags: false,
                role: differs("role_arn"),
                target: differs("target_role_arn"),
                session_tags: differs("disable_session_tags"),
                policy: differs("session_policy"),
            };
            update(ctx, step, &live.ids, fix).await
        }
        Err(e) => Err(assoc_err(ctx, "eks:CreatePodIdentityAssociation", role, e)),
    }
}

/// What an update sets.
#[derive(Clone, Copy, Debug, Default)]
struct Fix {
    tags: bool,
    role: bool,
    /// Clear the target role (externalId goes with it).
    target: bool,
    /// Set disableSessionTags back to false.
    session_tags: bool,
    /// Clear the session policy.
    policy: bool,
}

/// Tags first, so that an adopted association is ours before any of its fields changes.
async fn update(ctx: &Ctx, step: &Step, ids: &BTreeMap<String, String>, fix: Fix) -> Result<()> {
    let node = &step.node;
    let cluster = cluster_of(ctx, node);
    let id = ids.get("association_id").context("no association id")?;
    let fields = fix.role || fix.target || fix.session_tags || fix.policy;
    if fix.tags {
        let arn = ids.get("arn").context("no association ARN")?;
        let stale = crate::ctx::stale_tags(step);
        if !stale.is_empty() {
            ctx.aws
                .eks
                .untag_resource()
                .resource_arn(arn)
                .set_tag_keys(Some(stale))
                .send()
                .await
                .map_err(|e| aws_err("eks:UntagResource", e))?;
        }
        if let Err(e) =
            ctx.aws.eks.tag_resource().resource_arn(arn).set_tags(Some(wanted_tags(node).into_iter().collect())).send().await
        {
            // An emulator (ministack 1.5.33) cannot tag an association by ARN; AWS can.
            return Err(aws_err("eks:TagResource", e).context(format!(
                "cannot tag EKS Pod Identity association {}/{} ({arn}){}",
                namespace_of(node),
                service_account_of(node),
                if fields { "; its other fields were not changed either" } else { "" }
            )));
        }
    }
    if !fields {
        return Ok(());
    }
    let role_arn = want_str(node, "role_arn");
    // One call for every field; an empty string clears the target role and the session policy
    // (see `cleared` for what happens when EKS keeps them anyway).
    let r = aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        &step.id,
        "eks:UpdatePodIdentityAssociation",
        retryable(ctx),
        || {
            let mut req = ctx.aws.eks.update_pod_identity_association().cluster_name(cluster).association_id(id);
            if fix.role {
                req = req.role_arn(role_arn);
            }
            if fix.target {
                req = req.target_role_arn("");
            }
            if fix.session_tags || fix.policy {
                req = req.disable_session_tags(false);
            }
            if fix.policy {
                req = req.policy("");
            }
            req.send()
        },
    )
    .await;
    let clearing = fix.target || fix.policy;
    match r {
        Ok(_) => {}
        // EKS may refuse an empty value; re-creating gives the association without either.
        Err(e) if clearing && e.is_invalid_input() => {
            return recreate(ctx, step, ids, "EKS refused to clear the target role or session policy in place").await;
        }
        Err(e) => return Err(assoc_err(ctx, "eks:UpdatePodIdentityAssociation", role_arn, e)),
    }
    if clearing && !cleared(ctx, node).await? {
        return recreate(ctx, step, ids, "EKS kept the target role or session policy after the update").await;
    }
    Ok(())
}

/// Whether the live association has neither a target role nor a session policy.
async fn cleared(ctx: &Ctx, node: &Node) -> Result<bool> {
    let Some(live) = read(ctx, node).await? else { return Ok(true) };
    let set = |f: &str| live.fields.get(f).is_some_and(|v| !v.is_null());
    Ok(!set("target_role_arn") && !set("session_policy"))
}

/// Delete our association and create it again as the plan wants it (for what an update cannot
/// clear). Pods keep the credentials they hold; new ones wait the few seconds this takes.
async fn recreate(ctx: &Ctx, step: &Step, ids: &BTreeMap<String, String>, why: &str) -> Result<()> {
    let node = &step.node;
    ctx.reporter.event(crate::events::Event::Info(&format!(
        "{}: {why}; re-creating EKS Pod Identity association {}/{}",
        step.id,
        namespace_of(node),
        service_account_of(node)
    )));
    let current = Current { owner: Owner::Ours, tags: Tags::new(), ids: ids.clone() };
    delete(ctx, step, Some(&current)).await?;
    // create -> (409, ours) update -> recreate -> create: boxed, as async recursion must be.
    Box::pin(create(ctx, step)).await
}

/// Delete the association the dispatcher has just read and found ours, then wait until
/// `Agreement::EKS_GONE` reads in a row no longer list it: EKS deletes eventually, and an `up`
/// right after a `down` must not find the dying association in sync (docs/aws-behaviour.md
/// section 9.18).
async fn delete(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let node = &step.node;
    let Some(id) = current.and_then(|c| c.get("association_id")) else { return Ok(()) };
    match ctx.aws.eks.delete_pod_identity_association().cluster_name(cluster_of(ctx, node)).association_id(id).send().await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(aws_err("eks:DeletePodIdentityAssociation", e)),
    }
    let what = "EKS to drop the association";
    let gone = aws::wait_agreed(&ctx.consistency, aws::Agreement::EKS_GONE, ctx.reporter.as_ref(), &step.id, what, || async {
        Ok(find(ctx, node).await?.is_none())
    })
    .await?;
    if !gone {
        bail!(
            "EKS still lists the deleted Pod Identity association {id} {} s after its delete; run karpctl {} again",
            ctx.consistency.deadline.as_secs(),
            if step.action == Action::Delete { "down" } else { "up" }
        );
    }
    Ok(())
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

    fn wanting(role: &str) -> Node {
        Node::new("pod-identity", "kube-system/karpenter", NodeSpec::for_tests(crate::model::Kind::PodIdentity))
            .with_fields(Some(crate::model::fields_of(vec![("role_arn", json!(role))])))
    }

    #[test]
    fn an_association_an_addon_owns_is_external_whatever_its_tags() {
        let mut t = Tags::new();
        t.insert(crate::tags::OWNER_TAG.into(), "c".into());
        assert_eq!(owner(&t, None, "c"), Owner::Ours);
        assert_eq!(owner(&t, Some(""), "c"), Owner::Ours);
        assert_eq!(owner(&t, Some("arn:aws:eks:us-east-1:1:addon/c/karpenter/x"), "c"), Owner::External);
        assert_eq!(owner(&Tags::new(), Some("arn:aws:eks:us-east-1:1:addon/c/karpenter/x"), "c"), Owner::External);
    }

    #[test]
    fn an_addons_association_for_another_role_is_an_error_naming_the_addon() {
        let addon = Some("arn:aws:eks:us-east-1:1:addon/c/karpenter/x");
        let n = wanting("arn:aws:iam::1:role/KarpenterController-c");
        // Same role: it satisfies the plan.
        assert_eq!(addon_conflict(&n, addon, Some("arn:aws:iam::1:role/KarpenterController-c")), None);
        let msg = addon_conflict(&n, addon, Some("arn:aws:iam::1:role/other")).expect("a conflict");
        assert!(msg.contains("owned by the EKS add-on arn:aws:eks:us-east-1:1:addon/c/karpenter/x"), "{msg}");
        assert!(msg.contains("arn:aws:iam::1:role/other"), "{msg}");
        // Not an add-on's, or nothing wanted (down): no conflict.
        assert_eq!(addon_conflict(&n, None, Some("arn:aws:iam::1:role/other")), None);
        let down = Node::new("pod-identity", "kube-system/karpenter", NodeSpec::for_tests(crate::model::Kind::PodIdentity));
        assert_eq!(addon_conflict(&down, addon, Some("arn:aws:iam::1:role/other")), None);
    }

    #[test]
    fn session_tags_target_role_and_session_policy_drift_are_field_changes() {
        let spec = crate::plan_file::defaults("c").unwrap();
        let facts = crate::facts::prepared::Facts::example();
        let node = nodes(&spec, &facts).remove(0);
        let want = node.fields.clone().unwrap();
        let mut live = want.clone();
        live.insert("tags".into(), want["tags"].clone());
        live.insert("target_role_arn".into(), json!("arn:aws:iam::999999999999:role/elsewhere"));
        live.insert("external_id".into(), json!("ext-1"));
        live.insert("disable_session_tags".into(), json!(true));
        live.insert("session_policy".into(), json!("{\"Version\":\"2012-10-17\",\"Statement\":[]}"));
        let obs = Observed { fields: live, owner: Owner::Ours, ids: BTreeMap::new() };
        let changed: Vec<String> = crate::planner::changes(&node.immutable, &want, &obs).into_iter().map(|c| c.field).collect();
        assert_eq!(changed, ["disable_session_tags", "session_policy", "target_role_arn"]);
        // externalId follows the target role: never compared on its own.
        let mut ok = want.clone();
        ok.insert("external_id".into(), json!("ext-1"));
        let obs = Observed { fields: ok, owner: Owner::Ours, ids: BTreeMap::new() };
        assert!(crate::planner::changes(&node.immutable, &want, &obs).is_empty());
    }
}
