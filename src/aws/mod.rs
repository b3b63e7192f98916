//! The AWS clients, built from one shared config (retries, timeouts, the request limiter, the call
//! counter). Each other job has its own module: `read` (every read), `error`, `consistency`,
//! `throttle`, `limit`, `prio`, `stats`, `https`, `partition`.

pub mod consistency;
pub mod error;
pub mod https;
pub mod limit;
pub mod partition;
pub mod prio;
pub mod read;
pub mod stats;
pub mod throttle;

pub use consistency::*;
pub use error::{AwsError, Classify, Condition, ErrorKind, aws_error_in, is_refused, refusal_in};
pub use https::ca_bundle;
pub use limit::*;
pub use partition::*;
pub use stats::*;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::sync::Arc;
use std::time::Duration;

/// How long a request may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// The environment's endpoints, named in errors when a call got no answer.
    pub settings: Arc<crate::settings::Settings>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssumeRoleOptions {
    pub role_arn: String,
    pub external_id: Option<String>,
    pub session_name: String,
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
    /// What the running Karpenter did (`LookupEvents`, paced at `throttle::CLOUDTRAIL_LOOKUPS_PER_SECOND`
    /// per Region), one client per Region whose event history holds its records: the cluster's,
    /// the partition's global Region (IAM) and the pricing endpoint's (`partition`).
    pub cloudtrail: std::collections::BTreeMap<String, aws_sdk_cloudtrail::Client>,
    /// The cluster's Region (the clients' own).
    pub region: String,
    /// Metrics of the interruption rules and queue (`GetMetricData`); signing name `monitoring`.
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// The vCPU quotas a fleet's launches hit (`GetServiceQuota`).
    pub servicequotas: aws_sdk_servicequotas::Client,
}

/// Build every client from one shared config: pinned behaviour version, the region always set,
/// standard retries with more attempts, the request limiter and call counter on each client, and
/// the timeouts of docs/how-it-works.md (3 s to connect, 30 s to the response head, 120 s an
/// operation). A request's wait for the limiter is inside the SDK's transmit phase, so no attempt
/// timeout and no stalled-upload check runs over it (the stalled-download check stays on).
pub async fn connect(opts: &ConnectOptions, stats: Arc<CallStats>) -> Clients {
    https::remember_endpoint(opts.endpoint_url.as_deref(), &opts.settings);
    // `max_attempts` is what throttling gets, other errors stop sooner; the pace per account and
    // service is karpctl's (`throttle::Pacer`, in the limiter).
    let retry = RetryConfig::standard()
        .with_max_attempts(opts.max_attempts.max(1))
        .with_initial_backoff(Duration::from_millis(200))
        .with_max_backoff(throttle::MAX_BACKOFF);
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(120))
        .build();
    let stalled = StalledStreamProtectionConfig::enabled().upload_enabled(false).grace_period(Duration::from_secs(5)).build();
    let limiter = opts.limiter.clone().unwrap_or_else(|| Limiter::new(opts.max_in_flight));
    let mut loader = aws_config::defaults(BehaviorVersion::v2026_01_12())
        .region(aws_config::Region::new(opts.region.clone()))
        .sleep_impl(throttle::StopSleep)
        .retry_config(retry)
        .timeout_config(timeouts)
        .stalled_stream_protection(stalled)
        .http_client(LimitedClient::shared(https::default_https_client(opts.ca_bundle.clone()), limiter.clone()));
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
    // CloudTrail answers two lookups a second per account and Region: its calls are paced at that
    // rate from the first one, not only after AWS throttles, each Region on its own pacer.
    let mut trail_regions = vec![opts.region.clone()];
    let elsewhere = [partition::global_region(partition::partition(&opts.region)), partition::pricing_region(&opts.region)];
    for r in elsewhere.into_iter().flatten() {
        if !trail_regions.iter().any(|x| x == r) {
            trail_regions.push(r.to_string());
        }
    }
    for r in &trail_regions {
        limiter.rates.of(&throttle::pacer_key("cloudtrail", r)).start_at(throttle::CLOUDTRAIL_LOOKUPS_PER_SECOND);
    }
    let counter = stats::Counter(stats.clone());
    macro_rules! client {
        ($krate:ident, $service:literal) => {
            client!($krate, $service, &conf, $service)
        };
        ($krate:ident, $service:literal, $conf:expr, $pacer:expr) => {{
            // Whether this client's endpoint ever answered (connection failures' retries).
            let reach = Arc::new(https::Reach::default());
            $krate::Client::from_conf(
                $krate::config::Builder::from($conf)
                    .interceptor(counter.clone())
                    .interceptor(https::ReachWatch(reach.clone()))
                    .retry_classifier(https::NeverReached(reach))
                    .retry_partition(throttle::partition($service))
                    .retry_classifier(throttle::AttemptBudget)
                    .retry_classifier(throttle::QuotaIsNotThrottling { service: $service })
                    .retry_classifier(throttle::StopRetries)
                    .interceptor(throttle::StopRetries)
                    .interceptor(throttle::ThrottleWatch {
                        service: $service,
                        stats: stats.clone(),
                        pacer: limiter.rates.of(&$pacer),
                    })
                    .build(),
            )
        }};
    }
    Clients {
        iam: client!(aws_sdk_iam, "iam"),
        sqs: client!(aws_sdk_sqs, "sqs"),
        events: client!(aws_sdk_eventbridge, "events"),
        eks: client!(aws_sdk_eks, "eks"),
        ec2: client!(aws_sdk_ec2, "ec2"),
        sts: client!(aws_sdk_sts, "sts"),
        kms: client!(aws_sdk_kms, "kms"),
        cloudtrail: trail_regions
            .iter()
            .map(|r| {
                let at = conf.clone().into_builder().region(aws_config::Region::new(r.clone())).build();
                (r.clone(), client!(aws_sdk_cloudtrail, "cloudtrail", &at, throttle::pacer_key("cloudtrail", r)))
            })
            .collect(),
        region: opts.region.clone(),
        cloudwatch: client!(aws_sdk_cloudwatch, "monitoring"),
        servicequotas: client!(aws_sdk_servicequotas, "servicequotas"),
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
        None => match https::unanswered(op, &e) {
            Some(plain) => plain.into(),
            None => anyhow::Error::new(e).context(format!("{op} failed")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::stats::*;
    use super::*;
    use aws_smithy_runtime_api::client::http::{HttpConnector, HttpConnectorFuture, SharedHttpConnector};
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;

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
                rates: Default::default(),
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
                LimitedConnector { inner: SharedHttpConnector::new(gauged), permits, rates: Default::default() }
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
        assert!(is_read_operation("LookupEvents"));
        assert!(is_read_operation("SimulatePrincipalPolicy"));
    }
}
