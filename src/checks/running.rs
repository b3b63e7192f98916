//! The checks of the Karpenter that runs (docs/running-karpenter.md): the version CloudTrail shows
//! against the pin, refused calls, a refused lookup, the pin's support status; `running` and
//! `support` serve doctor, `up` and `diff` alike.

use super::row::{DOCTOR, EVERY, Group, check};
use crate::facts::finding::{Checker, Code, Finding, Read, Severity};
use crate::facts::observed::Running;
use crate::facts::records::LookupProblem;
use crate::facts::setup::Setup;
use crate::karpenter_iam::KarpenterVersion;
use crate::running::{self, PermissionShape, PinCheck, Seen};

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: running,
        checks: &[
            check(
                Code::RunningVersionLacksPermissions,
                "the running Karpenter needs no action the pinned permission set lacks",
                &[Read::CloudTrail],
                EVERY,
            ),
            check(Code::RunningVersionUnknown, "karpctl knows the running Karpenter's version", &[Read::CloudTrail], EVERY),
            check(
                Code::PinNewerThanRunning,
                "the pinned permission set grants nothing the running Karpenter does not call",
                &[Read::CloudTrail],
                EVERY,
            ),
            check(Code::CallsRefused, "AWS refused none of the controller's and the nodes' calls", &[Read::CloudTrail], EVERY),
            check(Code::KarpenterNotSeen, "CloudTrail shows the controller's calls", &[Read::CloudTrail], DOCTOR),
            check(
                Code::LaunchQuotaExceeded,
                "no launch inside Karpenter's fleets hit the account's vCPU quota",
                &[Read::CloudTrail],
                EVERY,
            ),
            check(
                Code::LaunchTypeUnsupported,
                "no launch inside Karpenter's fleets asked for a type or zone not offered",
                &[Read::CloudTrail],
                EVERY,
            ),
            check(Code::LaunchCapacityShort, "AWS had capacity for Karpenter's launches", &[Read::CloudTrail], EVERY),
            check(
                Code::CloudtrailReadCutShort,
                "CloudTrail's lookups reached the window's start (not cut short by their page bound)",
                &[Read::CloudTrail],
                EVERY,
            ),
        ],
    },
    Group {
        run: support,
        checks: &[check(Code::KarpenterVersionOutOfSupport, "the pinned Karpenter version is supported", &[], EVERY)],
    },
];

/// The version checks of the running versions against `pinned`: the codes judged and what they
/// found (one finding per code; a rollout's versions share it). Nothing when nothing ran.
pub fn version_checks(r: &Running, pinned: KarpenterVersion, shape: PermissionShape, role: &str) -> Vec<(Code, Option<Finding>)> {
    if r.versions.is_empty() {
        return vec![];
    }
    let checks: Vec<(&Seen, PinCheck)> = r
        .versions
        .iter()
        .map(|s| {
            let mut check = running::compare_with_pin(&s.version, pinned, shape);
            // An upgrade in flight: what this version needs is kept beside the pin's.
            if let PinCheck::Known { missing, .. } = &mut check
                && s.version.known().is_some_and(|v| r.kept.contains(&v))
            {
                missing.clear();
            }
            (s, check)
        })
        .collect();
    let rollout = if r.versions.len() > 1 {
        format!(" A rollout: {} run at once; the newest, {}, is the one to pin.", r.seen_text(), r.versions[0].version)
    } else {
        String::new()
    };
    let recorded = format!("CloudTrail, {}", r.window_text());
    let mut out = Vec::new();

    let lacking: Vec<(&Seen, &Vec<String>, &PinCheck)> = checks
        .iter()
        .filter_map(|(s, c)| match c {
            PinCheck::Known { missing, .. } if !missing.is_empty() => Some((*s, missing, c)),
            _ => None,
        })
        .collect();
    let lacks = lacking.first().map(|(_, _, c)| {
        let parts: Vec<String> =
            lacking.iter().map(|(s, missing, _)| format!("Karpenter {} needs {}", s.version, missing.join(", "))).collect();
        Finding {
            code: Code::RunningVersionLacksPermissions,
            severity: Severity::Error,
            resource: role.to_string(),
            message: format!(
                "Karpenter {} runs ({recorded}), but the permission set is pinned to {pinned} (identity.karpenter_version), which lacks what it calls: {}; the controller is refused those calls.{rollout}",
                r.seen_text(),
                parts.join("; ")
            ),
            fix: c.fix(),
        }
    });
    out.push((Code::RunningVersionLacksPermissions, lacks));

    let unknown = checks.iter().find_map(|(s, c)| match c {
        PinCheck::Unknown { latest, .. } => Some(Finding {
            code: Code::RunningVersionUnknown,
            severity: Severity::Warning,
            resource: role.to_string(),
            message: format!(
                "Karpenter {} runs ({recorded}), newer than karpctl knows (up to {latest}): its permission set may need actions the pin ({pinned}) lacks.{rollout}",
                s.version
            ),
            fix: format!(
                "upgrade karpctl to a release that knows Karpenter {}; until then watch `karpctl doctor` for refused calls",
                s.version.minor_text()
            ),
        }),
        _ => None,
    });
    out.push((Code::RunningVersionUnknown, unknown));

    // A pin newer than every version that runs: what it grants that nothing running uses.
    let newer = checks.iter().all(|(_, c)| c.pin_is_newer());
    let note = match checks.first() {
        Some((s, PinCheck::Known { unneeded, .. })) if newer && !unneeded.is_empty() => Some(Finding {
            code: Code::PinNewerThanRunning,
            severity: Severity::Note,
            resource: role.to_string(),
            message: format!(
                "the permission set is pinned to {pinned}, newer than the Karpenter that runs ({}, {recorded}): it grants actions {} does not call: {}",
                r.seen_text(),
                s.version,
                unneeded.join(", ")
            ),
            fix: format!(
                "nothing to do if Karpenter is about to be upgraded to {pinned}; else set identity.karpenter_version = \"{}\" (or \"running\") to grant only what runs",
                s.version.minor_text()
            ),
        }),
        _ => None,
    };
    out.push((Code::PinNewerThanRunning, note));
    out
}

/// One finding per (action, kind of policy) AWS refused the controller or node roles.
pub fn refusal_findings(r: &Running, severity: Severity) -> Vec<Finding> {
    r.refusals
        .iter()
        .map(|g| {
            let decode = g
                .decode_hint(true)
                .map(|cmd| {
                    format!(
                        "; to see the whole request: `{cmd}` (needs sts:DecodeAuthorizationMessage; karpctl did not check whether your credentials have it)"
                    )
                })
                .unwrap_or_default();
            Finding {
                code: Code::CallsRefused,
                severity,
                resource: g.resource.clone().unwrap_or_else(|| g.action.clone()),
                message: format!(
                    "AWS refused {} to {} {} time(s) in {} (the last at {}, {}): refused by {}{}",
                    g.action,
                    g.callers.join(", "),
                    g.count,
                    r.window_text(),
                    g.last,
                    g.error_code,
                    g.kind,
                    g.fleet_text()
                ),
                fix: format!("{}{decode}", g.kind.fix(&g.action)),
            }
        })
        .collect()
}

/// One finding per kind of launch that failed inside the controller's fleets: a vCPU quota
/// (`quota` severity: an error in doctor, a warning in `up`/`diff`; with the quota's current
/// value when Service Quotas answered), a type or zone not offered (a warning), AWS's capacity (a
/// note). The codes judged and what they found.
pub fn launch_findings(r: &Running, quota: Severity) -> Vec<(Code, Option<Finding>)> {
    use crate::running::launch::LaunchKind;
    let mut out: Vec<(Code, Option<Finding>)> = Vec::new();
    for p in &r.launches {
        let seen = format!(
            "EC2 refused {} {} inside Karpenter's CreateFleet calls in {} ({}; the last at {}: {})",
            p.count,
            p.launches_text(),
            r.window_text(),
            p.codes.join(", "),
            p.last,
            p.message
        );
        let region = p.region.clone().unwrap_or_else(|| "<region>".into());
        let (code, severity, message, fix) = match p.kind {
            LaunchKind::OnDemandQuota | LaunchKind::SpotQuota => {
                let (qcode, qname) = p.kind.quota().unwrap_or(("", ""));
                let value = r.quotas.get(qcode);
                let now = value.map(|v| format!(" {}", v.text())).unwrap_or_default();
                let other = if p.standard_only() {
                    String::new()
                } else {
                    format!(
                        "; some of these types count against another family's quota (`aws service-quotas list-service-quotas --service-code ec2 --region {region}` lists them)"
                    )
                };
                let desired = match value {
                    Some(crate::running::launch::QuotaValue::Value(v)) => format!("{}", (v * 2.0).ceil().max(1.0) as u64),
                    _ => "N".into(),
                };
                let n = if desired == "N" { " (N: the vCPUs the NodePools need at most)" } else { " (twice the current value; set what the NodePools need at most)" };
                (
                    Code::LaunchQuotaExceeded,
                    quota,
                    format!(
                        "{seen}: the account's {} vCPU quota in {region} is used up: {qname} ({qcode}){now}{other}",
                        if p.kind == LaunchKind::SpotQuota { "Spot" } else { "On-Demand" }
                    ),
                    format!(
                        "request more: `aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {qcode} --desired-value {desired} --region {region}`{n}; or cap the NodePools' spec.limits.cpu within the quota"
                    ),
                )
            }
            LaunchKind::Unsupported => (
                Code::LaunchTypeUnsupported,
                Severity::Warning,
                format!("{seen}: a type (or option) not offered there"),
                format!(
                    "exclude them from the NodePool: spec.template.spec.requirements with node.kubernetes.io/instance-type NotIn [{}] (or topology.kubernetes.io/zone NotIn [{}]); Karpenter retries elsewhere meanwhile",
                    p.instance_types.join(", "),
                    p.zones.join(", ")
                ),
            ),
            LaunchKind::Capacity => (
                Code::LaunchCapacityShort,
                Severity::Note,
                format!("{seen}: AWS had no capacity of those types there at the time; Karpenter tries the NodePool's other types and zones"),
                "widen the NodePool so Karpenter has more to fall back on: more instance families, sizes and generations, every zone, and both spot and on-demand (karpenter.sh/capacity-type) where you can".into(),
            ),
        };
        out.push((code, Some(Finding { code, severity, resource: format!("ec2:CreateFleet in {region}"), message, fix })));
    }
    out
}

/// A note when a lookup was cut short by its page bound (a busy account's other callers fill
/// the newest pages): what was not read, what was looked up by name instead, and whether a
/// longer `--trail-window` would read more (only when some lookup reached the window's start).
pub fn cut_short_finding(r: &Running) -> Option<Finding> {
    if r.cut_short.is_empty() {
        return None;
    }
    let what: Vec<String> =
        r.cut_short.iter().map(|l| format!("{} ({} records in {} page(s))", l.what(), l.events, l.pages)).collect();
    let names: Vec<String> = r.by_name.iter().map(|l| format!("{} ({} found)", l.value, l.events)).collect();
    let instead = if names.is_empty() {
        String::new()
    } else {
        format!("; Karpenter's writes were looked up by event name instead: {}", names.join(", "))
    };
    let fix = if r.longer_window_helps {
        "nothing to do while the checks above found what they look for; else read further back with --trail-window 1d (the lookups by event name reach the window's start, so a longer window reads older launches)".to_string()
    } else {
        "a longer --trail-window would read the same newest pages; nothing to do while the checks above found what they look for, else `karpctl doctor` reads more pages".to_string()
    };
    Some(Finding {
        code: Code::CloudtrailReadCutShort,
        severity: Severity::Note,
        resource: "cloudtrail:LookupEvents".into(),
        message: format!(
            "CloudTrail's lookups of {} stopped at their page bound in {}: other callers' newer records filled them, so older records were not read{instead}",
            what.join(", "),
            r.window_text()
        ),
        fix,
    })
}

/// The warning of a lookup that stopped short (refused, throttled, failed).
pub fn lookup_warning(p: &LookupProblem) -> Finding {
    Finding {
        code: Code::CloudtrailUnreadable,
        severity: Severity::Warning,
        resource: "cloudtrail:LookupEvents".into(),
        message: p.warning(),
        fix: "allow cloudtrail:LookupEvents to the credentials karpctl runs with (read-only; two lookups a second per account and Region), or ignore: nothing else depends on it".into(),
    }
}

/// The running Karpenter against the setup's version: in doctor, the role it found and the
/// version it judges with, refusals and failed launches errors (what doctor is run to find), a
/// note when nothing ran; beside a plan (`up`, `diff`), the plan's roles and pin, refusals and
/// failed launches warnings (evidence of the past, not the plan's fault), a refused lookup a
/// warning, and nothing at all when nothing is recorded (Karpenter may not be installed yet).
pub fn running(s: &Setup, c: &mut Checker) {
    let Some(r) = &s.running else { return };
    let plan = c.command.judges_a_plan();
    if let Some(p) = r.problem.as_ref().filter(|_| plan) {
        c.record(Code::CloudtrailUnreadable, Some(lookup_warning(p)));
    }
    let role = s.controller.as_ref().map(|c| c.arn.clone()).unwrap_or_default();
    let shape = PermissionShape { queue: s.queue.is_some(), zonal_shift: s.zonal_shift };
    for (code, found) in version_checks(r, s.version, shape, &role) {
        c.record(code, found);
    }
    let severity = if plan { Severity::Warning } else { Severity::Error };
    let refused = refusal_findings(r, severity);
    let judged = if plan {
        !refused.is_empty() || !r.versions.is_empty()
    } else {
        !(r.controller_roles.is_empty() && r.node_roles.is_empty())
    };
    if judged {
        c.ran(Code::CallsRefused);
        for f in refused {
            c.add(f.code, f.severity, f.resource, f.message, f.fix);
        }
    } else if !plan {
        return;
    }
    for (code, f) in launch_findings(r, severity) {
        c.record(code, f);
    }
    if !plan {
        for code in
            [Code::LaunchQuotaExceeded, Code::LaunchTypeUnsupported, Code::LaunchCapacityShort, Code::CloudtrailReadCutShort]
        {
            c.ran(code);
        }
    }
    if let Some(f) = cut_short_finding(r) {
        c.add(f.code, f.severity, f.resource, f.message, f.fix);
    }
    if r.controller_roles.is_empty() {
        return;
    }
    let note = r.versions.is_empty().then(|| Finding {
        code: Code::KarpenterNotSeen,
        severity: Severity::Note,
        resource: r.controller_roles.join(", "),
        message: format!(
            "no Karpenter calls by the controller role recorded in {} ({} CloudTrail record(s) read{}): Karpenter is not installed, not running, or runs with another role",
            r.window_text(),
            r.records,
            if r.truncated { "; older records of a busy account were not read, past the bound" } else { "" }
        ),
        fix: if r.longer_window_helps {
            "install Karpenter with this role (`karpctl output --format helm`), or read further back with --trail-window 1d".into()
        } else {
            "install Karpenter with this role (`karpctl output --format helm`); a longer --trail-window would read the same pages (see cloudtrail-read-cut-short)".into()
        },
    });
    c.record(Code::KarpenterNotSeen, note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::observed::window_text;
    use crate::facts::records::{RawEvent, Trail};
    use serde_json::json;
    use std::time::Duration;

    const ROLE: &str = "arn:aws:iam::111122223333:role/KarpenterController-c1";
    const NODE: &str = "arn:aws:iam::111122223333:role/KarpenterNodeRole-c1";

    fn event(role: &str, agent: &str, name: &str, error: Option<(&str, &str)>) -> RawEvent {
        let mut r = json!({
            "userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"arn": role}}},
            "eventTime": "2026-08-01T10:00:00Z", "eventSource": "ec2.amazonaws.com", "eventName": name,
            "userAgent": agent,
        });
        if let Some((code, message)) = error {
            r["errorCode"] = code.into();
            r["errorMessage"] = message.into();
        }
        RawEvent { cloudtrail_event: r.to_string(), resources: vec![] }
    }

    fn trail(events: Vec<RawEvent>) -> Trail {
        Trail { events, pages: 1, window: Duration::from_secs(3600), ..Default::default() }
    }

    fn v(minor: u32) -> KarpenterVersion {
        KarpenterVersion { minor }
    }

    /// What `up` finds of the running Karpenter with this pin and permission shape: each
    /// finding with its code, then each check that ran and found nothing.
    fn readiness(r: &Running, pinned: KarpenterVersion, shape: PermissionShape, role: &str) -> Vec<(Code, Option<Finding>)> {
        let mut s = Setup::empty("c1");
        s.version = pinned;
        s.running = Some(r.clone());
        s.zonal_shift = shape.zonal_shift;
        s.queue = shape.queue.then(crate::facts::setup::Queue::default);
        s.controller = Some(crate::facts::setup::ControllerRole { arn: role.into(), exists: true, ..Default::default() });
        let mut c = crate::checks::catalog::checker_for(crate::facts::finding::Command::Up);
        running(&s, &mut c);
        let mut out: Vec<(Code, Option<Finding>)> = c.findings.iter().map(|f| (f.code, Some(f.clone()))).collect();
        out.extend(c.ran.iter().filter(|code| !c.findings.iter().any(|f| f.code == **code)).map(|code| (*code, None)));
        out
    }

    fn codes(found: &[(Code, Option<Finding>)]) -> Vec<(&'static str, Severity)> {
        found.iter().filter_map(|(_, f)| f.as_ref().map(|f| (f.code.as_str(), f.severity))).collect()
    }

    #[test]
    fn a_running_version_newer_than_the_pin_is_an_error_naming_the_missing_actions() {
        let r = Running::of(&trail(vec![event(ROLE, "karpenter.sh-1.12.3", "DescribeInstances", None)]), &[ROLE.into()], &[]);
        let found = readiness(&r, v(10), PermissionShape { queue: true, zonal_shift: false }, ROLE);
        assert_eq!(codes(&found), [("running-version-lacks-permissions", Severity::Error)]);
        let f = found.iter().find_map(|(_, f)| f.clone()).unwrap();
        assert!(
            f.message.contains("1.12.3") && f.message.contains("1.10") && f.message.contains("ec2:DescribeInstanceStatus"),
            "{}",
            f.message
        );
        assert!(f.fix.contains("karpenter_version = \"1.12\"") && f.fix.contains("\"running\""), "{}", f.fix);
        // The same pin as what runs: nothing but the checks that ran.
        let same = readiness(&r, v(12), PermissionShape::default(), ROLE);
        assert!(codes(&same).is_empty(), "{same:?}");
        assert!(same.iter().any(|(c, _)| *c == Code::CallsRefused));
    }

    #[test]
    fn an_older_version_whose_grants_the_plan_keeps_lacks_nothing() {
        let mut r = Running::of(&trail(vec![event(ROLE, "karpenter.sh-1.8.2", "DescribeInstances", None)]), &[ROLE.into()], &[]);
        let shape = PermissionShape { queue: true, zonal_shift: false };
        let lacks = |r: &Running| {
            codes(&version_checks(r, v(9), shape, ROLE)).contains(&("running-version-lacks-permissions", Severity::Error))
        };
        assert!(lacks(&r), "1.9 dropped capacity reservations with tags");
        r.kept = vec![v(8)];
        assert!(!lacks(&r), "an upgrade in flight keeps them");
    }

    #[test]
    fn a_rollout_names_both_versions_and_another_roles_calls_are_ignored() {
        let r = Running::of(
            &trail(vec![
                event(ROLE, "karpenter.sh-1.11.2", "DescribeInstances", None),
                event(ROLE, "karpenter.sh-1.12.3", "DescribeInstances", None),
                event("arn:aws:iam::111122223333:role/Other", "karpenter.sh-1.14.0", "DescribeInstances", None),
            ]),
            &[ROLE.into()],
            &[],
        );
        assert_eq!(r.versions.len(), 2);
        assert_eq!(r.newest().unwrap().recorded, "1.12.3");
        let f = version_checks(&r, v(10), PermissionShape::default(), ROLE).into_iter().find_map(|(_, f)| f).unwrap();
        assert!(f.message.contains("1.12.3") && f.message.contains("1.11.2") && f.message.contains("rollout"), "{}", f.message);
        assert!(!f.message.contains("1.14.0"), "{}", f.message);
    }

    #[test]
    fn a_newer_pin_is_a_note_an_unknown_version_a_warning_nothing_recorded_nothing() {
        let r = Running::of(&trail(vec![event(ROLE, "karpenter.sh-1.10.1", "DescribeInstances", None)]), &[ROLE.into()], &[]);
        assert_eq!(codes(&readiness(&r, v(12), PermissionShape::default(), ROLE)), [("pin-newer-than-running", Severity::Note)]);
        let r = Running::of(&trail(vec![event(ROLE, "karpenter.sh-1.15.0", "DescribeInstances", None)]), &[ROLE.into()], &[]);
        assert_eq!(
            codes(&readiness(&r, v(14), PermissionShape::default(), ROLE)),
            [("running-version-unknown", Severity::Warning)]
        );
        let r = Running::of(&trail(vec![]), &[ROLE.into()], &[NODE.into()]);
        assert!(readiness(&r, v(14), PermissionShape::default(), ROLE).is_empty(), "Karpenter may not be installed yet");
    }

    #[test]
    fn refusals_of_both_roles_are_warnings_in_up_and_a_refused_lookup_names_the_permission() {
        let scp = "You are not authorized to perform this operation. User: x is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:111122223333:fleet/* with an explicit deny in a service control policy. Encoded authorization failure message: EncOdEd";
        let ecr = "User: x is not authorized to perform: ecr:GetAuthorizationToken because no identity-based policy allows the ecr:GetAuthorizationToken action";
        let r = Running::of(
            &trail(vec![
                event(ROLE, "karpenter.sh-1.14.0", "CreateFleet", Some(("Client.UnauthorizedOperation", scp))),
                event(NODE, "aws-sdk-go", "GetAuthorizationToken", Some(("AccessDeniedException", ecr))),
            ]),
            &[ROLE.into()],
            &[NODE.into()],
        );
        let found = readiness(&r, v(14), PermissionShape::default(), ROLE);
        assert_eq!(codes(&found), [("calls-refused", Severity::Warning), ("calls-refused", Severity::Warning)]);
        let fs: Vec<Finding> = found.into_iter().filter_map(|(_, f)| f).collect();
        assert!(
            fs[0].message.contains("ec2:CreateFleet") && fs[0].message.contains("service control policy"),
            "{}",
            fs[0].message
        );
        assert!(fs[0].fix.contains("decode-authorization-message --encoded-message EncOdEd"), "{}", fs[0].fix);
        assert!(fs[1].message.contains(NODE), "{}", fs[1].message);

        let mut t = trail(vec![]);
        t.problem = Some(LookupProblem::Refused { message: "AccessDeniedException: no".into() });
        let found = readiness(&Running::of(&t, &[ROLE.into()], &[]), v(14), PermissionShape::default(), ROLE);
        assert_eq!(codes(&found), [("cloudtrail-unreadable", Severity::Warning)]);
        assert!(found[0].1.as_ref().unwrap().message.contains("cloudtrail:LookupEvents"));
    }

    #[test]
    fn windows_read_as_written() {
        assert_eq!(window_text(Duration::from_secs(3600)), "1h");
        assert_eq!(window_text(Duration::from_secs(1800)), "30m");
        assert_eq!(window_text(Duration::from_secs(2 * 86_400)), "2d");
        assert_eq!(window_text(Duration::from_secs(90)), "90s");
    }
}

/// The pinned version's support status on `today` (Karpenter's SUPPORT.md, docs/karpenter-support.md).
pub fn pin_support(pinned: KarpenterVersion, today: running::support::Ymd) -> crate::facts::finding::PinSupport {
    let s = running::support::support_on(pinned, today);
    crate::facts::finding::PinSupport { version: pinned.to_string(), support: s.word(), detail: s.to_string() }
}

/// A warning when the pinned version is out of Karpenter's support on `today`.
pub fn out_of_support(pinned: KarpenterVersion, today: running::support::Ymd) -> Option<Finding> {
    let running::support::Support::Ended { since } = running::support::support_on(pinned, today) else { return None };
    let newest = KarpenterVersion::LATEST;
    Some(Finding {
        code: Code::KarpenterVersionOutOfSupport,
        severity: Severity::Warning,
        resource: format!("karpenter {pinned}"),
        message: format!(
            "Karpenter {pinned} (the pinned version) is out of support since {since}: it gets no fixes, security ones included"
        ),
        fix: format!(
            "upgrade Karpenter to a supported line (the newest karpctl knows: {newest}; see docs/karpenter-support.md), then pin it: karpenter_version = \"{newest}\""
        ),
    })
}

/// doctor: the support status of the version doctor judges with.
pub fn support(s: &Setup, c: &mut Checker) {
    if let Some(today) = s.today {
        c.record(Code::KarpenterVersionOutOfSupport, out_of_support(s.version, today));
    }
}

#[cfg(test)]
mod support_tests {
    use super::*;
    use crate::running::support::Ymd;

    #[test]
    fn an_old_pin_is_out_of_support_and_an_lts_one_is_labelled() {
        let v = |minor| KarpenterVersion { minor };
        let day = Ymd::new(2026, 12, 7);
        let f = out_of_support(v(10), day).expect("1.10 ended when 1.11 came out");
        assert_eq!((f.code, f.severity), (Code::KarpenterVersionOutOfSupport, Severity::Warning));
        assert!(f.message.contains("1.10") && f.message.contains("2026-04-06"), "{}", f.message);
        assert_eq!(out_of_support(v(14), day), None);
        let pin = pin_support(v(14), day);
        assert_eq!((pin.version.as_str(), pin.support), ("1.14", "lts"));
        assert!(pin.detail.contains("2027-07-10"), "{}", pin.detail);
        assert_eq!(Ymd::parse("2026-12-07"), Some(day));
        assert_eq!(Ymd::parse("2026-13-01"), None);
    }
}
