//! The IAM policy simulator over the controller role (doctor `--simulate`): its context keys, then
//! `SimulatePrincipalPolicy` in batches of [`BATCH`] actions, one call after another through the
//! account's `iam` pacer. Judged by `running::simulation`.

use super::memo::Memo;
use crate::aws::aws_err;
use crate::running::simulation::{ContextValue, Decision};
use anyhow::Result;
use aws_sdk_iam::types::{ContextEntry, ContextKeyTypeEnum};

/// Actions per SimulatePrincipalPolicy call. IAM takes many per call (the results are paged);
/// fifty keeps a request's query string a few KiB and the work of one call small, so a throttled
/// call costs little to retry. Karpenter's pinned set (about 60 actions) is two calls.
pub const BATCH: usize = 50;
/// Results per page (IAM's most is 1000; one page per batch).
const MAX_ITEMS: i32 = 1000;
/// Pages per batch read at most.
const MAX_PAGES: usize = 5;

/// The policy simulator over one account's IAM (its calls go through the `iam` client, so the
/// account's `iam` pacer spaces them once IAM throttles, and the SDK retries a throttled call).
pub struct Simulator {
    client: aws_sdk_iam::Client,
    keys: Memo<Vec<String>>,
}

fn entry(v: &ContextValue) -> ContextEntry {
    ContextEntry::builder()
        .context_key_name(&v.key)
        .set_context_key_values(Some(v.values.clone()))
        .context_key_type(ContextKeyTypeEnum::from(v.kind))
        .build()
}

impl Simulator {
    pub fn new(client: aws_sdk_iam::Client) -> Simulator {
        Simulator { client, keys: Memo::default() }
    }

    /// The context keys the role's policies use (GetContextKeysForPrincipalPolicy), memoised.
    pub async fn context_keys(&self, role_arn: &str) -> Result<Vec<String>> {
        self.keys
            .get(role_arn, || async {
                match self.client.get_context_keys_for_principal_policy().policy_source_arn(role_arn).send().await {
                    Ok(o) => Ok(o.context_key_names().to_vec()),
                    Err(e) => Err(aws_err("iam:GetContextKeysForPrincipalPolicy", e)),
                }
            })
            .await
    }

    /// `actions` simulated for `role_arn` with `context` (from `running::simulation::karpenter_context`
    /// over [`Simulator::context_keys`]) on `resource` (None: "*"): [`BATCH`] actions a call, one
    /// call after the other.
    pub async fn simulate(
        &self,
        role_arn: &str,
        actions: &[String],
        resource: Option<&str>,
        context: &[ContextValue],
    ) -> Result<Vec<Decision>> {
        let mut out = Vec::new();
        let entries: Vec<ContextEntry> = context.iter().map(entry).collect();
        for batch in actions.chunks(BATCH) {
            let mut marker: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let page = self
                    .client
                    .simulate_principal_policy()
                    .policy_source_arn(role_arn)
                    .set_action_names(Some(batch.to_vec()))
                    .set_resource_arns(resource.map(|r| vec![r.to_string()]))
                    .set_context_entries((!entries.is_empty()).then(|| entries.clone()))
                    .max_items(MAX_ITEMS)
                    .set_marker(marker.take())
                    .send()
                    .await
                    .map_err(|e| aws_err("iam:SimulatePrincipalPolicy", e))?;
                out.extend(page.evaluation_results().iter().map(|r| Decision {
                    action: r.eval_action_name().to_string(),
                    resource: r.eval_resource_name().unwrap_or("*").to_string(),
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
        Ok(out)
    }
}
