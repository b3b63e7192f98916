//! Finding the pieces of a Karpenter setup without knowing their names, and reading them: every
//! independent read at once; the account-wide IRSA scan (ListRoles) only when the cluster's Pod
//! Identity association names no role. Only read calls.

use crate::aws::Classify;
use crate::aws::read::Readers;
use crate::aws::read::cloudtrail::DOCTOR;
use crate::aws::read::ec2::{Subnet, filter};
use crate::facts::finding::Code;
use crate::facts::observed::{Association, GroupRules};
use crate::facts::prepared::ClusterFacts;
use crate::facts::setup::{
    AccessEntry, ControllerRole, Discovery, FailedRead, NodeRole, Queue, RolePolicy, Rule, Setup, TaggedGroup, TaggedSubnet,
    Unreadable,
};
use crate::gather::shared::refusable;
use crate::karpenter_iam::KarpenterVersion;
use crate::policy::analysis::{self, queue_name, role_name};
use crate::policy::doc;
use crate::spec::IdentityMode;
use anyhow::Result;
use futures::future::try_join_all;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the user told `doctor` (flags), and where it runs.
pub struct Inputs {
    pub cluster: ClusterFacts,
    pub account_id: String,
    pub partition: String,
    pub region: String,
    pub version: KarpenterVersion,
    /// Judge with the version CloudTrail shows running (no flag, and no plan or a plan saying
    /// "running"): `version` until the trail is read, the newest when it shows none.
    pub follow_running: bool,
    /// Why `version` (when not following the running one), or what the plan said.
    pub version_from: String,
    pub namespace: String,
    pub service_account: String,
    pub controller_role: Option<String>,
    pub node_roles: Vec<String>,
    pub queue: Option<String>,
    pub discovery_tag: (String, String),
    /// Reads refused before `gather` (DescribeCluster).
    pub refused: Vec<Unreadable>,
    /// The plan's `discovery.associate_public_ip` (false without a plan).
    pub associate_public_ip: bool,
    /// The account's rules-per-bus quota (`Settings::rules_per_bus`).
    pub bus_quota: usize,
    /// How far back CloudTrail is read for the running Karpenter (`Settings::trail_window`).
    pub trail_window: std::time::Duration,
    /// Read the CloudWatch metrics of the interruption rules and queue (doctor; import does not).
    pub metrics: bool,
    /// `--simulate`: run the IAM policy simulator over the controller role.
    pub simulate: bool,
}

pub const POD_IDENTITY_AGENT: &str = "eks-pod-identity-agent";

/// Read everything the checks need.
pub async fn gather(aws: &Readers, i: &Inputs) -> Result<Setup> {
    let c = &i.cluster.name;
    let mut s = Setup::empty(c);
    s.account_id = i.account_id.clone();
    s.partition = i.partition.clone();
    s.region = i.region.clone();
    s.version = i.version;
    s.version_from = i.version_from.clone();
    s.namespace = i.namespace.clone();
    s.service_account = i.service_account.clone();
    s.authentication_mode = i.cluster.authentication_mode.clone();
    s.ip_family = i.cluster.ip_family.clone();
    s.associate_public_ip = i.associate_public_ip;

    s.control_plane_groups = std::iter::once(&i.cluster.cluster_security_group_id)
        .chain(&i.cluster.security_group_ids)
        .filter(|g| !g.is_empty())
        .cloned()
        .collect();
    for code in &i.refused {
        s.unreadable.push(code.clone());
    }

    // Everything that needs only the cluster's name, at once; the controller role's chain
    // (association -> role -> policies) alongside. Each read stands alone: one AWS refuses
    // becomes a `<piece>-unreadable` finding and the checks it feeds are skipped.
    // CloudTrail's records (paced at two lookups a second) run alongside everything else; the
    // roles they are judged for are known at the end.
    let trail = aws.trail.recent(i.trail_window, &DOCTOR);
    let (gathered, trail) = tokio::join!(gather_setup(aws, i, s), trail);
    let (gathered, queue_found) = gathered?;
    let mut s = gathered;
    judge_trail(&mut s, &trail);
    if i.follow_running {
        follow_running(&mut s, i);
    }
    // `--simulate` simulates the version doctor judges with, so it waits for the trail when
    // that version is the running one.
    if i.simulate {
        let simulated = simulate(aws, &s, queue_found).await;
        s.simulation = records_read(
            &mut s,
            Code::SimulationUnreadable,
            ("iam:SimulatePrincipalPolicy", "the IAM policy simulator's answer"),
            simulated,
        );
    }
    if let Some(r) = s.running.as_mut() {
        crate::gather::shared::read_quotas(aws, r).await;
    }
    Ok(s)
}

/// The version to judge with when it follows the running one: the newest CloudTrail shows the
/// controller running (a version karpctl knows), else the newest karpctl knows; and why.
fn follow_running(s: &mut Setup, i: &Inputs) {
    let latest = KarpenterVersion::LATEST;
    let plan = if i.version_from.is_empty() { String::new() } else { format!("{}; ", i.version_from) };
    let window = s.running.as_ref().map(|r| r.window_text()).unwrap_or_else(|| "the window".into());
    let newest = s.running.as_ref().and_then(|r| r.newest().cloned());
    let (version, why) = match newest {
        Some(v) => match v.known() {
            Some(k) => (k, format!("{plan}the version CloudTrail shows the controller running: karpenter.sh-{v} in {window}")),
            None => (latest, format!("{plan}the newest karpctl knows: CloudTrail shows Karpenter {v}, newer than that")),
        },
        None if i.version_from.is_empty() => {
            (latest, format!("the newest karpctl knows: no plan for this cluster, and no Karpenter call recorded in {window}"))
        }
        None => (latest, format!("{plan}the newest karpctl knows: no Karpenter call recorded in {window}")),
    };
    s.version = version;
    s.version_from = why;
}

/// What CloudTrail shows of the controller role (the association's role and its target) and
/// the node roles; a lookup that stopped short is `cloudtrail-unreadable` (a warning).
fn judge_trail(s: &mut Setup, trail: &crate::facts::records::Trail) {
    let mut controller: Vec<String> = Vec::new();
    if let Some(r) = &s.controller {
        controller.push(r.arn.clone());
        controller.extend(r.assumed_through.clone());
    }
    let nodes: Vec<String> = s.node_roles.iter().map(|n| n.arn.clone()).collect();
    if let Some(p) = &trail.problem {
        use crate::facts::records::LookupProblem;
        let aws_code = match p {
            LookupProblem::Refused { message } => message.split(':').next().unwrap_or("AccessDenied").to_string(),
            LookupProblem::Throttled => "ThrottlingException".into(),
            LookupProblem::Failed { message } => message.clone(),
        };
        s.unreadable.push(Unreadable { code: Code::CloudtrailUnreadable, operation: "cloudtrail:LookupEvents".into(), aws_code });
    }
    let mut running = crate::facts::observed::Running::of(trail, &controller, &nodes);
    // An upgrade in flight: the older versions whose grants karpctl kept in the role's policies
    // lack nothing (as `diff` judges them).
    let docs = s.controller.iter().flat_map(|r| &r.policies).filter_map(|p| p.document.as_ref());
    running.kept = crate::upgrade::kept_in(docs);
    s.running = Some(running);
}

/// The setup, and whether an interruption queue was found (the simulated permission set's shape).
async fn gather_setup(aws: &Readers, i: &Inputs, mut s: Setup) -> Result<(Setup, bool)> {
    let c = &i.cluster.name;
    let (controller, entries, nodegroups, rules, agent, cluster_subnets, tagged_subnets, tagged_groups, shared, clusters) = tokio::join!(
        controller(aws, i),
        access_entries(aws, c),
        nodegroup_roles(aws, c),
        karpenter_rules(aws),
        addon_installed(aws, c),
        subnets(aws, vec![filter("subnet-id", i.cluster.subnet_ids.clone())]),
        subnets(aws, vec![filter(&format!("tag:{}", i.discovery_tag.0), vec![i.discovery_tag.1.clone()])]),
        groups(aws, vec![filter(&format!("tag:{}", i.discovery_tag.0), vec![i.discovery_tag.1.clone()])]),
        crate::gather::shared::read(aws),
        list_clusters(aws),
    );
    let (controller, searched, mode) = stand_alone(&mut s, Code::ControllerUnreadable, controller)?;
    s.controller = controller;
    s.controller_searched = searched;
    s.mode = mode;
    s.access_entries = stand_alone(&mut s, Code::AccessEntriesUnreadable, entries)?;
    s.nodegroup_roles = stand_alone(&mut s, Code::NodegroupsUnreadable, nodegroups)?;
    // EKS Auto Mode has the Pod Identity agent built in (no add-on).
    s.pod_identity_agent = stand_alone(&mut s, Code::PodIdentityAgentUnreadable, agent)? || i.cluster.auto_mode;
    shared.into(&mut s)?;
    s.auto_mode = i.cluster.auto_mode;
    let clusters = stand_alone(&mut s, Code::ClustersUnreadable, clusters)?;
    let (mut rules, listed) = stand_alone(&mut s, Code::InterruptionRulesUnreadable, rules)?;
    s.bus_rules = listed.len();
    s.bus_quota = i.bus_quota;
    let cluster_subnets = stand_alone(&mut s, Code::SubnetsUnreadable, cluster_subnets)?;
    let tagged_subnets = stand_alone(&mut s, Code::SubnetsUnreadable, tagged_subnets)?;
    let tagged_groups = stand_alone(&mut s, Code::SecurityGroupsUnreadable, tagged_groups)?;

    // The cluster's VPC and AZs, from its own subnets (an emulator reports a VPC EC2 does not know).
    let cluster_subnets: Vec<Subnet> = cluster_subnets.into_iter().filter(|x| i.cluster.subnet_ids.contains(&x.id)).collect();
    s.cluster_azs = cluster_subnets.iter().map(|x| x.az.clone()).collect();
    s.cluster_vpc = cluster_subnets.first().map(|x| x.vpc_id.clone()).unwrap_or_else(|| i.cluster.vpc_id.clone());
    let (key, value) = &i.discovery_tag;
    let has_tag = |tags: &BTreeMap<String, String>| tags.get(key) == Some(value);
    s.discovery = Discovery {
        tag_key: key.clone(),
        tag_value: value.clone(),
        subnets: tagged_subnets
            .into_iter()
            .filter(|x| has_tag(&x.tags))
            .map(|x| TaggedSubnet {
                karpctls: x.tags.get(crate::tags::MARKER_TAG) == Some(&c.to_string()),
                id: x.id,
                az: x.az,
                vpc_id: x.vpc_id,
                map_public_ip: x.map_public_ip,
                dns64: x.dns64,
                owner_id: x.owner_id,
            })
            .collect(),
        groups: tagged_groups
            .into_iter()
            .filter(|g| has_tag(&g.tags))
            .map(|g| TaggedGroup {
                rules: GroupRules {
                    ingress: g.ingress.iter().map(crate::gather::discovery::sg_rule).collect(),
                    egress: g.egress.iter().map(crate::gather::discovery::sg_rule).collect(),
                },
                id: g.id,
                name: g.name,
                vpc_id: g.vpc_id,
            })
            .collect(),
    };

    // The queue: named, or the target of Karpenter's rules that this cluster's controller reads
    // from, is named after, or is the only one.
    let controller_docs: Vec<&Value> =
        s.controller.iter().flat_map(|r| r.policies.iter().filter_map(|p| p.document.as_ref())).collect();
    let queue = pick_queue(i, &rules, &controller_docs, &clusters);
    let mut candidates: BTreeSet<String> = rules.iter().flat_map(|r| r.queue_arns.clone()).collect();
    if let Some((arn, _, _)) = &queue {
        candidates.remove(arn);
    }
    s.other_queues = candidates.into_iter().map(|a| queue_name(&a).to_string()).collect();

    // Node roles: named, passed by the controller, or holding an EC2 access entry.
    let mut node: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |arn: String, how: &str| {
        let name = role_name(&arn).to_string();
        match node.iter_mut().find(|(a, _)| role_name(a) == name) {
            Some((_, hows)) => hows.push(how.to_string()),
            None => node.push((arn, vec![how.to_string()])),
        }
    };
    if i.node_roles.is_empty() {
        for arn in analysis::pass_role(&controller_docs).0 {
            add(arn, "the controller's iam:PassRole");
        }
        // A managed node group's role has an entry too, but it is the node group's, not Karpenter's.
        let of_nodegroup = |arn: &str| s.nodegroup_roles.iter().any(|(_, r)| role_name(r) == role_name(arn));
        for e in s.access_entries.iter().filter(|e| !of_nodegroup(&e.principal_arn)) {
            add(e.principal_arn.clone(), &format!("{} access entry", e.kind));
        }
    } else {
        for r in &i.node_roles {
            add(r.clone(), "--node-role");
        }
    }

    let queue_read = async {
        match &queue {
            Some((arn, how, _)) => read_queue(aws, arn, how).await.map(Some),
            None => Ok(None),
        }
    };
    let queue_arn = queue.as_ref().map(|q| q.0.clone());
    let queue_name_read = queue.as_ref().map(|q| q.2.clone());
    let listing_read = !s.unreadable.iter().any(|u| u.code == Code::InterruptionRulesUnreadable);
    // The queue's rules (the listing's, and any it missed), then their tags and, alongside, what
    // AWS records of them and the queue (CloudWatch): all alongside the reads below.
    let rules_read = async {
        let missed = match queue_arn.as_deref().filter(|_| listing_read) {
            Some(arn) => Some(missed_rules_of(aws, arn, &listed).await),
            None => None,
        };
        let of_queue: Vec<&Rule> = rules
            .iter()
            .chain(missed.iter().flat_map(|m| m.iter().flatten()))
            .filter(|r| queue_arn.as_ref().is_some_and(|q| r.queue_arns.contains(q)))
            .collect();
        let tags_read = async {
            try_join_all(of_queue.iter().map(|r| rule_tags(aws, &r.arn)))
                .await
                .map(|t| of_queue.iter().map(|r| r.arn.clone()).zip(t).collect::<BTreeMap<String, Vec<(String, String)>>>())
        };
        let rule_names: Vec<String> = of_queue.iter().map(|r| r.name.clone()).collect();
        let metrics_read = async {
            if !i.metrics || (rule_names.is_empty() && queue_name_read.is_none()) {
                return None;
            }
            Some(aws.metrics.interruption(&rule_names, queue_name_read.as_deref(), crate::checks::records::METRICS_WINDOW).await)
        };
        let (tags, metrics) = tokio::join!(tags_read, metrics_read);
        (missed, tags, metrics)
    };
    // The tagged subnets' way out: the VPC's route tables (alongside the queue and the roles).
    let vpc = s.cluster_vpc.clone();
    let tables_read = async {
        if vpc.is_empty() || s.discovery.subnets.is_empty() {
            return Ok(vec![]);
        }
        aws.ec2.route_tables(&vpc).await
    };
    let queue_found = queue.is_some();
    let (q, (missed, tags, metrics), nodes, tables) = tokio::join!(
        queue_read,
        rules_read,
        try_join_all(node.into_iter().map(|(arn, how)| node_role(aws, arn, how))),
        tables_read,
    );
    if let Some(missed) = missed {
        rules.extend(stand_alone(&mut s, Code::InterruptionRulesUnreadable, missed)?);
    }
    s.metrics = metrics.and_then(|m| {
        records_read(
            &mut s,
            Code::MetricsUnreadable,
            ("cloudwatch:GetMetricData", "the CloudWatch metrics of the interruption rules and queue"),
            m,
        )
    });
    s.queue = stand_alone(&mut s, Code::QueueUnreadable, q)?;
    let tags = stand_alone(&mut s, Code::RuleTagsUnreadable, tags)?;
    for r in &mut rules {
        if let Some(t) = tags.get(&r.arn) {
            r.other_cluster = analysis::other_cluster(&r.name, t, c, &clusters);
        }
    }
    s.rules = rules;
    s.node_roles = stand_alone(&mut s, Code::NodeRolesUnreadable, nodes)?;
    s.route_tables = stand_alone(&mut s, Code::RouteTablesUnreadable, tables)?;
    let ipv6 = s.ip_family.eq_ignore_ascii_case("ipv6");
    let no_route = s
        .discovery
        .subnets
        .iter()
        .any(|t| crate::egress::way_out(&t.id, &s.route_tables, ipv6, t.dns64) == crate::egress::Way::None);
    if no_route && !s.route_tables.is_empty() {
        let endpoints = aws.ec2.vpc_endpoints(&vpc).await;
        s.endpoints = stand_alone(&mut s, Code::RouteTablesUnreadable, endpoints)?;
    }
    // The queue's customer managed KMS key: its ARN and key policy.
    let key = s.queue.as_ref().and_then(|q| q.kms_master_key_id.clone()).filter(|k| !crate::plan_file::is_aws_managed_sqs_key(k));
    if let Some(key) = key {
        let read = read_key(aws, &key, &s.region, &s.account_id, &s.partition).await;
        if let Some((arn, policy)) = stand_alone(&mut s, Code::KmsKeyUnreadable, read.map(Some))?.flatten()
            && let Some(q) = s.queue.as_mut()
        {
            q.kms_key_arn = Some(arn);
            q.kms_key_policy = policy;
        }
    }
    Ok((s, queue_found))
}

/// A read's answer, or, when AWS refused it, nothing (the default) and a `code` finding-to-be;
/// every other error stops doctor.
fn stand_alone<T: Default>(s: &mut Setup, code: Code, r: Result<T>) -> Result<T> {
    Ok(refusable(s, code, r)?.unwrap_or_default())
}

/// A read of AWS's records or the simulator: its answer; refused, nothing and a warning-level
/// `code` finding-to-be; failed otherwise (throttled past the retries, no answer, an answer
/// karpctl cannot read), nothing and a note naming `operation`. Evidence doctor could not gather
/// never stops it.
fn records_read<T>(s: &mut Setup, code: Code, (operation, what): (&str, &str), r: Result<T>) -> Option<T> {
    refusable(s, code, r).unwrap_or_else(|e| {
        s.records_failed.push(FailedRead {
            code,
            operation: operation.to_string(),
            message: format!("{what} could not be read ({e:#}), so its checks did not run"),
        });
        None
    })
}

/// `--simulate`: the context keys the role's policies use, then the pinned action set (for the
/// version doctor judges with) simulated with the values a Karpenter launch would carry and the
/// principal's own keys, each group of actions on the resource karpctl knows it acts on.
async fn simulate(aws: &Readers, s: &Setup, queue: bool) -> Result<crate::facts::setup::Simulated> {
    use crate::running::simulation::{Place, by_resource, karpenter_context, principal_context, with_principal};
    use crate::running::{PermissionShape, permission_set};
    let Some(role) = s.controller.as_ref().filter(|r| r.exists) else { return Ok(crate::facts::setup::Simulated::default()) };
    let keys = aws.simulator.context_keys(&role.arn).await?;
    let principal = principal_context(&role.arn, &s.account_id, &role.tags);
    let (context, unknown_keys) = with_principal(principal, karpenter_context(&keys, &s.cluster, &s.region, &s.partition));
    let actions: Vec<String> = permission_set(s.version, PermissionShape { queue, zonal_shift: false }).into_iter().collect();
    let place = Place {
        partition: &s.partition,
        region: &s.region,
        account: &s.account_id,
        cluster: &s.cluster,
        node_role_arn: s.node_roles.iter().find(|n| n.exists).map(|n| n.arn.as_str()),
        queue_arn: s.queue.as_ref().filter(|q| q.exists).map(|q| q.arn.as_str()),
    };
    let mut decisions = Vec::new();
    for (resource, group) in by_resource(&actions, &place) {
        decisions.extend(aws.simulator.simulate(&role.arn, &group, resource.as_deref(), &context).await?);
    }
    Ok(crate::facts::setup::Simulated { role_arn: Some(role.arn.clone()), actions, context, unknown_keys, decisions })
}

/// A key id, ARN or alias -> (its ARN, its key policy; None when GetKeyPolicy is refused: the
/// KMS checks are then skipped through `kms-key-unreadable`). None when there is no such key.
async fn read_key(
    aws: &Readers,
    key: &str,
    region: &str,
    account: &str,
    partition: &str,
) -> Result<Option<(String, Option<Value>)>> {
    let Some(m) = aws.kms.key_now(key).await? else { return Ok(None) };
    if m.manager == "AWS" {
        return Ok(None);
    }
    let arn = if m.arn.is_empty() { format!("arn:{partition}:kms:{region}:{account}:key/{}", m.key_id) } else { m.arn };
    let policy = aws.kms.policy(&arn).await?;
    Ok(Some((arn, doc(policy.as_deref()))))
}

/// Parse an IAM or SQS document as AWS returns it (percent-encoded or not).
fn doc(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| doc::parse(t).ok())
}

// ------------------------------------------------------------------------------- controller

type ControllerFound = (Option<ControllerRole>, String, Option<IdentityMode>);

/// The controller role: `--controller-role`, else the role of the Pod Identity association of
/// Karpenter's service account, else (only then) a role whose trust names the cluster's OIDC
/// provider and the service account (IRSA; ListRoles over the account).
async fn controller(aws: &Readers, i: &Inputs) -> Result<ControllerFound> {
    let sa = format!("{}/{}", i.namespace, i.service_account);
    if let Some(r) = &i.controller_role {
        let mut role = read_controller(aws, r, "--controller-role").await?;
        let mode = role.trust.as_ref().and_then(mode_of_trust);
        if role.arn.is_empty() {
            role.arn = r.clone();
        }
        return Ok((Some(role), String::new(), mode));
    }
    if let Some((a, target)) = association(aws, &i.cluster.name, &i.namespace, &i.service_account).await? {
        // With a target role (cross-account Pod Identity), EKS hands the pods the target role's
        // credentials, assumed through the association's role: Karpenter's rights are the target's.
        let (assoc, arn) = (a.id.clone(), a.role_arn.clone());
        let mut role = match target {
            Some(t) => {
                let how = format!("target role of Pod Identity association {sa} ({assoc}), assumed through {arn}");
                let mut role = read_controller(aws, &t, &how).await?;
                role.assumed_through = Some(arn);
                role
            }
            None => read_controller(aws, &arn, &format!("Pod Identity association {sa} ({assoc})")).await?,
        };
        role.association = Some(a);
        return Ok((Some(role), String::new(), Some(IdentityMode::PodIdentity)));
    }
    let issuer =
        i.cluster.oidc_issuer.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/').to_string();
    // The account's roles, listed once for both searches below.
    let roles = trusted_roles(aws).await?;
    if issuer.is_empty() {
        return Ok(match unassociated_pod_identity_role(aws, &i.cluster, &roles).await? {
            (Some(role), _) => (Some(role), String::new(), Some(IdentityMode::PodIdentity)),
            (None, why) => (
                None,
                format!("no Pod Identity association for {sa}, and the cluster has no OIDC issuer for IRSA{}", why_suffix(&why)),
                None,
            ),
        });
    }
    if let Some(arn) = irsa_role(&roles, &issuer, &i.namespace, &i.service_account) {
        let role = read_controller(aws, &arn, &format!("IRSA trust of {sa} on the cluster's OIDC provider")).await?;
        return Ok((Some(role), String::new(), Some(IdentityMode::Irsa)));
    }
    let why = match unassociated_pod_identity_role(aws, &i.cluster, &roles).await? {
        (Some(role), _) => return Ok((Some(role), String::new(), Some(IdentityMode::PodIdentity))),
        (None, why) => why,
    };
    Ok((
        None,
        format!(
            "no Pod Identity association for {sa}, and no IAM role trusts the cluster's OIDC provider ({issuer}) for it{}",
            why_suffix(&why)
        ),
        None,
    ))
}

/// "; <why>" when there is a why.
fn why_suffix(why: &str) -> String {
    if why.is_empty() { String::new() } else { format!("; {why}") }
}

/// A Karpenter controller role trusted by Pod Identity that no association uses yet (the
/// terraform-aws-eks module v20's defaults make the role and no association): a role trusting
/// `pods.eks.amazonaws.com`, named like Karpenter's, whose policies name this cluster's ARN.
/// None, with why, when there is no such role, more than one, or when an association of the
/// cluster for another service account uses it (a Karpenter running under another namespace:
/// adopting its role would rewrite the trust it runs with).
async fn unassociated_pod_identity_role(
    aws: &Readers,
    cluster: &ClusterFacts,
    roles: &[(String, String, Value)],
) -> Result<(Option<ControllerRole>, String)> {
    let candidates: Vec<&String> = roles
        .iter()
        .filter(|(name, _, trust)| {
            mode_of_trust(trust) == Some(IdentityMode::PodIdentity) && name.to_ascii_lowercase().contains("karpenter")
        })
        .map(|(_, arn, _)| arn)
        .collect();
    let read = try_join_all(candidates.iter().map(|arn| read_controller(aws, arn, crate::facts::setup::UNASSOCIATED))).await?;
    let mut named: Vec<ControllerRole> = read
        .into_iter()
        .filter(|role| role.policies.iter().filter_map(|p| p.document.as_ref()).any(|d| analysis::names_cluster(d, &cluster.arn)))
        .collect();
    match named.len() {
        0 => return Ok((None, String::new())),
        1 => {}
        _ => {
            let names: Vec<&str> = named.iter().map(|r| r.name.as_str()).collect();
            return Ok((
                None,
                format!("several roles trusted by Pod Identity name this cluster ({}): pass --controller-role", names.join(", ")),
            ));
        }
    }
    let role = named.remove(0);
    for (ns_sa, arn) in all_associations(aws, &cluster.name).await? {
        if role_name(&arn) == role.name {
            return Ok((
                None,
                format!(
                    "role {} is used by the Pod Identity association {ns_sa}: pass --namespace and --service-account for it",
                    role.name
                ),
            ));
        }
    }
    Ok((Some(role), String::new()))
}

/// (namespace/service account, role ARN) of every Pod Identity association of the cluster.
async fn all_associations(aws: &Readers, cluster: &str) -> Result<Vec<(String, String)>> {
    let ids = aws.eks.associations(cluster, None).await?;
    let described = try_join_all(ids.into_iter().map(|a| async move {
        let name = format!("{}/{}", a.namespace, a.service_account);
        Ok::<_, anyhow::Error>(aws.eks.association(cluster, &a.id).await?.and_then(|d| d.role_arn).map(|r| (name, r)))
    }))
    .await?;
    Ok(described.into_iter().flatten().collect())
}

fn mode_of_trust(trust: &Value) -> Option<IdentityMode> {
    let text = trust.to_string();
    if text.contains("pods.eks.amazonaws.com") {
        Some(IdentityMode::PodIdentity)
    } else if text.contains("AssumeRoleWithWebIdentity") {
        Some(IdentityMode::Irsa)
    } else {
        None
    }
}

/// The Pod Identity association of the service account (its id, role, session tags, session
/// policy and owning add-on), and its target role's ARN.
async fn association(aws: &Readers, cluster: &str, ns: &str, sa: &str) -> Result<Option<(Association, Option<String>)>> {
    let listed = aws.eks.associations(cluster, Some((ns, sa))).await?;
    let Some(a) = listed.first() else { return Ok(None) };
    let id = a.id.clone();
    let d = aws.eks.association(cluster, &id).await?;
    Ok(d.and_then(|a| {
        let target = a.target_role_arn.filter(|t| !t.is_empty());
        let found = Association {
            cluster: cluster.to_string(),
            id,
            name: format!("{ns}/{sa}"),
            role_arn: a.role_arn?,
            disable_session_tags: a.disable_session_tags.unwrap_or(false),
            session_policy: a.policy.filter(|p| !p.trim().is_empty()),
            owner_arn: a.owner_arn.filter(|o| !o.is_empty()),
        };
        Some((found, target))
    }))
}

/// A role whose trust lets the cluster's OIDC provider's web identity for the service account
/// assume it (the account-wide scan).
fn irsa_role(roles: &[(String, String, Value)], issuer: &str, ns: &str, sa: &str) -> Option<String> {
    let provider_suffix = format!("oidc-provider/{issuer}");
    let sub = format!("system:serviceaccount:{ns}:{sa}");
    roles
        .iter()
        .find(|(_, _, trust)| {
            crate::policy::doc::statements(trust).iter().any(|st| {
                crate::policy::doc::strings(&st["Principal"]["Federated"]).iter().any(|f| f.ends_with(&provider_suffix))
                    && crate::checks::identity::irsa_subject(st, &sub)
            })
        })
        .map(|(_, arn, _)| arn.clone())
}

/// (name, ARN, trust policy) of every role of the account that has a readable trust policy
/// (ListRoles, paginated).
async fn trusted_roles(aws: &Readers) -> Result<Vec<(String, String, Value)>> {
    let roles = aws.iam.roles(None).await?;
    Ok(roles.into_iter().filter_map(|r| Some((r.name, r.arn, doc(r.trust.as_deref())?))).collect())
}

/// (name, ARN) of the role's managed policies (none when the role is gone).
async fn attached(aws: &Readers, name: &str) -> Result<Vec<(String, String)>> {
    Ok(aws.iam.attached_now(name).await?.unwrap_or_default().into_iter().map(|p| (p.name, p.arn)).collect())
}

async fn inline_policy(aws: &Readers, role: &str, name: String) -> Result<RolePolicy> {
    let document = doc(aws.iam.role_policy(role, &name).await?.as_deref());
    Ok(RolePolicy { name, arn: None, customer_managed: false, document })
}

async fn managed_policy(aws: &Readers, account_id: &str, name: String, arn: String) -> Result<RolePolicy> {
    let customer_managed = arn.split(':').nth(4) == Some(account_id);
    let p = aws.iam.policy(&arn).await?;
    let document = match p.as_ref().map(|p| p.default_version.as_str()).filter(|v| !v.is_empty()) {
        Some(v) => doc(aws.iam.policy_version(&arn, v).await?.flatten().as_deref()),
        None => None,
    };
    Ok(RolePolicy { name, arn: Some(arn), customer_managed, document })
}

/// The controller role and every policy it holds (attached and inline, read at once).
async fn read_controller(aws: &Readers, role: &str, how: &str) -> Result<ControllerRole> {
    let name = role_name(role).to_string();
    let inline_names = async { Ok::<_, anyhow::Error>(aws.iam.inline_names_now(&name).await?.unwrap_or_default()) };
    let (r, managed, inline) = tokio::join!(aws.iam.role_now(&name), attached(aws, &name), inline_names);
    let Some(r) = r? else {
        return Ok(ControllerRole { name, arn: role.to_string(), how: how.to_string(), exists: false, ..Default::default() });
    };
    let account = r.arn.split(':').nth(4).unwrap_or_default().to_string();
    let (managed, inline) = (managed?, inline?);
    let (m, n) = tokio::join!(
        try_join_all(managed.into_iter().map(|(n, a)| managed_policy(aws, &account, n, a))),
        try_join_all(inline.into_iter().map(|n| inline_policy(aws, &name, n))),
    );
    let mut policies = m?;
    policies.extend(n?);
    Ok(ControllerRole {
        name,
        arn: r.arn.clone(),
        how: how.to_string(),
        exists: true,
        trust: doc(r.trust.as_deref()),
        policies,
        tags: r.tags.into_iter().collect(),
        ..Default::default()
    })
}

async fn node_role(aws: &Readers, arn: String, how: Vec<String>) -> Result<NodeRole> {
    let name = role_name(&arn).to_string();
    let (r, managed) = tokio::join!(aws.iam.role_now(&name), attached(aws, &name));
    Ok(match r? {
        Some(r) => NodeRole {
            name,
            arn: r.arn,
            how,
            exists: true,
            created: Some(r.created),
            attached: managed?.into_iter().map(|(_, a)| a).collect(),
        },
        None => NodeRole { name, arn, how, exists: false, created: None, attached: vec![] },
    })
}

// ---------------------------------------------------------------------------------------- EKS

/// (node group, node role ARN) of every managed node group of the cluster.
async fn nodegroup_roles(aws: &Readers, cluster: &str) -> Result<Vec<(String, String)>> {
    let groups = match aws.eks.nodegroups(cluster).await {
        Ok(g) => g,
        Err(e) if crate::aws::read::is_not_found(&e) => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let described = try_join_all(
        groups
            .iter()
            .map(|g| async move { Ok::<_, anyhow::Error>(aws.eks.nodegroup_role(cluster, g).await?.map(|r| (g.clone(), r))) }),
    )
    .await?;
    Ok(described.into_iter().flatten().collect())
}

/// Every EC2_LINUX / EC2_WINDOWS access entry of the cluster (none on a CONFIG_MAP cluster).
async fn access_entries(aws: &Readers, cluster: &str) -> Result<Vec<AccessEntry>> {
    let principals = match aws.eks.access_entries(cluster).await {
        Ok(p) => p,
        // A CONFIG_MAP cluster has no access entries.
        Err(e) if crate::aws::aws_error_in(&e).is_some_and(|a| a.is_invalid_for_cluster_state()) => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    // Only roles can be node principals.
    let roles: Vec<String> = principals.into_iter().filter(|p| p.contains(":role/")).collect();
    let described = try_join_all(roles.iter().map(|p| aws.eks.access_entry(cluster, p))).await?;
    Ok(described
        .into_iter()
        .flatten()
        .filter(|e| e.kind.as_deref().is_some_and(|t| t.starts_with("EC2_")))
        .map(|e| AccessEntry { principal_arn: e.principal_arn, kind: e.kind.unwrap_or_default(), created: e.created })
        .collect())
}

async fn addon_installed(aws: &Readers, cluster: &str) -> Result<bool> {
    Ok(aws.eks.addon_status(cluster, POD_IDENTITY_AGENT).await?.is_some())
}

/// The region's EKS clusters (to tell which cluster a rule's name points at).
async fn list_clusters(aws: &Readers) -> Result<Vec<String>> {
    aws.eks.clusters().await
}

// -------------------------------------------------------------------------- EventBridge, SQS

/// Rules on the default bus whose pattern is one of Karpenter's interruption events and that
/// target an SQS queue, and the name of every rule the listing showed (as many as the bus holds).
async fn karpenter_rules(aws: &Readers) -> Result<(Vec<Rule>, BTreeSet<String>)> {
    let listed = aws.events.rules(None).await?;
    let names = listed.iter().map(|r| r.name.clone()).collect();
    Ok((with_queues(aws, listed.into_iter().filter_map(karpenter_rule).collect()).await?, names))
}

/// The rule as doctor judges it, when its pattern is one of Karpenter's interruption events.
fn karpenter_rule(r: crate::aws::read::events::Rule) -> Option<Rule> {
    let pattern = r.pattern.as_deref().and_then(|p| doc::parse_event_pattern(p).ok())?;
    let kinds = analysis::pattern_kinds(&pattern);
    (!kinds.is_empty()).then(|| Rule {
        name: r.name,
        arn: r.arn.unwrap_or_default(),
        enabled: r.state.as_deref() == Some("ENABLED"),
        kinds,
        ..Default::default()
    })
}

/// The rules with the SQS queues they target (a ListTargetsByRule each); those that target none
/// are left out.
async fn with_queues(aws: &Readers, mut found: Vec<Rule>) -> Result<Vec<Rule>> {
    let targets = try_join_all(found.iter().map(|r| aws.events.targets(&r.name))).await?;
    for (r, t) in found.iter_mut().zip(targets) {
        r.queue_arns = t.unwrap_or_default().into_iter().map(|t| t.arn).filter(|a| a.contains(":sqs:")).collect();
    }
    found.retain(|r| !r.queue_arns.is_empty());
    Ok(found)
}

/// Karpenter's rules that target `queue_arn` and that the bus listing left out. The listing is
/// read page after page, and a rule ahead of one deleted between two pages shifts it out of
/// both (docs/aws-behaviour.md section 5); the queue's own index (ListRuleNamesByTarget) names
/// every rule that sends to it, and each one missed is read on its own (DescribeRule).
async fn missed_rules_of(aws: &Readers, queue_arn: &str, listed: &BTreeSet<String>) -> Result<Vec<Rule>> {
    let names = aws.events.rules_targeting(queue_arn).await?;
    let missed = names.iter().filter(|n| !listed.contains(*n));
    let described = try_join_all(missed.map(|n| aws.events.rule(n))).await?;
    with_queues(aws, described.into_iter().flatten().filter_map(karpenter_rule).collect()).await
}

async fn rule_tags(aws: &Readers, arn: &str) -> Result<Vec<(String, String)>> {
    Ok(aws.events.tags(arn).await?.unwrap_or_default())
}

/// (queue ARN, how it was found, name) of this cluster's interruption queue.
fn pick_queue(i: &Inputs, rules: &[Rule], controller: &[&Value], clusters: &[String]) -> Option<(String, String, String)> {
    let arn_of = |name: &str| format!("arn:{}:sqs:{}:{}:{name}", i.partition, i.region, i.account_id);
    if let Some(q) = &i.queue {
        let name = queue_name(q).to_string();
        let arn = if q.starts_with("arn:") { q.clone() } else { arn_of(&name) };
        return Some((arn, "--queue".into(), name));
    }
    let mut targets: BTreeMap<String, Vec<&Rule>> = BTreeMap::new();
    for r in rules {
        for q in &r.queue_arns {
            targets.entry(q.clone()).or_default().push(r);
        }
    }
    let count = |arn: &str| targets.get(arn).map(Vec::len).unwrap_or(0);
    let c = &i.cluster.name;
    if let Some(arn) = analysis::receive_queues(controller).into_iter().next() {
        let how = format!("the controller role's sqs:ReceiveMessage; target of {} Karpenter rule(s)", count(&arn));
        let name = queue_name(&arn).to_string();
        return Some((arn, how, name));
    }
    if let Some(arn) = targets.keys().find(|a| analysis::names(queue_name(a), c)) {
        let how = format!("named after the cluster; target of {} Karpenter rule(s)", count(arn));
        return Some((arn.clone(), how, queue_name(arn).to_string()));
    }
    if let Some((arn, _)) = targets.iter().find(|(_, rs)| rs.iter().any(|r| analysis::names(&r.name, c))) {
        let how = format!("target of Karpenter rules named after the cluster ({})", count(arn));
        return Some((arn.clone(), how, queue_name(arn).to_string()));
    }
    if targets.len() == 1 {
        let (arn, rs) = targets.iter().next()?;
        let foreign = rs.iter().any(|r| analysis::other_cluster(&r.name, &[], c, clusters).is_some())
            || clusters.iter().any(|o| o != c && analysis::names(queue_name(arn), o));
        if !foreign {
            let how = format!("the only queue Karpenter's rules target ({} rule(s))", rs.len());
            return Some((arn.clone(), how, queue_name(arn).to_string()));
        }
    }
    None
}

async fn read_queue(aws: &Readers, arn: &str, how: &str) -> Result<Queue> {
    let name = queue_name(arn).to_string();
    let mut q = Queue { name: name.clone(), arn: arn.to_string(), how: how.to_string(), ..Default::default() };
    let account = arn.split(':').nth(4).unwrap_or_default();
    let owner = (arn.starts_with("arn:") && !account.is_empty()).then_some(account);
    let Some(url) = aws.sqs.url_now(&name, owner).await? else { return Ok(q) };
    let url = url.to_string();
    let Some(attrs) = aws.sqs.attributes_now(&url).await? else { return Ok(q) };
    let get = |k: &str| attrs.get(k).cloned();
    q.exists = true;
    q.url = Some(url);
    q.kms_master_key_id = get("KmsMasterKeyId").filter(|k| !k.is_empty());
    q.policy = doc(get("Policy").as_deref());
    if let Some(a) = get("QueueArn") {
        q.arn = a;
    }
    Ok(q)
}

// ---------------------------------------------------------------------------------------- EC2

/// The subnets matching the filters (none when a filter has no value).
async fn subnets(aws: &Readers, filters: Vec<aws_sdk_ec2::types::Filter>) -> Result<Vec<Subnet>> {
    if filters.iter().any(|f| f.values().is_empty()) {
        return Ok(vec![]);
    }
    aws.ec2.subnets(filters).await
}

/// The security groups matching the filters.
async fn groups(aws: &Readers, filters: Vec<aws_sdk_ec2::types::Filter>) -> Result<Vec<crate::aws::read::ec2::SecurityGroup>> {
    aws.ec2.security_groups(filters).await
}
