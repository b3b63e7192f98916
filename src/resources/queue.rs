//! The SQS interruption queue. A new queue answers late and its name is blocked for a minute after
//! a delete, so those answers are retried, and `up` and `down` return only once reads agree with
//! what they wrote (docs/aws-behaviour.md section 9, items 1 to 3 and 18).

use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::model::{Action, ArnSpec, Fields, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::spec::Spec;
use anyhow::{Result, bail};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): SQS, shared with the queue policy.
pub const READ_RANK: u8 = 4;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    Queue,
    read_ahead: true,
    forget: |ctx, node| forget(ctx, &node.name),
    discover: None
);

/// The attributes karpctl manages, as SQS names them.
pub const ATTRS: [&str; 3] = ["MessageRetentionPeriod", "SqsManagedSseEnabled", "KmsMasterKeyId"];

const DELETED_RECENTLY: [Condition; 1] = [Condition::QueueDeletedRecently];

/// What a queue made a moment ago answers to reads, writes and tagging until SQS has it
/// everywhere (docs/aws-behaviour.md section 9.1), in both spellings. Retried only for a queue
/// this run created: anywhere else it means the queue is gone.
pub const NOT_YET: [Condition; 1] = [Condition::MissingQueue];

/// The retries a call on the queue gets: NonExistentQueue only when this run created it.
pub fn not_yet(created_now: bool) -> &'static [Condition] {
    if created_now { &NOT_YET } else { &[] }
}

/// The desired fields of the queue.
pub fn desired_fields(kms_key_id: Option<&str>, tags: &Tags) -> Fields {
    let mut f = Fields::new();
    f.insert("MessageRetentionPeriod".into(), json!("300"));
    f.insert("SqsManagedSseEnabled".into(), json!(if kms_key_id.is_some() { "false" } else { "true" }));
    f.insert("KmsMasterKeyId".into(), kms_key_id.map(|k| json!(k)).unwrap_or(Value::Null));
    f.insert("tags".into(), Ctx::tags_value(tags));
    f
}

/// Pure: the queue node (without desired fields when interruption handling is off, so that a
/// queue karpctl made before is found and removed).
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let i = &spec.interruption;
    let arn = arns::queue_arn(facts, &i.queue_name);
    vec![
        Node::new("queue", &i.queue_name, NodeSpec::Queue(ArnSpec::new(arn)))
            .with_fields(i.enabled.then(|| desired_fields(i.kms_key_id.as_deref(), &arns::tags_for(spec, "queue"))))
            .with_deps(i.create_key.then_some(super::kms_key::ID))
            .with_notes(i.queue_name_note.iter().cloned()),
    ]
}

pub async fn url(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    ctx.readers.sqs.url(name).await
}

pub async fn attributes(ctx: &Ctx, url: &str) -> Result<Option<HashMap<String, String>>> {
    missing_is_none(ctx.readers.sqs.attributes(url).await)
}

pub async fn tags(ctx: &Ctx, url: &str) -> Result<Option<Tags>> {
    missing_is_none(ctx.readers.sqs.tags(url).await)
}

/// A queue deleted between two calls reads as missing.
fn missing_is_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if aws::aws_error_in(&e).is_some_and(|a| a.is_missing_queue()) => Ok(None),
        Err(e) => Err(e),
    }
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(url) = url(ctx, &node.name).await? else { return Ok(None) };
    let (attrs, tags) = tokio::try_join!(attributes(ctx, &url), tags(ctx, &url))?;
    let (Some(attrs), Some(tags)) = (attrs, tags) else { return Ok(None) };
    let mut fields = Fields::new();
    for a in ATTRS {
        fields.insert(a.into(), shown(&attrs, a).map(|v| json!(v)).unwrap_or(Value::Null));
    }
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    ids.insert("url".to_string(), url);
    if let Some(arn) = attrs.get("QueueArn") {
        ids.insert("arn".to_string(), arn.clone());
    }
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

/// A managed attribute as `read` (and so `diff`) sees it: SSE-SQS off when SQS does not say, no
/// KMS key when empty.
fn shown<'a>(attrs: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    match name {
        "SqsManagedSseEnabled" => Some(attrs.get(name).map(String::as_str).unwrap_or("false")),
        "KmsMasterKeyId" => attrs.get(name).map(String::as_str).filter(|v| !v.is_empty()),
        _ => attrs.get(name).map(String::as_str),
    }
}

/// All attributes of the queue, read now (never memoised); None when SQS says there is no such
/// queue.
pub async fn attributes_now(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Option<HashMap<String, String>>> {
    crate::aws::read::sqs::attributes_of(sqs, url).await
}

/// After an attribute write SQS accepted, alongside the rest of the run (`Ctx::settle_later`):
/// until fresh reads show it `Agreement::SQS_ATTRIBUTES` times in a row (docs/aws-behaviour.md
/// 9.2, 9.18), so that `diff` right after `up` finds nothing. A queue this run created may still
/// answer NonExistentQueue; any other that does is gone. At the deadline the run goes on, saying so.
pub fn wait_shown<F>(ctx: &Ctx, step_id: &str, url: &str, what: &str, created_now: bool, shows: F)
where
    F: Fn(&HashMap<String, String>) -> bool + Send + Sync + 'static,
{
    let (sqs, reporter, policy) = (ctx.aws.sqs.clone(), ctx.reporter.clone(), ctx.consistency.clone());
    let (id, url, what) = (step_id.to_string(), url.to_string(), what.to_string());
    ctx.settle_later(step_id, async move {
        let (sqs, url, shows) = (&sqs, &url, &shows);
        let agree = aws::Agreement::SQS_ATTRIBUTES;
        let seen = aws::wait_agreed(&policy, agree, reporter.as_ref(), &id, &format!("SQS to show {what}"), || async move {
            match attributes_now(sqs, url).await? {
                Some(a) => Ok(shows(&a)),
                None if created_now => Ok(false),
                None => bail!("SQS queue {url} no longer exists (it was deleted while karpctl wrote to it)"),
            }
        })
        .await?;
        if !seen {
            let why = if crate::interrupt::stopping() {
                "; the interrupt stopped the wait for it to show".to_string()
            } else {
                format!(" but does not show it yet ({} reads in a row must agree; SQS takes up to 60 s)", agree.reads)
            };
            reporter.event(Event::Info(&format!(
                "{id}: SQS accepted {what}{why}; `karpctl diff` may show it as a change for up to a minute"
            )));
        }
        Ok(())
    });
}

/// Whether the attributes read show every attribute in `written`, compared as `diff` does.
fn shows_attributes(attrs: &HashMap<String, String>, written: &HashMap<QueueAttributeName, String>) -> bool {
    written.iter().all(|(k, v)| shown(attrs, k.as_str()).unwrap_or("") == v)
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

/// The queue's URL from a fresh GetQueueUrl (None: no such queue).
pub async fn url_now(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    ctx.readers.sqs.forget_url(name);
    url(ctx, name).await
}

/// The URL (as read, else GetQueueUrl) and ListQueueTags, fresh: who owns the queue now.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let name = &step.node.name;
    let url = match step.observed.as_ref().and_then(|o| o.ids.get("url")).cloned() {
        Some(u) => u,
        None => match url_now(ctx, name).await? {
            Some(u) => u,
            None => return Ok(None),
        },
    };
    // A queue this run created may not answer yet: never take that for "gone".
    let live = match live_tags(ctx, &step.id, &url, ctx.wrote("queue", None)).await {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(aws_err("sqs:ListQueueTags", e)),
    };
    Ok(Some(Current::new(Owner::from_tags(&live, &ctx.cluster), live).id("url", url)))
}

/// ListQueueTags now (never memoised), retried while a queue this run created answers
/// NonExistentQueue. A queue this run created that answers with no tags at all is asked again
/// (bounded by the consistency deadline) before anything calls it unowned: karpctl tags every
/// queue it makes, and a replica that has not seen the tags yet answers with none
/// (docs/aws-behaviour.md section 9.18).
async fn live_tags(
    ctx: &Ctx,
    step_id: &str,
    url: &str,
    created_now: bool,
) -> std::result::Result<Tags, aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::list_queue_tags::ListQueueTagsError>> {
    let mut untagged = aws::Retry::new(&ctx.consistency, ctx.reporter.as_ref(), step_id, "sqs:ListQueueTags");
    loop {
        let o = aws::with_consistency(
            &ctx.consistency,
            ctx.reporter.as_ref(),
            step_id,
            "sqs:ListQueueTags",
            not_yet(created_now),
            || ctx.aws.sqs.list_queue_tags().queue_url(url).send(),
        )
        .await?;
        let tags: Tags = o.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
        if !tags.is_empty() || !created_now || !untagged.again("no tags yet").await {
            return Ok(tags);
        }
    }
}

/// Everything memoised about the queue (its URL by name; attributes and tags by URL).
pub fn forget(ctx: &Ctx, name: &str) {
    ctx.readers.sqs.forget_url(name);
    ctx.readers.sqs.forget_queues();
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let url = current.and_then(|c| c.get("url"));
    match step.action {
        Action::Create => create(ctx, step).await,
        Action::Update | Action::Adopt => update(ctx, step, url, step.action == Action::Adopt).await,
        Action::Delete => delete(ctx, step, url).await,
        Action::Replace => bail!("the queue is never replaced"),
    }
}

/// CreateQueue (retried while the name was deleted in the last 60 s), with the tags in the call
/// unless `tags` is None (a partition that cannot tag on create, section 9.18).
async fn create_queue(
    ctx: &Ctx,
    step: &Step,
    attrs: &HashMap<QueueAttributeName, String>,
    tags: Option<&Tags>,
) -> std::result::Result<
    aws_sdk_sqs::operation::create_queue::CreateQueueOutput,
    aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::create_queue::CreateQueueError>,
> {
    let tags: Option<HashMap<String, String>> = tags.map(|t| t.clone().into_iter().collect());
    aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:CreateQueue", &DELETED_RECENTLY, || {
        ctx.aws.sqs.create_queue().queue_name(&step.node.name).set_attributes(Some(attrs.clone())).set_tags(tags.clone()).send()
    })
    .await
}

/// A partition that cannot tag on create (the ISO partitions): make the queue without tags, then
/// tag it, as Terraform's AWS provider does. The queue was not there when read a moment ago;
/// GetQueueUrl is asked once more so that a queue someone made since is never tagged as ours.
/// Killed between the two calls, the run leaves an untagged queue that the next `up` reports as
/// not karpctl's (`up --adopt` takes it).
async fn create_then_tag(ctx: &Ctx, step: &Step, attrs: &HashMap<QueueAttributeName, String>, tags: &Tags) -> Result<String> {
    let name = &step.node.name;
    ctx.reporter.event(Event::Info(&format!(
        "{}: partition {} does not take tags on sqs:CreateQueue; creating the queue, then tagging it",
        step.id, ctx.partition
    )));
    if url_now(ctx, name).await?.is_some() {
        bail!("SQS queue {name} appeared since it was read and is not tagged as karpctl's; it was left untouched");
    }
    let url = create_queue(ctx, step, attrs, None)
        .await
        .map_err(|e| aws_err("sqs:CreateQueue", e))?
        .queue_url()
        .unwrap_or_default()
        .to_string();
    let tags: HashMap<String, String> = tags.clone().into_iter().collect();
    aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:TagQueue", &NOT_YET, || {
        ctx.aws.sqs.tag_queue().queue_url(&url).set_tags(Some(tags.clone())).send()
    })
    .await
    .map_err(|e| aws_err("sqs:TagQueue", e))?;
    Ok(url)
}

async fn create(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    let tags = wanted_tags(&step.node);
    let attrs = wanted_attributes(step, false);
    let r = create_queue(ctx, step, &attrs, Some(&tags)).await;
    let (url, existed) = match r {
        Ok(o) => (o.queue_url().unwrap_or_default().to_string(), false),
        Err(e) if ctx.partition != "aws" && e.is(Condition::TagOnCreateUnsupported) => {
            (create_then_tag(ctx, step, &attrs, &tags).await?, false)
        }
        Err(e) if e.is_queue_name_taken() => {
            // Someone made it since we read: converge it only if it is ours.
            ctx.readers.sqs.forget_url(name);
            (url(ctx, name).await?.unwrap_or_default(), true)
        }
        Err(e) => return Err(aws_err("sqs:CreateQueue", e)),
    };
    // CreateQueue returns an existing queue with the same attributes without error, whoever made
    // it: confirm the queue is ours before anything builds on it. A queue made a moment ago
    // answers NonExistentQueue for a while (section 9.1): retried, never taken for "not ours".
    let live = live_tags(ctx, &step.id, &url, true).await.map_err(|e| aws_err("sqs:ListQueueTags", e))?;
    if Owner::from_tags(&live, &ctx.cluster) != Owner::Ours {
        bail!("SQS queue {name} exists but is not managed by karpctl for cluster {}; it was left untouched", ctx.cluster);
    }
    ctx.readers.sqs.remember_url(name, Some(url.clone()));
    if existed {
        // Ours, made by a concurrent run with other attributes: make them match.
        return set_attributes(ctx, &step.id, &url, attrs, true).await;
    }
    wait_shown(ctx, &step.id, &url, "the new queue's attributes", true, move |a| shows_attributes(a, &attrs));
    Ok(())
}

/// SetQueueAttributes (retried while a queue this run created answers NonExistentQueue), then
/// the wait for SQS to show what was written.
async fn set_attributes(
    ctx: &Ctx,
    step_id: &str,
    url: &str,
    attrs: HashMap<QueueAttributeName, String>,
    created_now: bool,
) -> Result<()> {
    if attrs.is_empty() {
        return Ok(());
    }
    aws::with_consistency(
        &ctx.consistency,
        ctx.reporter.as_ref(),
        step_id,
        "sqs:SetQueueAttributes",
        not_yet(created_now),
        || ctx.aws.sqs.set_queue_attributes().queue_url(url).set_attributes(Some(attrs.clone())).send(),
    )
    .await
    .map_err(|e| aws_err("sqs:SetQueueAttributes", e))?;
    let mut names: Vec<&str> = attrs.keys().map(QueueAttributeName::as_str).collect();
    names.sort();
    let what = format!("the new {}", names.join(", "));
    wait_shown(ctx, step_id, url, &what, created_now, move |a| shows_attributes(a, &attrs));
    Ok(())
}

async fn update(ctx: &Ctx, step: &Step, url: Option<&str>, adopt: bool) -> Result<()> {
    let Some(url) = url else { bail!("SQS queue {} disappeared since it was read; run karpctl up again", step.node.name) };
    let created_now = ctx.wrote("queue", None);
    if adopt || changed(step, "tags") {
        let stale = crate::ctx::stale_tags(step);
        if !stale.is_empty() {
            ctx.aws
                .sqs
                .untag_queue()
                .queue_url(url)
                .set_tag_keys(Some(stale))
                .send()
                .await
                .map_err(|e| aws_err("sqs:UntagQueue", e))?;
        }
        let tags: HashMap<String, String> = wanted_tags(&step.node).into_iter().collect();
        aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:TagQueue", not_yet(created_now), || {
            ctx.aws.sqs.tag_queue().queue_url(url).set_tags(Some(tags.clone())).send()
        })
        .await
        .map_err(|e| aws_err("sqs:TagQueue", e))?;
    }
    set_attributes(ctx, &step.id, url, wanted_attributes(step, true), created_now).await
}

/// Delete the queue the dispatcher has just found ours, and return only once SQS no longer finds
/// it in `Agreement::SQS_QUEUE_GONE` reads in a row: DeleteQueue takes up to 60 s, during which
/// some reads still find the queue (sections 9.3 and 9.18), and an `up` right after must not
/// build on a queue about to vanish.
async fn delete(ctx: &Ctx, step: &Step, url: Option<&str>) -> Result<()> {
    let Some(url) = url else { return Ok(()) };
    match ctx.aws.sqs.delete_queue().queue_url(url).send().await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(aws_err("sqs:DeleteQueue", e)),
    }
    let name = &step.node.name;
    let agree = aws::Agreement::SQS_QUEUE_GONE;
    let what = "SQS to finish deleting the queue";
    let gone = aws::wait_agreed(&ctx.consistency, agree, ctx.reporter.as_ref(), &step.id, what, || async {
        match ctx.aws.sqs.get_queue_url().queue_name(name).send().await {
            Ok(_) => Ok(false),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(aws_err("sqs:GetQueueUrl", e)),
        }
    })
    .await?;
    if !gone {
        bail!(
            "SQS queue {name} is still being deleted (SQS accepted the delete; it takes up to 60 s); run `karpctl down` again to wait for it"
        );
    }
    Ok(())
}
