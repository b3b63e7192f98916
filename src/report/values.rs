//! What commands return, for the printer to render: a plan report, the values of `karpctl
//! output`, doctor's findings, a many-cluster run's summary; and each one's exit code.

use super::markdown::Section;
use crate::aws::StatsReport;
use crate::error::UserError;
use crate::exit::{EXIT_CHANGES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK};
use crate::facts::finding::{Outcome as Checks, PinSupport};
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
    /// The readiness checks on what `up` made or `diff` would make (none for `down`).
    pub readiness: Option<Checks>,
    /// The pinned Karpenter version's support status, shown with them.
    pub pin: Option<PinSupport>,
    /// After `up`: what `karpctl output` hands on that this run changed, and how to pass it on.
    pub handoff: Option<super::Handoff>,
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
            .hint(self.conflicts_hint())
            .data(json!({"conflicts": conflicts_json(plan)})),
        )
    }

    /// What to do about conflicts: objects nobody owns are most often a Karpenter setup another
    /// tool made, and `karpctl import` is the way that keeps it working (plain `--adopt` would
    /// make roles of its own beside the ones in use); another cluster's objects are never taken.
    fn conflicts_hint(&self) -> String {
        let unowned = self.plan.conflicts.iter().any(|c| !matches!(c.owner, crate::model::Owner::OtherCluster(_)));
        if !unowned {
            return "objects karpctl manages for another cluster are never taken over: give this plan other names".into();
        }
        format!(
            "if another tool made them (the Terraform module, CloudFormation, eksctl), run `karpctl import --cluster {}` first: \
             it writes the plan that takes over the setup in use, roles and rules included, nothing remade; then `karpctl up \
             --adopt`. Objects of the plan's own names that no setup uses: `karpctl up --adopt` takes them over; or rename them \
             in the plan, or delete them",
            self.cluster
        )
    }

    /// The error this report ends with, if any: conflicts first, then failed steps.
    /// (None when the run was interrupted: it says so instead.)
    pub fn error(&self) -> Option<UserError> {
        if self.applied.as_ref().is_some_and(|a| a.cancelled > 0) {
            return self.conflicts_error();
        }
        self.conflicts_error().or_else(|| self.failure.clone()).or_else(|| self.not_ready_error())
    }

    /// The error of an error-level readiness check: `up` made what it could and Karpenter cannot
    /// work; `diff` would make a setup Karpenter cannot work with (exit 1, as `terraform plan`
    /// on an invalid configuration, so a CI check never passes it).
    fn not_ready_error(&self) -> Option<UserError> {
        if !self.not_ready() {
            return None;
        }
        let errors = self.readiness.as_ref().map_or(0, |r| r.errors());
        let checks = if errors == 1 { "check" } else { "checks" };
        Some(if self.command == "diff" {
            UserError::new(format!(
                "Karpenter could not work with what `up` would leave: {errors} error-level readiness {checks} failed"
            ))
            .hint("fix what the checks name; `diff` exits 1 until then (2 means changes to apply and nothing wrong)")
        } else {
            UserError::new(
                "Karpenter cannot work here yet: an error-level readiness check failed (above); what was applied stays",
            )
            .hint("fix what the checks name, then run `karpctl up` again")
        })
    }

    /// After `up` created a Pod Identity association or pointed it at another role: the command
    /// that restarts the controller, since pods started before then never get credentials (the
    /// deployment is named like the service account, as the chart names it).
    pub fn restart_command(&self) -> Option<String> {
        if self.command != "up" {
            return None;
        }
        let results = self.results.as_ref()?;
        self.plan.steps.iter().find_map(|s| {
            let crate::model::NodeSpec::PodIdentity(p) = &s.node.spec else { return None };
            let done = matches!(results.get(&s.id), Some(crate::model::Outcome::Done));
            let takes_effect = match s.action {
                crate::model::Action::Create | crate::model::Action::Replace => true,
                crate::model::Action::Update | crate::model::Action::Adopt => s.changes.iter().any(|c| c.field.contains("role")),
                crate::model::Action::Delete => false,
            };
            (done && takes_effect).then(|| format!("kubectl -n {} rollout restart deployment/{}", p.namespace, p.service_account))
        })
    }

    /// An error-level readiness check says Karpenter cannot work with what `up` made (`up`) or
    /// would make (`diff`).
    pub fn not_ready(&self) -> bool {
        matches!(self.command, "up" | "diff") && self.readiness.as_ref().is_some_and(|r| r.errors() > 0)
    }

    pub fn exit_code(&self) -> i32 {
        if !self.plan.conflicts.is_empty() {
            return EXIT_ERROR;
        }
        if self.applied.as_ref().is_some_and(|a| a.cancelled > 0) {
            return EXIT_INTERRUPTED;
        }
        if self.failure.is_some() || self.not_ready() {
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
    pub setup: crate::facts::setup::Setup,
    pub outcome: crate::facts::finding::Outcome,
    pub stats: StatsReport,
}

impl DoctorReport {
    pub fn exit_code(&self) -> i32 {
        // Notes (nothing wrong) do not make doctor fail.
        let problems = self.outcome.findings.iter().any(|f| f.severity != crate::facts::finding::Severity::Note);
        if problems { EXIT_CHANGES } else { EXIT_OK }
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
