//! Throttling slows karpctl down instead of failing it (docs/ci.md, "A throttled account"): a pace
//! per account and service (`Pacer`, AIMD), more attempts for throttling than for other errors, a
//! retry budget per cluster and service, each throttle counted once, a full quota and Ctrl-C
//! never retried.

use super::stats::CallStats;
use aws_smithy_runtime::client::retries::classifiers::run_classifiers_on_ctx;
use aws_smithy_runtime::client::retries::{RetryPartition, TokenBucket};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    FinalizerInterceptorContextMut, FinalizerInterceptorContextRef, InterceptorContext,
};
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority, RetryReason};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::retry::ErrorKind;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Attempts for a call AWS throttles (the first one included).
pub const THROTTLE_ATTEMPTS: u32 = 16;
/// Attempts for a call that fails with another retryable error (5xx, a reset, a timeout).
pub const OTHER_ATTEMPTS: u32 = 8;

/// CloudTrail answers `LookupEvents` two times a second per account and Region and throttles
/// beyond (ThrottlingException); the account's pacer for `cloudtrail` starts at this rate.
pub const CLOUDTRAIL_LOOKUPS_PER_SECOND: f64 = 2.0;

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
    last_cut: Option<Instant>,
    /// When the requests of the last second went, while unpaced (the first cut is 0.7 of it).
    sent: std::collections::VecDeque<Instant>,
    /// The most the pace may grow to: a published per-account rate (`Pacer::start_at`).
    ceiling: Option<f64>,
}

/// The pace of one service's requests for one account (AIMD, see the module's notes). Once
/// paced, requests go single file through `line`, a fair (first come, first served) lock whose
/// holder waits out the spacing at the pace of the moment: a cut slows the requests already
/// waiting as much as later ones, a raise speeds them up, and no request is passed by a later
/// one. A request given up while it waits (an operation timeout) just leaves the line.
#[derive(Debug)]
pub struct Pacer {
    pace: Mutex<Pace>,
    /// When the last paced request went.
    line: tokio::sync::Mutex<Option<Instant>>,
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            pace: Mutex::new(Pace { rate: None, last_cut: None, sent: Default::default(), ceiling: None }),
            line: tokio::sync::Mutex::new(None),
        }
    }
}

/// When the request after one that went at `last` may go at `rate`, asked at `now`.
fn next_at(last: Option<Instant>, rate: f64, now: Instant) -> Instant {
    match last {
        Some(l) => (l + Duration::from_secs_f64(1.0 / rate)).max(now),
        None => now,
    }
}

impl Pacer {
    /// The pace (None: unpaced). While unpaced, counts a request sent at `now`.
    fn rate_or_send(&self, now: Instant) -> Option<f64> {
        let mut p = self.pace.lock().unwrap();
        if p.rate.is_none() {
            while p.sent.front().is_some_and(|t| now.saturating_duration_since(*t) > Duration::from_secs(1)) {
                p.sent.pop_front();
            }
            p.sent.push_back(now);
        }
        p.rate
    }
    /// Wait for this request's turn: true when it came, false when Ctrl-C stopped the run first
    /// (the request is then not sent).
    pub async fn wait(&self) -> bool {
        if self.rate_or_send(Instant::now()).is_none() {
            return true;
        }
        let mut last = tokio::select! {
            l = self.line.lock() => l,
            _ = crate::interrupt::stopped() => return false,
        };
        loop {
            let now = Instant::now();
            let Some(rate) = self.rate() else { return true };
            let at = next_at(*last, rate, now);
            if at <= now {
                // Keep the spacing exact when the wake-up was a little late; after an idle
                // spell, count from now (no burst is banked).
                let spacing = Duration::from_secs_f64(1.0 / rate);
                *last = Some(match *last {
                    Some(l) if now.saturating_duration_since(l + spacing) < spacing => l + spacing,
                    _ => now,
                });
                return true;
            }
            // The pace may change while this request sleeps: look again when it wakes.
            if !crate::interrupt::sleep(at.saturating_duration_since(now)).await {
                return false;
            }
        }
    }
    /// Pace from now on at `rate` at most, throttled or not: for an API whose per-account rate
    /// AWS publishes (CloudTrail `LookupEvents`: two a second), so that the first burst is not
    /// refused. Successes raise the pace no higher than `rate`; throttling still cuts it.
    pub fn start_at(&self, rate: f64) {
        let mut p = self.pace.lock().unwrap();
        let rate = rate.max(MIN_RATE);
        p.ceiling = Some(rate);
        p.rate = Some(p.rate.map_or(rate, |r| r.min(rate)));
    }
    /// AWS throttled a request: cut the pace (once a second at most).
    pub fn throttled(&self, now: Instant) {
        let mut p = self.pace.lock().unwrap();
        if p.last_cut.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        let current = p.rate.unwrap_or(p.sent.len() as f64);
        p.rate = Some((current * DECREASE).max(MIN_RATE));
        p.last_cut = Some(now);
        p.sent.clear();
    }
    /// A request succeeded: grow the pace by `INCREASE` a second per second.
    pub fn succeeded(&self) {
        let mut p = self.pace.lock().unwrap();
        if let Some(r) = p.rate {
            let grown = r + INCREASE / r;
            p.rate = Some(p.ceiling.map_or(grown, |c| grown.min(c)));
        }
    }
    /// The current pace (None: unpaced).
    pub fn rate(&self) -> Option<f64> {
        self.pace.lock().unwrap().rate
    }
}

/// The name of the pacer for `service`'s requests signed for `region`: the service's, except
/// CloudTrail, whose `LookupEvents` limit is per account and Region (`cloudtrail/us-east-1`).
pub fn pacer_key(service: &str, region: &str) -> String {
    match service {
        "cloudtrail" => format!("cloudtrail/{region}"),
        _ => service.to_string(),
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

/// The retry partition of one of a cluster's clients: a retry budget of its own, the SDK's
/// default for a service (500 tokens, 5 a retry, 10 a timeout's), so one cluster's retries never
/// spend another's, and one service's never another's. One budget shared by all of a cluster's
/// services ran dry within a run under steady server errors on every service (about 100
/// retries in all), where the SDK alone gives each service its own.
pub fn partition(service: &'static str) -> RetryPartition {
    RetryPartition::custom(format!("karpctl-{service}")).token_bucket(TokenBucket::default()).build()
}

/// The attempt number of a response, which `ThrottleWatch` attaches to it as a typed extension
/// (never a header: nothing on the wire, in logs or in error metadata carries it) for the
/// classifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Attempt(u32);

/// The attempt of the request being classified (1 when unknown). The SDK runs the retry
/// strategy's classifiers after it has taken the request (and its `amz-sdk-request: attempt=N`
/// header) out of the context, and gives a classifier no config bag (where `RequestAttempts`
/// is), so `ThrottleWatch` attaches the attempt to the response before they run
/// (`modify_before_attempt_completion` runs first; the unit test
/// `the_attempt_number_reaches_the_classifiers_through_the_response` pins that order). An
/// attempt without a response (a timeout, a reset) counts as the first: those are bounded by the
/// operation timeout instead.
fn attempt_of(ctx: &InterceptorContext) -> u32 {
    let from_response = ctx.response().and_then(|r| r.extension::<Attempt>()).map(|a| a.0);
    let from_request = || {
        ctx.request()
            .and_then(|r| r.headers().get("amz-sdk-request"))
            .and_then(|h| h.split(';').find_map(|p| p.trim().strip_prefix("attempt=")?.parse().ok()))
    };
    from_response.or_else(from_request).unwrap_or(1)
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

/// The AWS error code of an attempt's response (awsJson: the `x-amzn-ErrorType` header, else the
/// body's `__type` or `code`, without a namespace or a suffix), None without one.
fn error_code_of(ctx: &InterceptorContext) -> Option<String> {
    let r = ctx.response()?;
    if r.status().is_success() {
        return None;
    }
    let raw = match r.headers().get("x-amzn-ErrorType") {
        Some(h) => h.to_string(),
        None => {
            let body: serde_json::Value = serde_json::from_slice(r.body().bytes()?).ok()?;
            body.get("__type").or_else(|| body.get("code")).and_then(|v| v.as_str())?.to_string()
        }
    };
    let code = raw.rsplit('#').next().unwrap_or(&raw);
    Some(code.split(':').next().unwrap_or(code).to_string())
}

/// Runs last: a full quota of EventBridge or KMS (`LimitExceededException`, which the SDK's
/// standard classifier takes for throttling) is not retried. So it fails at once, with the quota
/// named (`error::quota_advice`), instead of after every throttling attempt; and since
/// `ThrottleWatch` asks the same classifiers, it neither cuts the pace nor counts as throttling.
#[derive(Debug)]
pub struct QuotaIsNotThrottling {
    pub service: &'static str,
}

impl QuotaIsNotThrottling {
    fn verdict(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        let quota = error_code_of(ctx).is_some_and(|code| super::error::quota_not_throttling(self.service, &code));
        match previous {
            RetryAction::RetryIndicated(_) if quota => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }
}

impl ClassifyRetry for QuotaIsNotThrottling {
    fn classify_retry(&self, _ctx: &InterceptorContext) -> RetryAction {
        RetryAction::NoActionIndicated
    }
    fn classify_retry_v2(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        self.verdict(ctx, previous)
    }
    fn name(&self) -> &'static str {
        "karpctl-quota-is-not-throttling"
    }
    fn priority(&self) -> RetryClassifierPriority {
        // After `AttemptBudget` (which runs after the SDK's classifiers).
        RetryClassifierPriority::run_after(AttemptBudget.priority())
    }
}

thread_local! {
    /// Set by `StopRetries` when it lets a retry through: the SDK asks for that retry's back-off
    /// sleep right after its classifiers, on the same thread and in the same poll, so the next
    /// sleep `StopSleep` is asked for here is the back-off, which Ctrl-C may cut short.
    static BACKOFF_NEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The most a back-off lasts (the clients' `max_backoff`): a longer sleep is a timeout's, never
/// cut short.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What the last classifier makes of the verdict before it once Ctrl-C stopped the run
/// (`stopping`): no retry. Else whether the next sleep is a retry's back-off.
fn after_stop(previous: &RetryAction, stopping: bool) -> (RetryAction, bool) {
    match previous {
        RetryAction::RetryIndicated(_) if stopping => (RetryAction::RetryForbidden, false),
        RetryAction::RetryIndicated(_) => (RetryAction::NoActionIndicated, true),
        _ => (RetryAction::NoActionIndicated, false),
    }
}

/// Ctrl-C stops retries (docs/how-it-works.md, "Ctrl-C"): as the last classifier it forbids any
/// retry once the run is stopped; as an interceptor it refuses a retry attempt that a back-off
/// cut short would otherwise send. Either way the step the call belongs to is stopped, not failed
/// (`interrupt::watched`).
#[derive(Debug)]
pub struct StopRetries;

impl ClassifyRetry for StopRetries {
    fn classify_retry(&self, _ctx: &InterceptorContext) -> RetryAction {
        RetryAction::NoActionIndicated
    }
    fn classify_retry_v2(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        let (action, backoff) = after_stop(previous, crate::interrupt::stopping());
        if action == RetryAction::RetryForbidden {
            crate::interrupt::reached();
        }
        // The last attempt's verdict is not followed by a back-off: never mark it.
        if backoff && attempt_of(ctx) < THROTTLE_ATTEMPTS {
            BACKOFF_NEXT.with(|b| b.set(true));
        }
        action
    }
    fn name(&self) -> &'static str {
        "karpctl-stop-retries"
    }
    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(QuotaIsNotThrottling { service: "" }.priority())
    }
}

impl Intercept for StopRetries {
    fn name(&self) -> &'static str {
        "karpctl-stop-retries"
    }
    fn read_before_execution(
        &self,
        _context: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // A mark no back-off took (the SDK decided against the retry) ends here.
        BACKOFF_NEXT.with(|b| b.set(false));
        Ok(())
    }
    fn read_before_attempt(
        &self,
        _context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let retry = cfg.load::<RequestAttempts>().is_some_and(|a| a.attempts() > 1);
        if retry && crate::interrupt::stopping() {
            crate::interrupt::reached();
            return Err(crate::interrupt::Stopped.to_string().into());
        }
        Ok(())
    }
}

/// The clients' sleep: the SDK's back-off between attempts ends early when Ctrl-C stops the run
/// (then `StopRetries` refuses the attempt); every other sleep (timeouts) is a plain one.
#[derive(Debug, Default)]
pub struct StopSleep;

impl aws_sdk_sts::config::AsyncSleep for StopSleep {
    fn sleep(&self, d: Duration) -> aws_sdk_sts::config::Sleep {
        let backoff = BACKOFF_NEXT.with(|b| b.replace(false)) && d <= MAX_BACKOFF;
        if !backoff {
            return aws_sdk_sts::config::Sleep::new(tokio::time::sleep(d));
        }
        aws_sdk_sts::config::Sleep::new(async move {
            let until = tokio::time::Instant::now() + d;
            // Polled rather than woken: the SDK wants a `Sync` future.
            while !crate::interrupt::stopping() {
                let now = tokio::time::Instant::now();
                if now >= until {
                    return;
                }
                tokio::time::sleep((until - now).min(Duration::from_millis(100))).await;
            }
            crate::interrupt::reached();
        })
    }
}

/// Once per attempt, after it (the SDK runs the classifiers more than once per attempt, so they
/// never count): attaches the attempt number for the classifiers (`attempt_of`), asks them for
/// their verdict, and tells the service's pacer of a throttling answer (counted) or a success.
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
    fn modify_before_attempt_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let attempt = cfg.load::<RequestAttempts>().map(|a| a.attempts());
        if let (Some(a), Some(r)) = (attempt, context.response_mut()) {
            r.add_extension(Attempt(a));
        }
        Ok(())
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
            self.pacer.throttled(Instant::now());
            self.stats.throttled(self.service);
        } else if ctx.response().is_some_and(|r| r.status().is_success()) {
            self.pacer.succeeded();
        }
        Ok(())
    }
}

/// A canned AWS JSON answer for the unit tests' HTTP connectors (no network).
#[cfg(test)]
pub(crate) fn json_answer(status: u16, body: String) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
    aws_smithy_runtime_api::client::http::HttpConnectorFuture::new(async move {
        let mut r =
            aws_smithy_runtime_api::http::Response::new(status.try_into().unwrap(), aws_smithy_types::body::SdkBody::from(body));
        r.headers_mut().insert("content-type", "application/x-amz-json-1.1");
        Ok(r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_stopped_nothing_is_retried_and_a_retry_marks_its_back_off() {
        let throttled = RetryAction::throttling_error();
        assert_eq!(after_stop(&throttled, false), (RetryAction::NoActionIndicated, true));
        assert_eq!(after_stop(&RetryAction::server_error(), true), (RetryAction::RetryForbidden, false));
        assert_eq!(after_stop(&throttled, true), (RetryAction::RetryForbidden, false));
        assert_eq!(after_stop(&RetryAction::NoActionIndicated, true), (RetryAction::NoActionIndicated, false));
        assert_eq!(after_stop(&RetryAction::RetryForbidden, false), (RetryAction::NoActionIndicated, false));
    }

    #[tokio::test]
    async fn only_the_marked_sleep_is_a_back_off() {
        use aws_sdk_sts::config::AsyncSleep;
        // Unmarked (a timeout's): a plain sleep. Marked: the back-off, which takes the mark.
        let t = Instant::now();
        StopSleep.sleep(Duration::from_millis(30)).await;
        BACKOFF_NEXT.with(|b| b.set(true));
        let backoff = StopSleep.sleep(Duration::from_millis(30));
        assert!(!BACKOFF_NEXT.with(|b| b.get()), "the back-off took the mark");
        backoff.await;
        assert!(t.elapsed() >= Duration::from_millis(60), "both slept their time while the run goes on");
        BACKOFF_NEXT.with(|b| b.set(true));
        let _long = StopSleep.sleep(MAX_BACKOFF + Duration::from_secs(1));
        assert!(!BACKOFF_NEXT.with(|b| b.get()), "a longer sleep takes the mark but is a timeout's");
    }

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

    use aws_smithy_runtime_api::client::http::{HttpConnector, HttpConnectorFuture, SharedHttpConnector};
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An EventBridge (or KMS) endpoint that answers every call `status` (400 unless set) with
    /// `code`, counting them.
    #[derive(Debug, Clone)]
    struct Refuses {
        code: &'static str,
        status: u16,
        calls: Arc<AtomicUsize>,
    }

    impl HttpConnector for Refuses {
        fn call(&self, _request: HttpRequest) -> HttpConnectorFuture {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let body =
                format!(r#"{{"__type":"{}","message":"The requested resource exceeds the maximum number allowed."}}"#, self.code);
            super::json_answer(self.status, body)
        }
    }

    /// A PutRule sent through the classifiers and interceptor `aws::connect` gives every client,
    /// to an endpoint answering `code`: how many attempts it made, and what was counted.
    async fn put_rule_answered(service: &'static str, code: &'static str) -> (usize, Arc<CallStats>, Arc<Pacer>) {
        put_rule_answered_with(service, code, 400, 4).await
    }

    /// `put_rule_answered` with the answer's `status` and the client's `max_attempts`.
    async fn put_rule_answered_with(
        service: &'static str,
        code: &'static str,
        status: u16,
        max_attempts: u32,
    ) -> (usize, Arc<CallStats>, Arc<Pacer>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let connector = Refuses { code, status, calls: calls.clone() };
        let (stats, pacer) = (Arc::new(CallStats::default()), Arc::new(Pacer::default()));
        let conf = aws_sdk_eventbridge::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
            .region(aws_sdk_eventbridge::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_eventbridge::config::Credentials::new("AKID", "SECRET", None, None, "test"))
            .endpoint_url("http://127.0.0.1:9")
            .retry_config(
                aws_config::retry::RetryConfig::standard()
                    .with_max_attempts(max_attempts)
                    .with_initial_backoff(Duration::from_millis(1))
                    .with_max_backoff(Duration::from_millis(2)),
            )
            .http_client(aws_smithy_runtime_api::client::http::http_client_fn(move |_, _| {
                SharedHttpConnector::new(connector.clone())
            }))
            .retry_classifier(AttemptBudget)
            .retry_classifier(QuotaIsNotThrottling { service })
            .interceptor(ThrottleWatch { service, stats: stats.clone(), pacer: pacer.clone() })
            .build();
        let e = aws_sdk_eventbridge::Client::from_conf(conf).put_rule().name("r").send().await.expect_err("refused");
        assert_eq!(aws_smithy_types::error::metadata::ProvideErrorMetadata::code(&e), Some(code));
        (calls.load(Ordering::SeqCst), stats, pacer)
    }

    #[tokio::test]
    async fn a_full_quota_fails_at_once_and_is_neither_throttling_nor_a_cut_of_the_pace() {
        let (attempts, stats, pacer) = put_rule_answered("events", "LimitExceededException").await;
        assert_eq!(attempts, 1, "one attempt: retrying a full quota cannot help");
        assert!(stats.report().throttled.is_empty(), "not counted as throttling");
        assert_eq!(pacer.rate(), None, "the pace is not cut");
        // The SDK's own verdict, for contrast: ThrottlingException is throttling.
        let (attempts, stats, pacer) = put_rule_answered("events", "ThrottlingException").await;
        assert_eq!(attempts, 4, "throttling is retried up to the attempts allowed");
        assert_eq!(stats.report().throttled.get("events").map(|t| t.answers), Some(4));
        assert!(pacer.rate().is_some());
        // Where the code would mean a rate (no karpctl service), the SDK's verdict stands.
        let (attempts, stats, _) = put_rule_answered("other", "LimitExceededException").await;
        assert_eq!((attempts, stats.report().throttled.len()), (4, 1));
    }

    /// Pins the SDK behaviour `attempt_of` relies on: `ThrottleWatch`'s
    /// `modify_before_attempt_completion` runs before the retry strategy's classifiers, which see
    /// the response it attached the attempt to. Were the attempt lost (every attempt taken for
    /// the first), a server error would get all `THROTTLE_ATTEMPTS` instead of `OTHER_ATTEMPTS`.
    #[tokio::test]
    async fn the_attempt_number_reaches_the_classifiers_through_the_response() {
        let (attempts, stats, _) = put_rule_answered_with("events", "InternalException", 500, THROTTLE_ATTEMPTS).await;
        assert_eq!(attempts, OTHER_ATTEMPTS as usize, "a server error stops at its budget, below the SDK's maximum");
        assert!(stats.report().throttled.is_empty());
        let (attempts, ..) = put_rule_answered_with("events", "ThrottlingException", 400, THROTTLE_ATTEMPTS).await;
        assert_eq!(attempts, THROTTLE_ATTEMPTS as usize, "throttling keeps every attempt");
    }

    #[test]
    fn an_account_shares_one_pacer_per_service() {
        let rates = AccountRates::default();
        assert!(Arc::ptr_eq(&rates.of("iam"), &rates.of("iam")));
        assert!(!Arc::ptr_eq(&rates.of("iam"), &rates.of("ec2")));
    }

    #[test]
    fn the_pace_starts_at_the_first_throttle_and_moves_aimd() {
        let p = Pacer::default();
        let t0 = Instant::now();
        for _ in 0..20 {
            assert_eq!(p.rate_or_send(t0), None, "unpaced until AWS throttles");
        }
        p.throttled(t0);
        assert_eq!(p.rate(), Some(14.0), "0.7 of the 20 sent in the last second");
        p.throttled(t0 + Duration::from_millis(500));
        assert_eq!(p.rate(), Some(14.0), "one cut a second: a burst's answers are one signal");
        p.throttled(t0 + Duration::from_millis(1500));
        assert!((p.rate().unwrap() - 9.8).abs() < 1e-9);
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
    fn a_pace_started_at_a_published_rate_never_grows_past_it() {
        let p = Pacer::default();
        p.start_at(2.0);
        assert_eq!(p.rate(), Some(2.0), "paced from the first request");
        for _ in 0..10 {
            p.succeeded();
        }
        assert_eq!(p.rate(), Some(2.0), "successes do not raise it past the published rate");
        p.throttled(Instant::now());
        assert!((p.rate().unwrap() - 1.4).abs() < 1e-9, "throttling still cuts it: {:?}", p.rate());
        p.succeeded();
        assert!(p.rate().unwrap() <= 2.0 && p.rate().unwrap() > 1.4);
    }

    #[test]
    fn requests_are_spaced_at_the_pace_of_the_moment() {
        let t0 = Instant::now();
        assert_eq!(next_at(None, 10.0, t0), t0, "the first goes at once");
        let last = t0 + Duration::from_millis(50);
        assert_eq!(next_at(Some(last), 10.0, t0), last + Duration::from_millis(100));
        assert_eq!(next_at(Some(last), 5.0, t0), last + Duration::from_millis(200), "a cut spaces the next one further");
        assert_eq!(next_at(Some(t0), 10.0, t0 + Duration::from_secs(5)), t0 + Duration::from_secs(5), "idle: at once");
    }

    #[tokio::test]
    async fn waiting_requests_go_single_file_in_the_order_they_asked() {
        let p = Arc::new(Pacer::default());
        p.rate_or_send(Instant::now());
        p.throttled(Instant::now());
        // Paced at MIN_RATE (1 a second) would take seconds: raise it to about 200 a second.
        for _ in 0..40_000 {
            p.succeeded();
        }
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let (p, order) = (p.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                p.wait().await;
                order.lock().unwrap().push(i);
            }));
            // Each asks after the one before (a yield lets it reach the line).
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }
}
