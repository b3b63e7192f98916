//! One module per resource kind; each owns read / create / update / delete for its kind and
//! hands the engine a `KindDef` (its `DEF`). This module only dispatches through `KINDS`.

pub mod access_entry;
pub mod discovery_tags;
pub mod eks;
pub mod event_rule;
pub mod iam;
pub mod iam_orphans;
pub mod iam_policy;
pub mod iam_role;
pub mod instance_profile;
pub mod kind;
pub mod kms_key;
pub mod pod_identity;
pub mod queue;
pub mod queue_policy;
pub mod retired_policy;
pub mod role_policy_attachment;

use crate::ctx::{Ctx, Current};
use kind::KindDef;

use crate::model::{Action, Kind, Node, Observed, Step};
use anyhow::Result;

/// Every kind, in the order their nodes are built (and listed in a plan).
pub const KINDS: &[&KindDef] = &[
    &kms_key::DEF,
    &queue::DEF,
    &queue_policy::DEF,
    &event_rule::DEF,
    &iam_role::DEF,
    &role_policy_attachment::DEF,
    &instance_profile::DEF,
    &access_entry::DEF,
    &iam_policy::DEF,
    &pod_identity::DEF,
    &discovery_tags::DEF,
    &retired_policy::DEF,
];

/// The definition of a kind.
pub fn def(kind: Kind) -> &'static KindDef {
    KINDS.iter().find(|d| d.kind == kind).unwrap_or_else(|| panic!("{kind:?} is missing from resources::KINDS"))
}

/// A kind's read time, as a rank (see `KindDef::read_rank`).
pub fn read_rank(kind: Kind) -> u8 {
    def(kind).read_rank
}

/// The fields of a kind that cannot change in place (see `KindDef::immutable`).
pub fn immutable(kind: Kind) -> &'static [&'static str] {
    def(kind).immutable
}

/// Read one node, its AWS calls attributed to `read:<node id>` (see `aws::in_unit`).
pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    crate::aws::in_unit(format!("read:{}", node.id), (def(node.kind).read)(ctx, node)).await
}

/// Who owns the node's object right now, read without memos (None: it does not exist).
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    (def(step.node.kind).current)(ctx, step).await
}

/// Drop what this run memoised about the node's object (its reads are stale once it is written).
pub fn forget(ctx: &Ctx, node: &Node) {
    (def(node.kind).forget)(ctx, node)
}

/// Apply one step. Every kind gets the same treatment: a step that goes with its parent makes no
/// call; anything but a create re-reads the object's ownership first (`ctx::may_write`) and hands
/// what it read to the kind; whatever happens, the node's memoised reads are dropped after.
/// Its AWS calls are attributed to `step:<step id>` (see `aws::in_unit`).
pub async fn apply(ctx: &Ctx, step: &Step) -> Result<()> {
    crate::aws::in_unit(format!("step:{}", step.id), apply_step(ctx, step)).await
}

async fn apply_step(ctx: &Ctx, step: &Step) -> Result<()> {
    if step.removed_with.is_some() {
        return Ok(());
    }
    let current = match step.action {
        Action::Create => None,
        _ => current(ctx, step).await?,
    };
    if !crate::ctx::may_write(step, current.as_ref())? {
        return Ok(());
    }
    let r = (def(step.kind).apply)(ctx, step, current.as_ref()).await;
    forget(ctx, &step.node);
    if r.is_ok() {
        ctx.record_write(step);
    }
    r
}

/// Find objects this cluster owns that the desired set does not name (renamed, or switched off),
/// as extra nodes with no desired fields, so that the planner deletes them.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let found = futures::future::try_join_all(KINDS.iter().filter_map(|d| d.discover).map(|f| f(ctx, nodes))).await?;
    Ok(found.into_iter().flatten().collect())
}

/// Pure: each kind's `refine` over the observed nodes, before the plan is made.
pub fn refine(entries: &mut Vec<(Node, Option<Observed>)>) {
    for f in KINDS.iter().filter_map(|d| d.refine) {
        f(entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once() {
        for k in Kind::ALL {
            assert_eq!(KINDS.iter().filter(|d| d.kind == *k).count(), 1, "{k:?} in resources::KINDS");
        }
        assert_eq!(KINDS.len(), Kind::ALL.len());
    }
}
