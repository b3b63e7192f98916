//! `LagProxy`: a scripts/lagproxy.py proxy for one test, in front of the test emulator (or of a
//! microburst proxy), that emulates AWS's time-dependent behaviours: SQS attribute, create and
//! delete lag, an EKS cluster's status or disappearance, and IAM role propagation to EKS. Rules are
//! keyed by queue / cluster / role name, so tests sharing a proxy do not see each other's rules;
//! the call log is per proxy. Started with `scripts/emulator lag-start` (so it lives in
//! KARPCTL_EMULATOR_DIR and `scripts/emulator stop` stops it too), stopped when dropped.
//!
//! ```ignore
//! let px = LagProxy::start(&cluster_name("lag"), &endpoint());
//! px.set(json!({"sqs_attr_lag_s": {"Karpenter-c1": 2}}));
//! // ... karpctl with AWS_ENDPOINT_URL=px.url(), or sdk_at(px.url()) ...
//! assert!(px.calls().contains(&("sqs".into(), "SetQueueAttributes".into())));
//! ```

use super::repo;
use serde_json::Value;
use std::process::{Command, Stdio};

pub struct LagProxy {
    name: String,
    url: String,
}

impl LagProxy {
    /// Start lag proxy `name` (`[A-Za-z0-9_-]+`, unique per test) in front of `upstream`.
    ///
    /// The URL uses `localhost`, not `127.0.0.1`: the proxy forwards the Host header as it is,
    /// and microburst (a possible upstream) spends ~15 s loading botocore models on the first
    /// request whose Host has a dot in it (see tests/faults.rs).
    pub fn start(name: &str, upstream: &str) -> LagProxy {
        let out = Command::new(repo().join("scripts/emulator"))
            .args(["lag-start", name, upstream])
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/emulator lag-start");
        assert!(out.status.success(), "lag-start {name} failed: {}", String::from_utf8_lossy(&out.stderr));
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "lag-start printed no URL: {url:?}");
        let url = url.replacen("127.0.0.1", "localhost", 1);
        LagProxy { name: name.to_string(), url }
    }

    /// The proxy's URL, for AWS_ENDPOINT_URL or `sdk_at`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Merge `rules` into the proxy's rules (POST /_lag/rules); returns the rules after the merge.
    /// Maps merge per name and a null value removes that name, e.g.
    /// `json!({"sqs_create_lag_s": {"q1": 2}, "eks_cluster_status": {"c1": null}})`.
    pub fn set(&self, rules: Value) -> Value {
        self.try_set(rules).unwrap_or_else(|e| panic!("lag proxy {}: set rules: {e}", self.name))
    }

    /// As `set`, but a refused rules object (400) is returned as the proxy's error message.
    pub fn try_set(&self, rules: Value) -> Result<Value, String> {
        let (status, doc) = self.control("POST", "/_lag/rules", &rules.to_string());
        if (200..300).contains(&status) {
            Ok(doc)
        } else {
            Err(doc["error"].as_str().map(str::to_string).unwrap_or_else(|| format!("HTTP {status}: {doc}")))
        }
    }

    /// The current rules (GET /_lag/rules).
    pub fn rules(&self) -> Value {
        self.ok("GET", "/_lag/rules", "")
    }

    /// Clear rules, open windows and the call log; queued DeleteQueue calls are sent at once.
    pub fn reset(&self) {
        self.ok("POST", "/_lag/reset", "");
    }

    /// Every request the proxy saw, oldest first, as (service, operation), e.g.
    /// ("sqs", "GetQueueAttributes"), ("eks", "CreateAccessEntry"), ("iam", "CreateRole").
    pub fn calls(&self) -> Vec<(String, String)> {
        self.calls_json()
            .iter()
            .map(|c| {
                (c["service"].as_str().unwrap_or_default().to_string(), c["operation"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }

    /// The full call log: objects with service, operation, time (epoch seconds), resource (queue,
    /// cluster or role name, or null), status (HTTP) and lag (the rule that acted, or null).
    pub fn calls_json(&self) -> Vec<Value> {
        match self.ok("GET", "/_lag/calls", "")["calls"].take() {
            Value::Array(a) => a,
            other => panic!("lag proxy {}: /_lag/calls has no list: {other}", self.name),
        }
    }

    /// How many calls of `operation` the proxy saw.
    pub fn count(&self, operation: &str) -> usize {
        self.calls().iter().filter(|(_, op)| op == operation).count()
    }

    /// The open windows (GET /_lag/state), for diagnostics.
    pub fn state(&self) -> Value {
        self.ok("GET", "/_lag/state", "")
    }

    fn ok(&self, method: &str, path: &str, body: &str) -> Value {
        let (status, doc) = self.control(method, path, body);
        assert!((200..300).contains(&status), "lag proxy {}: {method} {path}: HTTP {status}: {doc}", self.name);
        doc
    }

    /// One control call (HTTP/1.0: the answer ends when the proxy closes the connection).
    fn control(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let (head, payload) = super::proxy::control_call(&self.url, method, path, body, std::time::Duration::from_secs(30));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let doc = serde_json::from_str(&payload)
            .unwrap_or_else(|e| panic!("lag proxy {}: {method} {path}: not JSON ({e}): {head}\n{payload}", self.name));
        (status, doc)
    }
}

impl Drop for LagProxy {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/emulator"))
            .args(["lag-stop", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A lag proxy for the IPv6 cluster `c` of a strict seed (`seed_strict`), and the strict
/// endpoints that send EKS and EC2 through it: EKS (ministack, which answers ipFamily "ipv4" for
/// every cluster) shows the cluster as IPv6, and EC2 goes on to moto (which keeps IPv6 routes),
/// so that `ec2_subnet_dns64` can show DNS64, which neither emulator keeps. The account's
/// `AmazonEKS_CNI_IPv6_Policy`, which an IPv6 cluster's nodes get (AWS's guide has the user make
/// it), is made in moto if it is not there.
pub fn ipv6_cluster(c: &str) -> (LagProxy, super::StrictEndpoints) {
    let iam = super::sdk_strict().iam;
    let doc = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:AssignIpv6Addresses","ec2:DescribeInstances","ec2:DescribeTags","ec2:DescribeNetworkInterfaces","ec2:DescribeInstanceTypes"],"Resource":"*"}]}"#;
    let made = super::rt().block_on(iam.create_policy().policy_name("AmazonEKS_CNI_IPv6_Policy").policy_document(doc).send());
    if let Err(e) = made {
        let code = aws_sdk_iam::error::ProvideErrorMetadata::code(&e).unwrap_or_default().to_string();
        assert_eq!(code, "EntityAlreadyExists", "iam:CreatePolicy AmazonEKS_CNI_IPv6_Policy: {e:?}");
    }
    let px = LagProxy::start(&format!("{c}-px"), &super::endpoint());
    px.set(serde_json::json!({"upstreams": {"ec2": super::moto_endpoint()}, "eks_ip_family": {c: "ipv6"}}));
    let eps = super::StrictEndpoints::direct().via("EKS", px.url()).via("EC2", px.url());
    (px, eps)
}
