//! The SQS interruption queue.
//!
//! Read: GetQueueUrl, then GetQueueAttributes(All) and ListQueueTags together (shared with the
//! queue policy through the context's memo). Create: CreateQueue with attributes and tags in the
//! one call; a name deleted in the last 60 s is retried (QueueDeletedRecently). Update:
//! SetQueueAttributes for the fields that differ, TagQueue for tags. Delete: ownership checked
//! again, then DeleteQueue; a missing queue is success.

use super::ctx::{Ctx, changed, want_str, wanted_tags};
use crate::aws::{self, Classify, Retryable, aws_err};
use crate::model::{Action, Fields, Node, Observed, Owner, Step, Tags};
use anyhow::{Result, bail};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// The attributes karpctl manages, as SQS names them.
pub const ATTRS: [&str; 3] = ["MessageRetentionPeriod", "SqsManagedSseEnabled", "KmsMasterKeyId"];

const DELETED_RECENTLY: [Retryable; 2] = [
    Retryable { code: "AWS.SimpleQueueService.QueueDeletedRecently", message: "" },
    Retryable { code: "QueueDeletedRecently", message: "" },
];

/// The desired fields of the queue.
pub fn desired_fields(kms_key_id: Option<&str>, tags: &Tags) -> Fields {
    let mut f = Fields::new();
    f.insert("MessageRetentionPeriod".into(), json!("300"));
    f.insert("SqsManagedSseEnabled".into(), json!(if kms_key_id.is_some() { "false" } else { "true" }));
    f.insert("KmsMasterKeyId".into(), kms_key_id.map(|k| json!(k)).unwrap_or(Value::Null));
    f.insert("tags".into(), Ctx::tags_value(tags));
    f
}

pub async fn url(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    ctx.queue_urls
        .get(name, || async {
            match ctx.aws.sqs.get_queue_url().queue_name(name).send().await {
                Ok(o) => Ok(o.queue_url().map(str::to_string)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(aws_err("sqs:GetQueueUrl", e)),
            }
        })
        .await
}

pub async fn attributes(ctx: &Ctx, url: &str) -> Result<Option<HashMap<String, String>>> {
    let r = ctx
        .queue_attrs
        .get(url, || async {
            let o = ctx
                .aws
                .sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .map_err(|e| aws_err("sqs:GetQueueAttributes", e))?;
            Ok(o.attributes().map(|m| m.iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect()).unwrap_or_default())
        })
        .await;
    missing_is_none(r)
}

pub async fn tags(ctx: &Ctx, url: &str) -> Result<Option<Tags>> {
    let r = ctx
        .queue_tags
        .get(url, || async {
            let o = ctx.aws.sqs.list_queue_tags().queue_url(url).send().await.map_err(|e| aws_err("sqs:ListQueueTags", e))?;
            Ok(o.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default())
        })
        .await;
    missing_is_none(r)
}

/// A queue deleted between two calls reads as missing.
fn missing_is_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.to_string().contains("NonExistentQueue") || e.to_string().contains("QueueDoesNotExist") => Ok(None),
        Err(e) => Err(e),
    }
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(url) = url(ctx, &node.name).await? else { return Ok(None) };
    let (attrs, tags) = tokio::try_join!(attributes(ctx, &url), tags(ctx, &url))?;
    let (Some(attrs), Some(tags)) = (attrs, tags) else { return Ok(None) };
    let mut fields = Fields::new();
    fields.insert("MessageRetentionPeriod".into(), attrs.get("MessageRetentionPeriod").map(|v| json!(v)).unwrap_or(Value::Null));
    fields.insert("SqsManagedSseEnabled".into(), json!(attrs.get("SqsManagedSseEnabled").map(String::as_str).unwrap_or("false")));
    fields.insert(
        "KmsMasterKeyId".into(),
        attrs.get("KmsMasterKeyId").filter(|v| !v.is_empty()).map(|v| json!(v)).unwrap_or(Value::Null),
    );
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    ids.insert("url".to_string(), url);
    if let Some(arn) = attrs.get("QueueArn") {
        ids.insert("arn".to_string(), arn.clone());
    }
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

fn wanted_attributes(step: &Step, only_changed: bool) -> HashMap<QueueAttributeName, String> {
    let mut m = HashMap::new();
    for a in ATTRS {
        if only_changed && !changed(step, a) {
            continue;
        }
        let v = want_str(&step.node, a).to_string();
        if a == "KmsMasterKeyId" && v.is_empty() && !only_changed {
            continue; // not sent at create time when SSE-SQS is used
        }
        m.insert(QueueAttributeName::from(a), v);
    }
    if m.contains_key(&QueueAttributeName::KmsMasterKeyId) || m.contains_key(&QueueAttributeName::SqsManagedSseEnabled) {
        // Switching encryption: send both so SQS never sees both or neither enabled.
        m.insert(QueueAttributeName::SqsManagedSseEnabled, want_str(&step.node, "SqsManagedSseEnabled").to_string());
        let k = want_str(&step.node, "KmsMasterKeyId");
        if !k.is_empty() || only_changed {
            m.insert(QueueAttributeName::KmsMasterKeyId, k.to_string());
        }
    }
    m
}

/// The URL of the queue for a write: what the read saw, or a fresh GetQueueUrl.
pub async fn url_for_write(ctx: &Ctx, step: &Step) -> Result<Option<String>> {
    if let Some(u) = step.observed.as_ref().and_then(|o| o.ids.get("url")) {
        return Ok(Some(u.clone()));
    }
    ctx.queue_urls.forget(&step.node.name);
    url(ctx, &step.node.name).await
}

pub async fn apply(ctx: &Ctx, step: &Step) -> Result<()> {
    match step.action {
        Action::Create => create(ctx, step).await,
        Action::Update | Action::Adopt => update(ctx, step, step.action == Action::Adopt).await,
        Action::Delete => delete(ctx, step).await,
        Action::Replace => bail!("the queue is never replaced"),
    }
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    let tags = wanted_tags(&step.node);
    let attrs = wanted_attributes(step, false);
    let r =
        aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:CreateQueue", &DELETED_RECENTLY, || {
            ctx.aws
                .sqs
                .create_queue()
                .queue_name(name)
                .set_attributes(Some(attrs.clone()))
                .set_tags(Some(tags.clone().into_iter().collect()))
                .send()
        })
        .await;
    let (url, existed) = match r {
        Ok(o) => (o.queue_url().unwrap_or_default().to_string(), false),
        Err(e) if matches!(e.code(), Some("QueueAlreadyExists" | "QueueNameExists")) => {
            // Someone made it since we read: converge it only if it is ours.
            ctx.queue_urls.forget(name);
            (url(ctx, name).await?.unwrap_or_default(), true)
        }
        Err(e) => return Err(aws_err("sqs:CreateQueue", e)),
    };
    // CreateQueue returns an existing queue with the same attributes without error, whoever made
    // it: confirm the queue is ours before anything builds on it.
    let live = ctx.aws.sqs.list_queue_tags().queue_url(&url).send().await.map_err(|e| aws_err("sqs:ListQueueTags", e))?;
    let live: Tags = live.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
    if Owner::from_tags(&live, &ctx.cluster) != Owner::Ours {
        bail!("SQS queue {name} exists but is not managed by karpctl for cluster {}; it was left untouched", ctx.cluster);
    }
    ctx.queue_urls.put(name, Some(url.clone()));
    if existed {
        // Ours, made by a concurrent run with other attributes: make them match.
        set_attributes(ctx, &url, attrs).await?;
    }
    Ok(())
}

async fn set_attributes(ctx: &Ctx, url: &str, attrs: HashMap<QueueAttributeName, String>) -> Result<()> {
    if attrs.is_empty() {
        return Ok(());
    }
    ctx.aws
        .sqs
        .set_queue_attributes()
        .queue_url(url)
        .set_attributes(Some(attrs))
        .send()
        .await
        .map_err(|e| aws_err("sqs:SetQueueAttributes", e))?;
    Ok(())
}

async fn update(ctx: &Ctx, step: &Step, adopt: bool) -> Result<()> {
    let Some(url) = url_for_write(ctx, step).await? else {
        bail!("SQS queue {} disappeared since it was read; run karpctl up again", step.node.name)
    };
    let live = ctx.aws.sqs.list_queue_tags().queue_url(&url).send().await;
    let live: Option<Tags> = match live {
        Ok(o) => Some(o.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(aws_err("sqs:ListQueueTags", e)),
    };
    super::ctx::ensure_still_ours(step, live.as_ref(), &ctx.cluster)?;
    if adopt || changed(step, "tags") {
        let tags = wanted_tags(&step.node);
        ctx.aws
            .sqs
            .tag_queue()
            .queue_url(&url)
            .set_tags(Some(tags.into_iter().collect()))
            .send()
            .await
            .map_err(|e| aws_err("sqs:TagQueue", e))?;
    }
    set_attributes(ctx, &url, wanted_attributes(step, true)).await
}

async fn delete(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    let Some(url) = url_for_write(ctx, step).await? else { return Ok(()) };
    // Never delete what is not ours, even if the plan is stale.
    let live = match ctx.aws.sqs.list_queue_tags().queue_url(&url).send().await {
        Ok(o) => o.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Tags>()).unwrap_or_default(),
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(aws_err("sqs:ListQueueTags", e)),
    };
    if Owner::from_tags(&live, &ctx.cluster) != Owner::Ours {
        bail!("SQS queue {name} is no longer tagged as karpctl's for cluster {}; not deleting it", ctx.cluster);
    }
    match ctx.aws.sqs.delete_queue().queue_url(&url).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("sqs:DeleteQueue", e)),
    }
}
