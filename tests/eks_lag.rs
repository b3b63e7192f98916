//! EKS behaviours of real AWS that the emulators hide (docs/aws-behaviour.md section 9): a cluster
//! that is not ACTIVE (UPDATING during a version upgrade, DELETING, FAILED, already deleted), EKS
//! refusing a role's trust policy right after it changed, Pod Identity fields set out of band, an
//! access entry that lingers after its delete, an IAM path change, a CONFIG_MAP cluster on `down`.
//! The lag proxy (tests/common/lag.rs) fakes the cluster's status and EKS's view of a role; the
//! microburst proxy injects errors. Results are read back through the AWS SDK.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_eks::types::AccessEntry;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn seeded(prefix: &str) -> (String, Workdir) {
    let c = cluster_name(prefix);
    let s = seed(&c, &[]);
    ACCOUNT.get_or_init(|| s["account_id"].as_str().unwrap_or("000000000000").to_string());
    (c, Workdir::new())
}

fn plan(wd: &Workdir, c: &str, identity: &str) {
    wd.plan_for(c, &format!("\n[identity]\n{identity}"));
}

fn up(wd: &Workdir, c: &str) -> Run {
    let r = karpctl(wd, &["up", "--cluster", c]);
    assert_eq!(r.code, 0, "up: {r:?}");
    r
}

/// The node role's ARN under IAM path `path`.
fn node_role_arn(sdk: &Sdk, c: &str, path: &str) -> String {
    let _ = sdk;
    let account = ACCOUNT.get().expect("a cluster was seeded");
    format!("arn:aws:iam::{account}:role{path}{}", node_role(c))
}

static ACCOUNT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn access_entry(sdk: &Sdk, c: &str, principal: &str) -> Option<AccessEntry> {
    rt().block_on(sdk.eks.describe_access_entry().cluster_name(c).principal_arn(principal).send()).ok()?.access_entry().cloned()
}

fn access_entry_principals(sdk: &Sdk, c: &str) -> Vec<String> {
    rt().block_on(sdk.eks.list_access_entries().cluster_name(c).send()).unwrap().access_entries().to_vec()
}

fn role_exists(sdk: &Sdk, name: &str) -> bool {
    rt().block_on(sdk.iam.get_role().role_name(name).send()).is_ok()
}

fn delete_associations(sdk: &Sdk, c: &str) {
    for (id, _) in karpenter_associations(sdk, c) {
        rt().block_on(sdk.eks.delete_pod_identity_association().cluster_name(c).association_id(id).send()).unwrap();
    }
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The time of the first call of `op` the lag proxy logged.
fn first_call(px: &LagProxy, op: &str) -> Option<f64> {
    px.calls_json().iter().find(|c| c["operation"] == op).and_then(|c| c["time"].as_f64())
}

// ------------------------------------------------------------------- A. Pod Identity

#[test]
fn switching_irsa_to_pod_identity_waits_out_eks_refusing_the_just_changed_trust_policy() {
    let (c, wd) = seeded("e-a1sw");
    let sdk = sdk();
    create_oidc_provider(&sdk, &c);
    plan(&wd, &c, "mode = \"irsa\"\n");
    up(&wd, &c);
    assert!(karpenter_associations(&sdk, &c).is_empty());

    // For 3 s after UpdateAssumeRolePolicy, EKS answers "Trust policy of the role provided is invalid".
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_role_propagation_s": {controller_role(&c): 3}}));
    plan(&wd, &c, "mode = \"pod_identity\"\n");
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(r.code, 0, "the mode switch converges once EKS sees the new trust policy: {r:?}");
    assert!(px.count("UpdateAssumeRolePolicy") >= 1, "{:?}", px.calls());
    assert!(px.count("CreatePodIdentityAssociation") > 1, "the refusal was retried: {:?}", px.calls());
    assert!(r.stderr.contains("pod-identity: eks:CreatePodIdentityAssociation returned InvalidParameterException"), "{r:?}");
    let assoc = karpenter_associations(&sdk, &c);
    assert_eq!(assoc.len(), 1, "{assoc:?}");
    assert!(assoc[0].1.ends_with(&format!("/{}", controller_role(&c))), "{assoc:?}");
}

#[test]
fn a_refused_trust_policy_this_run_did_not_change_is_an_error_naming_the_cause() {
    let (c, wd) = seeded("e-a1no");
    let sdk = sdk();
    up(&wd, &c);
    delete_associations(&sdk, &c);
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "eks", "operation": "CreatePodIdentityAssociation", "times": 3,
                "error": {"code": "InvalidParameterException", "message": "Trust policy of the role provided is invalid"}}]),
    );
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(px.fired("CreatePodIdentityAssociation"), 1, "not retried: the trust policy was not just changed: {r:?}");
    for needle in ["trust policy", "pods.eks.amazonaws.com", "sts:AssumeRole", "sts:TagSession"] {
        assert!(r.stderr.contains(needle), "the error names the cause ({needle}): {r:?}");
    }
}

#[test]
fn session_tags_and_a_session_policy_set_out_of_band_are_shown_and_repaired() {
    let (c, wd) = seeded("e-a2");
    let sdk = sdk();
    up(&wd, &c);
    let (id, _) = karpenter_associations(&sdk, &c).remove(0);
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"ec2:*","Resource":"*"}]}"#;
    rt().block_on(
        sdk.eks
            .update_pod_identity_association()
            .cluster_name(&c)
            .association_id(&id)
            .disable_session_tags(true)
            .policy(policy)
            .send(),
    )
    .expect("UpdatePodIdentityAssociation out of band");

    let d = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(d.code, 2, "diff shows the drift: {d:?}");
    assert!(d.stdout.contains("disable_session_tags"), "{d:?}");
    assert!(d.stdout.contains("session_policy"), "{d:?}");

    up(&wd, &c);
    let assoc = karpenter_associations(&sdk, &c);
    assert_eq!(assoc.len(), 1, "{assoc:?}");
    let live = rt().block_on(describe_association(&sdk, &c, &assoc[0].0));
    let a = live.association().unwrap();
    assert_eq!(a.disable_session_tags(), Some(false), "{a:?}");
    assert!(a.policy().unwrap_or("").is_empty(), "the session policy is gone: {a:?}");
    assert!(a.target_role_arn().unwrap_or("").is_empty(), "{a:?}");
    let d = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(d.code, 0, "converged: {d:?}");
}

// ----------------------------------------------------------------- B. cluster status

/// Everything karpctl makes outside EKS is gone.
fn assert_non_eks_removed(sdk: &Sdk, c: &str) {
    assert!(queue(sdk, &queue_name(c)).is_none(), "queue removed");
    assert!(!role_exists(sdk, &node_role(c)), "node role removed");
    assert!(!role_exists(sdk, &controller_role(c)), "controller role removed");
}

#[test]
fn down_works_after_the_cluster_was_deleted() {
    let (c, wd) = seeded("e-b1gone");
    let sdk = sdk();
    up(&wd, &c);
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_gone": [c.clone()]}));
    let r = karpctl_at(&wd, px.url(), &["down", "--cluster", &c, "--yes"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("went with the cluster"), "{r:?}");
    assert_non_eks_removed(&sdk, &c);
}

fn down_on(status: &str, prefix: &str) {
    let (c, wd) = seeded(prefix);
    let sdk = sdk();
    up(&wd, &c);
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: status}}));
    let r = karpctl_at(&wd, px.url(), &["down", "--cluster", &c, "--yes"], &[]);
    assert_eq!(r.code, 0, "{status}: {r:?}");
    assert!(r.stderr.contains("went with the cluster"), "{status}: {r:?}");
    assert_non_eks_removed(&sdk, &c);
    assert_eq!(px.count("DeleteAccessEntry"), 0, "{status}: the access entry goes with the cluster: {:?}", px.calls());
    assert_eq!(px.count("DeletePodIdentityAssociation"), 0, "{status}: {:?}", px.calls());
}

#[test]
fn down_works_on_a_deleting_cluster() {
    down_on("DELETING", "e-b1del");
}

#[test]
fn down_works_on_a_failed_cluster() {
    down_on("FAILED", "e-b1fail");
}

#[test]
fn down_on_an_updating_cluster_removes_the_eks_objects_once_it_is_active() {
    let (c, wd) = seeded("e-b1upd");
    let sdk = sdk();
    up(&wd, &c);
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: "UPDATING"}}));
    let url = px.url().to_string();
    let r = std::thread::scope(|s| {
        let h = s.spawn(|| karpctl_at(&wd, &url, &["down", "--cluster", &c, "--yes"], &[]));
        std::thread::sleep(Duration::from_secs(4));
        px.set(json!({"eks_cluster_status": {&c: null}}));
        h.join().unwrap()
    });
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("waiting for EKS cluster"), "{r:?}");
    assert_non_eks_removed(&sdk, &c);
    assert!(access_entry(&sdk, &c, &node_role_arn(&sdk, &c, &iam_path(&c))).is_none(), "entry removed once ACTIVE");
    assert!(karpenter_associations(&sdk, &c).is_empty());
}

#[test]
fn diff_works_while_the_cluster_is_updating() {
    let (c, wd) = seeded("e-b2");
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: "UPDATING"}}));
    let r = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c], &[]);
    assert_eq!(r.code, 2, "diff shows the plan: {r:?}");
    assert!(r.stderr.contains("UPDATING"), "a note says so: {r:?}");
    assert!(r.stdout.contains("node-access-entry"), "{r:?}");
}

#[test]
fn up_on_an_updating_cluster_does_the_rest_at_once_and_the_eks_steps_once_it_is_active() {
    let (c, wd) = seeded("e-b3wait");
    let sdk = sdk();
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: "UPDATING"}}));
    let url = px.url().to_string();
    let (r, active_at) = std::thread::scope(|s| {
        let h = s.spawn(|| karpctl_at(&wd, &url, &["up", "--cluster", &c], &[]));
        std::thread::sleep(Duration::from_secs(6));
        let at = now_s();
        px.set(json!({"eks_cluster_status": {&c: null}}));
        (h.join().unwrap(), at)
    });
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("waiting for EKS cluster"), "progress shows the wait: {r:?}");
    for op in ["CreateRole", "CreateQueue", "PutRule"] {
        let t = first_call(&px, op).unwrap_or_else(|| panic!("no {op}"));
        assert!(t < active_at, "{op} did not wait for the cluster ({t} >= {active_at})");
    }
    let t = first_call(&px, "CreateAccessEntry").expect("CreateAccessEntry");
    assert!(t >= active_at, "the access entry waited for ACTIVE ({t} < {active_at})");
    let t = first_call(&px, "CreatePodIdentityAssociation").expect("CreatePodIdentityAssociation");
    assert!(t >= active_at, "the association waited for ACTIVE ({t} < {active_at})");
    assert!(access_entry(&sdk, &c, &node_role_arn(&sdk, &c, &iam_path(&c))).is_some());
    assert_eq!(karpenter_associations(&sdk, &c).len(), 1);
}

#[test]
fn up_stops_waiting_at_the_bound_with_a_clear_error_and_the_rest_done() {
    let (c, wd) = seeded("e-b3bound");
    let sdk = sdk();
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: "UPDATING"}}));
    let t = Instant::now();
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[("KARPCTL_EKS_ACTIVE_TIMEOUT_SECS", "4")]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(60), "bounded: {:?}", t.elapsed());
    assert!(r.stderr.contains("still UPDATING"), "{r:?}");
    assert!(r.stderr.contains("KARPCTL_EKS_ACTIVE_TIMEOUT_SECS"), "{r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_some(), "the queue was made meanwhile");
    assert!(role_exists(&sdk, &node_role(&c)));
    assert!(access_entry_principals(&sdk, &c).iter().all(|p| !p.contains(&node_role(&c))), "no access entry");
    assert!(karpenter_associations(&sdk, &c).is_empty());
}

fn up_refused_on(status: &str, prefix: &str, hint: &str) {
    let (c, wd) = seeded(prefix);
    let sdk = sdk();
    let px = LagProxy::start(&c, &endpoint());
    px.set(json!({"eks_cluster_status": {&c: status}}));
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(r.code, 1, "{status}: {r:?}");
    assert!(r.stderr.contains(status), "{r:?}");
    assert!(r.stderr.contains(hint), "says what to do ({hint}): {r:?}");
    assert!(queue(&sdk, &queue_name(&c)).is_none(), "nothing written");
    assert!(!role_exists(&sdk, &node_role(&c)), "nothing written");
}

#[test]
fn up_on_a_deleting_cluster_fails_before_any_write() {
    up_refused_on("DELETING", "e-b3del", "karpctl down");
}

#[test]
fn up_on_a_failed_cluster_fails_before_any_write() {
    up_refused_on("FAILED", "e-b3fail", "aws eks delete-cluster");
}

#[test]
fn down_on_a_config_map_cluster_treats_list_access_entries_refusal_as_no_entries() {
    let (c, wd) = seeded("e-b4");
    let sdk = sdk();
    up(&wd, &c);
    let refuse = json!({"code": "InvalidRequestException", "status": 400,
        "message": "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation."});
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "eks", "operation": "ListAccessEntries", "error": refuse},
               {"service": "eks", "operation": "DescribeAccessEntry", "error": refuse}]),
    );
    let r = karpctl_at(&wd, px.url(), &["down", "--cluster", &c, "--yes"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(px.fired("ListAccessEntries") >= 1, "{r:?}");
    assert_non_eks_removed(&sdk, &c);
}

// ------------------------------------------------------------------------ C. access entries

#[test]
fn a_type_change_waits_for_eks_to_let_go_of_the_old_entry() {
    let (c, wd) = seeded("e-c1");
    let sdk = sdk();
    up(&wd, &c);
    plan(&wd, &c, "access_entry_type = \"EC2_WINDOWS\"\n");
    let px = Proxy::start(
        &wd,
        &c,
        &endpoint(),
        json!([{"service": "eks", "operation": "CreateAccessEntry", "times": 2,
                "error": {"code": "ResourceInUseException", "status": 409, "message": "The specified access entry resource is already in use on this cluster."}}]),
    );
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(px.fired("CreateAccessEntry"), 2, "{r:?}");
    let e = access_entry(&sdk, &c, &node_role_arn(&sdk, &c, &iam_path(&c))).expect("the entry");
    assert_eq!(e.r#type(), Some("EC2_WINDOWS"));
}

#[test]
fn after_an_iam_path_change_the_old_paths_access_entry_is_removed() {
    let (c, wd) = seeded("e-c2");
    let sdk = sdk();
    plan(&wd, &c, "path = \"/karpctl/old/\"\n");
    up(&wd, &c);
    let old = node_role_arn(&sdk, &c, "/karpctl/old/");
    assert!(access_entry(&sdk, &c, &old).is_some());
    plan(&wd, &c, "path = \"/karpctl/new/\"\n");
    let d = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(d.code, 2, "{d:?}");
    up(&wd, &c);
    let new = node_role_arn(&sdk, &c, "/karpctl/new/");
    let principals = access_entry_principals(&sdk, &c);
    assert!(principals.contains(&new), "{principals:?}");
    assert!(!principals.contains(&old), "the old path's entry is removed: {principals:?}");
    let d = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(d.code, 0, "converged: {d:?}");
}
