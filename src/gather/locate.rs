//! `down` without a plan file: the names of this cluster's objects where the defaults do not give
//! them (a takeover keeps the old tool's names and IAM path), followed from the cluster's own
//! objects through the links AWS keeps between them, ownership by tags; reads only.

use crate::aws::{Classify, refusal_in};
use crate::ctx::Ctx;
use crate::error::UserError;
use crate::facts::prepared::{CLUSTER_NOT_FOUND, Facts};
use crate::model::{Node, Owner, Plan, Tags};
use crate::policy::analysis::{pass_role, receive_queues, role_name};
use crate::spec::Named;
use crate::spec::Spec;
use crate::tags::RESOURCE_TAG;
use anyhow::{Context, Result};
use futures::future::try_join_all;
use serde_json::Value;

/// At most this many roles' tags are read when the controller role must be searched for among
/// the account's roles (each a GetRole); more, and `down` asks for the plan instead.
pub const MAX_CANDIDATES: usize = 100;

/// The defaults with the names found, what was found where, and what could not be looked for.
#[derive(Debug)]
pub struct Located {
    pub spec: Spec,
    /// Roles of ours the plan cannot name (a second one the search found), without desired fields.
    pub extra: Vec<Node>,
    /// One line per object found away from its default name or path, and how it was found.
    pub notes: Vec<String>,
    /// Why the controller role could not be searched for (refused, or too many roles to read):
    /// `down` then refuses any plan with steps (`refusal`), since it would leave half.
    pub incomplete: Option<String>,
}

/// A role found, and how.
struct Found {
    name: String,
    arn: String,
    path: String,
    resource: String,
    how: String,
}

fn ours(tags: &Tags, cluster: &str) -> bool {
    Owner::from_tags(tags, cluster) == Owner::Ours
}

/// The plan `down` works from without a plan file: the defaults, with the controller role (and
/// its IAM path), the node role, its instance profile, the queue and the Pod Identity service
/// account replaced by this cluster's objects found through the cluster (its Pod Identity
/// associations and access entries that carry this cluster's tags), the controller role's own
/// policies (`iam:PassRole` names the node role, `sqs:ReceiveMessage` the queue), and, when
/// neither the default name nor an association gives the controller role, the account's roles
/// whose trust could be it (`search`). Objects named this way are still deleted only if their
/// own tags say they are this cluster's.
pub async fn without_plan(ctx: &Ctx, spec: &Spec, facts: &Facts) -> Result<Located> {
    let c = spec.cluster.as_str();
    let mut out = spec.clone();
    let mut notes = Vec::new();
    let alive = facts.cluster.status != CLUSTER_NOT_FOUND;
    let default_controller = &spec.identity.controller_role.name;
    let (by_default, associations, entries) = tokio::try_join!(
        owned_role(ctx, c, default_controller),
        async { if alive { owned_associations(ctx, c).await } else { Ok(vec![]) } },
        async { if alive { owned_entries(ctx, c).await } else { Ok(vec![]) } },
    )?;

    // The controller role: its default name, else the role of an association of ours, else the
    // account's roles whose trust could be it.
    let mut incomplete = None;
    let mut extra = Vec::new();
    let controller = match by_default {
        Some(r) => Some(Found { how: "its default name".into(), ..r }),
        None => {
            let mut found = None;
            for (ns, sa, arn) in &associations {
                if let Some(r) = owned_role(ctx, c, role_name(arn)).await? {
                    found = Some(Found { how: format!("the Pod Identity association {ns}/{sa}"), ..r });
                    break;
                }
            }
            if found.is_none() {
                let (mut roles, why) = search(ctx, spec, facts).await?;
                incomplete = why;
                roles.sort_by_key(|r| r.resource != "controller-role");
                let mut roles = roles.into_iter();
                found = roles.next();
                // More than one of ours (a renamed one, say): the others go too.
                for r in roles {
                    notes.push(format!("role {} (path {}), through {}", r.name, r.path, r.how));
                    extra.push(crate::resources::iam_orphans::found_role(&r.name, &r.arn, &r.how));
                }
            }
            found
        }
    };
    if let Some(r) = &controller {
        if r.name != *default_controller || r.path != spec.identity.path {
            notes.push(format!("controller role {} (path {}), through {}", r.name, r.path, r.how));
        }
        out.identity.controller_role = Named { name: r.name.clone(), note: None };
        out.identity.path = r.path.clone();
    }
    // The service account of the association of ours that hands out the controller role.
    let controller_name = controller.as_ref().map(|r| r.name.as_str());
    if let Some((ns, sa, _)) = associations.iter().find(|(_, _, arn)| Some(role_name(arn)) == controller_name) {
        out.identity.namespace = ns.clone();
        out.identity.service_account = sa.clone();
    }

    // What the controller role's own policies name: the node role it may pass, the queue it reads.
    let docs = match &controller {
        Some(r) => owned_policy_documents(ctx, c, &r.name).await?,
        None => vec![],
    };
    let docs: Vec<&Value> = docs.iter().collect();

    // The node role: an access entry of ours names it, or the controller's iam:PassRole, or its
    // default name; the first that is this cluster's (under the controller role's path: karpctl
    // keeps a cluster's IAM objects under one path).
    let default_node = spec.identity.node_role_name();
    let candidates: Vec<(String, String)> = entries
        .iter()
        .map(|arn| (role_name(arn).to_string(), "its access entry".to_string()))
        .chain(pass_role(&docs).0.iter().map(|arn| (role_name(arn).to_string(), "the controller's iam:PassRole".to_string())))
        .chain(std::iter::once((default_node.clone(), "its default name".to_string())))
        .collect();
    let mut node = None;
    for (name, how) in candidates {
        let same_path = |r: &Found| controller.as_ref().is_none_or(|ctl| ctl.path == r.path);
        if let Some(r) = owned_role(ctx, c, &name).await?.filter(same_path) {
            node = Some(Found { how, ..r });
            break;
        }
    }
    if let Some(n) = &node {
        if n.name != default_node || (controller.is_none() && n.path != spec.identity.path) {
            notes.push(format!("node role {} (path {}), through {}", n.name, n.path, n.how));
        }
        if controller.is_none() {
            out.identity.path = n.path.clone();
        }
        out.identity.node_role = Some(Named { name: n.name.clone(), note: None });
        out.identity.existing_node_role = None;
        // Its instance profile of ours (Karpenter's own carry no ownership tag of karpctl's).
        for (name, _) in ctx.readers.iam.profiles_for_role(&n.name).await? {
            let Some(p) = ctx.readers.iam.instance_profile(&name).await? else { continue };
            if ours(&p.tags, c) {
                if name != spec.identity.instance_profile_name.name {
                    notes.push(format!("instance profile {name}, through node role {}", n.name));
                }
                out.identity.instance_profile_name = Named { name, note: None };
                break;
            }
        }
    }

    // The queue the controller reads from, when it is this cluster's.
    for arn in receive_queues(&docs) {
        let name = crate::policy::analysis::queue_name(&arn).to_string();
        let Some(url) = ctx.readers.sqs.url(&name).await? else { continue };
        if ours(&ctx.readers.sqs.tags(&url).await?, c) {
            if name != spec.interruption.queue_name {
                notes.push(format!("interruption queue {name}, through the controller's sqs:ReceiveMessage"));
            }
            out.interruption.queue_name = name;
            out.interruption.enabled = true;
            break;
        }
    }
    Ok(Located { spec: out, extra, notes, incomplete })
}

/// The role `name` when it is this cluster's (None: missing or not ours).
async fn owned_role(ctx: &Ctx, cluster: &str, name: &str) -> Result<Option<Found>> {
    if name.is_empty() {
        return Ok(None);
    }
    Ok(ctx.readers.iam.role(name).await?.filter(|r| ours(&r.tags, cluster)).map(|r| Found {
        resource: r.tags.get(RESOURCE_TAG).cloned().unwrap_or_default(),
        name: r.name,
        arn: r.arn,
        path: r.path,
        how: String::new(),
    }))
}

/// (namespace, service account, role ARN) of the cluster's Pod Identity associations that carry
/// this cluster's tags.
async fn owned_associations(ctx: &Ctx, cluster: &str) -> Result<Vec<(String, String, String)>> {
    let listed = gone_is_empty(ctx.readers.eks.associations(cluster, None).await)?;
    let described = try_join_all(listed.iter().map(|a| ctx.readers.eks.association(cluster, &a.id))).await?;
    Ok(described
        .into_iter()
        .flatten()
        .filter(|a| ours(&a.tags, cluster))
        .filter_map(|a| Some((a.namespace?, a.service_account?, a.role_arn?)))
        .collect())
}

/// The role ARNs of the cluster's access entries that carry this cluster's tags.
async fn owned_entries(ctx: &Ctx, cluster: &str) -> Result<Vec<String>> {
    let listed = gone_is_empty(ctx.readers.eks.access_entries(cluster).await)?;
    let roles: Vec<&String> = listed.iter().filter(|p| p.contains(":role/")).collect();
    let described = try_join_all(roles.iter().map(|p| ctx.readers.eks.access_entry(cluster, p))).await?;
    Ok(described.into_iter().flatten().filter(|e| ours(&e.tags, cluster)).map(|e| e.principal_arn).collect())
}

/// A list of a cluster that is gone (or in CONFIG_MAP mode, for access entries) is empty.
fn gone_is_empty<T>(r: Result<Vec<T>>) -> Result<Vec<T>> {
    match r {
        Err(e) if crate::aws::aws_error_in(&e).is_some_and(|a| a.is_not_found() || a.is_config_map_only()) => Ok(vec![]),
        r => r,
    }
}

/// The documents of the role's attached customer managed policies that carry this cluster's tags.
async fn owned_policy_documents(ctx: &Ctx, cluster: &str, role: &str) -> Result<Vec<Value>> {
    let attached = ctx.readers.iam.attached(role).await?.unwrap_or_default();
    // Each policy's two reads in turn, the policies at once.
    let managed = attached.iter().filter(|a| !a.arn.contains(":iam::aws:policy/"));
    Ok(try_join_all(managed.map(|a| owned_policy_document(ctx, cluster, &a.arn))).await?.into_iter().flatten().collect())
}

/// The document of customer managed policy `arn` when it carries this cluster's tags.
async fn owned_policy_document(ctx: &Ctx, cluster: &str, arn: &str) -> Result<Option<Value>> {
    let Some(p) = ctx.readers.iam.policy(arn).await? else { return Ok(None) };
    if !ours(&p.tags, cluster) {
        return Ok(None);
    }
    let text = ctx.readers.iam.policy_version(arn, &p.default_version).await?.flatten();
    Ok(text.and_then(|t| crate::policy::doc::parse(&t).ok()))
}

/// Pure: whether a role's trust could be this cluster's controller role: karpctl's Pod Identity
/// trust names the cluster's ARN (`aws:RequestTag/eks-cluster-arn`); its IRSA trust names the
/// cluster's OIDC provider (`issuer`, host and path), or, once the cluster is gone and its issuer
/// with it, any EKS OIDC provider of the region.
pub fn may_be_controller(trust: &Value, cluster_arn: &str, issuer: Option<&str>, region: &str) -> bool {
    if trust.to_string().contains(&format!("\"{cluster_arn}\"")) {
        return true;
    }
    let provider = match issuer {
        Some(i) => format!("oidc-provider/{i}"),
        None => format!("oidc-provider/oidc.eks.{region}."),
    };
    crate::policy::doc::statements(trust).iter().any(|st| {
        crate::policy::doc::strings(&st["Principal"]["Federated"]).iter().any(|f| match issuer {
            Some(_) => f.ends_with(&provider),
            None => f.contains(&provider),
        })
    })
}

/// The account's roles that are this cluster's and whose trust could make them its controller
/// role (ListRoles, then GetRole for each candidate: ListRoles returns no tags), and why the search
/// could not be made (iam:ListRoles refused, or more than `MAX_CANDIDATES` roles to read).
async fn search(ctx: &Ctx, spec: &Spec, facts: &Facts) -> Result<(Vec<Found>, Option<String>)> {
    let roles = match ctx.readers.iam.roles(None).await {
        Ok(r) => r,
        Err(e) => {
            return match refusal_in(&e) {
                Some(a) => Ok((vec![], Some(format!("{} was refused: {}", a.operation, a.code)))),
                None => Err(e).context("listing the account's roles to find the controller role"),
            };
        }
    };
    let cluster_arn = crate::arns::cluster_arn(spec, facts);
    let issuer = facts.cluster.oidc_issuer.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
    let issuer = (!issuer.is_empty()).then_some(issuer);
    let candidates: Vec<String> = roles
        .into_iter()
        .filter(|r| {
            r.trust
                .as_deref()
                .and_then(|t| crate::policy::doc::parse(t).ok())
                .is_some_and(|t| may_be_controller(&t, &cluster_arn, issuer, &facts.region))
        })
        .map(|r| r.name)
        .collect();
    if candidates.len() > MAX_CANDIDATES {
        let whose = match issuer {
            Some(_) => format!("name this cluster or its OIDC provider ({})", issuer.unwrap_or_default()),
            None => format!("name an EKS OIDC provider of {} (the cluster is gone, and its own provider with it)", facts.region),
        };
        return Ok((
            vec![],
            Some(format!(
                "{} roles' trust policies {whose}; without a plan, down reads the tags of at most {MAX_CANDIDATES}",
                candidates.len()
            )),
        ));
    }
    let found = try_join_all(candidates.iter().map(|n| owned_role(ctx, &spec.cluster, n))).await?;
    let how = "its trust policy, among the account's roles".to_string();
    Ok((found.into_iter().flatten().map(|r| Found { how: how.clone(), ..r }).collect(), None))
}

/// The refusal of a `down` without a plan whose search was incomplete (`Located::incomplete`)
/// while the plan would remove something: removing it would leave the rest.
pub fn refusal(cluster: &str, why: &str, plan: &Plan) -> UserError {
    let listed: Vec<String> = plan.steps.iter().map(|s| format!("  - {} {} ({})", s.kind.label(), s.name, s.id)).collect();
    UserError::new(format!(
        "down without a plan file cannot find everything cluster {cluster}'s tags mark: its controller role is not under its default name and could not be searched for ({why}). It would remove only these {} object(s), and could leave the controller role and what only it leads to (its policies, the node role, the queue):\n{}\nnothing was changed",
        plan.steps.len(),
        listed.join("\n")
    ))
    .hint(format!(
        "pass the plan that made them: karpctl down --cluster {cluster} --config plans/{cluster}.toml (while the cluster exists, `karpctl import --cluster {cluster} --karpenter-version <running release>` writes one again), or allow iam:ListRoles and iam:GetRole"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLUSTER: &str = "arn:aws:eks:us-east-1:111122223333:cluster/c1";

    #[test]
    fn a_controller_trust_names_the_cluster_or_its_oidc_provider() {
        let pod = crate::karpenter_iam::controller_trust_pod_identity(&crate::karpenter_iam::PodIdentityScope {
            cluster_arn: CLUSTER,
            namespace: "kube-system",
            service_account: "karpenter",
        });
        assert!(may_be_controller(&pod, CLUSTER, None, "us-east-1"));
        assert!(!may_be_controller(&pod, "arn:aws:eks:us-east-1:111122223333:cluster/c", None, "us-east-1"), "a prefix");
        let issuer = "oidc.eks.us-east-1.amazonaws.com/id/ABC";
        let irsa = crate::karpenter_iam::controller_trust_irsa(
            &format!("arn:aws:iam::111122223333:oidc-provider/{issuer}"),
            issuer,
            "kube-system",
            "karpenter",
        );
        assert!(may_be_controller(&irsa, CLUSTER, Some(issuer), "us-east-1"));
        assert!(!may_be_controller(&irsa, CLUSTER, Some("oidc.eks.us-east-1.amazonaws.com/id/ABCD"), "us-east-1"));
        assert!(may_be_controller(&irsa, CLUSTER, None, "us-east-1"), "the cluster gone: any EKS provider of the region");
        assert!(!may_be_controller(&irsa, CLUSTER, None, "eu-west-1"));
        let ec2 = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
        assert!(!may_be_controller(&ec2, CLUSTER, Some(issuer), "us-east-1"));
    }
}
