//! The interruption queue's KMS key when the plan says `kms_key_id = "create"`, found by its alias
//! `alias/karpenter-<cluster>` (docs/readiness.md, "Encrypted queues"). A key the plan names is the
//! user's and never written; late KMS answers are retried only for a key this step just made.

use super::iam::{not_managed, tags_satisfied};
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, wanted_tags};
use crate::facts::prepared::Facts;
use crate::karpenter_iam::key_policy;
use crate::model::{Action, ArnSpec, Fields, Kind, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::spec::Spec;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Fields that cannot change in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): KMS, three calls.
pub const READ_RANK: u8 = 4;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    KmsKey,
    read_ahead: true,
    forget: |ctx, node| forget(ctx, &node.name),
    discover: None
);
/// KMS's shortest waiting period before a scheduled key deletion (7 to 30 days).
pub const DELETION_WINDOW_DAYS: i32 = 7;
/// The node id.
pub const ID: &str = "kms-key";

/// What KMS answers about a key it has not propagated yet (right after CreateKey or
/// CancelKeyDeletion): retried for a key this step just made or brought back.
const NOT_YET: [Condition; 2] = [Condition::KmsNotFound, Condition::KmsInvalidState];

fn description(cluster: &str) -> String {
    format!("Encrypts Karpenter's interruption queue for EKS cluster {cluster} (made by karpctl)")
}

/// Pure: the key node (fields only with `kms_key_id = "create"`; without, it is still listed so
/// that a key karpctl made before is found and its deletion scheduled).
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let i = &spec.interruption;
    let alias = crate::spec::created_key_alias(&spec.cluster);
    let fields = (i.enabled && i.create_key).then(|| {
        crate::model::fields_of(vec![
            ("Description", json!(description(&spec.cluster))),
            ("KeyPolicy", key_policy(&facts.partition, &facts.account_id)),
            ("KeyState", json!("Enabled")),
            ("tags", crate::arns::tags_value(spec, ID)),
        ])
    });
    let arn = facts.kms_key.as_ref().and_then(|k| k.arn.clone()).filter(|_| i.create_key).unwrap_or_default();
    vec![Node::new(ID, alias, NodeSpec::KmsKey(ArnSpec::new(arn))).with_fields(fields).with_notes(
        i.create_key.then(|| format!(
            "`karpctl down` schedules this key's deletion: KMS waits {DELETION_WINDOW_DAYS} days (its shortest period) before deleting it, and `aws kms cancel-key-deletion` undoes it until then"
        )),
    )]
}

use crate::aws::read::kms::LiveKey;

/// DescribeKey (by id, ARN, alias or alias ARN); None when there is no such key or alias.
pub async fn describe(ctx: &Ctx, key: &str) -> Result<Option<LiveKey>> {
    ctx.readers.kms.key_now(key).await
}

/// GetKeyPolicy (the `default` policy, the only one a key has), canonical.
pub async fn policy(ctx: &Ctx, key_id: &str) -> Result<Value> {
    let text = ctx.readers.kms.policy(key_id).await?;
    crate::policy::doc::parse(text.as_deref().unwrap_or_default()).with_context(|| format!("reading the key policy of {key_id}"))
}

/// DescribeKey memoised for this observation: preflight's lookup of karpctl's key (`"create"`)
/// and the node's read share one call. Writes read fresh (`describe`); `forget` drops it.
pub async fn described(ctx: &Ctx, key: &str) -> Result<Option<LiveKey>> {
    ctx.readers.kms.key(key).await
}

/// Drop the memoised DescribeKey of the node's alias (its object was just written).
pub fn forget(ctx: &Ctx, alias: &str) {
    ctx.readers.kms.forget_key(alias);
}

async fn tags(ctx: &Ctx, key_id: &str) -> Result<Tags> {
    ctx.readers.kms.tags(key_id).await
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(live) = described(ctx, &node.name).await? else { return Ok(None) };
    let (policy, tags) = tokio::try_join!(policy(ctx, &live.key_id), tags(ctx, &live.key_id))?;
    let mut fields = Fields::new();
    fields.insert("Description".into(), json!(live.description));
    fields.insert("KeyPolicy".into(), policy);
    fields.insert("KeyState".into(), json!(live.state));
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let ids = BTreeMap::from([("arn".to_string(), live.arn.clone())]);
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

/// DescribeKey and ListResourceTags, fresh: who owns the key now.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    current_of(ctx, &step.node.name).await
}

async fn current_of(ctx: &Ctx, alias: &str) -> Result<Option<Current>> {
    let Some(live) = describe(ctx, alias).await? else { return Ok(None) };
    let tags = tags(ctx, &live.key_id).await?;
    Ok(Some(
        Current::new(Owner::from_tags(&tags, &ctx.cluster), tags)
            .id("arn", live.arn)
            .id("key_id", live.key_id)
            .id("state", live.state),
    ))
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    match (step.action, current) {
        (Action::Create, _) => create(ctx, step).await,
        (Action::Update | Action::Adopt, Some(c)) => update(ctx, step, c, step.action == Action::Adopt).await,
        (Action::Delete, Some(c)) => delete(ctx, step, c).await,
        (Action::Replace, _) => bail!("KMS key {} has no field that forces a replacement", step.node.name),
        (_, None) => bail!("KMS key {} no longer exists; run `karpctl up` again to make it", step.node.name),
    }
}

fn sdk_tags(tags: &Tags) -> Result<Vec<aws_sdk_kms::types::Tag>> {
    tags.iter()
        .map(|(k, v)| aws_sdk_kms::types::Tag::builder().tag_key(k).tag_value(v).build().context("building a KMS tag"))
        .collect()
}

fn want_policy(node: &Node) -> String {
    crate::policy::doc::to_wire(node.fields.as_ref().and_then(|f| f.get("KeyPolicy")).unwrap_or(&Value::Null))
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let alias = &node.name;
    if let Some(c) = current_of(ctx, alias).await? {
        // A run stopped after CreateAlias, or a plan made before someone else made the alias.
        if c.owner != Owner::Ours {
            bail!(not_managed(Kind::KmsKey, alias, &ctx.cluster, &c.owner));
        }
        return update(ctx, step, &c, true).await;
    }
    let o = ctx
        .aws
        .kms
        .create_key()
        .description(crate::ctx::want_str(node, "Description"))
        .policy(want_policy(node))
        .key_usage(aws_sdk_kms::types::KeyUsageType::EncryptDecrypt)
        .key_spec(aws_sdk_kms::types::KeySpec::SymmetricDefault)
        .set_tags(Some(sdk_tags(&wanted_tags(node))?))
        .send()
        .await
        .map_err(|e| aws_err("kms:CreateKey", e))
        .with_context(|| format!("creating the KMS key for {alias}"))?;
    let meta = o.key_metadata().context("kms:CreateKey returned no key")?;
    let (key_id, arn) = (meta.key_id().to_string(), meta.arn().unwrap_or_default().to_string());
    if !arn.is_empty() {
        // The Interruption policy names this ARN (`arn_now`): no read of a key KMS may not show yet.
        ctx.once.made_key_arn.put(alias, arn);
    }
    let named = aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "kms:CreateAlias", &NOT_YET, || {
        ctx.aws.kms.create_alias().alias_name(alias).target_key_id(&key_id).send()
    })
    .await;
    if let Err(e) = named {
        let err = aws_err("kms:CreateAlias", e);
        // Without its alias no run could find the new key again: do not leave it behind.
        let _ = ctx.aws.kms.schedule_key_deletion().key_id(&key_id).pending_window_in_days(DELETION_WINDOW_DAYS).send().await;
        ctx.once.made_key_arn.forget(alias);
        return Err(err.context(format!("naming KMS key {key_id} {alias} (the key is scheduled for deletion again)")));
    }
    // Until DescribeKey finds the key by its alias, a read (`diff`, the next `up`) would take it
    // for missing and plan a second key.
    let what = format!("KMS to show key {key_id} under {alias}");
    let shown = aws::wait_until(&ctx.consistency, ctx.reporter.as_ref(), &step.id, &what, || async {
        Ok(describe(ctx, alias).await?.is_some_and(|k| k.key_id == key_id))
    })
    .await?;
    if !shown {
        bail!(
            "KMS key {key_id} was made and named {alias}, but DescribeKey does not find it by that name yet (KMS has not propagated it); run `karpctl diff` in a minute: until KMS shows it, a run would plan a second key"
        );
    }
    Ok(())
}

async fn update(ctx: &Ctx, step: &Step, current: &Current, adopt: bool) -> Result<()> {
    let node = &step.node;
    let key_id = current.get("key_id").unwrap_or_default().to_string();
    let state = current.get("state").unwrap_or_default();
    let cancelled = state == "PendingDeletion";
    if cancelled {
        ctx.aws.kms.cancel_key_deletion().key_id(&key_id).send().await.map_err(|e| aws_err("kms:CancelKeyDeletion", e))?;
    }
    // Right after CancelKeyDeletion KMS may still see the key pending deletion, or not at all.
    let retry: &[Condition] = if cancelled { &NOT_YET } else { &[] };
    let (policy, reporter, id) = (&ctx.consistency, ctx.reporter.as_ref(), step.id.as_str());
    if state != "Enabled" {
        // A cancelled deletion leaves the key disabled.
        aws::with_consistency(policy, reporter, id, "kms:EnableKey", retry, || ctx.aws.kms.enable_key().key_id(&key_id).send())
            .await
            .map_err(|e| aws_err("kms:EnableKey", e))?;
    }
    if adopt || changed(step, "KeyPolicy") {
        let want = want_policy(node);
        aws::with_consistency(policy, reporter, id, "kms:PutKeyPolicy", retry, || {
            ctx.aws.kms.put_key_policy().key_id(&key_id).policy_name("default").policy(&want).send()
        })
        .await
        .map_err(|e| aws_err("kms:PutKeyPolicy", e))?;
    }
    if adopt || changed(step, "Description") {
        let want = crate::ctx::want_str(node, "Description");
        aws::with_consistency(policy, reporter, id, "kms:UpdateKeyDescription", retry, || {
            ctx.aws.kms.update_key_description().key_id(&key_id).description(want).send()
        })
        .await
        .map_err(|e| aws_err("kms:UpdateKeyDescription", e))?;
    }
    let want = wanted_tags(node);
    let stale = crate::tags::stale_keys(&current.tags, &want);
    if !stale.is_empty() {
        aws::with_consistency(policy, reporter, id, "kms:UntagResource", retry, || {
            ctx.aws.kms.untag_resource().key_id(&key_id).set_tag_keys(Some(stale.clone())).send()
        })
        .await
        .map_err(|e| aws_err("kms:UntagResource", e))?;
    }
    if adopt || !tags_satisfied(&current.tags, &want) || !stale.is_empty() {
        let tags = sdk_tags(&want)?;
        aws::with_consistency(policy, reporter, id, "kms:TagResource", retry, || {
            ctx.aws.kms.tag_resource().key_id(&key_id).set_tags(Some(tags.clone())).send()
        })
        .await
        .map_err(|e| aws_err("kms:TagResource", e))?;
    }
    Ok(())
}

/// Schedules the deletion (KMS's shortest wait, 7 days), then deletes the alias: a run stopped
/// between the two still finds the key by its alias.
async fn delete(ctx: &Ctx, step: &Step, current: &Current) -> Result<()> {
    let alias = &step.node.name;
    let key_id = current.get("key_id").unwrap_or_default();
    let when = if current.get("state") == Some("PendingDeletion") {
        None
    } else {
        let o = ctx
            .aws
            .kms
            .schedule_key_deletion()
            .key_id(key_id)
            .pending_window_in_days(DELETION_WINDOW_DAYS)
            .send()
            .await
            .map_err(|e| aws_err("kms:ScheduleKeyDeletion", e))?;
        o.deletion_date().map(|d| d.to_string())
    };
    match ctx.aws.kms.delete_alias().alias_name(alias).send().await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(aws_err("kms:DeleteAlias", e)),
    }
    ctx.reporter.event(crate::events::Event::Note {
        level: crate::model::Level::Info,
        text: &format!(
            "KMS key {} ({alias}) is scheduled for deletion{}: KMS waits {DELETION_WINDOW_DAYS} days; `aws kms cancel-key-deletion --key-id {}` keeps it",
            current.get("arn").unwrap_or(key_id),
            when.map(|d| format!(" on {d}")).unwrap_or_default(),
            current.get("arn").unwrap_or(key_id),
        ),
    });
    Ok(())
}

/// The ARN of the key karpctl made for this cluster (for a policy written after the key was made
/// in the same run): the one CreateKey answered, else read now by the alias. A key this run's
/// step made or found may not read back at once (KMS is eventually consistent): the read is then
/// retried on the consistency schedule.
pub async fn arn_now(ctx: &Ctx) -> Result<String> {
    let alias = crate::spec::created_key_alias(&ctx.cluster);
    ctx.once
        .made_key_arn
        .get(&alias, || async {
            let patient = ctx.wrote(ID, None);
            let mut retry = aws::Retry::new(&ctx.consistency, ctx.reporter.as_ref(), ID, "kms:DescribeKey");
            loop {
                if let Some(k) = describe(ctx, &alias).await? {
                    return Ok(k.arn);
                }
                if !patient || !retry.again("NotFoundException").await {
                    bail!("KMS key {alias} does not exist yet; run `karpctl up` again");
                }
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_policy_passes_the_readiness_checks_it_is_made_for() {
        let p = key_policy("aws", "111122223333");
        assert_eq!(crate::checks::kms::kms_key_lets_eventbridge_in("k", &p), None);
        assert_eq!(
            crate::checks::kms::kms_key_lets_controller_decrypt(
                "k",
                &p,
                "aws",
                "111122223333",
                "arn:aws:iam::111122223333:role/c"
            ),
            None
        );
    }
}
