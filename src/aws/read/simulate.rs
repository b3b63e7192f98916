//! The IAM policy simulator over the controller role (doctor `--simulate`):
//! `GetContextKeysForPrincipalPolicy`, then `SimulatePrincipalPolicy` over the action set in
//! batches of [`BATCH`] actions, each paged with MaxItems/Marker. IAM publishes no rate for
//! them and throttles per account: the calls go one after the other through the account's `iam`
//! pacer and the SDK's throttling retries. Judged by `running::simulation`.

// Wired into doctor/diff/up by the checks of the running Karpenter (#36) once the read layer
// lands; until then only the tests call these readers.
#![allow(dead_code)]

use crate::running::simulation::{ContextValue, Decision};
use aws_sdk_iam::types::{ContextEntry, ContextKeyTypeEnum};

/// Actions per SimulatePrincipalPolicy call. IAM takes many per call (the results are paged);
/// fifty keeps a request's query string a few KiB and the work of one call small, so a throttled
/// call costs little to retry. Karpenter's pinned set (about 60 actions) is two calls.
pub const BATCH: usize = 50;
/// Results per page (IAM's most is 1000; one page per batch).
const MAX_ITEMS: i32 = 1000;
/// Pages per batch read at most.
const MAX_PAGES: usize = 5;

/// The simulation's outcome; `problem` when it could not be run (a warning naming the
/// permission, never an error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulation {
    /// What `GetContextKeysForPrincipalPolicy` listed.
    pub context_keys: Vec<String>,
    pub decisions: Vec<Decision>,
    pub problem: Option<String>,
}

/// The context keys the role's policies use.
pub async fn context_keys(iam: &aws_sdk_iam::Client, role_arn: &str) -> Result<Vec<String>, String> {
    match iam.get_context_keys_for_principal_policy().policy_source_arn(role_arn).send().await {
        Ok(o) => Ok(o.context_key_names().to_vec()),
        Err(e) => {
            Err(problem("iam:GetContextKeysForPrincipalPolicy", crate::aws::aws_err("iam:GetContextKeysForPrincipalPolicy", e)))
        }
    }
}

fn problem(permission: &str, e: anyhow::Error) -> String {
    format!("the IAM policy simulator could not be run: {permission} failed ({e:#}); doctor --simulate needs {permission}")
}

fn entry(v: &ContextValue) -> ContextEntry {
    ContextEntry::builder()
        .context_key_name(&v.key)
        .set_context_key_values(Some(v.values.clone()))
        .context_key_type(ContextKeyTypeEnum::from(v.kind))
        .build()
}

/// `actions` simulated for `role_arn` with `context` (from `running::simulation::karpenter_context`
/// over [`context_keys`]), Resource "*".
pub async fn simulate(iam: &aws_sdk_iam::Client, role_arn: &str, actions: &[String], context: &[ContextValue]) -> Simulation {
    let mut out = Simulation::default();
    let entries: Vec<ContextEntry> = context.iter().map(entry).collect();
    for batch in actions.chunks(BATCH) {
        let mut marker: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let answer = iam
                .simulate_principal_policy()
                .policy_source_arn(role_arn)
                .set_action_names(Some(batch.to_vec()))
                .set_context_entries((!entries.is_empty()).then(|| entries.clone()))
                .max_items(MAX_ITEMS)
                .set_marker(marker.take())
                .send()
                .await;
            let page = match answer {
                Ok(p) => p,
                Err(e) => {
                    out.problem =
                        Some(problem("iam:SimulatePrincipalPolicy", crate::aws::aws_err("iam:SimulatePrincipalPolicy", e)));
                    return out;
                }
            };
            out.decisions.extend(page.evaluation_results().iter().map(|r| Decision {
                action: r.eval_action_name().to_string(),
                decision: r.eval_decision().as_str().to_string(),
                allowed_by_organizations: r.organizations_decision_detail().map(|d| d.allowed_by_organizations()),
                allowed_by_boundary: r.permissions_boundary_decision_detail().map(|d| d.allowed_by_permissions_boundary()),
                matched: r.matched_statements().iter().filter_map(|m| m.source_policy_id().map(str::to_string)).collect(),
                missing_context: r.missing_context_values().to_vec(),
            }));
            marker = page.marker().filter(|_| page.is_truncated()).map(str::to_string);
            if marker.is_none() {
                break;
            }
        }
    }
    out
}
