//! Pure planning: desired nodes + what was observed -> steps with field-level changes.
//! `diff` renders the result; `up` and `down` execute it. Nothing here talks to AWS.

use crate::model::{Action, Change, Conflict, Kind, Level, Node, Note, Observed, Owner, Plan, Step};
use serde_json::Value;

#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions {
    /// Take over unowned objects of the expected name instead of stopping.
    pub adopt: bool,
}

/// Compare the desired fields with the observed ones. Only fields the plan names are compared;
/// for `tags`, only the keys the plan sets (other tags on our objects are left alone). A change to
/// one of the `immutable` fields forces a replacement.
pub fn changes(immutable: &[String], desired: &crate::model::Fields, observed: &Observed) -> Vec<Change> {
    let mut out = Vec::new();
    for (field, after) in desired {
        let before = match (field.as_str(), observed.fields.get(field)) {
            ("tags", Some(Value::Object(live))) => {
                // The keys the plan sets, and those karpctl set that it no longer names (removed).
                let wanted = after.as_object();
                let as_tags = |m: &serde_json::Map<String, Value>| -> crate::model::Tags {
                    m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()
                };
                let stale = crate::tags::stale_keys(&as_tags(live), &wanted.map(as_tags).unwrap_or_default());
                Value::Object(
                    live.iter()
                        .filter(|(k, _)| wanted.is_some_and(|w| w.contains_key(*k)) || stale.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            }
            (_, Some(v)) => v.clone(),
            (_, None) => Value::Null,
        };
        if &before != after {
            out.push(Change {
                field: field.clone(),
                before,
                after: after.clone(),
                forces_replacement: immutable.iter().any(|f| f == field),
            });
        }
    }
    out
}

fn all_fields_as_changes(node: &Node, observed: Option<&Observed>, create: bool) -> Vec<Change> {
    if create {
        node.fields
            .iter()
            .flatten()
            .map(|(f, v)| Change { field: f.clone(), before: Value::Null, after: v.clone(), forces_replacement: false })
            .collect()
    } else {
        observed
            .map(|o| {
                o.fields
                    .iter()
                    .map(|(f, v)| Change { field: f.clone(), before: v.clone(), after: Value::Null, forces_replacement: false })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// karpctl's record of the user tags it set (`tags::TRACK_TAG`) names only keys it wrote: those
/// it recorded before that the plan still names, and those whose live value the plan changes or
/// adds. A tag the object already carried with the same value (a takeover's `default_tags`) is
/// not claimed, so dropping it from the plan later never removes it.
fn record_only_written_tags(node: &mut Node, obs: &Observed) {
    use crate::tags::TRACK_TAG;
    let Some(want) = node.fields.as_mut().and_then(|f| f.get_mut("tags")).and_then(|t| t.as_object_mut()) else { return };
    let Some(planned) = want.get(TRACK_TAG).and_then(|v| v.as_str()).map(str::to_string) else { return };
    let live = obs.fields.get("tags").and_then(|t| t.as_object());
    let live_of = |k: &str| live.and_then(|l| l.get(k));
    let recorded: Vec<&str> = live_of(TRACK_TAG).and_then(|v| v.as_str()).map(|t| t.split(' ').collect()).unwrap_or_default();
    let keys: Vec<String> =
        planned.split(' ').filter(|k| recorded.contains(k) || live_of(k) != want.get(*k)).map(str::to_string).collect();
    match crate::tags::track_value(&keys) {
        Some(v) => {
            want.insert(TRACK_TAG.to_string(), Value::String(v));
        }
        None => {
            want.remove(TRACK_TAG);
        }
    }
}

/// A finding about `node`: "<kind> <name> <what>".
fn say(p: &mut Plan, node: &Node, level: Level, what: &str) {
    p.notes.push(Note { id: node.id.clone(), level, message: format!("{} {} {what}", node.kind.label(), node.name) });
}

pub fn plan(mut entries: Vec<(Node, Option<Observed>)>, opts: PlanOptions) -> Plan {
    // What the kinds want given what exists (`KindDef::refine`).
    crate::resources::refine(&mut entries);
    let mut p = Plan::default();
    let bound: Vec<(Node, Option<Observed>)> = entries.iter().filter(|(n, _)| !n.bound_to.is_empty()).cloned().collect();
    // Objects `--adopt` takes over in this run: someone else's object that depends only on them
    // (`adopt_external`: the access entry of a node role being adopted) is taken over with them.
    let adopted: std::collections::BTreeSet<String> = entries
        .iter()
        .filter(|(n, o)| n.fields.is_some() && o.as_ref().is_some_and(|o| o.owner == Owner::Unowned))
        .map(|(n, _)| n.id.clone())
        .collect();
    let with_its_deps = |n: &Node| n.adopt_external && !n.deps.is_empty() && n.deps.iter().all(|d| adopted.contains(d));
    let second_set = if opts.adopt { second_set(&entries) } else { Vec::new() };
    for (mut node, observed) in entries {
        if let Some(obs) = &observed {
            record_only_written_tags(&mut node, obs);
        }
        let step = |action, changes| Step {
            id: node.id.clone(),
            kind: node.kind,
            name: node.name.clone(),
            action,
            changes,
            deps: node.deps.clone(),
            node: node.clone(),
            observed: observed.clone(),
            removed_with: None,
        };
        match (&node.fields, &observed) {
            (Some(_), None) => {
                let ch = all_fields_as_changes(&node, None, true);
                p.steps.push(step(Action::Create, ch));
            }
            (Some(want), Some(obs)) => match &obs.owner {
                Owner::Ours => {
                    let ch = changes(&node.immutable, want, obs);
                    if ch.is_empty() {
                        p.in_sync.push(node.id.clone());
                    } else if ch.iter().any(|c| c.forces_replacement) {
                        p.steps.push(step(Action::Replace, ch));
                    } else {
                        p.steps.push(step(Action::Update, ch));
                    }
                }
                // The access entry the tool taken over made for karpctl's node role is adopted
                // too (`adopt_external`): else it outlives the role after `down`.
                Owner::Unowned | Owner::External if opts.adopt && (obs.owner == Owner::Unowned || with_its_deps(&node)) => {
                    let ch = changes(&node.immutable, want, obs);
                    if let Some(c) = ch.iter().find(|c| c.forces_replacement) {
                        // Adopting must not destroy the object: stop instead.
                        p.conflicts.push(Conflict {
                            id: node.id.clone(),
                            kind: node.kind,
                            name: node.name.clone(),
                            owner: obs.owner.clone(),
                            detail: Some(format!(
                                "adopting it would replace it because its {} is {} (the plan wants {}); make the plan match it (for IAM objects, set identity.path)",
                                c.field, c.before, c.after
                            )),
                        });
                    } else if ch.is_empty() {
                        // Nothing of its own to change: an object whose ownership is another's
                        // (a policy attachment is its role's) is taken over with that one. An
                        // object with tags of its own always differs here, by karpctl's tags.
                        p.in_sync.push(node.id.clone());
                    } else {
                        p.steps.push(step(Action::Adopt, ch));
                    }
                }
                Owner::Unowned | Owner::OtherCluster(_) => p.conflicts.push(Conflict {
                    id: node.id.clone(),
                    kind: node.kind,
                    name: node.name.clone(),
                    owner: obs.owner.clone(),
                    detail: None,
                }),
                Owner::External
                    if changes(&node.immutable, want, obs).iter().any(|c| c.forces_replacement && c.field != "tags") =>
                {
                    let c = changes(&node.immutable, want, obs).into_iter().find(|c| c.forces_replacement).unwrap();
                    p.conflicts.push(Conflict {
                        id: node.id.clone(),
                        kind: node.kind,
                        name: node.name.clone(),
                        owner: Owner::Unowned,
                        detail: Some(format!(
                            "its {} is {} but the plan needs {}; karpctl never replaces an object it does not own: delete it, then run up again",
                            c.field, c.before, c.after
                        )),
                    });
                }
                Owner::External => {
                    p.in_sync.push(node.id.clone());
                    say(
                        &mut p,
                        &node,
                        Level::Info,
                        "already exists and is not managed by karpctl; it satisfies the plan and is left alone",
                    );
                }
            },
            (None, Some(obs)) => match &obs.owner {
                Owner::Ours if node.keep_existing => {
                    p.in_sync.push(node.id.clone());
                    say(
                        &mut p,
                        &node,
                        Level::Info,
                        "is no longer needed by the plan but is kept: an EC2NodeClass may still name it (`karpctl down` removes it)",
                    );
                }
                Owner::Ours => {
                    let ch = all_fields_as_changes(&node, Some(obs), false);
                    p.steps.push(step(Action::Delete, ch));
                }
                // On a role `--adopt` takes over now: left this run, detached by the next `up`
                // once the role is karpctl's. Said now, with how to keep it.
                Owner::Unowned if node.unlisted && opts.adopt && node.kind == crate::model::Kind::RolePolicyAttachment => {
                    say(
                        &mut p,
                        &node,
                        Level::Warning,
                        "is attached to a role this run adopts but is not in the plan: the next `up` detaches it; \
                         to keep it, list its ARN in identity.extra_controller_policy_arns (controller role) or \
                         identity.extra_node_policy_arns (node role)",
                    );
                }
                // Another tool's rule that feeds the queue: the queue policy keeps letting it
                // send (`queue_policy::refine`); said, with what to do.
                _ if node.unlisted && node.kind == Kind::EventRule => say(
                    &mut p,
                    &node,
                    Level::Warning,
                    "targets the interruption queue and is not karpctl's: the queue policy keeps letting it send, so \
                     nothing it delivers is refused. If it carries the same events as a rule of the plan, Karpenter \
                     reads each twice (harmless): remove it in the tool that made it once karpctl's rules are in \
                     place, or run `karpctl import`, which names it in the plan",
                ),
                // Objects found by a scoped list (another cluster's under a shared IAM path, for
                // example) are not worth a note.
                _ if node.unlisted => {}
                Owner::Unowned | Owner::External | Owner::OtherCluster(_) => {
                    say(&mut p, &node, Level::Info, "exists but is not karpctl's for this cluster; left alone");
                }
            },
            (None, None) => {}
        }
    }
    p.conflicts.extend(second_set);
    remake_bound(&mut p, bound);
    retirements_are_deletes(&mut p);
    // A delete whose parent object is deleted too needs no call of its own.
    let deleted: std::collections::BTreeSet<String> =
        p.steps.iter().filter(|s| s.action == Action::Delete).map(|s| s.id.clone()).collect();
    for s in &mut p.steps {
        if s.action == Action::Delete
            && let Some(parent) = &s.node.contained_in
            && deleted.contains(parent)
        {
            s.removed_with = Some(parent.clone());
        }
    }
    p.steps.sort_by(|a, b| a.id.cmp(&b.id));
    p.conflicts.sort_by(|a, b| a.id.cmp(&b.id));
    p.in_sync.sort();
    p
}

/// `--adopt` never makes a second Karpenter set beside one another tool made for the cluster:
/// when this run creates the controller or node role while it would adopt the association that
/// gives the running controller another role, or a queue that another tool's rules feed, it stops
/// (a conflict) and names `karpctl import`, which writes the plan naming the roles in use.
fn second_set(entries: &[(Node, Option<Observed>)]) -> Vec<Conflict> {
    let created = |id: &str| entries.iter().any(|(n, o)| n.id == id && n.fields.is_some() && o.is_none());
    let new_roles: Vec<&str> = ["controller-role", "node-role"].into_iter().filter(|id| created(id)).collect();
    if new_roles.is_empty() {
        return Vec::new();
    }
    let made = format!(
        "adopting it while this run creates {} would make a second Karpenter setup beside the one in use; run `karpctl import` first: it writes the plan that takes over the roles in use, nothing remade",
        new_roles.join(" and ")
    );
    let theirs = |o: &Observed| matches!(o.owner, Owner::Unowned | Owner::External);
    let mut out = Vec::new();
    for (n, o) in entries {
        let (Some(want), Some(o)) = (&n.fields, o) else { continue };
        if !theirs(o) {
            continue;
        }
        let detail = match n.kind {
            Kind::PodIdentity => {
                let live = o.fields.get("role_arn").and_then(Value::as_str).filter(|r| !r.is_empty());
                let wanted = want.get("role_arn").and_then(Value::as_str);
                match live {
                    Some(live) if Some(live) != wanted => Some(format!("it gives the running controller role {live}; {made}")),
                    _ => None,
                }
            }
            Kind::Queue => {
                let rules = crate::resources::queue_policy::foreign_rules(entries, n.spec.arn());
                (!rules.is_empty()).then(|| {
                    let names: Vec<&str> = rules.iter().map(|(name, _)| name.as_str()).collect();
                    format!("EventBridge rules another tool made send to it ({}); {made}", names.join(", "))
                })
            }
            _ => None,
        };
        if let Some(detail) = detail {
            out.push(Conflict {
                id: n.id.clone(),
                kind: n.kind,
                name: n.name.clone(),
                owner: o.owner.clone(),
                detail: Some(detail),
            });
        }
    }
    out
}

/// A retirement (`retired_policy`) that finds its policy on the role takes it off (a detach, then
/// the delete of a customer managed policy nothing else uses): it is a delete, shown with `-` and
/// counted in "to destroy", whether the role is karpctl's already or adopted in this run. It is
/// ordered after the attachments that replace it by its node's `delete_after`.
fn retirements_are_deletes(p: &mut Plan) {
    for s in &mut p.steps {
        if s.kind == Kind::RetiredPolicy && matches!(s.action, Action::Update | Action::Adopt) {
            s.action = Action::Delete;
        }
    }
}

/// Objects bound to another's identity (`Node::bound_to`) are replaced when the plan makes that
/// one anew: an in-sync or updated one of ours becomes a replace saying why; one that is not
/// ours gets a warning, since karpctl never replaces it.
fn remake_bound(p: &mut Plan, bound: Vec<(Node, Option<Observed>)>) {
    let remade: std::collections::BTreeSet<String> =
        p.steps.iter().filter(|s| matches!(s.action, Action::Create | Action::Replace)).map(|s| s.id.clone()).collect();
    for (node, observed) in bound {
        let Some((parent, why)) = node.bound_to.iter().find(|(id, _)| remade.contains(id)) else { continue };
        let Some(obs) = observed else { continue };
        let change = Change {
            field: format!("{parent} (bound)"),
            before: Value::String(format!("the {parent} that existed before")),
            after: Value::String(format!("the {parent} this plan makes")),
            forces_replacement: true,
        };
        match obs.owner {
            Owner::Ours => {
                let note = format!("replaced because {parent} is made anew: {why}");
                if let Some(s) = p.steps.iter_mut().find(|s| s.id == node.id) {
                    if s.action == Action::Update {
                        s.action = Action::Replace;
                        s.changes.push(change);
                        s.node.notes.push(note);
                    }
                } else if p.in_sync.contains(&node.id) {
                    p.in_sync.retain(|i| i != &node.id);
                    let mut n = node.clone();
                    n.notes.push(note);
                    p.steps.push(Step {
                        id: node.id.clone(),
                        kind: node.kind,
                        name: node.name.clone(),
                        action: Action::Replace,
                        changes: vec![change],
                        deps: node.deps.clone(),
                        node: n,
                        observed: Some(obs),
                        removed_with: None,
                    });
                }
            }
            _ => p.notes.push(Note {
                id: format!("{}-bound", node.id),
                level: Level::Warning,
                message: format!(
                    "{} {} is not karpctl's, and {parent} is made anew: {why}; delete it and run `karpctl up` again, or make it again yourself",
                    node.kind.label(),
                    node.name
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Fields;
    use serde_json::json;

    fn node(id: &str, kind: Kind, fields: Option<Fields>) -> Node {
        let mut n = Node::new(id, format!("name-{id}"), crate::model::NodeSpec::for_tests(kind)).with_fields(fields);
        n.immutable = crate::resources::immutable(kind).iter().map(|f| f.to_string()).collect();
        n
    }
    fn fields(v: Value) -> Fields {
        v.as_object().unwrap().clone().into_iter().collect()
    }
    fn obs(v: Value, owner: Owner) -> Observed {
        Observed { fields: fields(v), owner, ids: Default::default() }
    }

    #[test]
    fn missing_object_is_created_with_every_field() {
        let p = plan(vec![(node("queue", Kind::Queue, Some(fields(json!({"a": "1", "b": "2"})))), None)], PlanOptions::default());
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].action, Action::Create);
        assert_eq!(p.steps[0].changes.len(), 2);
        assert_eq!(p.counts(), (1, 0, 0));
    }

    #[test]
    fn equal_fields_are_in_sync_and_extra_live_tags_are_ignored() {
        let want = fields(json!({"a": "1", "tags": {"k": "v"}}));
        let live = obs(json!({"a": "1", "tags": {"k": "v", "other": "x"}, "unrelated": 5}), Owner::Ours);
        let p = plan(vec![(node("q", Kind::Queue, Some(want)), Some(live))], PlanOptions::default());
        assert!(p.steps.is_empty());
        assert_eq!(p.in_sync, vec!["q".to_string()]);
    }

    #[test]
    fn drift_is_an_update_naming_each_field() {
        let want = fields(json!({"a": "300", "tags": {"k": "v"}}));
        let live = obs(json!({"a": "600", "tags": {}}), Owner::Ours);
        let p = plan(vec![(node("q", Kind::Queue, Some(want)), Some(live))], PlanOptions::default());
        let s = &p.steps[0];
        assert_eq!(s.action, Action::Update);
        let names: Vec<_> = s.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(names, vec!["a", "tags"]);
        assert_eq!(s.changes[0].before, json!("600"));
        assert_eq!(s.changes[0].after, json!("300"));
    }

    #[test]
    fn immutable_field_change_is_a_replace() {
        let want = fields(json!({"type": "EC2_LINUX"}));
        let live = obs(json!({"type": "STANDARD"}), Owner::Ours);
        let p = plan(vec![(node("ae", Kind::AccessEntry, Some(want)), Some(live))], PlanOptions::default());
        assert_eq!(p.steps[0].action, Action::Replace);
        assert_eq!(p.counts(), (1, 0, 1));
    }

    #[test]
    fn someone_elses_access_entry_is_adopted_only_with_the_role_it_depends_on() {
        let want = fields(json!({"type": "EC2_LINUX", "tags": {"karpctl.io/cluster": "c"}}));
        let entry = node("node-access-entry", Kind::AccessEntry, Some(want)).with_deps(["node-role"]).adopt_external();
        let live_entry = Some(obs(json!({"type": "EC2_LINUX", "tags": {}}), Owner::External));
        let role =
            |owner| (node("node-role", Kind::IamRole, Some(fields(json!({"tags": {}})))), Some(obs(json!({"tags": {}}), owner)));
        let adopt = PlanOptions { adopt: true };
        let p = plan(vec![role(Owner::Unowned), (entry.clone(), live_entry.clone())], adopt);
        assert!(p.steps.iter().any(|s| s.id == "node-access-entry" && s.action == Action::Adopt), "{:?}", p.steps);
        // The role is karpctl's already: the entry is someone else's (a node group sharing the role).
        let p = plan(vec![role(Owner::Ours), (entry.clone(), live_entry.clone())], adopt);
        assert!(!p.steps.iter().any(|s| s.id == "node-access-entry"), "{:?}", p.steps);
        let p = plan(vec![role(Owner::Unowned), (entry, live_entry)], PlanOptions::default());
        assert!(!p.steps.iter().any(|s| s.id == "node-access-entry"), "without --adopt: {:?}", p.steps);
    }

    #[test]
    fn the_tag_record_claims_only_what_karpctl_writes() {
        let want = fields(json!({"tags": {"env": "prod", "team": "a", "karpctl.io/tags": "env team"}}));
        // Taken over: `env` was there already with the same value (the tool's default_tags).
        let live = obs(json!({"tags": {"env": "prod"}}), Owner::Unowned);
        let p = plan(vec![(node("r", Kind::IamRole, Some(want.clone())), Some(live))], PlanOptions { adopt: true });
        let after = &p.steps[0].node.fields.as_ref().unwrap()["tags"];
        assert_eq!(after["karpctl.io/tags"], "team", "{after}");
        // Recorded before, still named: kept in the record; converged then.
        let live = obs(json!({"tags": {"env": "prod", "team": "a", "karpctl.io/tags": "env team"}}), Owner::Ours);
        let p = plan(vec![(node("r", Kind::IamRole, Some(want)), Some(live))], PlanOptions::default());
        assert!(p.steps.is_empty(), "{:?}", p.steps);
    }

    #[test]
    fn an_instance_profile_no_longer_needed_is_kept_while_nodes_may_use_it() {
        let live = Some(obs(json!({"path": "/", "Role": "r", "tags": {}}), Owner::Ours));
        let kept = node("node-instance-profile", Kind::InstanceProfile, None).keep_existing();
        let p = plan(vec![(kept, live.clone())], PlanOptions::default());
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        assert!(p.notes.iter().any(|f| f.message.contains("is kept")), "{:?}", p.notes);
        let dropped = node("node-instance-profile", Kind::InstanceProfile, None);
        let p = plan(vec![(dropped, live)], PlanOptions::default());
        assert!(p.steps.iter().any(|s| s.action == Action::Delete), "switched off in the plan, or down: {:?}", p.steps);
    }

    #[test]
    fn an_unlisted_attachment_of_a_role_being_adopted_is_said() {
        let att = node("unlisted-attachment-controller-role-kms", Kind::RolePolicyAttachment, None).unlisted();
        let live = Some(obs(json!({"PolicyArn": "arn:aws:iam::1:policy/kms"}), Owner::Unowned));
        let p = plan(vec![(att.clone(), live.clone())], PlanOptions { adopt: true });
        assert!(p.steps.is_empty());
        assert!(
            p.notes.iter().any(|f| f.level == Level::Warning && f.message.contains("extra_controller_policy_arns")),
            "{:?}",
            p.notes
        );
        assert!(plan(vec![(att, live)], PlanOptions::default()).notes.is_empty());
    }

    #[test]
    fn unowned_or_foreign_objects_are_conflicts_unless_adopted() {
        let want = fields(json!({"a": "1", "tags": {"karpctl.io/cluster": "c"}}));
        let entries = vec![
            (node("x", Kind::Queue, Some(want.clone())), Some(obs(json!({"a": "1", "tags": {}}), Owner::Unowned))),
            (node("y", Kind::Queue, Some(want.clone())), Some(obs(json!({"a": "1"}), Owner::OtherCluster("other".into())))),
        ];
        let p = plan(entries.clone(), PlanOptions::default());
        assert!(p.steps.is_empty());
        assert_eq!(p.conflicts.len(), 2);
        assert!(p.conflicts[1].message().contains("cluster other"));
        let p = plan(entries, PlanOptions { adopt: true });
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].action, Action::Adopt);
        assert_eq!(p.conflicts.len(), 1, "another cluster's object is never adopted");
    }

    #[test]
    fn unwanted_objects_are_deleted_only_when_ours() {
        let entries = vec![
            (node("mine", Kind::Queue, None), Some(obs(json!({"a": "1"}), Owner::Ours))),
            (node("theirs", Kind::Queue, None), Some(obs(json!({"a": "1"}), Owner::Unowned))),
            (node("gone", Kind::Queue, None), None),
        ];
        let p = plan(entries, PlanOptions::default());
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].id, "mine");
        assert_eq!(p.steps[0].action, Action::Delete);
        assert_eq!(p.notes.len(), 1);
    }

    #[test]
    fn child_deleted_with_parent_needs_no_call() {
        let child = node("queue-policy", Kind::QueuePolicy, None).contained_in("queue");
        let entries = vec![
            (node("queue", Kind::Queue, None), Some(obs(json!({}), Owner::Ours))),
            (child, Some(obs(json!({"Policy": {}}), Owner::Ours))),
        ];
        let p = plan(entries, PlanOptions::default());
        let child = p.steps.iter().find(|s| s.id == "queue-policy").unwrap();
        assert_eq!(child.removed_with.as_deref(), Some("queue"));
    }

    #[test]
    fn an_adopted_object_with_nothing_to_change_is_in_sync_not_updated() {
        // A node role's attachment, the role not karpctl's yet: the role's adoption takes it
        // over; the attachment itself has nothing to change.
        let want = fields(json!({"PolicyArn": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"}));
        let live = obs(json!({"PolicyArn": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"}), Owner::Unowned);
        let p = plan(
            vec![(node("node-role-policy-w", Kind::RolePolicyAttachment, Some(want)), Some(live))],
            PlanOptions { adopt: true },
        );
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        assert_eq!(p.in_sync, vec!["node-role-policy-w".to_string()]);
        assert_eq!(p.counts(), (0, 0, 0));
    }

    #[test]
    fn a_retired_policy_still_attached_is_a_delete_counted_as_destroyed() {
        let want = || fields(json!({"attached": false}));
        let retired = |owner| {
            (
                node("retired-policy-Old", Kind::RetiredPolicy, Some(want())).delete_after(["controller-role"]),
                Some(obs(json!({"attached": true}), owner)),
            )
        };
        // Adopted in this run (the role is not karpctl's yet) or karpctl's already: a delete.
        for (owner, adopt) in [(Owner::Unowned, true), (Owner::Ours, false)] {
            let p = plan(vec![retired(owner.clone())], PlanOptions { adopt });
            assert_eq!(p.steps.len(), 1, "{owner:?}");
            let s = &p.steps[0];
            assert_eq!(s.action, Action::Delete, "{owner:?}");
            assert_eq!(s.removed_with, None, "the role stays: the retirement makes its own calls");
            assert_eq!(p.counts(), (0, 0, 1), "{owner:?}");
        }
        // Without --adopt a role that is not karpctl's is a conflict, as before.
        let p = plan(vec![retired(Owner::Unowned)], PlanOptions::default());
        assert!(p.steps.is_empty());
        assert_eq!(p.conflicts.len(), 1);
        // Already off the role: nothing to do, adopted or not.
        let off = (
            node("retired-policy-Old", Kind::RetiredPolicy, Some(want())),
            Some(obs(json!({"attached": false}), Owner::Unowned)),
        );
        let p = plan(vec![off], PlanOptions { adopt: true });
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        assert_eq!(p.counts(), (0, 0, 0));
    }

    #[test]
    fn an_object_bound_to_a_remade_one_is_replaced_saying_why() {
        let entry = |owner| {
            let n = node("ae", Kind::AccessEntry, Some(fields(json!({"type": "EC2_LINUX"}))))
                .bound_to("role", "EKS binds it to the role's id");
            (n.with_deps(["role"]), Some(obs(json!({"type": "EC2_LINUX"}), owner)))
        };
        let role = || node("role", Kind::IamRole, Some(fields(json!({"path": "/"}))));
        // The role exists: nothing to do.
        let p = plan(vec![(role(), Some(obs(json!({"path": "/"}), Owner::Ours))), entry(Owner::Ours)], PlanOptions::default());
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        // The role is made again: its entry too, in the same run, with the reason.
        let p = plan(vec![(role(), None), entry(Owner::Ours)], PlanOptions::default());
        let ae = p.steps.iter().find(|s| s.id == "ae").expect("the entry is replaced");
        assert_eq!(ae.action, Action::Replace);
        assert!(ae.changes.iter().any(|c| c.forces_replacement && c.field.contains("role")));
        assert!(ae.node.notes.iter().any(|n| n.contains("role's id")), "{:?}", ae.node.notes);
        assert!(!p.in_sync.contains(&"ae".to_string()));
        // Not ours: never replaced, but the user is told.
        let p = plan(vec![(role(), None), entry(Owner::External)], PlanOptions::default());
        assert!(p.steps.iter().all(|s| s.id != "ae"));
        assert!(p.notes.iter().any(|f| f.level == Level::Warning && f.message.contains("role's id")));
    }

    #[test]
    fn an_external_object_of_the_wrong_type_is_a_conflict() {
        let want = fields(json!({"type": "EC2_LINUX"}));
        let p = plan(
            vec![(node("ae", Kind::AccessEntry, Some(want)), Some(obs(json!({"type": "STANDARD"}), Owner::External)))],
            PlanOptions::default(),
        );
        assert!(p.steps.is_empty());
        assert_eq!(p.conflicts.len(), 1);
        assert!(p.conflicts[0].message().contains("STANDARD"), "{}", p.conflicts[0].message());
    }

    #[test]
    fn external_objects_satisfy_the_plan() {
        let want = fields(json!({"type": "EC2_LINUX"}));
        let p = plan(
            vec![(
                node("ae", Kind::AccessEntry, Some(want)),
                Some(obs(json!({"type": "EC2_LINUX", "tags": {}}), Owner::External)),
            )],
            PlanOptions::default(),
        );
        assert!(p.steps.is_empty());
        assert_eq!(p.notes.len(), 1);
    }
}
