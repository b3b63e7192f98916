//! What commands return, for the printer to render: a plan report, the values of `karpctl
//! output`, doctor's findings, a many-cluster run's summary; and each one's exit code.

use super::markdown::Section;
use crate::aws::StatsReport;
use crate::error::UserError;
use crate::exit::{EXIT_CHANGES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK};
use crate::model::{Outcome, Plan};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// What `up`/`down` did after the plan: counts of what was done, and what was not.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    pub add: usize,
    pub change: usize,
    pub destroy: usize,
    pub failed: usize,
    pub skipped: usize,
    pub cancelled: usize,
    pub elapsed: Duration,
}

/// What `diff`, `up` and `down` return: the plan, and for `up`/`down` what became of each step.
#[derive(Debug)]
pub struct PlanReport {
    pub command: &'static str,
    pub cluster: String,
    pub account_id: String,
    pub region: String,
    pub plan: Plan,
    /// Each step's outcome (`up`/`down`; empty when there was nothing to do).
    pub results: Option<BTreeMap<String, Outcome>>,
    /// Set when steps ran: the plan was shown before them (`Printer::plan_preview`).
    pub applied: Option<Applied>,
    /// The steps that failed, as one error.
    pub failure: Option<UserError>,
    pub stats: StatsReport,
}

impl PlanReport {
    /// Objects in the plan's way that are not karpctl's for this cluster, as one error.
    pub fn conflicts_error(&self) -> Option<UserError> {
        let plan = &self.plan;
        if plan.conflicts.is_empty() {
            return None;
        }
        let list: Vec<String> = plan.conflicts.iter().map(|c| format!("  - {}", c.message())).collect();
        Some(
            UserError::new(format!(
                "{} object(s) karpctl would manage already exist and are not karpctl's for this cluster:\n{}",
                plan.conflicts.len(),
                list.join("\n")
            ))
            .hint("rename them in the plan, delete them, or run `karpctl up --adopt` to take over unowned ones (never another cluster's)")
            .data(json!({"conflicts": conflicts_json(plan)})),
        )
    }

    /// The error this report ends with, if any: conflicts first, then failed steps.
    /// (None when the run was interrupted: it says so instead.)
    pub fn error(&self) -> Option<UserError> {
        if self.applied.as_ref().is_some_and(|a| a.cancelled > 0) {
            return self.conflicts_error();
        }
        self.conflicts_error().or_else(|| self.failure.clone())
    }

    pub fn exit_code(&self) -> i32 {
        if !self.plan.conflicts.is_empty() {
            return EXIT_ERROR;
        }
        if self.applied.as_ref().is_some_and(|a| a.cancelled > 0) {
            return EXIT_INTERRUPTED;
        }
        if self.failure.is_some() {
            return EXIT_ERROR;
        }
        if self.command == "diff" && !self.plan.steps.is_empty() { EXIT_CHANGES } else { EXIT_OK }
    }
}

/// What `karpctl output` returns: the values as JSON, and rendered in the asked format.
#[derive(Debug, Clone)]
pub struct ValuesReport {
    pub doc: Value,
    pub text: String,
}

/// What `karpctl doctor` returns.
#[derive(Debug)]
pub struct DoctorReport {
    pub setup: crate::doctor::model::Setup,
    pub outcome: crate::doctor::checks::Outcome,
    pub stats: StatsReport,
}

impl DoctorReport {
    pub fn exit_code(&self) -> i32 {
        if self.outcome.findings.is_empty() { EXIT_OK } else { EXIT_CHANGES }
    }
}

/// One cluster's end in a many-cluster run.
#[derive(Debug, Clone)]
pub struct ClusterRun {
    pub section: Section,
    pub code: i32,
    /// The plan (`diff`, `up`, `down`), for the per-cluster human output.
    pub plan: Option<Plan>,
    /// The cluster's JSON document (its error merged in), for the run's one document.
    pub doc: Option<Value>,
    /// The values rendered in the asked format (`output`).
    pub text: Option<String>,
    pub stats: Value,
}

/// An account's request limiter in a many-cluster run.
#[derive(Debug, Clone)]
pub struct AccountUse {
    pub account: String,
    pub concurrency: u32,
    pub peak_requests_in_flight: usize,
}

/// What a many-cluster run returns.
#[derive(Debug, Clone)]
pub struct FleetReport {
    pub command: &'static str,
    pub runs: Vec<ClusterRun>,
    pub parallel_clusters: u32,
    pub peak_clusters_in_flight: usize,
    pub accounts: Vec<AccountUse>,
    pub exit_code: i32,
}

/// The plan's conflicts as JSON.
pub fn conflicts_json(plan: &Plan) -> Vec<Value> {
    plan.conflicts
        .iter()
        .map(|c| json!({"id": c.id, "type": c.kind.label(), "name": c.name, "owner": c.owner, "message": c.message()}))
        .collect()
}
