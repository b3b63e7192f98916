//! One cluster's run inside a many-cluster run (`--all`, `--clusters`): where its progress goes
//! (prefixed with its name), the request limiter it shares with its account's other clusters, and
//! its own call counts. Its result is the command's return value (the run's printer is muted).

use crate::aws::{CallStats, Limiter};
use crate::events::Reporter;
use std::sync::Arc;

pub struct Scope {
    pub cluster: String,
    pub reporter: Arc<dyn Reporter>,
    pub limiter: Limiter,
    pub stats: Arc<CallStats>,
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}
