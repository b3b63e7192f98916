//! Which subnets and which one security group get `karpenter.sh/discovery=<cluster>` (reads only,
//! once a run; docs/reference.md, "Discovery tags"), what else carries it, and the subnet Karpenter
//! picks per zone. For `down` only the objects karpctl marked, whatever the plan now selects.

use crate::ctx::Ctx;
use crate::egress;
use crate::error::UserError;
use crate::facts::prepared::{DiscoveryFacts, Facts, Intent, SecurityGroupFact, SubnetFact};
use crate::model::{Level, Note, Tags};
use crate::resources::discovery_tags::NODE_PREFIX;
use crate::spec::{IdentityMode, Spec};
use crate::tags::{DISCOVERY_TAG, MARKER_TAG};
use anyhow::Result;
use aws_sdk_ec2::types::Filter;
use std::collections::{BTreeMap, BTreeSet};

/// Fewer free addresses than this in an AZ's best subnet is worth a warning. The VPC CNI gives
/// each pod an address from its node's subnet: a node takes one for itself and, as pods come,
/// up to 29 more on an m5.large (3 interfaces of 10), or /28 prefixes of 16 with prefix
/// delegation. Under 64 a handful of nodes fill the subnet; an ordinary /24 (251 usable) passes.
pub const LOW_FREE_ADDRESSES: i64 = 64;
/// The description EKS gives the control-plane security group it makes for old clusters.
const CONTROL_PLANE_DESCRIPTION: &str =
    "EKS created security group applied to ENI that is attached to EKS Control Plane master nodes";

use crate::aws::read::ec2::Subnet;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Group {
    pub id: String,
    pub name: String,
    pub description: String,
    pub vpc_id: String,
    pub tags: Tags,
    pub rules: crate::facts::observed::GroupRules,
}

use crate::aws::read::ec2::filter;

async fn describe_subnets(ctx: &Ctx, filters: Vec<Filter>) -> Result<Vec<Subnet>> {
    ctx.readers.ec2.subnets(filters).await
}

/// What judging subnets needs besides the subnets: the plan's choices, and who owns the VPC
/// (`subnets`: any of the VPC's; one owned by another account means a VPC shared through RAM).
fn network(ctx: &Ctx, spec: &Spec, subnets: &[&Subnet], endpoints: Vec<egress::Endpoint>) -> egress::Network {
    egress::Network {
        region: ctx.region.clone(),
        endpoints,
        interruption: spec.interruption.enabled,
        pod_identity: spec.identity.mode == IdentityMode::PodIdentity,
        associate_public_ip: spec.discovery.associate_public_ip,
        shared_by: subnets
            .iter()
            .map(|s| s.owner_id.as_str())
            .find(|o| !o.is_empty() && *o != ctx.account_id)
            .map(str::to_string),
    }
}

/// The choice among `candidates` (`explicit`: the field the user named them in).
fn with_a_way_out(
    candidates: Vec<Subnet>,
    cands: &[egress::Candidate],
    net: &egress::Network,
    explicit: Option<&str>,
) -> Result<(Vec<Subnet>, egress::Choice), UserError> {
    let choice = match explicit {
        Some(field) => egress::check_explicit(field, cands, net)?,
        None => egress::choose_default(cands, net)?,
    };
    let chosen = candidates.into_iter().filter(|s| choice.chosen.contains(&s.id)).collect();
    Ok((chosen, choice))
}

/// The plan's lines about the subnet choice: each subnet left out, and an isolated or public
/// cluster said so (`explicit`: the field that named the subnets).
fn choice_notes(choice: &egress::Choice, spec: &Spec, explicit: Option<&str>, net: &egress::Network) -> Vec<Note> {
    let mut f: Vec<Note> = choice
        .left_out
        .iter()
        .map(|(id, why)| Note {
            id: format!("subnet-left-out:{id}"),
            level: Level::Info,
            message: format!("subnet {id} left out: {why}"),
        })
        .collect();
    if choice.isolated {
        let profile = &spec.identity.instance_profile_name.name;
        let endpoints = match &net.shared_by {
            Some(owner) => format!("the VPC is shared by account {owner}, whose endpoints are not visible here"),
            None => "the VPC has the endpoints nodes need".to_string(),
        };
        f.push(Note {
            id: "subnets-isolated".into(),
            level: Level::Info,
            message: format!(
                "the cluster is isolated: its subnets have no default route, and {endpoints}; Karpenter must run with settings.isolatedVPC=true (`karpctl output --format helm` sets it), since it cannot reach the pricing API; and since there is no IAM endpoint, Karpenter cannot create instance profiles: karpctl makes {profile} and `karpctl output --format nodeclass` names it (spec.instanceProfile)"
            ),
        });
    }
    if choice.public {
        let message = match explicit {
            Some(field) => format!(
                "nodes go in public subnets (`{field}` names them) and get public IPs; a private subnet with a NAT gateway route is safer"
            ),
            None => "no private subnet has a way out, so nodes go in public subnets and get public IPs; a private subnet with a NAT gateway route is safer".to_string(),
        };
        f.push(Note { id: "subnets-public".into(), level: Level::Warning, message });
    }
    if spec.discovery.associate_public_ip && !choice.public_ip_matters {
        f.push(Note {
            id: "associate-public-ip-unused".into(),
            level: Level::Warning,
            message: "`discovery.associate_public_ip = true` has no effect: every subnet Karpenter will see is private (its way out is not an internet gateway), so `karpctl output` leaves associatePublicIPAddress out; remove the setting".into(),
        });
    }
    f
}

async fn describe_groups(ctx: &Ctx, filters: Vec<Filter>) -> Result<Vec<Group>> {
    let groups = ctx.readers.ec2.security_groups(filters).await?;
    Ok(groups
        .into_iter()
        .map(|g| Group {
            rules: crate::facts::observed::GroupRules {
                ingress: g.ingress.iter().map(sg_rule).collect(),
                egress: g.egress.iter().map(sg_rule).collect(),
            },
            id: g.id,
            name: g.name,
            description: g.description,
            vpc_id: g.vpc_id,
            tags: g.tags,
        })
        .collect())
}

/// A security group rule as the readiness checks see it.
pub(crate) fn sg_rule(p: &aws_sdk_ec2::types::IpPermission) -> crate::facts::observed::SgRule {
    let cidrs = p
        .ip_ranges()
        .iter()
        .filter_map(|r| r.cidr_ip())
        .chain(p.ipv6_ranges().iter().filter_map(|r| r.cidr_ipv6()))
        .chain(p.prefix_list_ids().iter().filter_map(|r| r.prefix_list_id()))
        .map(str::to_string)
        .collect();
    crate::facts::observed::SgRule {
        protocol: p.ip_protocol().unwrap_or("-1").to_string(),
        from_port: p.from_port(),
        to_port: p.to_port(),
        groups: p.user_id_group_pairs().iter().filter_map(|g| g.group_id()).map(str::to_string).collect(),
        cidrs,
    }
}

/// Subnets by id (filters never fail on a missing id; results are checked again here, since
/// not every implementation applies every filter).
async fn subnets_by_id(ctx: &Ctx, ids: &[String]) -> Result<Vec<Subnet>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let found = describe_subnets(ctx, vec![filter("subnet-id", ids.to_vec())]).await?;
    Ok(found.into_iter().filter(|s| ids.contains(&s.id)).collect())
}

async fn groups_by_id(ctx: &Ctx, id: &str) -> Result<Vec<Group>> {
    let found = describe_groups(ctx, vec![filter("group-id", vec![id.to_string()])]).await?;
    Ok(found.into_iter().filter(|g| g.id == id).collect())
}

/// Objects region-wide carrying the discovery tag or karpctl's marker for this cluster: one call
/// per type (`tag-key` in both keys and `tag-value` = cluster), checked exactly here.
async fn tagged_subnets(ctx: &Ctx, cluster: &str) -> Result<Vec<Subnet>> {
    let f = vec![filter("tag-key", vec![DISCOVERY_TAG.into(), MARKER_TAG.into()]), filter("tag-value", vec![cluster.into()])];
    Ok(describe_subnets(ctx, f).await?.into_iter().filter(|s| carries_ours(&s.tags, cluster)).collect())
}

async fn tagged_groups(ctx: &Ctx, cluster: &str) -> Result<Vec<Group>> {
    let f = vec![filter("tag-key", vec![DISCOVERY_TAG.into(), MARKER_TAG.into()]), filter("tag-value", vec![cluster.into()])];
    Ok(describe_groups(ctx, f).await?.into_iter().filter(|g| carries_ours(&g.tags, cluster)).collect())
}

fn carries_ours(tags: &Tags, cluster: &str) -> bool {
    tags.get(DISCOVERY_TAG).map(String::as_str) == Some(cluster) || tags.get(MARKER_TAG).map(String::as_str) == Some(cluster)
}

fn marked(tags: &Tags, cluster: &str) -> bool {
    tags.get(MARKER_TAG).map(String::as_str) == Some(cluster)
}

/// Choose subnets and the security group (read-only). Memoised: preflight runs it so that its
/// errors come with the other preflight errors, and the engine's own call reuses the result.
pub async fn select(ctx: &Ctx, spec: &Spec, facts: &Facts, cmd: Intent) -> Result<DiscoveryFacts> {
    // The notes reach the user with the plan (the engine adds them to it).
    ctx.once.discovery.get("", || select_for(ctx, spec, facts, cmd)).await
}

pub async fn select_for(ctx: &Ctx, spec: &Spec, facts: &Facts, cmd: Intent) -> Result<DiscoveryFacts> {
    let c = spec.cluster.as_str();
    if cmd == Intent::Down {
        let (subnets, groups) = tokio::try_join!(tagged_subnets(ctx, c), tagged_groups(ctx, c))?;
        let none = BTreeSet::new();
        return Ok(DiscoveryFacts {
            notes: marked_notes(c, &subnets, &groups, &none),
            previously_marked: marked_ids(c, &subnets, &groups, &none).into_iter().map(|(id, _)| id.to_string()).collect(),
            ..Default::default()
        });
    }
    let cluster_subnets = subnets_by_id(ctx, &facts.cluster.subnet_ids).await?;
    let mut notes = Vec::new();
    let vpc = resolve_vpc(ctx, facts, &cluster_subnets, &mut notes).await?;

    let (chosen, group, tagged_s, tagged_g, tables) = tokio::join!(
        choose_subnets(ctx, spec, &vpc, &cluster_subnets),
        choose_group(ctx, spec, facts, &vpc),
        tagged_subnets(ctx, c),
        tagged_groups(ctx, c),
        ctx.readers.ec2.route_tables(&vpc),
    );
    let explicit = if spec.discovery.subnet_ids.is_some() {
        Some("discovery.subnet_ids")
    } else if spec.discovery.subnet_tags.is_some() {
        Some("discovery.subnet_tags")
    } else {
        None
    };
    let mut errors = Vec::new();
    let cands = chosen.map_err(|e| errors.push(e)).ok();
    let tables = tables.map_err(|e| errors.push(e)).ok();
    let group = group.map_err(|e| errors.push(e)).ok();
    let tagged_s = tagged_s.map_err(|e| errors.push(e)).ok();
    let tagged_g = tagged_g.map_err(|e| errors.push(e)).ok();
    // The subnets' way out, when its inputs were read; a choice that fails is reported with
    // the other errors.
    let mut judged = None;
    if let (Some(cands), Some(tables), Some(tagged_s)) = (cands, &tables, &tagged_s) {
        let j = judge_subnets(ctx, spec, facts, &vpc, cands, &cluster_subnets, tables, tagged_s).await;
        match j.and_then(|j| Ok((with_a_way_out(j.0, &j.1, &j.2, explicit)?, j.1, j.2, j.3))) {
            Ok(j) => judged = Some(j),
            Err(e) => errors.push(e),
        }
    }
    crate::error::combine_errors(errors)?;
    // No error was collected, so every result above is Some.
    let (((chosen, choice), judged, net, tagged_cands), group, tagged_s, tagged_g) =
        (judged.unwrap(), group.unwrap(), tagged_s.unwrap(), tagged_g.unwrap());
    check_not_claimed(c, &chosen, &group)?;

    let chosen_ids: BTreeSet<String> = chosen.iter().map(|s| s.id.clone()).chain([group.id.clone()]).collect();
    // What Karpenter will see once the plan is applied: the chosen subnets plus every other
    // subnet tagged for the cluster that karpctl does not untag.
    let mut after: Vec<Subnet> = chosen.clone();
    after.extend(tagged_s.iter().filter(|s| !chosen_ids.contains(&s.id) && !marked(&s.tags, c)).cloned());
    // Their way out (those in the cluster's VPC; one elsewhere is named by `foreign_notes`).
    let seen: Vec<crate::facts::observed::SubnetWay> = after
        .iter()
        .filter_map(|s| {
            let candidate = judged.iter().chain(&tagged_cands).find(|x| x.id == s.id)?.clone();
            Some(crate::facts::observed::SubnetWay { candidate, karpctls: chosen_ids.contains(&s.id) })
        })
        .collect();
    let doubtful: BTreeSet<String> = seen
        .iter()
        .filter(|t| egress::judge(&t.candidate, &net) != egress::Verdict::Usable)
        .map(|t| t.candidate.id.clone())
        .collect();
    // `associate_public_ip` is judged over every subnet Karpenter will see (a public one someone
    // else tagged is usable only with it): output sets it exactly when one of those needs it.
    let mut choice = choice;
    choice.public_ip_matters = seen.iter().any(|t| egress::needs_public_ip(&t.candidate.way));
    notes.extend(choice_notes(&choice, spec, explicit, &net));
    notes.extend(marked_notes(c, &tagged_s, &tagged_g, &chosen_ids));
    notes.extend(foreign_notes(c, &tagged_s, &tagged_g, &chosen_ids, &doubtful));
    let azs: BTreeSet<String> = cluster_subnets.iter().chain(after.iter()).map(|s| s.az.clone()).collect();
    notes.extend(capacity_notes(&after, &azs));

    Ok(DiscoveryFacts {
        vpc_id: vpc,
        subnets: chosen
            .iter()
            .map(|s| SubnetFact {
                id: s.id.clone(),
                availability_zone: s.az.clone(),
                available_ips: s.free,
                vpc_id: s.vpc_id.clone(),
            })
            .collect(),
        security_group: Some(SecurityGroupFact { id: group.id.clone(), name: group.name.clone(), rules: group.rules.clone() }),
        isolated: choice.isolated,
        associate_public_ip: spec.discovery.associate_public_ip && choice.public_ip_matters,
        ways: seen,
        network: Some(net),
        notes,
        previously_marked: marked_ids(c, &tagged_s, &tagged_g, &chosen_ids).into_iter().map(|(id, _)| id.to_string()).collect(),
    })
}

/// The way out of the candidate subnets and of every subnet of the cluster's VPC tagged for the
/// cluster, over one read of the VPC's endpoints (only when one of them has no default route):
/// (the candidates, their judgement's inputs, the network, the tagged subnets' candidates).
#[allow(clippy::too_many_arguments)]
async fn judge_subnets(
    ctx: &Ctx,
    spec: &Spec,
    facts: &Facts,
    vpc: &str,
    cands: Vec<Subnet>,
    cluster_subnets: &[Subnet],
    tables: &[egress::RouteTable],
    tagged: &[Subnet],
) -> Result<(Vec<Subnet>, Vec<egress::Candidate>, egress::Network, Vec<egress::Candidate>)> {
    let ipv6 = facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
    let of = |s: &Subnet| egress::Candidate::new(&s.id, s.map_public_ip, s.dns64, tables, ipv6);
    let judged: Vec<egress::Candidate> = cands.iter().map(of).collect();
    let in_vpc: Vec<&Subnet> = tagged.iter().filter(|s| s.vpc_id == vpc).collect();
    let tagged_cands: Vec<egress::Candidate> = in_vpc.iter().map(|s| of(s)).collect();
    let endpoints = if egress::needs_endpoints(&judged) || egress::needs_endpoints(&tagged_cands) {
        ctx.readers.ec2.vpc_endpoints(vpc).await?
    } else {
        vec![]
    };
    let owners: Vec<&Subnet> = cands.iter().chain(cluster_subnets.iter().filter(|s| s.vpc_id == vpc)).chain(in_vpc).collect();
    let net = network(ctx, spec, &owners, endpoints);
    Ok((cands, judged, net, tagged_cands))
}

async fn resolve_vpc(ctx: &Ctx, facts: &Facts, cluster_subnets: &[Subnet], notes: &mut Vec<Note>) -> Result<String> {
    let reported = facts.cluster.vpc_id.as_str();
    let subnet_vpcs: BTreeSet<&str> = cluster_subnets.iter().map(|s| s.vpc_id.as_str()).collect();
    if !reported.is_empty() && subnet_vpcs.len() == 1 && subnet_vpcs.contains(reported) {
        return Ok(reported.to_string());
    }
    let exists = !reported.is_empty() && { ctx.readers.ec2.vpc_exists(reported).await? };
    if exists {
        return Ok(reported.to_string());
    }
    if subnet_vpcs.len() == 1 {
        let vpc = subnet_vpcs.into_iter().next().unwrap().to_string();
        notes.push(Note {
            id: "discovery-vpc".into(),
            level: Level::Info,
            message: format!(
                "EKS reports VPC {reported:?} for cluster {}, which EC2 does not know; using {vpc}, the VPC of the cluster's subnets",
                facts.cluster.name
            ),
        });
        return Ok(vpc);
    }
    Err(UserError::new(format!(
        "cannot tell the VPC of EKS cluster {}: EKS reports {reported:?}, which EC2 does not know, and the cluster's subnets {} are in {}",
        facts.cluster.name,
        facts.cluster.subnet_ids.join(", "),
        if subnet_vpcs.is_empty() { "no VPC EC2 knows".to_string() } else { subnet_vpcs.into_iter().collect::<Vec<_>>().join(", ") }
    ))
    .hint("check the cluster in the EKS console; karpctl needs its VPC to choose subnets and the security group")
    .into())
}

async fn choose_subnets(ctx: &Ctx, spec: &Spec, vpc: &str, cluster_subnets: &[Subnet]) -> Result<Vec<Subnet>> {
    let d = &spec.discovery;
    if let Some(ids) = &d.subnet_ids {
        let found = subnets_by_id(ctx, ids).await?;
        return Ok(explicit_subnets(ids, &found, vpc)?);
    }
    if let Some(want) = &d.subnet_tags {
        let mut f = vec![filter("vpc-id", vec![vpc.to_string()])];
        f.extend(want.iter().map(|(k, v)| filter(&format!("tag:{k}"), vec![v.clone()])));
        let found = describe_subnets(ctx, f).await?;
        let chosen = matching_subnets(want, vpc, &found);
        if chosen.is_empty() {
            let shown: Vec<String> = want.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return Err(UserError::new(format!(
                "`discovery.subnet_tags` ({}) matches no subnet in the cluster's VPC {vpc}",
                shown.join(", ")
            ))
            .hint("fix the tag filter, or remove it to use the cluster's own subnets")
            .into());
        }
        return Ok(chosen);
    }
    if cluster_subnets.is_empty() {
        return Err(UserError::new(format!(
            "none of EKS cluster {}'s subnets ({}) exist in EC2",
            spec.cluster,
            spec_subnet_list(cluster_subnets)
        ))
        .hint("name the subnets for Karpenter with `subnet_ids` or `subnet_tags` under [discovery]")
        .into());
    }
    let mut s: Vec<Subnet> = cluster_subnets.iter().filter(|s| s.vpc_id == vpc).cloned().collect();
    s.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(s)
}

fn spec_subnet_list(s: &[Subnet]) -> String {
    s.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", ")
}

/// `discovery.subnet_ids`: every id must exist and lie in the cluster's VPC.
pub fn explicit_subnets(ids: &[String], found: &[Subnet], vpc: &str) -> Result<Vec<Subnet>, UserError> {
    let missing: Vec<&str> = ids.iter().filter(|id| !found.iter().any(|s| &s.id == *id)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(UserError::new(format!("`discovery.subnet_ids` names subnets that do not exist: {}", missing.join(", ")))
            .hint("check the ids (and the region)"));
    }
    let outside: Vec<String> =
        found.iter().filter(|s| ids.contains(&s.id) && s.vpc_id != vpc).map(|s| format!("{} (in {})", s.id, s.vpc_id)).collect();
    if !outside.is_empty() {
        return Err(UserError::new(format!(
            "`discovery.subnet_ids` names subnets outside the cluster's VPC {vpc}: {}",
            outside.join(", ")
        ))
        .hint("Karpenter can only launch nodes in the cluster's VPC; pick subnets from it"));
    }
    let mut out: Vec<Subnet> = Vec::new();
    for id in ids {
        if !out.iter().any(|s| &s.id == id) {
            out.extend(found.iter().find(|s| &s.id == id).cloned());
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// `discovery.subnet_tags`: subnets of the VPC carrying every tag of the filter.
pub fn matching_subnets(want: &Tags, vpc: &str, all: &[Subnet]) -> Vec<Subnet> {
    let mut out: Vec<Subnet> =
        all.iter().filter(|s| s.vpc_id == vpc && want.iter().all(|(k, v)| s.tags.get(k) == Some(v))).cloned().collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out.dedup_by(|a, b| a.id == b.id);
    out
}

async fn choose_group(ctx: &Ctx, spec: &Spec, facts: &Facts, vpc: &str) -> Result<Group> {
    let d = &spec.discovery;
    let c = &spec.cluster;
    if let Some(id) = &d.security_group_id {
        let found = groups_by_id(ctx, id).await?;
        let Some(g) = found.into_iter().next() else {
            return Err(UserError::new(format!("`discovery.security_group_id` {id} does not exist"))
                .hint("check the id (and the region)")
                .into());
        };
        if g.vpc_id != vpc {
            return Err(UserError::new(format!(
                "`discovery.security_group_id` {id} is in {}, not in the cluster's VPC {vpc}",
                g.vpc_id
            ))
            .hint("pick a security group of the cluster's VPC")
            .into());
        }
        return Ok(g);
    }
    if let Some(name) = &d.security_group_name {
        let found =
            describe_groups(ctx, vec![filter("vpc-id", vec![vpc.to_string()]), filter("group-name", vec![name.clone()])]).await?;
        return found.into_iter().find(|g| &g.name == name && g.vpc_id == vpc).ok_or_else(|| {
            UserError::new(format!(
                "`discovery.security_group_name` {name:?}: no security group of that name in the cluster's VPC {vpc}"
            ))
            .hint("check the name, or use `security_group_id`")
            .into()
        });
    }
    let owned_key = format!("kubernetes.io/cluster/{c}");
    let found = describe_groups(
        ctx,
        vec![filter("vpc-id", vec![vpc.to_string()]), filter(&format!("tag:{owned_key}"), vec!["owned".into()])],
    )
    .await?;
    let candidates: Vec<Group> =
        found.into_iter().filter(|g| g.vpc_id == vpc && g.tags.get(&owned_key).map(String::as_str) == Some("owned")).collect();
    if let Some(g) = pick_group(c, vpc, &facts.cluster.cluster_security_group_id, &candidates)? {
        return Ok(g);
    }
    // None: the EKS cluster security group.
    let csg = &facts.cluster.cluster_security_group_id;
    if csg.is_empty() {
        return Err(UserError::new(format!(
            "no security group in VPC {vpc} is tagged {owned_key}=owned, and EKS reports no cluster security group"
        ))
        .hint("name one in the plan: [discovery] security_group_id = \"sg-...\"")
        .into());
    }
    match groups_by_id(ctx, csg).await?.into_iter().next() {
        Some(g) => Ok(g),
        None => Err(UserError::new(format!(
            "no security group in VPC {vpc} is tagged {owned_key}=owned, and the cluster security group {csg} that EKS reports does not exist in EC2"
        ))
        .hint("name one in the plan: [discovery] security_group_id = \"sg-...\"")
        .into()),
    }
}

/// Whether a group is one EKS made for the control plane (never the nodes' group).
pub fn is_control_plane_group(g: &Group, cluster_sg: &str) -> bool {
    (!cluster_sg.is_empty() && g.id == cluster_sg)
        || g.name.starts_with("eks-cluster-sg-")
        || g.name.contains("ControlPlaneSecurityGroup")
        || g.description.starts_with(CONTROL_PLANE_DESCRIPTION)
}

/// Whether a group is one the Kubernetes AWS cloud provider made for a Classic Load Balancer of a
/// `type: LoadBalancer` Service (`k8s-elb-<hash>`, "Security group for Kubernetes ELB <hash>
/// (<namespace>/<service>)"). It carries the cluster's `owned` tag but is never the nodes' group
/// (docs/aws-behaviour.md section 9).
pub fn is_load_balancer_group(g: &Group) -> bool {
    g.name.starts_with("k8s-elb-") || g.description.starts_with("Security group for Kubernetes ELB")
}

/// The node security group among the owned-tagged groups of the VPC, leaving out the control
/// plane's and the load balancers' groups: one -> it; none -> None (use the cluster security
/// group); several -> an error listing them all.
pub fn pick_group(cluster: &str, vpc: &str, cluster_sg: &str, owned: &[Group]) -> Result<Option<Group>, UserError> {
    let mut c: Vec<&Group> =
        owned.iter().filter(|g| !is_control_plane_group(g, cluster_sg) && !is_load_balancer_group(g)).collect();
    c.sort_by(|a, b| a.id.cmp(&b.id));
    c.dedup_by(|a, b| a.id == b.id);
    match c.len() {
        0 => Ok(None),
        1 => Ok(Some(c[0].clone())),
        n => {
            let list: Vec<String> = c.iter().map(|g| format!("{} ({})", g.id, g.name)).collect();
            Err(UserError::new(format!(
                "{n} security groups in VPC {vpc} are tagged kubernetes.io/cluster/{cluster}=owned and could be the node security group: {}; Karpenter attaches every group tagged {DISCOVERY_TAG}={cluster}, so karpctl tags exactly one",
                list.join(", ")
            ))
            .hint(format!(
                "name one in the plan: [discovery] security_group_id = \"{}\" (or security_group_name = \"{}\")",
                c[0].id, c[0].name
            )))
        }
    }
}

/// A chosen object already tagged for another cluster cannot be tagged for this one (the key
/// holds one value) without breaking that cluster's Karpenter.
pub fn check_not_claimed(cluster: &str, subnets: &[Subnet], group: &Group) -> Result<(), UserError> {
    let mut taken: Vec<String> = subnets
        .iter()
        .filter_map(|s| {
            s.tags.get(DISCOVERY_TAG).filter(|v| *v != cluster).map(|v| format!("subnet {} ({DISCOVERY_TAG}={v})", s.id))
        })
        .collect();
    if let Some(v) = group.tags.get(DISCOVERY_TAG).filter(|v| *v != cluster) {
        taken.push(format!("security group {} ({DISCOVERY_TAG}={v})", group.id));
    }
    if taken.is_empty() {
        return Ok(());
    }
    Err(UserError::new(format!(
        "objects chosen for discovery are already tagged for another cluster: {}; karpctl will not overwrite that tag",
        taken.join(", ")
    ))
    .hint("choose other subnets / a security group under [discovery], or remove the other cluster's tag if it is stale"))
}

/// Objects karpctl tagged before that the plan no longer selects, with what each is.
fn marked_ids<'a>(
    cluster: &str,
    subnets: &'a [Subnet],
    groups: &'a [Group],
    chosen: &BTreeSet<String>,
) -> Vec<(&'a str, &'static str)> {
    let s = subnets.iter().filter(|s| marked(&s.tags, cluster)).map(|s| (s.id.as_str(), "subnet"));
    let g = groups.iter().filter(|g| marked(&g.tags, cluster)).map(|g| (g.id.as_str(), "security group"));
    s.chain(g).filter(|(id, _)| !chosen.contains(*id)).collect()
}

/// The note shown for each object of `marked_ids` (their node ids).
fn marked_notes(cluster: &str, subnets: &[Subnet], groups: &[Group], chosen: &BTreeSet<String>) -> Vec<Note> {
    marked_ids(cluster, subnets, groups, chosen)
        .into_iter()
        .map(|(id, what)| Note {
            id: format!("{NODE_PREFIX}{id}"),
            level: Level::Info,
            message: format!(
                "{what} {id} carries karpctl's discovery tags for {cluster} and is not selected by the plan: they are removed"
            ),
        })
        .collect()
}

/// Objects tagged `karpenter.sh/discovery=<c>` by someone else and not chosen: Karpenter uses
/// them too. A subnet whose way out the readiness checks judge (`doubtful`) is named there
/// instead.
fn foreign_notes(
    cluster: &str,
    subnets: &[Subnet],
    groups: &[Group],
    chosen: &BTreeSet<String>,
    doubtful: &BTreeSet<String>,
) -> Vec<Note> {
    let foreign = |tags: &Tags, id: &str| {
        tags.get(DISCOVERY_TAG).map(String::as_str) == Some(cluster) && !marked(tags, cluster) && !chosen.contains(id)
    };
    let mut out = Vec::new();
    for s in subnets.iter().filter(|s| foreign(&s.tags, &s.id) && !doubtful.contains(&s.id)) {
        out.push(Note {
            id: format!("discovery-foreign-{}", s.id),
            level: Level::Warning,
            message: format!(
                "subnet {} ({}, {}) also carries {DISCOVERY_TAG}={cluster} but is not selected by the plan; Karpenter will launch nodes in it too (karpctl did not tag it and leaves it alone)",
                s.id, s.vpc_id, s.az
            ),
        });
    }
    for g in groups.iter().filter(|g| foreign(&g.tags, &g.id)) {
        out.push(Note {
            id: format!("discovery-foreign-{}", g.id),
            level: Level::Warning,
            message: format!(
                "security group {} ({}, {}) also carries {DISCOVERY_TAG}={cluster} but is not selected by the plan; Karpenter will attach it to every node too (karpctl did not tag it and leaves it alone)",
                g.id, g.name, g.vpc_id
            ),
        });
    }
    out
}

/// Per AZ, the subnet Karpenter will pick: the tagged one with the most free addresses (ties
/// broken by id, for a stable output).
pub fn pick_per_az(tagged: &[Subnet]) -> BTreeMap<String, Subnet> {
    let mut best: BTreeMap<String, Subnet> = BTreeMap::new();
    for s in tagged {
        match best.get(&s.az) {
            Some(b) if (b.free, std::cmp::Reverse(&b.id)) >= (s.free, std::cmp::Reverse(&s.id)) => {}
            _ => {
                best.insert(s.az.clone(), s.clone());
            }
        }
    }
    best
}

pub fn capacity_notes(tagged: &[Subnet], azs: &BTreeSet<String>) -> Vec<Note> {
    let best = pick_per_az(tagged);
    let mut out = Vec::new();
    for az in azs.iter().chain(best.keys().filter(|k| !azs.contains(*k))) {
        let id = format!("discovery-capacity-{az}");
        match best.get(az) {
            None => out.push(Note {
                id,
                level: Level::Warning,
                message: format!("Availability Zone {az}: no subnet is tagged for Karpenter; it cannot launch nodes there"),
            }),
            Some(s) if s.free < LOW_FREE_ADDRESSES => out.push(Note {
                id,
                level: Level::Warning,
                message: format!(
                    "Availability Zone {az}: Karpenter will pick subnet {} with only {} free addresses (under {LOW_FREE_ADDRESSES})",
                    s.id, s.free
                ),
            }),
            Some(s) => out.push(Note {
                id,
                level: Level::Info,
                message: format!("Availability Zone {az}: Karpenter will pick subnet {} ({} free addresses)", s.id, s.free),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }
    fn subnet(id: &str, az: &str, free: i64, vpc: &str, t: &[(&str, &str)]) -> Subnet {
        Subnet { id: id.into(), az: az.into(), free, vpc_id: vpc.into(), tags: tags(t), ..Default::default() }
    }
    fn group(id: &str, name: &str, desc: &str) -> Group {
        Group {
            id: id.into(),
            name: name.into(),
            description: desc.into(),
            vpc_id: "vpc-1".into(),
            tags: Tags::new(),
            ..Default::default()
        }
    }

    #[test]
    fn classic_load_balancer_groups_are_never_the_node_group() {
        let g = [
            group("sg-node", "c-node", "Node security group"),
            group("sg-elb1", "k8s-elb-a1b2c3d4e5f6", "Security group for Kubernetes ELB a1b2c3d4e5f6 (default/web)"),
            group("sg-elb2", "custom-name", "Security group for Kubernetes ELB f6e5d4c3b2a1 (shop/api)"),
        ];
        assert_eq!(pick_group("c", "vpc-1", "sg-cluster", &g).unwrap().unwrap().id, "sg-node");
        let only_elb = [g[1].clone(), g[2].clone()];
        assert_eq!(
            pick_group("c", "vpc-1", "sg-cluster", &only_elb).unwrap(),
            None,
            "load balancer groups only: the cluster group"
        );
        // Any other ambiguity is still explained.
        let two = [g[0].clone(), group("sg-other", "eksctl-c-nodegroup-ng-1-SG", "Communication between nodes")];
        assert!(pick_group("c", "vpc-1", "sg-cluster", &two).unwrap_err().message.contains("2 security groups"));
    }

    #[test]
    fn one_owned_group_is_the_node_group() {
        let g = [group("sg-node", "c-node", "Node security group")];
        assert_eq!(pick_group("c", "vpc-1", "sg-cluster", &g).unwrap().unwrap().id, "sg-node");
    }

    #[test]
    fn cluster_and_control_plane_groups_are_excluded() {
        let g = [
            group("sg-cluster", "whatever", ""),
            group(
                "sg-eks",
                "eks-cluster-sg-c-123456",
                "EKS created security group applied to ENI that is attached to EKS Control Plane master nodes, as well as any managed workloads.",
            ),
            group("sg-cp", "c-ControlPlaneSecurityGroup-ABC", ""),
            group(
                "sg-old",
                "old",
                "EKS created security group applied to ENI that is attached to EKS Control Plane master nodes",
            ),
        ];
        assert_eq!(pick_group("c", "vpc-1", "sg-cluster", &g).unwrap(), None, "none left: use the cluster security group");
        let mut with_node = g.to_vec();
        with_node.push(group("sg-node", "c-node", ""));
        assert_eq!(pick_group("c", "vpc-1", "sg-cluster", &with_node).unwrap().unwrap().id, "sg-node");
    }

    #[test]
    fn several_candidates_fail_listing_every_id_and_name() {
        let g = [group("sg-b", "c-node-extra", ""), group("sg-a", "c-node", ""), group("sg-cluster", "eks-cluster-sg-c-1", "")];
        let e = pick_group("c", "vpc-1", "sg-cluster", &g).unwrap_err();
        assert!(e.message.contains("sg-a (c-node)") && e.message.contains("sg-b (c-node-extra)"), "{}", e.message);
        assert!(!e.message.contains("sg-cluster"), "{}", e.message);
        assert!(e.hint.unwrap().contains("security_group_id"));
    }

    #[test]
    fn explicit_subnets_must_exist_and_be_in_the_vpc() {
        let found = [subnet("subnet-a", "az1", 10, "vpc-1", &[]), subnet("subnet-b", "az2", 10, "vpc-2", &[])];
        let e = explicit_subnets(&["subnet-a".into(), "subnet-x".into()], &found, "vpc-1").unwrap_err();
        assert!(e.message.contains("subnet-x") && !e.message.contains("subnet-a"), "{}", e.message);
        let e = explicit_subnets(&["subnet-a".into(), "subnet-b".into()], &found, "vpc-1").unwrap_err();
        assert!(e.message.contains("subnet-b (in vpc-2)"), "{}", e.message);
        let ok = explicit_subnets(&["subnet-a".into(), "subnet-a".into()], &found, "vpc-1").unwrap();
        assert_eq!(ok.len(), 1);
    }

    #[test]
    fn tag_filters_match_every_tag_within_the_vpc() {
        let all = [
            subnet("subnet-pub", "az1", 10, "vpc-1", &[("kubernetes.io/role/elb", "1"), ("Name", "pub")]),
            subnet("subnet-priv", "az1", 10, "vpc-1", &[("kubernetes.io/role/internal-elb", "1")]),
            subnet("subnet-other", "az1", 10, "vpc-2", &[("kubernetes.io/role/elb", "1")]),
        ];
        let got = matching_subnets(&tags(&[("kubernetes.io/role/elb", "1")]), "vpc-1", &all);
        assert_eq!(got.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["subnet-pub"]);
        assert!(matching_subnets(&tags(&[("kubernetes.io/role/elb", "1"), ("Name", "x")]), "vpc-1", &all).is_empty());
    }

    #[test]
    fn per_az_pick_is_the_most_free_and_low_capacity_warns() {
        let tagged = [
            subnet("subnet-a1", "az-a", 100, "v", &[]),
            subnet("subnet-a2", "az-a", 4000, "v", &[]),
            subnet("subnet-b2", "az-b", 50, "v", &[]),
            subnet("subnet-b1", "az-b", 50, "v", &[]),
        ];
        let best = pick_per_az(&tagged);
        assert_eq!(best["az-a"].id, "subnet-a2");
        assert_eq!(best["az-b"].id, "subnet-b1", "ties go to the lowest id");
        let azs: BTreeSet<String> = ["az-a", "az-b", "az-c"].iter().map(|s| s.to_string()).collect();
        let f = capacity_notes(&tagged, &azs);
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].level, Level::Info);
        assert!(f[0].message.contains("subnet-a2 (4000 free"), "{}", f[0].message);
        assert_eq!(f[1].level, Level::Warning);
        assert!(f[1].message.contains("only 50 free"), "{}", f[1].message);
        assert_eq!(f[2].level, Level::Warning);
        assert!(f[2].message.contains("az-c") && f[2].message.contains("no subnet"), "{}", f[2].message);
    }

    #[test]
    fn an_ordinary_slash_24_is_no_warning() {
        let azs: BTreeSet<String> = ["az-a"].iter().map(|s| s.to_string()).collect();
        // A /24 has 256 addresses, 5 reserved by AWS.
        let f = capacity_notes(&[subnet("subnet-a", "az-a", 251, "v", &[])], &azs);
        assert_eq!((f.len(), f[0].level), (1, Level::Info), "{f:?}");
        let f = capacity_notes(&[subnet("subnet-a", "az-a", LOW_FREE_ADDRESSES - 1, "v", &[])], &azs);
        assert_eq!(f[0].level, Level::Warning, "{f:?}");
    }

    #[test]
    fn objects_tagged_for_another_cluster_are_refused() {
        let s = [subnet("subnet-a", "az", 1, "v", &[(DISCOVERY_TAG, "other")])];
        let g = group("sg-1", "n", "");
        let e = check_not_claimed("c", &s, &g).unwrap_err();
        assert!(e.message.contains("subnet-a") && e.message.contains("other"));
        let s = [subnet("subnet-a", "az", 1, "v", &[(DISCOVERY_TAG, "c")])];
        assert!(check_not_claimed("c", &s, &g).is_ok());
    }

    #[test]
    fn marked_and_foreign_objects_are_told_apart() {
        let chosen: BTreeSet<String> = ["subnet-chosen".to_string()].into();
        let subnets = [
            subnet("subnet-chosen", "az", 1, "v", &[(DISCOVERY_TAG, "c"), (MARKER_TAG, "c")]),
            subnet("subnet-old", "az", 1, "v", &[(DISCOVERY_TAG, "c"), (MARKER_TAG, "c")]),
            subnet("subnet-foreign", "az", 1, "v", &[(DISCOVERY_TAG, "c")]),
        ];
        let mut g = group("sg-foreign", "x", "");
        g.tags = tags(&[(DISCOVERY_TAG, "c")]);
        let m = marked_notes("c", &subnets, &[g.clone()], &chosen);
        assert_eq!(m.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["discovery-tags-subnet-old"]);
        let f = foreign_notes("c", &subnets, &[g.clone()], &chosen, &BTreeSet::new());
        assert_eq!(
            f.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["discovery-foreign-subnet-foreign", "discovery-foreign-sg-foreign"]
        );
        assert!(f.iter().all(|f| f.level == Level::Warning));
    }

    #[test]
    fn nodes_tag_chosen_objects_and_untag_old_ones() {
        let spec = crate::plan_file::defaults("c").unwrap();
        let mut facts = Facts { account_id: "1".into(), region: "r".into(), partition: "aws".into(), ..Default::default() };
        facts.discovery.subnets =
            vec![SubnetFact { id: "subnet-1".into(), availability_zone: "a".into(), available_ips: 5, vpc_id: "v".into() }];
        facts.discovery.security_group = Some(SecurityGroupFact { id: "sg-1".into(), name: "n".into(), ..Default::default() });
        facts.discovery.previously_marked = vec!["subnet-old".into(), "subnet-1".into()];
        let n = crate::resources::discovery_tags::nodes(&spec, &facts);
        let ids: Vec<&str> = n.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["discovery-tags-subnet-1", "discovery-tags-sg-1", "discovery-tags-subnet-old"]);
        assert_eq!(n[0].name, "subnet-1");
        assert_eq!(
            n[0].fields.as_ref().unwrap()["tags"],
            serde_json::json!({"karpenter.sh/discovery": "c", "karpctl.io/discovery": "c"})
        );
        let spec_of = |n: &crate::model::Node| match &n.spec {
            crate::model::NodeSpec::DiscoveryTags(d) => d.clone(),
            other => panic!("not a discovery spec: {other:?}"),
        };
        assert_eq!(spec_of(&n[1]).resource_type, "security-group");
        assert!(n[2].fields.is_none());
        assert_eq!(spec_of(&n[2]).batch.join(","), "sg-1,subnet-1,subnet-old");
    }
}
