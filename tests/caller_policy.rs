//! Issue 45: `karpctl output --format caller-policy --for <command>` grants every call the command
//! makes (read off karpctl's own call counts, `--stats`), `diff`'s and `doctor`'s hold no write,
//! and one cluster's writes never name another's objects.
//!
//! Neither emulator evaluates IAM policies; the lag proxy's `caller_policy` rule does
//! (scripts/lagpolicy.py: action, resource ARN, condition keys), so the runs below go through it
//! under exactly the printed policy, or that policy with one statement removed.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
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
    // The plans here name no KMS key: karpctl's lookup of `alias/karpenter-<c>` finds none, which
    // KMS answers (NotFoundException) without asking for kms:DescribeKey (no key to authorize on).
    out.remove("kms:DescribeKey");
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

// ------------------------------------------------------------------ enforced (issue 45, item 2)
//
// The lag proxy's `caller_policy` rule (scripts/lagpolicy.py) authorizes every call karpctl makes
// against the policy printed for the command, as IAM does: action, resource ARN, conditions.

/// The policy `karpctl output --format caller-policy --for <for_>` prints for `c`, as printed
/// (one document or `{"parts": [...]}`).
fn printed(wd: &Workdir, c: &str, for_: &str) -> Value {
    let r = karpctl(wd, &["output", "--cluster", c, "--format", "caller-policy", "--for", for_]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

/// Every statement of a printed policy (all its parts).
fn all_statements(doc: &Value) -> Vec<Value> {
    let parts = doc.get("parts").and_then(Value::as_array).cloned().unwrap_or_else(|| vec![doc.clone()]);
    parts.iter().flat_map(statements).collect()
}

/// The printed policy without the statement `sid`.
fn without(doc: &Value, sid: &str) -> Value {
    let rest: Vec<Value> = all_statements(doc).into_iter().filter(|s| s["Sid"] != sid).collect();
    serde_json::json!({"Version": "2012-10-17", "Statement": rest})
}

/// The proxy's decisions since its last reset: (action, resource, allowed, Sids allowing it).
fn decisions(px: &LagProxy) -> Vec<(String, String, bool, Vec<String>)> {
    px.state()["caller_policy"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d["action"].as_str().unwrap_or_default().to_string(),
                d["resource"].as_str().unwrap_or_default().to_string(),
                d["allowed"].as_bool().unwrap_or(false),
                strings(&d["sids"]),
            )
        })
        .collect()
}

/// Run karpctl through `px` under `policy` (the proxy's log starts empty; `rules`: more lag
/// rules, `null` for none); the run, the Sids of the statements that allowed its calls, and the
/// calls refused (action, resource).
fn under(
    wd: &Workdir,
    px: &LagProxy,
    policy: &Value,
    rules: &Value,
    args: &[&str],
) -> (Run, BTreeSet<String>, Vec<(String, String)>) {
    px.reset();
    under_kept(wd, px, policy, rules, args)
}

/// `under` keeping what the proxy kept so far (its rules, the tags it keeps for the emulator).
fn under_kept(
    wd: &Workdir,
    px: &LagProxy,
    policy: &Value,
    rules: &Value,
    args: &[&str],
) -> (Run, BTreeSet<String>, Vec<(String, String)>) {
    if !rules.is_null() {
        px.set(rules.clone());
    }
    px.set(json!({"caller_policy": policy}));
    let r = karpctl_at(wd, px.url(), args, &[]);
    let ds = decisions(px);
    let used = ds.iter().flat_map(|d| d.3.clone()).collect();
    let refused = ds.iter().filter(|d| !d.2).map(|d| (d.0.clone(), d.1.clone())).collect();
    (r, used, refused)
}

/// karpctl through `px` with no policy (a setup step, as an administrator would run it).
fn as_admin(wd: &Workdir, px: &LagProxy, args: &[&str]) {
    px.reset();
    let r = karpctl_at(wd, px.url(), args, &[]);
    assert_eq!(r.code, 0, "setup {args:?}: {r:?}");
}

/// The subnets and security groups tagged `karpenter.sh/discovery = c`.
fn discovery_tagged(c: &str) -> Vec<String> {
    let sdk = sdk();
    rt().block_on(async {
        let f = aws_sdk_ec2::types::Filter::builder().name("tag:karpenter.sh/discovery").values(c).build();
        let subnets = sdk.ec2.describe_subnets().filters(f.clone()).send().await.unwrap();
        let groups = sdk.ec2.describe_security_groups().filters(f).send().await.unwrap();
        subnets
            .subnets()
            .iter()
            .filter_map(|s| s.subnet_id().map(String::from))
            .chain(groups.security_groups().iter().filter_map(|g| g.group_id().map(String::from)))
            .collect()
    })
}

#[test]
fn each_command_succeeds_under_exactly_the_policy_printed_for_it() {
    let c = cluster_name("cpenf");
    seed(&c, &[]);
    let wd = Workdir::new();
    let px = LagProxy::start(&format!("{c}-px"), &endpoint());
    let run = |for_: &str, args: &[&str], codes: &[i32]| -> Run {
        let (r, used, refused) = under(&wd, &px, &printed(&wd, &c, for_), &Value::Null, args);
        assert!(refused.is_empty(), "`karpctl {args:?}` under `--for {for_}`: refused {refused:?}\n{r:?}");
        assert!(codes.contains(&r.code), "`karpctl {args:?}` under `--for {for_}`: {r:?}");
        assert!(!used.is_empty(), "the proxy evaluated no call: {r:?}");
        r
    };
    let (diff, up) = (["diff", "--cluster", &c], ["up", "--cluster", &c]);
    run("diff", &diff, &[2]);
    run("up", &up, &[0]);
    let again = run("up", &["up", "--cluster", &c, "--output", "json"], &[0]);
    assert_eq!(again.writes(), 0, "{again:?}");
    run("diff", &diff, &[0]);

    // Drift: the queue deleted, one object's discovery tags removed; diff finds it, up repairs.
    let sdk = sdk();
    let url = queue(&sdk, &format!("Karpenter-{c}")).expect("the queue").url;
    let tagged = discovery_tagged(&c);
    assert!(!tagged.is_empty());
    rt().block_on(async {
        sdk.sqs.delete_queue().queue_url(&url).send().await.unwrap();
        let keys = ["karpenter.sh/discovery", "karpctl.io/discovery"].map(|k| aws_sdk_ec2::types::Tag::builder().key(k).build());
        sdk.ec2.delete_tags().resources(&tagged[0]).set_tags(Some(keys.to_vec())).send().await.unwrap();
    });
    run("diff", &diff, &[2]);
    run("up", &up, &[0]);
    run("diff", &diff, &[0]);
    assert!(discovery_tagged(&c).contains(&tagged[0]), "tags restored");

    run("doctor", &["doctor", "--cluster", &c], &[0, 2]);
    run("down", &["down", "--cluster", &c, "--yes"], &[0]);
    assert!(queue(&sdk, &format!("Karpenter-{c}")).is_none(), "down removed the queue");
}

#[test]
fn import_then_up_adopt_run_under_their_printed_policies_and_need_every_statement() {
    let m = crate::common::setups::make("cpimp", crate::common::setups::Shape::TfV21);
    let (c, wd) = (&m.c, &m.wd);
    let px = LagProxy::start(&format!("{c}-px"), &endpoint());
    // The association's tags: ministack refuses TagResource on association ARNs, AWS takes it.
    let rules = json!({"eks_tag_associations": {c: true}, "eks_access_entry_tags": {c: true}});
    let import = ["import", "--cluster", c, "--karpenter-version", "1.14", "--force"];
    // Printed before the plan exists: import's needs do not depend on one.
    let policy = printed(wd, c, "import");
    let (r, _, refused) = under(wd, &px, &policy, &rules, &import);
    assert!(refused.is_empty() && r.code == 0, "import: refused {refused:?}\n{r:?}");
    let mut failed: Vec<String> = all_statements(&policy)
        .iter()
        .map(|s| s["Sid"].as_str().unwrap())
        .filter(|sid| *sid != "ReadKeys")
        .filter_map(|sid| refused_without(wd, &px, &policy, sid, &rules, &import).err())
        .collect();
    // ReadKeys: for a queue another tool encrypted with its own KMS key (the queue then goes
    // back to SSE-SQS, as the tool had it).
    let sdk = sdk();
    let url = queue(&sdk, &format!("Karpenter-{c}")).expect("the tool's queue").url;
    let set = |attrs: &[(QueueAttributeName, &str)]| {
        let mut call = sdk.sqs.set_queue_attributes().queue_url(&url);
        for (k, v) in attrs {
            call = call.attributes(k.clone(), *v);
        }
        rt().block_on(call.send()).unwrap();
    };
    let key = rt().block_on(sdk.kms.create_key().description("another tool's queue key").send()).unwrap();
    let key_id = key.key_metadata().unwrap().key_id().to_string();
    set(&[(QueueAttributeName::KmsMasterKeyId, &key_id), (QueueAttributeName::SqsManagedSseEnabled, "false")]);
    failed.extend(refused_without(wd, &px, &policy, "ReadKeys", &rules, &import).err());
    set(&[(QueueAttributeName::KmsMasterKeyId, ""), (QueueAttributeName::SqsManagedSseEnabled, "true")]);
    assert!(failed.is_empty(), "{failed:#?}");
    let policy = printed(wd, c, "up");
    let (r, _, refused) = under_kept(wd, &px, &policy, &rules, &["up", "--cluster", c, "--adopt"]);
    assert!(refused.is_empty() && r.code == 0, "up --adopt: refused {refused:?}\n{r:?}");
    let (r, _, refused) = under_kept(wd, &px, &policy, &rules, &["up", "--cluster", c, "--output", "json"]);
    assert!(refused.is_empty() && r.code == 0 && r.writes() == 0, "second up: refused {refused:?}\n{r:?}");
    let (r, _, refused) = under_kept(wd, &px, &printed(wd, c, "down"), &rules, &["down", "--cluster", c, "--yes"]);
    assert!(refused.is_empty() && r.code == 0, "down: refused {refused:?}\n{r:?}");
}

/// Statements whose refusal karpctl reports as a warning and goes on (the value it reads is
/// advice only): the run names the refused action but does not fail.
const REPORTED_NOT_FATAL: &[&str] = &["ReadEc2Quotas"];

/// `args` under `policy` without statement `sid` fails, a call of one of its actions refused,
/// and says which (Err: what went otherwise).
fn refused_without(wd: &Workdir, px: &LagProxy, policy: &Value, sid: &str, rules: &Value, args: &[&str]) -> Result<(), String> {
    let stmt = all_statements(policy).into_iter().find(|s| s["Sid"] == sid).unwrap_or_else(|| panic!("{sid}"));
    let actions = strings(&stmt["Action"]);
    let (r, _, refused) = under(wd, px, &without(policy, sid), rules, args);
    let hits: BTreeSet<&String> = refused.iter().map(|(a, _)| a).filter(|a| actions.contains(a)).collect();
    let out = r.all();
    if hits.is_empty() {
        return Err(format!(
            "`karpctl {args:?}` without {sid} ({actions:?}): none of them refused (refused: {refused:?}, exit {}), so the statement is spare here",
            r.code
        ));
    }
    if r.code == 0 && !REPORTED_NOT_FATAL.contains(&sid) {
        return Err(format!("`karpctl {args:?}` without {sid}: exit 0 although {hits:?} refused"));
    }
    if !hits.iter().any(|a| out.contains(a.as_str())) {
        return Err(format!("`karpctl {args:?}` without {sid} does not name {hits:?}: {r:?}"));
    }
    Ok(())
}

/// Plan of the statement-removal runs: an instance profile too (its statements then appear).
fn profile_plan(wd: &Workdir, c: &str, extra: &str) {
    wd.plan(c, &format!("cluster = \"{c}\"\nregion = \"us-east-1\"\n[identity]\ninstance_profile = true\n{extra}"));
}

/// CloudTrail shows the controller's fleet launches hitting the On-Demand vCPU quota, so that
/// its value is read (`servicequotas:GetServiceQuota`).
fn quota_rules(c: &str) -> Value {
    let controller = format!("arn:aws:iam::000000000000:role/KarpenterController-{c}");
    json!({
        "cloudtrail_events": [{"role": controller, "event": "CreateFleet", "source": "ec2.amazonaws.com",
            "agent": "karpenter.sh-1.14.0", "minutes_ago": 2,
            "fleet_errors": [{"code": "VcpuLimitExceeded", "message": "You have requested more vCPU capacity than your current vCPU limit of 32 allows.", "lifecycle": "on-demand", "type": "m5.xlarge", "zone": "us-east-1a"}]}],
        "cloudtrail_lookup_rps": 1000,
        "servicequotas_quotas": {"L-1216C47A": 32},
    })
}

/// A policy of this cluster's under its path that the plan does not name (an older plan's),
/// attached to a role of another tool: removing it needs detaching it from that role.
fn orphan_held_by_another_role(c: &str) {
    let sdk = sdk();
    rt().block_on(async {
        let listed = sdk.iam.list_policies().path_prefix(format!("/karpctl/{c}/")).send().await.unwrap();
        let mine = listed.policies().first().expect("a policy of karpctl's").arn().unwrap().to_string();
        let tags = sdk.iam.list_policy_tags().policy_arn(&mine).send().await.unwrap().tags().to_vec();
        let tags: Vec<_> = tags.into_iter().filter(|t| t.key() != "karpctl.io/resource").collect();
        let doc = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:DescribeImages","Resource":"*"}]}"#;
        let old = sdk
            .iam
            .create_policy()
            .policy_name(format!("KarpenterControllerOld-{c}"))
            .path(format!("/karpctl/{c}/"))
            .policy_document(doc)
            .set_tags(Some(tags))
            .send()
            .await
            .unwrap();
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let other = format!("other-tool-{c}");
        sdk.iam.create_role().role_name(&other).assume_role_policy_document(trust).send().await.unwrap();
        let arn = old.policy().unwrap().arn().unwrap();
        sdk.iam.attach_role_policy().role_name(&other).policy_arn(arn).send().await.unwrap();
    });
}

/// The cluster's Pod Identity association now names another role: `up` updates it.
fn association_drifted(c: &str) {
    let sdk = sdk();
    let (id, _) = karpenter_associations(&sdk, c).into_iter().next().expect("an association");
    let node = format!("arn:aws:iam::000000000000:role/karpctl/{c}/KarpenterNodeRole-{c}");
    rt().block_on(async {
        sdk.eks.update_pod_identity_association().cluster_name(c).association_id(&id).role_arn(node).send().await.unwrap();
    });
}

#[test]
fn any_statement_removed_a_run_that_needs_it_is_refused_naming_its_action() {
    let wd = Workdir::new();
    let px = LagProxy::start(&cluster_name("cpdrop-px"), &endpoint());
    let none = Value::Null;
    // A cluster karpctl made (as an administrator): the read-only commands' runs share it.
    let made = cluster_name("cpdrop");
    seed(&made, &[]);
    profile_plan(&wd, &made, "");
    as_admin(&wd, &px, &["up", "--cluster", &made]);
    let fresh = || {
        let c = cluster_name("cpdrop");
        seed(&c, &[]);
        profile_plan(&wd, &c, "");
        c
    };
    let made_again = || {
        let c = fresh();
        as_admin(&wd, &px, &["up", "--cluster", &c]);
        c
    };
    let (mut checked, mut failed) = (Vec::new(), Vec::new());
    for for_ in ["diff", "doctor", "up", "down"] {
        let policy = printed(&wd, &made, for_);
        for s in all_statements(&policy) {
            let sid = s["Sid"].as_str().unwrap().to_string();
            // The run that needs the statement: on what it acts, in the state that needs it.
            let (c, rules, extra): (String, Value, &[&str]) = match (for_, sid.as_str()) {
                (_, "ReadEc2Quotas") => (made.clone(), quota_rules(&made), &[]),
                ("doctor", "SimulateRoles") => (made.clone(), none.clone(), &["--simulate"]),
                ("diff" | "doctor", _) => (made.clone(), none.clone(), &[]),
                ("up", "WriteEksObjectsOfCluster") => {
                    let c = made_again();
                    association_drifted(&c);
                    (c, none.clone(), &[])
                }
                ("up", "UntagDiscovery") => {
                    // The plan now selects the public subnets: the private ones' tags go.
                    let c = made_again();
                    profile_plan(&wd, &c, "[discovery]\nsubnet_tags = { \"kubernetes.io/role/elb\" = \"1\" }\n");
                    (c, none.clone(), &[])
                }
                (_, "DetachOwnPoliciesFromOthers") => {
                    let c = made_again();
                    orphan_held_by_another_role(&c);
                    (c, none.clone(), &[])
                }
                ("up", _) => (fresh(), none.clone(), &[]),
                _ => (made_again(), none.clone(), &[]),
            };
            let policy = printed(&wd, &c, for_);
            let mut args = vec![for_, "--cluster", c.as_str()];
            if for_ == "down" {
                args.push("--yes");
            }
            args.extend_from_slice(extra);
            checked.push(format!("{for_}:{sid}"));
            if let Err(e) = refused_without(&wd, &px, &policy, &sid, &rules, &args) {
                failed.push(e);
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(checked.len() > 25, "{checked:?}");
}

#[test]
fn one_clusters_policy_refuses_writes_to_another_clusters_objects() {
    // `a`'s name prefixes `b`'s: a pattern such as Karpenter-<a>* would reach b's objects.
    let a = cluster_name("cpx");
    let b = format!("{a}-east");
    seed(&a, &[]);
    seed(&b, &[]);
    let wd = Workdir::new();
    let px = LagProxy::start(&format!("{a}-px"), &endpoint());
    as_admin(&wd, &px, &["up", "--cluster", &b]);
    // a's writes, and b's reads only (so that the run reaches b's writes).
    let mut stmts = all_statements(&printed(&wd, &a, "up,down"));
    stmts.extend(all_statements(&printed(&wd, &b, "diff")).into_iter().map(|mut s| {
        s["Sid"] = json!(format!("{}B", s["Sid"].as_str().unwrap()));
        s
    }));
    let policy = json!({"Version": "2012-10-17", "Statement": stmts});
    let (r, _, refused) = under(&wd, &px, &policy, &Value::Null, &["down", "--cluster", &b, "--yes"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!refused.is_empty(), "{r:?}");
    for (action, resource) in &refused {
        let op = action.split_once(':').unwrap().1;
        assert!(["Delete", "Detach", "Remove", "Untag"].iter().any(|v| op.starts_with(v)), "{action} on {resource}");
        assert!(resource.contains(&b) || resource.contains("/subnet-") || resource.contains("/sg-"), "{action} on {resource}");
    }
    assert!(r.stderr.contains("not authorized to perform"), "{r:?}");
    // b's objects are all there: diff (as an administrator) finds nothing to do.
    px.reset();
    let d = karpctl_at(&wd, px.url(), &["diff", "--cluster", &b], &[]);
    assert_eq!(d.code, 0, "b untouched: {d:?}");
    // And `up` for b under a's policy and b's reads: refused at b's first write.
    let sdk = sdk();
    let url = queue(&sdk, &format!("Karpenter-{b}")).expect("b's queue").url;
    rt().block_on(sdk.sqs.delete_queue().queue_url(&url).send()).unwrap();
    let (r, _, refused) = under(&wd, &px, &policy, &Value::Null, &["up", "--cluster", &b]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        refused.iter().any(|(act, res)| act == "sqs:CreateQueue" && res.ends_with(&format!(":Karpenter-{b}"))),
        "{refused:?}"
    );
}
