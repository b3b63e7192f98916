//! Pure: a Karpenter upgrade in flight. While CloudTrail shows an older Karpenter than the pin, the
//! controller policies keep what it needs beside the pin's; once only the pin's version is seen,
//! the next plan drops it (docs/reference.md, "Upgrading Karpenter").

use crate::facts::observed::Running;
use crate::facts::prepared::Facts;
use crate::facts::records::Trail;
use crate::karpenter_iam::KarpenterVersion;
use crate::model::{Kind, Level, Node, Note, Observed, Owner, Plan};
use crate::policy::doc;
use crate::running::{self, Grant};
use crate::spec::Spec;
use serde_json::{Value, json};

const DOC: &str = "PolicyDocument";
const PREFIX: &str = "controller-policy-";
/// The end of a kept statement's `Sid`: `<upstream Sid>ForKarpenter1dot<minor>` (a `Sid` is
/// letters and digits only, and unique within its policy).
const SID_MARK: &str = "ForKarpenter1dot";
/// The id of the plan's note.
pub const NOTE_ID: &str = "karpenter-upgrade";

/// Where an upgrade in flight stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// An older version runs and the pin lacks some of its grants: they are kept beside the pin's.
    Keep,
    /// An older version runs and the pin grants all it needs: only the order is said.
    Order,
    /// Grants were kept for an older version, and CloudTrail shows no version (or could not be
    /// read): they stay.
    Wait,
    /// Grants were kept for an older version, and CloudTrail shows only the pin's (or newer): they go.
    Finish,
}

/// What the plan says of an upgrade in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Upgrade {
    pub stage: Stage,
    pub pinned: KarpenterVersion,
    /// The older versions whose grants the plan keeps, or, at `Finish`, those whose kept grants go.
    pub kept: Vec<KarpenterVersion>,
    /// What is kept (or dropped): "ec2:CreateTags on capacity-reservation/*".
    pub grants: Vec<String>,
    /// What CloudTrail shows, in words.
    pub seen: String,
}

fn is_controller_policy(n: &Node) -> bool {
    n.kind == Kind::IamPolicy && n.id.starts_with(PREFIX)
}

/// The live document of a controller policy karpctl manages (its own, or one `--adopt` takes).
fn live_doc(o: &Option<Observed>) -> Option<&Value> {
    o.as_ref().filter(|o| matches!(o.owner, Owner::Ours | Owner::Unowned)).and_then(|o| o.fields.get(DOC))
}

fn wanted_doc(n: &Node) -> Option<&Value> {
    n.fields.as_ref().and_then(|f| f.get(DOC)).filter(|d| !d.is_null())
}

/// Whether the plan changes a live controller policy's document: only then can what runs change
/// the plan, so only then is CloudTrail's read waited for before the plan (a converged plan never).
pub fn needs_evidence(entries: &[(Node, Option<Observed>)]) -> bool {
    entries
        .iter()
        .any(|(n, o)| is_controller_policy(n) && matches!((wanted_doc(n), live_doc(o)), (Some(want), Some(have)) if want != have))
}

/// The version whose grants a kept statement holds (from its `Sid`).
fn kept_minor(st: &Value) -> Option<KarpenterVersion> {
    let (_, minor) = st["Sid"].as_str()?.rsplit_once(SID_MARK)?;
    Some(KarpenterVersion { minor: minor.parse().ok()? })
}

/// The versions whose grants these documents keep (statements a plan kept, by their `Sid`).
pub fn kept_in<'a>(docs: impl IntoIterator<Item = &'a Value>) -> Vec<KarpenterVersion> {
    let mut out: Vec<KarpenterVersion> = docs.into_iter().flat_map(doc::statements).filter_map(kept_minor).collect();
    out.sort();
    out.dedup();
    out
}

/// The versions whose grants the plan's controller policies keep (its desired documents).
pub fn kept_by(entries: &[(Node, Option<Observed>)]) -> Vec<KarpenterVersion> {
    kept_in(entries.iter().filter(|(n, _)| is_controller_policy(n)).filter_map(|(n, _)| wanted_doc(n)))
}

/// The statements of `old` (documents by node id) granting what `have` lacks: each with only the
/// resources one of its actions is not allowed on, its `Sid` marked with `v`. By node id.
fn statements_to_keep(old: &[(String, Value)], have: &[Grant], v: KarpenterVersion) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (id, doc) in old {
        for (i, st) in doc::statements(doc).into_iter().enumerate() {
            if !doc::is_allow(st) {
                continue;
            }
            let condition = st.get("Condition").filter(|c| !c.is_null()).map(|c| c.to_string());
            let actions = doc::strings(&st["Action"]);
            let lacking: Vec<String> = doc::strings(&st["Resource"])
                .into_iter()
                .filter(|r| actions.iter().any(|a| !have.iter().any(|g| g.allows(a, r, &condition))))
                .collect();
            if lacking.is_empty() {
                continue;
            }
            let mut kept = st.clone();
            kept["Resource"] = json!(lacking);
            let sid = st["Sid"].as_str().map(str::to_string).unwrap_or_else(|| format!("Statement{i}"));
            kept["Sid"] = json!(format!("{sid}{SID_MARK}{}", v.minor));
            out.push((id.clone(), kept));
        }
    }
    out
}

/// The controller policies' documents for `version`, by node id (this plan's names and ARNs).
fn documents_of(spec: &Spec, facts: &Facts, version: KarpenterVersion) -> Vec<(String, Value)> {
    let mut other = spec.clone();
    other.identity.karpenter_version = version;
    crate::resources::iam_policy::controller_policies(&other, facts).into_iter().filter_map(|p| Some((p.id, p.doc?))).collect()
}

/// Add `statements` (by node id) to the desired documents, with a note on each node changed.
fn add(entries: &mut [(Node, Option<Observed>)], statements: &[(String, Value)], note: &str) {
    for (node, _) in entries.iter_mut().filter(|(n, _)| is_controller_policy(n)) {
        let extra: Vec<Value> = statements.iter().filter(|(id, _)| *id == node.id).map(|(_, st)| st.clone()).collect();
        let Some(fields) = node.fields.as_mut() else { continue };
        let Some(want) = fields.get(DOC).filter(|_| !extra.is_empty()) else { continue };
        let mut all: Vec<Value> = doc::statements(want).into_iter().cloned().collect();
        all.extend(extra);
        let doc = doc::canonical(&json!({"Version": doc::POLICY_VERSION, "Statement": all}));
        fields.insert(DOC.into(), doc);
        node.notes.push(note.to_string());
    }
}

fn versions_text(vs: &[KarpenterVersion]) -> String {
    vs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(" and ")
}

/// Judge an upgrade in flight from `trail` and make the desired controller policies follow it
/// (see `Stage`). None when there is none: no older version runs and nothing was kept.
pub fn apply(entries: &mut [(Node, Option<Observed>)], spec: &Spec, facts: &Facts, trail: Option<&Trail>) -> Option<Upgrade> {
    let pinned = spec.identity.karpenter_version;
    let role = crate::arns::controller_role_arn(spec, facts);
    let running = trail.map(|t| Running::of(t, &[role], &[]));
    let live: Vec<(String, Value)> = entries
        .iter()
        .filter(|(n, _)| is_controller_policy(n))
        .filter_map(|(n, o)| Some((n.id.clone(), live_doc(o)?.clone())))
        .collect();
    let live_kept = kept_in(live.iter().map(|(_, d)| d));
    let window = running.as_ref().map(|r| r.window_text()).unwrap_or_default();
    let seen = running.as_ref().map(|r| r.seen_text()).unwrap_or_default();
    let mut older: Vec<KarpenterVersion> =
        running.iter().flat_map(|r| &r.versions).filter_map(|s| s.version.known()).filter(|v| *v < pinned).collect();
    older.sort();
    older.dedup();
    let pin_docs: Vec<Value> =
        entries.iter().filter(|(n, _)| is_controller_policy(n)).filter_map(|(n, _)| wanted_doc(n).cloned()).collect();
    let have = running::grants_of(&pin_docs);

    if !older.is_empty() {
        let mut keep = Vec::new();
        let mut grants = Vec::new();
        for v in &older {
            let old = documents_of(spec, facts, *v);
            keep.extend(statements_to_keep(&old, &have, *v));
            grants.extend(running::grants_lacking(&running::grants_of(old.iter().map(|(_, d)| d)), &have));
        }
        grants.sort();
        grants.dedup();
        let names = versions_text(&older);
        let seen = format!("CloudTrail shows Karpenter {seen} in {window}");
        if keep.is_empty() {
            return Some(Upgrade { stage: Stage::Order, pinned, kept: vec![], grants, seen });
        }
        add(
            entries,
            &keep,
            &format!(
                "keeps what Karpenter {names} needs beside {pinned}'s until CloudTrail shows only {pinned} (an upgrade in flight)"
            ),
        );
        return Some(Upgrade { stage: Stage::Keep, pinned, kept: older, grants, seen });
    }
    if live_kept.is_empty() {
        return None;
    }
    let names = versions_text(&live_kept);
    let kept_statements: Vec<(String, Value)> = live
        .iter()
        .flat_map(|(id, d)| {
            doc::statements(d).into_iter().filter(|st| kept_minor(st).is_some()).map(|st| (id.clone(), st.clone()))
        })
        .collect();
    let kept_grants: Vec<Value> = kept_statements.iter().map(|(_, st)| json!({"Statement": [st]})).collect();
    let grants = running::grants_lacking(&running::grants_of(&kept_grants), &have);
    let newest = running.as_ref().and_then(|r| r.newest());
    if newest.is_some_and(|v| (v.major, v.minor) >= (1, pinned.minor)) {
        // Only the pin's version (or newer) over the window: what was kept goes.
        for (node, o) in entries.iter_mut().filter(|(n, _)| is_controller_policy(n)) {
            if live_doc(o).is_some_and(|d| doc::statements(d).into_iter().any(|st| kept_minor(st).is_some())) {
                node.notes.push(format!("drops what it kept for Karpenter {names}: the upgrade to {pinned} is done"));
            }
        }
        let seen = format!("CloudTrail shows only Karpenter {seen} in {window}");
        return Some(Upgrade { stage: Stage::Finish, pinned, kept: live_kept, grants, seen });
    }
    // Nothing recorded, or the records could not be read: what was kept stays.
    let why = match running.as_ref() {
        None => "CloudTrail was not read".to_string(),
        Some(r) => match &r.problem {
            Some(p) => p.warning(),
            None => format!("CloudTrail shows no call of Karpenter's controller in {window}"),
        },
    };
    add(entries, &kept_statements, &format!("keeps what it kept for Karpenter {names} until CloudTrail shows only {pinned}"));
    Some(Upgrade { stage: Stage::Wait, pinned, kept: live_kept, grants, seen: why })
}

impl Upgrade {
    /// The plan's note: what CloudTrail shows, what the controller policies keep or drop, and
    /// the order: the permissions first, then `helm upgrade` with the values `karpctl output`
    /// gives, then the `up` that drops what the old version needed.
    pub fn note(&self, plan: &Plan, helm: &[String]) -> Note {
        let pinned = self.pinned;
        let writes = plan.steps.iter().any(|s| s.kind == Kind::IamPolicy && s.id.starts_with(PREFIX));
        let names = versions_text(&self.kept);
        let what = if self.grants.is_empty() { String::new() } else { format!(" ({})", self.grants.join(", ")) };
        let helm = helm.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(" then ");
        let first = if writes {
            format!("1. the permissions first: `karpctl up` applies this plan; 2. then upgrade Karpenter to {pinned}: {helm}")
        } else {
            format!("1. the permissions are in place; 2. upgrade Karpenter to {pinned}: {helm}")
        };
        let message = match self.stage {
            Stage::Keep => format!(
                "Karpenter upgrade in flight: {}, and the plan pins {pinned}. The controller policies keep what Karpenter {names} needs that {pinned} does not grant{what} beside {pinned}'s, until CloudTrail shows only {pinned} over the window. Order: {first}; 3. once CloudTrail shows only {pinned}, `karpctl up` drops what {names} needed.",
                self.seen
            ),
            Stage::Order => format!(
                "Karpenter upgrade: {}, and the plan pins {pinned}, which grants all the running version needs. Order: {first}.",
                self.seen
            ),
            Stage::Wait => format!(
                "Karpenter upgrade in flight: the controller policies keep what they kept for Karpenter {names}{what}, because {}; they go once CloudTrail shows only {pinned} over the window (then run `karpctl up`). If Karpenter is upgraded to {pinned} already: {helm}.",
                self.seen
            ),
            Stage::Finish => format!(
                "Karpenter upgrade to {pinned} done: {}; the controller policies drop what they kept for Karpenter {names}{what}.",
                self.seen
            ),
        };
        Note { id: NOTE_ID.into(), level: Level::Info, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::records::RawEvent;
    use std::time::Duration;

    fn facts() -> Facts {
        Facts::example()
    }

    fn spec(cluster: &str, minor: u32) -> Spec {
        let mut s = crate::plan_file::defaults(cluster).unwrap();
        s.identity.karpenter_version = KarpenterVersion { minor };
        s
    }

    /// The plan's controller policy nodes for `pinned`, each live as `live` (a version's
    /// documents, or those of an earlier plan's `entries`).
    fn entries(s: &Spec, live: &[(String, Value)]) -> Vec<(Node, Option<Observed>)> {
        crate::resources::iam_policy::nodes(s, &facts())
            .into_iter()
            .map(|n| {
                // The path and tags as the plan wants them; the document as given.
                let o = live.iter().find(|(id, _)| *id == n.id).map(|(_, d)| {
                    let mut fields = n.fields.clone().unwrap_or_default();
                    fields.insert(DOC.into(), d.clone());
                    Observed { fields, owner: Owner::Ours, ids: Default::default() }
                });
                (n, o)
            })
            .collect()
    }

    fn desired(e: &[(Node, Option<Observed>)]) -> Vec<(String, Value)> {
        e.iter().filter_map(|(n, _)| Some((n.id.clone(), wanted_doc(n)?.clone()))).collect()
    }

    fn trail(s: &Spec, versions: &[&str]) -> Trail {
        let role = crate::arns::controller_role_arn(s, &facts());
        let events = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let time = format!("2026-08-01T10:0{i}:00Z");
                let r = crate::running::record::fixtures::record(
                    &role,
                    "ec2.amazonaws.com",
                    "DescribeInstances",
                    &format!("karpenter.sh-{v}"),
                    &time,
                );
                RawEvent { cloudtrail_event: r, resources: vec![] }
            })
            .collect();
        Trail { events, window: Duration::from_secs(3600), ..Default::default() }
    }

    fn plan_of(e: &[(Node, Option<Observed>)]) -> Plan {
        crate::planner::plan(e.to_vec(), Default::default())
    }

    #[test]
    fn a_converged_plan_waits_for_nothing() {
        let s = spec("c", 9);
        let same = entries(&s, &documents_of(&s, &facts(), s.identity.karpenter_version));
        assert!(!needs_evidence(&same));
        let older = entries(&s, &documents_of(&s, &facts(), KarpenterVersion { minor: 8 }));
        assert!(needs_evidence(&older), "a pin change rewrites a live document");
        // Nothing live (a first `up`): nothing the pin drops.
        assert!(!needs_evidence(&entries(&s, &[])));
    }

    #[test]
    fn an_upgrade_keeps_the_running_versions_grants_then_drops_them() {
        let s = spec("c", 9);
        let v8 = documents_of(&s, &facts(), KarpenterVersion { minor: 8 });
        let mut e = entries(&s, &v8);
        let u = apply(&mut e, &s, &facts(), Some(&trail(&s, &["1.8.2"]))).expect("an upgrade in flight");
        assert_eq!((u.stage, u.kept.clone()), (Stage::Keep, vec![KarpenterVersion { minor: 8 }]));
        assert!(u.grants.iter().any(|g| g.contains("capacity-reservation/*")), "{:?}", u.grants);
        // 1.8 lacks nothing under what the plan grants; 1.9's are all there.
        let planned = desired(&e);
        let granted = running::grants_of(planned.iter().map(|(_, d)| d));
        let need8 = running::grants_of(v8.iter().map(|(_, d)| d));
        assert!(running::grants_lacking(&need8, &granted).is_empty());
        let v9 = documents_of(&s, &facts(), s.identity.karpenter_version);
        assert!(running::grants_lacking(&running::grants_of(v9.iter().map(|(_, d)| d)), &granted).is_empty());
        let note =
            u.note(&plan_of(&e), &["karpctl output --cluster c --format helm > values.yaml".into(), "helm upgrade x".into()]);
        assert!(
            note.message.contains("1. the permissions first") && note.message.contains("`helm upgrade x`"),
            "{}",
            note.message
        );

        // Applied (the live documents are the plan's): still 1.8 and 1.9 (a rollout): the same
        // documents, no change.
        let mut again = entries(&s, &planned);
        assert!(needs_evidence(&again), "the kept grants differ from the pin's");
        let u = apply(&mut again, &s, &facts(), Some(&trail(&s, &["1.8.2", "1.9.0"]))).unwrap();
        assert_eq!(u.stage, Stage::Keep);
        assert_eq!(desired(&again), planned);
        let plan = plan_of(&again);
        assert!(plan.steps.is_empty(), "{:?}", plan.steps);
        assert!(u.note(&plan, &[]).message.contains("the permissions are in place"));

        // No record, or unreadable: the kept grants stay.
        let mut wait = entries(&s, &planned);
        let u = apply(&mut wait, &s, &facts(), Some(&trail(&s, &[]))).unwrap();
        assert_eq!((u.stage, desired(&wait)), (Stage::Wait, planned.clone()));
        let mut unread = entries(&s, &planned);
        assert_eq!(apply(&mut unread, &s, &facts(), None).unwrap().stage, Stage::Wait);

        // Only 1.9: the plan is the pin's own.
        let mut done = entries(&s, &planned);
        let u = apply(&mut done, &s, &facts(), Some(&trail(&s, &["1.9.0"]))).unwrap();
        assert_eq!(u.stage, Stage::Finish);
        assert_eq!(desired(&done), v9);
        assert!(u.note(&plan_of(&done), &[]).message.contains("drop what they kept for Karpenter 1.8"));
        // And after that, nothing.
        let mut after = entries(&s, &v9);
        assert_eq!(apply(&mut after, &s, &facts(), Some(&trail(&s, &["1.9.0"]))), None);
    }

    #[test]
    fn a_pin_that_grants_all_the_old_version_needs_only_says_the_order() {
        let s = spec("c", 12);
        let mut e = entries(&s, &documents_of(&s, &facts(), KarpenterVersion { minor: 10 }));
        let u = apply(&mut e, &s, &facts(), Some(&trail(&s, &["1.10.1"]))).unwrap();
        assert_eq!(u.stage, Stage::Order);
        assert_eq!(desired(&e), documents_of(&s, &facts(), s.identity.karpenter_version), "nothing added");
        assert!(u.note(&plan_of(&e), &[]).message.contains("Order: 1. the permissions first"));
        // A newer Karpenter than the pin is not an upgrade (the version check says it lacks).
        let mut e = entries(&s, &documents_of(&s, &facts(), KarpenterVersion { minor: 10 }));
        assert_eq!(apply(&mut e, &s, &facts(), Some(&trail(&s, &["1.13.0"]))), None);
    }

    #[test]
    fn kept_grants_cover_every_older_minor_and_fit_iams_size_limit() {
        let long = "c".repeat(100);
        for cluster in ["c", long.as_str()] {
            for pin in 1..=KarpenterVersion::LATEST.minor {
                for old in 0..pin {
                    let mut s = spec(cluster, pin);
                    s.interruption.enabled = true;
                    let old_docs = documents_of(&s, &facts(), KarpenterVersion { minor: old });
                    let mut e = entries(&s, &old_docs);
                    let version = format!("1.{old}.0");
                    apply(&mut e, &s, &facts(), Some(&trail(&s, &[version.as_str()])));
                    let planned = desired(&e);
                    let granted = running::grants_of(planned.iter().map(|(_, d)| d));
                    let lacking = running::grants_lacking(&running::grants_of(old_docs.iter().map(|(_, d)| d)), &granted);
                    assert!(lacking.is_empty(), "1.{old} under 1.{pin}: {lacking:?}");
                    for (id, d) in &planned {
                        let size = doc::size_without_whitespace(d);
                        assert!(size <= 6144, "1.{old} under 1.{pin}, {cluster}: {id} is {size}");
                        let sids: Vec<&str> = doc::statements(d).iter().filter_map(|s| s["Sid"].as_str()).collect();
                        let unique: std::collections::BTreeSet<&&str> = sids.iter().collect();
                        assert_eq!(unique.len(), sids.len(), "{id}: {sids:?}");
                    }
                }
            }
        }
    }
}
