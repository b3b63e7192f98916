//! What real SQS does that neither emulator shows (docs/aws-behaviour.md section 9, items 1 to
//! 3), reproduced by a lag proxy (tests/common/lag.rs) in front of the test emulator: a new queue
//! answers NonExistentQueue for a moment, attribute writes show late, and a deleted queue lingers.
//! karpctl runs through the proxy; results are checked straight against the emulator.

use crate::common::lag::LagProxy;
use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// karpctl with every AWS call sent through `px` (no inherited per-service endpoint variable may
/// bypass it).
fn karpctl_via(wd: &Workdir, px: &LagProxy, args: &[&str]) -> Run {
    karpctl_via_env(wd, px, args, &[])
}

/// `karpctl_via` with `extra` variables.
fn karpctl_via_env(wd: &Workdir, px: &LagProxy, args: &[&str], extra: &[(&str, &str)]) -> Run {
    karpctl_at(wd, px.url(), args, extra)
}

/// A consistency deadline shorter than the lag windows below.
const SHORT_DEADLINE: (&str, &str) = ("KARPCTL_CONSISTENCY_DEADLINE_SECS", "2");

/// A seeded cluster, a work directory and a lag proxy of the test's own.
fn setup(prefix: &str) -> (String, Workdir, LagProxy) {
    let c = cluster_name(prefix);
    seed(&c, &[]);
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    (c, Workdir::new(), px)
}

/// The calls the proxy answered under `rule` (its own answer, or a lagged view).
fn lagged(px: &LagProxy, rule: &str) -> Vec<Value> {
    px.calls_json().into_iter().filter(|c| c["lag"] == rule).collect()
}

/// The queue exists, tagged as karpctl's for `c`, with its policy naming it, and every rule
/// targets it: checked through the SDK straight against the emulator.
pub(crate) fn assert_queue_and_rules_work(c: &str) {
    let sdk = sdk();
    let q = queue(&sdk, &queue_name(c)).expect("the queue exists");
    assert_eq!(q.tags.get("karpctl.io/cluster").map(String::as_str), Some(c), "{:?}", q.tags);
    assert_eq!(q.tags.get("karpctl.io/resource").map(String::as_str), Some("queue"), "{:?}", q.tags);
    let arn = q.attrs["QueueArn"].clone();
    let policy = q.attrs.get("Policy").unwrap_or_else(|| panic!("the queue has no policy: {:?}", q.attrs));
    let st = statements(&policy_json(policy));
    assert!(st.iter().any(|s| s["Effect"] == "Allow" && strings(&s["Resource"]) == [arn.clone()]), "{st:?}");
    find_sid(&st, "DenyHTTP");
    for part in RULE_PARTS {
        let targets = rt().block_on(async {
            let t = sdk.events.list_targets_by_rule().rule(rule_name(c, part)).send().await.expect("events:ListTargetsByRule");
            t.targets().iter().map(|t| t.arn().to_string()).collect::<Vec<_>>()
        });
        assert_eq!(targets, [arn.clone()], "rule {part} targets the queue");
    }
}

#[test]
fn up_waits_for_a_new_queue_that_sqs_does_not_know_yet() {
    let (c, wd, px) = setup("rs-create");
    px.set(json!({"sqs_create_lag_s": {queue_name(&c): 3}}));

    let up = karpctl_via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "up from nothing succeeds while the new queue is not known yet: {up:?}");
    assert!(!up.all().contains("not managed by karpctl"), "a queue this run made is never called unmanaged: {up:?}");
    let refused: Vec<Value> = lagged(&px, "sqs_create_lag_s").into_iter().filter(|c| c["operation"] != "CreateQueue").collect();
    assert!(!refused.is_empty(), "the proxy answered NonExistentQueue at least once: {:?}", px.calls_json());
    assert!(up.stderr.contains("NonExistentQueue") && up.stderr.contains("retry"), "the retry is shown: {up:?}");

    assert_queue_and_rules_work(&c);
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn diff_right_after_up_is_clean_while_sqs_shows_attribute_writes_late() {
    let (c, wd, px) = setup("rs-attr");
    px.set(json!({"sqs_attr_lag_s": {queue_name(&c): 5}}));

    let up = karpctl_via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let diff = karpctl_via(&wd, &px, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "diff right after up finds nothing to do: {diff:?}\nup: {up:?}");
    assert!(diff.stdout.contains("No changes"), "{diff:?}");
    assert!(!lagged(&px, "sqs_attr_lag_s").is_empty(), "SQS showed the policy write late: {:?}", px.calls_json());
    assert!(up.stderr.contains("waiting for SQS to show"), "the wait is shown: {up:?}");
    assert_queue_and_rules_work(&c);
}

#[test]
fn down_then_up_at_once_ends_with_a_working_queue() {
    let (c, wd, px) = setup("rs-delete");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let lag = Duration::from_secs(5);
    px.set(json!({"sqs_delete_lag_s": {queue_name(&c): lag.as_secs()}}));

    let start = Instant::now();
    let down = karpctl_via(&wd, &px, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    let up = karpctl_via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert_eq!(lagged(&px, "sqs_delete_lag_s").len(), 1, "the delete was deferred: {:?}", px.calls_json());

    // Whatever SQS deferred has happened by now.
    if let Some(rest) = (lag + Duration::from_millis(1500)).checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    assert_queue_and_rules_work(&c);
    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "{diff:?}\ndown: {down:?}\nup: {up:?}");
    assert!(down.stderr.contains("waiting for SQS to finish deleting the queue"), "the wait is shown: {down:?}");
}

#[test]
fn up_succeeds_and_says_so_when_sqs_shows_a_write_only_after_the_deadline() {
    let (c, wd, px) = setup("rs-late");
    let lag = Duration::from_secs(5);
    px.set(json!({"sqs_attr_lag_s": {queue_name(&c): lag.as_secs()}}));

    let start = Instant::now();
    let up = karpctl_via_env(&wd, &px, &["up", "--cluster", &c], &[SHORT_DEADLINE]);
    assert_eq!(up.code, 0, "the write was accepted: up does not fail: {up:?}");
    assert!(
        up.stderr.contains("queue-policy: SQS accepted the new policy but does not show it yet")
            && up.stderr.contains("`karpctl diff` may show it as a change for up to a minute"),
        "up says the change is accepted but not visible yet: {up:?}"
    );
    if let Some(rest) = (lag + Duration::from_millis(1500)).checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let diff = karpctl_via(&wd, &px, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "once SQS shows it, diff is clean: {diff:?}");
}

#[test]
fn down_fails_and_says_to_run_it_again_when_the_queue_outlives_the_deadline() {
    let (c, wd, px) = setup("rs-linger");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let lag = Duration::from_secs(5);
    px.set(json!({"sqs_delete_lag_s": {queue_name(&c): lag.as_secs()}}));

    let start = Instant::now();
    let down = karpctl_via_env(&wd, &px, &["down", "--cluster", &c, "--yes"], &[SHORT_DEADLINE]);
    assert_eq!(down.code, 1, "down does not claim the queue is gone: {down:?}");
    assert!(
        down.stderr.contains("is still being deleted") && down.stderr.contains("run `karpctl down` again"),
        "down says what to do: {down:?}"
    );
    if let Some(rest) = (lag + Duration::from_millis(1500)).checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    let again = karpctl_via(&wd, &px, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(queue(&sdk(), &queue_name(&c)).is_none(), "the queue is gone");
}
