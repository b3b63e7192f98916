//! The catalog: every check once, in checklist order, with its code, title, the reads it needs,
//! the function that runs it and the commands that run it. One runner (`run`) serves them all:
//! doctor over the setup as found, `up` over the setup as it leaves it, `diff` as `up` would
//! leave it (`gather::as_left`); what a refused read skips derives from the rows.

use super::row::{Check, Group};
use crate::facts::finding::{Checker, Code, Command, Finding, Outcome, Read, Severity};
use crate::facts::setup::Setup;

/// The areas' rows, in checklist order.
const AREAS: [&[Group]; 7] = [
    super::identity::CHECKS,
    super::cluster::CHECKS,
    super::interruption::CHECKS,
    super::network::CHECKS,
    super::kms::CHECKS,
    super::running::CHECKS,
    super::records::CHECKS,
];

/// Each function of the checks with the rows it runs, in checklist order.
pub fn groups() -> impl Iterator<Item = &'static Group> {
    AREAS.into_iter().flatten()
}

/// Every check, in checklist order (findings and passed checks are listed in it).
pub fn catalog() -> impl Iterator<Item = &'static Check> {
    groups().flat_map(|g| g.checks.iter())
}

/// The checks `command` runs, in checklist order.
pub fn checks_for(command: Command) -> impl Iterator<Item = &'static Check> {
    catalog().filter(move |c| c.commands.contains(&command))
}

/// What a check looks at (the passed line of doctor's checklist).
pub fn title(code: Code) -> &'static str {
    catalog().find(|c| c.code == code).map(|c| c.title).unwrap_or("")
}

/// The checks of `command`'s that need `read`: skipped when AWS refuses it.
pub fn skipped_by(read: Read, command: Command) -> impl Iterator<Item = Code> {
    checks_for(command).filter(move |c| c.reads.contains(&read)).map(|c| c.code)
}

fn order(code: Code) -> usize {
    catalog().position(|c| c.code == code).unwrap_or(usize::MAX)
}

/// A checker for `command`: it records no check whose row does not run it for `command`.
pub fn checker_for(command: Command) -> Checker {
    let mut c = Checker::new(command);
    c.skip.extend(catalog().filter(|k| !k.commands.contains(&command)).map(|k| k.code));
    c
}

/// Every check `command` runs over the setup (doctor: as found; `up`: as it leaves it; `diff`:
/// as `up` would leave it): findings worst first, then in checklist order; the checks that ran
/// in checklist order (a code outside the catalog, such as a failed read's, after them).
pub fn run(s: &Setup, command: Command) -> Outcome {
    let mut c = checker_for(command);
    for u in &s.unreadable {
        if let Some(read) = Read::of_unreadable(u.code) {
            c.skip.extend(skipped_by(read, command));
        }
    }
    for g in groups().filter(|g| g.checks.iter().any(|k| k.commands.contains(&command))) {
        (g.run)(s, &mut c);
    }
    unreadable(s, &mut c);
    let mut findings = c.findings;
    findings.sort_by(|a, b| (a.severity, order(a.code), &a.resource).cmp(&(b.severity, order(b.code), &b.resource)));
    let mut checked: Vec<Code> = c.ran.iter().copied().collect();
    checked.sort_by_key(|code| (order(*code), *code));
    Outcome { checked, findings }
}

/// Each refused read, naming the permission and the checks it skipped, the same way in every
/// command: in doctor an error when the setup's own piece could not be read (a warning for AWS's
/// records and the simulator); beside a plan a warning (the plan's own checks ran, and what it
/// writes does not depend on it).
fn unreadable(s: &Setup, c: &mut Checker) {
    let cmd = c.command.name();
    for u in &s.unreadable {
        let Some(read) = Read::of_unreadable(u.code) else { continue };
        let skipped: Vec<&str> = skipped_by(read, c.command).map(Code::as_str).collect();
        if read == Read::CloudTrail {
            // Only the running Karpenter's checks need it: a warning, never an error exit.
            c.findings.push(Finding {
                code: u.code,
                severity: Severity::Warning,
                resource: u.operation.clone(),
                message: format!(
                    "{cmd} could not read {}: {} answered {}; skipped: {}",
                    read.what(),
                    u.operation,
                    u.aws_code,
                    skipped.join(", ")
                ),
                fix: format!("allow cloudtrail:LookupEvents to the credentials {cmd} runs with (read-only; CloudTrail answers two lookups a second per account and Region: run again later if it was throttled)"),
            });
            continue;
        }
        c.findings.push(Finding {
            code: u.code,
            severity: if c.command.judges_a_plan() { Severity::Warning } else { read.severity() },
            resource: u.operation.clone(),
            message: format!(
                "{cmd} could not read {}: AWS refused {} ({}); skipped: {}",
                read.what(),
                u.operation,
                u.aws_code,
                skipped.join(", ")
            ),
            fix: format!(
                "grant {} to the credentials {cmd} runs with; `{}` prints every permission {cmd} needs{}",
                u.operation,
                crate::policy::doc::grant_command(&s.cluster, cmd),
                if c.command.judges_a_plan() { "" } else { ", all reads" }
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doctor(s: &Setup) -> Outcome {
        run(s, Command::Doctor)
    }
    use crate::catalog::RULES;
    use crate::checks::identity::trusts;
    use crate::facts::finding::Severity;
    use crate::facts::setup::*;
    use crate::facts::setup::{Queue, Unreadable};
    use crate::karpenter_iam::{self, ControllerPolicyInputs};
    use crate::spec::IdentityMode;
    use std::collections::BTreeSet;

    /// The queue policy of karpctl's earlier releases and upstream: EventBridge may send, no condition.
    fn unconditioned_queue_policy() -> serde_json::Value {
        let mut p = karpenter_iam::queue_policy(Q, &[]);
        for st in p["Statement"].as_array_mut().unwrap() {
            if st["Effect"] == "Allow" {
                st.as_object_mut().unwrap().remove("Condition");
            }
        }
        p
    }
    use serde_json::json;

    const C: &str = "demo";
    const Q: &str = "arn:aws:sqs:us-east-1:111122223333:Karpenter-demo";
    const NODE: &str = "arn:aws:iam::111122223333:role/KarpenterNodeRole-demo";

    /// A setup as karpctl makes it, with a queue policy conditioned on the account.
    /// What CloudTrail shows of the clean setup's controller role: calls naming these user
    /// agents, and a refused CreateFleet.
    fn trail_of(agents: &[&str], refused: bool) -> crate::facts::observed::Running {
        use crate::facts::records::{RawEvent, Trail};
        let role = "arn:aws:iam::111122223333:role/KarpenterController-demo";
        let mut events: Vec<RawEvent> = agents
            .iter()
            .map(|a| {
                let r = json!({"userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"arn": role}}},
                    "eventTime": "2026-08-01T10:00:00Z", "eventSource": "ec2.amazonaws.com", "eventName": "DescribeInstances", "userAgent": a});
                RawEvent { cloudtrail_event: r.to_string(), resources: vec![] }
            })
            .collect();
        if refused {
            let r = json!({"userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"arn": role}}},
                "eventTime": "2026-08-01T10:00:00Z", "eventSource": "ec2.amazonaws.com", "eventName": "CreateFleet",
                "userAgent": "karpenter.sh-1.14.2", "errorCode": "Client.UnauthorizedOperation",
                "errorMessage": "User: x is not authorized to perform: ec2:CreateFleet with an explicit deny in a service control policy"});
            events.push(RawEvent { cloudtrail_event: r.to_string(), resources: vec![] });
        }
        let t = Trail { events, window: std::time::Duration::from_secs(3600), ..Default::default() };
        crate::facts::observed::Running::of(&t, &[role.into()], &[NODE.into()])
    }

    /// What CloudTrail shows of a controller (1.14.2) whose fleet had a launch fail with `code`.
    fn fleet_failed(code: &str) -> crate::facts::observed::Running {
        use crate::facts::records::{RawEvent, Trail};
        let role = "arn:aws:iam::111122223333:role/KarpenterController-demo";
        let r = json!({"userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"arn": role}}},
            "eventTime": "2026-08-01T10:00:00Z", "eventSource": "ec2.amazonaws.com", "eventName": "CreateFleet",
            "userAgent": "karpenter.sh-1.14.2", "awsRegion": "us-east-1",
            "responseElements": {"CreateFleetResponse": {"errorSet": {"item": {"errorCode": code, "errorMessage": "m",
                "lifecycle": "on-demand", "launchTemplateAndOverrides": {"overrides": {"instanceType": "m5.large"}}}}}}});
        let t = Trail {
            events: vec![RawEvent { cloudtrail_event: r.to_string(), resources: vec![] }],
            window: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        crate::facts::observed::Running::of(&t, &[role.into()], &[NODE.into()])
    }

    fn clean() -> Setup {
        let mut s = Setup::empty(C);
        s.today = Some(crate::running::support::Ymd::new(2026, 12, 7));
        s.cluster_vpc = "vpc-1".into();
        s.cluster_azs = ["us-east-1a", "us-east-1b"].iter().map(|a| a.to_string()).collect();
        let policies = karpenter_iam::controller_policies(&ControllerPolicyInputs {
            partition: "aws",
            region: "us-east-1",
            account_id: "111122223333",
            cluster: C,
            node_role_arn: NODE,
            queue_arn: Some(Q),
            kms_key_arn: Some(KEY),
            zonal_shift: false,
            version: s.version,
        });
        s.controller = Some(ControllerRole {
            name: "KarpenterController-demo".into(),
            arn: "arn:aws:iam::111122223333:role/KarpenterController-demo".into(),
            how: "Pod Identity association".into(),
            exists: true,
            trust: Some(karpenter_iam::controller_trust_pod_identity(&karpenter_iam::PodIdentityScope {
                cluster_arn: "arn:aws:eks:us-east-1:111122223333:cluster/demo",
                namespace: "kube-system",
                service_account: "karpenter",
            })),
            policies: policies
                .into_iter()
                .map(|(p, d)| RolePolicy {
                    name: p.name().into(),
                    arn: Some(p.name().into()),
                    customer_managed: true,
                    document: Some(d),
                })
                .collect(),
            assumed_through: None,
            association: Some(crate::facts::observed::Association {
                cluster: "demo".into(),
                id: "a-0123456789abcdef0".into(),
                name: "kube-system/karpenter".into(),
                role_arn: "arn:aws:iam::111122223333:role/KarpenterController-demo".into(),
                ..Default::default()
            }),
            tags: Default::default(),
        });
        s.mode = Some(IdentityMode::PodIdentity);
        s.pod_identity_agent = true;
        s.node_roles = vec![NodeRole {
            name: "KarpenterNodeRole-demo".into(),
            arn: NODE.into(),
            how: vec!["PassRole".into()],
            exists: true,
            created: Some(100),
            attached: karpenter_iam::node_managed_policy_arns("aws", "111122223333", false, s.version),
        }];
        s.access_entries = vec![AccessEntry { principal_arn: NODE.into(), kind: "EC2_LINUX".into(), created: Some(101) }];
        let mut policy = karpenter_iam::queue_policy(Q, &[]);
        policy["Statement"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .filter(|st| st["Effect"] == "Allow")
            .for_each(|st| st["Condition"] = json!({"StringEquals": {"aws:SourceAccount": ["111122223333"]}}));
        s.queue = Some(Queue {
            name: "Karpenter-demo".into(),
            arn: Q.into(),
            url: Some("https://q".into()),
            how: "rules".into(),
            exists: true,
            kms_master_key_id: Some("alias/karpenter-demo".into()),
            kms_key_arn: Some(KEY.into()),
            kms_key_policy: Some(crate::karpenter_iam::key_policy("aws", "111122223333")),
            policy: Some(policy),
        });
        s.rules = RULES
            .iter()
            .map(|crate::catalog::Rule { part: p, .. }| Rule {
                name: format!("Karpenter-demo-{p}"),
                arn: format!("arn:aws:events:us-east-1:111122223333:rule/Karpenter-demo-{p}"),
                enabled: true,
                kinds: vec![*p],
                queue_arns: vec![Q.into()],
                other_cluster: None,
            })
            .collect();
        s.discovery.subnets = ["us-east-1a", "us-east-1b"]
            .iter()
            .enumerate()
            .map(|(n, az)| TaggedSubnet {
                id: format!("subnet-{n}"),
                az: az.to_string(),
                vpc_id: "vpc-1".into(),
                ..Default::default()
            })
            .collect();
        let all = |groups: &[&str], cidrs: &[&str]| crate::facts::observed::SgRule {
            protocol: "-1".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        };
        s.discovery.groups = vec![TaggedGroup {
            id: "sg-1".into(),
            name: "nodes".into(),
            vpc_id: "vpc-1".into(),
            rules: crate::facts::observed::GroupRules {
                ingress: vec![all(&["sg-cluster"], &[])],
                egress: vec![all(&[], &["0.0.0.0/0"])],
            },
        }];
        s.control_plane_groups = vec!["sg-cluster".into()];
        s.route_tables = vec![crate::egress::RouteTable {
            id: "rtb-main".into(),
            main: true,
            subnets: vec![],
            default_routes: vec![crate::egress::DefaultRoute {
                gateway_id: None,
                other_target: Some("nat-1".into()),
                ..Default::default()
            }],
        }];
        s.spot_service_linked_role = Some(true);
        s.running = Some(trail_of(&["karpenter.sh-1.14.2"], false));
        // CloudWatch read, nothing recorded; --simulate, everything allowed.
        s.metrics = Some(crate::facts::records::Metrics {
            failed_invocations: s.rules.iter().map(|r| (r.name.clone(), Default::default())).collect(),
            oldest_message: Some(("Karpenter-demo".into(), Default::default())),
        });
        let role = s.controller.as_ref().unwrap().arn.clone();
        s.simulation = Some(Simulated {
            role_arn: Some(role),
            actions: vec!["ec2:CreateFleet".into(), "iam:PassRole".into()],
            decisions: ["ec2:CreateFleet", "iam:PassRole"].map(|a| decision(a, "allowed", Some(true), Some(true))).to_vec(),
            ..Default::default()
        });
        s
    }

    fn decision(action: &str, decision: &str, org: Option<bool>, boundary: Option<bool>) -> crate::running::simulation::Decision {
        crate::running::simulation::Decision {
            action: action.into(),
            resource: "*".into(),
            decision: decision.into(),
            allowed_by_organizations: org,
            allowed_by_boundary: boundary,
            matched: vec![],
            missing_context: vec![],
        }
    }

    fn series(points: &[(i64, f64)]) -> crate::running::metrics::Series {
        crate::running::metrics::Series {
            timestamps: points.iter().map(|p| p.0).collect(),
            values: points.iter().map(|p| p.1).collect(),
        }
    }

    const KEY: &str = "arn:aws:kms:us-east-1:111122223333:key/k1";

    /// Doctor's outcome without the note `--simulate` always adds (`simulation-scope`, tested
    /// on its own): the setup here is simulated, so every run would carry it.
    fn check(s: &Setup) -> Outcome {
        let mut o = doctor(s);
        o.findings.retain(|f| f.code != Code::SimulationScope);
        o.checked.retain(|c| *c != Code::SimulationScope);
        o
    }

    fn codes(s: &Setup) -> Vec<&'static str> {
        let mut c: Vec<&'static str> = check(s).findings.iter().map(|f| f.code.as_str()).collect();
        c.dedup();
        c
    }

    fn controller_mut(s: &mut Setup) -> &mut ControllerRole {
        s.controller.as_mut().unwrap()
    }

    #[test]
    fn a_karpctl_setup_is_clean_and_every_check_ran() {
        let o = check(&clean());
        assert!(o.findings.is_empty(), "{:#?}", o.findings);
        // Every check but --simulate's two notes: the scope (always said, left out by `check`)
        // and the one that says nothing was simulated.
        assert_eq!(o.passed().len(), checks_for(Command::Doctor).count() - 2, "{:?}", o.passed());
    }

    #[test]
    fn each_defect_gives_its_code_and_only_it() {
        type Defect = (&'static str, fn(&mut Setup));
        let defects: Vec<Defect> = vec![
            ("controller-role-not-found", |s| s.controller = None),
            // The day after 1.15 would have ended 1.14's LTS year.
            ("karpenter-version-out-of-support", |s| s.today = Some(crate::running::support::Ymd::new(2027, 8, 1))),
            ("controller-missing-permissions", |s| {
                let r = controller_mut(s);
                r.policies.retain(|p| p.name != "EKSIntegration");
            }),
            ("controller-passrole-unscoped", |s| {
                controller_mut(s).policies.push(RolePolicy {
                    name: "extra".into(),
                    document: Some(json!({"Statement": [{"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]})),
                    ..Default::default()
                })
            }),
            ("policy-near-size-limit", |s| {
                let big: Vec<String> = (0..400).map(|n| format!("arn:aws:s3:::bucket-{n}")).collect();
                controller_mut(s).policies.push(RolePolicy {
                    name: "big".into(),
                    customer_managed: true,
                    document: Some(json!({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": big}]})),
                    ..Default::default()
                })
            }),
            ("pod-identity-agent-missing", |s| s.pod_identity_agent = false),
            ("controller-trust-mismatch", |s| controller_mut(s).trust = Some(karpenter_iam::node_role_trust("aws", None))),
            ("pod-identity-session-tags-disabled", |s| {
                controller_mut(s).association.as_mut().unwrap().disable_session_tags = true
            }),
            ("pod-identity-session-policy", |s| {
                controller_mut(s).association.as_mut().unwrap().session_policy =
                    Some(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:*","Resource":"*"}]}"#.into())
            }),
            ("cluster-auth-config-map", |s| s.authentication_mode = "CONFIG_MAP".into()),
            ("node-role-not-found", |s| s.node_roles[0].exists = false),
            ("node-role-missing-managed-policy", |s| {
                s.node_roles[0].attached.remove(0);
            }),
            ("node-role-no-access-entry", |s| s.access_entries.clear()),
            ("node-access-entry-stale", |s| s.node_roles[0].created = Some(500)),
            ("queue-not-found", |s| s.queue.as_mut().unwrap().exists = false),
            ("queue-kms-aws-managed", |s| s.queue.as_mut().unwrap().kms_master_key_id = Some("alias/aws/sqs".into())),
            ("queue-policy-blocks-eventbridge", |s| {
                let p = s.queue.as_mut().unwrap().policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().push(
                    json!({"Effect": "Deny", "Principal": {"Service": ["events.amazonaws.com"]}, "Action": ["sqs:SendMessage"], "Resource": [Q]}),
                );
            }),
            ("queue-policy-unconditioned", |s| s.queue.as_mut().unwrap().policy = Some(unconditioned_queue_policy())),
            ("queue-policy-refuses-rule", |s| {
                // Every rule but the second is named: its events are refused.
                let named: Vec<String> =
                    s.rules.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, r)| r.arn.clone()).collect();
                s.queue.as_mut().unwrap().policy = Some(karpenter_iam::queue_policy(Q, &named));
            }),
            ("queue-shared", |s| s.rules[1].other_cluster = Some("prod".into())),
            ("interruption-rule-missing", |s| {
                s.rules.remove(1);
            }),
            ("interruption-rule-disabled", |s| s.rules[2].enabled = false),
            ("discovery-no-subnets", |s| s.discovery.subnets.clear()),
            ("discovery-az-without-subnet", |s| s.discovery.subnets.truncate(1)),
            ("discovery-no-security-groups", |s| s.discovery.groups.clear()),
            ("discovery-multiple-security-groups", |s| {
                let rules = s.discovery.groups[0].rules.clone();
                s.discovery.groups.push(TaggedGroup { id: "sg-2".into(), name: "more".into(), vpc_id: "vpc-1".into(), rules })
            }),
            ("discovery-outside-cluster-vpc", |s| {
                s.discovery.subnets.push(TaggedSubnet {
                    id: "subnet-x".into(),
                    az: "us-east-1a".into(),
                    vpc_id: "vpc-2".into(),
                    ..Default::default()
                })
            }),
            ("spot-service-linked-role-missing", |s| s.spot_service_linked_role = Some(false)),
            ("event-bus-rule-quota", |s| s.bus_rules = 290),
            ("running-version-lacks-permissions", |s| s.version = KarpenterVersionExt::v(10)),
            ("running-version-unknown", |s| s.running = Some(trail_of(&["karpenter.sh-1.15.0"], false))),
            ("pin-newer-than-running", |s| s.running = Some(trail_of(&["karpenter.sh-1.10.1"], false))),
            ("calls-refused", |s| s.running = Some(trail_of(&["karpenter.sh-1.14.2"], true))),
            ("karpenter-not-seen", |s| s.running = Some(trail_of(&[], false))),
            ("launch-quota-exceeded", |s| s.running = Some(fleet_failed("VcpuLimitExceeded"))),
            ("launch-type-unsupported", |s| s.running = Some(fleet_failed("Unsupported"))),
            ("launch-capacity-short", |s| s.running = Some(fleet_failed("InsufficientInstanceCapacity"))),
            ("cloudtrail-read-cut-short", |s| {
                let mut r = trail_of(&["karpenter.sh-1.14.2"], false);
                r.cut_short = vec![crate::facts::records::LookupRead {
                    region: "us-east-1".into(),
                    key: "EventSource",
                    value: "ec2.amazonaws.com".into(),
                    events: 500,
                    pages: 10,
                    cut_short: true,
                }];
                s.running = Some(r);
            }),
            ("subnet-no-way-out", |s| s.route_tables[0].default_routes.clear()),
            ("subnet-way-out-unconfirmed", |s| {
                s.route_tables[0].default_routes[0] =
                    crate::egress::DefaultRoute { gateway_id: Some("vpce-firewall".into()), ..Default::default() }
            }),
            ("node-sg-blocks-control-plane", |s| s.discovery.groups[0].rules.ingress.clear()),
            ("kms-key-policy-events", |s| {
                let p = s.queue.as_mut().unwrap().kms_key_policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().retain(|st| st["Sid"] != "AllowEventBridgeToSendInterruptionEvents");
            }),
            ("kms-key-policy-controller", |s| {
                let p = s.queue.as_mut().unwrap().kms_key_policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().retain(|st| st["Sid"] != "EnableIAMPolicies");
            }),
            ("interruption-rule-failing", |s| s.metrics.as_mut().unwrap().failed_invocations[0].1 = series(&[(600, 2.0)])),
            ("queue-unread", |s| s.metrics.as_mut().unwrap().oldest_message.as_mut().unwrap().1 = series(&[(600, 1800.0)])),
            ("simulation-scp-denied", |s| {
                s.simulation.as_mut().unwrap().decisions[0] = decision("ec2:CreateFleet", "explicitDeny", Some(false), Some(true))
            }),
            ("simulation-boundary-denied", |s| {
                s.simulation.as_mut().unwrap().decisions[1] = decision("iam:PassRole", "implicitDeny", Some(true), Some(false))
            }),
            ("simulation-not-run", |s| s.simulation.as_mut().unwrap().role_arn = None),
        ];
        let mut covered: BTreeSet<&str> = BTreeSet::new();
        for (code, inject) in defects {
            let mut s = clean();
            inject(&mut s);
            let got = codes(&s);
            let expected: &[&str] = match code {
                // The queue's part of the permission set is not required without a queue.
                "cluster-auth-config-map" => &["cluster-auth-config-map"],
                // Its older pin is out of support on the day as well.
                "running-version-lacks-permissions" => &["running-version-lacks-permissions", "karpenter-version-out-of-support"],
                _ => &[code],
            };
            assert_eq!(got, expected, "{code}");
            let f = &check(&s).findings[0];
            assert!(!f.message.is_empty() && !f.fix.is_empty() && !f.resource.is_empty(), "{f:?}");
            covered.insert(code);
        }
        // simulation-scope is said whenever the simulator ran (its own test above).
        assert_eq!(covered.len(), checks_for(Command::Doctor).count() - 1, "every check has a defect test");
    }

    #[test]
    fn tagged_subnets_are_judged_with_the_plan_and_the_mode() {
        // A public subnet without public IPs: an error, unless the plan gives nodes public IPs.
        let mut s = clean();
        s.route_tables[0].default_routes[0] =
            crate::egress::DefaultRoute { gateway_id: Some("igw-1".into()), ..Default::default() };
        assert_eq!(codes(&s), ["subnet-no-way-out"]);
        s.associate_public_ip = true;
        assert!(codes(&s).is_empty(), "{:?}", check(&s).findings);
        // Isolated with every endpoint but eks-auth: fine with IRSA, an error with Pod Identity.
        let mut s = clean();
        s.route_tables[0].default_routes.clear();
        s.endpoints = ["ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks", "sqs", "s3"]
            .iter()
            .map(|svc| crate::egress::Endpoint {
                service_name: format!("com.amazonaws.us-east-1.{svc}"),
                kind: "Interface".into(),
                ..Default::default()
            })
            .collect();
        s.mode = Some(IdentityMode::Irsa);
        assert!(!codes(&s).contains(&"subnet-no-way-out"), "{:?}", check(&s).findings);
        s.mode = Some(IdentityMode::PodIdentity);
        let f = check(&s).findings.into_iter().find(|f| f.code == "subnet-no-way-out").expect("eks-auth missing");
        assert!(f.message.contains("eks-auth"), "{}", f.message);
        // A VPC another account shares: its endpoints are invisible, so a warning, not an error.
        s.endpoints.clear();
        for t in &mut s.discovery.subnets {
            t.owner_id = "999988887777".into();
        }
        let c = codes(&s);
        assert!(c.contains(&"subnet-way-out-unconfirmed") && !c.contains(&"subnet-no-way-out"), "{c:?}");
    }

    #[test]
    fn a_refused_read_skips_the_checks_it_feeds_and_says_which() {
        let mut s = clean();
        s.controller = None;
        s.unreadable.push(Unreadable {
            code: Code::ControllerUnreadable,
            operation: "iam:GetRole".into(),
            aws_code: "AccessDenied".into(),
        });
        let o = check(&s);
        let codes: Vec<&str> = o.findings.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["controller-unreadable"], "no false controller-role-not-found");
        assert_eq!(o.findings[0].severity, Severity::Error);
        assert!(
            o.findings[0].message.contains("iam:GetRole") && o.findings[0].message.contains("controller-missing-permissions")
        );
        assert!(
            !o.passed().contains(&Code::ControllerRoleNotFound) && o.passed().contains(&Code::QueueNotFound),
            "{:?}",
            o.passed()
        );
        for read in Read::ALL {
            let code = read.unreadable();
            assert!(code.as_str().ends_with("-unreadable"));
            for k in skipped_by(read, Command::Doctor) {
                assert!(checks_for(Command::Doctor).any(|c| c.code == k), "{code} skips an unknown check {k}");
            }
        }
    }

    #[test]
    fn a_failing_rule_names_the_likely_cause_from_the_queue_policy_and_key() {
        let failing = |s: &mut Setup| s.metrics.as_mut().unwrap().failed_invocations[0].1 = series(&[(600, 3.0), (300, 1.0)]);
        let finding = |s: &Setup| check(s).findings.into_iter().find(|f| f.code == Code::InterruptionRuleFailing).unwrap();
        let mut s = clean();
        failing(&mut s);
        let f = finding(&s);
        assert_eq!((f.severity, f.resource.as_str()), (Severity::Error, "rule/Karpenter-demo-HealthEvent"));
        assert!(f.message.contains("4 event(s)") && f.message.contains("do not show why"), "{}", f.message);
        assert!(
            f.fix.contains("check both")
                && f.fix.contains("arn:aws:events:us-east-1:111122223333:rule/Karpenter-demo-HealthEvent"),
            "{}",
            f.fix
        );
        // The queue policy lets only another rule send: the policy.
        let mut p = s.clone();
        for st in p.queue.as_mut().unwrap().policy.as_mut().unwrap()["Statement"].as_array_mut().unwrap() {
            if st["Effect"] == "Allow" {
                st["Condition"] = json!({"ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:111122223333:rule/other"}});
            }
        }
        let f = finding(&p);
        assert!(f.message.contains("the queue policy does not let this rule"), "{}", f.message);
        assert!(f.fix.contains("aws:SourceArn") && f.fix.contains(Q), "{}", f.fix);
        // The key does not let EventBridge in: the key.
        let mut k = s.clone();
        let kp = k.queue.as_mut().unwrap().kms_key_policy.as_mut().unwrap();
        kp["Statement"].as_array_mut().unwrap().retain(|st| st["Sid"] != "AllowEventBridgeToSendInterruptionEvents");
        let f = finding(&k);
        assert!(f.message.contains(KEY) && f.message.contains("events.amazonaws.com"), "{}", f.message);
        assert!(f.fix.contains("AllowEventBridgeToSendInterruptionEvents"), "{}", f.fix);
    }

    #[test]
    fn an_unread_queue_names_what_to_check_and_no_datapoints_is_no_finding() {
        let mut s = clean();
        s.metrics.as_mut().unwrap().oldest_message.as_mut().unwrap().1 = series(&[(600, 1800.0)]);
        let f = check(&s).findings.into_iter().find(|f| f.code == Code::QueueUnread).unwrap();
        assert!(f.message.contains("30 minutes") && f.message.contains("nothing reads this queue"), "{}", f.message);
        assert!(
            f.fix.contains("settings.interruptionQueue is Karpenter-demo") && f.fix.contains("sqs:ReceiveMessage"),
            "{}",
            f.fix
        );
        assert!(f.fix.contains("kubectl -n kube-system get pods") && f.fix.contains("never receives"), "{}", f.fix);
        // The controller may not receive from it: that is named as the likely cause.
        controller_mut(&mut s).policies.retain(|p| p.name != "Interruption");
        let f = check(&s).findings.into_iter().find(|f| f.code == Code::QueueUnread).unwrap();
        assert!(f.fix.contains("does not allow sqs:ReceiveMessage"), "{}", f.fix);
        // Not read (no rules nor queue, or it failed otherwise than refused): neither check
        // runs; a failure is a note, no finding.
        let mut s = clean();
        s.metrics = None;
        s.records_failed = vec![crate::facts::setup::FailedRead {
            code: Code::MetricsUnreadable,
            operation: "cloudwatch:GetMetricData".into(),
            message: "the CloudWatch metrics could not be read (no answer)".into(),
        }];
        let o = check(&s);
        assert!(!o.passed().contains(&Code::QueueUnread) && !o.passed().contains(&Code::InterruptionRuleFailing));
        let problems: Vec<&Finding> = o.findings.iter().filter(|f| f.severity != Severity::Note).collect();
        assert!(problems.is_empty(), "{problems:?}");
        let failed = o.findings.iter().find(|f| f.code == Code::MetricsUnreadable).expect("the failed read, said once");
        assert_eq!((failed.severity, failed.message.as_str()), (Severity::Note, s.records_failed[0].message.as_str()));
    }

    #[test]
    fn refused_metrics_or_simulator_are_warnings_that_skip_only_their_checks() {
        for (code, op) in
            [(Code::MetricsUnreadable, "cloudwatch:GetMetricData"), (Code::SimulationUnreadable, "iam:SimulatePrincipalPolicy")]
        {
            let mut s = clean();
            s.unreadable.push(Unreadable { code, operation: op.into(), aws_code: "AccessDenied".into() });
            let o = check(&s);
            assert_eq!(o.findings.len(), 1, "{:?}", o.findings);
            assert_eq!((o.findings[0].code, o.findings[0].severity), (code, Severity::Warning));
            assert!(o.findings[0].message.contains(op) && o.findings[0].fix.contains(op), "{:?}", o.findings[0]);
            // Its checks skipped, and --simulate's notes neither passed nor said.
            assert_eq!(o.passed().len(), checks_for(Command::Doctor).count() - 4, "{:?}", o.passed());
        }
    }

    #[test]
    fn the_simulation_lists_denied_actions_by_kind_and_says_what_it_cannot_see() {
        let mut s = clean();
        let sim = s.simulation.as_mut().unwrap();
        sim.decisions = vec![
            decision("ec2:CreateFleet", "explicitDeny", Some(false), Some(true)),
            decision("ec2:RunInstances", "explicitDeny", Some(false), None),
            decision("iam:PassRole", "implicitDeny", Some(true), Some(false)),
            decision("ssm:GetParameter", "implicitDeny", None, None),
        ];
        sim.unknown_keys = vec!["aws:PrincipalOrgID".into()];
        let o = doctor(&s);
        let scp = o.findings.iter().find(|f| f.code == Code::SimulationScpDenied).unwrap();
        assert!(
            scp.message.contains("2 action(s)") && scp.message.contains("ec2:CreateFleet, ec2:RunInstances"),
            "{}",
            scp.message
        );
        assert!(scp.fix.contains("aws:PrincipalArn"), "{}", scp.fix);
        let b = o.findings.iter().find(|f| f.code == Code::SimulationBoundaryDenied).unwrap();
        assert!(b.message.contains("iam:PassRole") && !b.message.contains("ec2:CreateFleet"), "{}", b.message);
        assert!(b.fix.contains("delete-role-permissions-boundary"), "{}", b.fix);
        let scope: Vec<&Finding> = o.findings.iter().filter(|f| f.code == Code::SimulationScope).collect();
        assert_eq!(scope.len(), 1);
        assert_eq!(scope[0].severity, Severity::Note);
        assert!(scope[0].message.contains(crate::running::simulation::BLIND_SPOTS), "{}", scope[0].message);
        assert!(
            scope[0].message.contains("aws:PrincipalOrgID") && scope[0].message.contains("1 action(s) the role's own policies"),
            "{}",
            scope[0].message
        );
        // Without --simulate: none of its checks, no note.
        s.simulation = None;
        let o = doctor(&s);
        assert!(!o.findings.iter().any(|f| f.code == Code::SimulationScope) && !o.passed().contains(&Code::SimulationScpDenied));
    }

    /// The table doctor used to keep by hand (`<piece>-unreadable` and the checks it skips):
    /// the registry's reads give the same sets.
    #[test]
    fn what_a_refused_read_skips_comes_from_the_catalog() {
        let table: [(&str, &[&str]); 18] = [
            ("nodegroups-unreadable", &[]),
            (
                "cluster-unreadable",
                &[
                    "cluster-auth-config-map",
                    "controller-role-not-found",
                    "controller-trust-mismatch",
                    "pod-identity-agent-missing",
                    "discovery-az-without-subnet",
                    "discovery-outside-cluster-vpc",
                    "subnet-no-way-out",
                    "subnet-way-out-unconfirmed",
                    "node-sg-blocks-control-plane",
                ],
            ),
            (
                "controller-unreadable",
                &[
                    "controller-role-not-found",
                    "controller-missing-permissions",
                    "controller-passrole-unscoped",
                    "policy-near-size-limit",
                    "controller-trust-mismatch",
                    "kms-key-policy-controller",
                    "pod-identity-session-tags-disabled",
                    "pod-identity-session-policy",
                ],
            ),
            ("access-entries-unreadable", &["node-role-no-access-entry", "node-access-entry-stale"]),
            ("pod-identity-agent-unreadable", &["pod-identity-agent-missing"]),
            ("spot-role-unreadable", &["spot-service-linked-role-missing"]),
            ("clusters-unreadable", &["queue-shared"]),
            (
                "interruption-rules-unreadable",
                &[
                    "interruption-rule-missing",
                    "interruption-rule-disabled",
                    "queue-not-found",
                    "queue-policy-refuses-rule",
                    "queue-shared",
                    "event-bus-rule-quota",
                ],
            ),
            (
                "subnets-unreadable",
                &[
                    "discovery-no-subnets",
                    "discovery-az-without-subnet",
                    "discovery-outside-cluster-vpc",
                    "subnet-no-way-out",
                    "subnet-way-out-unconfirmed",
                ],
            ),
            (
                "security-groups-unreadable",
                &[
                    "discovery-no-security-groups",
                    "discovery-multiple-security-groups",
                    "discovery-outside-cluster-vpc",
                    "node-sg-blocks-control-plane",
                ],
            ),
            ("route-tables-unreadable", &["subnet-no-way-out", "subnet-way-out-unconfirmed"]),
            (
                "queue-unreadable",
                &[
                    "queue-not-found",
                    "queue-kms-aws-managed",
                    "queue-policy-blocks-eventbridge",
                    "queue-policy-unconditioned",
                    "queue-policy-refuses-rule",
                    "kms-key-policy-events",
                    "kms-key-policy-controller",
                ],
            ),
            ("rule-tags-unreadable", &["queue-shared"]),
            ("node-roles-unreadable", &["node-role-not-found", "node-role-missing-managed-policy", "node-access-entry-stale"]),
            ("kms-key-unreadable", &["kms-key-policy-events", "kms-key-policy-controller", "controller-missing-permissions"]),
            (
                "cloudtrail-unreadable",
                &[
                    "running-version-lacks-permissions",
                    "running-version-unknown",
                    "pin-newer-than-running",
                    "calls-refused",
                    "karpenter-not-seen",
                    "launch-quota-exceeded",
                    "launch-type-unsupported",
                    "launch-capacity-short",
                    "cloudtrail-read-cut-short",
                ],
            ),
            ("metrics-unreadable", &["interruption-rule-failing", "queue-unread"]),
            (
                "simulation-unreadable",
                &["simulation-scp-denied", "simulation-boundary-denied", "simulation-not-run", "simulation-scope"],
            ),
        ];
        for (read, (code, skipped)) in Read::ALL.into_iter().zip(table) {
            assert_eq!(read.unreadable().as_str(), code);
            let want: BTreeSet<&str> = skipped.iter().copied().collect();
            let got: BTreeSet<&str> = skipped_by(read, Command::Doctor).map(Code::as_str).collect();
            assert_eq!(got, want, "{code}");
        }
    }

    /// docs/doctor.md lists every code doctor gives; docs/readiness.md those only `up` and `diff` give.
    #[test]
    fn the_docs_list_every_code() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let doctor_md = std::fs::read_to_string(root.join("docs/doctor.md")).unwrap();
        let readiness_md = std::fs::read_to_string(root.join("docs/readiness.md")).unwrap();
        for k in catalog() {
            let page = if k.commands.contains(&Command::Doctor) { &doctor_md } else { &readiness_md };
            assert!(page.contains(&format!("`{}`", k.code)), "{} is not in its docs page", k.code);
        }
        for read in Read::ALL {
            assert!(doctor_md.contains(&format!("`{}`", read.unreadable())), "{} is not in docs/doctor.md", read.unreadable());
        }
    }

    #[test]
    fn every_code_has_one_home_and_its_string() {
        let strings: BTreeSet<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(strings.len(), Code::ALL.len());
        for c in Code::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::Value::String(c.as_str().into()));
            let in_catalog = catalog().filter(|k| k.code == *c).count();
            let unreadable = Read::ALL.iter().filter(|r| r.unreadable() == *c).count();
            assert_eq!(in_catalog + unreadable, 1, "{c}");
        }
    }

    #[test]
    fn wildcards_cover_the_permission_set_and_missing_actions_are_listed() {
        let mut s = clean();
        controller_mut(&mut s).policies = vec![RolePolicy {
            name: "admin".into(),
            document: Some(
                json!({"Statement": [{"Effect": "Allow", "Action": ["ec2:*", "iam:*", "eks:*", "sqs:*", "ssm:*", "pricing:*", "kms:Decrypt"], "Resource": "*"}]}),
            ),
            ..Default::default()
        }];
        // iam:* on * passes any role: the one finding.
        assert_eq!(codes(&s), ["controller-passrole-unscoped"]);
        controller_mut(&mut s).policies[0].document =
            Some(json!({"Statement": [{"Effect": "Allow", "Action": ["ec2:*"], "Resource": "*"}]}));
        let o = check(&s);
        let f = o.findings.iter().find(|f| f.code == "controller-missing-permissions").unwrap();
        assert!(f.message.contains("iam:PassRole") && f.message.contains("sqs:ReceiveMessage"), "{}", f.message);
        assert!(!f.message.contains("ec2:RunInstances"), "{}", f.message);
    }

    #[test]
    fn versions_change_what_is_required() {
        let mut s = clean();
        s.rules.retain(|r| !r.kinds.contains(&"CapacityReservation"));
        assert_eq!(codes(&s), ["interruption-rule-missing"]);
        assert_eq!(check(&s).findings[0].severity, Severity::Warning);
        s.running = None;
        s.version = KarpenterVersionExt::v(9);
        assert!(codes(&s).is_empty(), "capacity reservations only from 1.10");
    }

    #[test]
    fn missing_ssm_only_is_a_warning_and_read_only_registry_satisfies_pull_only() {
        let mut s = clean();
        s.node_roles[0].attached = vec![
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".into(),
            "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy".into(),
            "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly".into(),
        ];
        let o = check(&s);
        assert_eq!(o.findings.len(), 1);
        assert_eq!(
            (o.findings[0].code.as_str(), o.findings[0].severity),
            ("node-role-missing-managed-policy", Severity::Warning)
        );
        assert!(o.findings[0].message.contains("AmazonSSMManagedInstanceCore"));
    }

    #[test]
    fn no_queue_is_a_warning_and_errors_come_first() {
        let mut s = clean();
        s.queue = None;
        s.discovery.groups.clear();
        let o = check(&s);
        let got: Vec<(&str, Severity)> = o.findings.iter().map(|f| (f.code.as_str(), f.severity)).collect();
        assert_eq!(got, [("discovery-no-security-groups", Severity::Error), ("queue-not-found", Severity::Warning)]);
    }

    #[test]
    fn irsa_trust_needs_the_service_account_subject() {
        let t = karpenter_iam::controller_trust_irsa(
            "arn:aws:iam::1:oidc-provider/oidc.example/id/X",
            "oidc.example/id/X",
            "kube-system",
            "karpenter",
        );
        assert!(trusts(&t, IdentityMode::Irsa, "kube-system", "karpenter"));
        assert!(!trusts(&t, IdentityMode::Irsa, "karpenter", "karpenter"));
        assert!(!trusts(&t, IdentityMode::PodIdentity, "kube-system", "karpenter"));
    }

    trait KarpenterVersionExt {
        fn v(minor: u32) -> Self;
    }
    impl KarpenterVersionExt for crate::karpenter_iam::KarpenterVersion {
        fn v(minor: u32) -> Self {
            crate::karpenter_iam::KarpenterVersion::parse(&format!("1.{minor}")).unwrap()
        }
    }
}
