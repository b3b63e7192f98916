//! Saved plans (`diff --out` / `up --plan-file`), `up`'s question on a terminal, and `karpctl
//! output`.

use crate::common::*;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};

fn retention(sdk: &Sdk, queue: &str) -> String {
    rt().block_on(async {
        let u = sdk.sqs.get_queue_url().queue_name(queue).send().await.unwrap();
        let a = sdk
            .sqs
            .get_queue_attributes()
            .queue_url(u.queue_url().unwrap())
            .attribute_names(QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .unwrap();
        a.attributes().unwrap()[&QueueAttributeName::MessageRetentionPeriod].clone()
    })
}

fn set_retention(sdk: &Sdk, queue: &str, value: &str) {
    rt().block_on(async {
        let u = sdk.sqs.get_queue_url().queue_name(queue).send().await.unwrap();
        sdk.sqs
            .set_queue_attributes()
            .queue_url(u.queue_url().unwrap())
            .attributes(QueueAttributeName::MessageRetentionPeriod, value)
            .send()
            .await
            .unwrap();
    });
}

#[test]
fn a_saved_plan_applies_exactly_and_then_the_cluster_is_in_sync() {
    let c = cluster_name("saved");
    seed(&c, &[]);
    let wd = Workdir::new();
    let plan = wd.path().join("plan.json");
    let plan = plan.to_str().unwrap();
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--out", plan]);
    assert_eq!(r.code, 2, "{r:?}");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(plan).unwrap()).unwrap();
    assert_eq!(saved["cluster"], c.as_str());
    let steps = saved["plan"]["steps"].as_array().unwrap().len();
    assert!(steps > 20, "the whole plan is saved: {steps} steps");

    let r = karpctl(&wd, &["up", "--plan-file", plan, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["results"].as_object().unwrap().len(), steps, "exactly the saved steps ran");
    assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
}

#[test]
fn a_saved_plan_is_refused_when_aws_changed_or_it_is_for_another_cluster() {
    let c = cluster_name("stale");
    seed(&c, &[]);
    let wd = Workdir::new();
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let sdk = sdk();
    let queue = queue_name(&c);
    set_retention(&sdk, &queue, "600");
    let plan = wd.path().join("plan.json");
    let plan = plan.to_str().unwrap();
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--out", plan]);
    assert_eq!(r.code, 2, "{r:?}");

    // Someone changes AWS after the plan was reviewed.
    set_retention(&sdk, &queue, "900");
    let r = karpctl(&wd, &["up", "--plan-file", plan]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("AWS changed since the plan was saved"), "{r:?}");
    assert!(r.stderr.contains("queue"), "names what changed: {r:?}");
    assert_eq!(retention(&sdk, &queue), "900", "nothing was applied");

    // A plan for another cluster.
    let r = karpctl(&wd, &["up", "--plan-file", plan, "--cluster", "some-other-cluster"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("the saved plan is for cluster {c}")), "{r:?}");

    // Not a plan at all.
    std::fs::write(wd.path().join("junk.json"), "{}").unwrap();
    let r = karpctl(&wd, &["up", "--plan-file", wd.path().join("junk.json").to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not a karpctl saved plan"), "{r:?}");
    assert_eq!(retention(&sdk, &queue), "900");
}

#[test]
fn output_prints_helm_values_a_nodeclass_and_json_from_live_aws() {
    let c = cluster_name("out");
    seed(&c, &[]);
    let wd = Workdir::new();
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "helm"]);
    assert_eq!(r.code, 1, "fails before up: {r:?}");
    assert!(r.stderr.contains("karpctl up"), "{r:?}");

    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "helm"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("clusterName: {c}")), "{r:?}");
    assert!(r.stdout.contains(&format!("interruptionQueue: Karpenter-{c}")), "{r:?}");
    assert!(r.stdout.contains("name: karpenter"), "{r:?}");
    assert!(r.stdout.contains("--namespace kube-system"), "{r:?}");
    // The chart pinned to the release the permissions were made for, as helm takes a version.
    let install = r.stdout.lines().find(|l| l.contains("helm upgrade --install")).expect("the helm command");
    assert!(install.contains("oci://public.ecr.aws/karpenter/karpenter --version \"~1.14.0\""), "{install}");
    assert!(r.stdout.contains("helm show chart"), "how to pick a patch: {r:?}");
    // output made no association in this run: no restart note.
    assert!(!r.stdout.contains("rollout restart"), "{r:?}");
    // --output is the same flag as --format.
    assert_eq!(karpctl(&wd, &["output", "--cluster", &c, "--output", "helm"]).stdout, r.stdout);

    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "nodeclass"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("kind: EC2NodeClass"), "{r:?}");
    assert!(r.stdout.contains(&format!("role: KarpenterNodeRole-{c}")), "{r:?}");
    assert!(r.stdout.contains(&format!("karpenter.sh/discovery: {c}")), "{r:?}");

    // An EC2NodeClass and a NodePool using it, for `kubectl apply -f -`.
    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "manifests"]);
    assert_eq!(r.code, 0, "{r:?}");
    let docs: Vec<&str> = r.stdout.split("\n---\n").collect();
    assert_eq!(docs.len(), 2, "{r:?}");
    assert!(docs[0].contains("kind: EC2NodeClass") && docs[0].contains(&format!("role: KarpenterNodeRole-{c}")), "{r:?}");
    assert!(docs[1].contains("kind: NodePool") && docs[1].contains("nodeClassRef:"), "{r:?}");
    assert!(docs[1].contains("karpenter.sh/capacity-type") && docs[1].contains("disruption:"), "{r:?}");
    assert!(r.stdout.contains("- alias: al2023@"), "{r:?}");

    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["karpenter_version"], "1.14");
    assert_eq!(doc["cluster_name"], c.as_str());
    assert_eq!(doc["interruption_queue"], queue_name(&c));
    assert_eq!(doc["node_role_name"], node_role(&c));
    // The role ARN it prints is the live one.
    let live = rt().block_on(sdk().iam.get_role().role_name(controller_role(&c)).send()).unwrap();
    assert_eq!(doc["controller_role_arn"], live.role().unwrap().arn());
    assert_eq!(doc["service_account"]["namespace"], "kube-system");
    assert_eq!(doc["subnets"].as_array().unwrap().len(), 3);
}

/// karpctl in `wd` with its stdin on a pseudo-terminal (stdout and stderr stay pipes), `answer`
/// typed on it: python's pty module from the project venv opens the terminal.
fn karpctl_on_terminal(wd: &Workdir, args: &[&str], answer: &str) -> Run {
    const PTY: &str = r#"
import os, pty, subprocess, sys, threading
answer, cmd = sys.argv[1], sys.argv[2:]
master, slave = pty.openpty()
p = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
os.close(slave)
os.write(master, (answer + "\n").encode())
def drain():
    try:
        while os.read(master, 4096):
            pass
    except OSError:
        pass
threading.Thread(target=drain, daemon=True).start()
out, err = p.communicate()
sys.stdout.buffer.write(out)
sys.stderr.buffer.write(err)
sys.exit(p.returncode)
"#;
    let inner = karpctl_command(wd, args, &[]);
    let mut cmd = std::process::Command::new(repo().join(".venv/bin/python"));
    cmd.arg("-c").arg(PTY).arg(answer).arg(karpctl_bin()).args(args).current_dir(wd.path());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().expect("run karpctl on a pseudo-terminal");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn profile_exists(sdk: &Sdk, c: &str) -> bool {
    rt().block_on(sdk.iam.get_instance_profile().instance_profile_name(instance_profile(c)).send()).is_ok()
}

fn queue_exists(sdk: &Sdk, c: &str) -> bool {
    rt().block_on(sdk.sqs.get_queue_url().queue_name(queue_name(c)).send()).is_ok()
}

#[test]
fn up_on_a_terminal_asks_before_it_deletes_and_only_yes_goes_on() {
    let c = cluster_name("ask");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let settings = |profile: bool, queue: bool| {
        wd.plan(&c, &format!("cluster = \"{c}\"\n[identity]\ninstance_profile = {profile}\n[interruption]\nenabled = {queue}\n"));
    };

    // A plan that only creates does not ask, even on a terminal.
    settings(true, true);
    let r = karpctl_on_terminal(&wd, &["up", "--cluster", &c], "no");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("Only 'yes'"), "no question without a delete: {r:?}");
    assert!(profile_exists(&sdk, &c) && queue_exists(&sdk, &c));

    // It deletes the instance profile and the queue (with its policy and rules): asked, "no".
    settings(false, false);
    let r = karpctl_on_terminal(&wd, &["up", "--cluster", &c], "no");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("Only 'yes' is accepted"), "it asked: {r:?}");
    assert!(r.stderr.contains("up cancelled; nothing was changed"), "{r:?}");
    // stdout is a pipe here: the plan is shown with the question, on the terminal's stderr.
    assert!(r.stderr.contains("will be destroyed"), "the plan was shown before the question: {r:?}");
    assert!(
        r.all().contains(&format!(
            "SQS queue {} is deleted: it is the queue Karpenter's settings.interruptionQueue names if you installed it from `karpctl output`",
            queue_name(&c)
        )),
        "the plan says which queue Karpenter's settings name: {r:?}"
    );
    assert!(profile_exists(&sdk, &c) && queue_exists(&sdk, &c), "nothing was changed");

    // "yes" goes on.
    let r = karpctl_on_terminal(&wd, &["up", "--cluster", &c], "yes");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("Only 'yes' is accepted"), "{r:?}");
    assert!(!profile_exists(&sdk, &c) && !queue_exists(&sdk, &c), "deleted after yes: {r:?}");

    // --yes skips the question; without a terminal (CI) it never asks.
    settings(true, false);
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    settings(false, false);
    let r = karpctl_on_terminal(&wd, &["up", "--cluster", &c, "--yes"], "no");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("Only 'yes'") && !profile_exists(&sdk, &c), "{r:?}");
    settings(true, false);
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    settings(false, false);
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "no terminal: no question, as in CI: {r:?}");
    assert!(!profile_exists(&sdk, &c));

    // Several clusters on one terminal cannot each ask: a deleting plan is refused unless --yes.
    settings(true, false);
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    settings(false, false);
    let r = karpctl_on_terminal(&wd, &["up", "--clusters", &c], "yes");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.all().contains("nothing was changed") && profile_exists(&sdk, &c), "{r:?}");
    let r = karpctl_on_terminal(&wd, &["up", "--clusters", &c, "--yes"], "no");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!profile_exists(&sdk, &c));
}

/// Cluster names YAML 1.1 reads as numbers, booleans or null (EKS allows each) come out of
/// `output` as the strings they are, in every format: read back by a YAML 1.2 loader and the way
/// Kubernetes and Helm read YAML (go-yaml v2: `yes` and `on` are booleans, `0x1f` an integer).
#[test]
fn output_of_clusters_named_like_numbers_or_booleans_reads_back_as_strings() {
    use crate::common::yaml::{yaml_1_1, yaml_1_2};
    let names = ["2024", "true", "yes", "null", "1e3", "0x1f", "on"];
    let wd = Workdir::new();
    for c in names {
        seed(c, &[]);
    }
    let r = karpctl(&wd, &["up", "--clusters", &names.join(",")]);
    assert_eq!(r.code, 0, "{r:?}");
    for c in names {
        let discovery = json!([{"tags": {"karpenter.sh/discovery": c}}]);
        for format in ["helm", "nodeclass", "manifests", "json"] {
            let r = karpctl(&wd, &["output", "--cluster", c, "--format", format]);
            assert_eq!(r.code, 0, "{format} for {c}: {r:?}");
            let (as_1_1, as_1_2) = (yaml_1_1(&r.stdout), yaml_1_2(&r.stdout));
            assert_eq!(as_1_1, as_1_2, "{format} for {c:?} reads the same as YAML 1.1 and 1.2:\n{}", r.stdout);
            let d = &as_1_1[0];
            match format {
                "helm" => {
                    assert_eq!(d["settings"]["clusterName"], json!(c), "{}", r.stdout);
                    assert_eq!(d["settings"]["interruptionQueue"], json!(queue_name(c)), "{}", r.stdout);
                }
                "nodeclass" | "manifests" => {
                    assert_eq!(d["spec"]["role"], json!(node_role(c)), "{}", r.stdout);
                    assert_eq!(d["spec"]["subnetSelectorTerms"], discovery, "{}", r.stdout);
                    assert_eq!(d["spec"]["securityGroupSelectorTerms"], discovery, "{}", r.stdout);
                }
                _ => assert_eq!(d["cluster_name"], json!(c), "{}", r.stdout),
            }
        }
    }
}

/// After `up`, the next step when what `output` hands on changed, and only then: the `helm
/// upgrade` line for the values (a fresh setup, the pin), `kubectl` for the EC2NodeClass (the
/// instance profile), nothing when in sync; in human and JSON output.
#[test]
fn up_says_to_run_helm_upgrade_only_when_the_values_it_hands_on_changed() {
    let c = cluster_name("next");
    seed(&c, &[]);
    let wd = Workdir::new();
    let helm = |v: &str| {
        format!(
            "helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter --version \"~{v}.0\" --namespace kube-system --reset-then-reuse-values -f values.yaml"
        )
    };
    let values = format!("karpctl output --cluster {c} --format helm > values.yaml");

    // A fresh setup: Karpenter is installed against it, with the NodePool too.
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("next: Karpenter's Helm values changed ("), "{r:?}");
    assert!(r.stdout.contains(&format!("SQS queue {} was created (settings.interruptionQueue)", queue_name(&c))), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().map(str::trim).collect();
    let at = lines.iter().position(|l| *l == values).unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(lines[at + 1], helm("1.14"), "{r:?}");
    assert!(lines.contains(&format!("karpctl output --cluster {c} --format manifests | kubectl apply -f -").as_str()), "{r:?}");

    // In sync: nothing to pass on.
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("next:") && !r.stdout.contains("helm upgrade"), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.json()["next_steps"], Value::Null, "{r:?}");

    // The instance profile: the EC2NodeClass changes, the Helm values do not.
    wd.plan(&c, &format!("cluster = \"{c}\"\n[identity]\ninstance_profile = true\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("next: the EC2NodeClass changed ("), "{r:?}");
    assert!(r.stdout.contains(&format!("karpctl output --cluster {c} --format nodeclass | kubectl diff -f -")), "{r:?}");
    assert!(!r.stdout.contains("helm upgrade"), "the values did not change: {r:?}");

    // The pin: the chart version, in JSON too.
    wd.plan(&c, &format!("cluster = \"{c}\"\n[identity]\ninstance_profile = true\nkarpenter_version = \"1.10\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let next = &r.json()["next_steps"];
    assert_eq!(next["helm_commands"], json!([values, helm("1.10")]), "{r:?}");
    let why = next["helm_values"].to_string();
    assert!(
        why.contains("the controller's policies were ") && why.contains("1.14") && why.contains("and are now 1.10's"),
        "{r:?}"
    );
    assert_eq!(next["nodeclass"], json!([]), "{r:?}");
}

#[test]
fn a_saved_plan_runs_the_pod_identity_checks_that_up_runs() {
    const TAGS: &str = "pod-identity-session-tags-disabled";
    let c = cluster_name("saved-pia");
    let s = seed(&c, &[]);
    let account = s["account_id"].as_str().unwrap().to_string();
    let wd = Workdir::new();
    assert_eq!(karpctl(&wd, &["up", "--cluster", &c]).code, 0);
    // The association is now an EKS add-on's (ownerArn, which the emulator cannot set: the lag
    // proxy lays it over), with session tags off while the controller role's trust needs them.
    let sdk = sdk();
    let (id, _) = karpenter_associations(&sdk, &c).remove(0);
    let update = sdk.eks.update_pod_identity_association().cluster_name(&c).association_id(&id).disable_session_tags(true);
    rt().block_on(update.send()).expect("UpdatePodIdentityAssociation");
    let px = lag::LagProxy::start(&cluster_name("saved-pia-px"), &endpoint());
    let addon = format!("arn:aws:eks:{REGION}:{account}:addon/{c}/karpenter/0123");
    px.set(serde_json::json!({"eks_association_fields": {&c: {"ownerArn": &addon}}}));
    let run = |args: &[&str]| karpctl_at(&wd, px.url(), args, &[]);

    let up = run(&["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(up.code, 1, "plain up: {up:?}");
    assert_eq!(found_severities(&up).get(TAGS).map(String::as_str), Some("error"), "{up:?}");

    let plan = wd.path().join("plan.json");
    let plan = plan.to_str().unwrap();
    let diff = run(&["diff", "--cluster", &c, "--out", plan]);
    assert_eq!(diff.code, 1, "nothing karpctl may change, but an error-level check: {diff:?}");
    let saved = run(&["up", "--plan-file", plan, "--output", "json"]);
    assert_eq!(saved.code, 1, "the saved plan's up judges the association as up does: {saved:?}");
    let doc = saved.json();
    assert!(checked(&doc).iter().any(|c| c == TAGS), "{doc}");
    assert_eq!(found_severities(&saved).get(TAGS).map(String::as_str), Some("error"), "{saved:?}");
}
