//! Discovery tags on shared subnets and security groups, which are never karpctl's: it adds and
//! removes only `karpenter.sh/discovery=<c>` and its marker `karpctl.io/discovery=<c>`, and only
//! where the marker names this cluster (docs/reference.md, "Discovery tags").

use crate::aws::{Classify, aws_err};
use crate::ctx::{Ctx, Current};
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::model::{Action, DiscoverySpec, Fields, Node, NodeSpec, Observed, Owner, Step, Tags};
use crate::spec::Spec;
use crate::tags::{DISCOVERY_TAG, MARKER_TAG};
use anyhow::{Result, bail};
use aws_sdk_ec2::types::Tag;
use serde_json::json;
use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// No field forces a replacement: every change is made in place.
pub const IMMUTABLE: &[&str] = &[];
/// Read order among kinds (0 first: the slowest reads start first): EC2, one memoised DescribeTags for every discovery node.
pub const READ_RANK: u8 = 6;

// This kind's entry in `resources::KINDS`.
super::kind::def!(
    DiscoveryTags,
    read_ahead: false,
    forget: |_, _| {},
    discover: None
);

/// Node ids are this prefix plus the subnet or security group id.
pub const NODE_PREFIX: &str = "discovery-tags-";

fn resource_type(id: &str) -> &'static str {
    if id.starts_with("sg-") { "security-group" } else { "subnet" }
}

/// Pure: one DiscoveryTags node per chosen subnet and for the group, plus one without desired
/// fields for each object karpctl tagged before that is no longer chosen.
pub fn nodes(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let c = &spec.cluster;
    let d = &facts.discovery;
    let want = || {
        let mut f = crate::model::Fields::new();
        f.insert("tags".into(), json!({ DISCOVERY_TAG: c, MARKER_TAG: c }));
        f
    };
    let mut entries: Vec<(String, bool, Vec<String>)> = Vec::new();
    for s in &d.subnets {
        entries.push((
            s.id.clone(),
            true,
            vec![format!("subnet in {} ({} free addresses)", s.availability_zone, s.available_ips)],
        ));
    }
    if let Some(g) = &d.security_group {
        entries.push((g.id.clone(), true, vec![format!("security group {}", g.name)]));
    }
    for id in &d.previously_marked {
        entries.push((id.clone(), false, vec!["tagged by karpctl before; no longer selected by the plan".into()]));
    }
    let mut seen = BTreeSet::new();
    entries.retain(|(id, _, _)| !id.is_empty() && seen.insert(id.clone()));
    let batch: Vec<String> = seen.iter().cloned().collect();
    entries
        .into_iter()
        .map(|(id, wanted, notes)| {
            let spec = DiscoverySpec { resource_type: resource_type(&id).to_string(), batch: batch.clone() };
            Node::new(format!("{NODE_PREFIX}{id}"), id, NodeSpec::DiscoveryTags(spec))
                .with_fields(wanted.then(want))
                .with_notes(notes)
        })
        .collect()
}

/// The two tags of every id, fresh.
async fn describe(ctx: &Ctx, ids: &[String]) -> Result<BTreeMap<String, Tags>> {
    ctx.readers.ec2.discovery_tags_now(ids).await
}

fn batch_of(node: &Node) -> Vec<String> {
    let mut ids: Vec<String> = match &node.spec {
        NodeSpec::DiscoveryTags(d) => d.batch.clone(),
        _ => vec![],
    };
    if !ids.contains(&node.name) {
        ids.push(node.name.clone());
    }
    ids.sort();
    ids.dedup();
    ids
}

/// What the two live tags mean for this cluster (pure).
pub fn observe(id: &str, live: &Tags, cluster: &str) -> Option<Observed> {
    let d = live.get(DISCOVERY_TAG);
    let m = live.get(MARKER_TAG);
    if d.is_none() && m.is_none() {
        return None;
    }
    let owner = match (d.map(String::as_str), m.map(String::as_str)) {
        // Our marker: ours to remove, even if someone re-pointed the discovery tag since (the
        // write path then removes only the marker; preflight refuses to re-tag such an object).
        (_, Some(v)) if v == cluster => Owner::Ours,
        // Tagged for another cluster: never overwrite that tag.
        (Some(v), _) if v != cluster => Owner::OtherCluster(v.to_string()),
        (_, Some(v)) => Owner::OtherCluster(v.to_string()),
        // The discovery tag for this cluster, put there by someone else.
        (Some(_), None) => Owner::External,
        (None, None) => unreachable!(),
    };
    let shown: Tags =
        live.iter().filter(|(k, _)| *k == DISCOVERY_TAG || *k == MARKER_TAG).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut fields = Fields::new();
    fields.insert("tags".into(), Ctx::tags_value(&shown));
    let mut ids = BTreeMap::new();
    ids.insert("resource_id".to_string(), id.to_string());
    Some(Observed { fields, owner, ids })
}

pub async fn read(ctx: &Ctx, node: &Node) -> Result<Option<Observed>> {
    let ids = batch_of(node);
    let all = ctx.readers.ec2.discovery_tags(&ids).await?;
    let live = all.get(&node.name).cloned().unwrap_or_default();
    Ok(observe(&node.name, &live, &ctx.cluster))
}

/// The two tags of one object, fresh (not memoised): every write decides on what is live now.
async fn live_tags(ctx: &Ctx, id: &str) -> Result<Tags> {
    Ok(describe(ctx, &[id.to_string()]).await?.remove(id).unwrap_or_default())
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

/// The tags CreateTags must add so that the object carries both, or None when it must be left
/// alone (pre-existing discovery tag, or tags of another cluster). Pure.
pub fn tags_to_add(live: &Tags, cluster: &str) -> Result<Option<Vec<(&'static str, String)>>, String> {
    let d = live.get(DISCOVERY_TAG).map(String::as_str);
    let m = live.get(MARKER_TAG).map(String::as_str);
    if let Some(v) = d.filter(|v| *v != cluster) {
        return Err(format!("it carries {DISCOVERY_TAG}={v} (another cluster's); karpctl does not overwrite it"));
    }
    if let Some(v) = m.filter(|v| *v != cluster) {
        return Err(format!("it carries {MARKER_TAG}={v} (karpctl's for another cluster); karpctl does not overwrite it"));
    }
    if d.is_some() && m.is_none() {
        // Pre-existing: it already satisfies the plan, and never gets the marker.
        return Ok(None);
    }
    let mut add = Vec::new();
    if d.is_none() {
        add.push((DISCOVERY_TAG, cluster.to_string()));
    }
    if m.is_none() {
        add.push((MARKER_TAG, cluster.to_string()));
    }
    Ok(Some(add))
}

/// The tags DeleteTags must remove, each with its value: nothing unless the marker names this
/// cluster; the discovery tag only while it still holds this cluster's value. Pure.
pub fn tags_to_remove(live: &Tags, cluster: &str) -> Vec<(&'static str, String)> {
    if live.get(MARKER_TAG).map(String::as_str) != Some(cluster) {
        return vec![];
    }
    let mut out = Vec::new();
    if live.get(DISCOVERY_TAG).map(String::as_str) == Some(cluster) {
        out.push((DISCOVERY_TAG, cluster.to_string()));
    }
    out.push((MARKER_TAG, cluster.to_string()));
    out
}

/// DescribeTags of this one object, fresh: who owns its tag pair now (None: neither tag).
pub async fn current(ctx: &Ctx, step: &Step) -> Result<Option<Current>> {
    let id = &step.node.name;
    let live = live_tags(ctx, id).await?;
    Ok(observe(id, &live, &ctx.cluster).map(|o| Current::new(o.owner, live)))
}

/// Ownership (the marker) was checked just now by the dispatcher, for every action but Create;
/// a create reads the object's tags itself. The missing tags go in one CreateTags, so that no
/// crash leaves a discovery tag of ours without its marker.
pub async fn apply(ctx: &Ctx, step: &Step, current: Option<&Current>) -> Result<()> {
    let id = &step.node.name;
    let what = match &step.node.spec {
        NodeSpec::DiscoveryTags(d) => d.resource_type.replace('-', " "),
        _ => "object".to_string(),
    };
    match step.action {
        Action::Create | Action::Update | Action::Replace => {
            let live = match current {
                Some(c) => c.tags.clone(),
                None => live_tags(ctx, id).await?,
            };
            let add = match tags_to_add(&live, &ctx.cluster) {
                Err(why) => bail!("{what} {id}: {why}"),
                Ok(None) => {
                    ctx.reporter.event(Event::Info(&format!(
                        "{}: {what} {id} already carries {DISCOVERY_TAG}={} (not added by karpctl); left alone",
                        step.id, ctx.cluster
                    )));
                    return Ok(());
                }
                Ok(Some(add)) if add.is_empty() => return Ok(()),
                Ok(Some(add)) => add,
            };
            ctx.aws
                .ec2
                .create_tags()
                .resources(id)
                .set_tags(Some(add.iter().map(|(k, v)| tag(k, v)).collect()))
                .send()
                .await
                .map_err(|e| aws_err("ec2:CreateTags", e))?;
            Ok(())
        }
        // Shared objects are never adopted; the planner cannot ask for it (no read is Unowned).
        Action::Adopt => bail!("{what} {id} is shared and is never adopted; karpctl only manages its own tags on it"),
        Action::Delete => {
            let live = current.map(|c| c.tags.clone()).unwrap_or_default();
            let remove = tags_to_remove(&live, &ctx.cluster);
            if remove.is_empty() {
                return Ok(());
            }
            match ctx
                .aws
                .ec2
                .delete_tags()
                .resources(id)
                .set_tags(Some(remove.iter().map(|(k, v)| tag(k, v)).collect()))
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() || e.is_invalid_resource_id() => Ok(()),
                Err(e) => Err(aws_err("ec2:DeleteTags", e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn ownership_follows_the_marker() {
        assert_eq!(observe("s", &tags(&[]), "c"), None);
        let both = tags(&[(DISCOVERY_TAG, "c"), (MARKER_TAG, "c")]);
        assert_eq!(observe("s", &both, "c").unwrap().owner, Owner::Ours);
        assert_eq!(
            observe("s", &tags(&[(MARKER_TAG, "c")]), "c").unwrap().owner,
            Owner::Ours,
            "discovery tag removed out of band"
        );
        assert_eq!(observe("s", &tags(&[(DISCOVERY_TAG, "c")]), "c").unwrap().owner, Owner::External, "pre-existing");
        assert_eq!(observe("s", &tags(&[(DISCOVERY_TAG, "d")]), "c").unwrap().owner, Owner::OtherCluster("d".into()));
        assert_eq!(
            observe("s", &tags(&[(DISCOVERY_TAG, "d"), (MARKER_TAG, "c")]), "c").unwrap().owner,
            Owner::Ours,
            "re-pointed to another cluster: our marker is still ours to remove (tags_to_add refuses to overwrite)"
        );
        assert!(tags_to_add(&tags(&[(DISCOVERY_TAG, "d"), (MARKER_TAG, "c")]), "c").is_err());
        assert_eq!(observe("s", &tags(&[(MARKER_TAG, "d")]), "c").unwrap().owner, Owner::OtherCluster("d".into()));
    }

    #[test]
    fn adding_puts_both_tags_in_one_call_and_never_marks_a_pre_existing_tag() {
        let add = tags_to_add(&tags(&[("Name", "x")]), "c").unwrap().unwrap();
        assert_eq!(add, vec![(DISCOVERY_TAG, "c".to_string()), (MARKER_TAG, "c".to_string())]);
        assert_eq!(tags_to_add(&tags(&[(DISCOVERY_TAG, "c")]), "c").unwrap(), None);
        assert_eq!(tags_to_add(&tags(&[(MARKER_TAG, "c")]), "c").unwrap().unwrap(), vec![(DISCOVERY_TAG, "c".to_string())]);
        assert!(tags_to_add(&tags(&[(DISCOVERY_TAG, "d")]), "c").is_err());
        assert!(tags_to_add(&tags(&[(DISCOVERY_TAG, "c"), (MARKER_TAG, "c")]), "c").unwrap().unwrap().is_empty());
    }

    #[test]
    fn removal_names_key_and_value_and_only_with_our_marker() {
        assert!(tags_to_remove(&tags(&[(DISCOVERY_TAG, "c")]), "c").is_empty(), "pre-existing tag survives");
        assert!(tags_to_remove(&tags(&[(DISCOVERY_TAG, "c"), (MARKER_TAG, "d")]), "c").is_empty());
        assert_eq!(
            tags_to_remove(&tags(&[(DISCOVERY_TAG, "c"), (MARKER_TAG, "c"), ("karpenter.sh/discovery-x", "c")]), "c"),
            vec![(DISCOVERY_TAG, "c".to_string()), (MARKER_TAG, "c".to_string())]
        );
        // Re-pointed to another cluster: only the marker goes, the other cluster's tag stays.
        assert_eq!(tags_to_remove(&tags(&[(DISCOVERY_TAG, "d"), (MARKER_TAG, "c")]), "c"), vec![(MARKER_TAG, "c".to_string())]);
    }
}
