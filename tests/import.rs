//! `karpctl import` then `up --adopt` on setups made the way the terraform-aws-eks `karpenter`
//! module (v20 and v21) and Karpenter's getting-started CloudFormation stack name them, built
//! here through the AWS SDK: import reads only and writes the plan; `up --adopt --concurrency 1`
//! converges in one run, keeps every role, the queue and the association (same ids), keeps the
//! existing rules (one per event kind to the queue), never takes a permission from the
//! controller mid-way (the lag proxy's `iam_watch_role` reads the role's actions after every IAM
//! write); then `diff` exits 0 and `doctor` finds nothing.

use crate::common::lag::LagProxy;
use crate::common::setups::*;
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn role_id(sdk: &Sdk, name: &str) -> String {
    rt().block_on(sdk.iam.get_role().role_name(name).send()).expect("iam:GetRole").role().unwrap().role_id().to_string()
}

/// Every action Karpenter v1.14's controller needs (the upstream policy set).
fn needed(m: &Made, a: &str) -> BTreeSet<String> {
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    controller_policies_v1_14(&m.c, REGION, a, PARTITION, &node_arn, &m.queue_arn)
        .values()
        .flatten()
        .filter(|s| s["Effect"] == "Allow")
        .flat_map(|s| strings(&s["Action"]))
        .collect()
}

/// import, then `up --adopt --concurrency 1` with the controller role watched; everything the
/// issue asks is asserted. Returns the import run (for the transcript) and the setup.
fn import_then_adopt(prefix: &str, shape: Shape) -> (Run, Made, LagProxy) {
    import_then_adopt_at(prefix, shape, "1.14")
}

/// `import_then_adopt` with `--karpenter-version version`.
fn import_then_adopt_at(prefix: &str, shape: Shape, version: &str) -> (Run, Made, LagProxy) {
    let m = make(prefix, shape);
    let sdk = sdk();
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    let (node_id, ctrl_id) = (role_id(&sdk, &m.node_role), role_id(&sdk, &m.controller_role));
    let assoc = karpenter_associations(&sdk, &m.c);
    assert_eq!(assoc.len(), usize::from(shape != Shape::TfV20Defaults));
    let ng_before = m.nodegroup_role.as_ref().map(|r| role_tags(&sdk, r));

    // Every run goes through the lag proxy: it keeps the association's tags (ministack refuses
    // TagResource on association ARNs, AWS takes it) and reads the controller role's actions
    // after every IAM write.
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    px.set(json!({
        "iam_watch_role": {&m.controller_role: true},
        "eks_tag_associations": {&m.c: true},
        "eks_access_entry_tags": {&m.c: true},
    }));
    let run = |args: &[&str]| karpctl_at(&m.wd, px.url(), args, &[]);

    // import never guesses the release that runs.
    let plan_path = m.wd.path().join("plans").join(format!("{}.toml", m.c));
    let unpinned = run(&["import", "--cluster", &m.c]);
    assert_eq!(unpinned.code, 1, "{unpinned:?}");
    assert!(
        unpinned.stderr.contains("--karpenter-version") && unpinned.stderr.contains("helm list -n kube-system"),
        "{unpinned:?}"
    );
    assert!(!plan_path.exists(), "nothing written without the version");

    // import: reads only, writes the plan file, refuses to overwrite it.
    let connects = || (px.count("GetCallerIdentity"), px.count("DescribeCluster"));
    let before = connects();
    let json_run = run(&["import", "--cluster", &m.c, "--karpenter-version", version, "--output", "json"]);
    assert_eq!(json_run.code, 0, "{json_run:?}");
    assert_eq!(json_run.writes(), 0, "import makes no write call: {}", json_run.stdout);
    let after = connects();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "import connects once: one GetCallerIdentity and one DescribeCluster, its diff included"
    );
    let doc = json_run.json();
    let text = std::fs::read_to_string(&plan_path).expect("import wrote plans/<c>.toml");
    assert_eq!(doc["plan_text"].as_str(), Some(text.as_str()));
    assert!(text.contains(&m.controller_role) && text.contains(&format!("node_role_name = \"{}\"", m.node_role)), "{text}");
    for (_, name) in &m.rules {
        assert!(text.contains(name.as_str()), "rule {name} kept: {text}");
    }
    for p in &m.kept_policies {
        assert!(text.contains(p.as_str()) && !text.contains(&format!("retire_policies = [\n  \"{p}\"")), "{p} kept: {text}");
    }
    if let Some(ng) = &m.nodegroup_role {
        assert!(
            !text.contains(&format!("role/{ng}\"")) && !text.contains(&format!("\"{ng}\"")),
            "the node group's role is not taken: {text}"
        );
    }
    for s in &m.unusable_subnets {
        assert!(text.contains(&format!("# left out: {s}")), "{s} left out with the reason: {text}");
        let ids = text.lines().find(|l| l.starts_with("subnet_ids")).unwrap_or_default();
        assert!(!ids.contains(s.as_str()), "{ids}");
    }
    let again = run(&["import", "--cluster", &m.c, "--karpenter-version", version]);
    assert_eq!(again.code, 1, "never overwrites: {again:?}");
    assert!(again.stderr.contains("--force"), "{again:?}");
    let human = run(&["import", "--cluster", &m.c, "--karpenter-version", version, "--force"]);
    assert_eq!(human.code, 0, "{human:?}");
    match shape {
        Shape::Cfn => {
            let out = &human.stdout;
            assert!(out.contains("DeletionPolicy: Retain") && out.contains("--output json | jq -r ."), "{human:?}");
            // The seeded rule names are cut to 64 characters, as CloudFormation cuts them.
            assert!(out.contains(&format!("\n  s=Karpenter-{}\n", m.c)), "the whole stack name: {human:?}");
            assert!(out.contains(&format!("\n  s=eksctl-{}-podidentityrole-kube-system-karpenter\n", m.c)), "{human:?}");
            assert!(out.contains("&& aws cloudformation delete-stack"), "chained: {human:?}");
        }
        _ => {
            assert!(human.stdout.lines().any(|l| l.trim() == "terraform state rm 'module.karpenter'"), "{human:?}");
            assert!(human.stdout.contains("destroy = false"), "{human:?}");
            assert!(human.stdout.contains("`terraform plan` must show 0 to destroy before you apply"), "{human:?}");
        }
    }

    // up --adopt, one call at a time, the controller role's actions read after every IAM write.
    let up = run(&["up", "--cluster", &m.c, "--adopt", "--concurrency", "1"]);
    // Subnets left out of the plan that still carry the tag: Karpenter picks them and the nodes
    // never join, so `up` applies and then says so (exit 1), as doctor does.
    assert_eq!(up.code, if m.unusable_subnets.is_empty() { 0 } else { 1 }, "{up:?}");
    for s in &m.unusable_subnets {
        assert!(up.stdout.contains("error subnet-no-way-out") && up.stdout.contains(&format!("--resources {s} ")), "{up:?}");
    }
    let watched = px.state()["iam_watch"][&m.controller_role].as_array().cloned().unwrap_or_default();
    assert!(!watched.is_empty(), "IAM writes were watched: {:?}", px.state());
    // A setup that granted every action Karpenter 1.14 needs never loses one mid-way.
    // The pre-v1 policy never granted them all: what it granted is never lost either, as it goes
    // only once karpctl's policies are attached.
    let want: BTreeSet<String> = if shape == Shape::TfV20Defaults {
        let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
        pre_v1_policy(&m.c, &a, &node_arn, &m.queue_arn).iter().flat_map(|s| strings(&s["Action"])).collect()
    } else {
        needed(&m, &a)
    };
    for w in &watched {
        let has: BTreeSet<String> = strings(&w["actions"]).into_iter().collect();
        let missing: Vec<&String> = want.iter().filter(|x| !has.contains(*x)).collect();
        assert!(missing.is_empty(), "after {} the controller lacked {missing:?}\n{up:?}", w["after"]);
    }

    // Nothing remade.
    assert_eq!(role_id(&sdk, &m.node_role), node_id, "the node role is the same role");
    assert_eq!(role_id(&sdk, &m.controller_role), ctrl_id, "the controller role is the same role");
    let url = rt().block_on(sdk.sqs.get_queue_url().queue_name(m.queue_arn.rsplit(':').next().unwrap()).send()).unwrap();
    assert_eq!(url.queue_url(), Some(m.queue_url.as_str()), "the same queue");
    let now = karpenter_associations(&sdk, &m.c);
    if shape == Shape::TfV20Defaults {
        // The role the module made is adopted; the association is made for it (no second role).
        assert_eq!(now.len(), 1, "{now:?}");
        assert!(now[0].1.ends_with(&format!("role/{}", m.controller_role)), "{now:?}");
    } else {
        assert_eq!(now, assoc, "the same association");
    }
    // Exactly one rule per event kind to the queue, the tool's own where it had one.
    let rules = rules_to_queue(&sdk, &m.queue_arn);
    let mut kinds: Vec<String> = rules.values().flatten().cloned().collect();
    kinds.sort();
    let mut all: Vec<String> = RULE_EVENTS.iter().map(|(_, _, d)| d.to_string()).collect();
    all.sort();
    // The rules are said last: CI keeps only the tail of a long failure.
    assert!(kinds == all, "one rule per kind, want {all:?}\n{up:?}\nthe rules that target the queue: {rules:?}");
    for (_, name) in &m.rules {
        assert!(rules.contains_key(name), "kept {name}: {rules:?}");
    }
    // The tool's Karpenter policies are off the controller role, and deleted (nothing else used
    // them); everything else stays.
    let attached = attached(&sdk, &m.controller_role);
    for p in &m.old_policies {
        assert!(!attached.contains(p), "{p} detached: {attached:?}");
        if p.starts_with("arn:") {
            assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_err(), "{p} deleted");
        }
    }
    for p in &m.kept_policies {
        assert!(attached.contains(p), "{p} kept: {attached:?}");
    }
    // The node group's role and its entry are untouched; Karpenter passes its own node role.
    if let Some(ng) = &m.nodegroup_role {
        assert_eq!(Some(role_tags(&sdk, ng)), ng_before, "the node group's role is not tagged");
        let ng_arn = format!("arn:aws:iam::{a}:role/{ng}");
        let seen = sdk_at(px.url());
        let e = rt().block_on(seen.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&ng_arn).send()).unwrap();
        assert!(!e.access_entry().unwrap().tags().is_some_and(|t| t.contains_key(OWNER_TAG)), "its entry is not karpctl's");
    }
    // The node role's access entry is karpctl's now (adopted or made), so `down` removes it.
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    // Read through the proxy: ministack's DescribeAccessEntry leaves out the tags (eks_access_entry_tags).
    let seen = sdk_at(px.url());
    let e = rt().block_on(seen.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&node_arn).send()).unwrap();
    assert_eq!(e.access_entry().unwrap().tags().and_then(|t| t.get(OWNER_TAG)).map(String::as_str), Some(m.c.as_str()));

    let diff = run(&["diff", "--cluster", &m.c]);
    if m.unusable_subnets.is_empty() {
        assert_eq!(diff.code, 0, "diff right after is clean: {diff:?}");
    } else {
        // Nothing to change, but the same error-level check as `up`'s: one verdict (exit 1).
        assert_eq!(diff.code, 1, "{diff:?}");
        assert!(diff.stdout.contains("No changes.") && diff.stdout.contains("error subnet-no-way-out"), "{diff:?}");
    }
    // (judged on a day the release was still supported: out of support is a warning of its own)
    let day: &[(&str, &str)] = if version == "1.14" { &[] } else { &[("KARPCTL_TODAY", "2026-03-25")] };
    let doctor = karpctl_at(&m.wd, px.url(), &["doctor", "--cluster", &m.c, "--karpenter-version", version], day);
    if m.unusable_subnets.is_empty() {
        assert_eq!(doctor.code, 0, "doctor finds nothing: {doctor:?}");
    } else {
        // The tagged public subnets stay tagged (Terraform's public_subnet_tags): doctor says so.
        assert_eq!(doctor.code, 2, "{doctor:?}");
        assert!(m.unusable_subnets.iter().all(|s| doctor.stdout.contains(s.as_str())), "{doctor:?}");
    }
    (human, m, px)
}

fn role_tags(sdk: &Sdk, name: &str) -> Vec<(String, String)> {
    let r = rt().block_on(sdk.iam.get_role().role_name(name).send()).expect("iam:GetRole");
    r.role().unwrap().tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// Whether `down` runs with the plan file `import` wrote, or without any (it was lost, or `down`
/// runs elsewhere): the result must be the same.
#[derive(Clone, Copy, PartialEq, Debug)]
enum PlanFile {
    Kept,
    Gone,
}

/// `down` after a takeover removes everything this cluster's tags mark (the adopted roles,
/// access entry, association, queue and rules, karpctl's own policies) and nothing else: a node
/// group's role and entry and the user's own policies stay.
fn down_removes_only_what_was_taken(m: &Made, px: &LagProxy, plan: PlanFile) {
    let sdk = sdk();
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    if plan == PlanFile::Gone {
        std::fs::remove_file(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    }
    let down = karpctl_at(&m.wd, px.url(), &["down", "--cluster", &m.c, "--yes"], &[]);
    assert_eq!(down.code, 0, "{down:?}");
    if plan == PlanFile::Gone {
        assert!(down.stderr.contains(&format!("Without a plan file, found controller role {}", m.controller_role)), "{down:?}");
    }
    let node_arn = format!("arn:aws:iam::{a}:role/{}", m.node_role);
    let entry = rt().block_on(sdk.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&node_arn).send());
    assert!(entry.is_err(), "the node role's adopted access entry went with it: {entry:?}");
    assert!(rt().block_on(sdk.iam.get_role().role_name(&m.node_role).send()).is_err(), "the node role went: {down:?}");
    assert!(
        rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).is_err(),
        "the controller role went: {down:?}"
    );
    // karpctl's own policies, made at the adopted roles' path (/).
    for part in CONTROLLER_PARTS.iter().chain(["ZonalShift"].iter()) {
        let arn = format!("arn:aws:iam::{a}:policy/KarpenterController{part}Policy-{}", m.c);
        assert!(rt().block_on(sdk.iam.get_policy().policy_arn(&arn).send()).is_err(), "{arn} went: {down:?}");
    }
    assert!(queue(&sdk, queue_name_of(m)).is_none(), "the adopted queue went: {down:?}");
    for (_, name) in &m.rules {
        assert!(rt().block_on(sdk.events.describe_rule().name(name).send()).is_err(), "the adopted rule {name} went: {down:?}");
    }
    for part in RULE_PARTS {
        assert!(rt().block_on(sdk.events.describe_rule().name(rule_name(&m.c, part)).send()).is_err(), "{part}: {down:?}");
    }
    assert!(karpenter_associations(&sdk, &m.c).is_empty(), "the association went: {down:?}");
    if let Some(ng) = &m.nodegroup_role {
        assert!(rt().block_on(sdk.iam.get_role().role_name(ng).send()).is_ok(), "the node group's role stays");
        let ng_arn = format!("arn:aws:iam::{a}:role/{ng}");
        let e = rt().block_on(sdk.eks.describe_access_entry().cluster_name(&m.c).principal_arn(&ng_arn).send());
        assert!(e.is_ok(), "the node group's entry stays: {e:?}");
    }
    for p in &m.kept_policies {
        assert!(rt().block_on(sdk.iam.get_policy().policy_arn(p).send()).is_ok(), "{p}, not karpctl's, is never deleted");
    }
}

fn queue_name_of(m: &Made) -> &str {
    m.queue_arn.rsplit(':').next().unwrap()
}

#[test]
fn a_terraform_v21_setup_is_imported_and_adopted_in_one_run() {
    let (run, m, px) = import_then_adopt("im-tf21", Shape::TfV21);
    let c = m.c.clone();
    // Lines only the emulator causes (its made-up VPC id, its small seeded subnets) and the
    // in-sync discovery tags, whose order follows random subnet ids, are left out of the docs.
    let emulator_only = ["note: aws_ec2_tag ", "note: EKS reports VPC", "warning: Availability Zone", "note: Availability Zone"];
    let mut text: String =
        run.stdout.lines().filter(|l| !emulator_only.iter().any(|p| l.starts_with(p))).map(|l| format!("{l}\n")).collect();
    for n in 1..=4 {
        text = text.replace(&ts(&c, n), &ts("say-when-east", n));
    }
    crate::common::transcript::check("import.md", "import-terraform", &crate::common::snapshot::stable(&text, &c));
    down_removes_only_what_was_taken(&m, &px, PlanFile::Kept);
}

#[test]
fn a_terraform_v20_setup_with_four_rules_and_an_inline_policy_is_imported_and_adopted() {
    import_then_adopt("im-tf20", Shape::TfV20);
}

#[test]
fn the_v20_defaults_retire_the_pre_v1_policy_and_adopt_the_unassociated_role() {
    // Karpenter 1.10 runs: the module's pre-v1 policy is retired (a counted `-` step), after
    // karpctl's v1 policies are attached (import_then_adopt checks it is gone after up --adopt
    // and that the controller never lost an action it granted).
    let (run, m, _) = import_then_adopt_at("im-tf20d", Shape::TfV20Defaults, "1.10");
    let pre_v1 = &m.old_policies[0];
    let name = pre_v1.rsplit('/').next().unwrap();
    assert!(run.stdout.contains(&format!("  \"{pre_v1}\",   # Karpenter's pre-v1 policy: Karpenter 1.10 runs")), "{run:?}");
    assert!(run.stdout.contains(&format!("  - retired-policy-{name} retired_policy")), "a - step: {run:?}");
    assert!(run.stdout.contains(", 1 to destroy."), "counted: {run:?}");
    assert!(run.stdout.contains("Karpenter 1.10 runs, so karpctl's v1 policies replace it"), "{run:?}");
    assert!(!run.stdout.contains("Upgrade Karpenter first"), "{run:?}");
    assert!(run.stdout.contains("no association uses it"), "{run:?}");
}

/// A call of the controller role naming `version` in its user agent, as CloudTrail records it.
fn call(role: &str, version: &str, minutes_ago: u64) -> Value {
    json!({"role": role, "event": "DescribeInstances", "source": "ec2.amazonaws.com", "agent": format!("karpenter.sh-{version}"), "minutes_ago": minutes_ago})
}

#[test]
fn the_pre_v1_policy_follows_the_release_cloudtrail_shows() {
    let m = make("im-pre1", Shape::TfV20Defaults);
    let a = m.queue_arn.split(':').nth(4).unwrap().to_string();
    let role = format!("arn:aws:iam::{a}:role/{}", m.controller_role);
    let pre_v1 = m.old_policies[0].clone();
    let px = LagProxy::start(&cluster_name("im-pre1-px"), &endpoint());
    let import = |records: Value, extra: &[&str]| {
        px.set(json!({"cloudtrail_events": records, "cloudtrail_lookup_rps": 1000}));
        let mut args = vec!["import", "--cluster", m.c.as_str(), "--force"];
        args.extend_from_slice(extra);
        let r = karpctl_at(&m.wd, px.url(), &args, &[]);
        let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap_or_default();
        (r, text)
    };
    let retired = |text: &str| text.contains(&format!("retire_policies = [\n  \"{pre_v1}\""));

    // CloudTrail shows 1.12.3: the plan follows it and retires the pre-v1 policy.
    let (r, text) = import(json!([call(&role, "1.12.3", 2)]), &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(text.contains("karpenter_version = \"1.12\"") && retired(&text), "{text}");
    assert!(r.stdout.contains(", 1 to destroy."), "{r:?}");

    // A rollout from 0.37 is still under way: kept, and said why, whatever the flag says.
    let (r, text) = import(json!([call(&role, "0.37.2", 3), call(&role, "1.12.3", 1)]), &["--karpenter-version", "1.12"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!retired(&text) && text.contains(&format!("  \"{pre_v1}\",   # Karpenter's pre-v1 policy: see the note")), "{text}");
    assert!(r.stdout.contains("0.37.2") && r.stdout.contains("Upgrade Karpenter first"), "{r:?}");
    assert!(r.stdout.contains(", 0 to destroy."), "{r:?}");

    // Only 0.37 runs and no flag: no plan karpctl could apply; said plainly, nothing written.
    std::fs::remove_file(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    let (r, text) = import(json!([call(&role, "0.37.2", 2)]), &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("Karpenter 0.37.2 running, a release before 1.0"), "{r:?}");
    assert!(text.is_empty(), "nothing written: {text}");
}

#[test]
fn the_modules_example_keeps_the_users_policies_and_the_node_groups_role() {
    let (run, m, px) = import_then_adopt("im-tfex", Shape::TfExample);
    assert!(run.stdout.contains("zonal_shift = true"), "{run:?}");
    assert!(run.stdout.contains("backs managed node group ng-1"), "{run:?}");
    // Before the module block goes, the let-go names every module output the example reads, as
    // a local with the value `karpctl output --format json` gives for it now that karpctl
    // manages the objects.
    let out = karpctl_at(&m.wd, px.url(), &["output", "--cluster", &m.c, "--format", "json"], &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let doc = out.json();
    let text = &run.stdout;
    let from = text.find("  locals {\n").unwrap_or_else(|| panic!("the locals: {run:?}"));
    let locals = &text[from..from + text[from..].find("\n  }\n").unwrap()];
    let mut checked = Vec::new();
    for line in locals.lines().skip(1) {
        let (name, rest) = line.trim().split_once(" = ").unwrap_or_else(|| panic!("{line}"));
        let (value, source) = rest.split_once(" # ").unwrap_or_else(|| panic!("{line}"));
        let Some(path) = source.strip_prefix('.') else {
            assert_eq!(value, "null", "no karpctl value, said how to read it: {line}");
            continue;
        };
        let got = path.split('.').fold(&doc, |v, k| &v[k]);
        let want: Value = if value == "null" { Value::Null } else { serde_json::from_str(value).unwrap() };
        assert_eq!(&want, got, "{name}: the let-go's value is what output gives at {source}: {out:?}");
        checked.push(name.trim().to_string());
    }
    for name in [
        "karpenter_queue_name",
        "karpenter_node_iam_role_name",
        "karpenter_iam_role_name",
        "karpenter_iam_role_arn",
        "karpenter_namespace",
    ] {
        assert!(checked.contains(&name.to_string()), "{name} checked against output: {checked:?}");
    }
    assert!(text.contains("`module.karpenter.queue_name` to its helm_release"), "{run:?}");
    down_removes_only_what_was_taken(&m, &px, PlanFile::Gone);
}

#[test]
fn a_cloudformation_setup_is_imported_and_adopted() {
    let (_, m, px) = import_then_adopt("im-cfn", Shape::Cfn);
    down_removes_only_what_was_taken(&m, &px, PlanFile::Gone);
}

#[test]
fn a_pod_identity_role_another_namespace_uses_is_not_taken() {
    // v20's defaults, but Karpenter runs in namespace `karpenter`: its association uses the role.
    let m = make("im-ns", Shape::TfV20Defaults);
    let sdk = sdk();
    let arn = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap().role().unwrap().arn().to_string();
    rt().block_on(
        sdk.eks
            .create_pod_identity_association()
            .cluster_name(&m.c)
            .namespace("karpenter")
            .service_account("karpenter")
            .role_arn(&arn)
            .send(),
    )
    .unwrap();
    let trust_before = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap();
    let r = karpctl(&m.wd, &["import", "--cluster", &m.c, "--karpenter-version", "1.14"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("association karpenter/karpenter") && r.stdout.contains("--namespace"), "{r:?}");
    let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    assert!(!text.contains(&m.controller_role), "the running Karpenter's role is not taken: {text}");
    // With the namespace given, it is found through its association.
    let r = karpctl(&m.wd, &["import", "--cluster", &m.c, "--karpenter-version", "1.14", "--namespace", "karpenter", "--force"]);
    assert_eq!(r.code, 0, "{r:?}");
    let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    assert!(text.contains(&format!("controller_role_name = \"{}\"", m.controller_role)), "{text}");
    let trust_after = rt().block_on(sdk.iam.get_role().role_name(&m.controller_role).send()).unwrap();
    assert_eq!(
        trust_before.role().unwrap().assume_role_policy_document(),
        trust_after.role().unwrap().assume_role_policy_document()
    );
}

/// Plain `up` on the module's own setup stops before any write and names `karpctl import` first;
/// `up --adopt` without the import refuses to make a second controller and node role beside the
/// module's: nothing is written, the association keeps the role the controller uses, and the
/// queue policy still lets every rule of the module send.
#[test]
fn plain_up_on_the_modules_setup_names_import_and_adopt_makes_no_second_set() {
    let m = make("plain-up", Shape::TfV21);
    let sdk = sdk();
    let import = format!("karpctl import --cluster {}", m.c);
    let r = karpctl(&m.wd, &["up", "--cluster", &m.c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let hint = doc["error"]["hint"].as_str().unwrap_or_default();
    let (at_import, at_adopt) = (hint.find(&import), hint.find("--adopt"));
    assert!(at_import.is_some() && at_import < at_adopt, "import first: {hint}");
    let human = karpctl(&m.wd, &["up", "--cluster", &m.c]);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(human.stderr.contains("hint: if another tool made them") && human.stderr.contains(&import), "{human:?}");

    let r = karpctl(&m.wd, &["up", "--cluster", &m.c, "--adopt", "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let conflicts = doc["error"]["conflicts"].as_array().unwrap_or_else(|| panic!("{doc}"));
    for id in ["pod-identity", "queue"] {
        let c = conflicts.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id}: {doc}"));
        let msg = c["message"].as_str().unwrap();
        assert!(msg.contains("second Karpenter setup") && msg.contains("karpctl import"), "{id}: {msg}");
    }
    let pi = conflicts.iter().find(|c| c["id"] == "pod-identity").unwrap()["message"].as_str().unwrap().to_string();
    assert!(pi.contains(&m.controller_role), "names the role the controller uses: {pi}");
    let q = conflicts.iter().find(|c| c["id"] == "queue").unwrap()["message"].as_str().unwrap().to_string();
    assert!(m.rules.iter().all(|(_, name)| q.contains(name.as_str())), "names the module's rules: {q}");

    // Nothing second, nothing repointed, nothing refused.
    for role in [format!("KarpenterController-{}", m.c), format!("KarpenterNodeRole-{}", m.c)] {
        assert!(rt().block_on(sdk.iam.get_role().role_name(&role).send()).is_err(), "{role} was not made");
    }
    let assoc = karpenter_associations(&sdk, &m.c);
    assert_eq!(assoc.len(), 1, "{assoc:?}");
    assert!(assoc[0].1.ends_with(&format!("/{}", m.controller_role)), "{assoc:?}");
    let policy = queue(&sdk, &format!("Karpenter-{}", m.c)).unwrap().attrs["Policy"].clone();
    assert_eq!(
        policy_json(&policy),
        policy_json(&tf_queue_policy(&m.queue_arn, &m.a, false)),
        "the module's queue policy is untouched"
    );
    assert_eq!(rules_to_queue(&sdk, &m.queue_arn).len(), m.rules.len(), "every rule of the module still targets the queue");
}

/// A busy bus's listing can miss a rule: ListRules is read page after page, and a rule ahead of
/// one deleted between two pages shifts it out of both (the lag proxy's `events_list_skips`
/// leaves one of the module's rules out). import still keeps every rule of the module (found
/// through the queue's own index, ListRuleNamesByTarget), so `up --adopt` makes no second rule
/// of that kind, and doctor judges the setup as whole.
#[test]
fn a_rule_the_bus_listing_misses_is_still_kept_by_import_and_seen_by_doctor() {
    let m = make("im-skip", Shape::TfV21);
    let px = LagProxy::start(&cluster_name("im-skip-px"), &endpoint());
    let (_, missed) = m.rules.iter().find(|(part, _)| *part == "SpotInterrupt").cloned().unwrap();
    px.set(json!({"events_list_skips": {&missed: true}, "eks_tag_associations": {&m.c: true}, "eks_access_entry_tags": {&m.c: true}}));
    let run = |args: &[&str]| karpctl_at(&m.wd, px.url(), args, &[]);

    let import = run(&["import", "--cluster", &m.c, "--karpenter-version", "1.14"]);
    assert_eq!(import.code, 0, "{import:?}");
    let skipped = px.calls_json().iter().filter(|c| c["lag"] == "events_list_skips").count();
    assert!(skipped > 0, "the listing left it out: {import:?}");
    let text = std::fs::read_to_string(m.wd.path().join("plans").join(format!("{}.toml", m.c))).unwrap();
    for (_, name) in &m.rules {
        assert!(text.contains(name.as_str()), "rule {name} kept: {text}");
    }
    let doctor = run(&["doctor", "--cluster", &m.c, "--karpenter-version", "1.14", "--output", "json"]);
    let doc = doctor.json();
    let rules: Vec<&str> =
        doc["discovered"]["rules"].as_array().map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect()).unwrap_or_default();
    assert!(rules.contains(&missed.as_str()), "doctor reads {missed}: {doc}");

    let up = run(&["up", "--cluster", &m.c, "--adopt"]);
    assert_eq!(up.code, 0, "{up:?}");
    let rules = rules_to_queue(&sdk(), &m.queue_arn);
    let mut kinds: Vec<String> = rules.values().flatten().cloned().collect();
    kinds.sort();
    let mut all: Vec<String> = RULE_EVENTS.iter().map(|(_, _, d)| d.to_string()).collect();
    all.sort();
    assert!(kinds == all, "one rule per kind, want {all:?}\n{up:?}\nthe rules that target the queue: {rules:?}");
}
