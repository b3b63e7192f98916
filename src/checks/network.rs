//! Checks on where nodes launch: the discovery-tagged subnets and security groups, each tagged
//! subnet's way out, and the node security group's rules for the control plane. Each runs over a
//! `Setup` (the way-out and security group ones for `up` and `diff` too, over the subnets and
//! group the plan leaves tagged); their judgements are public over plain facts.

use super::row::{DOCTOR, EVERY, Group, check};
use crate::facts::finding::{Checker, Code, Finding, Read, Severity};
use crate::facts::observed::{GroupRules, SgRule, SubnetWay};
use crate::facts::setup::Setup;
use crate::spec::IdentityMode;
use std::collections::BTreeSet;

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: discovery,
        checks: &[
            check(Code::DiscoveryNoSubnets, "subnets carry the discovery tag", &[Read::Subnets], DOCTOR),
            check(
                Code::DiscoveryAzWithoutSubnet,
                "every AZ of the cluster has a discovery-tagged subnet",
                &[Read::Cluster, Read::Subnets],
                DOCTOR,
            ),
            check(Code::DiscoveryNoSecurityGroups, "a security group carries the discovery tag", &[Read::SecurityGroups], DOCTOR),
            check(
                Code::DiscoveryMultipleSecurityGroups,
                "exactly one security group carries it",
                &[Read::SecurityGroups],
                DOCTOR,
            ),
            check(
                Code::DiscoveryOutsideClusterVpc,
                "tagged subnets and groups are in the cluster's VPC",
                &[Read::Cluster, Read::Subnets, Read::SecurityGroups],
                DOCTOR,
            ),
        ],
    },
    Group {
        run: network,
        checks: &[
            check(
                Code::SubnetNoWayOut,
                "every discovery-tagged subnet has a way out",
                &[Read::Cluster, Read::Subnets, Read::RouteTables],
                EVERY,
            ),
            check(
                Code::SubnetWayOutUnconfirmed,
                "karpctl can see each tagged subnet's way out",
                &[Read::Cluster, Read::Subnets, Read::RouteTables],
                EVERY,
            ),
            check(
                Code::NodeSgBlocksControlPlane,
                "the node security group lets the control plane in",
                &[Read::Cluster, Read::SecurityGroups],
                EVERY,
            ),
        ],
    },
];

/// Karpenter launches into any subnet carrying the discovery tag, whoever put it there: one
/// nodes cannot work from (no route out, a public one without public IPs, isolated without the
/// endpoints) makes nodes that never join (an error); one whose way out karpctl cannot confirm
/// is a warning. `up` and `diff` run it on the subnets Karpenter will see once the plan is
/// applied, doctor on every tagged subnet of the cluster's VPC: both judge with
/// `egress::judge`. Returns the two checks by code.
pub fn tagged_subnets_have_a_way_out(
    (tag_key, tag_value): (&str, &str),
    subnets: &[SubnetWay],
    net: &crate::egress::Network,
) -> [(Code, Option<Finding>); 2] {
    use crate::egress::{Verdict, Way, judge};
    let (mut bad, mut unsure) = (Vec::new(), Vec::new());
    for s in subnets {
        match judge(&s.candidate, net) {
            Verdict::Usable => {}
            Verdict::Unconfirmed { why, fix } => unsure.push((s.candidate.id.as_str(), why, fix)),
            Verdict::Unusable(why) => bad.push((s, why)),
        }
    }
    let error = (!bad.is_empty()).then(|| {
        let mut fix: Vec<String> = bad
            .iter()
            .map(|(s, _)| {
                let id = &s.candidate.id;
                if s.karpctls {
                    return format!("{id}: karpctl tagged it; run `karpctl up`, which removes its tag from subnets nodes cannot work from");
                }
                let terraform = match s.candidate.way {
                    Way::Public(_) => "public_subnet_tags",
                    _ => "private_subnet_tags or intra_subnet_tags",
                };
                format!(
                    "{id}: the tag is not karpctl's (no {} marker): another tool or a person put it there, e.g. terraform-aws-vpc's {terraform}; remove it there, or: aws ec2 delete-tags --resources {id} --tags Key={tag_key},Value={tag_value}",
                    crate::tags::MARKER_TAG,
                )
            })
            .collect();
        let unusable: Vec<&crate::egress::Candidate> = bad.iter().map(|(s, _)| &s.candidate).collect();
        fix.extend(crate::egress::fixes(&unusable, net).into_iter().map(|f| format!("or give them a way out: {f}")));
        Finding {
            code: Code::SubnetNoWayOut,
            severity: Severity::Error,
            resource: "subnets".into(),
            message: format!(
                "Karpenter launches nodes into every subnet tagged {tag_key}={tag_value}, and nodes in these never join: {}",
                by_reason(bad.iter().map(|(s, why)| (s.candidate.id.as_str(), why.as_str())))
            ),
            fix: fix.join("; "),
        }
    });
    let warning = (!unsure.is_empty()).then(|| {
        let mut fix: Vec<String> = Vec::new();
        for (_, _, f) in &unsure {
            if !fix.contains(f) {
                fix.push(f.clone());
            }
        }
        Finding {
            code: Code::SubnetWayOutUnconfirmed,
            severity: Severity::Warning,
            resource: "subnets".into(),
            message: format!(
                "karpctl cannot confirm that nodes can work from these discovery-tagged subnets: {}",
                by_reason(unsure.iter().map(|(id, why, _)| (*id, why.as_str())))
            ),
            fix: fix.join("; "),
        }
    });
    [(Code::SubnetNoWayOut, error), (Code::SubnetWayOutUnconfirmed, warning)]
}

/// "a, b: why; c: other why": subnets that share a reason, named together, in first-seen order.
fn by_reason<'a>(items: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for (id, why) in items {
        match groups.iter_mut().find(|(_, w)| *w == why) {
            Some((ids, _)) => ids.push(id),
            None => groups.push((vec![id], why)),
        }
    }
    groups.iter().map(|(ids, why)| format!("{}: {why}", ids.join(", "))).collect::<Vec<_>>().join("; ")
}

/// The ports the control plane calls nodes on: kubelet, and webhooks.
const FROM_CONTROL_PLANE: [i32; 2] = [10250, 443];

/// Nodes in `group` must accept the control plane (kubelet 10250, webhooks 443) and reach it on
/// 443. The control plane's network interfaces carry the cluster security group (EKS's
/// `eks-cluster-sg-*`, which allows all traffic among its members) and the cluster's extra
/// `securityGroupIds`; a rule from one of those groups, or from an address range, lets it in.
/// A warning (not an error): a range or prefix list karpctl cannot resolve may still cover it.
pub fn node_group_lets_control_plane_in(group_id: &str, rules: &GroupRules, control_plane: &[String]) -> Option<Finding> {
    if control_plane.iter().any(|g| g == group_id) {
        // The cluster security group itself (or one the control plane carries): all traffic
        // among its members is allowed by EKS's own rule, which karpctl checks too.
        if rules.ingress.iter().any(|r| r.protocol == "-1" && r.groups.iter().any(|g| g == group_id)) {
            return None;
        }
    }
    let from_cp = |r: &SgRule| !r.cidrs.is_empty() || r.groups.iter().any(|g| control_plane.contains(g));
    let blocked: Vec<i32> =
        FROM_CONTROL_PLANE.into_iter().filter(|p| !rules.ingress.iter().any(|r| r.covers_tcp(*p) && from_cp(r))).collect();
    let no_egress = !rules.egress.iter().any(|r| r.covers_tcp(443));
    if blocked.is_empty() && !no_egress {
        return None;
    }
    let source = control_plane.first().map(String::as_str).unwrap_or("<the cluster security group>");
    let mut wrong = Vec::new();
    let mut fix = Vec::new();
    if !blocked.is_empty() {
        let ports: Vec<String> = blocked.iter().map(|p| p.to_string()).collect();
        wrong.push(format!("no ingress rule lets the control plane ({source}) in on TCP {}", ports.join(" and ")));
        for p in &blocked {
            fix.push(format!(
                "aws ec2 authorize-security-group-ingress --group-id {group_id} --protocol tcp --port {p} --source-group {source}"
            ));
        }
    }
    if no_egress {
        wrong.push("no egress rule lets nodes reach the control plane on TCP 443".to_string());
        fix.push(format!(
            "aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=tcp,FromPort=443,ToPort=443,UserIdGroupPairs=[{{GroupId={source}}}]"
        ));
    }
    Some(Finding {
        code: Code::NodeSgBlocksControlPlane,
        severity: Severity::Warning,
        resource: format!("security-group/{group_id}"),
        message: format!(
            "the node security group {group_id} (tagged for Karpenter): {}; nodes will not join or webhooks will time out",
            wrong.join("; ")
        ),
        fix: fix.join("; "),
    })
}

/// The tagged subnets of the cluster's VPC and what judging them needs, as `up` and `diff` build
/// them from the plan (`any_vpc`: with no cluster VPC known, take every tagged subnet). A subnet
/// in another VPC is `discovery-outside-cluster-vpc`; its routes are not read.
pub fn subnets_as_judged(s: &Setup, any_vpc: bool) -> (Vec<SubnetWay>, crate::egress::Network) {
    let ipv6 = s.ip_family.eq_ignore_ascii_case("ipv6");
    let in_vpc: Vec<&crate::facts::setup::TaggedSubnet> =
        s.discovery.subnets.iter().filter(|t| t.vpc_id == s.cluster_vpc || (any_vpc && s.cluster_vpc.is_empty())).collect();
    let tagged = in_vpc
        .iter()
        .map(|t| SubnetWay {
            candidate: crate::egress::Candidate::new(&t.id, t.map_public_ip, t.dns64, &s.route_tables, ipv6),
            karpctls: t.karpctls,
        })
        .collect();
    let net = crate::egress::Network {
        region: s.region.clone(),
        endpoints: s.endpoints.clone(),
        interruption: s.queue.as_ref().is_some_and(|q| q.exists),
        pod_identity: s.mode == Some(IdentityMode::PodIdentity),
        associate_public_ip: s.associate_public_ip,
        shared_by: in_vpc.iter().map(|t| t.owner_id.as_str()).find(|o| !o.is_empty() && *o != s.account_id).map(str::to_string),
    };
    (tagged, net)
}

/// The tagged subnets' way out and the node security group's control-plane rules (the checks
/// `up` and `diff` make on what they tag).
pub(super) fn network(s: &Setup, c: &mut Checker) {
    // Judged already (the subnets `up` leaves tagged, discovery's), or from the route tables read.
    let judged = match &s.way_out {
        Some(w) => Some((w.subnets.clone(), w.network.clone())),
        None => (!s.route_tables.is_empty() && !s.discovery.subnets.is_empty()).then(|| subnets_as_judged(s, false)),
    };
    if let Some((tagged, net)) = judged {
        let tag = (s.discovery.tag_key.as_str(), s.discovery.tag_value.as_str());
        for (code, found) in tagged_subnets_have_a_way_out(tag, &tagged, &net) {
            c.record(code, found);
        }
    }
    if !s.control_plane_groups.is_empty() && !s.discovery.groups.is_empty() {
        // Karpenter attaches every tagged group: a node gets the union of their rules.
        let mut rules = GroupRules::default();
        for g in &s.discovery.groups {
            rules.ingress.extend(g.rules.ingress.iter().cloned());
            rules.egress.extend(g.rules.egress.iter().cloned());
        }
        let ids: Vec<&str> = s.discovery.groups.iter().map(|g| g.id.as_str()).collect();
        c.record(
            Code::NodeSgBlocksControlPlane,
            node_group_lets_control_plane_in(&ids.join("+"), &rules, &s.control_plane_groups),
        );
    }
}

pub(super) fn discovery(s: &Setup, c: &mut Checker) {
    let d = &s.discovery;
    let tag = format!("{}={}", d.tag_key, d.tag_value);
    c.ran(Code::DiscoveryNoSubnets);
    if d.subnets.is_empty() {
        c.add(
            Code::DiscoveryNoSubnets,
            Severity::Error,
            format!("tag/{tag}"),
            format!("no subnet carries {tag}: Karpenter's subnetSelectorTerms find nothing and it cannot launch nodes"),
            format!(
                "tag the cluster's private subnets: aws ec2 create-tags --resources <subnet-ids> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        );
    } else if !s.cluster_azs.is_empty() {
        c.ran(Code::DiscoveryAzWithoutSubnet);
        let covered: BTreeSet<&str> = d.subnets.iter().map(|x| x.az.as_str()).collect();
        for az in s.cluster_azs.iter().filter(|az| !covered.contains(az.as_str())) {
            c.add(
                Code::DiscoveryAzWithoutSubnet,
                Severity::Warning,
                format!("az/{az}"),
                format!("Availability Zone {az} has cluster subnets but none tagged {tag}: Karpenter cannot launch nodes there"),
                format!(
                    "tag a subnet of {az}: aws ec2 create-tags --resources <subnet-id> --tags Key={},Value={}",
                    d.tag_key, d.tag_value
                ),
            );
        }
    }
    c.ran(Code::DiscoveryNoSecurityGroups);
    match d.groups.len() {
        0 => c.add(
            Code::DiscoveryNoSecurityGroups,
            Severity::Error,
            format!("tag/{tag}"),
            format!("no security group carries {tag}: Karpenter's securityGroupSelectorTerms find nothing"),
            format!(
                "tag the node security group: aws ec2 create-tags --resources <sg-id> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        ),
        1 => c.ran(Code::DiscoveryMultipleSecurityGroups),
        _ => {
            let list: Vec<String> = d.groups.iter().map(|g| format!("{} ({})", g.id, g.name)).collect();
            c.add(
                Code::DiscoveryMultipleSecurityGroups,
                Severity::Warning,
                format!("tag/{tag}"),
                format!("{} security groups carry {tag} and Karpenter attaches every one: {}", d.groups.len(), list.join(", ")),
                "keep the tag on the node security group only (aws ec2 delete-tags on the others)".into(),
            );
        }
    }
    if s.cluster_vpc.is_empty() {
        return;
    }
    c.ran(Code::DiscoveryOutsideClusterVpc);
    let outside: Vec<String> = d
        .subnets
        .iter()
        .filter(|x| x.vpc_id != s.cluster_vpc)
        .map(|x| format!("{} ({})", x.id, x.vpc_id))
        .chain(d.groups.iter().filter(|g| g.vpc_id != s.cluster_vpc).map(|g| format!("{} ({})", g.id, g.vpc_id)))
        .collect();
    if !outside.is_empty() {
        c.add(
            Code::DiscoveryOutsideClusterVpc,
            Severity::Error,
            format!("tag/{tag}"),
            format!(
                "objects outside the cluster's VPC {} carry {tag}: {}; Karpenter would launch nodes there that cannot join",
                s.cluster_vpc,
                outside.join(", ")
            ),
            format!(
                "remove the tag from them: aws ec2 delete-tags --resources <ids> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(protocol: &str, from: i32, to: i32, groups: &[&str], cidrs: &[&str]) -> SgRule {
        SgRule {
            protocol: protocol.into(),
            from_port: Some(from),
            to_port: Some(to),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn all_out() -> Vec<SgRule> {
        vec![rule("-1", -1, -1, &[], &["0.0.0.0/0"])]
    }

    fn cp() -> Vec<String> {
        vec!["sg-cluster".to_string()]
    }

    #[test]
    fn the_cluster_security_group_lets_its_members_in() {
        let r = GroupRules { ingress: vec![rule("-1", -1, -1, &["sg-cluster"], &[])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-cluster", &r, &cp()), None);
    }

    #[test]
    fn a_node_group_with_rules_from_the_cluster_group_passes() {
        let r = GroupRules {
            ingress: vec![rule("tcp", 10250, 10250, &["sg-cluster"], &[]), rule("tcp", 443, 443, &["sg-cluster"], &[])],
            egress: all_out(),
        };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &r, &cp()), None);
        let range = GroupRules { ingress: vec![rule("tcp", 0, 65535, &["sg-cluster"], &[])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &range, &cp()), None);
        let cidr = GroupRules { ingress: vec![rule("-1", -1, -1, &[], &["10.0.0.0/16"])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &cidr, &cp()), None);
    }

    #[test]
    fn a_missing_kubelet_rule_is_named_with_the_command_to_add_it() {
        let r = GroupRules { ingress: vec![rule("tcp", 443, 443, &["sg-cluster"], &[])], egress: all_out() };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert_eq!(c.code, Code::NodeSgBlocksControlPlane);
        assert_eq!(c.severity, Severity::Warning);
        assert!(c.message.contains("TCP 10250") && !c.message.contains("443 and"), "{}", c.message);
        assert_eq!(
            c.fix,
            "aws ec2 authorize-security-group-ingress --group-id sg-node --protocol tcp --port 10250 --source-group sg-cluster"
        );
    }

    #[test]
    fn rules_from_other_groups_or_other_protocols_do_not_count() {
        let r = GroupRules {
            ingress: vec![rule("tcp", 0, 65535, &["sg-other"], &[]), rule("udp", 0, 65535, &["sg-cluster"], &[])],
            egress: all_out(),
        };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert!(c.message.contains("TCP 10250 and 443"), "{}", c.message);
    }

    #[test]
    fn no_egress_to_443_is_named() {
        let r = GroupRules {
            ingress: vec![rule("-1", -1, -1, &["sg-cluster"], &[])],
            egress: vec![rule("tcp", 80, 80, &[], &["0.0.0.0/0"])],
        };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert!(c.message.contains("no egress rule") && !c.message.contains("ingress"), "{}", c.message);
        assert!(c.fix.contains("authorize-security-group-egress --group-id sg-node"), "{}", c.fix);
    }

    fn tagged(id: &str, karpctls: bool, map_public_ip: bool, way: crate::egress::Way) -> SubnetWay {
        SubnetWay {
            candidate: crate::egress::Candidate {
                id: id.into(),
                map_public_ip,
                way,
                table: Some("rtb-1".into()),
                ignored: vec![],
                ipv6: false,
                nat64_without_dns64: None,
            },
            karpctls,
        }
    }

    #[test]
    fn a_tagged_subnet_nodes_cannot_work_from_is_an_error_naming_where_the_tag_comes_from() {
        use crate::egress::{Network, Way};
        let net = Network { region: "us-east-1".into(), ..Default::default() };
        let subnets = [
            tagged("subnet-nat", true, false, Way::Private("nat-1".into())),
            tagged("subnet-tf", false, false, Way::Public("igw-1".into())),
            tagged("subnet-ours", true, false, Way::None),
        ];
        let [(code, error), (_, warning)] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets, &net);
        assert_eq!(code, Code::SubnetNoWayOut);
        assert_eq!(warning, None);
        let e = error.expect("an error");
        assert_eq!(e.severity, Severity::Error);
        assert!(e.message.contains("subnet-tf: public") && e.message.contains("subnet-ours: no route out"), "{}", e.message);
        assert!(!e.message.contains("subnet-nat"), "{}", e.message);
        assert!(
            e.fix.contains("aws ec2 delete-tags --resources subnet-tf --tags Key=karpenter.sh/discovery,Value=c1")
                && e.fix.contains("public_subnet_tags"),
            "{}",
            e.fix
        );
        assert!(e.fix.contains("subnet-ours: karpctl tagged it; run `karpctl up`"), "{}", e.fix);
        assert!(!e.fix.contains("--resources subnet-ours"), "karpctl's own tag is karpctl's to remove: {}", e.fix);
        // With public IPs from the EC2NodeClass the public subnet works.
        let key = Network { associate_public_ip: true, ..net.clone() };
        let [(_, error), _] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets[..2], &key);
        assert_eq!(error, None);
    }

    #[test]
    fn a_way_out_karpctl_cannot_see_is_a_warning() {
        use crate::egress::{Network, Way};
        let net = Network { region: "us-east-1".into(), ..Default::default() };
        let subnets = [tagged("subnet-fw", false, false, Way::Firewall("vpce-fw".into()))];
        let [(_, error), (code, warning)] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets, &net);
        assert_eq!((error, code), (None, Code::SubnetWayOutUnconfirmed));
        let w = warning.expect("a warning");
        assert_eq!(w.severity, Severity::Warning);
        assert!(w.message.contains("vpce-fw") && w.fix.contains("NAT gateway"), "{w:?}");
    }
}
