//! Pure: a change of `identity.mode` in stages. The new path is added beside the old one (both
//! trust statements, the association kept), and the old goes once CloudTrail shows the controller
//! on the new path or `--finish-identity-switch` says so (docs/reference.md, "Identity switches").

use crate::facts::prepared::Facts;
use crate::facts::records::{RawEvent, Trail};
use crate::model::{HelmChange, IdentitySwitch, Kind, Node, Observed, Owner, SwitchStage};
use crate::policy::doc;
use crate::spec::{IdentityMode, Spec};
use serde_json::{Value, json};

/// The node ids the switch is about.
const CONTROLLER_ROLE: &str = "controller-role";
const POD_IDENTITY: &str = "pod-identity";
const TRUST: &str = "AssumeRolePolicyDocument";
/// The Helm values key of the IRSA annotation on Karpenter's service account.
pub const ANNOTATION_KEY: &str = "serviceAccount.annotations.\"eks.amazonaws.com/role-arn\"";
/// EKS Pod Identity names its role sessions `eks-<cluster>-<pod>-<uuid>` (EKS Auth API reference,
/// `AssumeRoleForPodIdentity`, `assumedRoleUser.assumeRoleId`).
const POD_IDENTITY_SESSION_PREFIX: &str = "eks-";

/// What the observed objects say of a switch in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Detected {
    pub from: IdentityMode,
    pub to: IdentityMode,
    /// The live trust statements of the old path, kept as they are while the switch runs.
    pub old_statements: Vec<Value>,
    /// The new path is in place already (made by an earlier `up`): the old one may go.
    pub new_in_place: bool,
}

impl Detected {
    /// Whether the old path may go only on CloudTrail's evidence (read before the plan is made).
    pub fn needs_evidence(&self, finish: bool) -> bool {
        self.new_in_place && !finish
    }
}

pub fn mode_name(m: IdentityMode) -> &'static str {
    match m {
        IdentityMode::PodIdentity => "pod_identity",
        IdentityMode::Irsa => "irsa",
    }
}

fn label(m: IdentityMode) -> &'static str {
    match m {
        IdentityMode::PodIdentity => "Pod Identity",
        IdentityMode::Irsa => "IRSA",
    }
}

fn other(m: IdentityMode) -> IdentityMode {
    match m {
        IdentityMode::PodIdentity => IdentityMode::Irsa,
        IdentityMode::Irsa => IdentityMode::PodIdentity,
    }
}

/// A trust statement of the Pod Identity path: EKS Auth's service principal may assume the role.
fn is_pod_identity_statement(st: &Value) -> bool {
    doc::is_allow(st)
        && doc::strings(&st["Principal"]["Service"]).contains("pods.eks.amazonaws.com")
        && doc::statement_takes(st, "sts:AssumeRole")
}

/// A trust statement of the IRSA path: an OIDC provider's web identities may assume the role.
fn is_web_identity_statement(st: &Value) -> bool {
    doc::is_allow(st)
        && !doc::strings(&st["Principal"]["Federated"]).is_empty()
        && doc::statement_takes(st, "sts:AssumeRoleWithWebIdentity")
}

fn of_path(m: IdentityMode, st: &Value) -> bool {
    match m {
        IdentityMode::PodIdentity => is_pod_identity_statement(st),
        IdentityMode::Irsa => is_web_identity_statement(st),
    }
}

fn entry<'a>(entries: &'a [(Node, Option<Observed>)], id: &str, kind: Kind) -> Option<&'a (Node, Option<Observed>)> {
    entries.iter().find(|(n, _)| n.id == id && n.kind == kind)
}

/// A switch in progress: the controller role trusts the other mode's path (for Pod Identity also
/// an association exists for the service account), which the running controller may use. The
/// role is karpctl's, or unowned (`up --adopt` takes it over in this run; without `--adopt` it is
/// a conflict and nothing is written). None when there is nothing to protect (a new role,
/// another cluster's, no old path).
pub fn detect(spec: &Spec, entries: &[(Node, Option<Observed>)]) -> Option<Detected> {
    let to = spec.identity.mode;
    let from = other(to);
    let (node, live) = entry(entries, CONTROLLER_ROLE, Kind::IamRole)?;
    let live = live.as_ref().filter(|o| matches!(o.owner, Owner::Ours | Owner::Unowned))?;
    let want = node.fields.as_ref()?.get(TRUST)?;
    let have = live.fields.get(TRUST)?;
    let old: Vec<Value> = doc::statements(have).into_iter().filter(|st| of_path(from, st)).cloned().collect();
    let association = entry(entries, POD_IDENTITY, Kind::PodIdentity);
    let live_association = association.and_then(|(_, o)| o.as_ref());
    if old.is_empty() || (from == IdentityMode::PodIdentity && live_association.is_none()) {
        return None;
    }
    let live_statements = doc::statements(have);
    let trusted = doc::statements(want).into_iter().filter(|st| of_path(to, st)).all(|st| live_statements.contains(&st));
    let new_in_place = trusted
        && match to {
            IdentityMode::Irsa => true,
            IdentityMode::PodIdentity => association.is_some_and(|(n, o)| {
                let want_role = n.fields.as_ref().and_then(|f| f.get("role_arn"));
                o.as_ref().is_some_and(|o| want_role.is_some() && o.fields.get("role_arn") == want_role)
            }),
        };
    Some(Detected { from, to, old_statements: old, new_in_place })
}

/// How a call's credentials were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    PodIdentity,
    Irsa,
}

fn path_of_mode(m: IdentityMode) -> Path {
    match m {
        IdentityMode::PodIdentity => Path::PodIdentity,
        IdentityMode::Irsa => Path::Irsa,
    }
}

/// The path of one CloudTrail record made with a session of `role`, and its time: IRSA when the
/// session came from web identity (`userIdentity.sessionContext.webIdFederationData` names the
/// `federatedProvider`; AWS records it empty for other sessions), Pod Identity when it did not
/// and its session name is EKS Pod Identity's (`eks-<cluster>-<pod>-<uuid>`). None for another
/// identity, or a session neither names.
fn path_of(e: &RawEvent, role: &str) -> Option<(Path, i64, String)> {
    let call = crate::running::record::parse_record(&e.cloudtrail_event, &e.resources).ok()?;
    if call.identity_type != "AssumedRole" || !call.issuer_arn.as_deref().is_some_and(|a| crate::running::is_role(a, &[role])) {
        return None;
    }
    let record: Value = serde_json::from_str(&e.cloudtrail_event).ok()?;
    let identity = &record["userIdentity"];
    let federated =
        identity["sessionContext"]["webIdFederationData"]["federatedProvider"].as_str().is_some_and(|p| !p.is_empty());
    let session = identity["arn"].as_str().and_then(|a| a.rsplit('/').next()).unwrap_or_default();
    let path = if federated {
        Path::Irsa
    } else if session.starts_with(POD_IDENTITY_SESSION_PREFIX) {
        Path::PodIdentity
    } else {
        return None;
    };
    Some((path, call.epoch, call.time))
}

/// Whether CloudTrail shows the controller (calls made with a session of `role`) on the path of
/// `to`: Ok with what it shows, when it calls through it and no call came through the old path
/// since the first such call; else Err saying what it shows (nothing, both paths at once, or
/// why the records could not be read).
pub fn seen(trail: Option<&Trail>, role: &str, from: IdentityMode, to: IdentityMode) -> Result<String, String> {
    let Some(trail) = trail else { return Err("CloudTrail was not read".into()) };
    let window = crate::facts::observed::window_text(trail.window);
    let calls: Vec<(Path, i64, String)> = trail.events.iter().filter_map(|e| path_of(e, role)).collect();
    let mut new: Vec<&(Path, i64, String)> = calls.iter().filter(|c| c.0 == path_of_mode(to)).collect();
    new.sort_by_key(|c| c.1);
    let (Some(first), Some(last)) = (new.first(), new.last()) else {
        return Err(match &trail.problem {
            Some(p) => p.warning(),
            None => format!(
                "CloudTrail shows no call of the controller role through {} in the last {window} (the newest records read)",
                label(to)
            ),
        });
    };
    let old_since = calls.iter().filter(|c| c.0 == path_of_mode(from) && c.1 >= first.1).max_by_key(|c| c.1);
    if let Some(old) = old_since {
        return Err(if old.1 > last.1 {
            format!(
                "CloudTrail shows the controller role's newest calls through {} (the last at {}), after calls through {}: it has not been restarted on {} yet",
                label(from),
                old.2,
                label(to),
                label(to)
            )
        } else {
            format!(
                "CloudTrail shows the controller role calling through {} since {}, but also through {} after that (the last at {}): a pod still runs with the old credentials",
                label(to),
                first.2,
                label(from),
                old.2
            )
        });
    }
    Ok(format!(
        "CloudTrail shows the controller role calling through {} ({} call(s), {} to {}) and not through {} since",
        label(to),
        new.len(),
        first.2,
        last.2,
        label(from)
    ))
}

/// The stage a detected switch is at, and why: `finish` is `--finish-identity-switch`, `seen`
/// what CloudTrail shows (only asked when the new path is in place and the flag is not given).
pub fn stage(d: &Detected, finish: bool, seen: impl FnOnce() -> Result<String, String>) -> (SwitchStage, String) {
    let (from, to) = (label(d.from), label(d.to));
    if !d.new_in_place {
        let flag = if finish {
            format!(
                " (--finish-identity-switch takes effect only once {to} is in place and the controller restarted: run it again after the Helm change and the restart)"
            )
        } else {
            String::new()
        };
        return (
            SwitchStage::Start,
            format!(
                "the running controller may still use {from}: this plan adds {to} beside it, and {from} stays until the controller is seen using {to}{flag}"
            ),
        );
    }
    if finish {
        return (SwitchStage::Finish, format!("--finish-identity-switch: you said the controller no longer uses {from}"));
    }
    match seen() {
        Ok(why) => (SwitchStage::Finish, why),
        Err(why) => (SwitchStage::Wait, why),
    }
}

/// Make the plan's nodes follow the stage: while the old path stays, the controller role's
/// desired trust holds the old statements beside the new ones, and in IRSA mode the Pod Identity
/// association keeps its fields (it is not deleted); when it goes, the plan is the mode's own.
/// Returns what the plan shows of the switch.
pub fn apply(
    entries: &mut [(Node, Option<Observed>)],
    spec: &Spec,
    facts: &Facts,
    d: &Detected,
    stage: SwitchStage,
    reason: String,
) -> IdentitySwitch {
    let (from, to) = (label(d.from), label(d.to));
    let id = &spec.identity;
    let association = format!("{POD_IDENTITY} ({}/{})", id.namespace, id.service_account);
    for (node, _) in entries.iter_mut() {
        if node.id == CONTROLLER_ROLE && node.kind == Kind::IamRole {
            let Some(fields) = node.fields.as_mut() else { continue };
            if stage == SwitchStage::Finish {
                node.notes.push(format!("drops the {from} statement: the identity switch to {to} finishes"));
                continue;
            }
            let Some(want) = fields.get(TRUST) else { continue };
            let mut all: Vec<Value> = doc::statements(want).into_iter().cloned().collect();
            all.extend(d.old_statements.iter().cloned());
            let doc = doc::canonical(&json!({"Version": doc::POLICY_VERSION, "Statement": all}));
            fields.insert(TRUST.into(), doc);
            node.notes.push(format!(
                "keeps the {from} statement the running controller may use beside the {to} one until the identity switch finishes"
            ));
        } else if node.id == POD_IDENTITY && node.kind == Kind::PodIdentity && d.to == IdentityMode::Irsa {
            if stage == SwitchStage::Finish {
                node.notes.push(format!("the identity switch to {to} finishes: the association goes"));
                continue;
            }
            // The association as Pod Identity mode wants it: kept, and repaired if it drifted.
            let mut pod_identity = spec.clone();
            pod_identity.identity.mode = IdentityMode::PodIdentity;
            node.fields = crate::resources::pod_identity::nodes(&pod_identity, facts).into_iter().find_map(|n| n.fields);
            node.notes.push(format!("kept while the running controller may still use {from}"));
        }
    }
    let role_arn = crate::arns::controller_role_arn(spec, facts);
    let remaining = (stage != SwitchStage::Finish).then(|| {
        let goes = match d.to {
            IdentityMode::PodIdentity => format!("the {from} statement leaves {CONTROLLER_ROLE}'s trust policy"),
            IdentityMode::Irsa => {
                format!("the {from} statement leaves {CONTROLLER_ROLE}'s trust policy and {association} is deleted")
            }
        };
        format!(
            "{goes} once CloudTrail shows the controller calling through {to} (after the Helm change and the restart): `karpctl up` then does it; or `karpctl up --finish-identity-switch` once you have checked"
        )
    });
    IdentitySwitch {
        from: mode_name(d.from).into(),
        to: mode_name(d.to).into(),
        stage,
        reason,
        helm: HelmChange { key: ANNOTATION_KEY.into(), value: (d.to == IdentityMode::Irsa).then_some(role_arn) },
        restart: restart_command(&id.namespace, &id.service_account),
        remaining,
    }
}

/// The command that restarts Karpenter's controller (the chart names the deployment like the
/// service account).
pub fn restart_command(namespace: &str, service_account: &str) -> String {
    format!("kubectl -n {namespace} rollout restart deployment/{service_account}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::facts::records::LookupProblem;
    use crate::model::fields_of;
    use std::time::Duration;

    const ROLE: &str = "arn:aws:iam::123456789012:role/karpctl/c/KarpenterController-c";
    const PROVIDER: &str = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC";

    fn facts() -> Facts {
        let mut f = Facts::example();
        f.cluster.oidc_issuer = "https://oidc.eks.us-east-1.amazonaws.com/id/ABC".into();
        f
    }

    fn spec(mode: IdentityMode) -> Spec {
        let mut s = crate::plan_file::defaults("c").unwrap();
        s.identity.mode = mode;
        s
    }

    /// The plan's nodes for `mode`, with the controller role's live trust made of `live` (the
    /// trust of these modes) and the association live or not.
    fn entries(mode: IdentityMode, live: &[IdentityMode], association: bool) -> Vec<(Node, Option<Observed>)> {
        let f = facts();
        let trust_of = |m: IdentityMode| -> Vec<Value> {
            let n = crate::resources::iam_role::nodes(&spec(m), &f).into_iter().find(|n| n.id == CONTROLLER_ROLE).unwrap();
            doc::statements(&n.fields.unwrap()[TRUST]).into_iter().cloned().collect()
        };
        let live_doc = doc::canonical(
            &json!({"Version": "2012-10-17", "Statement": live.iter().flat_map(|m| trust_of(*m)).collect::<Vec<_>>()}),
        );
        let mut out = Vec::new();
        for n in crate::resources::iam_role::nodes(&spec(mode), &f) {
            let o = (n.id == CONTROLLER_ROLE).then(|| Observed {
                fields: fields_of(vec![(TRUST, live_doc.clone())]),
                owner: Owner::Ours,
                ids: Default::default(),
            });
            out.push((n, o));
        }
        for n in crate::resources::pod_identity::nodes(&spec(mode), &f) {
            let o = association.then(|| Observed {
                fields: fields_of(vec![("role_arn", json!(ROLE))]),
                owner: Owner::Ours,
                ids: Default::default(),
            });
            out.push((n, o));
        }
        out
    }

    fn record(session: &str, provider: Option<&str>, minutes_ago: i64) -> RawEvent {
        let base = 1_785_578_400 - minutes_ago * 60;
        let t = chrono_like(base);
        let mut ctx = json!({"sessionIssuer": {"type": "Role", "arn": ROLE}, "webIdFederationData": {}});
        if let Some(p) = provider {
            ctx["webIdFederationData"] = json!({"federatedProvider": p, "attributes": {}});
        }
        let r = json!({
            "userIdentity": {"type": "AssumedRole", "arn": format!("arn:aws:sts::123456789012:assumed-role/KarpenterController-c/{session}"), "sessionContext": ctx},
            "eventTime": t, "eventSource": "ec2.amazonaws.com", "eventName": "DescribeInstances",
        });
        RawEvent { cloudtrail_event: r.to_string(), resources: vec![] }
    }

    /// `2026-08-01T10:00:00Z` minus whole minutes (the tests stay within one day).
    fn chrono_like(epoch: i64) -> String {
        let day = 1_785_542_400; // 2026-08-01T00:00:00Z
        let s = epoch - day;
        format!("2026-08-01T{:02}:{:02}:{:02}Z", s / 3600, (s % 3600) / 60, s % 60)
    }

    fn trail(events: Vec<RawEvent>) -> Trail {
        Trail { events, window: Duration::from_secs(3600), ..Default::default() }
    }

    /// IRSA -> Pod Identity waiting for evidence, as the plan of cluster `c` shows it (the
    /// example in docs/reference.md).
    pub(crate) fn waiting_example() -> IdentitySwitch {
        let s = spec(IdentityMode::PodIdentity);
        let mut e = entries(IdentityMode::PodIdentity, &[IdentityMode::Irsa, IdentityMode::PodIdentity], true);
        let d = detect(&s, &e).unwrap();
        let (st, why) = stage(&d, false, || seen(Some(&trail(vec![])), ROLE, d.from, d.to));
        apply(&mut e, &s, &facts(), &d, st, why)
    }

    #[test]
    fn no_switch_without_an_old_path_or_for_another_clusters_role() {
        use IdentityMode::*;
        assert_eq!(detect(&spec(PodIdentity), &entries(PodIdentity, &[PodIdentity], true)), None);
        assert_eq!(detect(&spec(Irsa), &entries(Irsa, &[Irsa], false)), None);
        // Pod Identity trusted but no association: nothing runs through it.
        assert_eq!(detect(&spec(Irsa), &entries(Irsa, &[PodIdentity], false)), None);
        let mut e = entries(PodIdentity, &[Irsa], false);
        e[1].1.as_mut().unwrap().owner = Owner::OtherCluster("d".into());
        assert_eq!(detect(&spec(PodIdentity), &e), None);
        // An unowned role (a takeover, `up --adopt`) is protected as karpctl's own.
        e[1].1.as_mut().unwrap().owner = Owner::Unowned;
        assert!(detect(&spec(PodIdentity), &e).is_some());
    }

    #[test]
    fn irsa_to_pod_identity_keeps_both_statements_until_finished() {
        use IdentityMode::*;
        let s = spec(PodIdentity);
        let mut e = entries(PodIdentity, &[Irsa], false);
        let d = detect(&s, &e).expect("a switch");
        assert_eq!((d.from, d.to, d.new_in_place, d.old_statements.len()), (Irsa, PodIdentity, false, 1));
        let (st, why) = stage(&d, false, || unreachable!("no evidence asked before the new path exists"));
        assert_eq!(st, SwitchStage::Start);
        assert!(why.contains("IRSA stays"), "{why}");
        let sw = apply(&mut e, &s, &facts(), &d, st, why);
        let trust = &e[1].0.fields.as_ref().unwrap()[TRUST];
        let sts = doc::statements(trust);
        assert_eq!(sts.len(), 2, "{trust}");
        assert!(sts.iter().any(|s| is_pod_identity_statement(s)) && sts.iter().any(|s| is_web_identity_statement(s)));
        assert_eq!(sw.helm, HelmChange { key: ANNOTATION_KEY.into(), value: None });
        assert_eq!(sw.restart, "kubectl -n kube-system rollout restart deployment/karpenter");
        assert!(sw.remaining.as_deref().unwrap().contains("--finish-identity-switch"));

        // Both in place: the IRSA statement goes on evidence or the flag only.
        let e = entries(PodIdentity, &[Irsa, PodIdentity], true);
        let d = detect(&s, &e).unwrap();
        assert!(d.new_in_place);
        assert_eq!(stage(&d, false, || Err("nothing".into())).0, SwitchStage::Wait);
        assert_eq!(stage(&d, false, || Ok("seen".into())).0, SwitchStage::Finish);
        assert_eq!(stage(&d, true, || unreachable!("the flag needs no evidence")).0, SwitchStage::Finish);
        let mut e2 = e.clone();
        let sw = apply(&mut e2, &s, &facts(), &d, SwitchStage::Finish, "seen".into());
        assert_eq!(e2[1].0.fields, e[1].0.fields, "finishing: the mode's own trust");
        assert_eq!(sw.remaining, None);
    }

    #[test]
    fn pod_identity_to_irsa_keeps_the_association_until_finished() {
        use IdentityMode::*;
        let s = spec(Irsa);
        let mut e = entries(Irsa, &[PodIdentity], true);
        let d = detect(&s, &e).expect("a switch");
        assert!(!d.new_in_place);
        let (st, why) = stage(&d, true, || unreachable!());
        assert_eq!(st, SwitchStage::Start);
        assert!(why.contains("--finish-identity-switch takes effect only once"), "{why}");
        let sw = apply(&mut e, &s, &facts(), &d, st, why);
        let assoc = e.iter().find(|(n, _)| n.id == POD_IDENTITY).unwrap();
        assert_eq!(assoc.0.fields.as_ref().unwrap()["role_arn"], json!(ROLE), "kept as Pod Identity mode wants it");
        assert_eq!(sw.helm.value.as_deref(), Some(ROLE));
        assert!(sw.remaining.unwrap().contains("pod-identity (kube-system/karpenter) is deleted"));
        // Finishing: the association has no desired fields (deleted).
        let mut e = entries(Irsa, &[PodIdentity, Irsa], true);
        let d = detect(&s, &e).unwrap();
        assert!(d.new_in_place);
        apply(&mut e, &s, &facts(), &d, SwitchStage::Finish, "flag".into());
        assert!(e.iter().find(|(n, _)| n.id == POD_IDENTITY).unwrap().0.fields.is_none());
    }

    #[test]
    fn cloudtrail_evidence_needs_calls_through_the_new_path_and_none_through_the_old_since() {
        use IdentityMode::*;
        let pod = |m| record("eks-c-karpenter-6d4-1b2c", None, m);
        let irsa = |m| record("aws-go-sdk-1785578400", Some(PROVIDER), m);
        // Nothing recorded, or only the old path: no evidence.
        let none = seen(Some(&trail(vec![])), ROLE, Irsa, PodIdentity).unwrap_err();
        assert!(none.contains("no call of the controller role through Pod Identity in the last 1h"), "{none}");
        assert!(seen(Some(&trail(vec![irsa(1), irsa(2)])), ROLE, Irsa, PodIdentity).is_err());
        // The restart: IRSA before, Pod Identity after.
        let ok = seen(Some(&trail(vec![pod(1), pod(2), irsa(5)])), ROLE, Irsa, PodIdentity).unwrap();
        assert!(ok.contains("through Pod Identity (2 call(s)") && ok.contains("not through IRSA since"), "{ok}");
        // Still both: an old pod calls after the first new call.
        let both = seen(Some(&trail(vec![pod(3), irsa(2), pod(1)])), ROLE, Irsa, PodIdentity).unwrap_err();
        assert!(both.contains("but also through IRSA after that"), "{both}");
        // Pod Identity calls before IRSA ones (an earlier switch): not restarted yet.
        let earlier = seen(Some(&trail(vec![pod(3), irsa(1)])), ROLE, Irsa, PodIdentity).unwrap_err();
        assert!(
            earlier.contains("newest calls through IRSA") && earlier.contains("not been restarted on Pod Identity"),
            "{earlier}"
        );
        // The other way round.
        assert!(seen(Some(&trail(vec![irsa(1), pod(4)])), ROLE, PodIdentity, Irsa).is_ok());
        // Another role's calls, and sessions neither path names, do not count.
        let mut other = pod(1);
        other.cloudtrail_event = other.cloudtrail_event.replace("KarpenterController-c\"", "Someone\"");
        let odd = record("my-session", None, 1);
        assert!(seen(Some(&trail(vec![other, odd])), ROLE, Irsa, PodIdentity).is_err());
        // Records that could not be read say why.
        let mut t = trail(vec![]);
        t.problem = Some(LookupProblem::Throttled);
        assert!(seen(Some(&t), ROLE, Irsa, PodIdentity).unwrap_err().contains("throttled"));
        assert_eq!(seen(None, ROLE, Irsa, PodIdentity).unwrap_err(), "CloudTrail was not read");
    }

    #[test]
    fn a_record_names_its_path_by_web_identity_then_session_name() {
        let (p, _, t) = path_of(&record("aws-go-sdk-1", Some(PROVIDER), 0), ROLE).unwrap();
        assert_eq!((p, t.as_str()), (Path::Irsa, "2026-08-01T10:00:00Z"));
        assert_eq!(path_of(&record("eks-c-karpenter-x", None, 0), ROLE).unwrap().0, Path::PodIdentity);
        // The role matches by name whatever its path (CloudTrail keeps the path).
        assert!(path_of(&record("eks-c-karpenter-x", None, 0), "arn:aws:iam::123456789012:role/KarpenterController-c").is_some());
    }
}
