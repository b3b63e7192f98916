//! A takeover's plan hides no delete, and its order keeps the controller's permissions: the old
//! controller policy that `identity.retire_policies` names is shown with `-` and counted in "to
//! destroy" (human and JSON); an attachment already in place is not "updated"; `up --adopt`
//! stops before any write when attaching karpctl's policies would pass the role's quota of
//! managed policies (read from `iam:GetAccountSummary`, raised through the lag proxy); and between
//! the last attach and the first detach it waits for IAM to settle, saying so in progress.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};

fn trust_pods() -> String {
    json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}
    ]})
    .to_string()
}

fn allow(action: &str) -> String {
    json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}]}).to_string()
}

/// A setup another tool made, at path `/`: the controller role with its old combined policy and
/// `extra` more managed policies attached, the node role with AmazonEKSWorkerNodePolicy. Returns
/// the old policy's ARN and the plan that takes it over (retiring the old policy).
fn premade(c: &str, extra: usize) -> (String, String) {
    let sdk = sdk();
    rt().block_on(async {
        sdk.iam.create_role().role_name(node_role(c)).assume_role_policy_document(TRUST_EC2).send().await.unwrap();
        sdk.iam
            .attach_role_policy()
            .role_name(node_role(c))
            .policy_arn(aws_managed("AmazonEKSWorkerNodePolicy"))
            .send()
            .await
            .unwrap();
        sdk.iam.create_role().role_name(controller_role(c)).assume_role_policy_document(trust_pods()).send().await.unwrap();
        let mut arns = Vec::new();
        let names = std::iter::once(format!("OldKarpenter-{c}")).chain((0..extra).map(|i| format!("Extra{i}-{c}")));
        for name in names {
            let p = sdk.iam.create_policy().policy_name(&name).policy_document(allow("ec2:DescribeImages")).send().await.unwrap();
            let arn = p.policy().unwrap().arn().unwrap().to_string();
            sdk.iam.attach_role_policy().role_name(controller_role(c)).policy_arn(&arn).send().await.unwrap();
            arns.push(arn);
        }
        let old = arns[0].clone();
        let plan = plan_toml(c, &format!("[identity]\npath = \"/\"\nretire_policies = [\"{old}\"]\n"));
        (old, plan)
    })
}

/// The step id of the retired policy `arn`.
fn retired_id(arn: &str) -> String {
    format!("retired-policy-{}", arn.rsplit('/').next().unwrap())
}

#[test]
fn a_retired_policy_is_shown_as_destroyed_and_a_kept_attachment_is_not_updated() {
    let c = cluster_name("tp-diff");
    seed(&c, &[]);
    let _spot = spot_role_present(&sdk());
    let (old, plan) = premade(&c, 0);
    let wd = Workdir::new();
    wd.plan(&c, &plan);
    let id = retired_id(&old);

    let r = karpctl(&wd, &["diff", "--cluster", &c, "--adopt"]);
    assert_eq!(r.code, 2, "{r:?}");
    let b = block(&r.stdout, &format!("  - {id} retired_policy"));
    assert!(b.contains("will be destroyed"), "{b}");
    assert!(b.contains("deleted if nothing else uses it"), "{b}");
    let summary = r.stdout.lines().find(|l| l.starts_with("Plan: ")).expect("a Plan: line");
    assert!(summary.ends_with(" 1 to destroy."), "the retired policy is a destroy: {summary}\n{r:?}");
    // The node role's attachment already in place: taken over with its role, nothing to update.
    assert!(!r.stdout.contains("node-role-policy-AmazonEKSWorkerNodePolicy"), "{r:?}");
    assert!(r.stdout.contains("~ node-role aws_iam_role"), "its role is adopted: {r:?}");

    let r = karpctl(&wd, &["diff", "--cluster", &c, "--adopt", "--output", "json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let doc = r.json();
    assert_eq!(doc["summary"]["destroy"], 1, "{doc}");
    let actions = steps(&r);
    assert_eq!(actions.get(&id).map(String::as_str), Some("delete"), "{actions:?}");
    assert!(!actions.contains_key("node-role-policy-AmazonEKSWorkerNodePolicy"), "{actions:?}");
    let unchanged: Vec<&str> = doc["unchanged"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(unchanged.contains(&"node-role-policy-AmazonEKSWorkerNodePolicy"), "{unchanged:?}");
    // Every change counted is a step that changes something.
    for s in doc["steps"].as_array().unwrap() {
        assert!(s["action"] == "create" || s["action"] == "delete" || !s["changes"].as_array().unwrap().is_empty(), "{s}");
    }
}

#[test]
fn up_adopt_stops_before_any_write_when_the_role_has_no_room_for_karpctls_policies() {
    let c = cluster_name("tp-quota");
    seed(&c, &[]);
    let _spot = spot_role_present(&sdk());
    // The old policy and 8 more: 9 managed policies on the controller role; karpctl attaches 5.
    let (old, plan) = premade(&c, 8);
    let wd = Workdir::new();
    wd.plan(&c, &plan);
    let role = controller_role(&c);
    let before = attached(&sdk(), &role);
    assert_eq!(before.len(), 9);

    let r = karpctl(&wd, &["up", "--cluster", &c, "--adopt", "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.writes(), 0, "nothing written: {}", r.stdout);
    let doc = r.json();
    let msg = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&format!("IAM role {role} has 9 managed policies attached and this plan attaches 5 more")), "{msg}");
    assert!(msg.contains("14 in all, over the account's quota of 10"), "{msg}");
    assert!(doc["error"]["hint"].as_str().unwrap_or_default().contains("Managed policies per role"), "{doc}");
    assert_eq!(doc["error"]["policies_per_role"]["quota"], 10, "{doc}");
    let r = karpctl(&wd, &["up", "--cluster", &c, "--adopt"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("error: IAM role {role} has 9 managed policies")), "{r:?}");
    assert!(r.stderr.contains("hint: raise the quota in Service Quotas"), "{r:?}");
    assert_eq!(attached(&sdk(), &role), before, "nothing attached or detached");
    let tags = rt().block_on(sdk().iam.get_role().role_name(&role).send()).unwrap().role().unwrap().tags().to_vec();
    assert!(tags.iter().all(|t| t.key() != OWNER_TAG), "the role was not adopted: {tags:?}");
    // diff says what up would do.
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--adopt"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("warning: IAM role") && r.stdout.contains("`karpctl up` stops before any write"), "{r:?}");

    let px = LagProxy::start(&cluster_name("tp-quota-px"), &endpoint());
    // A quota the environment says (KARPCTL_IAM_POLICIES_PER_ROLE, for credentials that may not
    // call GetAccountSummary): it fits, without asking IAM.
    let r = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c, "--adopt"], &[("KARPCTL_IAM_POLICIES_PER_ROLE", "20")]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!r.stdout.contains("warning: IAM role") && !r.stderr.contains("GetAccountSummary"), "{r:?}");
    assert!(!px.calls_json().iter().any(|c| c["operation"] == "GetAccountSummary"), "IAM was not asked");

    // A raised quota (GetAccountSummary through the lag proxy): it fits, and up goes through.
    px.set(json!({"iam_account_summary": {"AttachedPoliciesPerRoleQuota": 20}}));
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--adopt"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(px.calls_json().iter().any(|c| c["operation"] == "GetAccountSummary" && c["lag"] == "iam_account_summary"));
    let now = attached(&sdk(), &role);
    assert_eq!(now.len(), 13, "8 kept, 5 of karpctl's, the old one off: {now:?}");
    assert!(!now.contains(&old), "{now:?}");
}

#[test]
fn retiring_waits_for_iam_to_settle_between_the_last_attach_and_the_first_detach() {
    let c = cluster_name("tp-settle");
    seed(&c, &[]);
    let _spot = spot_role_present(&sdk());
    let (old, plan) = premade(&c, 0);
    let wd = Workdir::new();
    wd.plan(&c, &plan);
    let role = controller_role(&c);
    let id = retired_id(&old);
    let px = LagProxy::start(&cluster_name("tp-settle-px"), &endpoint());

    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--adopt"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    // Progress: every attachment complete, then the wait, then the retirement done.
    let line = |needle: &str| r.stderr.lines().position(|l| l.contains(needle));
    let last_attach = r
        .stderr
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("controller-policy-attachment-") && l.contains("Creation complete"))
        .map(|(i, _)| i)
        .max()
        .unwrap_or_else(|| panic!("attachments made: {r:?}"));
    let wait = line(&format!("{id}: waiting for IAM to settle")).unwrap_or_else(|| panic!("the wait is said: {r:?}"));
    let done = line(&format!("{id}: Destruction complete")).unwrap_or_else(|| panic!("retired: {r:?}"));
    assert!(last_attach < wait && wait < done, "attach ({last_attach}) < wait ({wait}) < detach ({done}):\n{}", r.stderr);
    // The calls: the last AttachRolePolicy on the role, then the reads that agree, then the
    // first DetachRolePolicy.
    let calls: Vec<(String, Option<String>)> = px
        .calls_json()
        .iter()
        .map(|c| (c["operation"].as_str().unwrap_or_default().to_string(), c["resource"].as_str().map(str::to_string)))
        .collect();
    let on_role = |op: &str| -> Vec<usize> {
        calls.iter().enumerate().filter(|(_, (o, r))| o == op && r.as_deref() == Some(role.as_str())).map(|(i, _)| i).collect()
    };
    let attach = *on_role("AttachRolePolicy").last().expect("AttachRolePolicy on the controller role");
    let detach = *on_role("DetachRolePolicy").first().expect("DetachRolePolicy on the controller role");
    let reads = on_role("ListAttachedRolePolicies").into_iter().filter(|i| *i > attach && *i < detach).count();
    assert!(attach < detach, "{calls:?}");
    assert!(reads >= 5, "the role's policies read until they agree between the attach and the detach ({reads}): {calls:?}");
    assert!(!attached(&sdk(), &role).contains(&old));
    assert!(rt().block_on(sdk().iam.get_policy().policy_arn(&old).send()).is_err(), "the old policy is deleted");
}
