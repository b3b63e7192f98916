//! Throttling that slows down instead of failing (docs/aws-behaviour.md section 10.9).
//!
//! AWS throttles per account: IAM has one request rate for every caller in the account, EC2 and
//! EKS token buckets, SQS and EventBridge their own. The SDK's standard retry gives up after its
//! attempts, and its retry budget is one per service for the whole process, so a throttled
//! account fails a many-cluster run within a second. karpctl instead:
//! - paces its requests with a rate per account and service (`Pacer`, AIMD), shared by every
//!   cluster of the account in the run (`AccountRates`, kept in the account's `Limiter`): none
//!   until AWS first throttles, then 0.7 of what was sent in the last second, cut by 0.7 again
//!   on a throttling answer (at most once a second: the answers of one burst are one signal) and
//!   raised by one request a second per second while calls succeed. The SDK's own adaptive mode
//!   was measured first: its CUBIC limiter per client and its exponential back-off left the
//!   account idle most of the time (ten clusters at 15 IAM calls a second: 5.3x the time the
//!   calls need) and timed fifty clusters' calls out;
//! - gives throttling errors more attempts (`THROTTLE_ATTEMPTS`) than other retryable errors
//!   (`OTHER_ATTEMPTS`): `AttemptBudget` forbids a retry of a non-throttling error past its budget;
//! - keeps a retry budget (the SDK's token bucket) per cluster, not per process: one cluster's
//!   retries cannot spend another's;
//! - counts every throttling answer by service (`CallStats::throttled`), which the output reports,
//!   once per attempt (`ThrottleWatch`, an interceptor: the SDK runs the retry classifiers more
//!   than once per attempt, so they must not count).

use super::stats::CallStats;
use aws_smithy_runtime::client::retries::classifiers::run_classifiers_on_ctx;
use aws_smithy_runtime::client::retries::{RetryPartition, TokenBucket};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{FinalizerInterceptorContextRef, InterceptorContext};
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority, RetryReason};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::retry::ErrorKind;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Attempts for a call AWS throttles (the first one included).
pub const THROTTLE_ATTEMPTS: u32 = 16;
/// Attempts for a call that fails with another retryable error (5xx, a reset, a timeout).
pub const OTHER_ATTEMPTS: u32 = 8;

/// The lowest pace, requests a second, however often AWS throttles.
const MIN_RATE: f64 = 1.0;
/// A throttling answer cuts the pace to this share of it.
const DECREASE: f64 = 0.7;
/// While calls succeed, the pace grows by this many requests a second, each second.
const INCREASE: f64 = 1.0;

#[derive(Debug)]
struct Pace {
    /// Requests a second; None: not paced (AWS has not throttled this service in this run).
    rate: Option<f64>,
    /// When the next request may go.
    next: std::time::Instant,
    last_cut: Option<std::time::Instant>,
    /// When the requests of the last second went.
    sent: std::collections::VecDeque<std::time::Instant>,
    /// Counts the cuts: a request given its slot before the latest cut takes a new one when its
    /// old slot comes, at the pace after the cut (`Pacer::wait`).
    cuts: u64,
}

/// The pace of one service's requests for one account (AIMD, see the module's notes).
#[derive(Debug)]
pub struct Pacer(Mutex<Pace>);

impl Default for Pacer {
    fn default() -> Self {
        Pacer(Mutex::new(Pace { rate: None, next: std::time::Instant::now(), last_cut: None, sent: Default::default(), cuts: 0 }))
    }
}

impl Pacer {
    /// The moment a request asked for `now` may go (and count it as sent then), and the number
    /// of cuts so far.
    pub fn slot(&self, now: std::time::Instant) -> (std::time::Instant, u64) {
        let mut p = self.0.lock().unwrap();
        let at = match p.rate {
            None => now,
            Some(r) => {
                let at = p.next.max(now);
                p.next = at + std::time::Duration::from_secs_f64(1.0 / r);
                at
            }
        };
        while p.sent.front().is_some_and(|t| at.saturating_duration_since(*t) > std::time::Duration::from_secs(1)) {
            p.sent.pop_front();
        }
        p.sent.push_back(at);
        (at, p.cuts)
    }
    fn cuts(&self) -> u64 {
        self.0.lock().unwrap().cuts
    }
    /// Wait for this request's turn. A slot handed out before a cut was spaced at the old pace:
    /// when it comes after a cut, the request takes a new one at the new pace, so that a cut
    /// slows the requests already waiting as well as later ones.
    pub async fn wait(&self) {
        let mut now = std::time::Instant::now();
        loop {
            let (at, cuts) = self.slot(now);
            if at > now {
                tokio::time::sleep_until(at.into()).await;
            }
            if self.cuts() == cuts {
                return;
            }
            now = std::time::Instant::now();
        }
    }
    /// AWS throttled a request: cut the pace (once a second at most).
    pub fn throttled(&self, now: std::time::Instant) {
        let mut p = self.0.lock().unwrap();
        if p.last_cut.is_some_and(|t| now.saturating_duration_since(t) < std::time::Duration::from_secs(1)) {
            return;
        }
        let current = p.rate.unwrap_or(p.sent.len() as f64);
        let rate = (current * DECREASE).max(MIN_RATE);
        p.rate = Some(rate);
        p.last_cut = Some(now);
        // The slots handed out so far are taken again (see `wait`): the new pace starts now.
        p.next = now;
        p.cuts += 1;
    }
    /// A request succeeded: grow the pace by `INCREASE` a second per second.
    pub fn succeeded(&self) {
        let mut p = self.0.lock().unwrap();
        if let Some(r) = p.rate {
            p.rate = Some(r + INCREASE / r);
        }
    }
    /// The current pace (None: unpaced).
    #[cfg(test)]
    pub fn rate(&self) -> Option<f64> {
        self.0.lock().unwrap().rate
    }
}

/// The pacers of one account, one per service, shared by its clusters.
#[derive(Clone, Debug, Default)]
pub struct AccountRates(Arc<Mutex<BTreeMap<String, Arc<Pacer>>>>);

impl AccountRates {
    /// The account's pacer for `service` (its signing name: iam, ec2, eks, sqs, events, sts, kms).
    pub fn of(&self, service: &str) -> Arc<Pacer> {
        self.0.lock().unwrap().entry(service.to_string()).or_default().clone()
    }
}

/// The retry partition of one cluster's clients: the cluster's own retry budget (`bucket`).
pub fn partition(service: &'static str, bucket: &TokenBucket) -> RetryPartition {
    RetryPartition::custom(format!("karpctl-{service}")).token_bucket(bucket.clone()).build()
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

/// Runs after the SDK's classifiers: see `budget`. It has no side effects: the SDK runs the
/// classifiers more than once per attempt (the connection-poisoning interceptor runs them too).
#[derive(Debug)]
pub struct AttemptBudget;

impl ClassifyRetry for AttemptBudget {
    fn classify_retry(&self, _ctx: &InterceptorContext) -> RetryAction {
        RetryAction::NoActionIndicated
    }
    fn classify_retry_v2(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        budget(previous, attempt_of(ctx)).0
    }
    fn name(&self) -> &'static str {
        "karpctl-attempt-budget"
    }
    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

/// Once per attempt, after it: asks the client's classifiers for their verdict, and tells the
/// service's pacer of a throttling answer (and counts it) or of a success.
#[derive(Debug)]
pub struct ThrottleWatch {
    pub service: &'static str,
    pub stats: Arc<CallStats>,
    pub pacer: Arc<Pacer>,
}

impl Intercept for ThrottleWatch {
    fn name(&self) -> &'static str {
        "karpctl-throttle-watch"
    }
    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let ctx = context.inner();
        let verdict = run_classifiers_on_ctx(rc.retry_classifiers(), ctx);
        if budget(&verdict, attempt_of(ctx)).1 {
            self.pacer.throttled(std::time::Instant::now());
            self.stats.throttled(self.service);
        } else if ctx.response().is_some_and(|r| r.status().is_success()) {
            self.pacer.succeeded();
        }
        Ok(())
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
    fn an_account_shares_one_pacer_per_service() {
        let rates = AccountRates::default();
        assert!(Arc::ptr_eq(&rates.of("iam"), &rates.of("iam")));
        assert!(!Arc::ptr_eq(&rates.of("iam"), &rates.of("ec2")));
    }

    #[test]
    fn the_pace_starts_at_the_first_throttle_and_moves_aimd() {
        use std::time::{Duration, Instant};
        let p = Pacer::default();
        let t0 = Instant::now();
        for _ in 0..20 {
            assert_eq!(p.slot(t0), (t0, 0), "unpaced until AWS throttles");
        }
        p.throttled(t0);
        assert_eq!(p.rate(), Some(14.0), "0.7 of the 20 sent in the last second");
        p.throttled(t0 + Duration::from_millis(500));
        assert_eq!(p.rate(), Some(14.0), "one cut a second: a burst's answers are one signal");
        p.throttled(t0 + Duration::from_millis(1500));
        assert!((p.rate().unwrap() - 9.8).abs() < 1e-9);
        let (a, _) = p.slot(t0 + Duration::from_millis(1500));
        let (b, _) = p.slot(t0 + Duration::from_millis(1500));
        assert!((b - a).as_secs_f64() - 1.0 / 9.8 < 1e-6, "requests spaced at the pace");
        for _ in 0..10 {
            p.succeeded();
        }
        assert!(
            p.rate().unwrap() > 10.5 && p.rate().unwrap() < 11.0,
            "about one a second more after ~10 successes: {:?}",
            p.rate()
        );
        for _ in 0..100 {
            p.throttled(t0 + Duration::from_secs(10_000));
        }
        assert!(p.rate().unwrap() >= MIN_RATE);
    }

    #[test]
    fn a_cut_reslots_the_requests_already_waiting() {
        use std::time::{Duration, Instant};
        let p = Pacer::default();
        let t0 = Instant::now();
        for _ in 0..10 {
            p.slot(t0);
        }
        p.throttled(t0);
        assert_eq!(p.rate(), Some(7.0));
        // Ten requests queue at 7 a second: the last one's slot is 9/7 s away.
        let queued: Vec<(Instant, u64)> = (0..10).map(|_| p.slot(t0)).collect();
        assert!(((queued[9].0 - t0).as_secs_f64() - 9.0 / 7.0).abs() < 1e-6);
        assert!(queued.iter().all(|(_, cuts)| *cuts == 1));
        // A cut 1 s after the first, while the last two still wait (slots at 1.14 s and 1.29 s).
        let cut = t0 + Duration::from_millis(1000);
        p.throttled(cut);
        assert_eq!(p.cuts(), 2, "each waiting request sees the cut when its slot comes");
        // The first to wake takes a new slot: at once, the new pace starting at the cut.
        let (again, cuts) = p.slot(queued[8].0);
        assert_eq!((again, cuts), (queued[8].0, 2));
        // The last one's new slot is one new spacing (1 / 4.9 s) after that, later than its old.
        let (last, _) = p.slot(queued[9].0);
        assert!(((last - again).as_secs_f64() - 1.0 / 4.9).abs() < 1e-6, "the new pace (7 x 0.7)");
        assert!(last > queued[9].0);
    }
}
