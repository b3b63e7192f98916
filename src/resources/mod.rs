//! One module per resource kind; each owns read / create / update / delete for its kind.
//! The set of kinds is closed, so dispatch is a `match`.

pub mod event_rule;
pub mod queue;
pub mod queue_policy;

use crate::aws::{Clients, ConsistencyPolicy};
use crate::model::{Action, Kind, Node, Observed, Step, Tags};
use crate::report::Reporter;
use anyhow::Result;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// Memoised async lookups, so that kinds sharing a read (a queue and its policy) make one call.
pub struct Memo<T: Clone> {
    cells: Mutex<HashMap<String, Arc<OnceCell<T>>>>,
}

impl<T: Clone> Default for Memo<T> {
    fn default() -> Self {
        Memo { cells: Mutex::new(HashMap::new()) }
    }
}

impl<T: Clone> Memo<T> {
    pub async fn get<F, Fut>(&self, key: &str, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cell = self.cells.lock().unwrap().entry(key.to_string()).or_default().clone();
        cell.get_or_try_init(f).await.cloned()
    }
    pub fn put(&self, key: &str, value: T) {
        let cell = Arc::new(OnceCell::new_with(Some(value)));
        self.cells.lock().unwrap().insert(key.to_string(), cell);
    }
    pub fn forget(&self, key: &str) {
        self.cells.lock().unwrap().remove(key);
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
    /// Queue URLs by queue name (None: no such queue).
    pub queue_urls: Memo<Option<String>>,
    /// All attributes of a queue, by URL.
    pub queue_attrs: Memo<HashMap<String, String>>,
    /// Tags of a queue, by URL.
    pub queue_tags: Memo<Tags>,
}

impl Ctx {
    pub fn tags_value(tags: &Tags) -> Value {
        Value::Object(tags.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
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

/// The desired value of a field as a string ("" when absent or null).
pub fn want_str<'a>(node: &'a Node, field: &str) -> &'a str {
    node.fields.as_ref().and_then(|f| f.get(field)).and_then(|v| v.as_str()).unwrap_or("")
}

pub fn changed(step: &Step, field: &str) -> bool {
    matches!(step.action, Action::Create | Action::Replace) || step.changes.iter().any(|c| c.field == field)
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    match node.kind {
        Kind::Queue => queue::read(ctx, node).await,
        Kind::QueuePolicy => queue_policy::read(ctx, node).await,
        Kind::EventRule => event_rule::read(ctx, node).await,
        k => anyhow::bail!("reading {} is not supported in this build", k.label()),
    }
}

pub async fn apply(ctx: &Ctx, step: &Step) -> Result<()> {
    if step.removed_with.is_some() {
        return Ok(());
    }
    match step.kind {
        Kind::Queue => queue::apply(ctx, step).await,
        Kind::QueuePolicy => queue_policy::apply(ctx, step).await,
        Kind::EventRule => event_rule::apply(ctx, step).await,
        k => anyhow::bail!("applying {} is not supported in this build", k.label()),
    }
}

/// Find objects this cluster owns that the desired set does not name (renamed, or switched off),
/// as extra nodes with no desired fields, so that the planner deletes them.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    event_rule::discover(ctx, nodes).await
}
