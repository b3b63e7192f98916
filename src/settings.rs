//! Everything karpctl takes from its environment, decided once: `main.rs` builds one `Settings`
//! and hands it down, so no other module reads a variable or asks for a terminal (the AWS SDK
//! still reads its own). docs/reference.md lists every variable.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

/// The cluster when `--cluster` is not given (and no `--config`, `--all` or `--clusters`).
pub const CLUSTER: &str = "KARPCTL_CLUSTER";
/// `1`: accept a region karpctl does not know (newer than this release).
pub const ALLOW_UNKNOWN_REGION: &str = "KARPCTL_ALLOW_UNKNOWN_REGION";
/// `1`: keep the per-unit trace as `--stats` does (the benchmark reads it).
pub const TRACE: &str = "KARPCTL_TRACE";
/// The account's EventBridge quota of rules per event bus, when it was raised.
pub const RULES_PER_BUS: &str = "KARPCTL_RULES_PER_BUS";
/// The account's IAM quota of managed policies per role: used instead of asking
/// `iam:GetAccountSummary` (for credentials that may not call it).
pub const IAM_POLICIES_PER_ROLE: &str = "KARPCTL_IAM_POLICIES_PER_ROLE";
/// Seconds a consistency retry or wait goes on (default 150).
pub const CONSISTENCY_DEADLINE_SECS: &str = "KARPCTL_CONSISTENCY_DEADLINE_SECS";
/// Seconds a queue-policy change is taken to need to be in force everywhere (default 60).
pub const SQS_POLICY_PROPAGATION_SECS: &str = "KARPCTL_SQS_POLICY_PROPAGATION_SECS";
/// Seconds the EKS steps wait for the cluster to become ACTIVE (default 1800).
pub const EKS_ACTIVE_TIMEOUT_SECS: &str = "KARPCTL_EKS_ACTIVE_TIMEOUT_SECS";
/// `1` (unit tests only): rewrite the generated examples in docs/ instead of failing on drift.
pub const BLESS_DOCS: &str = "KARPCTL_BLESS_DOCS";
/// A PEM file of extra CA certificates, read as the AWS CLI reads it.
pub const CA_BUNDLE: &str = "AWS_CA_BUNDLE";
/// Where every service's calls go (the SDK reads it too; karpctl names it in errors).
pub const ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
/// `AWS_ENDPOINT_URL_<SERVICE>`: where one service's calls go.
pub const ENDPOINT_URL_PREFIX: &str = "AWS_ENDPOINT_URL_";
/// How far back the CloudTrail records of the running Karpenter are read (`30m`, `2h`, `90s`,
/// `1d`; default one hour; `--trail-window` on up, diff, doctor and import wins).
pub const TRAIL_WINDOW: &str = "KARPCTL_TRAIL_WINDOW";
/// `YYYY-MM-DD`: the date the pinned Karpenter's support status is judged on (default: today,
/// UTC); for output that must not change with the calendar (tests, recorded examples).
pub const TODAY: &str = "KARPCTL_TODAY";
/// Not empty: no colour.
pub const NO_COLOR: &str = "NO_COLOR";
/// The terminal's width for the live status line (default 80).
pub const COLUMNS: &str = "COLUMNS";
/// The log filter (tracing's `EnvFilter` syntax), instead of the one `-v` chooses.
pub const RUST_LOG: &str = "RUST_LOG";

/// AWS's default quota of rules per event bus (Service Quotas: "Maximum number of rules per event
/// bus", adjustable; docs/aws-behaviour.md 9.20).
pub const DEFAULT_RULES_PER_BUS: usize = 300;
const DEFAULT_CONSISTENCY_DEADLINE_SECS: u64 = 150;
const DEFAULT_SQS_POLICY_PROPAGATION_SECS: u64 = 60;
/// A version upgrade keeps a cluster UPDATING for minutes, sometimes most of an hour.
const DEFAULT_EKS_ACTIVE_TIMEOUT_SECS: u64 = 30 * 60;
const DEFAULT_COLUMNS: usize = 80;
/// One hour of CloudTrail records: Karpenter calls EC2 every few seconds, so an hour nearly
/// always holds its calls (docs/running-karpenter.md).
pub const DEFAULT_TRAIL_WINDOW: Duration = Duration::from_secs(3600);
/// CloudTrail keeps 90 days of management events: a longer window reads nothing more.
pub const MAX_TRAIL_WINDOW: Duration = Duration::from_secs(90 * 86_400);

/// A CloudTrail window: a number and a unit (`90s`, `30m`, `2h`, `1d`; a bare number is
/// seconds), more than zero and at most 90 days.
pub fn parse_trail_window(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration such as 30m, 2h or 1d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("{text:?} is not a duration such as 30m, 2h or 1d (units: s, m, h, d)")),
    };
    let d = Duration::from_secs(secs);
    if d.is_zero() || d > MAX_TRAIL_WINDOW {
        return Err(format!("{text:?} is outside 1s to 90d (CloudTrail keeps 90 days of records)"));
    }
    Ok(d)
}

/// The streams karpctl writes and reads, and how to show things on them.
#[derive(Clone, Copy, Debug)]
pub struct Terminal {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    /// NO_COLOR is set (and not empty).
    pub no_color: bool,
    /// COLUMNS, else 80.
    pub columns: usize,
}

impl Default for Terminal {
    /// No terminal anywhere (tests, captured output).
    fn default() -> Self {
        Terminal { stdin: false, stdout: false, stderr: false, no_color: false, columns: DEFAULT_COLUMNS }
    }
}

/// What karpctl takes from its environment. `Default` is an empty environment without a
/// terminal (what unit tests use).
#[derive(Clone, Debug)]
pub struct Settings {
    /// KARPCTL_CLUSTER (not empty).
    pub cluster: Option<String>,
    pub allow_unknown_region: bool,
    pub trace: bool,
    /// The quota of rules per event bus: KARPCTL_RULES_PER_BUS (a positive number), else AWS's
    /// default.
    pub rules_per_bus: usize,
    /// KARPCTL_IAM_POLICIES_PER_ROLE (a positive number): the quota of managed policies per
    /// role; None: read it from `iam:GetAccountSummary` when needed.
    pub iam_policies_per_role: Option<usize>,
    pub consistency_deadline: Duration,
    pub sqs_policy_propagation: Duration,
    pub eks_active_timeout: Duration,
    /// KARPCTL_TRAIL_WINDOW (a valid window), else one hour; `--trail-window` replaces it.
    pub trail_window: Duration,
    /// KARPCTL_TODAY (a valid date), else today (UTC).
    pub today: crate::running::support::Ymd,
    /// KARPCTL_BLESS_DOCS=1 (read by a unit test only).
    #[cfg_attr(not(test), allow(dead_code))]
    pub bless_docs: bool,
    /// AWS_CA_BUNDLE (not empty).
    pub ca_bundle: Option<OsString>,
    /// AWS_ENDPOINT_URL (not empty).
    pub endpoint_url: Option<String>,
    /// AWS_ENDPOINT_URL_<SERVICE> (not empty), by `<SERVICE>`.
    pub service_endpoints: BTreeMap<String, String>,
    /// RUST_LOG.
    pub log_filter: Option<String>,
    pub terminal: Terminal,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from_vars(std::iter::empty(), Terminal::default())
    }
}

impl Settings {
    /// The process's environment and streams, read now (once, in `main.rs`).
    pub fn from_env() -> Settings {
        use std::io::IsTerminal;
        let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let no_color = vars.iter().any(|(k, v)| k == NO_COLOR && !v.is_empty());
        let columns = vars
            .iter()
            .find(|(k, _)| k == COLUMNS)
            .and_then(|(_, v)| v.to_str()?.parse::<usize>().ok())
            .unwrap_or(DEFAULT_COLUMNS);
        let terminal = Terminal {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
            no_color,
            columns,
        };
        Settings::from_vars(vars, terminal)
    }

    /// Pure: the settings of these variables (name, value) and this terminal.
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>, terminal: Terminal) -> Settings {
        let vars: BTreeMap<OsString, OsString> = vars.into_iter().collect();
        let text = |k: &str| vars.get(std::ffi::OsStr::new(k)).and_then(|v| v.to_str()).map(str::to_string);
        let set = |k: &str| text(k).filter(|v| !v.is_empty());
        let one = |k: &str| text(k).is_some_and(|v| v == "1");
        let secs = |k: &str, default: u64| Duration::from_secs(text(k).and_then(|v| v.trim().parse().ok()).unwrap_or(default));
        let positive = |k: &str| text(k).and_then(|v| v.trim().parse::<usize>().ok()).filter(|n| *n > 0);
        let service_endpoints = vars
            .iter()
            .filter_map(|(k, v)| {
                let service = k.to_str()?.strip_prefix(ENDPOINT_URL_PREFIX)?;
                let v = v.to_str().filter(|v| !v.is_empty())?;
                (!service.is_empty()).then(|| (service.to_string(), v.to_string()))
            })
            .collect();
        Settings {
            cluster: set(CLUSTER),
            allow_unknown_region: one(ALLOW_UNKNOWN_REGION),
            trace: one(TRACE),
            rules_per_bus: positive(RULES_PER_BUS).unwrap_or(DEFAULT_RULES_PER_BUS),
            iam_policies_per_role: positive(IAM_POLICIES_PER_ROLE),
            consistency_deadline: secs(CONSISTENCY_DEADLINE_SECS, DEFAULT_CONSISTENCY_DEADLINE_SECS),
            sqs_policy_propagation: secs(SQS_POLICY_PROPAGATION_SECS, DEFAULT_SQS_POLICY_PROPAGATION_SECS),
            eks_active_timeout: secs(EKS_ACTIVE_TIMEOUT_SECS, DEFAULT_EKS_ACTIVE_TIMEOUT_SECS),
            trail_window: text(TRAIL_WINDOW).and_then(|v| parse_trail_window(&v).ok()).unwrap_or(DEFAULT_TRAIL_WINDOW),
            today: text(TODAY)
                .and_then(|v| crate::running::support::Ymd::parse(&v))
                .unwrap_or_else(crate::running::support::Ymd::today),
            bless_docs: one(BLESS_DOCS),
            ca_bundle: vars.get(std::ffi::OsStr::new(CA_BUNDLE)).filter(|v| !v.is_empty()).cloned(),
            endpoint_url: set(ENDPOINT_URL),
            service_endpoints,
            log_filter: text(RUST_LOG),
            terminal,
        }
    }

    /// The endpoint a service's calls go to by the environment: `AWS_ENDPOINT_URL_<SERVICE>`,
    /// else `AWS_ENDPOINT_URL`.
    pub fn endpoint_of(&self, service: &str) -> Option<&str> {
        self.service_endpoints.get(&service.to_ascii_uppercase()).or(self.endpoint_url.as_ref()).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(vars: &[(&str, &str)]) -> Settings {
        Settings::from_vars(vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))), Terminal::default())
    }

    #[test]
    fn an_empty_environment_gives_the_defaults() {
        let s = Settings::default();
        assert_eq!(s.cluster, None);
        assert!(!s.allow_unknown_region && !s.trace && !s.bless_docs);
        assert_eq!(s.rules_per_bus, 300);
        assert_eq!(s.iam_policies_per_role, None);
        assert_eq!(s.consistency_deadline, Duration::from_secs(150));
        assert_eq!(s.sqs_policy_propagation, Duration::from_secs(60));
        assert_eq!(s.eks_active_timeout, Duration::from_secs(1800));
        assert_eq!(s.ca_bundle, None);
        assert_eq!(s.endpoint_of("sqs"), None);
        assert_eq!(s.terminal.columns, 80);
        assert_eq!(s.trail_window, Duration::from_secs(3600));
    }

    #[test]
    fn trail_windows_take_a_unit_and_stay_within_cloudtrails_90_days() {
        assert_eq!(parse_trail_window("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_trail_window("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_trail_window("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_trail_window("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_trail_window("0m").is_err());
        assert!(parse_trail_window("91d").is_err());
        assert!(parse_trail_window("an hour").is_err());
        assert!(parse_trail_window("5w").is_err());
        assert_eq!(of(&[(TRAIL_WINDOW, "2h")]).trail_window, Duration::from_secs(7200));
        assert_eq!(of(&[(TRAIL_WINDOW, "soon")]).trail_window, Duration::from_secs(3600));
    }

    #[test]
    fn each_variable_is_read_as_documented() {
        let s = of(&[
            (CLUSTER, "prod"),
            (ALLOW_UNKNOWN_REGION, "1"),
            (TRACE, "1"),
            (RULES_PER_BUS, "1000"),
            (IAM_POLICIES_PER_ROLE, "20"),
            (CONSISTENCY_DEADLINE_SECS, "5"),
            (SQS_POLICY_PROPAGATION_SECS, "2"),
            (EKS_ACTIVE_TIMEOUT_SECS, " 30 "),
            (CA_BUNDLE, "/etc/ca.pem"),
            (ENDPOINT_URL, "http://all"),
            ("AWS_ENDPOINT_URL_SQS", "http://sqs"),
            (RUST_LOG, "debug"),
        ]);
        assert_eq!(s.cluster.as_deref(), Some("prod"));
        assert!(s.allow_unknown_region && s.trace);
        assert_eq!(s.rules_per_bus, 1000);
        assert_eq!(s.iam_policies_per_role, Some(20));
        assert_eq!(s.consistency_deadline, Duration::from_secs(5));
        assert_eq!(s.sqs_policy_propagation, Duration::from_secs(2));
        assert_eq!(s.eks_active_timeout, Duration::from_secs(30));
        assert_eq!(s.ca_bundle, Some(OsString::from("/etc/ca.pem")));
        assert_eq!(s.endpoint_of("sqs"), Some("http://sqs"));
        assert_eq!(s.endpoint_of("iam"), Some("http://all"));
        assert_eq!(s.log_filter.as_deref(), Some("debug"));
    }

    #[test]
    fn empty_or_unusable_values_are_as_if_unset() {
        let s = of(&[
            (CLUSTER, ""),
            (ALLOW_UNKNOWN_REGION, "yes"),
            (RULES_PER_BUS, "0"),
            (IAM_POLICIES_PER_ROLE, "many"),
            (CONSISTENCY_DEADLINE_SECS, "soon"),
            (CA_BUNDLE, ""),
            ("AWS_ENDPOINT_URL_SQS", ""),
        ]);
        assert_eq!(s.cluster, None);
        assert!(!s.allow_unknown_region);
        assert_eq!(s.rules_per_bus, 300);
        assert_eq!(s.iam_policies_per_role, None);
        assert_eq!(s.consistency_deadline, Duration::from_secs(150));
        assert_eq!(s.ca_bundle, None);
        assert_eq!(s.endpoint_of("sqs"), None);
    }
}
