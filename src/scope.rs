//! One cluster's run inside a many-cluster run (`--all`, `--clusters`): where its progress goes
//! (prefixed with its name), the request limiter it shares with its account's other clusters, its
//! own call counts, and the slot its result goes to instead of stdout.

use crate::aws::{CallStats, Limiter};
use crate::model::{Plan, Step};
use crate::report::{Event, Reporter};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// What a cluster's command produced, for the many-cluster summary to print.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    pub plan: Option<Plan>,
    /// The document `--output json` prints for one cluster.
    pub doc: Option<Value>,
}

pub struct Scope {
    pub cluster: String,
    pub reporter: Arc<dyn Reporter>,
    pub limiter: Limiter,
    pub stats: Arc<CallStats>,
    pub captured: Mutex<Captured>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

impl Scope {
    pub fn capture(&self, plan: Option<&Plan>, doc: Value) {
        let mut c = self.captured.lock().unwrap();
        if let Some(p) = plan {
            c.plan = Some(p.clone());
        }
        c.doc = Some(doc);
    }
    pub fn take(&self) -> Captured {
        std::mem::take(&mut *self.captured.lock().unwrap())
    }
}

/// Every progress line of a cluster, prefixed with `[<cluster>] ` (step ids included, so the live
/// view of steps in flight names the cluster too).
pub struct Prefixed {
    pub prefix: String,
    pub inner: Arc<dyn Reporter>,
}

impl Prefixed {
    fn step(&self, s: &Step) -> Step {
        let mut s = s.clone();
        s.id = format!("{}{}", self.prefix, s.id);
        s
    }
}

impl Reporter for Prefixed {
    fn event(&self, e: Event<'_>) {
        let p = &self.prefix;
        let r = &self.inner;
        match e {
            Event::Info(s) => r.event(Event::Info(&format!("{p}{s}"))),
            Event::Started { step } => r.event(Event::Started { step: &self.step(step) }),
            Event::Still { step, elapsed } => r.event(Event::Still { step: &self.step(step), elapsed }),
            Event::Finished { step, elapsed } => r.event(Event::Finished { step: &self.step(step), elapsed }),
            Event::Failed { step, error, elapsed } => r.event(Event::Failed { step: &self.step(step), error, elapsed }),
            Event::Skipped { step, because } => r.event(Event::Skipped { step: &self.step(step), because }),
            Event::Retrying { id, operation, code, attempt, elapsed } => {
                r.event(Event::Retrying { id: &format!("{p}{id}"), operation, code, attempt, elapsed })
            }
            Event::Waiting { id, what, elapsed } => r.event(Event::Waiting { id: &format!("{p}{id}"), what, elapsed }),
            Event::Cancelling { .. } => r.event(e),
        }
    }
}
