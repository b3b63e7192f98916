//! The Karpenter that runs, as AWS recorded it: CloudTrail calls (`record`), refusals (`refusal`),
//! the simulator (`simulation`), the support policy (`support`), CloudWatch (`metrics`). Pure: no
//! AWS calls, no findings (docs/running-karpenter.md).

// Wired into doctor, diff and up by the lead once the read layer and the check catalog land;
// until then nothing outside the tests calls this module.
#![allow(dead_code)]

pub mod launch;
pub mod metrics;
pub mod record;
pub mod refusal;
pub mod simulation;
pub mod support;

pub use record::{Call, RunningVersion};

use crate::karpenter_iam::{self, ControllerPolicyInputs, KarpenterVersion};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Whether `arn` (a record's issuer) is one of `roles` (the controller's role, and for doctor an
/// association's `targetRoleArn`). IAM role names are unique in an account whatever their path
/// and case ("PRODROLE" and "prodrole" cannot both exist), so the partition and account must be
/// equal and the names equal ignoring case; the path is not compared (a plan may name a role
/// without the path it was created with).
pub fn is_role(arn: &str, roles: &[&str]) -> bool {
    let Some(have) = role_key(arn) else { return false };
    roles.iter().filter_map(|r| role_key(r)).any(|want| want == have)
}

/// (partition, account, lower-case role name) of a role ARN.
fn role_key(arn: &str) -> Option<(String, String, String)> {
    let mut p = arn.splitn(6, ':');
    let (_, partition, service, _, account, rest) = (p.next()?, p.next()?, p.next()?, p.next()?, p.next()?, p.next()?);
    let name = rest.strip_prefix("role/")?.rsplit('/').next()?;
    (service == "iam" && !name.is_empty()).then(|| (partition.to_string(), account.to_string(), name.to_ascii_lowercase()))
}

/// The calls among `calls` made by one of `roles`.
pub fn calls_by<'a>(calls: &'a [Call], roles: &[&str]) -> Vec<&'a Call> {
    calls.iter().filter(|c| c.issuer_arn.as_deref().is_some_and(|a| is_role(a, roles))).collect()
}

/// One version seen running: how many calls named it and the last one's time.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub version: RunningVersion,
    pub calls: usize,
    pub last: String,
    pub last_epoch: i64,
}

/// The versions the calls name, newest version first: one normally, two during a rollout.
/// Calls without a `karpenter.sh-` token (another tool using the role) are left out.
pub fn running_versions<'a>(calls: impl IntoIterator<Item = &'a Call>) -> Vec<Seen> {
    let mut by: BTreeMap<RunningVersion, Seen> = BTreeMap::new();
    for c in calls {
        let Some(v) = &c.karpenter else { continue };
        let s = by.entry(v.clone()).or_insert_with(|| Seen {
            version: v.clone(),
            calls: 0,
            last: String::new(),
            last_epoch: i64::MIN,
        });
        s.calls += 1;
        if c.epoch > s.last_epoch {
            s.last_epoch = c.epoch;
            s.last = c.time.clone();
        }
    }
    by.into_values().rev().collect()
}

// --- The running version against the pin -----------------------------------------------------

/// Which optional parts of the permission set a cluster has (the same for both sides of a
/// comparison): the Interruption part with a queue, the ZonalShift part when enabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PermissionShape {
    pub queue: bool,
    pub zonal_shift: bool,
}

/// The controller policies of `version` for a cluster of `shape` (one made-up cluster: both
/// sides of a comparison are written for the same one).
fn policies_of(version: KarpenterVersion, shape: PermissionShape) -> Vec<Value> {
    let inputs = ControllerPolicyInputs {
        partition: "aws",
        region: "us-east-1",
        account_id: "111122223333",
        cluster: "c",
        node_role_arn: "arn:aws:iam::111122223333:role/KarpenterNodeRole-c",
        queue_arn: shape.queue.then_some("arn:aws:sqs:us-east-1:111122223333:Karpenter-c"),
        kms_key_arn: None,
        zonal_shift: shape.zonal_shift,
        version,
    };
    karpenter_iam::controller_policies(&inputs).into_iter().map(|(_, d)| d).collect()
}

/// The IAM actions the controller policies of `version` allow (every `Allow` statement's
/// `Action`), for a cluster of `shape`.
pub fn permission_set(version: KarpenterVersion, shape: PermissionShape) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for doc in policies_of(version, shape) {
        for st in doc["Statement"].as_array().into_iter().flatten() {
            if st["Effect"] != "Allow" {
                continue;
            }
            match &st["Action"] {
                Value::String(a) => {
                    out.insert(a.clone());
                }
                Value::Array(a) => out.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string))),
                _ => {}
            }
        }
    }
    out
}

/// One grant of a permission set: an action allowed on these resources under this condition
/// (one per action of each `Allow` statement).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub action: String,
    pub resources: Vec<String>,
    /// The statement's `Condition` as canonical JSON text; None without one.
    pub condition: Option<String>,
}

impl Grant {
    /// Whether this grant allows `action` on `resource` under `condition`: the same action (or a
    /// pattern of it), a resource pattern matching it, no condition or the same one.
    pub fn allows(&self, action: &str, resource: &str, condition: &Option<String>) -> bool {
        crate::policy::doc::glob(&self.action, action)
            && self.resources.iter().any(|h| crate::policy::doc::glob(h, resource))
            && (self.condition.is_none() || self.condition == *condition)
    }
}

/// The grants of the controller policies of `version`, for a cluster of `shape`.
pub fn grants(version: KarpenterVersion, shape: PermissionShape) -> Vec<Grant> {
    grants_of(&policies_of(version, shape))
}

/// The grants of these policy documents (every `Allow` statement's, one per action).
pub fn grants_of<'a>(docs: impl IntoIterator<Item = &'a Value>) -> Vec<Grant> {
    let mut out = Vec::new();
    for doc in docs {
        for st in crate::policy::doc::statements(doc) {
            if !crate::policy::doc::is_allow(st) {
                continue;
            }
            let resources: Vec<String> = crate::policy::doc::strings(&st["Resource"]).into_iter().collect();
            let condition = st.get("Condition").filter(|c| !c.is_null()).map(|c| c.to_string());
            for action in crate::policy::doc::strings(&st["Action"]) {
                out.push(Grant { action, resources: resources.clone(), condition: condition.clone() });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What `need` grants that `have` does not, one line per action: the action alone when `have`
/// never allows it, else the action with the resources `have` does not allow it on under the
/// same condition (IAM authorizes each resource of a request on its own, so any of `have`'s
/// grants may cover one).
pub fn grants_lacking(need: &[Grant], have: &[Grant]) -> Vec<String> {
    let mut by_action: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for n in need {
        for r in &n.resources {
            if have.iter().any(|h| h.allows(&n.action, r, &n.condition)) {
                continue;
            }
            let other_condition = have.iter().any(|h| h.allows(&n.action, r, &h.condition.clone()));
            // The resource part of the ARN: both sides are written for one made-up cluster.
            let shown = r.rsplit(':').next().unwrap_or(r);
            let what = if other_condition { format!("{shown} (under another condition)") } else { shown.to_string() };
            by_action.entry(n.action.as_str()).or_default().insert(what);
        }
    }
    by_action
        .into_iter()
        .map(|(action, lacking)| {
            if !have.iter().any(|h| crate::policy::doc::glob(&h.action, action)) {
                return action.to_string();
            }
            format!("{action} on {}", lacking.into_iter().collect::<Vec<_>>().join(", "))
        })
        .collect()
}

/// A running version set against the pinned permission set.
#[derive(Debug, Clone, PartialEq)]
pub enum PinCheck {
    /// karpctl knows the running minor: what its permission set needs that the pin lacks
    /// (an error: the controller is refused those calls), and what the pin grants beyond it,
    /// compared grant by grant: action, resource and condition (`grants_lacking`).
    Known {
        running: RunningVersion,
        pinned: KarpenterVersion,
        /// Needed by the running version, not granted by the pin.
        missing: Vec<String>,
        /// Granted by the pin, not needed by the running version (a note when the pin is newer).
        unneeded: Vec<String>,
    },
    /// The running version is newer than karpctl's table (`KarpenterVersion::LATEST`): a warning.
    Unknown { running: RunningVersion, latest: KarpenterVersion },
}

impl PinCheck {
    /// The fix for a pin that lacks what runs: the two values of `karpenter_version` that follow it.
    pub fn fix(&self) -> String {
        let running = match self {
            PinCheck::Known { running, .. } | PinCheck::Unknown { running, .. } => running,
        };
        format!(
            "set identity.karpenter_version = \"{}\" (the running minor) or \"running\" (follow what CloudTrail shows), then run `karpctl up`",
            running.minor_text()
        )
    }
    /// The pin is newer than what runs.
    pub fn pin_is_newer(&self) -> bool {
        matches!(self, PinCheck::Known { running, pinned, .. } if pinned.minor > running.minor && running.major == 1)
    }
}

/// Compare `running` with the `pinned` permission set, both for a cluster of `shape`.
pub fn compare_with_pin(running: &RunningVersion, pinned: KarpenterVersion, shape: PermissionShape) -> PinCheck {
    let Some(known) = running.known() else {
        return PinCheck::Unknown { running: running.clone(), latest: KarpenterVersion::LATEST };
    };
    let (need, have) = (grants(known, shape), grants(pinned, shape));
    PinCheck::Known {
        running: running.clone(),
        pinned,
        missing: grants_lacking(&need, &have),
        unneeded: grants_lacking(&have, &need),
    }
}

#[cfg(test)]
mod tests {
    use super::record::fixtures::{ROLE, record};
    use super::record::parse_record;
    use super::*;

    #[test]
    fn the_controller_is_matched_by_issuer_role_not_session_nor_path() {
        assert!(is_role(ROLE, &[ROLE]));
        assert!(is_role(ROLE, &["arn:aws:iam::111122223333:role/KarpenterController-c1"]), "a plan's ARN without the path");
        assert!(is_role(ROLE, &["arn:aws:iam::111122223333:role/karpenter/karpentercontroller-C1"]), "IAM names ignore case");
        assert!(!is_role(ROLE, &["arn:aws:iam::444455556666:role/karpenter/KarpenterController-c1"]), "another account");
        assert!(!is_role(ROLE, &["arn:aws-cn:iam::111122223333:role/karpenter/KarpenterController-c1"]), "another partition");
        assert!(!is_role(ROLE, &["arn:aws:iam::111122223333:role/KarpenterController-c10"]));
        assert!(!is_role("arn:aws:iam::111122223333:user/KarpenterController-c1", &[ROLE]), "a user of that name");
        assert!(!is_role(ROLE, &[]));
        // Two roles (the association's and its target's): either.
        let target = "arn:aws:iam::444455556666:role/Target";
        assert!(is_role(target, &[ROLE, target]));
    }

    fn call(role: &str, agent: &str, time: &str) -> Call {
        parse_record(&record(role, "ec2.amazonaws.com", "DescribeInstances", agent, time), &[]).unwrap()
    }

    #[test]
    fn running_versions_are_counted_per_version_newest_first_and_other_roles_ignored() {
        let other = "arn:aws:iam::111122223333:role/SomethingElse";
        let calls = vec![
            call(ROLE, "karpenter.sh-1.11.2", "2026-08-01T10:00:00Z"),
            call(ROLE, "karpenter.sh-1.12.3", "2026-08-01T10:05:00Z"),
            call(ROLE, "karpenter.sh-1.11.2", "2026-08-01T10:02:00Z"),
            call(ROLE, "karpenter.sh-1.12.3", "2026-08-01T10:04:00Z"),
            call(ROLE, "karpenter.sh-1.12.3", "2026-08-01T10:03:00Z"),
            call(ROLE, "aws-cli/2.17", "2026-08-01T10:06:00Z"),
            call(other, "karpenter.sh-1.14.1", "2026-08-01T10:07:00Z"),
        ];
        let mine = calls_by(&calls, &[ROLE]);
        assert_eq!(mine.len(), 6, "the other role's call is not the controller's");
        let seen = running_versions(mine);
        let got: Vec<_> = seen.iter().map(|s| (s.version.recorded.as_str(), s.calls, s.last.as_str())).collect();
        assert_eq!(got, [("1.12.3", 3, "2026-08-01T10:05:00Z"), ("1.11.2", 2, "2026-08-01T10:02:00Z")], "a rollout: both");
        assert!(running_versions(calls_by(&calls, &["arn:aws:iam::111122223333:role/Nobody"])).is_empty());
    }

    #[test]
    fn permission_sets_follow_the_version_table() {
        let plain = PermissionShape::default();
        let v = |m| KarpenterVersion { minor: m };
        assert!(permission_set(v(0), plain).contains("ec2:DescribeAvailabilityZones"));
        assert!(!permission_set(v(1), plain).contains("ec2:DescribeAvailabilityZones"));
        assert!(permission_set(v(14), plain).contains("ec2:CreateFleet"));
        assert!(!permission_set(v(14), plain).contains("sqs:ReceiveMessage"), "no queue: no Interruption part");
        assert!(permission_set(v(14), PermissionShape { queue: true, zonal_shift: false }).contains("sqs:ReceiveMessage"));
    }

    #[test]
    fn running_newer_than_the_pin_names_the_missing_actions() {
        let shape = PermissionShape { queue: true, zonal_shift: false };
        let running = RunningVersion::parse("1.12.3").unwrap();
        let check = compare_with_pin(&running, KarpenterVersion { minor: 10 }, shape);
        let PinCheck::Known { missing, unneeded, .. } = &check else { panic!("{check:?}") };
        // v1.11 added placement groups, v1.12 DescribeInstanceStatus.
        assert!(missing.contains(&"ec2:DescribePlacementGroups".to_string()), "{missing:?}");
        assert!(missing.contains(&"ec2:DescribeInstanceStatus".to_string()), "{missing:?}");
        assert!(unneeded.is_empty(), "{unneeded:?}");
        assert!(!check.pin_is_newer());
        assert!(check.fix().contains("karpenter_version = \"1.12\"") && check.fix().contains("\"running\""));
        // The same minor: nothing either way.
        let same = compare_with_pin(&running, KarpenterVersion { minor: 12 }, shape);
        assert!(matches!(&same, PinCheck::Known { missing, unneeded, .. } if missing.is_empty() && unneeded.is_empty()));
    }

    #[test]
    fn a_pin_newer_than_what_runs_names_what_is_granted_but_not_needed() {
        let running = RunningVersion::parse("v1.10.1").unwrap();
        let check = compare_with_pin(&running, KarpenterVersion { minor: 12 }, PermissionShape::default());
        assert!(check.pin_is_newer());
        let PinCheck::Known { missing, unneeded, .. } = &check else { panic!() };
        assert!(missing.is_empty(), "{missing:?}");
        assert!(unneeded.contains(&"ec2:DescribePlacementGroups".to_string()), "{unneeded:?}");
    }

    #[test]
    fn the_pin_check_compares_grants_for_every_pair_of_minors() {
        let shape = PermissionShape { queue: true, zonal_shift: false };
        let v = |m| KarpenterVersion { minor: m };
        for a in 0..=KarpenterVersion::LATEST.minor {
            for b in 0..=KarpenterVersion::LATEST.minor {
                let running = RunningVersion::parse(&format!("1.{a}.0")).unwrap();
                let PinCheck::Known { missing, .. } = compare_with_pin(&running, v(b), shape) else { panic!() };
                // Every action missing by name is missing as a whole; the same minor lacks nothing.
                for name in permission_set(v(a), shape).difference(&permission_set(v(b), shape)) {
                    assert!(missing.contains(name), "1.{a} running, 1.{b} pinned: {name} in {missing:?}");
                }
                if a == b {
                    assert!(missing.is_empty(), "1.{a}: {missing:?}");
                }
            }
        }
        // The known case: v1.3 to v1.8 create capacity reservations' tags on launch; the v1.9
        // split dropped that resource. The action names are the same; the grants are not.
        let running = RunningVersion::parse("1.8.2").unwrap();
        let PinCheck::Known { missing, .. } = compare_with_pin(&running, v(9), shape) else { panic!() };
        assert!(!missing.is_empty() && missing.iter().all(|m| m.contains("capacity-reservation/*")), "{missing:?}");
        assert!(permission_set(v(8), shape).is_subset(&permission_set(v(9), shape)), "by names alone nothing is missing");
        let PinCheck::Known { missing, .. } = compare_with_pin(&RunningVersion::parse("1.9.0").unwrap(), v(8), shape) else {
            panic!()
        };
        assert!(missing.iter().all(|m| !m.contains("capacity-reservation")), "{missing:?}");
    }

    #[test]
    fn a_version_newer_than_the_table_is_unknown() {
        let running = RunningVersion::parse("1.15.0").unwrap();
        let check = compare_with_pin(&running, KarpenterVersion::LATEST, PermissionShape::default());
        assert_eq!(check, PinCheck::Unknown { running: running.clone(), latest: KarpenterVersion::LATEST });
        assert!(!check.pin_is_newer());
    }
}
