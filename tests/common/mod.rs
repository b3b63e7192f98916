//! Shared harness for the integration tests: the real karpctl binary against the emulator that
//! `scripts/test` started (KARPCTL_TEST_ENDPOINT). Results are checked through the AWS SDK
//! directly, never through karpctl's own code.

#![allow(dead_code)]

pub mod lag;

use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod names;
pub mod output;
pub mod proxy;
pub mod setups;
pub mod snapshot;
pub mod transcript;
pub mod yaml;
pub use names::*;
pub use output::*;
pub use proxy::{Proxy, stop_all};
pub(crate) use snapshot::karpctl_snapshot;

pub fn repo() -> PathBuf {
    std::env::var("KARPCTL_REPO").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn endpoint() -> String {
    std::env::var("KARPCTL_TEST_ENDPOINT")
        .expect("KARPCTL_TEST_ENDPOINT is not set: run the integration tests with scripts/test, which starts the emulator")
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A cluster name unique to this test run and test.
pub fn cluster_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() % 1_000_000_000;
    format!("{prefix}-{}-{t}-{n}", std::process::id() % 10000)
}

/// Seed a realistic cluster in the emulator; returns the seed's JSON (subnet and SG ids...).
pub fn seed(cluster: &str, extra: &[&str]) -> Value {
    seed_at(&endpoint(), cluster, extra)
}

pub fn seed_at(endpoint: &str, cluster: &str, extra: &[&str]) -> Value {
    run_seed(&["--endpoint", endpoint, "--cluster", cluster], extra, "seed")
}

/// Run scripts/seed.py with `args` then `extra`; its last stdout line is the seed's JSON.
fn run_seed(args: &[&str], extra: &[&str], what: &str) -> Value {
    let out = Command::new(repo().join(".venv/bin/python"))
        .arg(repo().join("scripts/seed.py"))
        .args(args)
        .args(extra)
        .output()
        .expect("run scripts/seed.py");
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("seed JSON")
}

/// A scratch working directory for one test (karpctl looks for plans/ in its working directory).
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("plans")).unwrap();
        Workdir { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Write plans/<cluster>.toml.
    pub fn plan(&self, cluster: &str, body: &str) -> PathBuf {
        let p = self.dir.path().join("plans").join(format!("{cluster}.toml"));
        std::fs::write(&p, body).unwrap();
        p
    }
    /// Write plans/<cluster>.toml as `plan_toml(cluster, rest)`.
    pub fn plan_for(&self, cluster: &str, rest: &str) -> PathBuf {
        self.plan(cluster, &plan_toml(cluster, rest))
    }
}

/// A plan file for `cluster` in us-east-1: its `cluster` and `region` lines, then `rest`
/// (TOML, e.g. "\n[identity]\nmode = \"irsa\"\n").
pub fn plan_toml(cluster: &str, rest: &str) -> String {
    plan_toml_in(cluster, REGION, rest)
}

/// `plan_toml` in `region`.
pub fn plan_toml_in(cluster: &str, region: &str, rest: &str) -> String {
    format!("cluster = \"{cluster}\"\nregion = \"{region}\"\n{rest}")
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }
    /// Write calls counted by karpctl's interceptor (from `--output json`).
    pub fn writes(&self) -> u64 {
        self.json()["stats"]["writes"].as_u64().expect("stats.writes")
    }
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

pub fn karpctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_karpctl"))
}

/// Run karpctl in `wd` against the test emulator.
pub fn karpctl(wd: &Workdir, args: &[&str]) -> Run {
    karpctl_env(wd, args, &[])
}

/// The command the tests run: karpctl in `wd` against the test emulator, test credentials,
/// no colour, a short consistency deadline. An empty value in `env` removes that variable.
pub fn karpctl_command(wd: &Workdir, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = karpctl_base(wd, args);
    cmd.env("AWS_ENDPOINT_URL", endpoint());
    apply_env(&mut cmd, env);
    cmd
}

/// karpctl in `wd` with test credentials, no colour, a short consistency deadline, a raised
/// EventBridge rules-per-bus quota, no profile or
/// default cluster from this process, and stdin closed; where AWS is, is the caller's to set.
fn karpctl_base(wd: &Workdir, args: &[&str]) -> Command {
    let mut cmd = Command::new(karpctl_bin());
    cmd.current_dir(wd.path())
        .args(args)
        .env_remove("AWS_PROFILE")
        .env_remove("KARPCTL_CLUSTER")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("NO_COLOR", "1")
        .env("KARPCTL_CONSISTENCY_DEADLINE_SECS", "20")
        // Every test's rules share one emulator account's default bus in us-east-1 (hundreds of
        // rules in a full run), like an account whose quota was raised; the quota test sets 300.
        .env("KARPCTL_RULES_PER_BUS", "100000")
        // The pin's support status is judged on this day, so that outputs do not age.
        .env("KARPCTL_TODAY", "2026-12-07")
        .stdin(std::process::Stdio::null());
    cmd
}

/// Set each variable of `env`; an empty value removes it.
fn apply_env(cmd: &mut Command, env: &[(&str, &str)]) {
    for (k, v) in env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
}

/// Run karpctl to its end and collect exit code and output.
fn run(mut cmd: Command) -> Run {
    let out: Output = cmd.output().expect("run karpctl");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn karpctl_env(wd: &Workdir, args: &[&str], env: &[(&str, &str)]) -> Run {
    run(karpctl_command(wd, args, env))
}

/// karpctl with every AWS call sent to `url` (a proxy): no inherited per-service endpoint
/// variable may bypass it. `extra`: more environment variables.
pub fn karpctl_at(wd: &Workdir, url: &str, args: &[&str], extra: &[(&str, &str)]) -> Run {
    let inherited: Vec<String> = std::env::vars().map(|(k, _)| k).filter(|k| k.starts_with("AWS_ENDPOINT_URL_")).collect();
    let mut env: Vec<(&str, &str)> = vec![("AWS_ENDPOINT_URL", url)];
    env.extend(inherited.iter().map(|k| (k.as_str(), "")));
    env.extend_from_slice(extra);
    karpctl_env(wd, args, &env)
}

/// AWS SDK clients pointed at the emulator, for checking results independently of karpctl.
pub struct Sdk {
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub iam: aws_sdk_iam::Client,
    pub eks: aws_sdk_eks::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub kms: aws_sdk_kms::Client,
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

pub fn sdk() -> Sdk {
    sdk_at(&endpoint())
}

/// Register the cluster's OIDC issuer as an IAM OIDC provider (what IRSA needs): its issuer URL
/// and the provider's ARN.
pub fn create_oidc_provider(sdk: &Sdk, cluster: &str) -> (String, String) {
    let issuer = rt()
        .block_on(sdk.eks.describe_cluster().name(cluster).send())
        .unwrap()
        .cluster()
        .and_then(|x| x.identity())
        .and_then(|x| x.oidc())
        .and_then(|x| x.issuer())
        .expect("the cluster has an OIDC issuer")
        .to_string();
    let arn = rt()
        .block_on(
            sdk.iam
                .create_open_id_connect_provider()
                .url(&issuer)
                .client_id_list("sts.amazonaws.com")
                .thumbprint_list("9e99a48a9960b14926bb7f3b02e22da2b0ab7280")
                .send(),
        )
        .unwrap()
        .open_id_connect_provider_arn()
        .unwrap()
        .to_string();
    (issuer, arn)
}

pub fn sdk_at(endpoint: &str) -> Sdk {
    let creds = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "tests");
    let conf = aws_types::SdkConfig::builder()
        .endpoint_url(endpoint)
        .region(aws_types::region::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(creds))
        .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
        .build();
    Sdk {
        sqs: aws_sdk_sqs::Client::new(&conf),
        events: aws_sdk_eventbridge::Client::new(&conf),
        iam: aws_sdk_iam::Client::new(&conf),
        eks: aws_sdk_eks::Client::new(&conf),
        ec2: aws_sdk_ec2::Client::new(&conf),
        kms: aws_sdk_kms::Client::new(&conf),
    }
}

/// An SQS queue as read back: URL, every attribute, tags.
pub struct Queue {
    pub url: String,
    pub attrs: HashMap<String, String>,
    pub tags: HashMap<String, String>,
}

/// The queue named `name`, or None when GetQueueUrl finds none.
pub fn queue(sdk: &Sdk, name: &str) -> Option<Queue> {
    rt().block_on(async {
        let url = sdk.sqs.get_queue_url().queue_name(name).send().await.ok()?.queue_url()?.to_string();
        let a = sdk.sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send().await.unwrap();
        let t = sdk.sqs.list_queue_tags().queue_url(&url).send().await.unwrap();
        Some(Queue {
            url,
            attrs: a.attributes().unwrap().iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect(),
            tags: t.tags().cloned().unwrap_or_default(),
        })
    })
}

/// ARNs of the managed policies attached to a role.
pub fn attached(sdk: &Sdk, role_name: &str) -> BTreeSet<String> {
    rt().block_on(async {
        let o = sdk.iam.list_attached_role_policies().role_name(role_name).send().await.unwrap();
        o.attached_policies().iter().filter_map(|p| p.policy_arn().map(str::to_string)).collect()
    })
}

/// ListPodIdentityAssociations for Karpenter's service account, kube-system/karpenter, of cluster `c`.
pub async fn list_karpenter_associations(sdk: &Sdk, c: &str) -> Vec<aws_sdk_eks::types::PodIdentityAssociationSummary> {
    let l = sdk
        .eks
        .list_pod_identity_associations()
        .cluster_name(c)
        .namespace("kube-system")
        .service_account("karpenter")
        .send()
        .await
        .expect("eks:ListPodIdentityAssociations");
    l.associations().to_vec()
}

/// DescribePodIdentityAssociation of association `id` of cluster `c`.
pub async fn describe_association(
    sdk: &Sdk,
    c: &str,
    id: &str,
) -> aws_sdk_eks::operation::describe_pod_identity_association::DescribePodIdentityAssociationOutput {
    sdk.eks
        .describe_pod_identity_association()
        .cluster_name(c)
        .association_id(id)
        .send()
        .await
        .expect("eks:DescribePodIdentityAssociation")
}

/// (association id, role ARN) of every Pod Identity association of kube-system/karpenter.
pub fn karpenter_associations(sdk: &Sdk, c: &str) -> Vec<(String, String)> {
    rt().block_on(async {
        let mut out = Vec::new();
        for a in list_karpenter_associations(sdk, c).await {
            let id = a.association_id().unwrap().to_string();
            let d = describe_association(sdk, c, &id).await;
            out.push((id, d.association().unwrap().role_arn().unwrap_or_default().to_string()));
        }
        out
    })
}

/// A second `up` makes no write call, and `diff` then finds nothing to do.
pub fn assert_second_up_writes_nothing(wd: &Workdir, c: &str) {
    let r = karpctl(wd, &["up", "--cluster", c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "second up must make no write call: {}", r.stdout);
    let r = karpctl(wd, &["diff", "--cluster", c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("No changes"), "{r:?}");
}

/// Parse a policy document the way a user would check it: percent-decoded JSON.
pub fn policy_json(text: &str) -> Value {
    let decoded = percent_encoding::percent_decode_str(text).decode_utf8_lossy().to_string();
    let t = if text.trim_start().starts_with('{') { text.to_string() } else { decoded };
    serde_json::from_str(&t).expect("policy JSON")
}

/// Statements of a document as a list, whether the document holds one or many.
pub fn statements(doc: &Value) -> Vec<Value> {
    match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        one => vec![one.clone()],
    }
}

/// A statement field as a sorted list of strings (string or array alike).
pub fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect(),
        _ => vec![],
    };
    out.sort();
    out
}

pub fn find_sid<'a>(stmts: &'a [Value], sid: &str) -> &'a Value {
    stmts.iter().find(|s| s["Sid"] == sid).unwrap_or_else(|| panic!("no statement {sid} in {stmts:?}"))
}

// ------------------------------------------------------------------------------------------------
// Strict mode: IAM, SQS, EventBridge, EC2 and STS against moto (stricter than ministack; started
// by `scripts/test` as KARPCTL_TEST_MOTO_ENDPOINT), EKS against ministack (moto has no access
// entries or pod identity associations), through the SDK's per-service endpoint variables.
// AWS_ENDPOINT_URL (and every inherited AWS_ENDPOINT_URL_*) is removed in this mode, so that no
// call can fall through to ministack: a service karpctl calls without a variable here would go
// to real AWS with test credentials and fail, visibly.

/// moto's URL, from `scripts/test`.
pub fn moto_endpoint() -> String {
    std::env::var("KARPCTL_TEST_MOTO_ENDPOINT").expect(
        "KARPCTL_TEST_MOTO_ENDPOINT is not set: run the integration tests with scripts/test, which starts moto next to ministack",
    )
}

/// The services a strict run sends to moto, as they appear in `AWS_ENDPOINT_URL_<SERVICE>`.
pub const STRICT_MOTO_SERVICES: [&str; 6] = ["IAM", "SQS", "EVENTBRIDGE", "EC2", "STS", "KMS"];

/// Where a strict run sends each service's calls, keyed as in `AWS_ENDPOINT_URL_<SERVICE>`
/// (IAM, SQS, EVENTBRIDGE, EC2, STS, EKS). `direct()` is moto for the first five and ministack for
/// EKS; `via` puts one service behind a microburst proxy, so that a proxy only sees (and only
/// slows) the calls its faults are for.
#[derive(Clone, Debug)]
pub struct StrictEndpoints {
    pub by_service: std::collections::BTreeMap<String, String>,
}

impl StrictEndpoints {
    /// moto and ministack as `scripts/test` started them.
    pub fn direct() -> Self {
        let moto = moto_endpoint();
        let mut by_service: std::collections::BTreeMap<String, String> =
            STRICT_MOTO_SERVICES.iter().map(|s| (s.to_string(), moto.clone())).collect();
        by_service.insert("EKS".to_string(), endpoint());
        StrictEndpoints { by_service }
    }
    /// The same, with `service` (e.g. "SQS") sent to `url` instead.
    pub fn via(mut self, service: &str, url: &str) -> Self {
        assert!(self.by_service.contains_key(service), "unknown strict service {service}");
        self.by_service.insert(service.to_string(), url.to_string());
        self
    }
    pub fn url(&self, service: &str) -> &str {
        &self.by_service[service]
    }
    /// The per-service variables, e.g. ("AWS_ENDPOINT_URL_IAM", moto).
    pub fn env(&self) -> Vec<(String, String)> {
        self.by_service.iter().map(|(s, u)| (format!("AWS_ENDPOINT_URL_{s}"), u.clone())).collect()
    }
}

/// Run karpctl in `wd` in strict mode (moto + ministack).
pub fn karpctl_strict(wd: &Workdir, args: &[&str]) -> Run {
    karpctl_strict_at(wd, args, &StrictEndpoints::direct(), &[])
}

pub fn karpctl_strict_env(wd: &Workdir, args: &[&str], env: &[(&str, &str)]) -> Run {
    karpctl_strict_at(wd, args, &StrictEndpoints::direct(), env)
}

/// Strict mode with explicit endpoints (for a proxy in front of moto or ministack). `env` as in
/// `karpctl_env`: an empty value removes the variable.
pub fn karpctl_strict_at(wd: &Workdir, args: &[&str], eps: &StrictEndpoints, env: &[(&str, &str)]) -> Run {
    let mut cmd = karpctl_base(wd, args);
    cmd.env_remove("AWS_ENDPOINT_URL").env_remove("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
    // No service may fall through to a variable this process inherited.
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_ENDPOINT_URL_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in eps.env() {
        cmd.env(k, v);
    }
    apply_env(&mut cmd, env);
    run(cmd)
}

/// Seed a cluster for strict mode: VPC, subnets and security groups in moto, the EKS cluster
/// (naming those subnets) and its add-on in ministack.
pub fn seed_strict(cluster: &str, extra: &[&str]) -> Value {
    run_seed(&["--endpoint", &endpoint(), "--ec2-endpoint", &moto_endpoint(), "--cluster", cluster], extra, "strict seed")
}

/// SDK clients for checking a strict run: IAM, SQS, EventBridge and EC2 at moto, EKS at
/// ministack.
pub fn sdk_strict() -> Sdk {
    sdk_strict_at(&StrictEndpoints::direct())
}

pub fn sdk_strict_at(eps: &StrictEndpoints) -> Sdk {
    Sdk {
        sqs: sdk_at(eps.url("SQS")).sqs,
        events: sdk_at(eps.url("EVENTBRIDGE")).events,
        iam: sdk_at(eps.url("IAM")).iam,
        eks: sdk_at(eps.url("EKS")).eks,
        ec2: sdk_at(eps.url("EC2")).ec2,
        kms: sdk_at(eps.url("KMS")).kms,
    }
}

// ------------------------------------------------------------------ shared constants

pub const REGION: &str = "us-east-1";
pub const PARTITION: &str = "aws";
pub const OWNER_TAG: &str = "karpctl.io/cluster";
pub const MARKER: &str = "karpctl.io/discovery";
pub const DISCOVERY: &str = "karpenter.sh/discovery";
/// Karpenter's interruption rules: the same file karpctl compiles (defined once there).
#[path = "../../src/catalog.rs"]
pub mod catalog;
/// The rules' parts (rule ids are `rule-<part>`), derived from `catalog::RULES`.
pub const RULE_PARTS: [&str; catalog::RULES.len()] = {
    let mut parts = [""; catalog::RULES.len()];
    let mut i = 0;
    while i < parts.len() {
        parts[i] = catalog::RULES[i].part;
        i += 1;
    }
    parts
};
/// (part, source, detail-type) of each rule, derived from `catalog::RULES`.
pub const RULE_EVENTS: [(&str, &str, &str); catalog::RULES.len()] = {
    let mut out = [("", "", ""); catalog::RULES.len()];
    let mut i = 0;
    while i < out.len() {
        let r = &catalog::RULES[i];
        out[i] = (r.part, r.source, r.detail_type);
        i += 1;
    }
    out
};
pub const CONTROLLER_PARTS: [&str; 5] =
    ["NodeLifecycle", "IAMIntegration", "EKSIntegration", "Interruption", "ResourceDiscovery"];
pub const NODE_MANAGED_POLICIES: [&str; 4] =
    ["AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore"];
pub const TRUST_EC2: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// The controller policies of Karpenter v1.14 for cluster `c` in region `r`, account `a`,
/// partition `p`, from docs/aws-behaviour.md section 3.
pub fn controller_policies_v1_14(
    c: &str,
    r: &str,
    a: &str,
    p: &str,
    node_role_arn: &str,
    queue_arn: &str,
) -> BTreeMap<&'static str, Vec<Value>> {
    let ec2 = |res: &str| format!("arn:{p}:ec2:{r}:*:{res}");
    let launch_created: Vec<String> =
        ["fleet/*", "instance/*", "volume/*", "network-interface/*", "launch-template/*", "spot-instances-request/*"]
            .iter()
            .map(|x| ec2(x))
            .collect();
    let res_cluster = format!("aws:ResourceTag/kubernetes.io/cluster/{c}");
    let req_cluster = format!("aws:RequestTag/kubernetes.io/cluster/{c}");
    let profiles = format!("arn:{p}:iam::{a}:instance-profile/*");
    let mut m = BTreeMap::new();
    m.insert(
        "NodeLifecycle",
        vec![
            json!({
                "Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": [
                    format!("arn:{p}:ec2:{r}::image/*"), format!("arn:{p}:ec2:{r}::snapshot/*"),
                    ec2("security-group/*"), ec2("subnet/*"), ec2("capacity-reservation/*"), ec2("placement-group/*"),
                ],
            }),
            json!({
                "Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": ec2("launch-template/*"),
                "Condition": {
                    "StringEquals": {res_cluster.clone(): "owned"},
                    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Resource": launch_created.clone(),
                "Condition": {
                    "StringEquals": {req_cluster.clone(): "owned", "aws:RequestTag/eks:eks-cluster-name": c},
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": launch_created,
                "Condition": {
                    "StringEquals": {
                        req_cluster.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedResourceTagging", "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": ec2("instance/*"),
                "Condition": {
                    "StringEquals": {res_cluster.clone(): "owned"},
                    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                    "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": c},
                    "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]},
                },
            }),
            json!({
                "Sid": "AllowScopedDeletion", "Effect": "Allow",
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Resource": [ec2("instance/*"), ec2("launch-template/*")],
                "Condition": {
                    "StringEquals": {res_cluster.clone(): "owned"},
                    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                },
            }),
        ],
    );
    m.insert(
        "IAMIntegration",
        vec![
            json!({
                "Sid": "AllowPassingInstanceRole", "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": node_role_arn,
                "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow",
                "Action": "iam:CreateInstanceProfile",
                "Resource": profiles.clone(),
                "Condition": {
                    "StringEquals": {
                        req_cluster.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "aws:RequestTag/topology.kubernetes.io/region": r,
                    },
                    "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileTagActions", "Effect": "Allow",
                "Action": "iam:TagInstanceProfile",
                "Resource": profiles.clone(),
                "Condition": {
                    "StringEquals": {
                        res_cluster.clone(): "owned",
                        "aws:ResourceTag/topology.kubernetes.io/region": r,
                        req_cluster.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "aws:RequestTag/topology.kubernetes.io/region": r,
                    },
                    "StringLike": {
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                        "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    },
                },
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
                "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
                "Resource": profiles.clone(),
                "Condition": {
                    "StringEquals": {res_cluster.clone(): "owned", "aws:ResourceTag/topology.kubernetes.io/region": r},
                    "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            }),
        ],
    );
    m.insert(
        "EKSIntegration",
        vec![json!({
            "Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow",
            "Action": "eks:DescribeCluster",
            "Resource": format!("arn:{p}:eks:{r}:{a}:cluster/{c}"),
        })],
    );
    m.insert(
        "Interruption",
        vec![json!({
            "Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
            "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            "Resource": queue_arn,
        })],
    );
    m.insert(
        "ResourceDiscovery",
        vec![
            json!({
                "Sid": "AllowRegionalReadActions", "Effect": "Allow",
                "Action": [
                    "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                    "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
                ],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": r}},
            }),
            json!({
                "Sid": "AllowSSMReadActions", "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": format!("arn:{p}:ssm:{r}::parameter/aws/service/*"),
            }),
            json!({"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"}),
            json!({"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"}),
            json!({"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow", "Action": "iam:GetInstanceProfile", "Resource": profiles}),
        ],
    );
    m
}

/// The JSON plan's steps as id -> action.
pub fn steps(r: &Run) -> BTreeMap<String, String> {
    r.json()["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["action"].as_str().unwrap().to_string()))
        .collect()
}

/// The rendered block of one step in human `diff` output (from its header to the next step).
pub fn block<'a>(out: &'a str, header: &str) -> &'a str {
    let start = out.find(header).unwrap_or_else(|| panic!("no `{header}` in:\n{out}"));
    let rest = &out[start..];
    let end = rest[1..].find("\n\n  ").map(|i| i + 1).unwrap_or(rest.len());
    &rest[..end]
}

/// Whether a rendered block has an added (`+`) line containing `needle`.
pub fn has_added_line(block: &str, needle: &str) -> bool {
    block.lines().any(|l| l.trim_start().starts_with('+') && l.contains(needle))
}

/// The EC2 Spot service-linked role is account-wide, and every test shares the emulator's
/// account: tests that need it present hold the read side (`spot_role_present`), the one test
/// that removes and makes it holds the write side and puts it back before it lets go.
pub static SPOT_ROLE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The Spot service-linked role's path (AWS names the role AWSServiceRoleForEC2Spot).
pub const SPOT_ROLE_PATH: &str = "/aws-service-role/spot.amazonaws.com/";

/// Make sure the Spot role exists, and keep it there while the guard lives. ministack's
/// CreateServiceLinkedRole names it AWSServiceRoleForSpot, so it is made with CreateRole at the
/// service-linked path under AWS's name.
pub fn spot_role_present(sdk: &Sdk) -> std::sync::RwLockReadGuard<'static, ()> {
    let guard = SPOT_ROLE.read().unwrap_or_else(|e| e.into_inner());
    ensure_spot_role(sdk);
    guard
}

pub fn ensure_spot_role(sdk: &Sdk) {
    rt().block_on(async {
        let trust = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "spot.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
        let r = sdk
            .iam
            .create_role()
            .role_name("AWSServiceRoleForEC2Spot")
            .path(SPOT_ROLE_PATH)
            .assume_role_policy_document(trust.to_string())
            .send()
            .await;
        if let Err(e) = r {
            use aws_sdk_iam::error::ProvideErrorMetadata;
            assert_eq!(e.code(), Some("EntityAlreadyExists"), "{e:?}");
        }
    });
}

/// Delete every role at the Spot service-linked path (hold `SPOT_ROLE.write()`).
pub fn remove_spot_roles(sdk: &Sdk) {
    rt().block_on(async {
        let out = sdk.iam.list_roles().path_prefix(SPOT_ROLE_PATH).send().await.expect("ListRoles");
        for r in out.roles() {
            sdk.iam.delete_role().role_name(r.role_name()).send().await.expect("delete the Spot role");
        }
    });
}

/// Every rule that sends to the queue, with the Karpenter event kinds (detail-types) it matches.
pub fn rules_to_queue(sdk: &Sdk, queue_arn: &str) -> BTreeMap<String, Vec<String>> {
    rt().block_on(async {
        let names = sdk.events.list_rule_names_by_target().target_arn(queue_arn).send().await.unwrap();
        let mut out = BTreeMap::new();
        for n in names.rule_names() {
            let r = sdk.events.describe_rule().name(n).send().await.unwrap();
            let p: Value = serde_json::from_str(r.event_pattern().unwrap_or("{}")).unwrap();
            out.insert(n.to_string(), strings(&p["detail-type"]));
        }
        out
    })
}
