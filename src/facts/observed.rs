//! What the checks judge that AWS describes and that `up`, `diff` and doctor all carry: security
//! group rules, a Pod Identity association, a discovery-tagged subnet. Plain data.

/// A subnet carrying `karpenter.sh/discovery=<cluster>` with its way out judged (`egress`): what
/// the way-out checks see. `setup::TaggedSubnet` is the same subnet as EC2 describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetWay {
    pub candidate: crate::egress::Candidate,
    /// It carries karpctl's marker (`karpctl.io/discovery`): karpctl put the tag there.
    pub karpctls: bool,
}

/// One security group rule, as EC2 describes it (`IpPermissions` / `IpPermissionsEgress`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SgRule {
    /// `-1` (all traffic), `tcp`, `udp`, `icmp`, or a protocol number.
    pub protocol: String,
    pub from_port: Option<i32>,
    pub to_port: Option<i32>,
    /// Source (ingress) or destination (egress) security groups.
    pub groups: Vec<String>,
    /// IPv4 and IPv6 ranges and prefix lists.
    pub cidrs: Vec<String>,
}

impl SgRule {
    /// The rule lets TCP traffic on `port` through.
    pub fn covers_tcp(&self, port: i32) -> bool {
        match self.protocol.as_str() {
            "-1" | "all" => true,
            "tcp" | "6" => match (self.from_port, self.to_port) {
                (Some(f), Some(t)) => f == -1 || (f <= port && port <= t),
                _ => true,
            },
            _ => false,
        }
    }
}

/// A security group's rules.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupRules {
    pub ingress: Vec<SgRule>,
    pub egress: Vec<SgRule>,
}

/// What the two Pod Identity checks need of an association (DescribePodIdentityAssociation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Association {
    pub cluster: String,
    pub id: String,
    /// `<namespace>/<service account>`.
    pub name: String,
    /// The role EKS assumes for it.
    pub role_arn: String,
    pub disable_session_tags: bool,
    /// The inline session policy (JSON text), if any.
    pub session_policy: Option<String>,
    /// The EKS add-on that owns it (changed only through the add-on).
    pub owner_arn: Option<String>,
}

impl Association {
    pub fn resource(&self) -> String {
        format!("podidentityassociation/{}/{}", self.cluster, self.id)
    }
    pub fn label(&self) -> String {
        format!("EKS Pod Identity association {} ({})", self.name, self.id)
    }
    pub fn update_command(&self, args: &str) -> String {
        match &self.owner_arn {
            Some(addon) => format!(
                "the EKS add-on {addon} owns it: change its Pod Identity association through the add-on (aws eks update-addon --cluster-name {} --addon-name <add-on> --pod-identity-associations ...)",
                self.cluster
            ),
            None => format!(
                "aws eks update-pod-identity-association --cluster-name {} --association-id {} {args}",
                self.cluster, self.id
            ),
        }
    }
}

// --- The running Karpenter, from CloudTrail (checks/running.rs) -----------------------------

/// The Pod Identity association as `up` leaves it, for the association checks of `up` and `diff`
/// (`resources::pod_identity::as_left` reads it off the observed nodes).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AssociationAsLeft {
    /// None to judge: IRSA, `down`, or nothing observed yet.
    #[default]
    Unjudged,
    /// One karpctl manages: `up` gives it the plan's fields (session tags on, no session policy).
    Ours,
    /// One karpctl never changes (an EKS add-on's), with the trust the controller role will have.
    Theirs { association: Association, trust: Option<serde_json::Value> },
}

use crate::facts::records::{LookupProblem, LookupRead, Trail};
use crate::running::launch::{LaunchProblem, QuotaValue};
use crate::running::refusal::RefusalGroup;
use crate::running::{self, RunningVersion, Seen};
use std::collections::BTreeMap;
use std::time::Duration;

/// What one CloudTrail read says of a cluster's Karpenter: the versions its controller role's
/// calls name (newest first) and the calls AWS refused the controller and node roles.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Running {
    pub window: Duration,
    pub controller_roles: Vec<String>,
    pub node_roles: Vec<String>,
    /// Newest first: one normally, two during a rollout.
    pub versions: Vec<Seen>,
    pub refusals: Vec<RefusalGroup>,
    /// Records read (all roles), and whether a source had more pages than the bound.
    pub records: usize,
    pub truncated: bool,
    /// The lookup stopped short (refused, throttled, failed): a warning naming the permission.
    pub problem: Option<LookupProblem>,
    /// Launches that failed inside the controller's fleets (not refusals), one group per kind.
    pub launches: Vec<LaunchProblem>,
    /// The current values of the quotas those launches hit (Service Quotas code), read after.
    pub quotas: BTreeMap<String, QuotaValue>,
    /// The lookups cut short by their page bound; the lookups by event name made after them.
    pub cut_short: Vec<LookupRead>,
    pub by_name: Vec<LookupRead>,
    /// A longer window would read more (`Trail::longer_window_reads_more`).
    pub longer_window_helps: bool,
    /// Older versions whose grants the controller policies keep beside the pin's (an upgrade in
    /// flight, `upgrade`): they lack nothing.
    pub kept: Vec<crate::karpenter_iam::KarpenterVersion>,
}

impl Running {
    /// Judge `trail` for these roles (role ARNs; a path or case difference still matches).
    pub fn of(trail: &Trail, controller_roles: &[String], node_roles: &[String]) -> Running {
        let calls: Vec<running::Call> =
            trail.events.iter().filter_map(|e| running::record::parse_record(&e.cloudtrail_event, &e.resources).ok()).collect();
        let controller: Vec<&str> = controller_roles.iter().map(String::as_str).filter(|r| !r.is_empty()).collect();
        let all: Vec<&str> =
            controller.iter().copied().chain(node_roles.iter().map(String::as_str)).filter(|r| !r.is_empty()).collect();
        let versions =
            if controller.is_empty() { vec![] } else { running::running_versions(running::calls_by(&calls, &controller)) };
        let refused = if all.is_empty() { vec![] } else { running::refusal::refusals(running::calls_by(&calls, &all)) };
        let launches =
            if controller.is_empty() { vec![] } else { running::launch::launch_problems(running::calls_by(&calls, &controller)) };
        Running {
            window: trail.window,
            controller_roles: controller_roles.to_vec(),
            node_roles: node_roles.to_vec(),
            versions,
            refusals: refused,
            records: calls.len(),
            truncated: trail.truncated,
            problem: trail.problem.clone(),
            launches,
            quotas: BTreeMap::new(),
            cut_short: trail.cut_short().into_iter().cloned().collect(),
            by_name: trail.reads.iter().filter(|r| r.key == "EventName").cloned().collect(),
            longer_window_helps: trail.longer_window_reads_more(),
            kept: vec![],
        }
    }

    /// The newest version running (the one `karpenter_version = "running"` follows).
    pub fn newest(&self) -> Option<&RunningVersion> {
        self.versions.first().map(|s| &s.version)
    }

    /// The Service Quotas codes of the quotas the failed launches hit (to read their values).
    pub fn quota_codes(&self) -> Vec<&'static str> {
        self.launches.iter().filter_map(|l| l.kind.quota().map(|q| q.0)).collect()
    }

    /// Why nothing was found beyond the window: "; the lookups of ec2.amazonaws.com in us-east-2
    /// stopped at their page bound (other callers' newer records filled them)", or nothing.
    pub fn cut_short_text(&self) -> String {
        if self.cut_short.is_empty() {
            return String::new();
        }
        let what: Vec<String> = self.cut_short.iter().map(|l| l.what()).collect();
        format!("; the lookups of {} stopped at their page bound (other callers' newer records filled them)", what.join(", "))
    }

    /// What to say of `--trail-window`: to read further back when that would read more; that it
    /// would not when every lookup was cut short by its bound; nothing when the read failed.
    pub fn window_hint(&self) -> &'static str {
        if self.longer_window_helps {
            "; or read further back in CloudTrail with --trail-window (e.g. 1d)"
        } else if !self.cut_short.is_empty() && self.problem.is_none() {
            "; a longer --trail-window would read the same newest pages"
        } else {
            ""
        }
    }

    /// "the last 1h", "the last 30m".
    pub fn window_text(&self) -> String {
        format!("the last {}", window_text(self.window))
    }

    /// "1.12.3 (40 calls, the last at ...)" for each version, "and" between.
    pub fn seen_text(&self) -> String {
        self.versions.iter().map(seen_text).collect::<Vec<_>>().join(" and ")
    }
}

/// A window as a person writes it: `1h`, `30m`, `90s`, `2d`.
pub fn window_text(w: Duration) -> String {
    let s = w.as_secs();
    match s {
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s >= 3600 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

pub fn seen_text(s: &Seen) -> String {
    format!("{} ({} call(s), the last at {})", s.version, s.calls, s.last)
}
