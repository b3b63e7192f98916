//! Bad input, table-driven: each case exits 1 with an error naming the field or cause, a hint,
//! and zero write calls (counted by karpctl's call interceptor, reported in the JSON error).

use crate::common::*;
use serde_json::Value;

struct Case {
    name: &'static str,
    /// Plan file body (written to plans/<cluster>.toml) or None for no plan file.
    plan: Option<String>,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Substrings the error message must contain.
    expect: Vec<String>,
}

fn check(wd: &Workdir, c: &Case) {
    let mut args: Vec<&str> = c.args.iter().map(String::as_str).collect();
    args.extend(["--output", "json"]);
    let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = karpctl_env(wd, &args, &env);
    assert_eq!(r.code, 1, "{}: {r:?}", c.name);
    let doc = r.json();
    let err = &doc["error"];
    let text = format!("{} {}", err["message"].as_str().unwrap_or_default(), err["causes"]);
    for e in &c.expect {
        assert!(text.contains(e.as_str()), "{}: error should mention {e:?}: {text}", c.name);
    }
    assert!(err["hint"].is_string(), "{}: a hint says what to do: {doc}", c.name);
    let writes = match &doc["stats"] {
        Value::Null => 0,
        s => s["writes"].as_u64().unwrap(),
    };
    assert_eq!(writes, 0, "{}: no write call: {doc}", c.name);
}

#[test]
fn bad_input_fails_with_the_field_a_hint_and_no_write() {
    let c = cluster_name("bad");
    seed(&c, &[]);
    let p = |body: &str| Some(format!("cluster = \"{c}\"\n{body}"));
    let up = vec!["up".to_string(), "--cluster".to_string(), c.clone()];
    let home = tempfile::tempdir().unwrap();
    let cases = vec![
        Case {
            name: "malformed toml",
            plan: p("region = \n"),
            args: up.clone(),
            env: vec![],
            expect: vec![format!("{c}.toml:2")],
        },
        Case {
            name: "a tag value outside IAM's character set",
            plan: p("[tags]\nteam = \"platform,core\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec![format!("{c}.toml:3"), "team".into(), "IAM does not allow".into()],
        },
        Case {
            name: "a tag key outside IAM's character set",
            plan: p("[tags]\n\"cost#center\" = \"42\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["cost#center".into(), "IAM does not allow".into()],
        },
        Case {
            name: "the AWS managed SQS key",
            plan: p("[interruption]\nkms_key_id = \"alias/aws/sqs\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["interruption.kms_key_id".into(), "EventBridge can never deliver".into()],
        },
        Case {
            name: "the AWS managed SQS key by ARN",
            plan: p("[interruption]\nkms_key_id = \"arn:aws:kms:us-east-1:000000000000:alias/aws/sqs\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["interruption.kms_key_id".into(), "EventBridge can never deliver".into()],
        },
        Case {
            name: "a permissions boundary that is not a policy ARN",
            plan: p("[identity]\npermissions_boundary = \"Boundary\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["identity.permissions_boundary".into()],
        },
        Case {
            name: "an AWS_CA_BUNDLE that cannot be read",
            plan: None,
            args: up.clone(),
            env: vec![("AWS_CA_BUNDLE", "/nonexistent/ca-bundle.pem".to_string())],
            expect: vec!["AWS_CA_BUNDLE".into(), "/nonexistent/ca-bundle.pem".into()],
        },
        Case {
            name: "unknown key",
            plan: p("[interruption]\nretention = 300\n"),
            args: up.clone(),
            env: vec![],
            expect: vec![format!("{c}.toml:3"), "retention".into()],
        },
        Case {
            name: "wrong type",
            plan: p("[interruption]\nenabled = \"yes\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec![format!("{c}.toml:3")],
        },
        Case {
            name: "invalid cluster name",
            plan: None,
            args: vec!["up".into(), "--cluster".into(), "bad.name".into()],
            env: vec![],
            expect: vec!["--cluster".into(), "'.'".into()],
        },
        Case {
            name: "cluster name too long",
            plan: None,
            args: vec!["up".into(), "--cluster".into(), "a".repeat(101)],
            env: vec![],
            expect: vec!["1 to 100".into()],
        },
        Case {
            name: "queue name over the SQS limit",
            plan: p(&format!("[interruption]\nqueue_name = \"{}\"\n", "q".repeat(81))),
            args: up.clone(),
            env: vec![],
            expect: vec!["interruption.queue_name".into()],
        },
        Case {
            name: "role name over the IAM limit",
            plan: p(&format!("[identity]\nnode_role_name = \"{}\"\n", "r".repeat(65))),
            args: up.clone(),
            env: vec![],
            expect: vec!["identity.node_role_name".into()],
        },
        Case {
            name: "unknown region",
            plan: p("region = \"us-moon-1\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["`region`".into(), "us-moon-1".into()],
        },
        Case {
            name: "region flag disagrees with the plan",
            plan: p("region = \"us-east-1\"\n"),
            args: vec!["up".into(), "--cluster".into(), c.clone(), "--region".into(), "eu-west-1".into()],
            env: vec![],
            expect: vec!["--region eu-west-1".into()],
        },
        Case {
            name: "kms key and sse-sqs both set",
            plan: p("[interruption]\nkms_key_id = \"alias/k\"\nsqs_managed_sse = true\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["interruption.sqs_managed_sse".into()],
        },
        Case {
            name: "bad karpenter version",
            plan: p("[identity]\nkarpenter_version = \"0.37\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["identity.karpenter_version".into()],
        },
        Case {
            name: "missing cluster",
            plan: None,
            args: vec!["up".into(), "--cluster".into(), cluster_name("absent")],
            env: vec![],
            expect: vec!["does not exist".into()],
        },
        Case {
            name: "account pin mismatch",
            plan: p("account_id = \"111122223333\"\n"),
            args: up.clone(),
            env: vec![],
            expect: vec!["111122223333".into(), "000000000000".into()],
        },
        Case {
            name: "missing credentials",
            plan: None,
            args: up.clone(),
            env: vec![
                ("AWS_ACCESS_KEY_ID", String::new()),
                ("AWS_SECRET_ACCESS_KEY", String::new()),
                ("AWS_CONFIG_FILE", "/nonexistent/config".into()),
                ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials".into()),
                ("AWS_EC2_METADATA_DISABLED", "true".into()),
                ("HOME", home.path().display().to_string()),
            ],
            expect: vec!["sts:GetCallerIdentity".into()],
        },
        Case {
            name: "unreachable endpoint",
            plan: None,
            args: vec!["up".into(), "--cluster".into(), c.clone(), "--endpoint-url".into(), "http://127.0.0.1:9".into()],
            env: vec![],
            expect: vec!["sts:GetCallerIdentity".into()],
        },
    ];
    for case in &cases {
        let wd = Workdir::new();
        if let Some(body) = &case.plan {
            wd.plan(&c, body);
        }
        check(&wd, case);
    }
    // Nothing was created for the seeded cluster by any of the cases.
    let sdk = sdk();
    let q = rt().block_on(sdk.sqs.get_queue_url().queue_name(queue_name(&c)).send());
    assert!(q.is_err(), "no queue was created");
    let role = rt().block_on(sdk.iam.get_role().role_name(node_role(&c)).send());
    assert!(role.is_err(), "no role was created");
}

/// The error a newcomer reads, without the JSON wrapping: stderr of a human run.
fn plain(r: &Run) -> &str {
    assert!(
        !r.stderr.contains("Error {") && !r.stderr.contains("Failure(") && !r.stderr.contains("source:"),
        "no debug dump: {r:?}"
    );
    &r.stderr
}

#[test]
fn an_endpoint_that_refuses_fails_with_one_plain_sentence_and_a_hint() {
    let wd = Workdir::new();
    let url = "http://127.0.0.1:1";
    let r = karpctl_at(&wd, url, &["up", "--cluster", "nowhere", "--endpoint-url", url], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let err = plain(&r);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("Account ")).collect();
    assert_eq!(
        lines.first().copied(),
        Some("error: cannot reach AWS for sts:GetCallerIdentity: http://127.0.0.1:1 refused the connection"),
        "{r:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("hint: check --endpoint-url")), "{r:?}");
    assert!(!err.contains("caused by"), "one sentence: {r:?}");
}

#[test]
fn missing_credentials_say_so_in_a_few_lines() {
    let wd = Workdir::new();
    let home = tempfile::tempdir().unwrap();
    let home = home.path().display().to_string();
    let env = [
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
        ("AWS_SESSION_TOKEN", ""),
        ("AWS_CONFIG_FILE", ""),
        ("AWS_SHARED_CREDENTIALS_FILE", ""),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", ""),
        ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", ""),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", ""),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("HOME", home.as_str()),
    ];
    let r = karpctl_env(&wd, &["diff", "--cluster", "nowhere"], &env);
    assert_eq!(r.code, 1, "{r:?}");
    let err = plain(&r);
    assert!(err.starts_with("error: no AWS credentials found for sts:GetCallerIdentity"), "{r:?}");
    assert!(err.contains("hint: set AWS_PROFILE"), "{r:?}");
    assert!(err.lines().count() <= 3 && err.len() < 600, "a few lines: {r:?}");
}

#[test]
fn a_mistyped_cluster_or_plan_key_gets_did_you_mean() {
    let c = cluster_name("dym");
    seed(&c, &[]);
    let wd = Workdir::new();
    // Two neighbouring letters swapped: "dym-..." typed "ydm-...".
    let typo = format!("ydm{}", &c[3..]);
    let r = karpctl(&wd, &["diff", "--cluster", &typo]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("error: EKS cluster {typo} does not exist in region us-east-1")), "{r:?}");
    assert!(r.stderr.contains(&format!("hint: did you mean `{c}`?")), "{r:?}");

    wd.plan(&c, &format!("cluster = \"{c}\"\n[interruption]\nenabeld = false\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(&format!("{c}.toml:3: unknown key `enabeld` in [interruption]")), "{r:?}");
    assert!(r.stderr.contains("hint: did you mean `enabled`?"), "{r:?}");
}
