//! The EventBridge rules on the default bus that feed the interruption queue, one target each,
//! from `crate::catalog::RULES`. PutRule replaces a whole rule and ignores tags on an existing one,
//! so a create reads first and tags go through TagResource (docs/aws-behaviour.md section 5).

use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::facts::prepared::Facts;
use crate::model::{Action, Fields, Kind, Node, NodeSpec, Observed, Owner, QueueSpec, Step, Tags};
use crate::policy::doc;
use crate::spec::Spec;
use anyhow::{Context, Result, bail};
use aws_sdk_eventbridge::types::{RuleState, Tag, Target};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): EventBridge.
pub const READ_RANK: u8 = 5;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    EventRule,
    read_ahead: true,
    forget: |ctx, _| forget(ctx),
    discover: Some(|ctx, nodes| Box::pin(discover(ctx, nodes)))
);

pub const TARGET_ID: &str = "KarpenterInterruptionQueueTarget";

/// Karpenter's interruption rules, defined once in `catalog`.
use crate::catalog::{RULES, Rule};

/// DeleteRule right after RemoveTargets.
const HAS_TARGETS: [Condition; 1] = [Condition::RuleHasTargets];

fn fields(pattern: Value, description: String, queue_arn: &str, tags: &Tags) -> Fields {
    let mut f = Fields::new();
    f.insert("EventPattern".into(), pattern);
    f.insert("State".into(), json!("ENABLED"));
    f.insert("Description".into(), json!(description));
    f.insert("Targets".into(), json!([{"Id": TARGET_ID, "Arn": queue_arn}]));
    f.insert("tags".into(), Ctx::tags_value(tags));
    f
}

pub fn desired_fields(source: &str, detail_type: &str, queue_arn: &str, cluster: &str, tags: &Tags) -> Fields {
    let pattern = json!({"source": [source], "detail-type": [detail_type]});
    fields(pattern, format!("Karpenter interruption handling for {cluster}: {detail_type}"), queue_arn, tags)
}

/// Every rule on the default bus, counted once per run (memoised), so that `prepare` can start
/// the count while the last reads are in flight, once they show the plan creates a rule.
pub async fn bus_rule_count(ctx: &Ctx) -> Result<usize> {
    ctx.readers.events.bus_rule_count().await
}

/// The plan's finding when the rules it creates would fill the bus (one ListRules listing,
/// only when the plan creates a rule).
pub async fn quota_finding(ctx: &Ctx, plan: &crate::model::Plan) -> Result<Option<crate::model::Note>> {
    let adding = plan.steps.iter().filter(|s| s.kind == Kind::EventRule && s.action == Action::Create).count();
    if adding == 0 {
        return Ok(None);
    }
    let existing = bus_rule_count(ctx).await?;
    Ok(crate::checks::interruption::bus_quota_message_at(ctx.settings.rules_per_bus, &ctx.region, existing, adding)
        .map(|message| crate::model::Note { id: "event-bus-rule-quota".into(), level: crate::model::Level::Warning, message }))
}

/// The node id of the one rule of `interruption.rules = "merged"`.
pub const MERGED_ID: &str = "rule-Merged";

/// The merged rule's name, and whether it had to be shortened.
pub fn merged_rule_name(spec: &Spec) -> (String, bool) {
    crate::names::fit(&format!("Karpenter-{}-Interruption", spec.cluster), 64)
}

/// The rules of `RULES` this plan's Karpenter version handles (capacity reservations: v1.10).
fn parts_of(spec: &Spec) -> Vec<&'static Rule> {
    RULES.iter().filter(|r| spec.identity.karpenter_version.minor >= r.since_minor).collect()
}

/// Pure: one pattern for every wanted event kind. Karpenter's patterns have no cross-matches
/// (each detail-type comes from one source), so their union matches exactly their events.
pub fn merged_pattern(spec: &Spec) -> Value {
    let parts = parts_of(spec);
    let mut sources: Vec<&str> = Vec::new();
    for r in &parts {
        if !sources.contains(&r.source) {
            sources.push(r.source);
        }
    }
    let details: Vec<&str> = parts.iter().map(|r| r.detail_type).collect();
    json!({"source": sources, "detail-type": details})
}

/// (node id, name) of the interruption rules this plan wants.
pub fn wanted(spec: &Spec) -> Vec<(String, String)> {
    if !spec.interruption.enabled {
        return vec![];
    }
    if spec.interruption.merged {
        return vec![(MERGED_ID.to_string(), merged_rule_name(spec).0)];
    }
    parts_of(spec).iter().map(|r| (r.node_id(), arns::rule_name(spec, r.part).0)).collect()
}

/// Pure: one node per interruption rule, and the merged rule's. The layout not chosen, a rule newer
/// than the pinned Karpenter version, and every rule with interruption handling off are listed
/// without desired fields; an old-layout rule is deleted only once its replacement exists, so no
/// event kind is ever without a rule.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let on = spec.interruption.enabled;
    let merged = spec.interruption.merged;
    let queue_arn = arns::queue_arn(facts, &spec.interruption.queue_name);
    let separate: Vec<String> = RULES.iter().map(Rule::node_id).collect();
    let mut out: Vec<Node> = RULES
        .iter()
        .map(|r| {
            let id = r.node_id();
            let (name, shortened) = arns::rule_name(spec, r.part);
            let wanted = on && !merged && spec.identity.karpenter_version.minor >= r.since_minor;
            let fields =
                wanted.then(|| desired_fields(r.source, r.detail_type, &queue_arn, &spec.cluster, &arns::tags_for(spec, &id)));
            let note = shortened.then(|| format!("name shortened to fit EventBridge's 64 characters: {name}"));
            Node::new(id, name, NodeSpec::EventRule(QueueSpec { queue_arn: queue_arn.clone() }))
                .with_fields(fields)
                .with_deps(["queue"])
                .with_notes(note)
                .delete_after(merged.then_some(MERGED_ID))
        })
        .collect();
    let (name, shortened) = merged_rule_name(spec);
    let fields = (on && merged).then(|| {
        let description = format!("Karpenter interruption handling for {}: every interruption event (one rule)", spec.cluster);
        fields(merged_pattern(spec), description, &queue_arn, &arns::tags_for(spec, MERGED_ID))
    });
    let mut notes: Vec<String> = Vec::new();
    if on && merged {
        notes.push(format!(
            "one rule for Karpenter's {} event kinds (interruption.rules = \"merged\"), where upstream Karpenter makes one rule per kind: a deliberate difference",
            parts_of(spec).len()
        ));
    }
    if shortened {
        notes.push(format!("name shortened to fit EventBridge's 64 characters: {name}"));
    }
    out.push(
        Node::new(MERGED_ID, name, NodeSpec::EventRule(QueueSpec { queue_arn }))
            .with_fields(fields)
            .with_deps(["queue"])
            .with_notes(notes)
            .delete_after(if merged { vec![] } else { separate }),
    );
    out
}

async fn rule_tags(ctx: &Ctx, arn: &str) -> Result<Option<Tags>> {
    Ok(ctx.readers.events.tags(arn).await?.map(|t| t.into_iter().collect()))
}

async fn targets(ctx: &Ctx, name: &str) -> Result<Option<Vec<(String, String)>>> {
    let Some(t) = ctx.readers.events.targets(name).await? else { return Ok(None) };
    let mut out: Vec<(String, String)> = t.into_iter().map(|t| (t.id, t.arn)).collect();
    out.sort();
    Ok(Some(out))
}

fn rule_arn(ctx: &Ctx, name: &str) -> String {
    format!("arn:{}:events:{}:{}:rule/{name}", ctx.partition, ctx.region, ctx.account_id)
}

/// What a read needs of a rule itself: DescribeRule and ListRules both answer it.
type RuleInfo = crate::aws::read::events::Rule;

/// The prefix every interruption rule of a cluster's plan starts with (unless its name had to be
/// shortened: see `arns::rule_name`).
fn cluster_prefix(cluster: &str) -> String {
    format!("Karpenter-{cluster}-")
}

/// Every rule on the default bus whose name starts with `prefix`: one ListRules (NamePrefix) call
/// for all of a cluster's rules instead of a DescribeRule each, memoised for the observation, its
/// failure too (each rule's read reports it; none asks again).
async fn listed(ctx: &Ctx, prefix: &str) -> Result<crate::aws::read::events::Listing> {
    ctx.readers.events.rules_with_prefix(prefix).await
}

/// DescribeRule, now (None: no such rule).
async fn describe(ctx: &Ctx, name: &str) -> Result<Option<RuleInfo>> {
    ctx.readers.events.rule(name).await
}

/// The rule itself: from the cluster's memoised listing when its name carries the cluster's
/// prefix (the listing holds every rule with that prefix, so absence there is absence), else,
/// or with `fresh`, DescribeRule.
async fn rule_info(ctx: &Ctx, name: &str, fresh: bool) -> Result<Option<RuleInfo>> {
    let prefix = cluster_prefix(&ctx.cluster);
    if !fresh && name.starts_with(&prefix) {
        return Ok(listed(ctx, &prefix).await?.get(name).cloned());
    }
    describe(ctx, name).await
}

/// Drop the memoised listing: a rule of this cluster was just written.
pub fn forget(ctx: &Ctx) {
    ctx.readers.events.forget_rules_with_prefix(&cluster_prefix(&ctx.cluster));
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    read_rule(ctx, node, false).await
}

/// The rule, then its targets and its tags together (by the ARN the rule was listed or described
/// with). No rule: no further call (a create's check, or `up` from nothing, asks once per rule).
async fn read_rule(ctx: &Ctx, node: &Node, fresh: bool) -> Result<Option<Observed>> {
    let Some(d) = rule_info(ctx, &node.name, fresh).await? else { return Ok(None) };
    let arn = d.arn.clone().unwrap_or_else(|| rule_arn(ctx, &node.name));
    let (targets, tags) = tokio::try_join!(targets(ctx, &node.name), rule_tags(ctx, &arn))?;
    let (Some(targets), Some(tags)) = (targets, tags) else { return Ok(None) };
    let mut fields = Fields::new();
    let pattern = match d.pattern.as_deref() {
        Some(p) => doc::parse_event_pattern(p).unwrap_or_else(|_| json!(p)),
        None => Value::Null,
    };
    fields.insert("EventPattern".into(), pattern);
    fields.insert("State".into(), d.state.map(Value::String).unwrap_or(Value::Null));
    fields.insert("Description".into(), d.description.map(Value::String).unwrap_or(Value::Null));
    fields.insert("Targets".into(), Value::Array(targets.iter().map(|(id, arn)| json!({"Id": id, "Arn": arn})).collect()));
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    ids.insert("arn".to_string(), arn);
    Ok(Some(Observed { fields, owner: Owner::from_tags(&tags, &ctx.cluster), ids }))
}

fn sdk_tags(tags: &Tags) -> Result<Vec<Tag>> {
    tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build().context("building a tag")).collect()
}

async fn put_rule(ctx: &Ctx, step: &Step) -> Result<String> {
    let node = &step.node;
    let pattern = node.fields.as_ref().and_then(|f| f.get("EventPattern")).context("no event pattern in the plan")?;
    let o = ctx
        .aws
        .events
        .put_rule()
        .name(&node.name)
        .event_pattern(pattern.to_string())
        .state(RuleState::from(want_str(node, "State")))
        .description(want_str(node, "Description"))
        // Ignored by AWS for an existing rule; sent so an emulator that replaces tags keeps them.
        .set_tags(Some(sdk_tags(&wanted_tags(node))?))
        .send()
        .await
        .map_err(|e| aws_err("events:PutRule", e))?;
    Ok(o.rule_arn().map(str::to_string).unwrap_or_else(|| rule_arn(ctx, &node.name)))
}

async fn put_targets(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let want =
        node.fields.as_ref().and_then(|f| f.get("Targets")).and_then(|t| t.as_array()).context("no targets in the plan")?;
    let mut targets = Vec::new();
    for t in want {
        targets.push(
            Target::builder()
                .id(t["Id"].as_str().unwrap_or_default())
                .arn(t["Arn"].as_str().unwrap_or_default())
                .build()
                .context("building a target")?,
        );
    }
    let o = ctx
        .aws
        .events
        .put_targets()
        .rule(&node.name)
        .set_targets(Some(targets))
        .send()
        .await
        .map_err(|e| aws_err("events:PutTargets", e))?;
    if o.failed_entry_count() > 0 {
        let why: Vec<String> = o
            .failed_entries()
            .iter()
            .map(|f| {
                format!("{}: {} {}", f.target_id().unwrap_or("?"), f.error_code().unwrap_or(""), f.error_message().unwrap_or(""))
            })
            .collect();
        bail!("events:PutTargets failed for rule {}: {}", node.name, why.join("; "));
    }
    Ok(())
}

async fn remove_targets(ctx: &Ctx, name: &str, ids: Vec<String>) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    match ctx.aws.events.remove_targets().rule(name).set_ids(Some(ids)).force(false).send().await {
        Ok(o) if o.failed_entry_count() > 0 => {
            let why: Vec<String> = o
                .failed_entries()
                .iter()
                .map(|f| {
                    format!(
                        "{}: {} {}",
                        f.target_id().unwrap_or("?"),
                        f.error_code().unwrap_or(""),
                        f.error_message().unwrap_or("")
                    )
                })
                .collect();
            bail!("events:RemoveTargets failed for rule {name}: {}", why.join("; "))
        }
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("events:RemoveTargets", e)),
    }
}

/// ListTagsForResource, fresh: who owns the rule now (None: no such rule).
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let arn = step.observed.as_ref().and_then(|o| o.ids.get("arn")).cloned().unwrap_or_else(|| rule_arn(ctx, &step.node.name));
    let tags = rule_tags(ctx, &arn).await?;
    Ok(tags.map(|t| Current::new(Owner::from_tags(&t, &ctx.cluster), t).id("arn", arn)))
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let name = &step.node.name;
    match step.action {
        Action::Create | Action::Replace => {
            // PutRule upserts: make sure we are not about to overwrite someone else's rule.
            if let Some(live) = read_rule(ctx, &step.node, true).await?
                && live.owner != Owner::Ours
            {
                bail!(
                    "EventBridge rule {name} exists but is not managed by karpctl for cluster {}; it was left untouched",
                    ctx.cluster
                );
            }
            put_rule(ctx, step).await?;
            put_targets(ctx, step).await
        }
        Action::Update | Action::Adopt => {
            let arn = current.and_then(|c| c.get("arn")).map(str::to_string).unwrap_or_else(|| rule_arn(ctx, name));
            if step.action == Action::Adopt || changed(step, "tags") {
                let stale = crate::ctx::stale_tags(step);
                if !stale.is_empty() {
                    ctx.aws
                        .events
                        .untag_resource()
                        .resource_arn(&arn)
                        .set_tag_keys(Some(stale))
                        .send()
                        .await
                        .map_err(|e| aws_err("events:UntagResource", e))?;
                }
                ctx.aws
                    .events
                    .tag_resource()
                    .resource_arn(&arn)
                    .set_tags(Some(sdk_tags(&wanted_tags(&step.node))?))
                    .send()
                    .await
                    .map_err(|e| aws_err("events:TagResource", e))?;
            }
            if ["EventPattern", "State", "Description"].iter().any(|f| changed(step, f)) {
                put_rule(ctx, step).await?;
            }
            if changed(step, "Targets") {
                put_targets(ctx, step).await?;
                let keep: BTreeSet<String> = [TARGET_ID.to_string()].into();
                let live = targets(ctx, name).await?.unwrap_or_default();
                let extra: Vec<String> = live.into_iter().map(|(id, _)| id).filter(|id| !keep.contains(id)).collect();
                remove_targets(ctx, name, extra).await?;
            }
            Ok(())
        }
        Action::Delete => delete(ctx, step).await,
    }
}

/// Delete the rule the dispatcher has just found ours: its targets first, then the rule.
async fn delete(ctx: &Ctx, step: &Step) -> Result<()> {
    let name = &step.node.name;
    let Some(live) = targets(ctx, name).await? else { return Ok(()) };
    remove_targets(ctx, name, live.into_iter().map(|(id, _)| id).collect()).await?;
    // AWS can keep seeing removed targets for up to 5 minutes (docs/aws-behaviour.md section 5).
    let patience = aws::ConsistencyPolicy {
        deadline: ctx.consistency.deadline.max(std::time::Duration::from_secs(330)),
        ..ctx.consistency.clone()
    };
    let r = aws::with_consistency(&patience, ctx.reporter.as_ref(), &step.id, "events:DeleteRule", &HAS_TARGETS, || {
        ctx.aws.events.delete_rule().name(name).send()
    })
    .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(aws_err("events:DeleteRule", e)),
    }
}

/// Rules that target the queue but are not in the desired set (renamed, or from an older plan):
/// one ListRuleNamesByTarget call. They are read like any node and deleted if ours.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let Some(queue) = nodes.iter().find(|n| n.kind == Kind::Queue) else { return Ok(vec![]) };
    let queue_arn = queue.spec.arn();
    let known: BTreeSet<&str> = nodes.iter().filter(|n| n.kind == Kind::EventRule).map(|n| n.name.as_str()).collect();
    let mut found = Vec::new();
    for r in ctx.readers.events.rules_targeting(queue_arn).await? {
        if !known.contains(r.as_str()) {
            found.push(
                Node::new(format!("rule-unlisted-{r}"), &r, NodeSpec::EventRule(QueueSpec { queue_arn: queue_arn.to_string() }))
                    .with_deps([queue.id.clone()])
                    .with_notes(["targets the interruption queue but is not in the plan".to_string()])
                    .unlisted(),
            );
        }
    }
    Ok(found)
}
