//! Subnets with a way out: which of the candidate subnets nodes can work from. Pure, over the
//! VPC's route tables and endpoints as EC2 describes them (docs/readiness.md, "Subnets").
//!
//! A node must reach the EKS API, ECR, STS and (with interruption) SQS. A subnet gives it a way
//! there when its route table (the explicit association, else the VPC's main table) has a default
//! route (`0.0.0.0/0` or `::/0`):
//! - to a NAT gateway, transit gateway, virtual private gateway, network interface, instance,
//!   peering connection, egress-only internet gateway or firewall endpoint: a private subnet with
//!   a way out, where nodes belong;
//! - to an internet gateway: a public subnet, which works only when instances launched there get
//!   a public address (`MapPublicIpOnLaunch`), and is chosen only when no private subnet has a
//!   way out;
//! - none at all: an isolated subnet, which works only when the VPC has the interface endpoints
//!   a private cluster needs (and S3 as a gateway or interface endpoint).

use crate::error::UserError;

/// Where a subnet's default route goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Way {
    /// A private way out (NAT gateway, transit gateway, ...): the target's id.
    Private(String),
    /// An internet gateway: the gateway's id.
    Public(String),
    /// No default route.
    None,
}

/// A default route's target, as DescribeRouteTables gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefaultRoute {
    /// `GatewayId`: `igw-` (internet), `vgw-` (virtual private gateway), `vpce-` (firewall
    /// endpoint) or `local`.
    pub gateway_id: Option<String>,
    /// Any other target: NAT gateway, transit gateway, network interface, instance, peering
    /// connection, egress-only internet gateway, carrier or local gateway, core network.
    pub other_target: Option<String>,
    /// `blackhole` routes lead nowhere.
    pub blackhole: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    /// The VPC's main table (used by every subnet without an explicit association).
    pub main: bool,
    /// Subnets explicitly associated with it.
    pub subnets: Vec<String>,
    /// Its default routes (`0.0.0.0/0`, `::/0`).
    pub default_routes: Vec<DefaultRoute>,
}

/// A VPC endpoint: its service name (`com.amazonaws.<region>.<service>`) and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub service_name: String,
    /// `Interface`, `Gateway` or `GatewayLoadBalancer`.
    pub kind: String,
}

/// One candidate subnet as the choice sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub map_public_ip: bool,
    pub way: Way,
}

/// The subnets chosen and the ones left out, with why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    pub chosen: Vec<String>,
    /// (subnet id, why it is left out), one line each in the plan.
    pub left_out: Vec<(String, String)>,
    /// Nodes go in subnets without a default route (Karpenter's `settings.isolatedVPC`).
    pub isolated: bool,
    /// Nodes go in public subnets (no private subnet has a way out).
    pub public: bool,
}

/// The route table a subnet uses: its explicit association, else the main table.
pub fn table_of<'a>(subnet: &str, tables: &'a [RouteTable]) -> Option<&'a RouteTable> {
    tables.iter().find(|t| t.subnets.iter().any(|s| s == subnet)).or_else(|| tables.iter().find(|t| t.main))
}

/// Where `subnet`'s default route goes (a private way out wins over an internet gateway in the
/// same table: the IPv6 route of a dual-stack private subnet may go to an egress-only gateway).
pub fn way_out(subnet: &str, tables: &[RouteTable]) -> Way {
    let Some(t) = table_of(subnet, tables) else { return Way::None };
    let mut public = None;
    for r in t.default_routes.iter().filter(|r| !r.blackhole) {
        if let Some(o) = &r.other_target {
            return Way::Private(o.clone());
        }
        match r.gateway_id.as_deref() {
            Some(g) if g.starts_with("igw-") => public = public.or(Some(g.to_string())),
            Some(g) if g.starts_with("vgw-") || g.starts_with("vpce-") => return Way::Private(g.to_string()),
            _ => {}
        }
    }
    public.map(Way::Public).unwrap_or(Way::None)
}

/// The endpoints a cluster without a way out needs: (service suffix, types that serve).
pub fn needed_endpoints(interruption: bool) -> Vec<&'static str> {
    let mut v = vec!["ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks"];
    if interruption {
        v.push("sqs");
    }
    v.push("s3");
    v
}

/// The needed endpoints the VPC lacks, by short name (`ecr.dkr`, `s3`, ...). Service names are
/// matched on their `.<region>.<service>` ending, which covers every partition's prefix.
pub fn missing_endpoints(have: &[Endpoint], region: &str, interruption: bool) -> Vec<String> {
    needed_endpoints(interruption)
        .into_iter()
        .filter(|svc| {
            let suffix = format!(".{region}.{svc}");
            !have.iter().any(|e| {
                e.service_name.ends_with(&suffix)
                    && (e.kind.eq_ignore_ascii_case("Interface") || (*svc == "s3" && e.kind.eq_ignore_ascii_case("Gateway")))
            })
        })
        .map(str::to_string)
        .collect()
}

pub fn why_unusable(c: &Candidate, missing: &[String]) -> Option<String> {
    match &c.way {
        Way::Private(_) => None,
        Way::Public(igw) if c.map_public_ip => {
            let _ = igw;
            None
        }
        Way::Public(igw) => Some(format!(
            "public (default route to {igw}) but MapPublicIpOnLaunch is false: nodes there get no public IP and cannot reach anything"
        )),
        Way::None if missing.is_empty() => None,
        Way::None => Some(format!("no route out (no default route) and the VPC lacks the endpoints {}", missing.join(", "))),
    }
}

/// The default choice among the cluster's subnets. `missing` is the endpoints the VPC lacks
/// (asked only when it matters: see `needs_endpoints`).
pub fn choose_default(cands: &[Candidate], missing: &[String]) -> Result<Choice, UserError> {
    let private: Vec<&Candidate> = cands.iter().filter(|c| matches!(c.way, Way::Private(_))).collect();
    let mut choice = Choice::default();
    if !private.is_empty() {
        for c in cands {
            match &c.way {
                Way::Private(_) => choice.chosen.push(c.id.clone()),
                Way::Public(igw) => choice.left_out.push((
                    c.id.clone(),
                    format!("public (default route to {igw}); nodes go in the private subnets with a way out"),
                )),
                Way::None => choice.left_out.push((c.id.clone(), "no route out (no default route)".into())),
            }
        }
        return Ok(choice);
    }
    let public: Vec<&Candidate> = cands.iter().filter(|c| matches!(c.way, Way::Public(_))).collect();
    if !public.is_empty() {
        for c in cands {
            match (&c.way, why_unusable(c, &[])) {
                (Way::Public(_), None) => choice.chosen.push(c.id.clone()),
                (Way::Public(_), Some(why)) => choice.left_out.push((c.id.clone(), why)),
                _ => choice.left_out.push((c.id.clone(), "no route out (no default route)".into())),
            }
        }
        choice.public = true;
        if !choice.chosen.is_empty() {
            return Ok(choice);
        }
        return Err(none_qualify("the cluster's subnets", &choice.left_out));
    }
    // Nothing routes out: an isolated cluster, if the VPC has the endpoints.
    if missing.is_empty() {
        choice.chosen = cands.iter().map(|c| c.id.clone()).collect();
        choice.isolated = !choice.chosen.is_empty();
        return Ok(choice);
    }
    let left: Vec<(String, String)> = cands.iter().filter_map(|c| Some((c.id.clone(), why_unusable(c, missing)?))).collect();
    Err(none_qualify("the cluster's subnets", &left))
}

/// Whether the choice needs to know the VPC's endpoints: some candidate has no default route and
/// may be chosen (explicit subnets always; the default choice only when nothing routes out).
pub fn needs_endpoints(cands: &[Candidate], explicit: bool) -> bool {
    let any_none = cands.iter().any(|c| c.way == Way::None);
    if explicit {
        return any_none;
    }
    any_none && !cands.iter().any(|c| c.way != Way::None)
}

/// Subnets the user named (`field`: `discovery.subnet_ids` or `discovery.subnet_tags`): each must
/// have a way out; one without is an error (nodes there could never join).
pub fn check_explicit(field: &str, cands: &[Candidate], missing: &[String]) -> Result<Choice, UserError> {
    let bad: Vec<(String, String)> = cands.iter().filter_map(|c| Some((c.id.clone(), why_unusable(c, missing)?))).collect();
    if !bad.is_empty() {
        return Err(none_qualify(&format!("`{field}`"), &bad).hint(format!(
            "remove these subnets from `{field}`, or give them a way out: a default route to a NAT gateway (private), an internet gateway with MapPublicIpOnLaunch (public), or the VPC endpoints a private cluster needs"
        )));
    }
    Ok(Choice {
        chosen: cands.iter().map(|c| c.id.clone()).collect(),
        left_out: vec![],
        isolated: !cands.is_empty() && cands.iter().all(|c| c.way == Way::None),
        public: !cands.is_empty() && cands.iter().all(|c| matches!(c.way, Way::Public(_))),
    })
}

fn none_qualify(what: &str, why: &[(String, String)]) -> UserError {
    let lines: Vec<String> = why.iter().map(|(id, w)| format!("  {id}: {w}")).collect();
    UserError::new(format!("no subnet Karpenter's nodes could work from in {what}:\n{}", lines.join("\n")))
        .hint("give the subnets a way out (a private subnet's default route to a NAT gateway is the usual one), or name subnets that have one with `discovery.subnet_ids`")
        .data(serde_json::json!({"subnets": why.iter().map(|(id, w)| serde_json::json!({"id": id, "reason": w})).collect::<Vec<_>>()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(id: &str, main: bool, subnets: &[&str], gw: Option<&str>, other: Option<&str>) -> RouteTable {
        RouteTable {
            id: id.into(),
            main,
            subnets: subnets.iter().map(|s| s.to_string()).collect(),
            default_routes: if gw.is_none() && other.is_none() {
                vec![]
            } else {
                vec![DefaultRoute { gateway_id: gw.map(Into::into), other_target: other.map(Into::into), blackhole: false }]
            },
        }
    }
    fn cand(id: &str, ip: bool, way: Way) -> Candidate {
        Candidate { id: id.into(), map_public_ip: ip, way }
    }

    #[test]
    fn explicit_association_wins_over_main_table() {
        let t =
            vec![table("rtb-main", true, &[], Some("igw-1"), None), table("rtb-p", false, &["subnet-p"], None, Some("nat-1"))];
        assert_eq!(way_out("subnet-p", &t), Way::Private("nat-1".into()));
        assert_eq!(way_out("subnet-other", &t), Way::Public("igw-1".into()));
        assert_eq!(way_out("subnet-x", &[table("rtb-p", false, &["subnet-p"], None, Some("nat-1"))]), Way::None);
        let vgw = vec![table("rtb", true, &[], Some("vgw-9"), None)];
        assert_eq!(way_out("s", &vgw), Way::Private("vgw-9".into()));
        let mut bh = table("rtb", true, &[], None, Some("nat-dead"));
        bh.default_routes[0].blackhole = true;
        assert_eq!(way_out("s", &[bh]), Way::None);
    }

    #[test]
    fn private_subnets_win_and_the_rest_are_left_out_with_a_reason() {
        let c = vec![cand("subnet-a", true, Way::Public("igw-1".into())), cand("subnet-b", false, Way::Private("nat-1".into()))];
        let ch = choose_default(&c, &[]).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-b"]);
        assert_eq!(ch.left_out.len(), 1);
        assert!(ch.left_out[0].1.contains("public"), "{ch:?}");
        assert!(!ch.isolated && !ch.public);
    }

    #[test]
    fn public_only_takes_those_with_public_ips() {
        let c = vec![cand("subnet-a", true, Way::Public("igw-1".into())), cand("subnet-b", false, Way::Public("igw-1".into()))];
        let ch = choose_default(&c, &[]).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-a"]);
        assert!(ch.left_out[0].1.contains("MapPublicIpOnLaunch"));
        assert!(ch.public);
        let none = choose_default(&[cand("subnet-b", false, Way::Public("igw-1".into()))], &[]).unwrap_err();
        assert!(none.message.contains("subnet-b: public"), "{}", none.message);
    }

    #[test]
    fn isolated_needs_every_endpoint() {
        let c = vec![cand("subnet-a", false, Way::None)];
        assert!(needs_endpoints(&c, false));
        let missing = missing_endpoints(&[], "us-east-1", true);
        assert_eq!(missing, vec!["ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks", "sqs", "s3"]);
        let e = choose_default(&c, &missing).unwrap_err();
        assert!(e.message.contains("ecr.dkr") && e.message.contains("subnet-a"), "{}", e.message);
        let mut have: Vec<Endpoint> = needed_endpoints(true)
            .into_iter()
            .map(|s| Endpoint { service_name: format!("com.amazonaws.us-east-1.{s}"), kind: "Interface".into() })
            .collect();
        have.last_mut().unwrap().kind = "Gateway".into();
        assert!(missing_endpoints(&have, "us-east-1", true).is_empty());
        assert_eq!(missing_endpoints(&have[..6], "us-east-1", false), vec!["s3"]);
        let ch = choose_default(&c, &[]).unwrap();
        assert!(ch.isolated && ch.chosen == vec!["subnet-a"]);
        // A Gateway endpoint serves S3 only.
        let gw_ec2 = [Endpoint { service_name: "com.amazonaws.us-east-1.ec2".into(), kind: "Gateway".into() }];
        assert!(missing_endpoints(&gw_ec2, "us-east-1", false).contains(&"ec2".to_string()));
    }

    #[test]
    fn explicit_subnets_without_a_way_out_are_an_error() {
        let c = vec![cand("subnet-a", false, Way::Private("nat-1".into())), cand("subnet-b", false, Way::None)];
        assert!(needs_endpoints(&c, true));
        assert!(!needs_endpoints(&c, false));
        let e = check_explicit("discovery.subnet_ids", &c, &["sts".into()]).unwrap_err();
        assert!(e.message.contains("subnet-b") && !e.message.contains("subnet-a:"), "{}", e.message);
        assert!(e.hint.unwrap().contains("discovery.subnet_ids"));
        let ok = check_explicit("discovery.subnet_ids", &c, &[]).unwrap();
        assert_eq!(ok.chosen.len(), 2);
        assert!(!ok.isolated);
    }
}
