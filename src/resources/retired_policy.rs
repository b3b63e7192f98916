//! Policies another tool gave the controller role that karpctl's own replace
//! (`identity.retire_policies`): planned as deletes that wait for every attachment of karpctl's
//! policies and for IAM to settle, so the controller's permissions never shrink mid-way.

use super::iam_role::{detach, get_role, get_role_fresh};
use crate::aws::{Agreement, Classify, ConsistencyPolicy, aws_err, wait_agreed};
use crate::ctx::{Ctx, Current};
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::model::{Action, AttachmentSpec, Fields, Level, Node, NodeSpec, Observed, Owner, Step};
use crate::spec::Spec;
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::BTreeMap;

/// No field forces a replacement.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds: IAM, sharing the role's memoised lists.
pub const READ_RANK: u8 = 3;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    RetiredPolicy,
    read_ahead: true,
    forget: forget,
    discover: None
);

fn spec_of(node: &Node) -> (&str, &str) {
    match &node.spec {
        NodeSpec::RetiredPolicy(a) => (a.role.as_str(), a.policy_arn.as_str()),
        _ => ("", ""),
    }
}

/// A managed policy is named by its ARN; anything else is an inline policy's name.
fn is_managed(policy: &str) -> bool {
    policy.starts_with("arn:")
}

/// An AWS managed policy (`arn:<partition>:iam::aws:policy/...`): never deleted.
fn is_aws_managed(policy: &str) -> bool {
    policy.contains(":iam::aws:policy/")
}

/// The last segment of a policy ARN, or the inline policy's name.
fn short(policy: &str) -> &str {
    policy.rsplit('/').next().unwrap_or(policy)
}

/// Pure: one node per retired policy, after the controller role and every attachment of
/// karpctl's own controller policies. A policy the plan itself manages is never retired.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let own = super::iam_policy::controller_policies(spec, facts);
    let role = &spec.identity.controller_role.name;
    let mut deps = vec!["controller-role".to_string()];
    deps.extend(own.iter().filter(|p| p.doc.is_some()).map(|p| format!("controller-policy-attachment-{}", p.part.name())));
    spec.identity
        .retire_policies
        .iter()
        .filter(|r| !own.iter().any(|p| &p.arn == *r))
        .map(|r| {
            let a = AttachmentSpec { role: role.clone(), policy_arn: r.clone(), owner_from: "controller-role".into() };
            let what = if !is_managed(r) {
                format!("inline policy {r}: karpctl's split policies replace it; deleted once they are all attached")
            } else if is_aws_managed(r) {
                format!("AWS managed policy {r}: karpctl's split policies replace it; detached once they are all attached (never deleted)")
            } else {
                format!(
                    "managed policy {r}: karpctl's split policies replace it; detached once they are all attached, then deleted if nothing else uses it"
                )
            };
            Node::new(format!("retired-policy-{}", short(r)), format!("{role}/{}", short(r)), NodeSpec::RetiredPolicy(a))
                .with_fields(Some(crate::model::fields_of(vec![("attached", json!(false))])))
                .with_deps(deps.clone())
                .delete_after(deps.clone())
                .with_notes([what])
                .contained_in("controller-role")
        })
        .collect()
}

/// The role's inline policy names (None: no such role), memoised for the observation.
async fn inline_names(ctx: &Ctx, role: &str) -> Result<Option<Vec<String>>> {
    ctx.readers.iam.inline_names(role).await
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let (role, policy) = spec_of(node);
    let held = async {
        if is_managed(policy) {
            Ok(super::role_policy_attachment::attached(ctx, role).await?.map(|l| l.iter().any(|a| a == policy)))
        } else {
            Ok(inline_names(ctx, role).await?.map(|l| l.iter().any(|n| n == policy)))
        }
    };
    let (held, live_role): (Option<bool>, _) = tokio::try_join!(held, get_role(ctx, role))?;
    let attached = held.unwrap_or(false);
    // Nothing to retire and nothing wanted (`down`): nothing to show.
    if !attached && node.fields.is_none() {
        return Ok(None);
    }
    let owner = live_role.as_ref().map(|r| Owner::from_tags(&r.tags, &ctx.cluster)).unwrap_or(Owner::Ours);
    let mut fields = Fields::new();
    fields.insert("attached".into(), json!(attached));
    let mut ids = BTreeMap::new();
    ids.insert("role".to_string(), role.to_string());
    Ok(Some(Observed { fields, owner, ids }))
}

/// GetRole, fresh: the controller role's owner is the retirement's.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let (role, _) = spec_of(&step.node);
    let live = get_role_fresh(ctx, role).await?;
    Ok(live.map(|r| Current::new(Owner::from_tags(&r.tags, &ctx.cluster), r.tags).id("role", r.name)))
}

pub fn forget(ctx: &Ctx, node: &Node) {
    let (role, _) = spec_of(node);
    ctx.readers.iam.forget_inline(role);
    super::role_policy_attachment::forget_role(ctx, role);
}

/// The role's ownership was checked just now by the dispatcher.
pub async fn apply(ctx: &Ctx, step: &Step, _current: Option<&Current>) -> Result<()> {
    let (role, policy) = spec_of(&step.node);
    if step.action == Action::Create {
        // The role is not there: nothing holds the policy.
        return Ok(());
    }
    // `up` retires it (the plan wants it off the role); `down` only detaches what goes with the
    // role anyway.
    let retiring = step.node.fields.is_some();
    if retiring {
        settle_after_attach(ctx, step, role, policy).await?;
    }
    if !is_managed(policy) {
        return match ctx.aws.iam.delete_role_policy().role_name(role).policy_name(policy).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                Err(aws_err("iam:DeleteRolePolicy", e)).with_context(|| format!("deleting inline policy {policy} of {role}"))
            }
        };
    }
    detach(ctx, &step.id, role, policy).await?;
    if !retiring || is_aws_managed(policy) {
        return Ok(());
    }
    let users = super::iam_policy::attached_anywhere(ctx, policy).await?;
    let text = if users.is_empty() {
        super::iam_policy::delete_policy_arn(ctx, step, policy).await?;
        format!("{}: deleted {policy}, which nothing else used", step.id)
    } else {
        format!(
            "{}: detached {policy} from {role}; left in place because {} still use(s) it: delete it in the tool that made it",
            step.id,
            users.join(", ")
        )
    };
    ctx.reporter.event(Event::Note { level: Level::Info, text: &text });
    Ok(())
}

/// Reads of the role's attached policies that must agree in a row before the first retirement
/// after an attach (spread over the consistency schedule's fast phase, `ConsistencyPolicy::fast_for`:
/// the time IAM changes typically take to reach the services that enforce them).
pub const SETTLE_READS: u32 = 5;

/// The settle agreement of `policy`'s schedule: `SETTLE_READS` reads spread over its fast phase.
fn settle_agreement(policy: &ConsistencyPolicy) -> Agreement {
    Agreement { reads: SETTLE_READS, apart: policy.fast_for / (SETTLE_READS - 1).max(1) }
}

/// Whether this run attached one of the policies this retirement waits for (`delete_after`: the
/// attachments of karpctl's own controller policies; the role itself is no attach).
fn attached_this_run(ctx: &Ctx, step: &Step) -> bool {
    let owner_from = match &step.node.spec {
        NodeSpec::RetiredPolicy(a) => a.owner_from.as_str(),
        _ => "",
    };
    let written = ctx.written.lock().unwrap();
    step.node
        .delete_after
        .iter()
        .filter(|id| id.as_str() != owner_from)
        .any(|id| written.get(id).is_some_and(|w| w.action != Action::Delete))
}

/// Between the last attach of this run and the first detach (IAM applies changes in no fixed
/// order): wait until the role's attached policies read alike `SETTLE_READS` times over the
/// schedule's fast phase, bounded by the consistency deadline (then the step fails and nothing is
/// detached). Once per role and run: every retirement on the role shares the wait.
async fn settle_after_attach(ctx: &Ctx, step: &Step, role: &str, policy: &str) -> Result<()> {
    if !attached_this_run(ctx, step) {
        return Ok(());
    }
    ctx.once.settled_after_attach.get(role, || async {
        let agreement = settle_agreement(&ctx.consistency);
        let what = format!(
            "IAM to settle before taking {} off {role}: karpctl's policies were attached in this run, and IAM applies changes in no fixed order ({} reads of the role's policies that agree, {} s apart)",
            short(policy),
            agreement.reads,
            agreement.apart.as_secs_f64()
        );
        ctx.reporter.event(Event::Waiting { id: &step.id, what: &what, elapsed: std::time::Duration::ZERO });
        let last: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(None);
        let last = &last;
        let same = move || async move {
            let mut now = super::iam_role::attached_policies(ctx, role).await?.unwrap_or_default();
            now.sort();
            let mut seen = last.lock().unwrap();
            let agrees = seen.as_ref().is_none_or(|s| *s == now);
            *seen = Some(now);
            Ok(agrees)
        };
        let shown = format!("IAM to show the same policies on {role} {} times in a row", agreement.reads);
        if !wait_agreed(&ctx.consistency, agreement, ctx.reporter.as_ref(), &step.id, &shown, same).await? {
            anyhow::bail!(
                "the policies attached to IAM role {role} did not read the same {} times in a row within {} s; {policy} was left on the role, so the controller loses nothing. Run `karpctl up` again",
                agreement.reads,
                ctx.consistency.deadline.as_secs()
            );
        }
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_policies_wait_for_every_own_attachment_and_never_name_an_own_policy() {
        let mut spec = crate::plan_file::defaults("c").unwrap();
        let facts = Facts::example_of("c");
        let own = super::super::iam_policy::controller_policies(&spec, &facts);
        spec.identity.retire_policies =
            vec!["arn:aws:iam::123456789012:policy/KarpenterController-2024".into(), "ListProfiles".into(), own[0].arn.clone()];
        let n = nodes(&spec, &facts);
        assert_eq!(n.len(), 2, "karpctl's own policy is never retired: {n:?}");
        assert_eq!(n[0].id, "retired-policy-KarpenterController-2024");
        assert_eq!(n[1].id, "retired-policy-ListProfiles");
        for node in &n {
            assert!(node.deps.contains(&"controller-role".to_string()));
            // A retirement is a delete: it waits for the role and the attachments through
            // `delete_after` (a delete's deps give it no order after what is made).
            assert_eq!(node.delete_after, node.deps);
            for p in own.iter().filter(|p| p.doc.is_some()) {
                assert!(node.deps.contains(&format!("controller-policy-attachment-{}", p.part.name())), "{node:?}");
            }
            assert_eq!(node.fields.as_ref().unwrap()["attached"], json!(false));
        }
        assert!(n[0].notes[0].contains("then deleted if nothing else uses it"), "{:?}", n[0].notes);
        assert!(n[1].notes[0].starts_with("inline policy ListProfiles"), "{:?}", n[1].notes);
    }

    #[test]
    fn the_settle_wait_spreads_its_reads_over_the_fast_phase() {
        let policy = ConsistencyPolicy::default();
        let a = settle_agreement(&policy);
        assert_eq!(a.reads, SETTLE_READS);
        assert_eq!(a.apart * (SETTLE_READS - 1), policy.fast_for, "the reads that agree span the fast phase");
    }
}
