//! Encrypted interruption queues: a customer managed key the plan names (resolved to its ARN, the
//! controller's kms:Decrypt on that ARN, the key policy checked statement by statement) and
//! `kms_key_id = "create"` (karpctl's own key, its alias and key policy, its deletion scheduled
//! by `down`). Everything is read back through the KMS, IAM and SQS APIs.

use crate::common::*;
use serde_json::{Value, json};

const ACCOUNT: &str = "000000000000";

fn plan(wd: &Workdir, c: &str, key: &str) {
    wd.plan_for(c, &format!("[interruption]\nkms_key_id = \"{key}\"\n"));
}

/// A customer managed key with `policy` and the alias `alias/<name>`: its ARN.
fn make_key(sdk: &Sdk, name: &str, policy: &Value) -> String {
    rt().block_on(async {
        let k = sdk.kms.create_key().policy(policy.to_string()).send().await.expect("CreateKey");
        let meta = k.key_metadata().unwrap();
        sdk.kms
            .create_alias()
            .alias_name(format!("alias/{name}"))
            .target_key_id(meta.key_id())
            .send()
            .await
            .expect("CreateAlias");
        meta.arn().unwrap().to_string()
    })
}

fn root_statement() -> Value {
    json!({"Sid": "root", "Effect": "Allow", "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")}, "Action": "kms:*", "Resource": "*"})
}

fn events_statement() -> Value {
    json!({"Sid": "events", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
           "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": "*"})
}

fn key_policy(statements: Vec<Value>) -> Value {
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// The controller's Interruption policy document as IAM has it.
fn interruption_policy(sdk: &Sdk, c: &str) -> Value {
    let arn = format!("arn:aws:iam::{ACCOUNT}:policy{}{}", iam_path(c), policy_name(c, "Interruption"));
    rt().block_on(async {
        let p = sdk.iam.get_policy().policy_arn(&arn).send().await.expect("GetPolicy");
        let v = p.policy().unwrap().default_version_id().unwrap().to_string();
        let d = sdk.iam.get_policy_version().policy_arn(&arn).version_id(v).send().await.expect("GetPolicyVersion");
        policy_json(d.policy_version().unwrap().document().unwrap())
    })
}

#[test]
fn a_named_key_gives_the_controller_decrypt_on_its_arn_and_a_key_policy_without_eventbridge_fails_up() {
    let c = cluster_name("kms-named");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    let key_arn = make_key(&sdk, &format!("{c}-queue"), &key_policy(vec![root_statement()]));
    plan(&wd, &c, &format!("alias/{c}-queue"));

    // An error-level check makes `diff` exit 1 in every format (2 is "changes, nothing wrong"),
    // and each format says why.
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    let msg = doc["error"]["message"].as_str().unwrap_or_else(|| panic!("the JSON says why it exits 1: {doc}"));
    assert!(msg.contains("Karpenter could not work") && msg.contains("1 error-level readiness check"), "{msg}");
    assert_eq!(doc["stats"]["writes"], 0, "{doc}");
    let checks = found(&doc);
    let events = first_with_code(&checks, "kms-key-policy-events").unwrap_or_else(|| panic!("{checks:?}"));
    assert_eq!(events["severity"], "error");
    assert_eq!(events["resource"], key_arn.as_str());
    let fix = events["fix"].as_str().unwrap();
    assert!(fix.contains("aws kms put-key-policy") && fix.contains("\"events.amazonaws.com\""), "{fix}");
    assert!(first_with_code(&checks, "kms-key-policy-controller").is_none(), "the key delegates to IAM: {checks:?}");
    // The pull-request comment tells the same story as the terminal: the verdict and each check.
    let human = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(human.stdout.contains("kms-key-policy-events"), "{human:?}");
    assert!(human.stderr.contains("error: Karpenter could not work with what `up` would leave"), "{human:?}");
    let md = karpctl(&wd, &["diff", "--cluster", &c, "--output", "markdown"]);
    assert_eq!(md.code, 1, "{md:?}");
    assert!(md.stdout.contains("**cannot work**: 1 error(s)"), "{}", md.stdout);
    assert!(md.stdout.contains("error: Karpenter could not work"), "the summary row says it: {}", md.stdout);
    assert!(
        md.stdout.contains("- **error** `kms-key-policy-events`") && md.stdout.contains("aws kms put-key-policy"),
        "{}",
        md.stdout
    );

    // up applies, then exits 1: Karpenter would get no interruption event.
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.all().contains("kms-key-policy-events"), "{}", r.all());
    let doc = interruption_policy(&sdk, &c);
    let decrypt = find_sid(&statements(&doc), "AllowInterruptionQueueDecryption").clone();
    assert_eq!(strings(&decrypt["Action"]), ["kms:Decrypt"]);
    assert_eq!(strings(&decrypt["Resource"]), [key_arn.clone()], "the key's ARN, not its alias");
    let q = queue(&sdk, &format!("Karpenter-{c}")).expect("queue");
    assert_eq!(q.attrs.get("KmsMasterKeyId").map(String::as_str), Some(format!("alias/{c}-queue").as_str()));

    // The statement the fix names makes it pass.
    rt().block_on(
        sdk.kms
            .put_key_policy()
            .key_id(&key_arn)
            .policy_name("default")
            .policy(key_policy(vec![root_statement(), events_statement()]).to_string())
            .send(),
    )
    .expect("PutKeyPolicy");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert!(first_with_code(&found(&doc), "kms-key-policy-events").is_none(), "{doc}");
    let ran: Vec<String> = checked(&doc);
    assert!(ran.contains(&"kms-key-policy-events".into()) && ran.contains(&"kms-key-policy-controller".into()), "{ran:?}");
}

#[test]
fn a_key_policy_that_does_not_delegate_to_iam_names_the_statement_for_the_controller_role() {
    let c = cluster_name("kms-nodeleg");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    let admin = json!({"Sid": "admin", "Effect": "Allow", "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:role/Admin")},
                       "Action": "kms:*", "Resource": "*"});
    let key_arn = make_key(&sdk, &format!("{c}-queue"), &key_policy(vec![admin, events_statement()]));
    // By key ARN this time.
    plan(&wd, &c, &key_arn);
    let r = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(r.code, 1, "an error-level check: {r:?}");
    let checks = found(&r.json());
    let ctl = first_with_code(&checks, "kms-key-policy-controller").unwrap_or_else(|| panic!("{checks:?}"));
    assert_eq!(ctl["severity"], "error");
    let role = format!("arn:aws:iam::{ACCOUNT}:role{}{}", iam_path(&c), controller_role(&c));
    assert!(ctl["fix"].as_str().unwrap().contains(&role), "{ctl}");
    assert!(ctl["message"].as_str().unwrap().contains("sqs:ReceiveMessage"), "{ctl}");
    assert!(first_with_code(&checks, "kms-key-policy-events").is_none(), "{checks:?}");
}

#[test]
fn a_key_that_does_not_exist_is_refused_before_any_write() {
    let c = cluster_name("kms-missing");
    seed(&c, &[]);
    let wd = Workdir::new();
    plan(&wd, &c, "alias/no-such-key-here");
    for cmd in ["diff", "up"] {
        let r = karpctl(&wd, &[cmd, "--cluster", &c, "--output", "json"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.all().contains("interruption.kms_key_id") && r.all().contains("no such KMS key"), "{r:?}");
    }
    assert!(queue(&sdk(), &format!("Karpenter-{c}")).is_none(), "nothing was made");
}

#[test]
fn create_makes_an_owned_key_that_eventbridge_and_the_controller_can_use_and_down_schedules_its_deletion() {
    let c = cluster_name("kms-create");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    plan(&wd, &c, "create");
    let alias = format!("alias/karpenter-{c}");

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains(&format!("+ kms-key aws_kms_key ({alias}) will be created")), "{}", r.stdout);
    assert!(r.stdout.contains("known after apply"), "the Decrypt grant waits for the key's ARN: {}", r.stdout);

    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let (key_arn, key_id, state, tags, policy) = rt().block_on(async {
        let d = sdk.kms.describe_key().key_id(&alias).send().await.expect("the alias names the key");
        let m = d.key_metadata().unwrap();
        let t = sdk.kms.list_resource_tags().key_id(m.key_id()).send().await.unwrap();
        let p = sdk.kms.get_key_policy().key_id(m.key_id()).policy_name("default").send().await.unwrap();
        (
            m.arn().unwrap().to_string(),
            m.key_id().to_string(),
            m.key_state().unwrap().as_str().to_string(),
            t.tags().iter().map(|t| (t.tag_key().to_string(), t.tag_value().to_string())).collect::<Vec<_>>(),
            policy_json(p.policy().unwrap()),
        )
    });
    assert_eq!(state, "Enabled");
    assert!(tags.contains(&(OWNER_TAG.to_string(), c.clone())), "{tags:?}");
    let st = statements(&policy);
    let events = find_sid(&st, "AllowEventBridgeToSendInterruptionEvents");
    assert_eq!(strings(&events["Principal"]["Service"]), ["events.amazonaws.com"]);
    assert_eq!(strings(&events["Action"]), ["kms:Decrypt", "kms:GenerateDataKey"]);
    let root = find_sid(&st, "EnableIAMPolicies");
    assert_eq!(strings(&root["Principal"]["AWS"]), [format!("arn:aws:iam::{ACCOUNT}:root")]);
    let decrypt = find_sid(&statements(&interruption_policy(&sdk, &c)), "AllowInterruptionQueueDecryption").clone();
    assert_eq!(strings(&decrypt["Resource"]), [key_arn.clone()], "the new key's ARN replaced the placeholder");
    let q = queue(&sdk, &format!("Karpenter-{c}")).expect("queue");
    assert_eq!(q.attrs.get("KmsMasterKeyId"), Some(&alias));

    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_second_up_writes_nothing(&wd, &c);

    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.all().contains("scheduled for deletion") && r.all().contains("7 days"), "{}", r.all());
    let (state, alias_gone) = rt().block_on(async {
        let d = sdk.kms.describe_key().key_id(&key_id).send().await.expect("the key stays until its date");
        let gone = sdk.kms.describe_key().key_id(&alias).send().await.is_err();
        (d.key_metadata().unwrap().key_state().unwrap().as_str().to_string(), gone)
    });
    assert_eq!(state, "PendingDeletion");
    assert!(alias_gone, "the alias goes at once");
    let r = karpctl(&wd, &["down", "--cluster", &c, "--yes", "--output", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.writes(), 0, "a second down finds nothing: {}", r.stdout);
}

#[test]
fn a_key_karpctl_made_that_someone_scheduled_for_deletion_is_brought_back_by_up() {
    let c = cluster_name("kms-revive");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    plan(&wd, &c, "create");
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let alias = format!("alias/karpenter-{c}");
    let key_id = rt().block_on(async {
        let d = sdk.kms.describe_key().key_id(&alias).send().await.unwrap();
        let id = d.key_metadata().unwrap().key_id().to_string();
        sdk.kms.schedule_key_deletion().key_id(&id).pending_window_in_days(7).send().await.unwrap();
        id
    });
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("\"PendingDeletion\" -> \"Enabled\""), "{}", r.stdout);
    let r = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
    let state = rt().block_on(async {
        let d = sdk.kms.describe_key().key_id(&alias).send().await.unwrap();
        assert_eq!(d.key_metadata().unwrap().key_id(), key_id, "the same key, not a new one");
        d.key_metadata().unwrap().key_state().unwrap().as_str().to_string()
    });
    assert_eq!(state, "Enabled");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// The proxy's answers that the `kms_key_lag_s` rule made: (operation, HTTP status).
fn lagged_kms(px: &crate::common::lag::LagProxy) -> Vec<(String, u64)> {
    px.calls_json()
        .iter()
        .filter(|c| c["lag"] == "kms_key_lag_s")
        .map(|c| (c["operation"].as_str().unwrap_or("").to_string(), c["status"].as_u64().unwrap_or(0)))
        .collect()
}

#[test]
fn a_key_kms_shows_late_after_create_and_after_cancelled_deletion_is_waited_for_and_diff_is_clean() {
    // KMS is eventually consistent: for seconds after CreateKey, CreateAlias and DescribeKey
    // answer NotFoundException; after CancelKeyDeletion, EnableKey answers
    // KMSInvalidStateException. `up` retries them (the old code failed at CreateAlias and
    // scheduled the new key's deletion), keeps the ARN CreateKey answered, and `diff` is clean.
    let c = cluster_name("kms-late");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    plan(&wd, &c, "create");
    let alias = format!("alias/karpenter-{c}");
    let px = crate::common::lag::LagProxy::start(&cluster_name("kms-late-px"), &endpoint());
    px.set(json!({"kms_key_lag_s": {&c: 2}}));

    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    let lagged = lagged_kms(&px);
    for op in ["CreateAlias", "DescribeKey"] {
        assert!(lagged.contains(&(op.to_string(), 400)), "KMS answered {op} late: {lagged:?}");
    }
    assert!(up.stderr.contains("kms:CreateAlias returned NotFoundException"), "the retry is shown: {up:?}");
    let (key_arn, state) = rt().block_on(async {
        let d = sdk.kms.describe_key().key_id(&alias).send().await.expect("the alias names the key");
        let m = d.key_metadata().unwrap();
        (m.arn().unwrap().to_string(), m.key_state().unwrap().as_str().to_string())
    });
    assert_eq!(state, "Enabled", "the key made is kept, not scheduled for deletion");
    assert_eq!(px.count("CreateKey"), 1, "one key: {:?}", px.calls());
    let decrypt = find_sid(&statements(&interruption_policy(&sdk, &c)), "AllowInterruptionQueueDecryption").clone();
    assert_eq!(strings(&decrypt["Resource"]), [key_arn.clone()], "the ARN CreateKey answered");
    let diff = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c], &[]);
    assert_eq!(diff.code, 0, "{diff:?}");

    // Someone schedules the key's deletion; `up` cancels it and enables the key while KMS still
    // sees it pending deletion.
    rt().block_on(sdk.kms.schedule_key_deletion().key_id(&key_arn).pending_window_in_days(7).send())
        .expect("ScheduleKeyDeletion");
    let up = karpctl_at(&wd, px.url(), &["up", "--cluster", &c], &[]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(lagged_kms(&px).contains(&("EnableKey".to_string(), 400)), "KMS answered EnableKey late: {:?}", lagged_kms(&px));
    assert!(up.stderr.contains("kms:EnableKey returned KMSInvalidStateException"), "{up:?}");
    let diff = karpctl_at(&wd, px.url(), &["diff", "--cluster", &c], &[]);
    assert_eq!(diff.code, 0, "{diff:?}");
    let state = rt()
        .block_on(sdk.kms.describe_key().key_id(&alias).send())
        .unwrap()
        .key_metadata()
        .unwrap()
        .key_state()
        .unwrap()
        .as_str()
        .to_string();
    assert_eq!(state, "Enabled");
}

/// A read `diff` and doctor both make, refused (kms:GetKeyPolicy on the queue's key, denied by
/// the caller's policy through the lag proxy): both say it the same way, `kms-key-unreadable`
/// naming the call, the checks it skipped and the command that prints what to grant; doctor as
/// an error, `diff` as a warning that leaves its verdict alone.
#[test]
fn a_refused_key_policy_read_is_said_the_same_way_by_diff_and_doctor() {
    let c = cluster_name("kms-refused");
    seed(&c, &[]);
    let sdk = sdk();
    let wd = Workdir::new();
    let key_arn = make_key(&sdk, &format!("{c}-queue"), &key_policy(vec![root_statement(), events_statement()]));
    plan(&wd, &c, &format!("alias/{c}-queue"));
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let px = crate::common::lag::LagProxy::start(&format!("{c}-px"), &endpoint());
    let mut said = Vec::new();
    for command in ["diff", "doctor"] {
        let printed = karpctl(&wd, &["output", "--cluster", &c, "--format", "caller-policy", "--for", command]);
        assert_eq!(printed.code, 0, "{printed:?}");
        let mut policy = printed.json();
        policy["Statement"]
            .as_array_mut()
            .unwrap()
            .push(json!({"Sid": "NoKeyPolicy", "Effect": "Deny", "Action": "kms:GetKeyPolicy", "Resource": key_arn}));
        px.reset();
        px.set(json!({"caller_policy": policy}));
        let r = karpctl_at(&wd, px.url(), &[command, "--cluster", &c, "--output", "json"], &[]);
        let doc = r.json();
        let results = if command == "diff" { found(&doc) } else { findings(&doc) };
        let f = first_with_code(&results, "kms-key-unreadable").unwrap_or_else(|| panic!("{command}: {doc}")).clone();
        let message = f["message"].as_str().unwrap().to_string();
        assert!(message.starts_with(&format!("{command} could not read the queue's KMS key")), "{message}");
        assert!(message.contains("AWS refused kms:GetKeyPolicy") && message.contains("kms-key-policy-events"), "{message}");
        assert!(f["fix"].as_str().unwrap().contains(&format!("--for {command}")), "{f}");
        if command == "diff" {
            assert_eq!((r.code, f["severity"].as_str()), (0, Some("warning")), "in sync, the refusal said: {r:?}");
            assert!(!checked(&doc).contains(&"kms-key-policy-events".to_string()), "skipped, not passed: {doc}");
        } else {
            assert_eq!(f["severity"], "error", "{f}");
        }
        // What was refused, said the same way (the checks skipped are each command's own).
        said.push(message.split_once(" could not read ").unwrap().1.split("; skipped").next().unwrap().to_string());
    }
    assert_eq!(said[0], said[1], "one way in every command");
}
