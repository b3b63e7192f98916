//! Reads that disagree: AWS answers SQS and EKS reads from replicas, so for a while after a write
//! or a delete one read shows the change and the next does not (docs/aws-behaviour.md section
//! 9.18). The lag proxy's flip-flop rules (scripts/lagproxy.py) play that: during a window, reads
//! of the object alternate between the old and the new answer. karpctl waits for several reads in
//! a row to agree. Results are checked straight against the emulator.

use crate::common::lag::LagProxy;
use crate::common::*;
use crate::sqs_lag::assert_queue_and_rules_work;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn setup(prefix: &str) -> (String, Workdir, LagProxy) {
    let c = cluster_name(prefix);
    seed(&c, &[]);
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    (c, Workdir::new(), px)
}

fn via(wd: &Workdir, px: &LagProxy, args: &[&str]) -> Run {
    karpctl_at(wd, px.url(), args, &[])
}

/// The calls the proxy answered under `rule`.
fn lagged(px: &LagProxy, rule: &str) -> Vec<Value> {
    px.calls_json().into_iter().filter(|c| c["lag"] == rule).collect()
}

/// Sleep until `at` after `start` (whatever the proxy deferred has happened by then).
fn sleep_until(start: Instant, at: Duration) {
    if let Some(rest) = at.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
}

/// The node role's ARN as the emulator has it.
fn node_role_arn(sdk: &Sdk, c: &str) -> String {
    rt().block_on(sdk.iam.get_role().role_name(node_role(c)).send()).expect("iam:GetRole").role().unwrap().arn().to_string()
}

fn access_entry_exists(sdk: &Sdk, c: &str, principal: &str) -> bool {
    rt().block_on(sdk.eks.describe_access_entry().cluster_name(c).principal_arn(principal).send()).is_ok()
}

/// The queue, its policy, the rules, the access entry and the association all exist, as
/// karpctl's (straight from the emulator), and `diff` finds nothing to do.
fn assert_all_works(wd: &Workdir, c: &str) {
    assert_queue_and_rules_work(c);
    let sdk = sdk();
    assert!(access_entry_exists(&sdk, c, &node_role_arn(&sdk, c)), "the node role's access entry exists");
    assert_eq!(karpenter_associations(&sdk, c).len(), 1, "one Pod Identity association for kube-system/karpenter");
    let diff = karpctl(wd, &["diff", "--cluster", c]);
    assert_eq!(diff.code, 0, "{diff:?}");
}

#[test]
fn diff_right_after_up_is_clean_while_attribute_reads_disagree() {
    let (c, wd, px) = setup("rp-attr");
    let q = queue_name(&c);
    px.set(json!({"sqs_attr_flipflop_s": {&q: 4}, "sqs_create_flipflop_s": {&q: 3}}));

    let up = via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let diff = via(&wd, &px, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 0, "no phantom drift right after up: {diff:?}\nup: {up:?}");
    assert!(diff.stdout.contains("No changes"), "{diff:?}");
    assert!(!lagged(&px, "sqs_attr_flipflop_s").is_empty(), "policy reads disagreed: {:?}", px.calls_json());
    assert!(!lagged(&px, "sqs_create_flipflop_s").is_empty(), "the new queue's reads disagreed: {:?}", px.calls_json());
    assert_queue_and_rules_work(&c);
}

#[test]
fn down_then_up_at_once_leaves_everything_working_while_reads_disagree_during_the_deletes() {
    let (c, wd, px) = setup("rp-delete");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let window = Duration::from_secs(5);
    px.set(json!({"sqs_delete_flipflop_s": {queue_name(&c): window.as_secs()}, "eks_delete_flipflop_s": {&c: window.as_secs()}}));

    let start = Instant::now();
    let down = via(&wd, &px, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    let down_took = start.elapsed();
    let up = via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(!lagged(&px, "sqs_delete_flipflop_s").is_empty(), "queue reads disagreed: {:?}", px.calls_json());
    assert!(!lagged(&px, "eks_delete_flipflop_s").is_empty(), "EKS reads disagreed: {:?}", px.calls_json());
    assert!(down_took >= window, "down returned only once the deletes were seen consistently ({down_took:?}): {down:?}");

    // Whatever the proxy deferred has happened by now: nothing karpctl relied on vanished.
    sleep_until(start, window + Duration::from_millis(1500));
    assert_all_works(&wd, &c);
}

#[test]
fn a_create_answered_already_exists_while_reads_find_nothing_converges() {
    let (c, wd, px) = setup("rp-409");
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    // EKS's reads say the deleted entry and association are gone at once; the deletes take effect
    // 15 s later, so a create before then is answered 409 ResourceInUseException.
    // Longer than `down` takes (its queue delete wants 5 not-found reads 2 s apart).
    let lag = Duration::from_secs(15);
    px.set(json!({"eks_delete_lag_s": {&c: lag.as_secs()}}));

    let start = Instant::now();
    let down = via(&wd, &px, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    let up = via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "the 409 is a race, retried: {up:?}");
    assert!(up.stderr.contains("ResourceInUseException"), "the retry is shown: {up:?}");
    let raced: Vec<Value> = px
        .calls_json()
        .into_iter()
        .filter(|x| x["status"] == 409 && x["operation"].as_str().unwrap_or("").starts_with("Create"))
        .collect();
    assert!(!raced.is_empty(), "a create was answered 409: {:?}", px.calls_json());

    sleep_until(start, lag + Duration::from_millis(1500));
    assert_all_works(&wd, &c);
}

#[test]
fn a_new_queue_read_back_with_no_tags_is_asked_again_before_it_is_called_unowned() {
    let (c, wd, px) = setup("rp-tags");
    px.set(json!({"sqs_tags_lag_s": {queue_name(&c): 3}}));

    let up = via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(!up.all().contains("not managed by karpctl"), "a queue this run made is never called unmanaged: {up:?}");
    assert!(!lagged(&px, "sqs_tags_lag_s").is_empty(), "ListQueueTags answered no tags: {:?}", px.calls_json());
    assert_queue_and_rules_work(&c);
    assert_second_up_writes_nothing(&wd, &c);
}

#[test]
fn where_the_partition_cannot_tag_on_create_the_queue_is_made_then_tagged() {
    let (c, wd, px) = setup("rp-iso");
    px.set(json!({"sts_partition": "aws-iso", "sqs_tag_on_create_unsupported": {queue_name(&c): true}}));

    let up = via(&wd, &px, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    assert!(up.stderr.contains("does not take tags on sqs:CreateQueue"), "the fallback is said: {up:?}");
    let refused = lagged(&px, "sqs_tag_on_create_unsupported");
    assert_eq!(refused.len(), 1, "one tagged CreateQueue was refused: {:?}", px.calls_json());
    let q = queue(&sdk(), &queue_name(&c)).expect("the queue exists");
    assert_eq!(q.tags.get("karpctl.io/cluster").map(String::as_str), Some(c.as_str()), "tagged after: {:?}", q.tags);
    // Only STS is in aws-iso here: the emulator's IAM answers `arn:aws:` ARNs, so the policies
    // (named by their aws-iso ARNs) look missing. The queue is what this test is about: in sync.
    let diff = via(&wd, &px, &["diff", "--cluster", &c]);
    let queue_changes: Vec<&str> = diff
        .stdout
        .lines()
        .filter(|l| ["  + queue", "  ~ queue", "  - queue", "  -/+ queue"].iter().any(|p| l.starts_with(p)))
        .collect();
    assert!(queue_changes.is_empty(), "the queue and its policy are in sync: {queue_changes:?}\n{diff:?}");
}
