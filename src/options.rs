//! What the commands are told to do: the engine's options, built by `main.rs` from the parsed
//! flags (the engine never sees the clap structs' global flags), and changed per cluster by the
//! many-cluster driver.

use std::path::PathBuf;
use std::sync::Arc;

/// The format of what a command prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
    /// GitHub-flavoured Markdown for a pull-request comment (`diff` only).
    Markdown,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// The cluster (None: KARPCTL_CLUSTER, or the only plan in plans/).
    pub cluster: Option<String>,
    /// The settings file (TOML), from --config or its deprecated spelling --plan.
    pub config: Option<PathBuf>,
    /// The settings file was named with the deprecated --plan.
    pub plan_flag: bool,
    pub region: Option<String>,
    pub profile: Option<String>,
    pub endpoint_url: Option<String>,
    /// Most AWS requests (and steps, and node reads) in flight at once.
    pub concurrency: u32,
    pub output: Format,
    /// Print call counts after the run (and keep the per-unit trace).
    pub stats: bool,
    /// Only errors on stderr.
    pub quiet: bool,
    /// Every plan in plans/.
    pub all: bool,
    /// These clusters.
    pub clusters: Option<Vec<String>>,
    /// Most clusters in flight at once (with `all` / `clusters`).
    pub parallel_clusters: u32,
    /// Most AWS requests in flight per account across its clusters (with `all` / `clusters`).
    pub account_concurrency: u32,
    /// Set by the many-cluster driver for each cluster's run: its reporter, limiter, stats and
    /// captured output.
    pub scope: Option<Arc<crate::scope::Scope>>,
    /// What the environment says, read once in `main.rs`.
    pub settings: Arc<crate::settings::Settings>,
    /// `up`/`diff --finish-identity-switch`: the old identity path goes now, without CloudTrail's
    /// evidence that the controller uses the new one (`identity_switch`).
    pub finish_identity_switch: bool,
}
