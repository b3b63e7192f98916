//! Saved plans (`diff --out` / `up --plan-file`) and `karpctl output`.

use crate::common::*;
use aws_sdk_sqs::types::QueueAttributeName;

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

    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "nodeclass"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("kind: EC2NodeClass"), "{r:?}");
    assert!(r.stdout.contains(&format!("role: KarpenterNodeRole-{c}")), "{r:?}");
    assert!(r.stdout.contains(&format!("karpenter.sh/discovery: {c}")), "{r:?}");

    let r = karpctl(&wd, &["output", "--cluster", &c, "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["cluster_name"], c.as_str());
    assert_eq!(doc["interruption_queue"], queue_name(&c));
    assert_eq!(doc["node_role_name"], node_role(&c));
    // The role ARN it prints is the live one.
    let live = rt().block_on(sdk().iam.get_role().role_name(controller_role(&c)).send()).unwrap();
    assert_eq!(doc["controller_role_arn"], live.role().unwrap().arn());
    assert_eq!(doc["service_account"]["namespace"], "kube-system");
    assert_eq!(doc["subnets"].as_array().unwrap().len(), 3);
}
