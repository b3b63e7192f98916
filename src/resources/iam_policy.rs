//! The controller's customer managed policies: a changed document is a new default version (the
//! oldest other version pruned at IAM's 5), a changed path a delete and create under the same
//! name. Delete detaches it everywhere and removes its versions first (docs/aws-behaviour.md 5).

use super::iam::{not_managed, sdk_tags, tags_satisfied};
use super::iam_role::detach;
use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::facts::prepared::Facts;
use crate::karpenter_iam::{self, PolicyPart};
use crate::model::{ArnSpec, Fields, Kind, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::names;
use crate::policy::doc;
use crate::spec::Spec;
use crate::tags::RESOURCE_TAG;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Fields that cannot change in place: a change to one replaces the object.
pub const IMMUTABLE: &[&str] = &["path"];
/// Read order among kinds (0 first: the slowest reads start first): IAM, two calls in a row (GetPolicy, then GetPolicyVersion).
pub const READ_RANK: u8 = 2;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    IamPolicy,
    read_ahead: true,
    forget: |_, _| {},
    discover: None,
    apply: standard
);

/// IAM keeps at most this many versions of a managed policy.
pub const MAX_VERSIONS: usize = 5;

use crate::aws::read::iam::Version;

/// The number in a version id ("v12" -> 12), to order versions created in the same second.
fn version_number(id: &str) -> u64 {
    id.trim_start_matches(['v', 'V']).parse().unwrap_or(0)
}

/// The version to delete before creating a new one: the oldest non-default version, and only
/// when the policy is at IAM's limit.
pub fn version_to_prune(versions: &[Version]) -> Option<String> {
    if versions.len() < MAX_VERSIONS {
        return None;
    }
    versions.iter().filter(|v| !v.is_default).min_by_key(|v| (v.created, version_number(&v.id))).map(|v| v.id.clone())
}

use crate::aws::read::iam::LivePolicy;

async fn get_policy(ctx: &Ctx, arn: &str) -> Result<Option<LivePolicy>> {
    ctx.readers.iam.policy(arn).await
}

/// One of the controller's policies, split as upstream does; `doc` is None for a part the pinned
/// Karpenter version does not have (it is then removed).
pub struct ControllerPolicy {
    pub part: PolicyPart,
    pub id: String,
    pub name: String,
    pub arn: String,
    pub doc: Option<Value>,
    pub shortened: bool,
}

/// Pure: every controller policy part, with its name, ARN and document for this plan.
pub fn controller_policies(spec: &Spec, facts: &Facts) -> Vec<ControllerPolicy> {
    let id = &spec.identity;
    let qarn = arns::queue_arn(facts, &spec.interruption.queue_name);
    let node_role_arn = arns::node_role_arn(spec, facts);
    let inputs = karpenter_iam::ControllerPolicyInputs {
        partition: &facts.partition,
        region: &facts.region,
        account_id: &facts.account_id,
        cluster: &spec.cluster,
        node_role_arn: &node_role_arn,
        queue_arn: spec.interruption.enabled.then_some(qarn.as_str()),
        kms_key_arn: spec
            .interruption
            .kms_key_id
            .as_ref()
            .filter(|_| spec.interruption.enabled)
            .map(|_| facts.kms_key.as_ref().and_then(|k| k.arn.as_deref()).unwrap_or(crate::arns::ARN_AFTER_APPLY)),
        zonal_shift: id.zonal_shift,
        version: id.karpenter_version,
    };
    let mut docs: BTreeMap<PolicyPart, Value> = karpenter_iam::controller_policies(&inputs).into_iter().collect();
    PolicyPart::ALL
        .into_iter()
        .map(|part| {
            let (name, shortened) = names::fit(&format!("KarpenterController{}Policy-{}", part.name(), spec.cluster), 128);
            ControllerPolicy {
                part,
                id: format!("controller-policy-{}", part.name()),
                arn: arns::policy_arn(facts, &id.path, &name),
                name,
                doc: docs.remove(&part),
                shortened,
            }
        })
        .collect()
}

/// Pure: the controller policy nodes. Fields: `path`, `PolicyDocument` (canonical), `tags`.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let path = spec.identity.path.as_str();
    controller_policies(spec, facts)
        .into_iter()
        .map(|p| {
            let fields = p.doc.map(|d| {
                crate::model::fields_of(vec![
                    ("path", json!(path)),
                    ("PolicyDocument", d),
                    ("tags", arns::tags_value(spec, &p.id)),
                ])
            });
            let note = p.shortened.then(|| format!("policy name shortened to fit IAM's 128 characters: {}", p.name));
            // The key karpctl makes must exist (and have an ARN) before the policy naming it.
            let key = (p.part == PolicyPart::Interruption && spec.interruption.create_key).then_some(super::kms_key::ID);
            Node::new(p.id, p.name, NodeSpec::IamPolicy(ArnSpec::new(p.arn))).with_fields(fields).with_notes(note).with_deps(key)
        })
        .collect()
}

fn policy_arn(node: &Node) -> Result<&str> {
    let arn = node.spec.arn();
    if arn.is_empty() {
        bail!("IAM policy {} has no ARN in the plan", node.name);
    }
    Ok(arn)
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let arn = policy_arn(node)?;
    let Some(live) = get_policy(ctx, arn).await? else { return Ok(None) };
    let doc = match ctx.readers.iam.policy_version(&live.arn, &live.default_version).await? {
        Some(Some(text)) => doc::parse(&text)
            .with_context(|| format!("the document of IAM policy {} is not a valid policy document", node.name))?,
        Some(None) => Value::Null,
        // Deleted between the two calls.
        None => return Ok(None),
    };
    let mut fields = Fields::new();
    fields.insert("path".into(), json!(live.path));
    fields.insert("PolicyDocument".into(), doc);
    fields.insert("tags".into(), Ctx::tags_value(&live.tags));
    let mut ids = BTreeMap::new();
    ids.insert("arn".to_string(), live.arn.clone());
    ids.insert("default_version".to_string(), live.default_version.clone());
    Ok(Some(Observed { fields, owner: Owner::from_tags(&live.tags, &ctx.cluster), ids }))
}

/// GetPolicy, fresh: who owns the policy now.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = get_policy(ctx, policy_arn(node)?).await?;
    Ok(live.map(|p| Current::new(Owner::from_tags(&p.tags, &ctx.cluster), p.tags).id("arn", p.arn)))
}

/// The document to write. A policy naming the KMS key karpctl made in this run gets the key's
/// ARN in place of `arns::ARN_AFTER_APPLY` (the key is made before it: a dependency).
async fn wanted_document(ctx: &Ctx, node: &Node) -> Result<String> {
    let doc = node
        .fields
        .as_ref()
        .and_then(|f| f.get("PolicyDocument"))
        .filter(|v| !v.is_null())
        .context("the plan has no document for this policy")?;
    let text = doc::to_wire(doc);
    if text.contains(crate::arns::ARN_AFTER_APPLY) {
        return Ok(text.replace(crate::arns::ARN_AFTER_APPLY, &super::kms_key::arn_now(ctx).await?));
    }
    Ok(text)
}

type CreateError = aws_smithy_runtime_api::client::result::SdkError<
    aws_sdk_iam::operation::create_policy::CreatePolicyError,
    aws_smithy_runtime_api::http::Response,
>;

/// CreatePolicy with path, document and tags in the one call.
async fn send_create(ctx: &Ctx, node: &Node, document: &str, tags: &Tags) -> Result<Result<(), CreateError>> {
    let tags = sdk_tags(tags)?;
    Ok(ctx
        .aws
        .iam
        .create_policy()
        .policy_name(&node.name)
        .path(want_str(node, "path"))
        .policy_document(document)
        .set_tags(Some(tags))
        .send()
        .await
        .map(|_| ()))
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    match send_create(ctx, node, &wanted_document(ctx, node).await?, &wanted_tags(node)).await? {
        Ok(()) => Ok(()),
        Err(e) if e.is_already_exists() => {
            let arn = policy_arn(node)?;
            match get_policy(ctx, arn).await? {
                Some(live) => converge(ctx, step, arn, &live).await,
                None => replace_elsewhere(ctx, step).await,
            }
        }
        Err(e) => Err(aws_err("iam:CreatePolicy", e)),
    }
}

/// The policy exists at the planned ARN (a concurrent run made it): adopt it only if it is ours,
/// then converge tags and document.
async fn converge(ctx: &Ctx, step: &Step, arn: &str, live: &LivePolicy) -> Result<()> {
    let node = &step.node;
    let owner = Owner::from_tags(&live.tags, &ctx.cluster);
    if owner != Owner::Ours {
        bail!(not_managed(Kind::IamPolicy, &node.name, &ctx.cluster, &owner));
    }
    if !tags_satisfied(&live.tags, &wanted_tags(node)) {
        tag(ctx, arn, &wanted_tags(node)).await?;
    }
    let live_doc = ctx
        .aws
        .iam
        .get_policy_version()
        .policy_arn(arn)
        .version_id(&live.default_version)
        .send()
        .await
        .map_err(|e| aws_err("iam:GetPolicyVersion", e))?;
    let same = live_doc
        .policy_version()
        .and_then(|v| v.document())
        .and_then(|t| doc::parse(t).ok())
        .zip(node.fields.as_ref().and_then(|f| f.get("PolicyDocument")))
        .is_some_and(|(a, b)| doc::equivalent(&a, b));
    if !same {
        new_version(ctx, &step.id, arn, &wanted_document(ctx, node).await?, None).await?;
    }
    Ok(())
}

/// IAM policy names are unique in an account whatever their path: CreatePolicy failed because a
/// policy of this name lives under another path. If it is this very node's policy from before
/// a path change (ours, same `karpctl.io/resource`), delete it and create the policy again;
/// otherwise stop.
async fn replace_elsewhere(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    let Some(other) = find_by_name(ctx, name).await? else {
        bail!("iam:CreatePolicy said a policy named {name} already exists, but it cannot be found; run karpctl up again")
    };
    let live = get_policy(ctx, &other).await?;
    let ours = live
        .as_ref()
        .is_some_and(|l| Owner::from_tags(&l.tags, &ctx.cluster) == Owner::Ours && l.tags.get(RESOURCE_TAG) == Some(&step.id));
    if !ours {
        bail!(
            "a customer managed policy named {name} already exists at {other} and is not karpctl's {} for cluster {}; \
             IAM policy names are unique in an account: rename or delete it",
            step.id,
            ctx.cluster
        );
    }
    delete_arn(ctx, step, &other).await?;
    let node = &step.node;
    send_create(ctx, node, &wanted_document(ctx, node).await?, &wanted_tags(node))
        .await?
        .map_err(|e| aws_err("iam:CreatePolicy", e))
}

/// The ARN of the customer managed policy named `name` (case-insensitively), at any path.
async fn find_by_name(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    ctx.readers.iam.policy_named(name).await
}

async fn tag(ctx: &Ctx, arn: &str, tags: &Tags) -> Result<()> {
    if tags.is_empty() {
        return Ok(());
    }
    ctx.aws
        .iam
        .tag_policy()
        .policy_arn(arn)
        .set_tags(Some(sdk_tags(tags)?))
        .send()
        .await
        .map_err(|e| aws_err("iam:TagPolicy", e))?;
    Ok(())
}

async fn versions(ctx: &Ctx, arn: &str) -> Result<Vec<Version>> {
    ctx.readers.iam.policy_versions(arn).await
}

/// One version's document (None: no such version).
async fn version_document(ctx: &Ctx, arn: &str, id: &str) -> Result<Option<Value>> {
    Ok(ctx.readers.iam.policy_version(arn, id).await?.flatten().as_deref().map(doc::parse).transpose()?)
}

async fn delete_version(ctx: &Ctx, arn: &str, id: &str) -> Result<()> {
    match ctx.aws.iam.delete_policy_version().policy_arn(arn).version_id(id).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("iam:DeletePolicyVersion", e)).with_context(|| format!("deleting version {id} of {arn}")),
    }
}

/// Make `document` the default version, pruning the oldest non-default version at the limit.
/// The version a stale read missed: the newest version, when it is newer than the default version
/// the plan was read with (IAM's default version can read back old for a moment after a write).
pub fn newer_than_read(versions: &[Version], read_default: &str) -> Option<String> {
    let newest = versions.iter().max_by_key(|v| version_number(&v.id))?;
    (version_number(&newest.id) > version_number(read_default)).then(|| newest.id.clone())
}

/// Make `document` the policy's default version: a newer version already holding it (a write the
/// read did not show yet) becomes the default; otherwise a new version, pruning the oldest
/// non-default one at IAM's limit of five (LimitExceeded from a concurrent run: again, on the
/// consistency schedule).
async fn new_version(ctx: &Ctx, step_id: &str, arn: &str, document: &str, read_default: Option<&str>) -> Result<()> {
    let wanted = doc::parse(document)?;
    let r = aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        step_id,
        "iam:CreatePolicyVersion",
        &[Condition::PolicyVersionLimit],
        // Ok(Err): a failure before the create, never retried; Err: CreatePolicyVersion's own.
        || async {
            match prune(ctx, arn, &wanted, read_default).await {
                Ok(true) => Ok(Ok(())),
                Ok(false) => {
                    let req = ctx.aws.iam.create_policy_version().policy_arn(arn).policy_document(document).set_as_default(true);
                    req.send().await.map(|_| Ok(()))
                }
                Err(e) => Ok(Err(e)),
            }
        },
    )
    .await;
    match r {
        Ok(done) => done,
        Err(e) => Err(aws_err("iam:CreatePolicyVersion", e)),
    }
}

/// Before CreatePolicyVersion: true when a version the read missed holds `wanted` (it is made
/// the default: nothing to create); else the oldest non-default version is deleted at the limit.
async fn prune(ctx: &Ctx, arn: &str, wanted: &Value, read_default: Option<&str>) -> Result<bool> {
    let all = versions(ctx, arn).await?;
    if let Some(newer) = read_default.and_then(|d| newer_than_read(&all, d))
        && version_document(ctx, arn, &newer).await?.is_some_and(|d| doc::equivalent(&d, wanted))
    {
        if !all.iter().any(|v| v.id == newer && v.is_default) {
            ctx.aws
                .iam
                .set_default_policy_version()
                .policy_arn(arn)
                .version_id(&newer)
                .send()
                .await
                .map_err(|e| aws_err("iam:SetDefaultPolicyVersion", e))?;
        }
        return Ok(true);
    }
    if let Some(old) = version_to_prune(&all) {
        delete_version(ctx, arn, &old).await?;
    }
    Ok(false)
}

async fn update(ctx: &Ctx, step: &Step, adopt: bool) -> Result<()> {
    let node = &step.node;
    let arn = step.observed.as_ref().and_then(|o| o.ids.get("arn")).map(String::as_str).unwrap_or(policy_arn(node)?).to_string();
    if adopt || changed(step, "tags") {
        let stale = crate::ctx::stale_tags(step);
        if !stale.is_empty() {
            ctx.aws
                .iam
                .untag_policy()
                .policy_arn(&arn)
                .set_tag_keys(Some(stale))
                .send()
                .await
                .map_err(|e| aws_err("iam:UntagPolicy", e))?;
        }
        tag(ctx, &arn, &wanted_tags(node)).await?;
    }
    if changed(step, "PolicyDocument") {
        let read_default = step.observed.as_ref().and_then(|o| o.ids.get("default_version")).map(String::as_str);
        new_version(ctx, &step.id, &arn, &wanted_document(ctx, node).await?, read_default).await?;
    }
    Ok(())
}

/// Every role, user and group the policy is attached to (ListEntitiesForPolicy, paginated).
async fn entities(ctx: &Ctx, arn: &str) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    ctx.readers.iam.policy_entities(arn).await
}

async fn detach_everywhere(ctx: &Ctx, step: &Step, arn: &str) -> Result<()> {
    let (roles, users, groups) = entities(ctx, arn).await?;
    for r in roles {
        detach(ctx, &step.id, &r, arn).await?;
    }
    for u in users {
        match ctx.aws.iam.detach_user_policy().user_name(&u).policy_arn(arn).send().await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(aws_err("iam:DetachUserPolicy", e)).with_context(|| format!("detaching {arn} from IAM user {u}"));
            }
        }
    }
    for g in groups {
        match ctx.aws.iam.detach_group_policy().group_name(&g).policy_arn(arn).send().await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(aws_err("iam:DetachGroupPolicy", e)).with_context(|| format!("detaching {arn} from IAM group {g}"));
            }
        }
    }
    Ok(())
}

async fn delete(ctx: &Ctx, step: &Step) -> Result<()> {
    delete_arn(ctx, step, policy_arn(&step.node)?).await
}

/// Who still uses a managed policy: the roles, users and groups it is attached to.
pub async fn attached_anywhere(ctx: &Ctx, arn: &str) -> Result<Vec<String>> {
    let (roles, users, groups) = entities(ctx, arn).await?;
    let roles = roles.into_iter().map(|r| format!("role {r}"));
    let users = users.into_iter().map(|u| format!("user {u}"));
    Ok(roles.chain(users).chain(groups.into_iter().map(|g| format!("group {g}"))).collect())
}

/// Delete a managed policy that is not one of the plan's own (a retired one), the same way.
pub async fn delete_policy_arn(ctx: &Ctx, step: &Step, arn: &str) -> Result<()> {
    delete_arn(ctx, step, arn).await
}

/// In AWS's order: detach everywhere, delete non-default versions, then the policy. Attached or
/// versioned again meanwhile (a concurrent run), or not yet consistent (DeleteConflict): all of
/// it again, on the consistency schedule.
async fn delete_arn(ctx: &Ctx, step: &Step, arn: &str) -> Result<()> {
    let r = aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        &step.id,
        "iam:DeletePolicy",
        &[Condition::DeleteConflict],
        // Ok(Err): a failure before the delete, never retried; Err: DeletePolicy's own.
        || async {
            if let Err(e) = detach_and_prune_all(ctx, step, arn).await {
                return Ok(Err(e));
            }
            ctx.aws.iam.delete_policy().policy_arn(arn).send().await.map(|_| Ok(()))
        },
    )
    .await;
    match r {
        Ok(done) => done,
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("iam:DeletePolicy", e)),
    }
}

/// Before DeletePolicy: detached everywhere, every non-default version deleted.
async fn detach_and_prune_all(ctx: &Ctx, step: &Step, arn: &str) -> Result<()> {
    detach_everywhere(ctx, step, arn).await?;
    for v in versions(ctx, arn).await? {
        if !v.is_default {
            delete_version(ctx, arn, &v.id).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(id: &str, is_default: bool, created: i64) -> Version {
        Version { id: id.into(), is_default, created }
    }

    #[test]
    fn nothing_is_pruned_below_the_limit() {
        assert_eq!(version_to_prune(&[]), None);
        assert_eq!(version_to_prune(&[v("v1", false, 1), v("v2", false, 2), v("v3", false, 3), v("v4", true, 4)]), None);
    }

    #[test]
    fn the_oldest_non_default_version_is_pruned_at_the_limit() {
        let vs = [v("v1", true, 1), v("v2", false, 2), v("v3", false, 3), v("v4", false, 4), v("v5", false, 5)];
        assert_eq!(version_to_prune(&vs).as_deref(), Some("v2"), "the default is never pruned, even when oldest");
        let vs = [v("v9", false, 9), v("v7", false, 7), v("v8", true, 8), v("v6", false, 6), v("v10", false, 10)];
        assert_eq!(version_to_prune(&vs).as_deref(), Some("v6"), "order of the list does not matter");
    }

    #[test]
    fn a_newer_version_than_the_read_default_is_found() {
        let vs = [v("v1", false, 1), v("v2", false, 2), v("v3", true, 3)];
        assert_eq!(newer_than_read(&vs, "v2").as_deref(), Some("v3"), "the read was stale: v3 was written since");
        assert_eq!(newer_than_read(&vs, "v3"), None);
        let vs = [v("v10", true, 1), v("v9", false, 1)];
        assert_eq!(newer_than_read(&vs, "v9").as_deref(), Some("v10"), "by number, not by text");
        assert_eq!(newer_than_read(&[], "v1"), None);
    }

    #[test]
    fn versions_made_in_the_same_second_are_ordered_by_number() {
        let vs = [v("v10", false, 5), v("v9", false, 5), v("v11", true, 5), v("v12", false, 5), v("v13", false, 5)];
        assert_eq!(version_to_prune(&vs).as_deref(), Some("v9"));
    }
}
