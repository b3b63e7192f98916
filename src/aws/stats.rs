//! Call accounting: calls and retries by service and operation, the unit of work each call
//! belongs to, and (with `--stats`) a trace of every call, counted by an interceptor on each client.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls made, by service and operation. Attempts beyond the first are counted as retries.
/// With tracing on (`--stats`, or KARPCTL_TRACE=1), also every call with the unit of work that
/// made it (see [`in_unit`]) and when it started and ended.
pub struct CallStats {
    inner: Mutex<BTreeMap<(String, String), OpCount>>,
    /// None: tracing off (a normal run keeps no trace).
    trace: Mutex<Option<Vec<TraceCall>>>,
    /// With tracing on: the spans of the run's own work (phases, steps, agreement waits).
    spans: Mutex<Vec<Span>>,
    /// The unit of a call made outside any `in_unit` scope (a task spawned without one): the
    /// phase running at the time.
    phase: Mutex<Arc<str>>,
    /// Throttling answers by service: how many, and when the first and the last came.
    throttled: Mutex<BTreeMap<String, Throttled>>,
    /// Where to say, while the run goes on, that a service started throttling.
    progress: Mutex<Option<Arc<dyn crate::events::Reporter>>>,
}

impl std::fmt::Debug for CallStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallStats").finish_non_exhaustive()
    }
}

/// Throttling answers from one service in this run.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
pub struct Throttled {
    pub answers: u64,
    /// Seconds since the start of the run of the first and the last.
    pub first_s: f64,
    pub last_s: f64,
}

impl Default for CallStats {
    fn default() -> Self {
        CallStats {
            inner: Default::default(),
            trace: Mutex::new(None),
            spans: Default::default(),
            phase: Mutex::new(Arc::from("prepare")),
            throttled: Default::default(),
            progress: Mutex::new(None),
        }
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

/// A stretch of the run's own work with tracing on (see [`CallStats::span`]): its unit (`run` for
/// a phase, `step:<id>` for a step), what it was, and its start and end since [`epoch`].
#[derive(Debug, Clone)]
pub struct Span {
    pub unit: String,
    pub what: String,
    pub start: Duration,
    pub end: Duration,
}

/// Serialised as `["step:queue", "apply", 12.1, 30.5]` (ms, 0.1 ms resolution).
impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        let mut seq = s.serialize_seq(Some(4))?;
        seq.serialize_element(&self.unit)?;
        seq.serialize_element(&self.what)?;
        seq.serialize_element(&ms(self.start))?;
        seq.serialize_element(&ms(self.end))?;
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
    // CloudTrail's LookupEvents and IAM's Simulate*/GetContextKeys* read too.
    ["Get", "List", "Describe", "Receive", "Lookup", "Simulate"].iter().any(|p| op.starts_with(p))
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
    /// Throttling answers by service (none: AWS throttled nothing).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub throttled: BTreeMap<String, Throttled>,
    /// With tracing on: per unit of work, its calls in the order they started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<BTreeMap<String, Vec<TraceCall>>>,
    /// With tracing on: the run's phases and steps (`Span`), in the order they started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans: Option<Vec<Span>>,
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
    /// A throttling answer from `service` (counted once per attempt by `throttle::ThrottleWatch`).
    pub fn throttled(&self, service: &str) {
        let at = epoch().elapsed().as_secs_f64();
        let first = {
            let mut m = self.throttled.lock().unwrap();
            let first = !m.contains_key(service);
            let t = m.entry(service.to_string()).or_insert(Throttled { answers: 0, first_s: at, last_s: at });
            t.answers += 1;
            t.last_s = at;
            first
        };
        if first && let Some(r) = self.progress.lock().unwrap().clone() {
            let text = format!(
                "AWS is throttling {service} requests for this account ({at:.1} s into the run): karpctl slows its {service} calls down and retries them"
            );
            r.event(crate::events::Event::Note { level: crate::model::Level::Warning, text: &text });
        }
    }
    /// Say on `reporter`, while the run goes on, when a service starts throttling.
    pub fn tell_throttling(&self, reporter: Arc<dyn crate::events::Reporter>) {
        *self.progress.lock().unwrap() = Some(reporter);
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
    /// With tracing on, note a stretch of the run's own work (`unit`: `run` for a phase,
    /// `step:<id>` for a step; `what`: `prepare`, `apply`, `settle`, ...), so that a trace shows
    /// when each began and ended, not only its calls. Without tracing, nothing.
    pub fn span(&self, unit: &str, what: &str, start: Instant, end: Instant) {
        if !self.tracing() {
            return;
        }
        let e = epoch();
        let span = Span {
            unit: unit.to_string(),
            what: what.to_string(),
            start: start.saturating_duration_since(e),
            end: end.saturating_duration_since(e),
        };
        self.spans.lock().unwrap().push(span);
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
        let spans = trace.is_some().then(|| {
            let mut v = self.spans.lock().unwrap().clone();
            v.sort_by_key(|s| (s.start, s.end));
            v
        });
        let m = self.inner.lock().unwrap();
        let throttled = self.throttled.lock().unwrap().clone();
        let mut r =
            StatsReport { calls: 0, reads: 0, writes: 0, retries: 0, operations: BTreeMap::new(), throttled, trace, spans };
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
pub(super) struct Counter(pub(super) Arc<CallStats>);

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
