//! Pure: which subnets nodes can work from, over the VPC's route tables and endpoints as EC2
//! describes them (docs/readiness.md, "Subnets"). `up`, `diff`, `doctor` and `import` all judge a
//! subnet with [`judge`], so they never disagree about the same facts.

use crate::error::UserError;

/// Where a subnet's default route goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Way {
    /// A private way out (NAT gateway, transit gateway, ...): the target's id.
    Private(String),
    /// A firewall endpoint (Network Firewall, Gateway Load Balancer): the endpoint's id.
    Firewall(String),
    /// An internet gateway: the gateway's id.
    Public(String),
    /// No default route that leads anywhere.
    #[default]
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
    /// `::/0` (IPv6) rather than `0.0.0.0/0`.
    pub ipv6: bool,
    /// `64:ff9b::/96` ([`NAT64_PREFIX`]) rather than a default route: NAT64 through the target,
    /// for subnets whose DNS64 turns IPv4-only names into addresses in that prefix.
    pub nat64: bool,
}

/// The well-known prefix NAT64 translates (a route to a NAT gateway, with DNS64 on the subnet).
pub const NAT64_PREFIX: &str = "64:ff9b::/96";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    /// The VPC's main table (used by every subnet without an explicit association).
    pub main: bool,
    /// Subnets explicitly associated with it.
    pub subnets: Vec<String>,
    /// Its default routes (`0.0.0.0/0`, `::/0`) and its NAT64 route (`64:ff9b::/96`).
    pub default_routes: Vec<DefaultRoute>,
}

/// A VPC endpoint as DescribeVpcEndpoints gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    pub id: String,
    /// `com.amazonaws.<region>.<service>`.
    pub service_name: String,
    /// `Interface`, `Gateway` or `GatewayLoadBalancer`.
    pub kind: String,
    /// `PrivateDnsEnabled` (interface endpoints). None: not reported, taken as on (AWS's default
    /// for an AWS service's interface endpoint).
    pub private_dns: Option<bool>,
    /// `RouteTableIds`: the route tables a gateway endpoint serves.
    pub route_tables: Vec<String>,
}

/// One subnet as the judgement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub map_public_ip: bool,
    pub way: Way,
    /// The route table it uses (None: the VPC has none that applies).
    pub table: Option<String>,
    /// Default routes that lead nowhere for nodes (a peering connection, an IPv6 route of an
    /// IPv4 cluster, `::/0` alone for an IPv6 cluster), each described; said when the subnet has
    /// no way out.
    pub ignored: Vec<String>,
    /// The cluster's IP family is IPv6 (its nodes still need IPv4 egress: the fixes say how).
    pub ipv6: bool,
    /// The target of a NAT64 route that does not count because the subnet's DNS64 is off.
    pub nat64_without_dns64: Option<String>,
}

impl Candidate {
    /// The subnet `id` over the VPC's route tables (`dns64`: the subnet's `EnableDns64`; `ipv6`:
    /// the cluster's IP family is IPv6).
    pub fn new(id: &str, map_public_ip: bool, dns64: bool, tables: &[RouteTable], ipv6: bool) -> Candidate {
        let table = table_of(id, tables);
        let out = table.map(|t| way_of(t, ipv6, dns64)).unwrap_or_default();
        Candidate {
            id: id.to_string(),
            map_public_ip,
            way: out.way,
            table: table.map(|t| t.id.clone()),
            ignored: out.ignored,
            ipv6,
            nat64_without_dns64: out.nat64_without_dns64,
        }
    }
}

/// What the judgement needs to know besides the subnet: the plan's choices and the VPC's
/// endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Network {
    pub region: String,
    /// The VPC's endpoints (read only when a subnet has no way out; empty otherwise).
    pub endpoints: Vec<Endpoint>,
    /// Interruption handling is on: nodes' Karpenter needs SQS.
    pub interruption: bool,
    /// The controller gets credentials through EKS Pod Identity (the EKS Auth API).
    pub pod_identity: bool,
    /// `discovery.associate_public_ip`: the EC2NodeClass gives nodes public IPs.
    pub associate_public_ip: bool,
    /// The account that owns the VPC when it is not the caller's (shared through AWS RAM): its
    /// endpoints are invisible to this account.
    pub shared_by: Option<String>,
}

/// Whether nodes can work from a subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Usable,
    /// Nodes work here only if something karpctl cannot see holds: why, and what to check.
    Unconfirmed {
        why: String,
        fix: String,
    },
    /// Nodes here never join: why.
    Unusable(String),
}

/// The subnets chosen and the ones left out, with why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Choice {
    pub chosen: Vec<String>,
    /// (subnet id, why it is left out), one line each in the plan.
    pub left_out: Vec<(String, String)>,
    /// Nodes go in subnets without a default route (Karpenter's `settings.isolatedVPC`).
    pub isolated: bool,
    /// Nodes go in public subnets (some chosen subnet's way out is an internet gateway).
    pub public: bool,
    /// Some chosen subnet reaches the internet through an internet gateway or a firewall
    /// endpoint, where `associatePublicIPAddress` gives nodes their public IPs.
    pub public_ip_matters: bool,
}

/// The route table a subnet uses: its explicit association, else the main table.
pub fn table_of<'a>(subnet: &str, tables: &'a [RouteTable]) -> Option<&'a RouteTable> {
    tables.iter().find(|t| t.subnets.iter().any(|s| s == subnet)).or_else(|| tables.iter().find(|t| t.main))
}

/// Where `subnet`'s default route goes (see [`way_of`]).
pub fn way_out(subnet: &str, tables: &[RouteTable], ipv6: bool, dns64: bool) -> Way {
    table_of(subnet, tables).map(|t| way_of(t, ipv6, dns64).way).unwrap_or(Way::None)
}

/// What [`way_of`] finds in a route table.
#[derive(Default)]
struct WayOf {
    way: Way,
    ignored: Vec<String>,
    nat64_without_dns64: Option<String>,
}

/// Whether a route's target can carry traffic out of the VPC on nodes' behalf (a NAT gateway,
/// a transit gateway, an appliance...): not an internet gateway, an egress-only one, a firewall
/// endpoint or a peering connection.
fn private_target(target: &str) -> bool {
    !["igw-", "eigw-", "vpce-", "pcx-"].iter().any(|p| target.starts_with(p))
}

/// Where a table's routes out lead, and the ones that lead nowhere for nodes. A private way out
/// wins over a firewall endpoint, which wins over an internet gateway. Only IPv4 egress counts,
/// whatever the cluster's IP family: an IPv6 cluster's nodes are dual-stack and still pull from
/// ECR and call STS and EC2 on their IPv4 endpoints, so `::/0` (to an egress-only gateway, say)
/// is no way out for them alone; NAT64 is (`64:ff9b::/96` to a NAT gateway, with the subnet's
/// DNS64 on).
fn way_of(t: &RouteTable, ipv6: bool, dns64: bool) -> WayOf {
    let (mut private, mut firewall, mut public) = (None, None, None);
    let mut ignored = Vec::new();
    let mut nat64_without_dns64 = None;
    for r in t.default_routes.iter().filter(|r| !r.blackhole) {
        let Some(target) = r.other_target.as_deref().or(r.gateway_id.as_deref()) else { continue };
        let dest = if r.nat64 {
            NAT64_PREFIX
        } else if r.ipv6 {
            "::/0"
        } else {
            "0.0.0.0/0"
        };
        if target == "local" {
            continue;
        }
        if (r.ipv6 || r.nat64) && !ipv6 {
            ignored.push(format!("{dest} to {target} is an IPv6 route, and the cluster is IPv4"));
            continue;
        }
        if r.nat64 {
            if !private_target(target) {
                ignored.push(format!("{dest} to {target} is no NAT64: only a NAT gateway translates to IPv4"));
            } else if !dns64 {
                ignored.push(format!(
                    "{dest} to {target} is NAT64, but DNS64 is off on the subnet, so no name resolves into that prefix"
                ));
                nat64_without_dns64 = nat64_without_dns64.or(Some(target.to_string()));
            } else {
                private = private.or(Some(target));
            }
            continue;
        }
        if r.ipv6 {
            ignored.push(format!(
                "{dest} to {target} carries IPv6 only, and an IPv6 cluster's nodes still pull from ECR and call STS and EC2 on their IPv4 endpoints"
            ));
            continue;
        }
        if target.starts_with("pcx-") {
            ignored.push(format!(
                "{dest} to {target} is a VPC peering connection, which gives no transit to the peer's internet or NAT gateway"
            ));
        } else if target.starts_with("igw-") {
            public = public.or(Some(target));
        } else if target.starts_with("vpce-") {
            firewall = firewall.or(Some(target));
        } else {
            private = private.or(Some(target));
        }
    }
    let way = match (private, firewall, public) {
        (Some(p), _, _) => Way::Private(p.to_string()),
        (None, Some(f), _) => Way::Firewall(f.to_string()),
        (None, None, Some(g)) => Way::Public(g.to_string()),
        _ => Way::None,
    };
    WayOf { way, ignored, nat64_without_dns64 }
}

/// The endpoints a subnet without a way out needs, by service suffix: `eks-auth` when the
/// controller uses Pod Identity (the agent gets credentials from the EKS Auth API), `sqs` with
/// interruption handling.
pub fn needed_endpoints(interruption: bool, pod_identity: bool) -> Vec<&'static str> {
    let mut v = vec!["ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks"];
    if pod_identity {
        v.push("eks-auth");
    }
    if interruption {
        v.push("sqs");
    }
    v.push("s3");
    v
}

/// Whether endpoint `e` serves `svc` to a subnet using route table `table`: an interface endpoint
/// with private DNS on (the SDKs' default host names resolve to it), or for S3 a gateway endpoint
/// on that route table.
fn serves(e: &Endpoint, svc: &str, table: Option<&str>) -> bool {
    if e.kind.eq_ignore_ascii_case("Interface") {
        return e.private_dns != Some(false);
    }
    e.kind.eq_ignore_ascii_case("Gateway") && svc == "s3" && table.is_some_and(|t| e.route_tables.iter().any(|r| r == t))
}

/// The needed endpoints that do not serve `c`, each with the VPC's endpoint of that service that
/// AWS does not use for this subnet, if any. Service names are matched on their
/// `.<region>.<service>` ending, which covers every partition's prefix.
fn unserved<'a>(c: &Candidate, net: &'a Network) -> Vec<(&'static str, Option<&'a Endpoint>)> {
    let table = c.table.as_deref();
    needed_endpoints(net.interruption, net.pod_identity)
        .into_iter()
        .filter_map(|svc| {
            let suffix = format!(".{}.{svc}", net.region);
            let of: Vec<&Endpoint> = net.endpoints.iter().filter(|e| e.service_name.ends_with(&suffix)).collect();
            (!of.iter().any(|e| serves(e, svc, table))).then(|| (svc, of.first().copied()))
        })
        .collect()
}

/// The needed endpoints that do not serve `c`, by service (`ecr.dkr`, `s3`, ...).
pub fn missing_endpoints(c: &Candidate, net: &Network) -> Vec<String> {
    unserved(c, net).into_iter().map(|(svc, _)| svc.to_string()).collect()
}

/// What is wrong with the VPC's endpoints for `c`: the ones it lacks, and the ones AWS does not
/// use for it (private DNS off, an S3 gateway endpoint on other route tables).
fn endpoint_problems(c: &Candidate, net: &Network) -> String {
    let un = unserved(c, net);
    let mut parts = Vec::new();
    let absent: Vec<&str> = un.iter().filter(|(_, e)| e.is_none()).map(|(s, _)| *s).collect();
    if !absent.is_empty() {
        parts.push(format!("the VPC lacks the endpoints {}", absent.join(", ")));
    }
    let is = |e: &Endpoint, k: &str| e.kind.eq_ignore_ascii_case(k);
    let no_dns: Vec<&str> = un.iter().filter(|(_, e)| e.is_some_and(|e| is(e, "Interface"))).map(|(s, _)| *s).collect();
    if !no_dns.is_empty() {
        parts.push(format!(
            "the interface endpoints of {} have private DNS off, so the SDKs' default host names do not reach them",
            no_dns.join(", ")
        ));
    }
    for (svc, e) in un.iter().filter_map(|(s, e)| Some((*s, (*e)?))).filter(|(_, e)| !is(e, "Interface")) {
        let id = if e.id.is_empty() { "the endpoint" } else { e.id.as_str() };
        parts.push(match (svc, is(e, "Gateway"), c.table.as_deref()) {
            ("s3", true, Some(t)) => format!("the S3 gateway endpoint {id} is not on route table {t}"),
            ("s3", true, None) => format!("the S3 gateway endpoint {id} serves route tables only, and the subnet has none"),
            _ => format!("{svc} has only a {} endpoint ({id}), which does not serve it", e.kind),
        });
    }
    parts.join("; ")
}

/// "no route out (...)": the subnet's default routes, or their absence.
fn no_route(c: &Candidate) -> String {
    if c.ignored.is_empty() {
        "no route out (no default route)".to_string()
    } else {
        format!("no route out ({})", c.ignored.join("; "))
    }
}

/// Whether nodes can work from subnet `c`: the one judgement `up`, `diff`, `doctor` and
/// `import` make.
pub fn judge(c: &Candidate, net: &Network) -> Verdict {
    let gets_public_ip = c.map_public_ip || net.associate_public_ip;
    match &c.way {
        Way::Private(_) => Verdict::Usable,
        Way::Firewall(_) | Way::Public(_) if gets_public_ip => Verdict::Usable,
        Way::Firewall(f) => Verdict::Unconfirmed {
            why: format!(
                "the default route goes to firewall endpoint {f}, and nodes there get no public IP, so they reach anything only if the firewall's subnet routes on to a NAT gateway (not straight to an internet gateway)"
            ),
            fix: format!(
                "check that the route table of firewall endpoint {f}'s subnet sends 0.0.0.0/0 to a NAT gateway, or give nodes public IPs (`associate_public_ip = true` under [discovery] in the plan)"
            ),
        },
        Way::Public(igw) => Verdict::Unusable(format!(
            "public (default route to {igw}) but MapPublicIpOnLaunch is false: nodes there get no public IP and cannot reach anything"
        )),
        Way::None => {
            let missing = missing_endpoints(c, net);
            if missing.is_empty() {
                return Verdict::Usable;
            }
            match &net.shared_by {
                Some(owner) => Verdict::Unconfirmed {
                    why: format!(
                        "{}, in a VPC that account {owner} shares with this account: its VPC endpoints belong to {owner} and are not visible here, so karpctl cannot tell whether the VPC has the endpoints nodes need",
                        no_route(c)
                    ),
                    fix: format!(
                        "ask the VPC's owner (account {owner}) to confirm it has these endpoints: {} (interface endpoints with private DNS on; S3 as a gateway endpoint on the subnets' route tables)",
                        needed_endpoints(net.interruption, net.pod_identity).join(", ")
                    ),
                },
                None => Verdict::Unusable(format!("{} and {}", no_route(c), endpoint_problems(c, net))),
            }
        }
    }
}

/// Why nodes cannot work from `c` (None: they can, perhaps unconfirmed).
pub fn why_unusable(c: &Candidate, net: &Network) -> Option<String> {
    match judge(c, net) {
        Verdict::Unusable(why) => Some(why),
        _ => None,
    }
}

/// What makes the unusable subnets `bad` usable, one sentence per kind of problem.
pub fn fixes(bad: &[&Candidate], net: &Network) -> Vec<String> {
    let mut out = Vec::new();
    let no_ip: Vec<&str> = bad.iter().filter(|c| matches!(c.way, Way::Public(_))).map(|c| c.id.as_str()).collect();
    if !no_ip.is_empty() {
        let cmds: Vec<String> = no_ip
            .iter()
            .map(|id| format!("aws ec2 modify-subnet-attribute --subnet-id {id} --map-public-ip-on-launch"))
            .collect();
        out.push(format!(
            "for public subnets without public IPs ({}): set `associate_public_ip = true` under [discovery] in the plan (Karpenter's EC2NodeClass then gives nodes public IPs: `karpctl output` sets associatePublicIPAddress), or turn on MapPublicIpOnLaunch (`map_public_ip_on_launch = true` in Terraform's VPC module, or {})",
            no_ip.join(", "),
            cmds.join("; ")
        ));
    }
    let no_dns64: Vec<&&Candidate> = bad.iter().filter(|c| c.way == Way::None && c.nat64_without_dns64.is_some()).collect();
    if !no_dns64.is_empty() {
        let ids: Vec<&str> = no_dns64.iter().map(|c| c.id.as_str()).collect();
        let cmds: Vec<String> =
            ids.iter().map(|id| format!("aws ec2 modify-subnet-attribute --subnet-id {id} --enable-dns64")).collect();
        out.push(format!(
            "for subnets with a NAT64 route ({NAT64_PREFIX}) but DNS64 off ({}): turn DNS64 on, so that names of IPv4-only endpoints resolve to addresses NAT64 translates: {}",
            ids.join(", "),
            cmds.join("; ")
        ));
    }
    let isolated: Vec<&&Candidate> = bad.iter().filter(|c| c.way == Way::None && c.nat64_without_dns64.is_none()).collect();
    if !isolated.is_empty() {
        let mut tables: Vec<&str> = isolated.iter().filter_map(|c| c.table.as_deref()).collect();
        tables.sort();
        tables.dedup();
        let ids: Vec<&str> = isolated.iter().map(|c| c.id.as_str()).collect();
        let ipv6 = isolated.iter().any(|c| c.ipv6);
        out.push(format!(
            "for subnets without a way out ({}): {}, or the VPC endpoints a private cluster needs: interface endpoints {} with private DNS on, and S3 as a gateway endpoint on {}",
            ids.join(", "),
            if ipv6 {
                format!(
                    "IPv4 egress besides ::/0 (an IPv6 cluster's nodes need it): a 0.0.0.0/0 route to a NAT gateway (the usual way), or NAT64: first a {NAT64_PREFIX} route to a NAT gateway, then DNS64 on the subnet ({})",
                    ids.iter().map(|id| format!("aws ec2 modify-subnet-attribute --subnet-id {id} --enable-dns64")).collect::<Vec<_>>().join("; ")
                )
            } else {
                "a default route to a NAT gateway (the usual way)".to_string()
            },
            needed_endpoints(net.interruption, net.pod_identity).into_iter().filter(|s| *s != "s3").collect::<Vec<_>>().join(", "),
            if tables.is_empty() { "the subnets' route tables".to_string() } else { format!("route table {}", tables.join(", ")) }
        ));
    }
    out
}

/// Whether a way out is of a class the default choice tries.
type Class = fn(&Way) -> bool;

/// The classes of subnets the default choice tries in turn, with where nodes go then.
/// Subnets whose way out karpctl can confirm (a NAT, a transit gateway) come before those behind
/// a firewall endpoint, whose way out it cannot see past the endpoint.
const CLASSES: [(Class, &str); 4] = [
    (|w| matches!(w, Way::Private(_)), "the private subnets with a way out"),
    (|w| matches!(w, Way::Firewall(_)), "the subnets behind a firewall endpoint"),
    (|w| matches!(w, Way::Public(_)), "the public subnets"),
    (|w| *w == Way::None, "the subnets the VPC's endpoints serve"),
];

/// The default choice among the cluster's subnets: the private ones with a way out; else the
/// public ones nodes get public IPs in; else the isolated ones the VPC's endpoints serve.
pub fn choose_default(cands: &[Candidate], net: &Network) -> Result<Choice, UserError> {
    let judged: Vec<(&Candidate, Verdict)> = cands.iter().map(|c| (c, judge(c, net))).collect();
    let usable = |v: &Verdict| !matches!(v, Verdict::Unusable(_));
    let pick = |class: Class| -> Vec<String> {
        judged.iter().filter(|(c, v)| class(&c.way) && usable(v)).map(|(c, _)| c.id.clone()).collect()
    };
    let reason = |c: &Candidate, v: &Verdict, nodes_go: &str| match (v, &c.way) {
        (Verdict::Unusable(why), _) => why.clone(),
        (_, Way::Public(igw)) => format!("public (default route to {igw}); nodes go in {nodes_go}"),
        (_, Way::None) => format!("{}; nodes go in {nodes_go}", no_route(c)),
        (_, _) => format!("not needed: nodes go in {nodes_go}"),
    };
    for (i, (class, nodes_go)) in CLASSES.into_iter().enumerate() {
        let chosen = pick(class);
        if chosen.is_empty() {
            continue;
        }
        let left_out =
            judged.iter().filter(|(c, _)| !chosen.contains(&c.id)).map(|(c, v)| (c.id.clone(), reason(c, v, nodes_go))).collect();
        let mut choice = Choice { chosen, left_out, isolated: i == 3, public: i == 2, public_ip_matters: false };
        choice.public_ip_matters = cands.iter().any(|c| choice.chosen.contains(&c.id) && needs_public_ip(&c.way));
        return Ok(choice);
    }
    let left: Vec<(String, String)> = judged.iter().map(|(c, v)| (c.id.clone(), reason(c, v, "none of them"))).collect();
    let bad: Vec<&Candidate> = cands.iter().collect();
    let mut hint = fixes(&bad, net);
    hint.push("or name subnets that have a way out with `discovery.subnet_ids`".to_string());
    Err(none_qualify("the cluster's subnets", &left).hint(hint.join("; ")))
}

/// A way out where nodes reach the internet with their own public IP (an internet gateway, or a
/// firewall endpoint in front of one).
pub fn needs_public_ip(w: &Way) -> bool {
    matches!(w, Way::Public(_) | Way::Firewall(_))
}

/// Whether judging `cands` needs the VPC's endpoints: some subnet has no default route.
pub fn needs_endpoints(cands: &[Candidate]) -> bool {
    cands.iter().any(|c| c.way == Way::None)
}

/// Subnets the user named (`field`: `discovery.subnet_ids` or `discovery.subnet_tags`): each must
/// have a way out; one without is an error (nodes there could never join).
pub fn check_explicit(field: &str, cands: &[Candidate], net: &Network) -> Result<Choice, UserError> {
    let bad: Vec<&Candidate> = cands.iter().filter(|c| why_unusable(c, net).is_some()).collect();
    if !bad.is_empty() {
        let why: Vec<(String, String)> = bad.iter().filter_map(|c| Some((c.id.clone(), why_unusable(c, net)?))).collect();
        let mut hint = vec![format!("remove these subnets from `{field}`, or give them a way out")];
        hint.extend(fixes(&bad, net));
        return Err(none_qualify(&format!("`{field}`"), &why).hint(hint.join("; ")));
    }
    Ok(Choice {
        chosen: cands.iter().map(|c| c.id.clone()).collect(),
        left_out: vec![],
        isolated: !cands.is_empty() && cands.iter().all(|c| c.way == Way::None),
        public: cands.iter().any(|c| matches!(c.way, Way::Public(_))),
        public_ip_matters: cands.iter().any(|c| needs_public_ip(&c.way)),
    })
}

fn none_qualify(what: &str, why: &[(String, String)]) -> UserError {
    let lines: Vec<String> = why.iter().map(|(id, w)| format!("  {id}: {w}")).collect();
    UserError::new(format!("no subnet Karpenter's nodes could work from in {what}:\n{}", lines.join("\n"))).data(
        serde_json::json!({"subnets": why.iter().map(|(id, w)| serde_json::json!({"id": id, "reason": w})).collect::<Vec<_>>()}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(target: &str, ipv6: bool) -> DefaultRoute {
        let gw = ["igw-", "vgw-", "vpce-", "local"].iter().any(|p| target.starts_with(p));
        DefaultRoute {
            gateway_id: gw.then(|| target.to_string()),
            other_target: (!gw).then(|| target.to_string()),
            blackhole: false,
            ipv6,
            nat64: false,
        }
    }
    fn table(id: &str, main: bool, subnets: &[&str], gw: Option<&str>, other: Option<&str>) -> RouteTable {
        RouteTable {
            id: id.into(),
            main,
            subnets: subnets.iter().map(|s| s.to_string()).collect(),
            default_routes: gw.or(other).map(|t| route(t, false)).into_iter().collect(),
        }
    }
    fn cand(id: &str, ip: bool, way: Way) -> Candidate {
        Candidate {
            id: id.into(),
            map_public_ip: ip,
            way,
            table: Some("rtb-1".into()),
            ignored: vec![],
            ipv6: false,
            nat64_without_dns64: None,
        }
    }
    fn net() -> Network {
        Network { region: "us-east-1".into(), ..Default::default() }
    }
    fn all_endpoints(net: &Network) -> Vec<Endpoint> {
        needed_endpoints(net.interruption, net.pod_identity)
            .into_iter()
            .map(|s| Endpoint {
                id: format!("vpce-{s}"),
                service_name: format!("com.amazonaws.us-east-1.{s}"),
                kind: if s == "s3" { "Gateway" } else { "Interface" }.into(),
                private_dns: (s != "s3").then_some(true),
                route_tables: if s == "s3" { vec!["rtb-1".into()] } else { vec![] },
            })
            .collect()
    }

    #[test]
    fn explicit_association_wins_over_main_table() {
        let t =
            vec![table("rtb-main", true, &[], Some("igw-1"), None), table("rtb-p", false, &["subnet-p"], None, Some("nat-1"))];
        assert_eq!(way_out("subnet-p", &t, false, false), Way::Private("nat-1".into()));
        assert_eq!(way_out("subnet-other", &t, false, false), Way::Public("igw-1".into()));
        assert_eq!(way_out("subnet-x", &[table("rtb-p", false, &["subnet-p"], None, Some("nat-1"))], false, false), Way::None);
        let vgw = vec![table("rtb", true, &[], Some("vgw-9"), None)];
        assert_eq!(way_out("s", &vgw, false, false), Way::Private("vgw-9".into()));
        let mut bh = table("rtb", true, &[], None, Some("nat-dead"));
        bh.default_routes[0].blackhole = true;
        assert_eq!(way_out("s", &[bh], false, false), Way::None);
        let c = Candidate::new("subnet-p", false, false, &t, false);
        assert_eq!(c.table.as_deref(), Some("rtb-p"));
    }

    #[test]
    fn peering_and_egress_only_routes_are_no_way_out_for_an_ipv4_cluster() {
        let pcx = vec![table("rtb", true, &[], None, Some("pcx-1"))];
        let c = Candidate::new("subnet-a", false, false, &pcx, false);
        assert_eq!(c.way, Way::None);
        let why = why_unusable(&c, &net()).unwrap();
        assert!(why.contains("pcx-1") && why.contains("peering") && why.contains("lacks the endpoints"), "{why}");
        // Peering is no way out for an IPv6 cluster either.
        assert_eq!(way_out("subnet-a", &pcx, true, false), Way::None);

        let mut dual = table("rtb", true, &[], None, None);
        dual.default_routes = vec![route("eigw-1", true)];
        let c = Candidate::new("subnet-a", false, false, &[dual.clone()], false);
        assert_eq!(c.way, Way::None, "IPv4 cluster: an egress-only gateway carries IPv6 only");
        assert!(why_unusable(&c, &net()).unwrap().contains("eigw-1 is an IPv6 route"), "{c:?}");
        // A NAT route next to the IPv6 one decides.
        dual.default_routes.push(route("nat-1", false));
        assert_eq!(way_out("subnet-a", &[dual], false, false), Way::Private("nat-1".into()));
    }

    fn nat64(target: &str) -> DefaultRoute {
        DefaultRoute { nat64: true, ..route(target, true) }
    }

    #[test]
    fn an_ipv6_cluster_needs_ipv4_egress_besides_an_egress_only_gateway() {
        // The usual dual-stack private subnet of an IPv6 cluster: ::/0 to an egress-only gateway.
        let mut t = table("rtb-1", true, &[], None, None);
        t.default_routes = vec![route("eigw-1", true)];
        let c = Candidate::new("subnet-a", false, false, &[t.clone()], true);
        assert_eq!(c.way, Way::None, "::/0 alone carries no IPv4: {c:?}");
        let why = why_unusable(&c, &net()).unwrap();
        assert!(why.contains("::/0 to eigw-1 carries IPv6 only") && why.contains("IPv4 endpoints"), "{why}");
        let fix = fixes(&[&c], &net()).join("; ");
        for want in [
            "subnet-a",
            "0.0.0.0/0 route to a NAT gateway",
            "first a 64:ff9b::/96 route to a NAT gateway, then DNS64",
            "aws ec2 modify-subnet-attribute --subnet-id subnet-a --enable-dns64",
        ] {
            assert!(fix.contains(want), "the fix names {want}: {fix}");
        }
        // With the VPC's endpoints it is an isolated subnet like any other.
        let mut n = net();
        n.endpoints = all_endpoints(&n);
        assert_eq!(judge(&c, &n), Verdict::Usable);

        // IPv4 egress through a NAT gateway: a way out.
        let mut with_nat = t.clone();
        with_nat.default_routes.push(route("nat-1", false));
        assert_eq!(way_out("subnet-a", &[with_nat], true, false), Way::Private("nat-1".into()));
        // Through an internet gateway: public, with public IPs as for any cluster.
        let mut public = t.clone();
        public.default_routes = vec![route("igw-1", true), route("igw-1", false)];
        let c = Candidate::new("subnet-p", true, false, &[public.clone()], true);
        assert_eq!((c.way.clone(), judge(&c, &net())), (Way::Public("igw-1".into()), Verdict::Usable));
        assert!(why_unusable(&Candidate::new("subnet-p", false, false, &[public], true), &net()).is_some());

        // NAT64: a 64:ff9b::/96 route to a NAT gateway counts only with DNS64 on the subnet.
        let mut t64 = t.clone();
        t64.default_routes.push(nat64("nat-1"));
        let off = Candidate::new("subnet-a", false, false, &[t64.clone()], true);
        assert_eq!((off.way.clone(), off.nat64_without_dns64.as_deref()), (Way::None, Some("nat-1")));
        let why = why_unusable(&off, &net()).unwrap();
        assert!(why.contains("64:ff9b::/96 to nat-1 is NAT64, but DNS64 is off"), "{why}");
        let fix = fixes(&[&off], &net()).join("; ");
        assert!(
            fix.contains("NAT64 route (64:ff9b::/96) but DNS64 off (subnet-a)")
                && fix.contains("aws ec2 modify-subnet-attribute --subnet-id subnet-a --enable-dns64"),
            "{fix}"
        );
        assert!(!fix.contains("0.0.0.0/0 route"), "the route is there; only DNS64 is missing: {fix}");
        let on = Candidate::new("subnet-a", false, true, &[t64.clone()], true);
        assert_eq!((on.way.clone(), judge(&on, &net())), (Way::Private("nat-1".into()), Verdict::Usable));
        assert_eq!(way_out("subnet-a", &[t64.clone()], true, true), Way::Private("nat-1".into()));
        // Only a NAT gateway (or the like) translates: not an egress-only gateway.
        let mut wrong = t.clone();
        wrong.default_routes.push(nat64("eigw-1"));
        let c = Candidate::new("subnet-a", false, true, &[wrong], true);
        assert_eq!(c.way, Way::None);
        assert!(c.ignored.iter().any(|i| i.contains("is no NAT64")), "{c:?}");
        // An IPv4 cluster's nodes have no IPv6 address to use NAT64 with.
        let c = Candidate::new("subnet-a", false, true, &[t64], false);
        assert_eq!(c.way, Way::None);
        assert!(c.ignored.iter().any(|i| i == "64:ff9b::/96 to nat-1 is an IPv6 route, and the cluster is IPv4"), "{c:?}");
    }

    #[test]
    fn a_firewall_endpoint_is_a_way_out_unconfirmed_without_public_ips() {
        let fw = vec![table("rtb", true, &[], Some("vpce-fw"), None)];
        let c = Candidate::new("subnet-a", false, false, &fw, false);
        assert_eq!(c.way, Way::Firewall("vpce-fw".into()));
        match judge(&c, &net()) {
            Verdict::Unconfirmed { why, fix } => {
                assert!(why.contains("vpce-fw") && why.contains("NAT gateway"), "{why}");
                assert!(fix.contains("associate_public_ip"), "{fix}");
            }
            v => panic!("{v:?}"),
        }
        assert_eq!(judge(&Candidate::new("subnet-a", true, false, &fw, false), &net()), Verdict::Usable);
        let with_key = Network { associate_public_ip: true, ..net() };
        assert_eq!(judge(&c, &with_key), Verdict::Usable);
        // Chosen like a private subnet, before public ones.
        let ch = choose_default(&[c, cand("subnet-b", true, Way::Public("igw-1".into()))], &net()).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-a"]);
        assert!(ch.public_ip_matters && !ch.public);
    }

    #[test]
    fn nat_subnets_win_over_subnets_behind_a_firewall_endpoint() {
        let cands =
            [cand("subnet-nat", false, Way::Private("nat-1".into())), cand("subnet-fw", false, Way::Firewall("vpce-1".into()))];
        let c = choose_default(&cands, &net()).unwrap();
        assert_eq!(c.chosen, ["subnet-nat"], "{c:?}");
        let c = choose_default(&cands[1..], &net()).unwrap();
        assert_eq!(c.chosen, ["subnet-fw"], "only behind a firewall: taken, with the warning the check gives");
    }

    #[test]
    fn private_subnets_win_and_the_rest_are_left_out_with_a_reason() {
        let c = vec![cand("subnet-a", true, Way::Public("igw-1".into())), cand("subnet-b", false, Way::Private("nat-1".into()))];
        let ch = choose_default(&c, &net()).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-b"]);
        assert_eq!(ch.left_out.len(), 1);
        assert!(ch.left_out[0].1.contains("public"), "{ch:?}");
        assert!(!ch.isolated && !ch.public && !ch.public_ip_matters);
    }

    #[test]
    fn public_only_takes_those_with_public_ips() {
        let c = vec![cand("subnet-a", true, Way::Public("igw-1".into())), cand("subnet-b", false, Way::Public("igw-1".into()))];
        let ch = choose_default(&c, &net()).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-a"]);
        assert!(ch.left_out[0].1.contains("MapPublicIpOnLaunch"));
        assert!(ch.public);
        let none = choose_default(&[cand("subnet-b", false, Way::Public("igw-1".into()))], &net()).unwrap_err();
        assert!(none.message.contains("subnet-b: public"), "{}", none.message);
        let hint = none.hint.unwrap();
        for way in [
            "associate_public_ip = true",
            "map_public_ip_on_launch = true",
            "aws ec2 modify-subnet-attribute --subnet-id subnet-b --map-public-ip-on-launch",
        ] {
            assert!(hint.contains(way), "the hint names {way}: {hint}");
        }
    }

    #[test]
    fn associate_public_ip_makes_public_subnets_without_public_ips_usable() {
        let c = vec![cand("subnet-a", false, Way::Public("igw-1".into())), cand("subnet-b", false, Way::Public("igw-1".into()))];
        let key = Network { associate_public_ip: true, ..net() };
        let ch = choose_default(&c, &key).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-a", "subnet-b"]);
        assert!(ch.public && ch.public_ip_matters);
        assert!(check_explicit("discovery.subnet_ids", &c, &key).is_ok());
        let e = check_explicit("discovery.subnet_ids", &c, &net()).unwrap_err();
        assert!(e.hint.unwrap().contains("associate_public_ip = true"));
        // Private subnets still win: the key changes nothing there.
        let mixed = vec![c[0].clone(), cand("subnet-p", false, Way::Private("nat-1".into()))];
        let ch = choose_default(&mixed, &key).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-p"]);
        assert!(!ch.public_ip_matters);
    }

    #[test]
    fn isolated_needs_every_endpoint_as_aws_serves_it() {
        let c = vec![cand("subnet-a", false, Way::None)];
        assert!(needs_endpoints(&c));
        let mut n = Network { interruption: true, pod_identity: true, ..net() };
        let e = choose_default(&c, &n).unwrap_err();
        for svc in ["ec2", "ecr.dkr", "eks-auth", "sqs", "s3"] {
            assert!(e.message.contains(svc), "{svc}: {}", e.message);
        }
        n.endpoints = all_endpoints(&n);
        assert!(missing_endpoints(&c[0], &n).is_empty());
        let ch = choose_default(&c, &n).unwrap();
        assert!(ch.isolated && ch.chosen == vec!["subnet-a"]);

        // Pod Identity needs eks-auth; IRSA does not.
        let mut no_auth = n.clone();
        no_auth.endpoints.retain(|e| !e.service_name.ends_with(".eks-auth"));
        assert_eq!(missing_endpoints(&c[0], &no_auth), vec!["eks-auth"]);
        no_auth.pod_identity = false;
        assert!(missing_endpoints(&c[0], &no_auth).is_empty());

        // An interface endpoint without private DNS does not serve.
        let mut no_dns = n.clone();
        no_dns.endpoints.iter_mut().find(|e| e.service_name.ends_with(".sts")).unwrap().private_dns = Some(false);
        assert_eq!(missing_endpoints(&c[0], &no_dns), vec!["sts"]);
        let why = why_unusable(&c[0], &no_dns).unwrap();
        assert!(
            why.ends_with(
                "and the interface endpoints of sts have private DNS off, so the SDKs' default host names do not reach them"
            ),
            "{why}"
        );
        // Not reported: AWS's default, on.
        no_dns.endpoints.iter_mut().for_each(|e| e.private_dns = None);
        assert!(missing_endpoints(&c[0], &no_dns).is_empty());

        // An S3 gateway endpoint serves only the route tables it names.
        let other_table = Candidate { id: "subnet-b".into(), table: Some("rtb-2".into()), ..c[0].clone() };
        assert_eq!(missing_endpoints(&other_table, &n), vec!["s3"]);
        assert!(why_unusable(&other_table, &n).unwrap().contains("the S3 gateway endpoint vpce-s3 is not on route table rtb-2"));
        let two = vec![c[0].clone(), other_table];
        let ch = choose_default(&two, &n).unwrap();
        assert_eq!(ch.chosen, vec!["subnet-a"]);
        assert!(ch.left_out[0].1.contains("rtb-2"), "{ch:?}");
        // A Gateway endpoint serves S3 only.
        let gw_ec2 =
            Endpoint { service_name: "com.amazonaws.us-east-1.ec2".into(), kind: "Gateway".into(), ..Default::default() };
        let only = Network { endpoints: vec![gw_ec2], ..net() };
        assert!(missing_endpoints(&c[0], &only).contains(&"ec2".to_string()));
        assert!(why_unusable(&c[0], &only).unwrap().contains("ec2 has only a Gateway endpoint"));
        // eks does not match eks-auth, nor the other way round.
        let auth =
            Endpoint { service_name: "com.amazonaws.us-east-1.eks-auth".into(), kind: "Interface".into(), ..Default::default() };
        let only = Network { endpoints: vec![auth], pod_identity: true, ..net() };
        let m = missing_endpoints(&c[0], &only);
        assert!(m.contains(&"eks".to_string()) && !m.contains(&"eks-auth".to_string()), "{m:?}");
    }

    #[test]
    fn a_shared_vpc_whose_endpoints_are_invisible_is_unconfirmed_not_refused() {
        let c = vec![cand("subnet-a", false, Way::None)];
        let shared = Network { shared_by: Some("999988887777".into()), pod_identity: true, ..net() };
        match judge(&c[0], &shared) {
            Verdict::Unconfirmed { why, fix } => {
                assert!(why.contains("999988887777") && why.contains("not visible"), "{why}");
                assert!(fix.contains("eks-auth"), "{fix}");
            }
            v => panic!("{v:?}"),
        }
        let ch = choose_default(&c, &shared).unwrap();
        assert!(ch.isolated);
        assert!(check_explicit("discovery.subnet_ids", &c, &shared).is_ok());
        // A public subnet without public IPs is no better for being shared.
        let p = cand("subnet-p", false, Way::Public("igw-1".into()));
        assert!(why_unusable(&p, &shared).is_some());
    }

    #[test]
    fn explicit_subnets_without_a_way_out_are_an_error() {
        let c = vec![cand("subnet-a", false, Way::Private("nat-1".into())), cand("subnet-b", false, Way::None)];
        let n = Network { endpoints: vec![], ..net() };
        let e = check_explicit("discovery.subnet_ids", &c, &n).unwrap_err();
        assert!(e.message.contains("subnet-b") && !e.message.contains("subnet-a:"), "{}", e.message);
        let hint = e.hint.unwrap();
        assert!(hint.contains("discovery.subnet_ids") && hint.contains("NAT gateway"), "{hint}");
        let mut ok = net();
        ok.endpoints = all_endpoints(&ok);
        let ch = check_explicit("discovery.subnet_ids", &c, &ok).unwrap();
        assert_eq!(ch.chosen.len(), 2);
        assert!(!ch.isolated && !ch.public);
    }
}
