//! The versioned JSON documents of `--output json`.

use crate::error::UserError;
use crate::model::Plan;
use serde_json::{Value, json};

/// The shape of every JSON document karpctl prints (plans, doctor, import, fleets, errors).
/// 2: a plan's notes under `notes` (were `findings`); doctor's fixes under `fix` (were `hint`),
/// its notes findings of severity `note`. docs/reference.md, "JSON output".
pub const FORMAT_VERSION: u32 = 2;

pub fn plan_json(
    command: &str,
    cluster: &str,
    account_id: &str,
    region: &str,
    plan: &Plan,
    results: Option<&std::collections::BTreeMap<String, crate::model::Outcome>>,
    stats: Value,
) -> Value {
    let (add, change, destroy) = plan.counts();
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "kind": s.kind,
                "type": s.kind.label(),
                "name": s.name,
                "action": s.action,
                "changes": s.changes,
                "ids": s.observed.as_ref().map(|o| o.ids.clone()).unwrap_or_default(),
                "notes": s.node.notes,
                "removed_with": s.removed_with,
            })
        })
        .collect();
    let mut doc = json!({
        "format_version": FORMAT_VERSION,
        "command": command,
        "cluster": cluster,
        "account_id": account_id,
        "region": region,
        "in_sync": plan.steps.is_empty() && plan.conflicts.is_empty(),
        "summary": {"add": add, "change": change, "destroy": destroy},
        "steps": steps,
        "conflicts": super::values::conflicts_json(plan),
        "notes": plan.notes,
        "unchanged": plan.in_sync,
        "results": results,
        "stats": stats,
    });
    // Only while a change of identity.mode is in progress (docs/reference.md).
    if let Some(s) = &plan.identity_switch {
        doc["identity_switch"] = serde_json::to_value(s).unwrap_or(Value::Null);
    }
    doc
}

/// A plan report's document: the plan, each step's outcome, and the failure when steps failed.
pub fn plan_doc(r: &super::values::PlanReport) -> Value {
    let stats = serde_json::to_value(&r.stats).unwrap_or(Value::Null);
    let mut doc = plan_json(r.command, &r.cluster, &r.account_id, &r.region, &r.plan, r.results.as_ref(), stats);
    if let Some(checks) = &r.readiness {
        doc["checks"] =
            json!({"checked": checks.checked, "found": checks.findings, "passed": checks.passed().len(), "karpenter": r.pin});
    }
    if r.command == "up" {
        doc["next_steps"] = super::handoff::handoff_json(r.handoff.as_ref());
    }
    // A failed step, or (diff and up) an error-level readiness check: the run's exit 1 explained.
    let failure = r.failure.clone().or_else(|| r.not_ready().then(|| r.error()).flatten());
    if let Some(f) = &failure {
        doc["error"] = json!({"message": f.message, "causes": [], "hint": f.hint});
    }
    doc
}

/// The `error` object of a JSON document: message, causes, hint, and the error's own data.
pub fn error_json(err: &anyhow::Error) -> Value {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    let mut e = json!({"message": err.to_string(), "causes": err.chain().skip(1).map(|e| e.to_string()).collect::<Vec<_>>(), "hint": super::hint::hint_of(err)});
    if let Some(Value::Object(extra)) = user.and_then(|u| u.data.clone()) {
        for (k, v) in extra {
            e[k] = v;
        }
    }
    e
}

/// The document of a command that ended with an error before it had a result.
pub fn error_doc(err: &anyhow::Error, command: &str, stats: Option<&crate::aws::StatsReport>) -> Value {
    json!({
        "format_version": FORMAT_VERSION,
        "command": command,
        "error": error_json(err),
        "stats": stats.map(|s| serde_json::to_value(s).unwrap_or(Value::Null)),
    })
}

/// A many-cluster run's one document.
pub fn fleet_doc(r: &super::values::FleetReport) -> Value {
    let cmd = r.command;
    let clusters: Vec<Value> = r.runs.iter().map(|d| d.doc.clone().unwrap_or(Value::Null)).collect();
    json!({
        "format_version": FORMAT_VERSION,
        "command": cmd,
        "clusters": clusters,
        "summary": r.runs.iter().map(|d| json!({
            "cluster": d.section.cluster, "account_id": d.section.account_id, "region": d.section.region,
            "result": super::markdown::result_text(cmd, &d.section), "exit_code": d.code,
        })).collect::<Vec<_>>(),
        "parallel_clusters": r.parallel_clusters,
        "peak_clusters_in_flight": r.peak_clusters_in_flight,
        "accounts": r.accounts.iter().map(|a| json!({
            "account": a.account, "concurrency": a.concurrency, "peak_requests_in_flight": a.peak_requests_in_flight,
        })).collect::<Vec<_>>(),
        "exit_code": r.exit_code,
    })
}
