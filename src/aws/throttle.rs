//! Throttling that slows down instead of failing (docs/aws-behaviour.md section 10.9).
//!
//! AWS throttles per account: IAM has one request rate for every caller in the account, EC2 and
//! EKS token buckets, SQS and EventBridge their own. The SDK's standard retry gives up after its
//! attempts, and its retry budget is one per service for the whole process, so a throttled
//! account fails a many-cluster run within a second. karpctl instead:
//! - runs the SDK's adaptive retry mode: a client-side rate limiter that halves its rate on a
//!   throttling answer and grows it back (CUBIC) on success, one per account and service, shared
//!   by every cluster of the account in the run (`AccountRates`, kept in the account's `Limiter`);
//! - gives throttling errors more attempts (`THROTTLE_ATTEMPTS`) than other retryable errors
//!   (`OTHER_ATTEMPTS`): `AttemptBudget` forbids a retry of a non-throttling error past its budget;
//! - keeps a retry budget (the SDK's token bucket) per cluster, not per process: one cluster's
//!   retries cannot spend another's;
//! - counts every throttling answer by service (`CallStats::throttled`), which the output reports.

use super::stats::CallStats;
use aws_smithy_runtime::client::retries::{ClientRateLimiter, RetryPartition, TokenBucket};
use aws_smithy_runtime_api::client::interceptors::context::InterceptorContext;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority, RetryReason};
use aws_smithy_types::retry::ErrorKind;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Attempts for a call AWS throttles (the first one included).
pub const THROTTLE_ATTEMPTS: u32 = 16;
/// Attempts for a call that fails with another retryable error (5xx, a reset, a timeout).
pub const OTHER_ATTEMPTS: u32 = 8;

/// The adaptive rate limiters of one account, one per service, shared by its clusters.
#[derive(Clone, Debug, Default)]
pub struct AccountRates(Arc<Mutex<BTreeMap<&'static str, ClientRateLimiter>>>);

impl AccountRates {
    /// The account's rate limiter for `service`.
    pub fn of(&self, service: &'static str) -> ClientRateLimiter {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        self.0.lock().unwrap().entry(service).or_insert_with(|| ClientRateLimiter::new(now)).clone()
    }
}

/// The retry partition of one cluster's client of `service`: the cluster's own retry budget
/// (`bucket`) and the account's rate for the service.
pub fn partition(service: &'static str, bucket: &TokenBucket, rates: &AccountRates) -> RetryPartition {
    RetryPartition::custom(format!("karpctl-{service}"))
        .token_bucket(bucket.clone())
        .client_rate_limiter(rates.of(service))
        .build()
}

/// The attempt of the request being classified, from the SDK's `amz-sdk-request: attempt=N;
/// max=M` header (1 when absent).
fn attempt_of(ctx: &InterceptorContext) -> u32 {
    ctx.request()
        .and_then(|r| r.headers().get("amz-sdk-request"))
        .and_then(|h| h.split(';').find_map(|p| p.trim().strip_prefix("attempt=")?.parse().ok()))
        .unwrap_or(1)
}

/// What to do with the verdict of the classifiers before it, on attempt `attempt`: throttling
/// keeps its retry (and is counted); another retryable error is retried only within
/// `OTHER_ATTEMPTS`.
fn budget(previous: &RetryAction, attempt: u32) -> (RetryAction, bool) {
    match previous {
        RetryAction::RetryIndicated(RetryReason::RetryableError { kind: ErrorKind::ThrottlingError, .. }) => {
            (RetryAction::NoActionIndicated, true)
        }
        RetryAction::RetryIndicated(_) if attempt >= OTHER_ATTEMPTS => (RetryAction::RetryForbidden, false),
        _ => (RetryAction::NoActionIndicated, false),
    }
}

/// Runs after the SDK's classifiers: see `budget`.
#[derive(Debug)]
pub struct AttemptBudget {
    pub service: &'static str,
    pub stats: Arc<CallStats>,
}

impl ClassifyRetry for AttemptBudget {
    fn classify_retry(&self, _ctx: &InterceptorContext) -> RetryAction {
        RetryAction::NoActionIndicated
    }
    fn classify_retry_v2(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        let (action, throttled) = budget(previous, attempt_of(ctx));
        if throttled {
            self.stats.throttled(self.service);
        }
        action
    }
    fn name(&self) -> &'static str {
        "karpctl-attempt-budget"
    }
    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_keeps_its_retries_other_errors_stop_at_their_budget() {
        let throttled = RetryAction::throttling_error();
        let server = RetryAction::server_error();
        assert_eq!(budget(&throttled, 1), (RetryAction::NoActionIndicated, true));
        assert_eq!(budget(&throttled, THROTTLE_ATTEMPTS - 1), (RetryAction::NoActionIndicated, true), "up to the SDK's maximum");
        assert_eq!(budget(&server, OTHER_ATTEMPTS - 1), (RetryAction::NoActionIndicated, false));
        assert_eq!(budget(&server, OTHER_ATTEMPTS), (RetryAction::RetryForbidden, false));
        assert_eq!(budget(&RetryAction::NoActionIndicated, 20), (RetryAction::NoActionIndicated, false), "nothing to retry");
    }

    #[test]
    fn an_account_shares_one_rate_per_service() {
        let rates = AccountRates::default();
        let (a, b) = (rates.of("iam"), rates.of("iam"));
        assert!(format!("{a:?}") == format!("{b:?}"));
        assert_eq!(rates.0.lock().unwrap().len(), 1);
        rates.of("ec2");
        assert_eq!(rates.0.lock().unwrap().len(), 2);
    }
}
