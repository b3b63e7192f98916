//! User tags (`[tags]`) read as Terraform shows them, and a tag the plan no longer names is
//! removed where karpctl set it, while tags others set stay (#34 item 8).

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::json;
use std::collections::BTreeMap;

fn plan(c: &str, tags: &str) -> String {
    plan_toml(c, &format!("\n[tags]\n{tags}\n"))
}

fn role_tags(sdk: &Sdk, name: &str) -> BTreeMap<String, String> {
    let r = rt().block_on(sdk.iam.get_role().role_name(name).send()).expect("iam:GetRole");
    r.role().unwrap().tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

#[test]
fn a_dropped_tag_goes_where_karpctl_set_it_and_others_tags_stay() {
    let c = cluster_name("tags-track");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    // ministack cannot tag an association by ARN nor answers an access entry's tags; AWS does.
    let px = LagProxy::start(&cluster_name("tags-track-px"), &endpoint());
    px.set(json!({"eks_tag_associations": {&c: true}, "eks_access_entry_tags": {&c: true}}));
    let karpctl = |wd: &Workdir, args: &[&str]| karpctl_at(wd, px.url(), args, &[]);
    let second_up_writes_nothing = || {
        let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.writes(), 0, "second up must make no write call: {}", r.stdout);
        assert_eq!(karpctl(&wd, &["diff", "--cluster", &c]).code, 0);
    };
    wd.plan(&c, &plan(&c, "team = \"platform\"\nenv = \"dev\""));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let role = format!("KarpenterNodeRole-{c}");
    assert_eq!(
        role_tags(&sdk, &role).get("karpctl.io/tags").map(String::as_str),
        Some("env team"),
        "{:?}",
        role_tags(&sdk, &role)
    );
    // Someone else tags the role and the queue.
    rt().block_on(
        sdk.iam
            .tag_role()
            .role_name(&role)
            .tags(aws_sdk_iam::types::Tag::builder().key("cost-center").value("42").build().unwrap())
            .send(),
    )
    .unwrap();
    let q = queue(&sdk, &format!("Karpenter-{c}")).expect("queue");
    rt().block_on(sdk.sqs.tag_queue().queue_url(&q.url).tags("cost-center", "42").send()).unwrap();

    // The plan drops env and adds owner: one line each, the unchanged ones counted.
    wd.plan(&c, &plan(&c, "team = \"platform\"\nowner = \"sre\""));
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 2, "{diff:?}");
    let node_role = block(&diff.stdout, "~ node-role ");
    assert!(node_role.contains("~ tags = {"), "{node_role}");
    assert!(node_role.contains("+ \"owner\" = \"sre\""), "{node_role}");
    assert!(node_role.contains("- \"env\" = \"dev\""), "{node_role}");
    assert!(node_role.contains("~ \"karpctl.io/tags\" = \"env team\" -> \"owner team\""), "{node_role}");
    assert!(node_role.contains("# (3 unchanged tags)"), "team, karpctl.io/cluster, karpctl.io/resource: {node_role}");
    assert!(!node_role.contains("cost-center"), "others' tags are not karpctl's business: {node_role}");
    assert!(node_role.lines().count() < 12, "a tag change reads in a few lines: {node_role}");

    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let t = role_tags(&sdk, &role);
    assert_eq!(t.get("owner").map(String::as_str), Some("sre"));
    assert!(!t.contains_key("env"), "the dropped tag is gone: {t:?}");
    assert_eq!(t.get("cost-center").map(String::as_str), Some("42"), "others' tag stays: {t:?}");
    let q = queue(&sdk, &format!("Karpenter-{c}")).expect("queue");
    assert!(!q.tags.contains_key("env") && q.tags.get("owner").map(String::as_str) == Some("sre"), "{:?}", q.tags);
    assert_eq!(q.tags.get("cost-center").map(String::as_str), Some("42"), "{:?}", q.tags);
    second_up_writes_nothing();

    // No user tags left: the record goes too, others' tags stay.
    wd.plan_for(&c, "");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let t = role_tags(&sdk, &role);
    assert!(!t.contains_key("team") && !t.contains_key("owner") && !t.contains_key("karpctl.io/tags"), "{t:?}");
    assert_eq!(t.get("cost-center").map(String::as_str), Some("42"), "{t:?}");
    second_up_writes_nothing();
}

#[test]
fn a_tag_key_renamed_only_in_case_converges_in_one_up() {
    let c = cluster_name("tags-case");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let px = LagProxy::start(&cluster_name("tags-case-px"), &endpoint());
    px.set(json!({"eks_tag_associations": {&c: true}, "eks_access_entry_tags": {&c: true}}));
    let karpctl = |wd: &Workdir, args: &[&str]| karpctl_at(wd, px.url(), args, &[]);
    wd.plan(&c, &plan(&c, "team = \"platform\""));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");

    // `team` becomes `Team`: one up, then nothing left to do.
    wd.plan(&c, &plan(&c, "Team = \"platform\""));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "one up converges a key renamed in case: {diff:?}");
    let role = role_tags(&sdk, &format!("KarpenterNodeRole-{c}"));
    assert_eq!(role.get("Team").map(String::as_str), Some("platform"), "{role:?}");
    assert!(!role.contains_key("team"), "{role:?}");
    assert_eq!(role.get("karpctl.io/tags").map(String::as_str), Some("Team"), "{role:?}");
    let q = queue(&sdk, &format!("Karpenter-{c}")).expect("queue");
    assert!(q.tags.contains_key("Team") && !q.tags.contains_key("team"), "{:?}", q.tags);
}
