//! Issue 45: `karpctl output --format caller-policy --for <command>` grants every call the command
//! makes (read off karpctl's own call counts, `--stats`), `diff`'s and `doctor`'s hold no write,
//! and one cluster's writes never name another's objects.
//!
//! Neither emulator evaluates IAM policies: these tests check the printed policy against the
//! calls made, by action; the resource scoping is checked by the unit tests of src/caller_policy.rs.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;

/// The IAM action of each operation karpctl counted (`IAM:GetRole` -> `iam:GetRole`).
fn actions_called(doc: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Object(ops)) = m.get("operations") {
                    for k in ops.keys() {
                        let (svc, op) = k.split_once(':').expect("Service:Operation");
                        let prefix = match svc {
                            "EventBridge" => "events".to_string(),
                            s => s.to_lowercase(),
                        };
                        out.insert(format!("{prefix}:{op}"));
                    }
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(doc, &mut out);
    // Needs no permission.
    out.remove("sts:GetCallerIdentity");
    out
}

/// Every action the printed policy allows (all its parts).
fn actions_granted(wd: &Workdir, c: &str, for_: &str) -> BTreeSet<String> {
    let r = karpctl(wd, &["output", "--cluster", c, "--format", "caller-policy", "--for", for_]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    let parts = doc.get("parts").and_then(Value::as_array).cloned().unwrap_or_else(|| vec![doc.clone()]);
    let mut out = BTreeSet::new();
    for p in &parts {
        assert_eq!(p["Version"], "2012-10-17");
        for s in statements(p) {
            assert_eq!(s["Effect"], "Allow");
            out.extend(strings(&s["Action"]));
        }
    }
    out
}

fn assert_granted(wd: &Workdir, c: &str, for_: &str, run: &Run) {
    let called = actions_called(&run.json());
    assert!(!called.is_empty(), "no calls counted: {run:?}");
    let granted = actions_granted(wd, c, for_);
    let missing: Vec<_> = called.difference(&granted).collect();
    assert!(missing.is_empty(), "`karpctl {for_}` called {missing:?}, which `--for {for_}` does not grant");
}

#[test]
fn each_commands_policy_grants_every_call_it_makes() {
    let c = cluster_name("callerpol");
    seed(&c, &[]);
    let wd = Workdir::new();
    let up = karpctl(&wd, &["up", "--cluster", &c, "--stats", "--output", "json"]);
    assert_eq!(up.code, 0, "{up:?}");
    assert_granted(&wd, &c, "up", &up);
    let again = karpctl(&wd, &["up", "--cluster", &c, "--stats", "--output", "json"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_granted(&wd, &c, "up", &again);
    let diff = karpctl(&wd, &["diff", "--cluster", &c, "--stats", "--output", "json"]);
    assert_eq!(diff.code, 0, "{diff:?}");
    assert_granted(&wd, &c, "diff", &diff);
    let doctor = karpctl(&wd, &["doctor", "--cluster", &c, "--stats", "--output", "json"]);
    assert!(doctor.code == 0 || doctor.code == 2, "{doctor:?}");
    assert_granted(&wd, &c, "doctor", &doctor);
    let down = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--stats", "--output", "json"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert_granted(&wd, &c, "down", &down);
}

#[test]
fn read_commands_policies_hold_no_write_and_up_is_scoped_to_its_cluster() {
    let c = cluster_name("callerro");
    let wd = Workdir::new();
    let read_verbs = ["Get", "List", "Describe", "Lookup", "Simulate"];
    for for_ in ["diff", "doctor", "import"] {
        for a in actions_granted(&wd, &c, for_) {
            let op = a.split_once(':').unwrap().1;
            assert!(read_verbs.iter().any(|v| op.starts_with(v)), "--for {for_} grants {a}");
        }
    }
    // IAM writes by the cluster's own path, the queue by its ARN.
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "caller-policy", "--for", "up,down"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    let roles = find_sid(&statements(&doc), "WriteOwnRoles").clone();
    assert!(strings(&roles["Resource"]).contains(&format!("arn:aws:iam::000000000000:role/karpctl/{c}/*")), "{roles}");
    let queue = find_sid(&statements(&doc), "WriteQueue").clone();
    assert_eq!(strings(&queue["Resource"]), [format!("arn:aws:sqs:us-east-1:000000000000:Karpenter-{c}")]);
    // --for belongs to caller-policy: refused with the flag named, before any AWS call.
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "helm", "--for", "up"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("--for") && r.stderr.contains("--format caller-policy"), "{r:?}");
}
