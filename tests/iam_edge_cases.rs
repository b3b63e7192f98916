//! Real-AWS behaviours the emulators hide (docs/aws-behaviour.md section 9) that karpctl handles
//! in its planner and IAM code: an access entry made again with its role, permissions boundaries,
//! and the warning for a customer managed KMS key.

use crate::common::*;
use serde_json::Value;

fn ops(r: &Run) -> Value {
    r.json()["stats"]["operations"].clone()
}

fn calls(ops: &Value, op: &str) -> u64 {
    ops[op]["calls"].as_u64().unwrap_or(0)
}

fn delete_role_out_of_band(sdk: &Sdk, role: &str) {
    rt().block_on(async {
        let attached = sdk.iam.list_attached_role_policies().role_name(role).send().await.unwrap();
        for p in attached.attached_policies() {
            sdk.iam.detach_role_policy().role_name(role).policy_arn(p.policy_arn().unwrap()).send().await.unwrap();
        }
        sdk.iam.delete_role().role_name(role).send().await.unwrap();
    });
}

#[test]
fn a_node_role_made_again_gets_its_access_entry_made_again() {
    let c = cluster_name("remade");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let role = node_role(&c);
    let role_arn = rt().block_on(async { sdk.iam.get_role().role_name(&role).send().await.unwrap().role.unwrap().arn });

    // Someone deletes the node role; the access entry stays behind, bound to the old role's id.
    delete_role_out_of_band(&sdk, &role);

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("node-access-entry") && r.stdout.contains("role's unique id"), "the plan says why: {r:?}");

    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ops = ops(&r);
    assert_eq!(calls(&ops, "IAM:CreateRole"), 1, "{ops}");
    assert_eq!(calls(&ops, "EKS:DeleteAccessEntry"), 1, "the old entry is removed: {ops}");
    assert_eq!(calls(&ops, "EKS:CreateAccessEntry"), 1, "and made again for the new role: {ops}");
    let entry = rt().block_on(async {
        sdk.eks.describe_access_entry().cluster_name(&c).principal_arn(&role_arn).send().await.unwrap().access_entry.unwrap()
    });
    assert_eq!(entry.r#type(), Some("EC2_LINUX"));
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn the_permissions_boundary_goes_on_every_role_in_the_create_call_and_drift_is_repaired() {
    let c = cluster_name("boundary");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let boundary = aws_managed("PowerUserAccess");
    wd.plan(&c, &format!("cluster = \"{c}\"\n[identity]\npermissions_boundary = \"{boundary}\"\n"));
    let r = karpctl(&wd, &["up", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ops = ops(&r);
    assert_eq!(calls(&ops, "IAM:CreateRole"), 2, "{ops}");
    assert_eq!(calls(&ops, "IAM:PutRolePermissionsBoundary"), 0, "set by CreateRole itself: {ops}");
    let boundary_of = |role: &str| {
        rt().block_on(async {
            let r = sdk.iam.get_role().role_name(role).send().await.unwrap().role.unwrap();
            r.permissions_boundary().and_then(|b| b.permissions_boundary_arn()).map(str::to_string)
        })
    };
    assert_eq!(boundary_of(&node_role(&c)).as_deref(), Some(boundary.as_str()));
    assert_eq!(boundary_of(&controller_role(&c)).as_deref(), Some(boundary.as_str()));
    assert_second_up_writes_nothing(&wd, &c);

    // Removed out of band: diff shows it, up puts it back.
    rt().block_on(async {
        sdk.iam.delete_role_permissions_boundary().role_name(controller_role(&c)).send().await.unwrap();
    });
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("PermissionsBoundary"), "{r:?}");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(boundary_of(&controller_role(&c)).as_deref(), Some(boundary.as_str()));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn a_stale_default_policy_version_never_makes_a_duplicate_version() {
    let c = cluster_name("polver");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let name = policy_name(&c, "Interruption");
    let arn = format!("arn:aws:iam::000000000000:policy{}{name}", iam_path(&c));
    let versions =
        || rt().block_on(async { sdk.iam.list_policy_versions().policy_arn(&arn).send().await.unwrap().versions().len() });
    // Someone changes the policy out of band (v2).
    rt().block_on(async {
        let doc = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:GetQueueUrl","Resource":"*"}]}"#;
        sdk.iam.create_policy_version().policy_arn(&arn).policy_document(doc).set_as_default(true).send().await.unwrap();
    });
    // IAM shows the old default version for a while after each write (emulated by the proxy).
    let px = crate::common::lag::LagProxy::start(&cluster_name("polver-px"), &endpoint());
    px.set(serde_json::json!({"iam_policy_version_lag_s": {name.clone(): 20}}));
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(calls(&ops(&r), "IAM:CreatePolicyVersion"), 1, "the repair (v3)");
    assert_eq!(versions(), 3);
    // Right after, the default still reads as v2: the plan sees drift again, but up finds v3
    // already holds the document and adds no duplicate.
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(calls(&ops(&r), "IAM:CreatePolicyVersion"), 0, "no duplicate version: {}", ops(&r));
    assert_eq!(versions(), 3);
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "directly (no lag) the policy is in sync: {r:?}");
}

#[test]
fn the_partition_comes_from_the_callers_arn_and_sets_the_ec2_principal() {
    // Credentials of the China partition, in a region whose name alone would say `aws`
    // (the emulator's region): the caller's ARN decides.
    let c = cluster_name("cn");
    seed(&c, &[]);
    let wd = Workdir::new();
    let sdk = sdk();
    let px = crate::common::lag::LagProxy::start(&cluster_name("cn-px"), &endpoint());
    px.set(serde_json::json!({"sts_partition": "aws-cn"}));
    let r = karpctl_at(&wd, px.url(), &["up", "--cluster", &c, "--output", "json"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let trust = rt().block_on(async {
        let role = sdk.iam.get_role().role_name(node_role(&c)).send().await.unwrap().role.unwrap();
        policy_json(role.assume_role_policy_document().unwrap())
    });
    assert_eq!(strings(&statements(&trust)[0]["Principal"]["Service"]), ["ec2.amazonaws.com.cn"], "{trust}");
    let attached = attached(&sdk, &node_role(&c));
    assert!(attached.iter().all(|a| a.starts_with("arn:aws-cn:iam::aws:policy/")), "{attached:?}");
}
