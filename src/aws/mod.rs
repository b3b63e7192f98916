//! AWS client construction, call accounting, error classification and the eventual-consistency
//! retry helper.

pub mod error;

use crate::events::{Event, Reporter};
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
pub use error::{AwsError, Classify, Condition, ErrorKind, aws_error_in, is_refused, refusal_in};
pub mod prio;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls made, by service and operation. Attempts beyond the first are counted as retries.
/// With tracing on (`--stats`, or KARPCTL_TRACE=1), also every call with the unit of work that
/// made it (see [`in_unit`]) and when it started and ended.
#[derive(Debug)]
pub struct CallStats {
    inner: Mutex<BTreeMap<(String, String), OpCount>>,
    /// None: tracing off (a normal run keeps no trace).
    trace: Mutex<Option<Vec<TraceCall>>>,
    /// The unit of a call made outside any `in_unit` scope (a task spawned without one): the
    /// phase running at the time.
    phase: Mutex<Arc<str>>,
}

impl Default for CallStats {
    fn default() -> Self {
        CallStats { inner: Default::default(), trace: Mutex::new(None), phase: Mutex::new(Arc::from("prepare")) }
    }
}

tokio::task_local! {
    /// The unit of work the current task's AWS calls belong to: `read:<node id>`, `step:<step
    /// id>`, or a phase (`prepare:account`, `preflight`, `discovery:unlisted`, ...). Interceptor
    /// hooks run inside the `send().await` future, so they see it; spawned tasks do not inherit
    /// it, so each spawned future sets its own.
    static UNIT: Arc<str>;
}

/// Run `f` with its AWS calls attributed to `unit`.
pub async fn in_unit<F: std::future::Future>(unit: impl Into<Arc<str>>, f: F) -> F::Output {
    UNIT.scope(unit.into(), f).await
}

/// The instant trace offsets count from: the start of the run (set by `prepare`, the first thing
/// a command does after parsing its arguments).
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

pub fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// One traced call: its unit, `Service:Operation`, start and end (after the SDK's own retries)
/// since [`epoch`], and the HTTP status when it failed (0: no response).
#[derive(Debug, Clone)]
pub struct TraceCall {
    pub unit: Arc<str>,
    pub op: String,
    pub start: Duration,
    pub end: Duration,
    pub failed: Option<u16>,
}

/// Serialised as `["SQS:CreateQueue", 12.1, 30.5]` (ms, 0.1 ms resolution), with the HTTP status
/// as a fourth element when the call failed.
impl Serialize for TraceCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        let mut seq = s.serialize_seq(Some(if self.failed.is_some() { 4 } else { 3 }))?;
        seq.serialize_element(&self.op)?;
        seq.serialize_element(&ms(self.start))?;
        seq.serialize_element(&ms(self.end))?;
        if let Some(st) = self.failed {
            seq.serialize_element(&st)?;
        }
        seq.end()
    }
}

/// Put in the operation's config bag when it starts (tracing only).
#[derive(Debug, Clone)]
struct CallStart {
    unit: Arc<str>,
    at: Instant,
}

impl Storable for CallStart {
    type Storer = StoreReplace<Self>;
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct OpCount {
    pub calls: u64,
    pub attempts: u64,
}

/// Operations that only read. Everything else counts as a write.
pub fn is_read_operation(op: &str) -> bool {
    ["Get", "List", "Describe", "Receive"].iter().any(|p| op.starts_with(p))
}

/// The calls of this process, so that an error report can say how many writes happened.
pub static STATS: std::sync::OnceLock<Arc<CallStats>> = std::sync::OnceLock::new();

#[derive(Debug, Serialize)]
pub struct StatsReport {
    pub calls: u64,
    pub reads: u64,
    pub writes: u64,
    pub retries: u64,
    pub operations: BTreeMap<String, OpCount>,
    /// With tracing on: per unit of work, its calls in the order they started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<BTreeMap<String, Vec<TraceCall>>>,
}

impl CallStats {
    fn bump(&self, cfg: &ConfigBag, attempt: bool) {
        let Some(md) = cfg.load::<Metadata>() else { return };
        let mut m = self.inner.lock().unwrap();
        let e = m.entry((md.service().to_string(), md.name().to_string())).or_default();
        if attempt {
            e.attempts += 1;
        } else {
            e.calls += 1;
        }
    }
    /// Keep a trace of every call from now on.
    pub fn enable_trace(&self) {
        self.trace.lock().unwrap().get_or_insert_with(Vec::new);
    }
    fn tracing(&self) -> bool {
        self.trace.lock().unwrap().is_some()
    }
    /// The unit of calls made outside any `in_unit` scope from now on.
    pub fn set_phase(&self, phase: &str) {
        *self.phase.lock().unwrap() = Arc::from(phase);
    }
    fn record(&self, cfg: &ConfigBag, failed: Option<u16>) {
        let (Some(md), Some(st)) = (cfg.load::<Metadata>(), cfg.load::<CallStart>()) else { return };
        let e = epoch();
        let call = TraceCall {
            unit: st.unit.clone(),
            op: format!("{}:{}", md.service(), md.name()),
            start: st.at.saturating_duration_since(e),
            end: Instant::now().saturating_duration_since(e),
            failed,
        };
        if let Some(t) = self.trace.lock().unwrap().as_mut() {
            t.push(call);
        }
    }
    /// Every traced call so far, by unit, each unit's calls in the order they started.
    pub fn trace(&self) -> Option<BTreeMap<String, Vec<TraceCall>>> {
        let t = self.trace.lock().unwrap();
        let mut out: BTreeMap<String, Vec<TraceCall>> = BTreeMap::new();
        for c in t.as_ref()? {
            out.entry(c.unit.to_string()).or_default().push(c.clone());
        }
        for calls in out.values_mut() {
            calls.sort_by_key(|c| (c.start, c.end));
        }
        Some(out)
    }
    pub fn report(&self) -> StatsReport {
        let trace = self.trace();
        let m = self.inner.lock().unwrap();
        let mut r = StatsReport { calls: 0, reads: 0, writes: 0, retries: 0, operations: BTreeMap::new(), trace };
        for ((svc, op), c) in m.iter() {
            r.calls += c.calls;
            if is_read_operation(op) {
                r.reads += c.calls;
            } else {
                r.writes += c.calls;
            }
            r.retries += c.attempts.saturating_sub(c.calls);
            r.operations.insert(format!("{svc}:{op}"), *c);
        }
        r
    }
}

#[derive(Debug, Clone)]
struct Counter(Arc<CallStats>);

impl Intercept for Counter {
    fn name(&self) -> &'static str {
        "karpctl-call-counter"
    }
    // Tracing: note the call's unit (the task-local of the task that awaits `send()`, where
    // this hook runs) and its start.
    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.0.tracing() {
            let unit = UNIT.try_with(|u| u.clone()).unwrap_or_else(|_| self.0.phase.lock().unwrap().clone());
            epoch(); // set before the first start, so that no offset is negative
            cfg.interceptor_state().store_put(CallStart { unit, at: Instant::now() });
        }
        Ok(())
    }
    // The operation's metadata is not in the config bag yet before execution: count each
    // call once it has finished (success or failure).
    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.bump(cfg, false);
        if self.0.tracing() {
            let failed = match context.output_or_error() {
                Some(Ok(_)) => None,
                _ => Some(context.response().map(|r| r.status().as_u16()).unwrap_or(0)),
            };
            self.0.record(cfg, failed);
        }
        Ok(())
    }
    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.bump(cfg, true);
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    pub region: String,
    pub profile: Option<String>,
    pub endpoint_url: Option<String>,
    pub max_attempts: u32,
    /// Most AWS requests in flight at once, across every client (`--concurrency`).
    pub max_in_flight: usize,
    /// Extra trusted CA certificates (PEM), from AWS_CA_BUNDLE: added to the system's roots.
    pub ca_bundle: Option<Vec<u8>>,
    /// A limiter shared with other clusters' clients of the same account (many clusters in one
    /// run: IAM's limits are per account); None: a new one of `max_in_flight` permits.
    pub limiter: Option<Limiter>,
    /// Assume this role (sts:AssumeRole, refreshed by the SDK) for every call.
    pub assume_role: Option<AssumeRoleOptions>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssumeRoleOptions {
    pub role_arn: String,
    pub external_id: Option<String>,
    pub session_name: String,
}

/// Requests on the wire now and at most so far, through one limiter.
#[derive(Debug, Default)]
pub struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

impl InFlight {
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The permits of a `LimitedClient` and its gauge; clone it to share both. A limiter may sit
/// inside an outer one (many clusters in one run: each cluster's `--concurrency` inside its
/// account's `--account-concurrency`): a request then holds a permit of each, the inner first.
#[derive(Clone, Debug)]
pub struct Limiter {
    /// Handed to EKS requests first when full (see `prio`).
    pub permits: Arc<prio::PrioSemaphore>,
    pub gauge: Arc<InFlight>,
    pub outer: Option<Arc<Limiter>>,
}

impl Limiter {
    pub fn new(max_in_flight: usize) -> Self {
        Limiter { permits: prio::PrioSemaphore::new(max_in_flight.max(1)), gauge: Default::default(), outer: None }
    }

    /// A limiter of its own `max_in_flight` whose requests also count against `outer`.
    pub fn inside(max_in_flight: usize, outer: &Limiter) -> Self {
        Limiter { outer: Some(Arc::new(outer.clone())), ..Limiter::new(max_in_flight) }
    }

    /// This limiter's and its outer ones': the permits to take, in order, and the gauges to count on.
    fn chain(&self) -> (Vec<Arc<prio::PrioSemaphore>>, Vec<Arc<InFlight>>) {
        let (mut permits, mut gauges) = (vec![self.permits.clone()], vec![self.gauge.clone()]);
        let mut next = self.outer.clone();
        while let Some(l) = next {
            permits.push(l.permits.clone());
            gauges.push(l.gauge.clone());
            next = l.outer.clone();
        }
        (permits, gauges)
    }
}

/// Counts the requests on the wire (inside the limiter, so after a permit is held).
#[derive(Debug)]
struct Gauged {
    inner: SharedHttpConnector,
    gauges: Vec<Arc<InFlight>>,
}

impl HttpConnector for Gauged {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        use std::sync::atomic::Ordering::SeqCst;
        let (inner, gauges) = (self.inner.clone(), self.gauges.clone());
        HttpConnectorFuture::new(async move {
            for gauge in &gauges {
                let n = gauge.now.fetch_add(1, SeqCst) + 1;
                gauge.peak.fetch_max(n, SeqCst);
            }
            let r = inner.call(request).await;
            for gauge in &gauges {
                gauge.now.fetch_sub(1, SeqCst);
            }
            r
        })
    }
}

/// The PEM file AWS_CA_BUNDLE names, as the AWS CLI reads it (the Rust SDK itself does not):
/// for TLS-inspecting proxies and private endpoints. Unreadable or empty: an error naming it.
pub fn ca_bundle_from_env() -> Result<Option<Vec<u8>>, crate::error::UserError> {
    let Some(path) = std::env::var_os("AWS_CA_BUNDLE").filter(|p| !p.is_empty()) else { return Ok(None) };
    let shown = std::path::Path::new(&path).display().to_string();
    match std::fs::read(&path) {
        Ok(b) if String::from_utf8_lossy(&b).contains("-----BEGIN CERTIFICATE-----") => Ok(Some(b)),
        Ok(_) => Err(crate::error::UserError::new(format!("AWS_CA_BUNDLE={shown} holds no PEM certificate"))
            .hint("point AWS_CA_BUNDLE at a PEM file of CA certificates, or unset it")),
        Err(e) => Err(crate::error::UserError::new(format!("AWS_CA_BUNDLE={shown} cannot be read: {e}"))
            .hint("point AWS_CA_BUNDLE at a readable PEM file of CA certificates, or unset it")),
    }
}

/// An HTTP client that lets at most `permits` requests be on the wire at once, across every
/// service client built on it. A request holds its permit only while it is sent and its response
/// head received; retry back-off and karpctl's own waiting hold none, so nothing can deadlock on
/// it. This is what makes `--concurrency 1` mean one AWS call at a time.
#[derive(Clone, Debug)]
pub struct LimitedClient {
    inner: SharedHttpClient,
    limiter: Limiter,
}

impl LimitedClient {
    /// A client whose requests count against `limiter`, shared with other clients.
    pub fn shared(inner: SharedHttpClient, limiter: Limiter) -> Self {
        LimitedClient { inner, limiter }
    }
}

#[derive(Debug)]
struct LimitedConnector {
    inner: SharedHttpConnector,
    permits: Vec<Arc<prio::PrioSemaphore>>,
}

impl HttpConnector for LimitedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, permits) = (self.inner.clone(), self.permits.clone());
        HttpConnectorFuture::new(async move {
            // Inner (the cluster's) first, then the outer (the account's): every request takes
            // them in the same order, so none can hold an outer permit while it waits for an
            // inner one. EKS requests are served first when a limiter is full (see `prio`); the
            // request is signed by now, its Authorization header names the service.
            let service = request.headers().get("authorization").and_then(prio::signing_service).unwrap_or("");
            let priority = prio::priority_of(service);
            let mut held = Vec::with_capacity(permits.len());
            for p in &permits {
                held.push(p.acquire(priority).await);
            }
            inner.call(request).await
        })
    }
}

impl HttpClient for LimitedClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        let (permits, gauges) = self.limiter.chain();
        let gauged = Gauged { inner: self.inner.http_connector(settings, components), gauges };
        SharedHttpConnector::new(LimitedConnector { inner: SharedHttpConnector::new(gauged), permits })
    }
    /// Not passed on: the SDK's HTTPS client answers it by building a whole connector (loading
    /// and parsing the system's root certificates) and throwing it away, for each service client
    /// built on it: six per cluster, most of karpctl's start-up time. The connector is built once,
    /// at the first request, by the process-wide client (`default_https_client`).
    fn validate_base_client_config(&self, _: &RuntimeComponentsBuilder, _: &ConfigBag) -> Result<(), BoxError> {
        Ok(())
    }
    fn validate_final_config(&self, rc: &RuntimeComponents, cfg: &ConfigBag) -> Result<(), BoxError> {
        self.inner.validate_final_config(rc, cfg)
    }
    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

/// The SDK's default HTTPS client (hyper 1 with rustls on aws-lc, the system's trusted roots plus
/// any `ca_bundle`, proxy settings from the environment), built here so that it can be wrapped
/// in a `LimitedClient`. One per process (per CA bundle): every cluster of a many-cluster run
/// shares its connectors (root certificates loaded once) and its pool of idle connections;
/// each cluster's `LimitedClient` keeps its own limits around it.
fn default_https_client(ca_bundle: Option<Vec<u8>>) -> SharedHttpClient {
    static SHARED: std::sync::OnceLock<std::sync::Mutex<HashMap<Option<Vec<u8>>, SharedHttpClient>>> = std::sync::OnceLock::new();
    let mut shared = SHARED.get_or_init(Default::default).lock().unwrap();
    shared.entry(ca_bundle).or_insert_with_key(|ca| build_https_client(ca.clone())).clone()
}

fn build_https_client(ca_bundle: Option<Vec<u8>>) -> SharedHttpClient {
    use aws_smithy_http_client::proxy::ProxyConfig;
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
    use aws_smithy_http_client::{Builder, ConnectorBuilder};
    let trust = ca_bundle.map(|pem| TrustStore::default().with_pem_certificate(pem));
    Builder::new().build_with_connector_fn(move |settings, components| {
        let mut conn = ConnectorBuilder::default().tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc));
        if let Some(t) = &trust
            && let Ok(ctx) = TlsContext::builder().with_trust_store(t.clone()).build()
        {
            conn = conn.tls_context(ctx);
        }
        conn.set_connector_settings(settings.cloned());
        if let Some(c) = components {
            conn.set_sleep_impl(c.sleep_impl());
        }
        conn.set_proxy_config(Some(ProxyConfig::from_env()));
        conn.build()
    })
}

#[derive(Clone, Debug)]
pub struct Clients {
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub eks: aws_sdk_eks::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub sts: aws_sdk_sts::Client,
    /// Only for SSE-KMS interruption queues (`interruption.kms_key_id`).
    pub kms: aws_sdk_kms::Client,
}

/// Build every client from one shared config: pinned behaviour version, the region always set,
/// standard retries with more attempts than the default, timeouts, the request limiter, and the
/// call counter on each client.
///
/// Timeouts: a request waiting for its turn in the `LimitedClient` is inside the SDK's transmit
/// phase, so nothing that times the whole attempt may run while it waits. A request on the wire
/// gets 5 s to connect and 30 s to its response head (both inside the inner connector, after
/// the wait); an operation, waits and retries included, gets 120 s. The SDK's stalled-upload
/// check is off (it would count the wait as a stalled body; karpctl's request bodies are a few
/// KiB, sent in one write), its stalled-download check stays on.
pub async fn connect(opts: &ConnectOptions, stats: Arc<CallStats>) -> Clients {
    let retry = RetryConfig::standard()
        .with_max_attempts(opts.max_attempts.max(1))
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(Duration::from_secs(10));
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(120))
        .build();
    let stalled = StalledStreamProtectionConfig::enabled().upload_enabled(false).grace_period(Duration::from_secs(5)).build();
    let mut loader = aws_config::defaults(BehaviorVersion::v2026_01_12())
        .region(aws_config::Region::new(opts.region.clone()))
        .retry_config(retry)
        .timeout_config(timeouts)
        .stalled_stream_protection(stalled)
        .http_client(LimitedClient::shared(
            default_https_client(opts.ca_bundle.clone()),
            opts.limiter.clone().unwrap_or_else(|| Limiter::new(opts.max_in_flight)),
        ));
    if let Some(p) = &opts.profile {
        loader = loader.profile_name(p);
    }
    if let Some(e) = &opts.endpoint_url {
        loader = loader.endpoint_url(e);
    }
    let mut conf = loader.load().await;
    if let Some(r) = &opts.assume_role {
        // The base credentials (chain, profile) sign AssumeRole; every client then uses the role's
        // credentials, cached and refreshed before they expire by the SDK's identity cache.
        let mut b = aws_config::sts::AssumeRoleProvider::builder(&r.role_arn).session_name(&r.session_name).configure(&conf);
        if let Some(x) = &r.external_id {
            b = b.external_id(x);
        }
        let provider = b.build().await;
        conf = conf.into_builder().credentials_provider(aws_types::sdk_config::SharedCredentialsProvider::new(provider)).build();
    }
    let counter = Counter(stats);
    macro_rules! client {
        ($krate:ident) => {
            $krate::Client::from_conf($krate::config::Builder::from(&conf).interceptor(counter.clone()).build())
        };
    }
    Clients {
        iam: client!(aws_sdk_iam),
        sqs: client!(aws_sdk_sqs),
        events: client!(aws_sdk_eventbridge),
        eks: client!(aws_sdk_eks),
        ec2: client!(aws_sdk_ec2),
        sts: client!(aws_sdk_sts),
        kms: client!(aws_sdk_kms),
    }
}

/// An AWS error turned into an [`AwsError`] (operation, code, message, class) inside anyhow.
pub fn aws_err<E>(
    op: &str,
    e: aws_smithy_runtime_api::client::result::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> anyhow::Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match e.code() {
        Some(c) => {
            let message = e.message().unwrap_or("").to_string();
            anyhow::Error::new(AwsError { operation: op.to_string(), code: c.to_string(), kind: e.kind(), message })
        }
        None => anyhow::Error::new(e).context(format!("{op} failed")),
    }
}

/// Settings for the consistency retry loop. The schedule polls often while AWS is most likely to
/// become ready (every `fast` for the first `fast_for`: IAM changes typically reach EKS within 2
/// to 10 s, and a poll of these cheap calls costs little), then backs off exponentially from
/// `initial` to `max` until `deadline`. Exponential backoff from the start would overshoot the
/// moment AWS is ready by as much again as the wait itself (docs/aws-behaviour.md section 9).
#[derive(Clone, Debug)]
pub struct ConsistencyPolicy {
    pub deadline: Duration,
    pub fast: Duration,
    pub fast_for: Duration,
    pub initial: Duration,
    pub max: Duration,
}

impl Default for ConsistencyPolicy {
    fn default() -> Self {
        let secs = std::env::var("KARPCTL_CONSISTENCY_DEADLINE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
        ConsistencyPolicy {
            deadline: Duration::from_secs(secs),
            fast: Duration::from_millis(250),
            fast_for: Duration::from_secs(10),
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl ConsistencyPolicy {
    /// The pause before the next attempt, `elapsed` after the first one and `slow` pauses into the
    /// back-off phase.
    pub fn next_delay(&self, elapsed: Duration, slow: &mut u32) -> Duration {
        if elapsed < self.fast_for {
            return self.fast;
        }
        let d = self.initial.saturating_mul(1u32 << (*slow).min(16)).min(self.max);
        *slow += 1;
        d
    }
}

/// How often a retry or a wait is shown while it goes on, after the first ones: the fast polls
/// would otherwise print four lines a second.
const SHOW_EVERY: Duration = Duration::from_secs(3);
/// Every one of the first retries of a call is shown.
const SHOW_FIRST: u32 = 5;

/// Poll `check` on the consistency schedule until it answers true (Ok(true)) or the deadline
/// passes (Ok(false)): for AWS changes that succeed at once but show late (SQS attributes, a
/// deleted queue). Progress is reported as `waiting for <what>`.
pub async fn wait_until<F, Fut>(
    policy: &ConsistencyPolicy,
    reporter: &dyn Reporter,
    step_id: &str,
    what: &str,
    mut check: F,
) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    let mut slow = 0;
    let mut shown: Option<Instant> = None;
    loop {
        if check().await? {
            return Ok(true);
        }
        let delay = policy.next_delay(start.elapsed(), &mut slow);
        if start.elapsed() + delay > policy.deadline {
            return Ok(false);
        }
        if shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
            reporter.event(Event::Waiting { id: step_id, what, elapsed: start.elapsed() });
            shown = Some(Instant::now());
        }
        tokio::time::sleep(delay).await;
    }
}

/// Run `f` again while it fails with one of the `retryable` conditions (the eventual-consistency
/// kind that deserves a retry with a deadline, docs/aws-behaviour.md section 5), with exponential
/// backoff, until the deadline. Each retry is reported (operation, code, attempt, elapsed).
pub async fn with_consistency<T, E, F, Fut>(
    policy: &ConsistencyPolicy,
    reporter: &dyn Reporter,
    step_id: &str,
    operation: &str,
    retryable: &[Condition],
    mut f: F,
) -> Result<T, E>
where
    E: Classify,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    let mut slow = 0;
    let mut attempt = 1u32;
    let mut shown: Option<Instant> = None;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let delay = policy.next_delay(start.elapsed(), &mut slow);
                if !e.is_any(retryable) || start.elapsed() + delay > policy.deadline {
                    return Err(e);
                }
                if attempt <= SHOW_FIRST || shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
                    let code = e.raw_code();
                    reporter.event(Event::Retrying { id: step_id, operation, code, attempt, elapsed: start.elapsed() });
                    shown = Some(Instant::now());
                }
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// The partition of a region, from its name (a fallback: the caller's ARN is the authority).
pub fn partition(region: &str) -> &'static str {
    const PREFIXES: [(&str, &str); 7] = [
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-iso-", "aws-iso"),
        ("us-isob-", "aws-iso-b"),
        ("eu-isoe-", "aws-iso-e"),
        ("us-isof-", "aws-iso-f"),
        ("eusc-", "aws-eusc"),
    ];
    PREFIXES.iter().find(|(p, _)| region.starts_with(p)).map(|(_, part)| *part).unwrap_or("aws")
}

/// The partition in an ARN (`arn:aws-cn:sts::1:assumed-role/...` -> `aws-cn`).
pub fn partition_of_arn(arn: &str) -> Option<&str> {
    let mut parts = arn.split(':');
    match (parts.next(), parts.next()) {
        (Some("arn"), Some(p)) if !p.is_empty() && p.starts_with("aws") => Some(p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_come_from_the_caller_arn_and_else_the_region() {
        assert_eq!(partition_of_arn("arn:aws-cn:sts::123456789012:assumed-role/r/s"), Some("aws-cn"));
        assert_eq!(partition_of_arn("arn:aws-eusc:iam::123456789012:user/u"), Some("aws-eusc"));
        assert_eq!(partition_of_arn("arn:aws:iam::123456789012:root"), Some("aws"));
        assert_eq!(partition_of_arn("not-an-arn"), None);
        assert_eq!(partition_of_arn(""), None);
        for (region, p) in [
            ("us-east-1", "aws"),
            ("cn-north-1", "aws-cn"),
            ("us-gov-west-1", "aws-us-gov"),
            ("us-iso-east-1", "aws-iso"),
            ("us-isob-east-1", "aws-iso-b"),
            ("eu-isoe-west-1", "aws-iso-e"),
            ("us-isof-south-1", "aws-iso-f"),
            ("eusc-de-east-1", "aws-eusc"),
        ] {
            assert_eq!(partition(region), p, "{region}");
        }
    }

    #[test]
    fn the_consistency_schedule_polls_fast_first_then_backs_off() {
        let p = ConsistencyPolicy::default();
        let mut slow = 0;
        // Fast polls for the first ten seconds: AWS is most likely to become ready then.
        assert_eq!(p.next_delay(Duration::ZERO, &mut slow), Duration::from_millis(250));
        assert_eq!(p.next_delay(Duration::from_millis(9_900), &mut slow), Duration::from_millis(250));
        assert_eq!(slow, 0);
        // Then exponential from one second, capped.
        let later: Vec<u64> = (0..6).map(|_| p.next_delay(Duration::from_secs(11), &mut slow).as_millis() as u64).collect();
        assert_eq!(later, [1000, 2000, 4000, 8000, 10000, 10000]);
    }
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A connector that answers 200 after 10 ms and records how many calls overlapped.
    #[derive(Debug, Clone, Default)]
    struct Slow {
        now: Arc<AtomicUsize>,
        peak: Arc<AtomicUsize>,
    }

    impl HttpConnector for Slow {
        fn call(&self, _request: HttpRequest) -> HttpConnectorFuture {
            let s = self.clone();
            HttpConnectorFuture::new(async move {
                let n = s.now.fetch_add(1, Ordering::SeqCst) + 1;
                s.peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                Ok(aws_smithy_runtime_api::http::Response::new(
                    200u16.try_into().unwrap(),
                    aws_smithy_types::body::SdkBody::empty(),
                ))
            })
        }
    }

    #[tokio::test]
    async fn limited_connector_keeps_at_most_n_requests_in_flight() {
        for limit in [1, 3] {
            let slow = Slow::default();
            let conn = LimitedConnector {
                inner: SharedHttpConnector::new(slow.clone()),
                permits: vec![prio::PrioSemaphore::new(limit)],
            };
            let calls = (0..9).map(|_| conn.call(HttpRequest::empty()));
            let results = futures::future::join_all(calls).await;
            assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| r.status().as_u16() == 200)));
            assert_eq!(slow.peak.load(Ordering::SeqCst), limit, "limit {limit}");
        }
    }

    /// Clusters of one account: each keeps its own limit, and together they keep the account's.
    #[tokio::test]
    async fn nested_limiters_keep_each_cluster_and_the_account_within_their_limits() {
        let slow = Slow::default();
        let account = Limiter::new(5);
        let clusters: Vec<Limiter> = (0..4).map(|_| Limiter::inside(2, &account)).collect();
        let conns: Vec<LimitedConnector> = clusters
            .iter()
            .map(|l| {
                let (permits, gauges) = l.chain();
                let gauged = Gauged { inner: SharedHttpConnector::new(slow.clone()), gauges };
                LimitedConnector { inner: SharedHttpConnector::new(gauged), permits }
            })
            .collect();
        let calls = conns.iter().flat_map(|c| (0..6).map(|_| c.call(HttpRequest::empty())));
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(|r| r.is_ok()));
        assert_eq!(slow.peak.load(Ordering::SeqCst), 5, "the account's limit binds: 4 clusters x 2 > 5");
        assert_eq!(account.gauge.peak(), 5);
        for l in &clusters {
            assert!((1..=2).contains(&l.gauge.peak()), "each cluster at most its own 2: {}", l.gauge.peak());
        }
    }

    /// An EKS endpoint that answers after 15 ms: DescribeCluster with an empty cluster, anything
    /// under an add-on path with 404.
    #[derive(Debug, Clone)]
    struct FakeEks;

    impl HttpConnector for FakeEks {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let missing = request.uri().contains("/addons/");
            HttpConnectorFuture::new(async move {
                tokio::time::sleep(Duration::from_millis(15)).await;
                let (status, body) = match missing {
                    true => (404u16, r#"{"__type":"ResourceNotFoundException","message":"no add-on"}"#),
                    false => (200u16, "{}"),
                };
                let mut r = aws_smithy_runtime_api::http::Response::new(
                    status.try_into().unwrap(),
                    aws_smithy_types::body::SdkBody::from(body),
                );
                r.headers_mut().insert("content-type", "application/json");
                Ok(r)
            })
        }
    }

    fn fake_eks(stats: Arc<CallStats>) -> aws_sdk_eks::Client {
        let conf = aws_sdk_eks::Config::builder()
            .behavior_version(BehaviorVersion::v2026_01_12())
            .region(aws_sdk_eks::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_eks::config::Credentials::new("AKID", "SECRET", None, None, "test"))
            .endpoint_url("http://127.0.0.1:9")
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .http_client(aws_smithy_runtime_api::client::http::http_client_fn(|_, _| SharedHttpConnector::new(FakeEks)))
            .interceptor(Counter(stats))
            .build();
        aws_sdk_eks::Client::from_conf(conf)
    }

    fn ops(calls: &[TraceCall]) -> Vec<&str> {
        calls.iter().map(|c| c.op.as_str()).collect()
    }

    #[tokio::test]
    async fn every_call_is_attributed_to_the_unit_that_made_it() {
        let stats = Arc::new(CallStats::default());
        stats.enable_trace();
        let eks = fake_eks(stats.clone());
        // Two units at once: one call; two calls one after the other, the first failing.
        let a = in_unit("read:a", async { eks.describe_cluster().name("c").send().await.is_ok() });
        let b = in_unit("step:b", async {
            let missing = eks.describe_addon().cluster_name("c").addon_name("x").send().await.is_err();
            missing && eks.describe_cluster().name("c").send().await.is_ok()
        });
        assert_eq!(tokio::join!(a, b), (true, true));
        // A task spawned inside a unit does not inherit it: its calls go to the phase.
        stats.set_phase("preflight");
        let e = eks.clone();
        in_unit("prepare:cluster", async move { tokio::spawn(async move { e.describe_cluster().name("c").send().await }).await })
            .await
            .unwrap()
            .unwrap();
        let t = stats.trace().expect("tracing is on");
        assert_eq!(t.keys().collect::<Vec<_>>(), ["preflight", "read:a", "step:b"]);
        assert_eq!(ops(&t["read:a"]), ["EKS:DescribeCluster"]);
        assert_eq!(ops(&t["step:b"]), ["EKS:DescribeAddon", "EKS:DescribeCluster"]);
        assert_eq!(ops(&t["preflight"]), ["EKS:DescribeCluster"]);
        let (first, second) = (&t["step:b"][0], &t["step:b"][1]);
        assert!(first.end <= second.start && first.end >= first.start + Duration::from_millis(15), "{t:?}");
        assert_eq!((first.failed, second.failed), (Some(404), None));
        // Overlapping units overlap in the trace.
        assert!(t["read:a"][0].start < first.end && first.start < t["read:a"][0].end);
        // The JSON: per unit, [op, start ms, end ms] and the status of a failed call.
        let j = serde_json::to_value(stats.report()).unwrap();
        assert_eq!(j["calls"], 4);
        let call = &j["trace"]["step:b"][0];
        assert_eq!((call[0].as_str(), call[3].as_u64()), (Some("EKS:DescribeAddon"), Some(404)));
        assert!(call[2].as_f64().unwrap() - call[1].as_f64().unwrap() >= 15.0);
        assert_eq!(j["trace"]["read:a"][0].as_array().unwrap().len(), 3);
        // Tracing off: calls counted, no trace kept.
        let off = Arc::new(CallStats::default());
        fake_eks(off.clone()).describe_cluster().name("c").send().await.unwrap();
        let j = serde_json::to_value(off.report()).unwrap();
        assert_eq!((j["calls"].as_u64(), j.get("trace")), (Some(1), None));
    }

    #[test]
    fn partitions() {
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }

    #[test]
    fn read_operations() {
        assert!(is_read_operation("GetQueueAttributes"));
        assert!(is_read_operation("ListTagsForResource"));
        assert!(is_read_operation("DescribeRule"));
        assert!(!is_read_operation("PutRule"));
        assert!(!is_read_operation("TagQueue"));
    }
}
