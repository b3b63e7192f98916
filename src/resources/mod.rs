//! One module per resource kind; each owns read / create / update / delete for its kind.
//! The set of kinds is closed, so dispatch is a `match`.

pub mod access_entry;
pub mod ctx;
pub mod discovery_tags;
pub mod eks;
pub mod event_rule;
pub mod iam;
pub mod iam_orphans;
pub mod iam_policy;
pub mod iam_role;
pub mod instance_profile;
pub mod kms_key;
pub mod pod_identity;
pub mod queue;
pub mod queue_policy;
pub mod retired_policy;
pub mod role_policy_attachment;

use crate::model::{Action, Kind, Node, Observed, Step};
use anyhow::Result;
pub use ctx::{Background, Ctx, Current};

/// A kind's read time, as a rank (slowest first; each kind's `READ_RANK`). Reads start in this
/// order, so that the longest ones do not wait for a free slot behind quick ones.
pub fn read_rank(kind: Kind) -> u8 {
    match kind {
        Kind::PodIdentity => pod_identity::READ_RANK,
        Kind::AccessEntry => access_entry::READ_RANK,
        Kind::IamPolicy => iam_policy::READ_RANK,
        Kind::IamRole => iam_role::READ_RANK,
        Kind::RolePolicyAttachment => role_policy_attachment::READ_RANK,
        Kind::InstanceProfile => instance_profile::READ_RANK,
        Kind::Queue => queue::READ_RANK,
        Kind::QueuePolicy => queue_policy::READ_RANK,
        Kind::EventRule => event_rule::READ_RANK,
        Kind::DiscoveryTags => discovery_tags::READ_RANK,
        Kind::KmsKey => kms_key::READ_RANK,
        Kind::RetiredPolicy => retired_policy::READ_RANK,
    }
}

/// The fields of a kind that cannot change in place (each kind's `IMMUTABLE`).
pub fn immutable(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::PodIdentity => pod_identity::IMMUTABLE,
        Kind::AccessEntry => access_entry::IMMUTABLE,
        Kind::IamPolicy => iam_policy::IMMUTABLE,
        Kind::IamRole => iam_role::IMMUTABLE,
        Kind::RolePolicyAttachment => role_policy_attachment::IMMUTABLE,
        Kind::InstanceProfile => instance_profile::IMMUTABLE,
        Kind::Queue => queue::IMMUTABLE,
        Kind::QueuePolicy => queue_policy::IMMUTABLE,
        Kind::EventRule => event_rule::IMMUTABLE,
        Kind::DiscoveryTags => discovery_tags::IMMUTABLE,
        Kind::KmsKey => kms_key::IMMUTABLE,
        Kind::RetiredPolicy => retired_policy::IMMUTABLE,
    }
}

/// Read one node, its AWS calls attributed to `read:<node id>` (see `aws::in_unit`).
pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    crate::aws::in_unit(format!("read:{}", node.id), read_kind(ctx, node)).await
}

async fn read_kind(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    match node.kind {
        Kind::Queue => queue::read(ctx, node).await,
        Kind::QueuePolicy => queue_policy::read(ctx, node).await,
        Kind::EventRule => event_rule::read(ctx, node).await,
        Kind::IamRole => iam_role::read(ctx, node).await,
        Kind::IamPolicy => iam_policy::read(ctx, node).await,
        Kind::RolePolicyAttachment => role_policy_attachment::read(ctx, node).await,
        Kind::InstanceProfile => instance_profile::read(ctx, node).await,
        Kind::AccessEntry => access_entry::read(ctx, node).await,
        Kind::PodIdentity => pod_identity::read(ctx, node).await,
        Kind::DiscoveryTags => discovery_tags::read(ctx, node).await,
        Kind::KmsKey => kms_key::read(ctx, node).await,
        Kind::RetiredPolicy => retired_policy::read(ctx, node).await,
    }
}

/// Who owns the node's object right now, read without memos (None: it does not exist).
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    match node.kind {
        Kind::Queue => queue::current(ctx, step).await,
        Kind::QueuePolicy => queue_policy::current(ctx, step).await,
        Kind::EventRule => event_rule::current(ctx, step).await,
        Kind::IamRole => iam_role::current(ctx, step).await,
        Kind::IamPolicy => iam_policy::current(ctx, step).await,
        Kind::RolePolicyAttachment => role_policy_attachment::current(ctx, step).await,
        Kind::InstanceProfile => instance_profile::current(ctx, step).await,
        Kind::AccessEntry => access_entry::current(ctx, step).await,
        Kind::PodIdentity => pod_identity::current(ctx, step).await,
        Kind::DiscoveryTags => discovery_tags::current(ctx, step).await,
        Kind::KmsKey => kms_key::current(ctx, step).await,
        Kind::RetiredPolicy => retired_policy::current(ctx, step).await,
    }
}

/// Drop what this run memoised about the node's object (its reads are stale once it is written).
pub fn forget(ctx: &Ctx, node: &Node) {
    match node.kind {
        Kind::Queue | Kind::QueuePolicy => queue::forget(ctx, &node.name),
        Kind::IamRole => iam_role::forget(ctx, &node.name),
        Kind::RolePolicyAttachment => role_policy_attachment::forget(ctx, node),
        Kind::EventRule => event_rule::forget(ctx),
        Kind::IamPolicy | Kind::InstanceProfile | Kind::AccessEntry | Kind::PodIdentity => {}
        Kind::KmsKey => kms_key::forget(ctx, &node.name),
        Kind::RetiredPolicy => retired_policy::forget(ctx, node),
        Kind::DiscoveryTags => {}
    }
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
    if !ctx::may_write(step, current.as_ref())? {
        return Ok(());
    }
    let cur = current.as_ref();
    let r = match step.kind {
        Kind::Queue => queue::apply(ctx, step, cur).await,
        Kind::QueuePolicy => queue_policy::apply(ctx, step, cur).await,
        Kind::EventRule => event_rule::apply(ctx, step, cur).await,
        Kind::IamRole => iam_role::apply(ctx, step, cur).await,
        Kind::IamPolicy => iam_policy::apply(ctx, step, cur).await,
        Kind::RolePolicyAttachment => role_policy_attachment::apply(ctx, step, cur).await,
        Kind::InstanceProfile => instance_profile::apply(ctx, step, cur).await,
        Kind::AccessEntry => access_entry::apply(ctx, step, cur).await,
        Kind::PodIdentity => pod_identity::apply(ctx, step, cur).await,
        Kind::DiscoveryTags => discovery_tags::apply(ctx, step, cur).await,
        Kind::KmsKey => kms_key::apply(ctx, step, cur).await,
        Kind::RetiredPolicy => retired_policy::apply(ctx, step, cur).await,
    };
    forget(ctx, &step.node);
    if r.is_ok() {
        ctx.record_write(step);
    }
    r
}

/// Find objects this cluster owns that the desired set does not name (renamed, or switched off),
/// as extra nodes with no desired fields, so that the planner deletes them.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let (rules, iam, attachments, entries) = tokio::try_join!(
        event_rule::discover(ctx, nodes),
        iam_orphans::discover(ctx, nodes),
        role_policy_attachment::discover(ctx, nodes),
        access_entry::discover(ctx, nodes),
    )?;
    Ok(rules.into_iter().chain(iam).chain(attachments).chain(entries).collect())
}
