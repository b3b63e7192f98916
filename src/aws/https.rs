//! The HTTPS client: the SDK's default (rustls on aws-lc) built once per process and CA bundle,
//! with AWS_CA_BUNDLE read as the AWS CLI reads it.

use aws_smithy_runtime_api::client::http::SharedHttpClient;
use std::collections::HashMap;

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
