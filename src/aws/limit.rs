//! Request limits: at most N AWS requests on the wire, per cluster and per account, across every
//! service client (an HTTP client wrapper), and the gauge of how many are.

use super::prio;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_types::config_bag::ConfigBag;
use std::sync::Arc;

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
    /// The account's request pace, one per service (`throttle`): the outermost
    /// limiter's, so every cluster of an account shares them.
    pub rates: super::throttle::AccountRates,
}

impl Limiter {
    pub fn new(max_in_flight: usize) -> Self {
        Limiter {
            permits: prio::PrioSemaphore::new(max_in_flight.max(1)),
            gauge: Default::default(),
            outer: None,
            rates: Default::default(),
        }
    }

    /// A limiter of its own `max_in_flight` whose requests also count against `outer`.
    pub fn inside(max_in_flight: usize, outer: &Limiter) -> Self {
        Limiter { outer: Some(Arc::new(outer.clone())), rates: outer.rates.clone(), ..Limiter::new(max_in_flight) }
    }

    /// This limiter's and its outer ones': the permits to take, in order, and the gauges to count on.
    pub(super) fn chain(&self) -> (Vec<Arc<prio::PrioSemaphore>>, Vec<Arc<InFlight>>) {
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
pub(super) struct Gauged {
    pub(super) inner: SharedHttpConnector,
    pub(super) gauges: Vec<Arc<InFlight>>,
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
pub(super) struct LimitedConnector {
    pub(super) inner: SharedHttpConnector,
    pub(super) permits: Vec<Arc<prio::PrioSemaphore>>,
    pub(super) rates: super::throttle::AccountRates,
}

impl HttpConnector for LimitedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, permits, rates) = (self.inner.clone(), self.permits.clone(), self.rates.clone());
        HttpConnectorFuture::new(async move {
            // Inner (the cluster's) first, then the outer (the account's): every request takes
            // them in the same order, so none can hold an outer permit while it waits for an
            // inner one. EKS requests are served first when a limiter is full (see `prio`); the
            // request is signed by now, its Authorization header names the service.
            let (region, service) = request.headers().get("authorization").and_then(prio::signing_scope).unwrap_or(("", ""));
            // The account's pace for the service (CloudTrail's per Region), once AWS has
            // throttled it (`throttle`), before any permit is held. A request still waiting for
            // its turn at Ctrl-C is not sent.
            if !rates.of(&super::throttle::pacer_key(service, region)).wait().await {
                crate::interrupt::reached();
                return Err(aws_smithy_runtime_api::client::result::ConnectorError::other(
                    crate::interrupt::Stopped.to_string().into(),
                    None,
                ));
            }
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
        SharedHttpConnector::new(LimitedConnector {
            inner: SharedHttpConnector::new(gauged),
            permits,
            rates: self.limiter.rates.clone(),
        })
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
