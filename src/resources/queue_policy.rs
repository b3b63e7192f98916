//! The interruption queue's access policy (its `Policy` attribute; ownership is the queue's), and
//! the `handover` that changes the rule layout without a moment when a rule that targets the queue
//! may not send to it (docs/aws-behaviour.md section 9.21).

use super::queue;
use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::{Ctx, Current};
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::model::{Action, Fields, Kind, Node, NodeSpec, Observed, Owner, QueueSpec, Step};
use crate::policy::doc;
use crate::spec::Spec;
use anyhow::{Context, Result, bail};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): SQS, shared with the queue.
pub const READ_RANK: u8 = 4;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    QueuePolicy,
    read_ahead: true,
    forget: |ctx, node| super::queue::forget(ctx, &node.name),
    discover: None,
    refine: Some(refine)
);

/// The node id of the queue policy (the policy as the plan wants it).
pub const ID: &str = "queue-policy";
/// The node id of the hand-over write of a rule-layout switch (see `handover`).
pub const HANDOVER_ID: &str = "queue-policy-handover";

/// How long a queue-policy change takes to be in force everywhere: SQS documents up to 60 s for
/// an attribute change to propagate, and GetQueueAttributes agreeing says nothing of the hosts
/// that authorise SendMessage (docs/aws-behaviour.md section 9.21). `KARPCTL_SQS_POLICY_PROPAGATION_SECS`
/// sets it (tests shorten it).
pub fn propagation(ctx: &Ctx) -> Duration {
    ctx.settings.sqs_policy_propagation
}

/// A policy naming what SQS cannot resolve yet (either spelling of the code).
const PROPAGATING: [Condition; 1] = [Condition::QueuePolicyNotYetValid];

/// Pure: the queue policy node; it goes with the queue when the queue is deleted. EventBridge
/// may send only for the interruption rules this plan wants (`aws:SourceArn`).
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let i = &spec.interruption;
    let queue_arn = arns::queue_arn(facts, &i.queue_name);
    let rules = super::event_rule::wanted(spec);
    let rule_arns: Vec<String> = rules.iter().map(|(_, name)| arns::rule_arn(facts, name)).collect();
    // After the rules it names: when the layout changes (separate rules <-> one merged rule), this
    // write, which drops the old rules' names, comes after the new rules exist and (`handover`)
    // after the old rules are gone.
    let deps: Vec<String> = std::iter::once("queue".to_string()).chain(rules.into_iter().map(|(id, _)| id)).collect();
    let fields =
        i.enabled.then(|| crate::model::fields_of(vec![("Policy", crate::karpenter_iam::queue_policy(&queue_arn, &rule_arns))]));
    vec![
        Node::new(ID, &i.queue_name, NodeSpec::QueuePolicy(QueueSpec { queue_arn }))
            .with_fields(fields)
            .with_deps(deps)
            .contained_in("queue"),
    ]
}

/// Whether an Allow statement lets EventBridge's service principal (or everyone) in.
fn takes_events(st: &Value) -> bool {
    let p = &st["Principal"];
    p.as_str() == Some("*")
        || doc::strings(&p["AWS"]).contains("*")
        || doc::strings(&p["Service"]).contains(crate::karpenter_iam::EVENTS_PRINCIPAL)
}

/// The values of a statement's `aws:SourceArn` conditions (any operator), or None when it has
/// no such condition (it does not limit the rules that may send).
fn source_arns(st: &Value) -> Option<BTreeSet<String>> {
    let mut found: Option<BTreeSet<String>> = None;
    for (_, kv) in st["Condition"].as_object().into_iter().flatten() {
        for (k, v) in kv.as_object().into_iter().flatten() {
            if k.eq_ignore_ascii_case("aws:SourceArn") {
                found.get_or_insert_with(BTreeSet::new).extend(doc::strings(v));
            }
        }
    }
    found
}

/// The statements of a queue policy that let EventBridge send to the queue.
fn sending(policy: &Value) -> impl Iterator<Item = &Value> {
    doc::statements(policy)
        .into_iter()
        .filter(|st| doc::is_allow(st) && takes_events(st) && doc::statement_takes(st, "sqs:SendMessage"))
}

/// Pure: whether a queue policy lets EventBridge deliver for the rule `rule_arn` (a statement
/// with no `aws:SourceArn` condition lets every rule; `ArnLike` patterns match).
pub fn lets_rule_send(policy: &Value, rule_arn: &str) -> bool {
    sending(policy).any(|st| source_arns(st).is_none_or(|arns| arns.iter().any(|a| doc::glob(a, rule_arn))))
}

/// The EventBridge rules that target `queue_arn` and are neither karpctl's for this cluster nor
/// in the plan (another tool's interruption rules): (name, ARN).
pub fn foreign_rules(entries: &[(Node, Option<Observed>)], queue_arn: &str) -> Vec<(String, String)> {
    entries
        .iter()
        .filter(|(n, _)| n.kind == Kind::EventRule && n.fields.is_none())
        .filter_map(|(n, o)| {
            let o = o.as_ref().filter(|o| o.owner != Owner::Ours)?;
            let targets = o.fields.get("Targets").and_then(Value::as_array)?;
            targets.iter().any(|t| t["Arn"].as_str() == Some(queue_arn)).then_some(())?;
            Some((n.name.clone(), o.ids.get("arn")?.clone()))
        })
        .collect()
}

/// Pure, once everything is observed (`KindDef::refine`): the plan's policy lets every rule of
/// another tool that targets the queue send too (karpctl never refuses a rule it does not retire
/// in the same plan; the plan warns of each), then `handover`.
pub fn refine(entries: &mut Vec<(Node, Option<Observed>)>) {
    keep_foreign_rules(entries);
    handover(entries);
}

/// Pure: add the ARNs of other tools' rules that target the queue to the plan's policy.
fn keep_foreign_rules(entries: &mut [(Node, Option<Observed>)]) {
    let Some(at) = entries.iter().position(|(n, _)| n.kind == Kind::QueuePolicy && n.id == ID) else { return };
    let queue_arn = entries[at].0.spec.arn().to_string();
    let foreign = foreign_rules(entries, &queue_arn);
    let Some(want) = entries[at].0.fields.as_mut().and_then(|f| f.get_mut("Policy")) else { return };
    if foreign.is_empty() {
        return;
    }
    let mut arns: Vec<String> = sending(want).filter_map(source_arns).flatten().collect();
    arns.extend(foreign.into_iter().map(|(_, arn)| arn));
    arns.sort();
    arns.dedup();
    *want = crate::karpenter_iam::queue_policy(&queue_arn, &arns);
}

/// Pure, once everything is observed: while the plan deletes rules of ours that
/// target the queue and the live policy lets them send, a `queue-policy-handover` node names the
/// old and the plan's rules; the new rules come after it, the old rules' deletes once it is in
/// force, and the `queue-policy` step after those deletes (docs/aws-behaviour.md section 9.21).
pub fn handover(entries: &mut Vec<(Node, Option<Observed>)>) {
    let Some(at) = entries.iter().position(|(n, _)| n.kind == Kind::QueuePolicy && n.id == ID) else { return };
    if entries[at].1.is_none() {
        // No policy on the queue yet (a queue made now, say): this write drops no rule's name,
        // so it need not wait for the rules (until a policy is in force SQS refuses them all
        // anyway). Written right after the queue, its agreement reads end while the roles
        // still propagate, off `up`'s critical path.
        entries[at].0.deps.retain(|d| d == "queue");
        return;
    }
    let (policy, live) = &entries[at];
    let (Some(want), Some(live)) = (policy.fields.as_ref().and_then(|f| f.get("Policy")), live.as_ref()) else { return };
    let Some(live_doc) = live.fields.get("Policy") else { return };
    if live.owner != Owner::Ours {
        return;
    }
    let queue_arn = policy.spec.arn().to_string();
    let old: Vec<(String, String)> = entries
        .iter()
        .filter(|(n, _)| n.kind == Kind::EventRule && n.fields.is_none())
        .filter_map(|(n, o)| {
            let o = o.as_ref().filter(|o| o.owner == Owner::Ours)?;
            let targets = o.fields.get("Targets").and_then(Value::as_array)?;
            targets.iter().any(|t| t["Arn"].as_str() == Some(queue_arn.as_str())).then_some(())?;
            let arn = o.ids.get("arn")?.clone();
            lets_rule_send(live_doc, &arn).then(|| (n.id.clone(), arn))
        })
        .collect();
    if old.is_empty() {
        return;
    }
    let mut arns: Vec<String> = sending(want).filter_map(source_arns).flatten().collect();
    arns.extend(old.iter().map(|(_, arn)| arn.clone()));
    arns.sort();
    arns.dedup();
    let note = format!(
        "names the {} rule(s) this run deletes too, while they exist: they go only once this policy is in force everywhere (SQS takes up to 60 s, and EventBridge drops what the queue refuses); queue-policy then drops their names",
        old.len()
    );
    let node = Node::new(HANDOVER_ID, policy.name.clone(), policy.spec.clone())
        .with_fields(Some(crate::model::fields_of(vec![("Policy", crate::karpenter_iam::queue_policy(&queue_arn, &arns))])))
        .with_deps(["queue"])
        .with_notes([note]);
    let live = live.clone();
    let old_ids: Vec<String> = old.into_iter().map(|(id, _)| id).collect();
    for (n, _) in entries.iter_mut() {
        if n.kind == Kind::EventRule && n.fields.is_some() {
            n.deps.push(HANDOVER_ID.to_string());
        } else if old_ids.contains(&n.id) {
            n.delete_after.push(HANDOVER_ID.to_string());
        }
    }
    entries[at].0.after_deletes.extend(old_ids);
    entries.insert(at + 1, (node, Some(live)));
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let Some(url) = queue::url(ctx, &node.name).await? else { return Ok(None) };
    let (attrs, tags) = tokio::try_join!(queue::attributes(ctx, &url), queue::tags(ctx, &url))?;
    let (Some(attrs), Some(tags)) = (attrs, tags) else { return Ok(None) };
    let Some(text) = attrs.get("Policy").filter(|p| !p.trim().is_empty()) else { return Ok(None) };
    let doc = doc::parse(text).with_context(|| format!("the policy of SQS queue {} is not valid JSON", node.name))?;
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
    let value = want.as_ref().map(doc::to_wire).unwrap_or_default();
    let mut retryable = PROPAGATING.to_vec();
    retryable.extend_from_slice(queue::not_yet(created_now));
    aws::with_consistency(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "sqs:SetQueueAttributes", &retryable, || {
        ctx.aws.sqs.set_queue_attributes().queue_url(&url).attributes(QueueAttributeName::Policy, value.clone()).send()
    })
    .await
    .map_err(|e| aws_err("sqs:SetQueueAttributes(Policy)", e))?;
    let accepted = Instant::now();
    if step.node.id == HANDOVER_ID {
        return in_force(ctx, step, &url, want, accepted).await;
    }
    let what = if want.is_some() { "the new policy" } else { "the policy removed" };
    queue::wait_shown(ctx, &step.id, &url, what, created_now, move |attrs| shows(&want, attrs));
    Ok(())
}

/// Whether the attributes read show the policy `want` (None: no policy).
fn shows(want: &Option<Value>, attrs: &HashMap<String, String>) -> bool {
    let live = attrs.get("Policy").filter(|p| !p.trim().is_empty());
    match (want, live) {
        (None, live) => live.is_none(),
        (Some(_), None) => false,
        (Some(w), Some(text)) => doc::parse(text).is_ok_and(|doc| doc::equivalent(&doc, w)),
    }
}

/// The hand-over policy's step ends only once the policy is in force everywhere, since the old
/// rules' deletes wait for it: `Agreement::SQS_ATTRIBUTES` reads in a row show it (now, not
/// alongside the run as other writes' waits), and `propagation()` has passed since SQS accepted
/// it (section 9.21). Reads that never agree fail the step, and the old rules stay.
async fn in_force(ctx: &Ctx, step: &Step, url: &str, want: Option<Value>, accepted: Instant) -> Result<()> {
    let (sqs, want) = (&ctx.aws.sqs, &want);
    let agree = aws::Agreement::SQS_ATTRIBUTES;
    let what = "SQS to show the policy naming the old and the new rules";
    let seen = aws::wait_agreed(&ctx.consistency, agree, ctx.reporter.as_ref(), &step.id, what, || async move {
        match queue::attributes_now(sqs, url).await? {
            Some(a) => Ok(shows(want, &a)),
            None => bail!("SQS queue {url} no longer exists (it was deleted while karpctl wrote to it)"),
        }
    })
    .await?;
    if !seen {
        bail!(
            "SQS accepted the queue policy naming the old and the new rules but does not show it in {} reads in a row after {} s; the old rules were kept so that no event is refused; run karpctl up again",
            agree.reads,
            ctx.consistency.deadline.as_secs()
        );
    }
    let hold = propagation(ctx);
    if let Some(left) = hold.checked_sub(accepted.elapsed()).filter(|d| !d.is_zero()) {
        let what =
            format!("the queue policy to be in force everywhere before the old rules go (SQS takes up to {} s)", hold.as_secs());
        ctx.reporter.event(Event::Waiting { id: &step.id, what: &what, elapsed: accepted.elapsed() });
        if !crate::interrupt::sleep(left).await {
            bail!("interrupted while the queue policy propagates; the old rules were kept so that no event is refused");
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Plan;
    use serde_json::json;

    fn facts() -> Facts {
        Facts::example_of("c")
    }

    fn spec(merged: bool) -> Spec {
        let mut spec = crate::plan_file::defaults("c").unwrap();
        spec.interruption.merged = merged;
        spec
    }

    /// What exists after `up` with the layout `merged`: the queue, its policy and the rules, ours.
    fn live(merged: bool) -> BTreeMap<String, Observed> {
        let f = facts();
        let mut out = BTreeMap::new();
        for n in crate::desired::build(&spec(merged), &f) {
            let Some(fields) = n.fields.clone() else { continue };
            if !matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule) {
                continue;
            }
            let mut ids = BTreeMap::new();
            if n.kind == Kind::EventRule {
                ids.insert("arn".to_string(), arns::rule_arn(&f, &n.name));
            }
            out.insert(n.id.clone(), Observed { fields, owner: Owner::Ours, ids });
        }
        out
    }

    /// The plan that switches from the layout that exists to `merged`.
    fn switch(from_merged: bool, merged: bool) -> Plan {
        let now = live(from_merged);
        let entries = crate::desired::build(&spec(merged), &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .map(|n| {
                let o = now.get(&n.id).cloned();
                (n, o)
            })
            .collect();
        crate::planner::plan(entries, Default::default())
    }

    fn arns_named(doc: &Value) -> BTreeSet<String> {
        sending(doc).filter_map(source_arns).flatten().collect()
    }

    /// (before, after) ids of the executor's edges.
    fn order(p: &Plan) -> BTreeSet<(String, String)> {
        let e = crate::executor::edges(&p.steps).unwrap();
        e.into_iter().map(|(a, b)| (p.steps[a].id.clone(), p.steps[b].id.clone())).collect()
    }

    #[test]
    fn a_layout_switch_names_old_and_new_rules_until_the_old_ones_are_gone() {
        for (from, to) in [(false, true), (true, false)] {
            let p = switch(from, to);
            let step = |id: &str| p.steps.iter().find(|s| s.id == id).unwrap_or_else(|| panic!("{id} in {:?}", p.steps));
            let hand = step(HANDOVER_ID);
            assert_eq!(hand.action, Action::Update);
            let named = arns_named(&hand.node.fields.as_ref().unwrap()["Policy"]);
            let creates: Vec<&Step> =
                p.steps.iter().filter(|s| s.kind == Kind::EventRule && s.action == Action::Create).collect();
            let deletes: Vec<&Step> =
                p.steps.iter().filter(|s| s.kind == Kind::EventRule && s.action == Action::Delete).collect();
            assert!(!creates.is_empty() && !deletes.is_empty(), "{from} -> {to}");
            for s in creates.iter().chain(&deletes) {
                let arn = arns::rule_arn(&facts(), &s.name);
                assert!(named.contains(&arn), "{from} -> {to}: the hand-over names {arn}: {named:?}");
            }
            // The final policy names the new rules only.
            let fin = arns_named(&step(ID).node.fields.as_ref().unwrap()["Policy"]);
            assert_eq!(fin.len(), creates.len(), "{fin:?}");
            // hand-over -> new rules -> old rules' deletes -> final policy.
            let o = order(&p);
            for c in &creates {
                assert!(o.contains(&(HANDOVER_ID.into(), c.id.clone())), "{} after the hand-over: {o:?}", c.id);
                assert!(o.contains(&(c.id.clone(), ID.into())), "{o:?}");
            }
            for d in &deletes {
                assert!(o.contains(&(HANDOVER_ID.into(), d.id.clone())), "{} after the hand-over: {o:?}", d.id);
                assert!(o.contains(&(d.id.clone(), ID.into())), "the final policy after {}: {o:?}", d.id);
                for c in &creates {
                    assert!(o.contains(&(c.id.clone(), d.id.clone())), "{o:?}");
                }
            }
        }
    }

    #[test]
    fn a_first_policy_waits_for_the_queue_only() {
        // From nothing there is no name to drop: the policy goes right after the queue, alongside
        // the rules, so that its agreement reads are not left last in `up`.
        for merged in [false, true] {
            let entries: Vec<(Node, Option<Observed>)> = crate::desired::build(&spec(merged), &facts())
                .into_iter()
                .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
                .map(|n| (n, None))
                .collect();
            let p = crate::planner::plan(entries, Default::default());
            let policy = p.steps.iter().find(|s| s.id == ID).expect("the policy is created");
            assert_eq!(policy.deps, ["queue"], "merged {merged}");
            let o = order(&p);
            assert!(o.contains(&("queue".into(), ID.into())), "{o:?}");
            assert!(!o.iter().any(|(a, b)| b == ID && a.starts_with("rule-")), "no rule before the policy: {o:?}");
        }
        // A policy that exists still waits for the rules it names (a layout switch, above).
        let p = switch(false, true);
        let policy = p.steps.iter().find(|s| s.id == ID).unwrap();
        assert!(policy.deps.iter().any(|d| d.starts_with("rule-")), "{:?}", policy.deps);
    }

    #[test]
    fn no_switch_no_hand_over() {
        // In sync, from nothing, and down: no hand-over node.
        let p = switch(true, true);
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        let entries: Vec<(Node, Option<Observed>)> = crate::desired::build(&spec(true), &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .map(|n| (n, None))
            .collect();
        let p = crate::planner::plan(entries, Default::default());
        assert!(p.steps.iter().all(|s| s.id != HANDOVER_ID));
        let now = live(false);
        let entries: Vec<(Node, Option<Observed>)> = crate::desired::build(&spec(true), &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .map(|mut n| {
                n.fields = None;
                let o = now.get(&n.id).cloned();
                (n, o)
            })
            .collect();
        let p = crate::planner::plan(entries, Default::default());
        assert!(p.steps.iter().all(|s| s.id != HANDOVER_ID), "down deletes everything: {:?}", p.steps);
    }

    #[test]
    fn only_old_rules_the_live_policy_lets_send_are_handed_over() {
        let mut entries: Vec<(Node, Option<Observed>)> = vec![];
        let now = live(false);
        for n in crate::desired::build(&spec(true), &facts()) {
            if matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule) {
                let mut o = now.get(&n.id).cloned();
                if n.id == ID {
                    // The live policy already names only the merged rule: the separate rules it does not
                    // name send nothing now, so there is nothing to hand over.
                    o = Some(Observed { fields: n.fields.clone().unwrap(), owner: Owner::Ours, ids: BTreeMap::new() });
                }
                entries.push((n, o));
            }
        }
        let before = entries.len();
        handover(&mut entries);
        assert_eq!(entries.len(), before, "no hand-over node");
    }

    #[test]
    fn what_a_policy_lets_send() {
        let rule = "arn:aws:events:us-east-1:1:rule/Karpenter-c-SpotInterrupt";
        let q = "arn:aws:sqs:us-east-1:1:q";
        assert!(lets_rule_send(&crate::karpenter_iam::queue_policy(q, &[rule.to_string()]), rule));
        assert!(!lets_rule_send(&crate::karpenter_iam::queue_policy(q, &["arn:aws:events:us-east-1:1:rule/other".into()]), rule));
        // Upstream's policy has no condition: every rule may send.
        let upstream = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}, "Action": "sqs:SendMessage", "Resource": q}]});
        assert!(lets_rule_send(&upstream, rule));
        let like = json!({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": q,
            "Condition": {"ArnLike": {"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/Karpenter-c-*"}}}]});
        assert!(lets_rule_send(&like, rule));
        let other_principal = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"}, "Action": "sqs:SendMessage"}]});
        assert!(!lets_rule_send(&other_principal, rule));
    }
}
