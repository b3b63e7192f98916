//! The interruption queue's access policy (the queue's `Policy` attribute).
//!
//! Read: shares GetQueueUrl / GetQueueAttributes / ListQueueTags with the queue (no extra call);
//! ownership is the queue's. Write: SetQueueAttributes(Policy), retried while SQS does not yet
//! accept a principal or the queue ARN (InvalidAttributeValue), or, for a queue this run
//! created, does not know the queue yet (NonExistentQueue); then a bounded wait until
//! GetQueueAttributes shows it. Delete: clear the attribute (same wait), unless the queue itself
//! is being deleted.

use super::ctx::{Ctx, Current};
use super::queue;
use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::facts::Facts;
use crate::model::{Action, Fields, Node, NodeSpec, Observed, Owner, QueueSpec, Step};
use crate::plan_file::Spec;
use crate::policy_doc;
use anyhow::{Context, Result, bail};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::BTreeMap;

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): SQS, shared with the queue.
pub const READ_RANK: u8 = 4;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    QueuePolicy,
    read_ahead: true,
    forget: |ctx, node| super::queue::forget(ctx, &node.name),
    discover: None
);

/// A policy naming what SQS cannot resolve yet (either spelling of the code).
const PROPAGATING: [Condition; 1] = [Condition::QueuePolicyNotYetValid];

/// Pure: the queue policy node; it goes with the queue when the queue is deleted. EventBridge
/// may send only for the interruption rules this plan wants (`aws:SourceArn`).
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let i = &spec.interruption;
    let queue_arn = arns::queue_arn(facts, &i.queue_name);
    let rules = super::event_rule::wanted(spec);
    let rule_arns: Vec<String> = rules.iter().map(|(_, name)| arns::rule_arn(facts, name)).collect();
    // After the rules it names: when the layout changes (five rules <-> one merged rule), the
    // policy lets only the new rules send once they exist, and the old ones go after them.
    let deps: Vec<String> = std::iter::once("queue".to_string()).chain(rules.into_iter().map(|(id, _)| id)).collect();
    let fields =
        i.enabled.then(|| crate::model::fields_of(vec![("Policy", crate::karpenter_iam::queue_policy(&queue_arn, &rule_arns))]));
    vec![
        Node::new("queue-policy", &i.queue_name, NodeSpec::QueuePolicy(QueueSpec { queue_arn }))
            .with_fields(fields)
            .with_deps(deps)
            .contained_in("queue"),
    ]
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(url) = queue::url(ctx, &node.name).await? else { return Ok(None) };
    let (attrs, tags) = tokio::try_join!(queue::attributes(ctx, &url), queue::tags(ctx, &url))?;
    let (Some(attrs), Some(tags)) = (attrs, tags) else { return Ok(None) };
    let Some(text) = attrs.get("Policy").filter(|p| !p.trim().is_empty()) else { return Ok(None) };
    let doc = policy_doc::parse(text).with_context(|| format!("the policy of SQS queue {} is not valid JSON", node.name))?;
    let mut fields = Fields::new();
    fields.insert("Policy".into(), doc);
    let mut ids = BTreeMap::new();
    ids.insert("url".to_string(), url);
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

/// The queue's: the policy is an attribute of the queue, owned with it.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    queue::current(ctx, step).await
}

/// Ownership (the queue's) was checked just now by the dispatcher, for every action but Create;
/// a create finds the queue this plan has just made. A queue this run created may answer
/// NonExistentQueue for a moment (docs/aws-behaviour.md section 9.1): retried. Then `up` waits,
/// bounded, for GetQueueAttributes to show the policy written (section 9.2).
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let created_now = ctx.wrote("queue", None);
    let url = match current.and_then(|c| c.get("url")) {
        Some(u) => Some(u.to_string()),
        None => queue_url(ctx, step, created_now).await?,
    };
    let Some(url) = url else { bail!("SQS queue {} does not exist; its policy cannot be set", step.node.name) };
    let want = match step.action {
        Action::Delete => None,
        _ => Some(step.node.fields.as_ref().and_then(|f| f.get("Policy")).context("no policy in the plan")?.clone()),
    };
    let value = want.as_ref().map(policy_doc::to_wire).unwrap_or_default();
    let mut retryable = PROPAGATING.to_vec();
    retryable.extend_from_slice(queue::not_yet(created_now));
    aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:SetQueueAttributes", &retryable, || {
        ctx.aws.sqs.set_queue_attributes().queue_url(&url).attributes(QueueAttributeName::Policy, value.clone()).send()
    })
    .await
    .map_err(|e| aws_err("sqs:SetQueueAttributes(Policy)", e))?;
    let what = if want.is_some() { "the new policy" } else { "the policy removed" };
    queue::wait_shown(ctx, &step.id, &url, what, created_now, move |attrs| {
        let live = attrs.get("Policy").filter(|p| !p.trim().is_empty());
        match (&want, live) {
            (None, live) => live.is_none(),
            (Some(_), None) => false,
            (Some(w), Some(text)) => policy_doc::parse(text).is_ok_and(|doc| policy_doc::equivalent(&doc, w)),
        }
    });
    Ok(())
}

/// The queue's URL, fresh. A queue this run created may not be found for a moment: asked again
/// (bounded by the consistency deadline) before its policy is called impossible to set.
async fn queue_url(ctx: &Ctx, step: &Step, created_now: bool) -> Result<Option<String>> {
    let name = &step.node.name;
    if !created_now {
        return queue::url_now(ctx, name).await;
    }
    let found =
        aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:GetQueueUrl", &queue::NOT_YET, || {
            ctx.aws.sqs.get_queue_url().queue_name(name).send()
        })
        .await;
    match found {
        Ok(o) => Ok(o.queue_url().map(str::to_string)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(aws_err("sqs:GetQueueUrl", e)),
    }
}
