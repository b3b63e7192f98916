//! Launches that failed inside a fleet for a reason other than a refusal (a `CreateFleet`
//! record's `errorSet`): a vCPU quota, AWS's capacity, a type or zone not offered; grouped per
//! kind, each kind with its fix (docs/running-karpenter.md, "Launches inside a fleet").

use super::record::Call;
use std::collections::BTreeMap;

/// What stopped a launch inside a fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LaunchKind {
    /// `VcpuLimitExceeded`: the account's On-Demand vCPU quota in the Region.
    OnDemandQuota,
    /// `MaxSpotInstanceCountExceeded`: the account's Spot vCPU quota in the Region.
    SpotQuota,
    /// `InsufficientInstanceCapacity`, `UnfulfillableCapacity`: AWS had none of that type there.
    Capacity,
    /// `Unsupported`, `InvalidParameterValue`: a type (or option) not offered in that zone.
    Unsupported,
}

impl LaunchKind {
    /// The kind of an `errorSet` entry's `errorCode`; None for a refusal or another code.
    pub fn of(code: &str) -> Option<LaunchKind> {
        match code {
            "VcpuLimitExceeded" => Some(LaunchKind::OnDemandQuota),
            "MaxSpotInstanceCountExceeded" => Some(LaunchKind::SpotQuota),
            "InsufficientInstanceCapacity" | "UnfulfillableCapacity" => Some(LaunchKind::Capacity),
            "Unsupported" | "InvalidParameterValue" => Some(LaunchKind::Unsupported),
            _ => None,
        }
    }

    /// The Service Quotas code (service `ec2`) of the standard families' quota (A, C, D, H, I,
    /// M, R, T, Z), and its name.
    pub fn quota(&self) -> Option<(&'static str, &'static str)> {
        match self {
            LaunchKind::OnDemandQuota => Some(("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")),
            LaunchKind::SpotQuota => Some(("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests")),
            _ => None,
        }
    }
}

/// The current value of a quota, as Service Quotas answered (`servicequotas:GetServiceQuota`).
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaValue {
    /// vCPUs.
    Value(f64),
    /// The caller may not read it: AWS's code and message.
    Refused(String),
    /// Any other failure, as its message.
    Failed(String),
}

impl QuotaValue {
    /// "is 32 vCPUs", or why it is not known.
    pub fn text(&self) -> String {
        match self {
            QuotaValue::Value(v) => format!("is {v} vCPUs"),
            QuotaValue::Refused(m) => {
                format!("could not be read: servicequotas:GetServiceQuota was refused ({m}); allow it to read the current value")
            }
            QuotaValue::Failed(m) => format!("could not be read: servicequotas:GetServiceQuota failed: {m}"),
        }
    }
}

/// Whether an instance type is of the standard families the quotas of [`LaunchKind::quota`]
/// count (`m5.large` yes; `g5.xlarge`, `p4d.24xlarge`, `inf2.xlarge`, `trn1.2xlarge` no).
pub fn standard_family(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or(instance_type).to_ascii_lowercase();
    let others = ["inf", "dl", "hpc", "trn", "mac", "u-", "vt"];
    family.starts_with(['a', 'c', 'd', 'h', 'i', 'm', 'r', 't', 'z']) && !others.iter().any(|o| family.starts_with(o))
}

/// The failed launches of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchProblem {
    pub kind: LaunchKind,
    /// The `errorCode`s seen (sorted).
    pub codes: Vec<String>,
    pub count: usize,
    /// The last one's time as recorded, in seconds since the epoch, and its message.
    pub last: String,
    pub last_epoch: i64,
    pub message: String,
    /// `spot`/`on-demand`, instance types and zones seen (each sorted).
    pub lifecycles: Vec<String>,
    pub instance_types: Vec<String>,
    pub zones: Vec<String>,
    /// The Region the fleets were in (the records' `awsRegion`).
    pub region: Option<String>,
}

impl LaunchProblem {
    /// "spot and on-demand launches of c5.large, m5.large in us-east-2a".
    pub fn launches_text(&self) -> String {
        let lifecycles = if self.lifecycles.is_empty() { String::new() } else { format!("{} ", self.lifecycles.join(" and ")) };
        let types =
            if self.instance_types.is_empty() { String::new() } else { format!(" of {}", self.instance_types.join(", ")) };
        let zones = if self.zones.is_empty() { String::new() } else { format!(" in {}", self.zones.join(", ")) };
        format!("{lifecycles}launches{types}{zones}")
    }

    /// Every instance type seen is of the standard families (or none was named).
    pub fn standard_only(&self) -> bool {
        self.instance_types.iter().all(|t| standard_family(t))
    }
}

fn add_sorted(list: &mut Vec<String>, v: Option<&str>) {
    if let Some(v) = v
        && !list.iter().any(|x| x == v)
    {
        list.push(v.to_string());
        list.sort();
    }
}

/// The failed launches (not refusals) inside the fleets among `calls`, one group per kind, the
/// most recent group first.
pub fn launch_problems<'a>(calls: impl IntoIterator<Item = &'a Call>) -> Vec<LaunchProblem> {
    let mut by: BTreeMap<LaunchKind, LaunchProblem> = BTreeMap::new();
    for c in calls {
        for e in &c.fleet_errors {
            let Some(kind) = LaunchKind::of(&e.code) else { continue };
            let p = by.entry(kind).or_insert_with(|| LaunchProblem {
                kind,
                codes: vec![],
                count: 0,
                last: String::new(),
                last_epoch: i64::MIN,
                message: String::new(),
                lifecycles: vec![],
                instance_types: vec![],
                zones: vec![],
                region: None,
            });
            p.count += 1;
            add_sorted(&mut p.codes, Some(&e.code));
            add_sorted(&mut p.lifecycles, e.lifecycle.as_deref());
            add_sorted(&mut p.instance_types, e.instance_type.as_deref());
            add_sorted(&mut p.zones, e.zone.as_deref());
            if c.epoch >= p.last_epoch {
                p.last_epoch = c.epoch;
                p.last = c.time.clone();
                p.message = e.message.clone();
                p.region = c.region.clone().or(p.region.take());
            }
        }
    }
    let mut out: Vec<LaunchProblem> = by.into_values().collect();
    out.sort_by(|a, b| b.last_epoch.cmp(&a.last_epoch).then_with(|| a.kind.cmp(&b.kind)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::record::fixtures::{ROLE, record};
    use crate::running::record::parse_record;
    use serde_json::{Value, json};

    fn fleet(time: &str, items: Value) -> Call {
        let mut r: Value =
            serde_json::from_str(&record(ROLE, "ec2.amazonaws.com", "CreateFleet", "karpenter.sh-1.12.3", time)).unwrap();
        r["responseElements"] = json!({"CreateFleetResponse": {"fleetId": "fleet-1", "errorSet": {"item": items}}});
        parse_record(&r.to_string(), &[]).unwrap()
    }

    fn entry(code: &str, lifecycle: &str, t: &str, zone: &str) -> Value {
        json!({"errorCode": code, "errorMessage": format!("{code}: {t}"), "lifecycle": lifecycle,
               "launchTemplateAndOverrides": {"overrides": {"instanceType": t, "availabilityZone": zone}}})
    }

    #[test]
    fn failed_launches_group_per_kind_with_types_zones_and_the_quota_code() {
        let calls = vec![
            fleet("2026-08-01T10:00:00Z", entry("VcpuLimitExceeded", "on-demand", "m5.large", "eu-west-1a")),
            fleet(
                "2026-08-01T10:05:00Z",
                json!([
                    entry("VcpuLimitExceeded", "on-demand", "c5.large", "eu-west-1b"),
                    entry("InsufficientInstanceCapacity", "spot", "c5.xlarge", "eu-west-1a"),
                    entry("UnfulfillableCapacity", "spot", "c5.2xlarge", "eu-west-1a"),
                    entry("Unsupported", "on-demand", "m7i.large", "eu-west-1c"),
                    entry("UnauthorizedOperation", "spot", "m5.large", "eu-west-1a"),
                ]),
            ),
        ];
        let got = launch_problems(&calls);
        let kinds: Vec<(LaunchKind, usize)> = got.iter().map(|p| (p.kind, p.count)).collect();
        assert_eq!(
            kinds,
            [(LaunchKind::OnDemandQuota, 2), (LaunchKind::Capacity, 2), (LaunchKind::Unsupported, 1)],
            "a refusal is not a launch problem"
        );
        let q = &got[0];
        assert_eq!((q.last.as_str(), q.region.as_deref()), ("2026-08-01T10:05:00Z", Some("eu-west-1")));
        assert_eq!(q.launches_text(), "on-demand launches of c5.large, m5.large in eu-west-1a, eu-west-1b");
        assert_eq!(q.kind.quota().map(|q| q.0), Some("L-1216C47A"));
        assert!(q.standard_only());
        assert_eq!(got[1].codes, ["InsufficientInstanceCapacity", "UnfulfillableCapacity"]);
        assert_eq!(LaunchKind::SpotQuota.quota().map(|q| q.0), Some("L-34B43A08"));
        assert_eq!(LaunchKind::of("MaxSpotInstanceCountExceeded"), Some(LaunchKind::SpotQuota));
        assert_eq!(LaunchKind::of("InvalidParameterValue"), Some(LaunchKind::Unsupported));
        for (t, standard) in [
            ("m5.large", true),
            ("c7gn.xlarge", true),
            ("im4gn.large", true),
            ("t3a.micro", true),
            ("g5.xlarge", false),
            ("p4d.24xlarge", false),
            ("inf2.xlarge", false),
            ("trn1.2xlarge", false),
            ("dl1.24xlarge", false),
            ("hpc7g.4xlarge", false),
            ("x2idn.16xlarge", false),
            ("u-6tb1.metal", false),
            ("mac2.metal", false),
        ] {
            assert_eq!(standard_family(t), standard, "{t}");
        }
    }
}
