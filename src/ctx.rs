//! What every kind's read and apply share (`Ctx`): the clients, the readers, the settings, what
//! the run decided once (`Once`), cancel-on-drop background tasks, and the small helpers on desired
//! and observed fields, including the ownership re-check made right before a write.

use crate::aws::read::Readers;
use crate::aws::read::memo::Memo;
use crate::aws::{Clients, ConsistencyPolicy};
use crate::events::Reporter;
use crate::model::{Action, Node, Observed, Owner, Step, Tags};
use anyhow::Result;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A spawned task that is cancelled when dropped (for work started early that an error may make
/// useless).
pub struct Background<T>(tokio::task::JoinHandle<T>);

impl<T: Send + 'static> Background<T> {
    pub fn spawn(f: impl Future<Output = T> + Send + 'static) -> Self {
        Background(tokio::spawn(f))
    }
    /// Its result, or None if it panicked.
    pub async fn join(mut self) -> Option<T> {
        (&mut self.0).await.ok()
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Everything a read or an apply needs.
pub struct Ctx {
    pub aws: Clients,
    pub cluster: String,
    pub region: String,
    pub account_id: String,
    pub partition: String,
    pub reporter: Arc<dyn Reporter>,
    pub consistency: ConsistencyPolicy,
    /// Every read, one reader per service, with the memos this observation shares.
    pub readers: Arc<Readers>,
    /// What this run decided or did once and shares (not AWS reads).
    pub once: Once,
    /// What the environment says (read once, in `main.rs`).
    pub settings: Arc<crate::settings::Settings>,
    /// What this run has written so far (see `Ctx::wrote`).
    pub written: Mutex<BTreeMap<String, Written>>,
    /// Agreement waits still running after their step finished (see `Ctx::settle_later`).
    pub settling: Mutex<Vec<Settling>>,
}

/// What a run decides or does once and shares between steps, each typed, keyed by cluster or role.
#[derive(Default)]
pub struct Once {
    /// The EKS cluster's status once it is no longer busy (`eks::settled_status`).
    pub settled_status: Memo<String>,
    /// Tags of a Pod Identity agent install put off until the cluster is ACTIVE.
    pub agent_pending: Memo<Option<Tags>>,
    /// The put-off agent install, made once.
    pub agent_installed: Memo<bool>,
    /// The ARN of the KMS key karpctl made, by alias (`kms_key::arn_now`).
    pub made_key_arn: Memo<String>,
    /// The wait for IAM to settle after this run's attachments, by role.
    pub settled_after_attach: Memo<()>,
    /// The subnets and security group chosen (`discovery::select`).
    pub discovery: Memo<crate::facts::prepared::DiscoveryFacts>,
}

/// One `settle_later` wait while it runs: its step id, when it began, and the task (its result
/// and when it ended).
pub type Settling = (String, Instant, Background<(Result<()>, Instant)>);

/// One `settle_later` wait, once joined: its step, when it began and ended, and how it ended.
pub struct Settled {
    pub step_id: String,
    pub began: Instant,
    pub ended: Instant,
    pub result: Result<()>,
}

/// One step this run applied: its action and the fields it set.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub action: Action,
    pub fields: Vec<String>,
}

impl Ctx {
    /// Record a step this run applied (the dispatcher does, after each successful step).
    pub fn record_write(&self, step: &Step) {
        let fields = match step.action {
            Action::Create | Action::Replace => {
                step.node.fields.as_ref().map(|f| f.keys().cloned().collect()).unwrap_or_default()
            }
            _ => step.changes.iter().map(|c| c.field.clone()).collect(),
        };
        self.written.lock().unwrap().insert(step.id.clone(), Written { action: step.action, fields });
    }

    /// Whether this run created (or replaced) node `id`, or, with `field`, set that field of it.
    /// AWS answers some calls about an object written seconds ago as if the write had not
    /// happened yet (docs/aws-behaviour.md section 9); only such objects get those retries.
    pub fn wrote(&self, id: &str, field: Option<&str>) -> bool {
        let w = self.written.lock().unwrap();
        match (w.get(id), field) {
            (None, _) => false,
            (Some(w), None) => matches!(w.action, Action::Create | Action::Replace),
            (Some(w), Some(f)) => w.action != Action::Delete && w.fields.iter().any(|x| x == f),
        }
    }

    /// Run `wait` (a wait for AWS's replicas to agree on a write step `step_id` made) alongside
    /// the rest of the run: the step counts as done for its dependents, which need only the write
    /// AWS accepted, and the command ends only when every such wait has (`Ctx::settled`). So the
    /// agreement costs no time on the run's critical path, and `diff` right after `up` still
    /// reads what `up` wrote. Its calls count as the step's. Call it as soon as the write has
    /// returned, before any other call of the step: the wait's first read then goes out at once.
    pub fn settle_later(&self, step_id: &str, wait: impl Future<Output = Result<()>> + Send + 'static) {
        let unit = format!("step:{step_id}");
        let task = Background::spawn(async move {
            let r = crate::aws::in_unit(unit, crate::interrupt::watched(wait)).await;
            (r, Instant::now())
        });
        self.settling.lock().unwrap().push((step_id.to_string(), Instant::now(), task));
    }

    /// Wait for every `settle_later` wait (also those that steps start while it waits): each
    /// one's step, when it began and ended, and its result.
    pub async fn settled(&self) -> Vec<Settled> {
        let mut out = Vec::new();
        loop {
            let waits = std::mem::take(&mut *self.settling.lock().unwrap());
            if waits.is_empty() {
                return out;
            }
            for (step_id, began, task) in waits {
                let (result, ended) = match task.join().await {
                    Some((r, at)) => (r, at),
                    None => (Err(anyhow::anyhow!("the wait for AWS to show the write panicked")), Instant::now()),
                };
                out.push(Settled { step_id, began, ended, result });
            }
        }
    }

    pub fn tags_value(tags: &Tags) -> Value {
        crate::tags::to_value(tags)
    }
}

/// The tags a node wants, from its `tags` field.
pub fn wanted_tags(node: &Node) -> Tags {
    node.fields
        .as_ref()
        .and_then(|f| f.get("tags"))
        .and_then(|t| t.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// Tag keys karpctl set on the live object that the plan no longer names (`tags::stale_keys`):
/// an update removes them before it tags what the plan wants, so that a key renamed only in case
/// (`team` -> `Team`) converges in one run where AWS compares keys without case (IAM roles):
/// removed after, the old spelling would take the new one with it. Tags others set are never
/// named.
pub fn stale_tags(step: &Step) -> Vec<String> {
    let live = step.observed.as_ref().map(observed_tags).unwrap_or_default();
    crate::tags::stale_keys(&live, &wanted_tags(&step.node))
}

/// The EKS cluster an EKS node belongs to (spec `cluster`, else this run's cluster).
pub fn eks_cluster_of<'a>(ctx: &'a Ctx, node: &'a Node) -> &'a str {
    match node.spec.eks_cluster() {
        Some(c) if !c.is_empty() => c,
        _ => &ctx.cluster,
    }
}

/// The tags an observation read (its `tags` field).
pub fn observed_tags(o: &Observed) -> Tags {
    o.fields
        .get("tags")
        .and_then(|t| t.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// The desired value of a field as a string ("" when absent or null).
pub fn want_str<'a>(node: &'a Node, field: &str) -> &'a str {
    node.fields.as_ref().and_then(|f| f.get(field)).and_then(|v| v.as_str()).unwrap_or("")
}

/// What a write needs to know right before it writes, read then without any memo: who owns the
/// object now, its live tags, and the identifiers the write uses (ARN, URL, association id).
#[derive(Clone, Debug, PartialEq)]
pub struct Current {
    pub owner: Owner,
    pub tags: Tags,
    pub ids: BTreeMap<String, String>,
}

impl Current {
    pub fn new(owner: Owner, tags: Tags) -> Current {
        Current { owner, tags, ids: BTreeMap::new() }
    }
    pub fn id(mut self, key: &str, value: impl Into<String>) -> Current {
        self.ids.insert(key.to_string(), value.into());
        self
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.ids.get(key).map(String::as_str)
    }
}

/// The ownership re-check every update, replace, adoption and delete passes right before it
/// writes (the dispatcher applies it to every kind, on `Current` read just now), so that a stale
/// plan, a saved plan applied later, or a concurrent `--adopt` for another cluster can never
/// change another owner's object. Ok(true): go on. Ok(false): nothing to do (the object a
/// delete was for is already gone). Creates are not checked here: each kind's create stops on
/// AlreadyExists unless the object found is ours.
pub fn may_write(step: &Step, current: Option<&Current>) -> Result<bool> {
    let owner = current.map(|c| &c.owner);
    let ok = match (step.action, owner) {
        (Action::Create, _) => true,
        (Action::Delete, None) => return Ok(false),
        (_, Some(Owner::Ours)) => true,
        (Action::Adopt, Some(Owner::Unowned)) => true,
        (Action::Adopt, Some(Owner::External)) => step.node.adopt_external,
        _ => false,
    };
    if ok {
        return Ok(true);
    }
    let now = match owner {
        None => "no longer exists".to_string(),
        Some(Owner::OtherCluster(c)) => format!("is now karpctl's for cluster {c}"),
        Some(_) => "is not tagged as karpctl's for this cluster".to_string(),
    };
    anyhow::bail!(
        "{} {} {now} (it changed since the plan was made); nothing was written to it. Run `karpctl diff` to see the current state",
        step.kind.label(),
        step.name
    )
}

pub fn changed(step: &Step, field: &str) -> bool {
    matches!(step.action, Action::Create | Action::Replace) || step.changes.iter().any(|c| c.field == field)
}
