//! The EKS access entry that lets Karpenter's nodes join (principal: the node role). An entry
//! karpctl did not make satisfies the plan and is never changed or deleted, unless `up --adopt`
//! takes over the node role in the same run. Username and groups are AWS's and never compared.

use crate::arns;
use crate::aws::{self, Classify, Condition, aws_err};
use crate::ctx::eks_cluster_of as cluster_of;
use crate::ctx::{Ctx, Current, changed, want_str, wanted_tags};
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::model::{Action, EksSpec, Fields, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::spec::Spec;
use anyhow::{Result, bail};
use serde_json::json;
use std::collections::BTreeMap;

/// Fields that cannot change in place: a change to one replaces the object.
pub const IMMUTABLE: &[&str] = &["type", "username", "groups"];
/// Read order among kinds (0 first: the slowest reads start first): EKS, one call.
pub const READ_RANK: u8 = 1;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    AccessEntry,
    read_ahead: true,
    forget: |_, _| {},
    discover: Some(|ctx, nodes| Box::pin(discover(ctx, nodes)))
);

/// CreateAccessEntry right after CreateRole: EKS does not see the role yet (docs/aws-behaviour.md section 5).
const PRINCIPAL_NOT_PROPAGATED: [Condition; 1] = [Condition::PrincipalNotYetVisible];

/// CreateAccessEntry right after DeleteAccessEntry of the same principal (a type change): EKS may
/// still hold the old entry for a moment (docs/aws-behaviour.md section 9).
const RECREATE_NOT_READY: [Condition; 2] = [Condition::PrincipalNotYetVisible, Condition::ResourceInUse];

fn principal_of(node: &Node) -> &str {
    match &node.spec {
        NodeSpec::AccessEntry(e) if !e.principal_arn.is_empty() => &e.principal_arn,
        _ => &node.name,
    }
}

/// Pure: the node role's access entry. Fields: `type`, `tags`; the name is the principal.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let id = &spec.identity;
    let principal_arn = arns::node_role_arn(spec, facts);
    let fields = crate::model::fields_of(vec![
        ("type", json!(id.access_entry_type)),
        ("tags", arns::tags_value(spec, "node-access-entry")),
    ]);
    let spec_of = NodeSpec::AccessEntry(EksSpec { cluster: spec.cluster.clone(), principal_arn: principal_arn.clone() });
    let node = Node::new("node-access-entry", &principal_arn, spec_of).with_fields(Some(fields));
    if id.node_role.is_none() {
        return vec![node];
    }
    // EKS binds an entry to the role's unique id, not its ARN: a role made again (deleted out of
    // band, or moved to another path) needs its entry made again (docs/aws-behaviour.md section 9).
    let why = "EKS binds an access entry to its role's unique id, so the entry made for the old role would let no node join";
    // The role is karpctl's, so its entry is too: `--adopt` takes over the one the tool karpctl
    // replaces made (an existing_node_role's entry, a node group's say, is never taken).
    vec![node.with_deps(["node-role"]).bound_to("node-role", why).adopt_external()]
}

/// Who owns an entry, from its tags: without karpctl's ownership tag it belongs to someone else
/// (EKS, a person, Terraform) and only satisfies the plan.
pub fn owner(tags: &Tags, cluster: &str) -> Owner {
    match Owner::from_tags(tags, cluster) {
        Owner::Unowned => Owner::External,
        o => o,
    }
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let principal = principal_of(node);
    if principal.is_empty() {
        return Ok(None);
    }
    let cluster = cluster_of(ctx, node);
    let entry = match ctx.readers.eks.access_entry(cluster, principal).await {
        Ok(Some(e)) => e,
        Ok(None) => return Ok(None),
        // A CONFIG_MAP cluster has no access entries at all (and cannot get any until its mode changes).
        Err(e) if crate::aws::aws_error_in(&e).is_some_and(|a| a.is_config_map_only()) => return Ok(None),
        Err(e) => return Err(e),
    };
    let tags: Tags = entry.tags.clone();
    let mut fields = Fields::new();
    fields.insert("type".into(), entry.kind.as_ref().map(|t| json!(t)).unwrap_or(serde_json::Value::Null));
    fields.insert("tags".into(), Ctx::tags_value(&tags));
    let mut ids = BTreeMap::new();
    if let Some(arn) = &entry.arn {
        ids.insert("arn".to_string(), arn.clone());
    }
    Ok(Some(Observed { fields, owner: owner(&tags, &ctx.cluster), ids }))
}

/// DescribeAccessEntry, fresh: who owns the entry now, and its ARN.
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let node = &step.node;
    let live = read(ctx, node).await?;
    Ok(live.map(|o| {
        let tags = crate::ctx::observed_tags(&o);
        let arn = o.ids.get("arn").cloned().unwrap_or_default();
        Current::new(o.owner, tags).id("arn", arn)
    }))
}

/// Ownership was checked just now by the dispatcher (`Current`), for every action but Create.
/// Every action waits for an ACTIVE cluster first (`eks::gate`); a delete on a cluster that is
/// gone is skipped (the entry went with it).
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    if !super::eks::gate(ctx, step).await? {
        return Ok(());
    }
    match step.action {
        Action::Create => create(ctx, step, false).await,
        Action::Replace => {
            // The type cannot change in place: delete (which waits until EKS no longer shows the
            // old entry), then create (EKS answers 409 to a create while it still holds the old one).
            delete(ctx, step).await?;
            create(ctx, step, true).await
        }
        Action::Update | Action::Adopt => {
            if step.action == Action::Adopt || changed(step, "tags") {
                tag(ctx, step, current.and_then(|c| c.get("arn"))).await?;
            }
            Ok(())
        }
        Action::Delete => delete(ctx, step).await,
    }
}

/// `recreate`: right after this run deleted the entry (a replacement), a 409 is the old entry
/// lingering, retried like a propagation delay.
async fn create(ctx: &Ctx, step: &Step, recreate: bool) -> Result<()> {
    let node = &step.node;
    let cluster = cluster_of(ctx, node);
    let principal = principal_of(node);
    if principal.is_empty() {
        bail!("no principal ARN for the access entry (no node role in the plan)");
    }
    let tags = wanted_tags(node);
    let mut race = aws::Retry::new(&ctx.consistency, ctx.reporter.as_ref(), &step.id, "eks:CreateAccessEntry");
    let r = loop {
        let r = aws::with_consistency(
            &ctx.consistency,
            ctx.reporter.as_ref(),
            &step.id,
            "eks:CreateAccessEntry",
            if recreate { &RECREATE_NOT_READY[..] } else { &PRINCIPAL_NOT_PROPAGATED[..] },
            || {
                ctx.aws
                    .eks
                    .create_access_entry()
                    .cluster_name(cluster)
                    .principal_arn(principal)
                    .r#type(want_str(node, "type"))
                    .set_tags(Some(tags.clone().into_iter().collect()))
                    .send()
            },
        )
        .await;
        match r {
            Err(e) if e.is_resource_in_use() => {}
            r => break r,
        }
        // Someone (EKS for a managed node group, a concurrent karpctl) made it meanwhile, or EKS
        // still holds an entry deleted a moment ago that its reads no longer show.
        match read(ctx, node).await?.map(|o| o.owner) {
            Some(Owner::Ours) => {
                // A concurrent run of ours: make sure the tags are complete.
                return tag(ctx, step, None).await;
            }
            Some(Owner::External) | Some(Owner::Unowned) => {
                ctx.reporter.event(Event::Info(&format!(
                    "{}: an access entry for {principal} already exists and is not karpctl's; it satisfies the plan and is left alone",
                    step.id
                )));
                return Ok(());
            }
            Some(Owner::OtherCluster(c)) => {
                bail!("EKS access entry {principal} exists but is managed by karpctl for cluster {c}; it was left untouched")
            }
            // The create says it exists, the read says it does not: EKS's replicas disagree
            // (docs/aws-behaviour.md section 9.18). A consistency race, retried.
            None if race.again("ResourceInUseException (no entry reads back)").await => continue,
            None => bail!(
                "eks:CreateAccessEntry kept answering that the entry for {principal} exists while reads find none, for {} s; run karpctl up again",
                ctx.consistency.deadline.as_secs()
            ),
        }
    };
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_config_map_only() => Err(crate::error::UserError::new(format!(
            "EKS cluster {cluster} is in CONFIG_MAP authentication mode, so it cannot hold access entries"
        ))
        .hint(format!(
            "switch it (karpctl never does): aws eks update-cluster-config --name {cluster} --access-config authenticationMode=API_AND_CONFIG_MAP"
        ))
        .into()),
        Err(e) => Err(aws_err("eks:CreateAccessEntry", e)),
    }
}

/// TagResource on the entry (`arn` as just read, else read now).
async fn tag(ctx: &Ctx, step: &Step, arn: Option<&str>) -> Result<()> {
    let arn = match arn.filter(|a| !a.is_empty()) {
        Some(a) => Some(a.to_string()),
        None => read(ctx, &step.node).await?.and_then(|o| o.ids.get("arn").cloned()),
    };
    let Some(arn) = arn else { bail!("EKS access entry {} disappeared since it was read; run karpctl up again", step.node.name) };
    let stale = crate::ctx::stale_tags(step);
    if !stale.is_empty() {
        ctx.aws
            .eks
            .untag_resource()
            .resource_arn(&arn)
            .set_tag_keys(Some(stale))
            .send()
            .await
            .map_err(|e| aws_err("eks:UntagResource", e))?;
    }
    ctx.aws
        .eks
        .tag_resource()
        .resource_arn(&arn)
        .set_tags(Some(wanted_tags(&step.node).into_iter().collect()))
        .send()
        .await
        .map_err(|e| aws_err("eks:TagResource", e))?;
    Ok(())
}

/// DeleteAccessEntry, then a wait until `Agreement::EKS_GONE` reads in a row find no entry: EKS
/// deletes eventually, and an `up` right after a `down` must not find the dying entry in sync
/// (docs/aws-behaviour.md section 9.18).
async fn delete(ctx: &Ctx, step: &Step) -> Result<()> {
    let node = &step.node;
    let principal = principal_of(node);
    match ctx.aws.eks.delete_access_entry().cluster_name(cluster_of(ctx, node)).principal_arn(principal).send().await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(aws_err("eks:DeleteAccessEntry", e)),
    }
    let what = format!("EKS to drop the access entry for {principal}");
    let gone = aws::wait_agreed(&ctx.consistency, aws::Agreement::EKS_GONE, ctx.reporter.as_ref(), &step.id, &what, || async {
        Ok(read(ctx, node).await?.is_none())
    })
    .await?;
    if !gone {
        bail!(
            "EKS still shows the access entry for {principal} {} s after DeleteAccessEntry; run karpctl {} again",
            ctx.consistency.deadline.as_secs(),
            if step.action == Action::Delete { "down" } else { "up" }
        );
    }
    Ok(())
}

/// Access entries the plan no longer names that may be karpctl's, from one ListAccessEntries: for
/// roles under the plan's IAM path (other than "/", which would match every role), and for the node
/// role's name under any path (after an `identity.path` change). Nodes without desired fields;
/// their reads decide ownership. A cluster that is gone, or in CONFIG_MAP mode, has none.
pub async fn discover(ctx: &Ctx, nodes: &[Node]) -> Result<Vec<Node>> {
    let Some(planned) = nodes.iter().find(|n| n.kind == crate::model::Kind::AccessEntry) else { return Ok(vec![]) };
    let path = super::iam::plan_iam_path(nodes).filter(|p| p != "/");
    let planned_principal = principal_of(planned).to_string();
    let planned_name = role_name(&planned_principal).map(str::to_string);
    if path.is_none() && planned_name.is_none() {
        return Ok(vec![]);
    }
    let cluster = cluster_of(ctx, planned).to_string();
    let entries = match ctx.readers.eks.access_entries(&cluster).await {
        Ok(e) => e,
        Err(e) if crate::aws::aws_error_in(&e).is_some_and(|a| a.is_not_found() || a.is_config_map_only()) => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let marker = path.map(|p| format!(":role{p}"));
    Ok(entries
        .into_iter()
        .filter(|arn| arn.as_str() != planned_principal)
        .filter_map(|arn| {
            let under_path = marker.as_ref().is_some_and(|m| arn.contains(m.as_str()));
            let same_name = planned_name.is_some() && role_name(&arn) == planned_name.as_deref();
            let note = if under_path {
                "an access entry for a role under karpctl's IAM path that the plan no longer names"
            } else if same_name {
                "an access entry for the node role's name under another IAM path (identity.path changed)"
            } else {
                return None;
            };
            let id = format!("unlisted-access-entry-{}", arn.rsplit('/').next().unwrap_or(&arn));
            let id = if same_name && !under_path { format!("{id}-{}", short_hash(&arn)) } else { id };
            let spec = NodeSpec::AccessEntry(EksSpec { cluster: cluster.clone(), principal_arn: arn.clone() });
            Some(Node::new(id, arn.clone(), spec).with_notes([note.to_string()]).unlisted())
        })
        .collect())
}

/// The role name of an IAM role ARN (`arn:<p>:iam::<a>:role/<path>/<name>`), None for other ARNs.
fn role_name(arn: &str) -> Option<&str> {
    let (_, rest) = arn.split_once(":role/")?;
    rest.rsplit('/').next().filter(|n| !n.is_empty())
}

/// 8 hex characters naming an ARN, so that two entries for one role name under different paths
/// get different node ids.
fn short_hash(s: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(s.as_bytes()).iter().take(4).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tags::OWNER_TAG;

    #[test]
    fn entries_without_our_tag_are_external() {
        let mut t = Tags::new();
        assert_eq!(owner(&t, "c"), Owner::External);
        t.insert(OWNER_TAG.into(), "c".into());
        assert_eq!(owner(&t, "c"), Owner::Ours);
        t.insert(OWNER_TAG.into(), "d".into());
        assert_eq!(owner(&t, "c"), Owner::OtherCluster("d".into()));
    }

    #[test]
    fn role_names_come_from_role_arns_whatever_the_path() {
        assert_eq!(role_name("arn:aws:iam::1:role/karpctl/c/KarpenterNodeRole-c"), Some("KarpenterNodeRole-c"));
        assert_eq!(role_name("arn:aws:iam::1:role/KarpenterNodeRole-c"), Some("KarpenterNodeRole-c"));
        assert_eq!(role_name("arn:aws:iam::1:user/u"), None);
    }
}
