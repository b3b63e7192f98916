//! Self-tests of the lag proxy's `caller_policy` rule (scripts/lagpolicy.py): with a policy set,
//! every call is authorized as IAM does (action, resource ARN, condition keys) before it goes on,
//! and a refused one gets the service's own AccessDenied shape naming action and resource. Seen
//! through the Rust AWS SDK clients pointed at the proxy; objects are made directly in the
//! emulator where the proxy must not see them made.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use serde_json::{Value, json};

const ACCOUNT: &str = "000000000000";

fn proxy(prefix: &str) -> (LagProxy, Sdk) {
    let px = LagProxy::start(&cluster_name(prefix), &endpoint());
    let sdk = sdk_at(px.url());
    (px, sdk)
}

fn policy(statements: Value) -> Value {
    json!({"caller_policy": {"Version": "2012-10-17", "Statement": statements}})
}

/// The refusal of a call: (error code, message), or None when the policy let it through (an
/// answer or any other error from the emulator).
fn refusal<T, E: ProvideErrorMetadata>(r: Result<T, E>) -> Option<(String, String)> {
    let e = r.err()?;
    let code = e.code().unwrap_or_default();
    ["AccessDenied", "AccessDeniedException", "UnauthorizedOperation"]
        .contains(&code)
        .then(|| (code.to_string(), e.message().unwrap_or_default().to_string()))
}

/// The call was refused with `code`, the message naming `action` on `resource` as AWS does.
fn assert_refused(got: Option<(String, String)>, code: &str, action: &str, resource: &str) {
    let (c, m) = got.unwrap_or_else(|| panic!("{action} on {resource} was let through"));
    assert_eq!(c, code, "{m}");
    let want = format!(
        "is not authorized to perform: {action} on resource: {resource} because no identity-based policy allows the {action} action"
    );
    assert!(m.contains(&want), "{m}\nwants: {want}");
}

const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

#[test]
fn policy_gate_scopes_iam_by_path_learned_from_creates_answers_and_lookups() {
    let (px, sdk) = proxy("pol-iam");
    let n = px.name().to_string();
    let path = format!("/lpt/{n}/");
    px.set(policy(json!([
        {"Sid": "Own", "Effect": "Allow", "Action": ["iam:CreateRole", "iam:GetRole", "iam:TagRole"],
         "Resource": format!("arn:aws:iam::{ACCOUNT}:role{path}*")},
    ])));
    let direct = crate::common::sdk();
    // Created through the proxy with its path (and tags: iam:TagRole too): the path is learned.
    let made = rt().block_on(async {
        refusal(
            sdk.iam
                .create_role()
                .role_name(format!("A-{n}"))
                .path(&path)
                .assume_role_policy_document(TRUST)
                .tags(aws_sdk_iam::types::Tag::builder().key("k").value("v").build().unwrap())
                .send()
                .await,
        )
    });
    assert_eq!(made, None);
    assert_eq!(rt().block_on(async { refusal(sdk.iam.get_role().role_name(format!("A-{n}")).send().await) }), None);
    // Made elsewhere: under the path, read upstream (GetRole) and allowed; at `/`, refused.
    rt().block_on(async {
        direct.iam.create_role().role_name(format!("B-{n}")).path(&path).assume_role_policy_document(TRUST).send().await.unwrap();
        direct.iam.create_role().role_name(format!("C-{n}")).assume_role_policy_document(TRUST).send().await.unwrap();
    });
    assert_eq!(rt().block_on(async { refusal(sdk.iam.get_role().role_name(format!("B-{n}")).send().await) }), None);
    let c = rt().block_on(async { refusal(sdk.iam.get_role().role_name(format!("C-{n}")).send().await) });
    assert_refused(c, "AccessDenied", "iam:GetRole", &format!("arn:aws:iam::{ACCOUNT}:role/C-{n}"));
    // A role that does not exist has no path: authorized on its bare name.
    let missing = rt().block_on(async { refusal(sdk.iam.get_role().role_name(format!("D-{n}")).send().await) });
    assert_refused(missing, "AccessDenied", "iam:GetRole", &format!("arn:aws:iam::{ACCOUNT}:role/D-{n}"));
    // A create with tags also needs iam:TagRole on the new role.
    px.set(policy(json!([{"Effect": "Allow", "Action": "iam:CreateRole", "Resource": "*"}])));
    let tagged = rt().block_on(async {
        refusal(
            sdk.iam
                .create_role()
                .role_name(format!("E-{n}"))
                .path(&path)
                .assume_role_policy_document(TRUST)
                .tags(aws_sdk_iam::types::Tag::builder().key("k").value("v").build().unwrap())
                .send()
                .await,
        )
    });
    assert_refused(tagged, "AccessDenied", "iam:TagRole", &format!("arn:aws:iam::{ACCOUNT}:role{path}E-{n}"));
    // sts:GetCallerIdentity needs no permission; every decision is listed.
    assert!(rt().block_on(aws_sdk_sts::Client::new(&sts_conf(px.url())).get_caller_identity().send()).is_ok());
    let log = px.state()["caller_policy"].clone();
    assert!(log.as_array().unwrap().iter().any(|d| d["action"] == "iam:TagRole" && d["allowed"] == false), "{log}");
    // A policy IAM would not take is refused by the control API, naming the rule.
    let bad = px.try_set(json!({"caller_policy": {"Statement": [{"Effect": "Maybe", "Action": "*", "Resource": "*"}]}}));
    assert!(bad.unwrap_err().contains("caller_policy"));
}

fn sts_conf(url: &str) -> aws_types::SdkConfig {
    let creds = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "tests");
    aws_types::SdkConfig::builder()
        .endpoint_url(url)
        .region(aws_types::region::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(creds))
        .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
        .build()
}

#[test]
fn policy_gate_evaluates_tag_keys_request_and_resource_tags_on_ec2() {
    let (px, sdk) = proxy("pol-ec2");
    let n = px.name().to_string();
    let direct = crate::common::sdk();
    let (s1, s2) = rt().block_on(async {
        let vpc = direct.ec2.create_vpc().cidr_block("10.91.0.0/16").send().await.unwrap();
        let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut ids = vec![];
        for (cidr, owner) in [("10.91.1.0/24", n.as_str()), ("10.91.2.0/24", "someone-else")] {
            let s = direct.ec2.create_subnet().vpc_id(&vpc).cidr_block(cidr).send().await.unwrap();
            let id = s.subnet().unwrap().subnet_id().unwrap().to_string();
            let tag = aws_sdk_ec2::types::Tag::builder().key("owner").value(owner).build();
            direct.ec2.create_tags().resources(&id).tags(tag).send().await.unwrap();
            ids.push(id);
        }
        (ids[0].clone(), ids[1].clone())
    });
    px.set(policy(json!([
        {"Sid": "Tag", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "arn:aws:ec2:*:*:subnet/*",
         "Condition": {"ForAllValues:StringEquals": {"aws:TagKeys": ["disc"]}, "StringEquals": {"aws:RequestTag/disc": n}}},
        {"Sid": "Untag", "Effect": "Allow", "Action": "ec2:DeleteTags", "Resource": "arn:aws:ec2:*:*:subnet/*",
         "Condition": {"StringEquals": {"aws:ResourceTag/owner": n}}},
    ])));
    let tag = |id: &str, k: &str, v: &str| {
        refusal(rt().block_on(
            sdk.ec2.create_tags().resources(id).tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build()).send(),
        ))
    };
    let arn = |id: &str| format!("arn:aws:ec2:us-east-1:{ACCOUNT}:subnet/{id}");
    assert_eq!(tag(&s1, "disc", &n), None, "the key and value the policy names");
    assert_refused(tag(&s1, "disc", "other"), "UnauthorizedOperation", "ec2:CreateTags", &arn(&s1));
    assert_refused(tag(&s1, "other", &n), "UnauthorizedOperation", "ec2:CreateTags", &arn(&s1));
    let untag =
        |id: &str| {
            refusal(rt().block_on(
                sdk.ec2.delete_tags().resources(id).tags(aws_sdk_ec2::types::Tag::builder().key("disc").build()).send(),
            ))
        };
    assert_eq!(untag(&s1), None, "the subnet's own tag owner = {n}");
    assert_refused(untag(&s2), "UnauthorizedOperation", "ec2:DeleteTags", &arn(&s2));
}

#[test]
fn policy_gate_names_sqs_rules_eks_and_kms_resources_and_their_conditions() {
    let (px, sdk) = proxy("pol-res");
    let n = px.name().to_string();
    let direct = crate::common::sdk();
    let (q1, q2) = (format!("{n}-q1"), format!("{n}-q2"));
    let (url1, url2) = rt().block_on(async {
        let a = direct.sqs.create_queue().queue_name(&q1).send().await.unwrap().queue_url().unwrap().to_string();
        let b = direct.sqs.create_queue().queue_name(&q2).send().await.unwrap().queue_url().unwrap().to_string();
        for r in [format!("{n}-r1"), format!("{n}-r2")] {
            direct.events.put_rule().name(r).event_pattern(r#"{"source":["aws.ec2"]}"#).send().await.unwrap();
        }
        (a, b)
    });
    let role = format!("arn:aws:iam::{ACCOUNT}:role/ctl-{n}");
    px.set(policy(json!([
        {"Effect": "Allow", "Action": "sqs:GetQueueAttributes", "Resource": format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{q1}")},
        {"Effect": "Allow", "Action": "events:DescribeRule", "Resource": format!("arn:aws:events:us-east-1:{ACCOUNT}:rule/{n}-r1")},
        {"Effect": "Allow", "Action": "eks:CreatePodIdentityAssociation", "Resource": format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{n}")},
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": role,
         "Condition": {"StringEquals": {"iam:PassedToService": "pods.eks.amazonaws.com"}}},
        {"Effect": "Allow", "Action": "kms:CreateKey", "Resource": "*",
         "Condition": {"StringEquals": {"aws:RequestTag/karpctl.io/cluster": n}}},
        {"Effect": "Allow", "Action": "iam:CreateServiceLinkedRole", "Resource": "*",
         "Condition": {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}},
        {"Effect": "Deny", "Action": "sqs:*", "Resource": format!("arn:aws:sqs:*:*:{q1}"),
         "Condition": {"StringEquals": {"aws:RequestTag/deny": "yes"}}},
    ])));
    // SQS: the queue URL's ARN.
    let attrs = |url: &str| refusal(rt().block_on(sdk.sqs.get_queue_attributes().queue_url(url).send()));
    assert_eq!(attrs(&url1), None);
    assert_refused(attrs(&url2), "AccessDenied", "sqs:GetQueueAttributes", &format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{q2}"));
    // EventBridge: the rule name's ARN on the default bus.
    let rule = |r: &str| refusal(rt().block_on(sdk.events.describe_rule().name(r).send()));
    assert_eq!(rule(&format!("{n}-r1")), None);
    assert_refused(
        rule(&format!("{n}-r2")),
        "AccessDeniedException",
        "events:DescribeRule",
        &format!("arn:aws:events:us-east-1:{ACCOUNT}:rule/{n}-r2"),
    );
    // EKS: the cluster's ARN, and iam:PassRole of the association's role to Pod Identity (the
    // cluster does not exist: a call let through gets the emulator's not-found).
    let assoc = |cluster: &str, role: &str| {
        refusal(
            rt().block_on(
                sdk.eks
                    .create_pod_identity_association()
                    .cluster_name(cluster)
                    .namespace("k")
                    .service_account("k")
                    .role_arn(role)
                    .send(),
            ),
        )
    };
    assert_eq!(assoc(&n, &role), None);
    let other = format!("arn:aws:iam::{ACCOUNT}:role/other-{n}");
    assert_refused(assoc(&n, &other), "AccessDeniedException", "iam:PassRole", &other);
    assert_refused(
        assoc(&format!("{n}-east"), &role),
        "AccessDeniedException",
        "eks:CreatePodIdentityAssociation",
        &format!("arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{n}-east"),
    );
    px.set(policy(json!([
        {"Effect": "Allow", "Action": "eks:CreatePodIdentityAssociation", "Resource": "*"},
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*",
         "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
    ])));
    assert_refused(assoc(&n, &role), "AccessDeniedException", "iam:PassRole", &role);
    // KMS: aws:RequestTag of CreateKey; IAM: iam:AWSServiceName of the service-linked role.
    px.set(policy(json!([
        {"Effect": "Allow", "Action": "kms:CreateKey", "Resource": "*",
         "Condition": {"StringEquals": {"aws:RequestTag/karpctl.io/cluster": n}}},
        {"Effect": "Allow", "Action": "iam:CreateServiceLinkedRole", "Resource": "*",
         "Condition": {"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}},
    ])));
    let key = |v: &str| {
        let t = aws_sdk_kms::types::Tag::builder().tag_key("karpctl.io/cluster").tag_value(v).build().unwrap();
        refusal(rt().block_on(sdk.kms.create_key().tags(t).send()))
    };
    assert_eq!(key(&n), None);
    assert_refused(key("other"), "AccessDeniedException", "kms:CreateKey", "*");
    let slr = refusal(rt().block_on(sdk.iam.create_service_linked_role().aws_service_name("autoscaling.amazonaws.com").send()));
    let (code, m) = slr.expect("another service's linked role is refused");
    assert_eq!(code, "AccessDenied");
    let on = format!(
        "iam:CreateServiceLinkedRole on resource: arn:aws:iam::{ACCOUNT}:role/aws-service-role/autoscaling.amazonaws.com/"
    );
    assert!(m.contains(&on), "{m}");
    // A Deny wins over an Allow.
    px.set(policy(json!([
        {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "sqs:TagQueue", "Resource": "*"},
    ])));
    let tagq = refusal(rt().block_on(sdk.sqs.tag_queue().queue_url(&url1).tags("a", "b").send()));
    assert!(tagq.is_some_and(|(c, m)| c == "AccessDenied" && m.contains("with an explicit deny in an identity-based policy")));
    assert_eq!(attrs(&url1), None);
}
