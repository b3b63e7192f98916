//! What the engine asks of one resource kind (`KindDef`); each kind's module defines its `DEF`.

use crate::ctx::{Ctx, Current};
use crate::facts::prepared::Facts;
use crate::model::{Kind, Node, Observed, Step};
use crate::spec::Spec;
use anyhow::Result;
use std::future::Future;
use std::pin::Pin;

/// A kind's future, borrowing what it was given.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;
pub type ReadFn = for<'a> fn(&'a Ctx, &'a Node) -> Fut<'a, Option<Observed>>;
pub type CurrentFn = for<'a> fn(&'a Ctx, &'a Step) -> Fut<'a, Option<Current>>;
pub type ApplyFn = for<'a> fn(&'a Ctx, &'a Step, Option<&'a Current>) -> Fut<'a, ()>;
pub type DiscoverFn = for<'a> fn(&'a Ctx, &'a [Node]) -> Fut<'a, Vec<Node>>;
/// Pure: adjust the desired nodes once everything is observed (see `KindDef::refine`).
pub type RefineFn = fn(&mut Vec<(Node, Option<Observed>)>);

/// Everything the engine asks of one kind. Each kind's module defines its `DEF`, and
/// `resources::KINDS` lists them: adding a kind is its own module, its line in `KINDS`, and its
/// line in `model::kinds!` (plus an arm in `NodeSpec::arn`, which the compiler asks for). The
/// engine names no kind; a few features name the kinds they are about (`karpctl output`'s
/// values, the IAM path in `resources::iam`).
pub struct KindDef {
    pub kind: Kind,
    /// Read order among kinds, as a rank (0 first: the slowest reads start first, so that they
    /// do not wait for a free slot behind quick ones).
    pub read_rank: u8,
    /// Fields that cannot change in place: a change to one replaces the object.
    pub immutable: &'static [&'static str],
    /// Whether its nodes may be read ahead, while preparation still runs. False when they
    /// depend on facts only preparation finds (the subnets and group discovery chooses).
    pub read_ahead: bool,
    /// Pure: the kind's nodes for a plan (nodes of switched-off features have no fields).
    pub nodes: fn(&Spec, &Facts) -> Vec<Node>,
    /// Read a node's object (None: it does not exist), memoised reads allowed.
    pub read: ReadFn,
    /// Who owns the step's object right now, read without memos (None: it does not exist).
    pub current: CurrentFn,
    /// Make the step's change; `current` is what `current` read (None for a create).
    pub apply: ApplyFn,
    /// Drop what this run memoised about the node's object (its reads are stale once written).
    pub forget: fn(&Ctx, &Node),
    /// Objects of this cluster that the plan does not name (renamed, or switched off), as extra
    /// nodes with no fields, so that the planner deletes them. None: the kind needs no search.
    /// (The IAM role's search, `iam_orphans`, also finds the IAM policies and instance profiles
    /// under the plan's path: one listing per kind, and the policies must go before the roles.)
    pub discover: Option<DiscoverFn>,
    /// Pure, once every node is observed and before the plan is made: what the kind's desired
    /// nodes must be given what exists (nodes added, fields or order changed). None: the kind's
    /// nodes depend on the plan and the facts only. (The queue policy names the rules a layout
    /// switch deletes while they exist, `queue_policy::handover`.)
    pub refine: Option<RefineFn>,
}

/// A kind module's `DEF`, from its `READ_RANK`, `IMMUTABLE`, `nodes`, `read`, `current` and
/// `apply`, and what differs between kinds: whether it is read ahead, its `forget`, its orphan
/// `discover` and (optional, None by default) its `refine`. `apply: standard` writes the kind's
/// `apply` from its `create`, `update` (adopting or not) and `delete`: create, update, a replace
/// as delete then create. Kinds whose writes need more (the EKS gate, a replace of their own, a
/// dispatch on what `current` read) keep their hand-written `apply`.
macro_rules! def {
    ($kind:ident, read_ahead: $read_ahead:expr, forget: $forget:expr, discover: $discover:expr, apply: standard) => {
        /// The kind's write: create; update (or adopt); replace as delete then create; delete.
        async fn apply(
            ctx: &crate::ctx::Ctx,
            step: &crate::model::Step,
            _current: Option<&crate::ctx::Current>,
        ) -> anyhow::Result<()> {
            use crate::model::Action;
            match step.action {
                Action::Create => create(ctx, step).await,
                Action::Update | Action::Adopt => update(ctx, step, step.action == Action::Adopt).await,
                Action::Replace => {
                    delete(ctx, step).await?;
                    create(ctx, step).await
                }
                Action::Delete => delete(ctx, step).await,
            }
        }
        super::kind::def!($kind, read_ahead: $read_ahead, forget: $forget, discover: $discover, refine: None);
    };
    ($kind:ident, read_ahead: $read_ahead:expr, forget: $forget:expr, discover: $discover:expr) => {
        super::kind::def!($kind, read_ahead: $read_ahead, forget: $forget, discover: $discover, refine: None);
    };
    ($kind:ident, read_ahead: $read_ahead:expr, forget: $forget:expr, discover: $discover:expr, refine: $refine:expr) => {
        /// This kind's entry in `resources::KINDS`.
        pub const DEF: super::kind::KindDef = super::kind::KindDef {
            kind: crate::model::Kind::$kind,
            read_rank: READ_RANK,
            immutable: IMMUTABLE,
            read_ahead: $read_ahead,
            nodes,
            read: |ctx, node| Box::pin(read(ctx, node)),
            current: |ctx, step| Box::pin(current(ctx, step)),
            apply: |ctx, step, current| Box::pin(apply(ctx, step, current)),
            forget: $forget,
            discover: $discover,
            refine: $refine,
        };
    };
}
pub(crate) use def;
