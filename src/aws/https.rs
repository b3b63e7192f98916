//! The HTTPS client: the SDK's default (rustls on aws-lc) built once per process and CA bundle,
//! with the PEM file AWS_CA_BUNDLE names (`Settings::ca_bundle`) read as the AWS CLI reads it.

use aws_smithy_runtime_api::client::http::SharedHttpClient;
use std::collections::HashMap;

/// The PEM file AWS_CA_BUNDLE names (`path`, from `Settings::ca_bundle`), as the AWS CLI reads it
/// (the Rust SDK itself does not): for TLS-inspecting proxies and private endpoints. Unreadable
/// or empty: an error naming it.
pub fn ca_bundle(path: Option<&std::ffi::OsStr>) -> Result<Option<Vec<u8>>, crate::error::UserError> {
    let Some(path) = path.filter(|p| !p.is_empty()) else { return Ok(None) };
    let shown = std::path::Path::new(&path).display().to_string();
    match std::fs::read(path) {
        Ok(b) if String::from_utf8_lossy(&b).contains("-----BEGIN CERTIFICATE-----") => Ok(Some(b)),
        Ok(_) => Err(crate::error::UserError::new(format!("AWS_CA_BUNDLE={shown} holds no PEM certificate"))
            .hint("point AWS_CA_BUNDLE at a PEM file of CA certificates, or unset it")),
        Err(e) => Err(crate::error::UserError::new(format!("AWS_CA_BUNDLE={shown} cannot be read: {e}"))
            .hint("point AWS_CA_BUNDLE at a readable PEM file of CA certificates, or unset it")),
    }
}

/// The SDK's default HTTPS client (hyper 1 with rustls on aws-lc, the system's trusted roots plus
/// any `ca_bundle`, proxy settings from the environment), built here so that it can be wrapped
/// in a `LimitedClient`. One per process (per CA bundle): every cluster of a many-cluster run
/// shares its connectors (root certificates loaded once) and its pool of idle connections;
/// each cluster's `LimitedClient` keeps its own limits around it.
pub(super) fn default_https_client(ca_bundle: Option<Vec<u8>>) -> SharedHttpClient {
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

// --- An endpoint that never answers --------------------------------------------------------------
//
// A request that cannot connect (refused, no answer within the connect timeout, a name that does
// not resolve) is a transient error to the SDK, retried like a reset. Against an endpoint that has
// answered before in this run that is right: the network blipped. Against one that never answered
// it is almost always a wrong `--endpoint-url`, region, proxy or firewall, and every retry only
// delays the error (16 attempts with back-off took about a minute). So each client keeps whether
// its endpoint ever answered (`Reach`), and while it has not, connection failures get
// `NEVER_REACHED_ATTEMPTS` attempts in all, across the client's calls, once the first failure is
// `NEVER_REACHED_GRACE` old: the first calls of a run go out together, and on a slow or lossy
// link to a real endpoint two of them may fail to connect before any has its answer.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{FinalizerInterceptorContextRef, InterceptorContext};
use aws_smithy_runtime_api::client::result::{ConnectorError, SdkError};
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Connection failures, in all, an endpoint that never answered gets before its calls fail.
pub const NEVER_REACHED_ATTEMPTS: u32 = 2;
/// How long after its first connection failure an endpoint that never answered keeps the usual
/// retries.
pub const NEVER_REACHED_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a client's endpoint has answered in this run, and how often connecting to it failed
/// (and when first).
#[derive(Debug, Default)]
pub struct Reach {
    answered: AtomicBool,
    connect_failures: AtomicU32,
    first_failure: std::sync::OnceLock<std::time::Instant>,
}

impl Reach {
    fn given_up(&self) -> bool {
        !self.answered.load(Ordering::SeqCst)
            && self.connect_failures.load(Ordering::SeqCst) >= NEVER_REACHED_ATTEMPTS
            && self.first_failure.get().is_some_and(|t| t.elapsed() >= NEVER_REACHED_GRACE)
    }
}

/// A failure to reach the endpoint at all (no HTTP answer): refused, timed out, unresolvable.
fn connect_failure(ctx: &InterceptorContext) -> bool {
    let Some(Err(e)) = ctx.output_or_error() else { return false };
    ctx.response().is_none() && e.as_connector_error().is_some_and(|c| c.is_io() || c.is_timeout())
}

/// Once per attempt (before the retry decision): notes an answer or a connection failure.
#[derive(Debug)]
pub struct ReachWatch(pub Arc<Reach>);

impl Intercept for ReachWatch {
    fn name(&self) -> &'static str {
        "karpctl-reach-watch"
    }
    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let ctx = context.inner();
        if ctx.response().is_some() {
            self.0.answered.store(true, Ordering::SeqCst);
        } else if connect_failure(ctx) {
            self.0.first_failure.get_or_init(std::time::Instant::now);
            self.0.connect_failures.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Forbids retrying a connection failure once the never-answering endpoint had its attempts.
#[derive(Debug)]
pub struct NeverReached(pub Arc<Reach>);

impl ClassifyRetry for NeverReached {
    fn classify_retry(&self, _ctx: &InterceptorContext) -> RetryAction {
        RetryAction::NoActionIndicated
    }
    fn classify_retry_v2(&self, ctx: &InterceptorContext, previous: &RetryAction) -> RetryAction {
        match previous {
            RetryAction::RetryIndicated(_) if connect_failure(ctx) && self.0.given_up() => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }
    fn name(&self) -> &'static str {
        "karpctl-never-reached"
    }
    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

// --- Saying it plainly ---------------------------------------------------------------------------

/// The endpoint `--endpoint-url` named for this run, for error messages.
static ENDPOINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// The SDK's endpoint variables (`Settings::service_endpoints`, `Settings::endpoint_url`), for
/// error messages.
static ENV_ENDPOINTS: std::sync::OnceLock<crate::settings::Settings> = std::sync::OnceLock::new();

pub(super) fn remember_endpoint(url: Option<&str>, settings: &crate::settings::Settings) {
    if let Some(u) = url {
        let _ = ENDPOINT.set(u.to_string());
    }
    let _ = ENV_ENDPOINTS.set(settings.clone());
}

/// Where a service's calls went: `--endpoint-url`, else the SDK's endpoint variables, else AWS.
fn endpoint_shown(service: &str) -> String {
    ENDPOINT
        .get()
        .cloned()
        .or_else(|| ENV_ENDPOINTS.get().and_then(|s| s.endpoint_of(service)).map(str::to_string))
        .unwrap_or_else(|| format!("the {service} endpoint"))
}

/// Why a call got no answer, from the words of its causes.
#[derive(Debug, PartialEq, Eq)]
enum NoAnswer {
    NoCredentials,
    Refused,
    TimedOut,
    NoSuchHost,
    Tls(String),
    /// The operation's own timeout, retries and throttling waits included: the endpoint may
    /// well have answered each attempt.
    OperationTimedOut,
    /// Anything else (a refused AssumeRole, say): left to the caller.
    Other,
}

/// Every cause of `e`, itself first.
fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut next = e.source();
    while let Some(c) = next {
        out.push(c.to_string());
        next = c.source();
    }
    out
}

fn no_answer(connector: &ConnectorError) -> NoAnswer {
    let words = causes(connector);
    let all = words.join(": ").to_ascii_lowercase();
    let has = |w: &str| all.contains(w);
    if has("no credentials") || has("credential provider was not enabled") {
        NoAnswer::NoCredentials
    } else if connector.is_timeout() || has("timed out") || has("timeout") {
        NoAnswer::TimedOut
    } else if has("connection refused") {
        NoAnswer::Refused
    } else if has("dns error") || has("failed to lookup address") || has("name or service not known") || has("no such host") {
        NoAnswer::NoSuchHost
    } else if has("certificate") || has("tls") || has("handshake") {
        NoAnswer::Tls(words.last().cloned().unwrap_or_default())
    } else {
        NoAnswer::Other
    }
}

/// An AWS call that never got an answer, as one plain sentence and a hint (None: AWS answered,
/// or the failure is of another kind). `operation` is `service:Action`, as errors name it.
pub fn unanswered<E>(operation: &str, e: &SdkError<E, aws_smithy_runtime_api::http::Response>) -> Option<crate::error::UserError>
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
{
    use crate::error::UserError;
    let service = operation.split(':').next().unwrap_or("aws");
    let at = endpoint_shown(service);
    let network = "check --endpoint-url / AWS_ENDPOINT_URL (is the emulator running?), --region, and the network: a proxy (HTTPS_PROXY, NO_PROXY) or a firewall";
    let why = match e {
        // A connector error of kind `other` is the identity's (credentials) or the caller's: only
        // "no credentials at all" is said here; a refused AssumeRole stays with its caller.
        SdkError::DispatchFailure(d) => match no_answer(d.as_connector_error()?) {
            NoAnswer::Other => return None,
            why => why,
        },
        SdkError::TimeoutError(_) => NoAnswer::OperationTimedOut,
        // An answer, but not one from AWS (a proxy's or a web server's page, an empty 404).
        SdkError::ServiceError(s) if s.err().code().is_none() => {
            return Some(not_aws(operation, &at, s.raw().status().as_u16(), network));
        }
        SdkError::ResponseError(r) => return Some(not_aws(operation, &at, r.raw().status().as_u16(), network)),
        _ => return None,
    };
    Some(match why {
        NoAnswer::NoCredentials => UserError::new(format!(
            "no AWS credentials found for {operation} (looked in the environment, the shared config and credentials files, web identity, the container and instance metadata)"
        ))
        .hint("set AWS_PROFILE (or pass --profile), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; after SSO, run `aws sso login --profile NAME`"),
        NoAnswer::Refused => UserError::new(format!("cannot reach AWS for {operation}: {at} refused the connection")).hint(network),
        NoAnswer::TimedOut => UserError::new(format!("cannot reach AWS for {operation}: {at} did not answer")).hint(network),
        NoAnswer::NoSuchHost => {
            UserError::new(format!("cannot reach AWS for {operation}: the host name of {at} does not resolve")).hint(network)
        }
        NoAnswer::Tls(m) => UserError::new(format!("cannot reach AWS for {operation}: TLS with {at} failed: {m}"))
            .hint("behind a TLS-inspecting proxy, point AWS_CA_BUNDLE (or SSL_CERT_FILE) at its CA certificate (PEM)"),
        NoAnswer::OperationTimedOut => UserError::new(format!(
            "{operation} did not finish within its time limit, retries included ({at})"
        ))
        .hint("AWS may be throttling the account (the run says so when it is), or the network is slow; run again, with --concurrency 1 for an account other tools keep busy"),
        NoAnswer::Other => return None,
    })
}

/// An HTTP answer that carries no AWS error: the endpoint is not (or not only) AWS.
fn not_aws(operation: &str, at: &str, status: u16, network: &str) -> crate::error::UserError {
    crate::error::UserError::new(format!(
        "{operation}: {at} answered HTTP {status}, which is not an AWS answer (no AWS error code)"
    ))
    .hint(network)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_failure_is_said_in_plain_words() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        assert_eq!(no_answer(&ConnectorError::io(Box::new(refused))), NoAnswer::Refused);
        let dns = std::io::Error::other("dns error: failed to lookup address information: Name or service not known");
        assert_eq!(no_answer(&ConnectorError::io(Box::new(dns))), NoAnswer::NoSuchHost);
        let slow = std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
        assert_eq!(no_answer(&ConnectorError::timeout(Box::new(slow))), NoAnswer::TimedOut);
        let creds = std::io::Error::other("the credential provider was not enabled: no credentials found in chain");
        assert_eq!(no_answer(&ConnectorError::other(Box::new(creds), None)), NoAnswer::NoCredentials);

        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let e: SdkError<
            aws_sdk_sts::operation::get_caller_identity::GetCallerIdentityError,
            aws_smithy_runtime_api::http::Response,
        > = SdkError::dispatch_failure(ConnectorError::io(Box::new(refused)));
        let u = unanswered("sts:GetCallerIdentity", &e).unwrap();
        assert!(u.message.starts_with("cannot reach AWS for sts:GetCallerIdentity: "), "{}", u.message);
        assert!(u.message.ends_with("refused the connection"), "{}", u.message);
        assert!(!u.message.contains('{') && !u.message.contains('\n'), "one plain sentence: {}", u.message);
        assert!(u.hint.unwrap().contains("--endpoint-url"));
    }

    #[test]
    fn an_endpoint_that_never_answered_gets_few_attempts() {
        let r = Reach::default();
        assert!(!r.given_up());
        r.connect_failures.store(NEVER_REACHED_ATTEMPTS, Ordering::SeqCst);
        r.first_failure.set(std::time::Instant::now()).unwrap();
        assert!(!r.given_up(), "within the grace, calls that went out together keep their retries");
        let r = Reach::default();
        r.connect_failures.store(NEVER_REACHED_ATTEMPTS, Ordering::SeqCst);
        r.first_failure.set(std::time::Instant::now() - NEVER_REACHED_GRACE).unwrap();
        assert!(r.given_up());
        r.answered.store(true, Ordering::SeqCst);
        assert!(!r.given_up(), "an endpoint that answered once keeps the usual retries");
    }
}
