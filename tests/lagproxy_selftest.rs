//! Self-tests of scripts/lagproxy.py (tests/common/lag.rs): each AWS time-dependent behaviour it
//! emulates, seen through the Rust AWS SDK clients pointed at the proxy, with windows of 1-3 s.
//! Every test starts its own proxy in front of the test emulator and scopes its rules to its own
//! queue / cluster / role names; a second name in the same test shows that the rule is scoped.

use crate::common::lag::LagProxy;
use crate::common::*;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;
use std::time::{Duration, Instant};

const NON_EXISTENT_QUEUE: &str = "AWS.SimpleQueueService.NonExistentQueue";

fn proxy(prefix: &str) -> LagProxy {
    LagProxy::start(&cluster_name(prefix), &endpoint())
}

/// Wait until `f` holds (polling every 100 ms), at most `max`; returns the time it took.
fn eventually(max: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    loop {
        if f() {
            return t.elapsed();
        }
        assert!(t.elapsed() < max, "{what}: not within {max:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn visibility_timeout(sdk: &Sdk, url: &str) -> Option<String> {
    let out = rt()
        .block_on(sdk.sqs.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::All).send())
        .expect("GetQueueAttributes");
    out.attributes().and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout)).cloned()
}

fn has_policy(sdk: &Sdk, url: &str) -> bool {
    let out = rt()
        .block_on(sdk.sqs.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::All).send())
        .expect("GetQueueAttributes");
    out.attributes().is_some_and(|a| a.contains_key(&QueueAttributeName::Policy))
}

fn create_queue(sdk: &Sdk, name: &str) -> String {
    rt().block_on(sdk.sqs.create_queue().queue_name(name).send()).expect("CreateQueue").queue_url().unwrap().to_string()
}

fn set_attrs(sdk: &Sdk, url: &str, attrs: &[(QueueAttributeName, &str)]) {
    let mut req = sdk.sqs.set_queue_attributes().queue_url(url);
    for (k, v) in attrs {
        req = req.attributes(k.clone(), *v);
    }
    rt().block_on(req.send()).expect("SetQueueAttributes");
}

#[test]
fn lag_sqs_attributes_read_old_values_within_the_window() {
    let px = proxy("lagattr");
    let (q, other) = (cluster_name("lagattr-q"), cluster_name("lagattr-other"));
    px.set(json!({"sqs_attr_lag_s": {&q: 2}}));
    let sdk = sdk_at(px.url());
    let direct = crate::common::sdk();
    let url = create_queue(&sdk, &q);
    let other_url = create_queue(&sdk, &other);

    let policy = r#"{"Version":"2012-10-17","Statement":[]}"#;
    set_attrs(&sdk, &url, &[(QueueAttributeName::VisibilityTimeout, "77"), (QueueAttributeName::Policy, policy)]);
    let written = Instant::now();
    // Through the proxy: the values from before the write, an attribute that did not exist
    // before (Policy) absent. The emulator itself already has the new ones.
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("30"));
    assert!(!has_policy(&sdk, &url), "Policy was not set before the write");
    assert_eq!(visibility_timeout(&direct, &url).as_deref(), Some("77"));
    assert!(has_policy(&direct, &url));
    // The rule is scoped to its queue: another queue's write shows at once.
    set_attrs(&sdk, &other_url, &[(QueueAttributeName::VisibilityTimeout, "55")]);
    assert_eq!(visibility_timeout(&sdk, &other_url).as_deref(), Some("55"));

    eventually(Duration::from_secs(6), "new VisibilityTimeout through the proxy", || {
        visibility_timeout(&sdk, &url).as_deref() == Some("77")
    });
    assert!(written.elapsed() >= Duration::from_secs(2), "new value seen after {:?}, before the window ended", written.elapsed());
    assert!(has_policy(&sdk, &url));

    let calls = px.calls();
    assert!(calls.contains(&("sqs".to_string(), "SetQueueAttributes".to_string())), "{calls:?}");
    // The call log says which reads the snapshot served: every read of the queue until the
    // window ended, none after.
    let reads: Vec<bool> = px
        .calls_json()
        .iter()
        .filter(|c| c["operation"] == "GetQueueAttributes" && c["resource"] == q.as_str())
        .map(|c| c["lag"] == "sqs_attr_lag_s")
        .collect();
    let served = reads.iter().take_while(|lagged| **lagged).count();
    assert!(served >= 2 && reads[served..].iter().all(|lagged| !lagged) && served < reads.len(), "{:?}", px.calls_json());
    // A SetQueueAttributes call carries what it wrote (the queue-policy hand-over test reads it).
    let writes: Vec<serde_json::Value> = px
        .calls_json()
        .into_iter()
        .filter(|c| c["operation"] == "SetQueueAttributes" && c["resource"] == q.as_str())
        .map(|c| c["attributes"].clone())
        .collect();
    assert_eq!(writes, [json!({"VisibilityTimeout": "77", "Policy": policy})], "{:?}", px.calls_json());
}

#[test]
fn lag_sqs_create_answers_non_existent_queue_within_the_window() {
    let px = proxy("lagcreate");
    let (q, other) = (cluster_name("lagcreate-q"), cluster_name("lagcreate-other"));
    px.set(json!({"sqs_create_lag_s": {&q: 1.5}}));
    let sdk = sdk_at(px.url());
    // The window opens inside CreateQueue, so the time is taken before it is sent.
    let created = Instant::now();
    let url = create_queue(&sdk, &q);

    let e = rt()
        .block_on(sdk.sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send())
        .expect_err("GetQueueAttributes right after CreateQueue");
    assert_eq!(e.code(), Some(NON_EXISTENT_QUEUE), "{e:?}");
    assert!(e.as_service_error().is_some_and(|s| s.is_queue_does_not_exist()), "{e:?}");
    let e = rt().block_on(sdk.sqs.tag_queue().queue_url(&url).tags("k", "v").send()).expect_err("TagQueue");
    assert_eq!(e.code(), Some(NON_EXISTENT_QUEUE), "{e:?}");
    let e = rt().block_on(sdk.sqs.list_queue_tags().queue_url(&url).send()).expect_err("ListQueueTags");
    assert_eq!(e.code(), Some(NON_EXISTENT_QUEUE), "{e:?}");
    let e = rt()
        .block_on(sdk.sqs.set_queue_attributes().queue_url(&url).attributes(QueueAttributeName::DelaySeconds, "1").send())
        .expect_err("SetQueueAttributes");
    assert_eq!(e.code(), Some(NON_EXISTENT_QUEUE), "{e:?}");
    // Another queue created through the same proxy is usable at once.
    let other_url = create_queue(&sdk, &other);
    assert_eq!(visibility_timeout(&sdk, &other_url).as_deref(), Some("30"));

    eventually(Duration::from_secs(5), "queue readable after the create window", || {
        rt().block_on(sdk.sqs.get_queue_attributes().queue_url(&url).attribute_names(QueueAttributeName::All).send()).is_ok()
    });
    assert!(created.elapsed() >= Duration::from_millis(1500), "readable after {:?}", created.elapsed());
    rt().block_on(sdk.sqs.tag_queue().queue_url(&url).tags("k", "v").send()).expect("TagQueue after the window");

    // A CreateQueue of a queue that already exists opens no window.
    create_queue(&sdk, &q);
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("30"));
    assert_eq!(px.count("CreateQueue"), 3, "{:?}", px.calls());
}

#[test]
fn lag_sqs_delete_takes_effect_after_the_window() {
    let px = proxy("lagdelete");
    let q = cluster_name("lagdelete-q");
    px.set(json!({"sqs_delete_lag_s": {&q: 2}}));
    let sdk = sdk_at(px.url());
    let url = create_queue(&sdk, &q);

    rt().block_on(sdk.sqs.delete_queue().queue_url(&url).send()).expect("DeleteQueue answers success at once");
    let deleted = Instant::now();
    rt().block_on(sdk.sqs.get_queue_url().queue_name(&q).send()).expect("GetQueueUrl within the window");
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("30"), "reads still work within the window");
    assert_eq!(px.state()["sqs_delete"][0]["queue"], q.as_str(), "{}", px.state());

    eventually(Duration::from_secs(6), "queue gone after the delete window", || {
        match rt().block_on(sdk.sqs.get_queue_url().queue_name(&q).send()) {
            Ok(_) => false,
            Err(e) => {
                assert_eq!(e.code(), Some(NON_EXISTENT_QUEUE), "{e:?}");
                true
            }
        }
    });
    assert!(deleted.elapsed() >= Duration::from_secs(2), "gone after {:?}", deleted.elapsed());
    assert!(px.state()["sqs_delete"].as_array().unwrap().is_empty());
}

#[test]
fn lag_eks_cluster_status_and_gone() {
    let c = cluster_name("lageks");
    seed(&c, &["--no-pod-identity-agent"]);
    let px = proxy("lageks");
    let sdk = sdk_at(px.url());
    let status = |sdk: &Sdk| {
        let out = rt().block_on(sdk.eks.describe_cluster().name(&c).send()).expect("DescribeCluster");
        out.cluster().and_then(|c| c.status()).map(|s| s.as_str().to_string())
    };
    assert_eq!(status(&sdk).as_deref(), Some("ACTIVE"));

    px.set(json!({"eks_cluster_status": {"some-other-cluster": "DELETING"}}));
    assert_eq!(status(&sdk).as_deref(), Some("ACTIVE"), "scoped to its cluster");
    px.set(json!({"eks_cluster_status": {&c: "UPDATING"}}));
    assert_eq!(status(&sdk).as_deref(), Some("UPDATING"));
    assert_eq!(status(&crate::common::sdk()).as_deref(), Some("ACTIVE"), "the emulator is unchanged");
    px.set(json!({"eks_cluster_status": {&c: "FAILED"}}));
    assert_eq!(status(&sdk).as_deref(), Some("FAILED"));
    let rules = px.set(json!({"eks_cluster_status": {&c: null}}));
    assert_eq!(rules, json!({"eks_cluster_status": {"some-other-cluster": "DELETING"}}), "null removes one name");
    assert_eq!(status(&sdk).as_deref(), Some("ACTIVE"));

    px.set(json!({"eks_cluster_gone": [&c]}));
    let e = rt().block_on(sdk.eks.describe_cluster().name(&c).send()).expect_err("DescribeCluster of a gone cluster");
    assert_eq!(e.code(), Some("ResourceNotFoundException"), "{e:?}");
    assert_eq!(e.message(), Some(format!("No cluster found for name: {c}.").as_str()));
    assert!(e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()), "{e:?}");
    let e = rt().block_on(sdk.eks.list_access_entries().cluster_name(&c).send()).expect_err("ListAccessEntries");
    assert_eq!(e.code(), Some("ResourceNotFoundException"), "{e:?}");
    px.set(json!({"eks_cluster_gone": {&c: false}}));
    assert_eq!(status(&sdk).as_deref(), Some("ACTIVE"));

    let calls = px.calls();
    assert!(calls.contains(&("eks".to_string(), "DescribeCluster".to_string())), "{calls:?}");
    assert!(calls.contains(&("eks".to_string(), "ListAccessEntries".to_string())), "{calls:?}");
}

#[test]
fn lag_role_propagation_refuses_access_entries_and_pod_identity() {
    let c = cluster_name("lagrole");
    seed(&c, &[]);
    let px = proxy("lagrole");
    let role = cluster_name("lagrole-r");
    let other = cluster_name("lagrole-other");
    px.set(json!({"eks_role_propagation_s": {&role: 2}}));
    let sdk = sdk_at(px.url());
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}"#;
    let arn_of = |name: &str| {
        let out = rt()
            .block_on(
                sdk.iam.create_role().role_name(name).path(format!("/karpctl/{c}/")).assume_role_policy_document(trust).send(),
            )
            .expect("CreateRole");
        out.role().unwrap().arn().to_string()
    };
    let arn = arn_of(&role);
    let created = Instant::now();
    let other_arn = arn_of(&other);
    // (code, message) of a refusal; boxed errors would do too, this keeps the asserts short.
    let refusal = |e: &dyn ProvideErrorMetadata| (e.code().map(str::to_string), e.message().map(str::to_string));
    let entry = |arn: &str| {
        rt().block_on(sdk.eks.create_access_entry().cluster_name(&c).principal_arn(arn).r#type("EC2_LINUX").send())
            .map(drop)
            .map_err(|e| {
                assert!(e.as_service_error().is_none_or(|s| s.is_invalid_parameter_exception()), "{e:?}");
                refusal(&e)
            })
    };
    let association = |arn: &str, sa: &str| {
        rt().block_on(
            sdk.eks
                .create_pod_identity_association()
                .cluster_name(&c)
                .namespace("kube-system")
                .service_account(sa)
                .role_arn(arn)
                .send(),
        )
        .map(drop)
        .map_err(|e| refusal(&e))
    };
    let invalid = |msg: &str| (Some("InvalidParameterException".to_string()), Some(msg.to_string()));

    let e = entry(&arn).expect_err("CreateAccessEntry right after CreateRole");
    assert_eq!(e, invalid("The specified principalArn is invalid: invalid principal"));
    let e = association(&arn, "karpenter").expect_err("CreatePodIdentityAssociation right after CreateRole");
    assert_eq!(e, invalid("Role provided in the request does not exist"));
    // Scoped to its role: the other role (no rule) is accepted at once.
    entry(&other_arn).expect("CreateAccessEntry for a role without a rule");

    eventually(Duration::from_secs(6), "access entry accepted after the window", || entry(&arn).is_ok());
    assert!(created.elapsed() >= Duration::from_secs(2), "accepted after {:?}", created.elapsed());
    association(&arn, "karpenter").expect("CreatePodIdentityAssociation after the window");

    // A trust policy update opens the window again, with the trust-policy message.
    rt().block_on(sdk.iam.update_assume_role_policy().role_name(&role).policy_document(trust).send())
        .expect("UpdateAssumeRolePolicy");
    let updated = Instant::now();
    let e = association(&arn, "karpenter-2").expect_err("CreatePodIdentityAssociation right after UpdateAssumeRolePolicy");
    assert_eq!(e, invalid("Trust policy of the role provided is invalid"));
    eventually(Duration::from_secs(6), "association accepted after the trust window", || {
        association(&arn, "karpenter-2").is_ok()
    });
    assert!(updated.elapsed() >= Duration::from_secs(2), "accepted after {:?}", updated.elapsed());

    let calls = px.calls();
    for (svc, op) in [
        ("iam", "CreateRole"),
        ("iam", "UpdateAssumeRolePolicy"),
        ("eks", "CreateAccessEntry"),
        ("eks", "CreatePodIdentityAssociation"),
    ] {
        assert!(calls.contains(&(svc.to_string(), op.to_string())), "{svc} {op} not in {calls:?}");
    }
}

#[test]
fn lag_control_api_merges_validates_and_resets() {
    let px = proxy("lagctl");
    assert_eq!(px.rules(), json!({}));
    px.set(json!({"sqs_attr_lag_s": {"a": 1}, "eks_cluster_gone": ["c1"]}));
    let rules = px.set(json!({"sqs_attr_lag_s": {"b": 2}, "eks_cluster_gone": ["c2"], "eks_cluster_status": {"c3": "UPDATING"}}));
    assert_eq!(
        rules,
        json!({"sqs_attr_lag_s": {"a": 1, "b": 2}, "eks_cluster_gone": ["c1", "c2"], "eks_cluster_status": {"c3": "UPDATING"}})
    );
    let e = px.try_set(json!({"sqs_attr_lag_s": 2})).expect_err("an unscoped rule is refused");
    assert!(e.contains("keyed by name"), "{e}");
    let e = px.try_set(json!({"sqs_create_lag_s": {"q": "soon"}})).expect_err("seconds must be a number");
    assert!(e.contains("number of seconds"), "{e}");
    let e = px.try_set(json!({"no_such_rule": {}})).expect_err("unknown rule");
    assert!(e.contains("unknown rule"), "{e}");
    assert_eq!(px.rules(), rules, "a refused patch changes nothing");

    // Calls are logged with service, operation and time; reset clears rules and log.
    let sdk = sdk_at(px.url());
    rt().block_on(sdk.sqs.list_queues().send()).expect("ListQueues");
    rt().block_on(sdk.eks.list_clusters().send()).expect("ListClusters");
    rt().block_on(sdk.iam.list_roles().max_items(1).send()).expect("ListRoles");
    assert_eq!(
        px.calls(),
        [("sqs", "ListQueues"), ("eks", "ListClusters"), ("iam", "ListRoles")]
            .map(|(s, o)| (s.to_string(), o.to_string()))
            .to_vec()
    );
    assert!(px.calls_json().iter().all(|c| c["time"].as_f64().is_some_and(|t| t > 1.7e9)), "{:?}", px.calls_json());
    px.reset();
    assert_eq!(px.rules(), json!({}));
    assert!(px.calls().is_empty());
}

fn attrs_ok(sdk: &Sdk, url: &str) -> Result<Option<String>, String> {
    rt().block_on(sdk.sqs.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::All).send())
        .map(|o| o.attributes().and_then(|a| a.get(&QueueAttributeName::VisibilityTimeout)).cloned())
        .map_err(|e| e.code().unwrap_or("?").to_string())
}

fn url_of(sdk: &Sdk, q: &str) -> Result<String, String> {
    rt().block_on(sdk.sqs.get_queue_url().queue_name(q).send())
        .map(|o| o.queue_url().unwrap_or_default().to_string())
        .map_err(|e| e.code().unwrap_or("?").to_string())
}

#[test]
fn flipflop_sqs_attributes_first_read_shows_the_write_later_reads_do_not() {
    let px = proxy("ffattr");
    let q = cluster_name("ffattr-q");
    px.set(json!({"sqs_attr_flipflop_s": {&q: 2}}));
    let sdk = sdk_at(px.url());
    let url = create_queue(&sdk, &q);
    set_attrs(&sdk, &url, &[(QueueAttributeName::VisibilityTimeout, "77")]);
    let written = Instant::now();
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("77"), "the first read shows the write");
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("30"), "the next one does not");
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("30"));
    eventually(Duration::from_secs(6), "the write shown after the window", || {
        visibility_timeout(&sdk, &url).as_deref() == Some("77")
    });
    assert!(written.elapsed() >= Duration::from_secs(2), "{:?}", written.elapsed());
    for _ in 0..3 {
        assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("77"), "reads agree after the window");
    }
    // A write inside a new window: first read new again.
    set_attrs(&sdk, &url, &[(QueueAttributeName::VisibilityTimeout, "88")]);
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("88"));
    assert_eq!(visibility_timeout(&sdk, &url).as_deref(), Some("77"));
}

#[test]
fn flipflop_sqs_create_and_delete_and_deleted_recently() {
    let px = proxy("ffq");
    let (q, d) = (cluster_name("ffq-new"), cluster_name("ffq-del"));
    px.set(json!({"sqs_create_flipflop_s": {&q: 2}, "sqs_delete_flipflop_s": {&d: 2}, "sqs_deleted_recently_s": {&d: 4}}));
    let sdk = sdk_at(px.url());

    // Create: the first read finds the new queue, the reads after do not, until the window ends.
    let url = create_queue(&sdk, &q);
    let created = Instant::now();
    assert_eq!(attrs_ok(&sdk, &url), Ok(Some("30".into())), "the first read finds it");
    assert_eq!(attrs_ok(&sdk, &url), Err(NON_EXISTENT_QUEUE.into()));
    assert_eq!(url_of(&sdk, &q), Err(NON_EXISTENT_QUEUE.into()));
    eventually(Duration::from_secs(6), "the new queue read after the window", || attrs_ok(&sdk, &url).is_ok());
    assert!(created.elapsed() >= Duration::from_secs(2), "{:?}", created.elapsed());

    // Delete: answered at once; the first read says gone, the reads after find it; then gone.
    let durl = create_queue(&sdk, &d);
    rt().block_on(sdk.sqs.delete_queue().queue_url(&durl).send()).expect("DeleteQueue answers at once");
    let deleted = Instant::now();
    assert_eq!(url_of(&sdk, &d), Err(NON_EXISTENT_QUEUE.into()), "the first read says gone");
    assert_eq!(url_of(&sdk, &d), Ok(durl.clone()), "the next finds it");
    assert!(attrs_ok(&sdk, &durl).is_ok());
    // Deleted recently: CreateQueue of the name is refused (the delete has not even landed).
    let e = rt().block_on(sdk.sqs.create_queue().queue_name(&d).send()).expect_err("CreateQueue after DeleteQueue");
    assert_eq!(e.code(), Some("AWS.SimpleQueueService.QueueDeletedRecently"), "{e:?}");
    eventually(Duration::from_secs(6), "the queue gone after the delete window", || url_of(&sdk, &d).is_err());
    assert!(deleted.elapsed() >= Duration::from_secs(2), "{:?}", deleted.elapsed());
    assert!(url_of(&crate::common::sdk(), &d).is_err(), "the delete reached the emulator");
    eventually(Duration::from_secs(6), "CreateQueue accepted after the deleted-recently window", || {
        rt().block_on(sdk.sqs.create_queue().queue_name(&d).send()).is_ok()
    });
    assert!(deleted.elapsed() >= Duration::from_secs(4), "{:?}", deleted.elapsed());
}

#[test]
fn lag_sqs_tags_and_tag_on_create_unsupported() {
    let px = proxy("lagtags");
    let (q, iso) = (cluster_name("lagtags-q"), cluster_name("lagtags-iso"));
    px.set(json!({"sqs_tags_lag_s": {&q: 2}, "sqs_tag_on_create_unsupported": {&iso: true}}));
    let sdk = sdk_at(px.url());
    let tags = |url: &str| {
        let o = rt().block_on(sdk.sqs.list_queue_tags().queue_url(url).send()).expect("ListQueueTags");
        o.tags().cloned().unwrap_or_default()
    };
    let url =
        rt().block_on(sdk.sqs.create_queue().queue_name(&q).tags("k", "v").send()).unwrap().queue_url().unwrap().to_string();
    let created = Instant::now();
    assert!(tags(&url).is_empty(), "no tags within the window");
    assert_eq!(crate::common::queue(&crate::common::sdk(), &q).unwrap().tags.get("k").map(String::as_str), Some("v"));
    eventually(Duration::from_secs(6), "tags after the window", || tags(&url).contains_key("k"));
    assert!(created.elapsed() >= Duration::from_secs(2), "{:?}", created.elapsed());
    rt().block_on(sdk.sqs.tag_queue().queue_url(&url).tags("k2", "v2").send()).expect("TagQueue");
    assert!(tags(&url).is_empty(), "TagQueue opens the window again");

    let e = rt().block_on(sdk.sqs.create_queue().queue_name(&iso).tags("k", "v").send()).expect_err("tagged CreateQueue");
    assert_eq!(e.code(), Some("AWS.SimpleQueueService.UnsupportedOperation"), "{e:?}");
    let iso_url = create_queue(&sdk, &iso);
    rt().block_on(sdk.sqs.tag_queue().queue_url(&iso_url).tags("k", "v").send()).expect("TagQueue works");
    let e = px.try_set(json!({"sqs_tag_on_create_unsupported": {"x": 1}})).expect_err("a bool rule takes a bool");
    assert!(e.contains("true or false"), "{e}");
}

/// A cluster with one access entry and one Pod Identity association, made straight on the
/// emulator: (principal ARN, association id).
fn entry_and_association(c: &str) -> (String, String) {
    let sdk = crate::common::sdk();
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"pods.eks.amazonaws.com"},"Action":["sts:AssumeRole","sts:TagSession"]}]}"#;
    let arn = rt()
        .block_on(sdk.iam.create_role().role_name(format!("{c}-r")).assume_role_policy_document(trust).send())
        .expect("CreateRole")
        .role()
        .unwrap()
        .arn()
        .to_string();
    rt().block_on(sdk.eks.create_access_entry().cluster_name(c).principal_arn(&arn).r#type("EC2_LINUX").send())
        .expect("CreateAccessEntry");
    let a = rt()
        .block_on(
            sdk.eks
                .create_pod_identity_association()
                .cluster_name(c)
                .namespace("kube-system")
                .service_account("karpenter")
                .role_arn(&arn)
                .send(),
        )
        .expect("CreatePodIdentityAssociation");
    (arn, a.association().unwrap().association_id().unwrap().to_string())
}

#[test]
fn eks_deferred_deletes_flip_flop_or_read_gone_and_creates_answer_409() {
    for (mode, rule) in [("flip", "eks_delete_flipflop_s"), ("lag", "eks_delete_lag_s")] {
        let c = cluster_name(&format!("ffeks-{mode}"));
        seed(&c, &["--no-pod-identity-agent"]);
        let (arn, id) = entry_and_association(&c);
        let px = proxy(&format!("ffeks-{mode}"));
        px.set(json!({ rule: {&c: 2} }));
        let sdk = sdk_at(px.url());
        let entry = || rt().block_on(sdk.eks.describe_access_entry().cluster_name(&c).principal_arn(&arn).send()).is_ok();
        let listed = || {
            let o = rt().block_on(sdk.eks.list_pod_identity_associations().cluster_name(&c).send()).expect("List");
            o.associations().iter().any(|a| a.association_id() == Some(id.as_str()))
        };
        // Before the first delete is asked for: the proxy's window opens when it gets it, so a
        // delete that lands 2 s after that lands at least 2 s after this instant.
        let deleted = Instant::now();
        rt().block_on(sdk.eks.delete_access_entry().cluster_name(&c).principal_arn(&arn).send()).expect("DeleteAccessEntry");
        let a = rt()
            .block_on(sdk.eks.delete_pod_identity_association().cluster_name(&c).association_id(&id).send())
            .expect("DeletePodIdentityAssociation");
        assert_eq!(a.association().and_then(|a| a.association_id()), Some(id.as_str()), "answered as EKS does");
        assert!(!entry(), "{mode}: the first read finds the entry gone");
        assert!(!listed(), "{mode}: the first List leaves the association out");
        assert_eq!(entry(), mode == "flip", "{mode}: the second read");
        assert_eq!(listed(), mode == "flip", "{mode}: the second List");
        let e = rt()
            .block_on(sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&arn).r#type("EC2_LINUX").send())
            .expect_err("CreateAccessEntry while the delete is pending");
        assert_eq!(e.code(), Some("ResourceInUseException"), "{e:?}");
        assert!(entry_exists_directly(&c, &arn), "{mode}: the emulator still has the entry");
        eventually(Duration::from_secs(6), "the deletes landed", || !entry_exists_directly(&c, &arn));
        assert!(deleted.elapsed() >= Duration::from_secs(2), "{:?}", deleted.elapsed());
        assert!(!entry() && !listed(), "{mode}: gone for every read after the window");
        rt().block_on(sdk.eks.create_access_entry().cluster_name(&c).principal_arn(&arn).r#type("EC2_LINUX").send())
            .expect("CreateAccessEntry after the window");
        assert!(px.calls_json().iter().any(|x| x["lag"] == rule && x["status"] == 409), "{:?}", px.calls_json());
    }
}

fn entry_exists_directly(c: &str, arn: &str) -> bool {
    rt().block_on(crate::common::sdk().eks.describe_access_entry().cluster_name(c).principal_arn(arn).send()).is_ok()
}

#[test]
fn eks_access_entry_tags_are_answered_by_describe_access_entry() {
    let c = cluster_name("lag-aetags");
    seed(&c, &[]);
    let (arn, _) = entry_and_association(&c);
    let px = proxy("lag-aetags-px");
    let through = sdk_at(px.url());
    let tags_of = |s: &Sdk| {
        let e = rt()
            .block_on(s.eks.describe_access_entry().cluster_name(&c).principal_arn(&arn).send())
            .expect("DescribeAccessEntry");
        e.access_entry().unwrap().tags().cloned().unwrap_or_default()
    };
    let entry_arn = {
        let e = rt().block_on(through.eks.describe_access_entry().cluster_name(&c).principal_arn(&arn).send()).unwrap();
        e.access_entry().unwrap().access_entry_arn().unwrap().to_string()
    };
    rt().block_on(through.eks.tag_resource().resource_arn(&entry_arn).tags("team", "platform").send()).expect("TagResource");
    assert!(tags_of(&through).is_empty(), "without the rule the emulator's answer is passed on as it is");
    px.set(json!({"eks_access_entry_tags": {&c: true}}));
    assert_eq!(tags_of(&through).get("team").map(String::as_str), Some("platform"), "with the rule, as AWS answers");
    rt().block_on(through.eks.tag_resource().resource_arn(&entry_arn).tags("karpctl.io/tags", "team").send()).unwrap();
    rt().block_on(through.eks.untag_resource().resource_arn(&entry_arn).tag_keys("team").tag_keys("karpctl.io/tags").send())
        .expect("UntagResource");
    assert!(tags_of(&through).is_empty(), "both keys removed, as AWS removes them: {:?}", tags_of(&through));
    rt().block_on(through.eks.tag_resource().resource_arn(&entry_arn).tags("team", "platform").send()).unwrap();
    px.set(json!({"eks_access_entry_tags": {&c: null, "another-cluster": true}}));
    assert!(tags_of(&through).is_empty(), "scoped to its cluster");
}

/// Ok, or the code of the AWS error.
fn code_of<T, E: ProvideErrorMetadata>(r: Result<T, E>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| e.code().unwrap_or("").to_string())
}

/// A KMS key tagged `karpctl.io/cluster = <name>`, made through `sdk`: its id.
fn kms_key_tagged(sdk: &Sdk, name: &str) -> String {
    let tag = aws_sdk_kms::types::Tag::builder().tag_key(OWNER_TAG).tag_value(name).build().unwrap();
    let k = rt().block_on(sdk.kms.create_key().tags(tag).send()).expect("CreateKey");
    k.key_metadata().unwrap().key_id().to_string()
}

#[test]
fn lag_kms_key_reads_back_late_after_create_and_after_cancelled_deletion() {
    let px = proxy("lagkms");
    let (name, other) = (cluster_name("lagkms-c"), cluster_name("lagkms-other"));
    px.set(json!({"kms_key_lag_s": {&name: 1.5}}));
    let sdk = sdk_at(px.url());
    let alias = format!("alias/{name}");
    let key = kms_key_tagged(&sdk, &name);
    let made = Instant::now();
    // Each call's answer: Ok, or the error's code.
    let create_alias = || code_of(rt().block_on(sdk.kms.create_alias().alias_name(&alias).target_key_id(&key).send()));
    assert_eq!(create_alias(), Err("NotFoundException".into()), "CreateAlias right after CreateKey");
    let e = rt().block_on(sdk.kms.describe_key().key_id(&key).send()).expect_err("DescribeKey right after CreateKey");
    assert_eq!(e.code(), Some("NotFoundException"), "{e:?}");
    let e = rt().block_on(sdk.kms.enable_key().key_id(&key).send()).expect_err("EnableKey right after CreateKey");
    assert_eq!(e.code(), Some("NotFoundException"), "{e:?}");
    rt().block_on(crate::common::sdk().kms.describe_key().key_id(&key).send()).expect("the emulator has the key");
    // Scoped: a key made for another name is usable at once.
    let other_key = kms_key_tagged(&sdk, &other);
    rt().block_on(sdk.kms.create_alias().alias_name(format!("alias/{other}")).target_key_id(&other_key).send())
        .expect("CreateAlias of another name's key");
    rt().block_on(sdk.kms.describe_key().key_id(format!("alias/{other}")).send()).expect("DescribeKey by its alias");

    eventually(Duration::from_secs(5), "CreateAlias after the window", || create_alias().is_ok());
    assert!(made.elapsed() >= Duration::from_millis(1500), "{:?}", made.elapsed());
    // The new alias reads back late in its turn.
    let named = Instant::now();
    let by_alias = || code_of(rt().block_on(sdk.kms.describe_key().key_id(&alias).send()));
    assert_eq!(by_alias(), Err("NotFoundException".into()), "DescribeKey by the new alias");
    rt().block_on(crate::common::sdk().kms.describe_key().key_id(&alias).send()).expect("the emulator has the alias");
    eventually(Duration::from_secs(5), "DescribeKey by the alias", || by_alias().is_ok());
    assert!(named.elapsed() >= Duration::from_millis(1500), "{:?}", named.elapsed());

    // CancelKeyDeletion: for the window, KMS still sees the key pending deletion.
    rt().block_on(crate::common::sdk().kms.schedule_key_deletion().key_id(&key).pending_window_in_days(7).send())
        .expect("ScheduleKeyDeletion");
    rt().block_on(sdk.kms.cancel_key_deletion().key_id(&key).send()).expect("CancelKeyDeletion");
    let cancelled = Instant::now();
    let enable = || code_of(rt().block_on(sdk.kms.enable_key().key_id(&key).send()));
    assert_eq!(enable(), Err("KMSInvalidStateException".into()), "EnableKey right after CancelKeyDeletion");
    eventually(Duration::from_secs(5), "EnableKey after the window", || enable().is_ok());
    assert!(cancelled.elapsed() >= Duration::from_millis(1500), "{:?}", cancelled.elapsed());
    let lagged: Vec<String> = px
        .calls_json()
        .iter()
        .filter(|c| c["lag"] == "kms_key_lag_s" && c["status"] == 400)
        .map(|c| c["operation"].as_str().unwrap_or("").to_string())
        .collect();
    for op in ["CreateAlias", "DescribeKey", "EnableKey"] {
        assert!(lagged.iter().any(|o| o == op), "{op}: {lagged:?}");
    }
}

#[test]
fn full_quotas_answer_limit_exceeded_for_new_rules_targets_and_keys() {
    let px = proxy("quota");
    let (full, free) = (cluster_name("quota-full"), cluster_name("quota-free"));
    px.set(json!({"events_rules_full": {&full: true}, "events_targets_full": {&free: true}, "kms_keys_full": {&full: true}}));
    let sdk = sdk_at(px.url());
    let put_rule =
        |name: &str| code_of(rt().block_on(sdk.events.put_rule().name(name).event_pattern(r#"{"source":["aws.ec2"]}"#).send()));
    assert_eq!(put_rule(&full), Err("LimitExceededException".into()), "a new rule on a full bus");
    put_rule(&free).expect("another name's rule");
    // An existing rule can still be updated.
    rt().block_on(crate::common::sdk().events.put_rule().name(&full).event_pattern(r#"{"source":["aws.ec2"]}"#).send())
        .expect("PutRule directly");
    put_rule(&full).expect("an update of an existing rule on a full bus");
    let target =
        aws_sdk_eventbridge::types::Target::builder().id("t").arn("arn:aws:sqs:us-east-1:000000000000:q").build().unwrap();
    let e =
        rt().block_on(sdk.events.put_targets().rule(&free).targets(target.clone()).send()).expect_err("a target on a full rule");
    assert_eq!(e.code(), Some("LimitExceededException"), "{e:?}");
    rt().block_on(sdk.events.put_targets().rule(&full).targets(target).send()).expect("a target on another rule");
    let tag = |v: &str| aws_sdk_kms::types::Tag::builder().tag_key(OWNER_TAG).tag_value(v).build().unwrap();
    let e = rt().block_on(sdk.kms.create_key().tags(tag(&full)).send()).expect_err("a key past the keys quota");
    assert_eq!(e.code(), Some("LimitExceededException"), "{e:?}");
    rt().block_on(sdk.kms.create_key().tags(tag(&free)).send()).expect("another name's key");
    for rule in ["events_rules_full", "events_targets_full", "kms_keys_full"] {
        assert!(px.calls_json().iter().any(|c| c["lag"] == rule && c["status"] == 400), "{rule}: {:?}", px.calls_json());
    }
}

/// `events_list_skips`: ListRules leaves the named rule out of its page (as a busy bus's paged
/// listing can); DescribeRule and ListRuleNamesByTarget still find it, and other rules are listed.
#[test]
fn events_list_skips_leaves_a_rule_out_of_list_rules_only() {
    let px = proxy("listskip");
    let (hidden, shown) = (cluster_name("skip-hidden"), cluster_name("skip-shown"));
    px.set(json!({"events_list_skips": {&hidden: true}}));
    let direct = crate::common::sdk();
    let queue = format!("arn:aws:sqs:us-east-1:000000000000:{hidden}");
    rt().block_on(async {
        for name in [&hidden, &shown] {
            direct.events.put_rule().name(name).event_pattern(r#"{"source":["aws.ec2"]}"#).send().await.unwrap();
            let t = aws_sdk_eventbridge::types::Target::builder().id("t").arn(&queue).build().unwrap();
            direct.events.put_targets().rule(name).targets(t).send().await.unwrap();
        }
    });
    let sdk = sdk_at(px.url());
    let listed: Vec<String> = rt()
        .block_on(sdk.events.list_rules().name_prefix("skip-").send())
        .unwrap()
        .rules()
        .iter()
        .filter_map(|r| r.name().map(str::to_string))
        .collect();
    assert!(!listed.contains(&hidden) && listed.contains(&shown), "{listed:?}");
    rt().block_on(sdk.events.describe_rule().name(&hidden).send()).expect("DescribeRule finds it");
    let by_target = rt().block_on(sdk.events.list_rule_names_by_target().target_arn(&queue).send()).unwrap();
    assert!(by_target.rule_names().contains(&hidden), "{by_target:?}");
    assert!(px.calls_json().iter().any(|c| c["lag"] == "events_list_skips"), "{:?}", px.calls_json());
}

/// `iam_account_summary`: GetAccountSummary answers with the rule's entries over the emulator's
/// (an account whose quota of managed policies per role was raised), or refuses.
#[test]
fn iam_account_summary_overrides_entries_or_refuses() {
    use aws_sdk_iam::types::SummaryKeyType;
    let px = proxy("lagsummary");
    let summary = |sdk: &Sdk| {
        rt().block_on(sdk.iam.get_account_summary().send())
            .map(|o| o.summary_map().cloned().unwrap_or_default())
            .map_err(|e| e.code().unwrap_or("?").to_string())
    };
    let per_role = |sdk: &Sdk| summary(sdk).expect("GetAccountSummary")[&SummaryKeyType::AttachedPoliciesPerRoleQuota];
    let sdk = sdk_at(px.url());
    let direct = crate::common::sdk();
    assert_eq!(per_role(&sdk), per_role(&direct), "no rule: the emulator's answer as it is");
    px.set(json!({"iam_account_summary": {"AttachedPoliciesPerRoleQuota": 20}}));
    let raised = summary(&sdk).expect("GetAccountSummary");
    assert_eq!(raised[&SummaryKeyType::AttachedPoliciesPerRoleQuota], 20);
    assert!(raised.contains_key(&SummaryKeyType::RolesQuota), "the emulator's other entries are kept: {raised:?}");
    assert_eq!(per_role(&direct), 10, "the emulator itself is unchanged");
    px.set(json!({"iam_account_summary": "AccessDenied"}));
    assert_eq!(summary(&sdk).expect_err("refused"), "AccessDenied");
    let e = px.try_set(json!({"iam_account_summary": {"AttachedPoliciesPerRoleQuota": "20"}})).expect_err("a number is needed");
    assert!(e.contains("integer"), "{e}");
    px.set(json!({"iam_account_summary": null}));
    assert_eq!(per_role(&sdk), 10);
    assert!(px.calls_json().iter().any(|c| c["operation"] == "GetAccountSummary" && c["lag"] == "iam_account_summary"));
}

#[test]
fn eks_association_fields_are_laid_over_describe_answers_of_that_cluster_only() {
    let (c, other) = (cluster_name("assocf"), cluster_name("assocf-other"));
    seed(&c, &["--no-pod-identity-agent"]);
    seed(&other, &["--no-pod-identity-agent"]);
    let (_, id) = entry_and_association(&c);
    let (_, other_id) = entry_and_association(&other);
    let px = proxy("assocf");
    let addon = format!("arn:aws:eks:{REGION}:000000000000:addon/{c}/karpenter/x");
    px.set(json!({"eks_association_fields": {&c: {"ownerArn": &addon, "disableSessionTags": true}}}));
    let sdk = sdk_at(px.url());
    let describe = |c: &str, id: &str| {
        let o = rt().block_on(sdk.eks.describe_pod_identity_association().cluster_name(c).association_id(id).send());
        o.expect("DescribePodIdentityAssociation").association().cloned().unwrap()
    };
    let a = describe(&c, &id);
    assert_eq!((a.owner_arn(), a.disable_session_tags()), (Some(addon.as_str()), Some(true)));
    assert!(a.role_arn().is_some_and(|r| r.ends_with(&format!("{c}-r"))), "the emulator's fields stay: {a:?}");
    let b = describe(&other, &other_id);
    assert!(b.owner_arn().unwrap_or_default().is_empty() && b.disable_session_tags() != Some(true), "scoped: {b:?}");
    assert!(px.calls_json().iter().any(|x| x["lag"] == "eks_association_fields"), "{:?}", px.calls_json());
    let e = px.try_set(json!({"eks_association_fields": {"x": true}})).expect_err("fields are an object");
    assert!(e.contains("object of fields"), "{e}");
}

#[test]
fn ec2_shared_vpc_shows_the_owner_and_hides_its_endpoints() {
    let c = cluster_name("lag-shared");
    let s = seed(&c, &["--network", "isolated-endpoints"]);
    let vpc = s["vpc_id"].as_str().unwrap().to_string();
    let other = seed(&cluster_name("lag-shared-other"), &[]);
    let other_vpc = other["vpc_id"].as_str().unwrap().to_string();
    let px = proxy("lag-shared-px");
    let through = sdk_at(px.url());
    let owners = |v: &str| -> Vec<String> {
        let f = aws_sdk_ec2::types::Filter::builder().name("vpc-id").values(v).build();
        let o = rt().block_on(through.ec2.describe_subnets().filters(f).send()).expect("DescribeSubnets");
        o.subnets().iter().filter(|s| s.vpc_id() == Some(v)).map(|s| s.owner_id().unwrap_or_default().to_string()).collect()
    };
    let vpc_owner = |v: &str| {
        let o = rt().block_on(through.ec2.describe_vpcs().vpc_ids(v).send()).expect("DescribeVpcs");
        o.vpcs().iter().find(|x| x.vpc_id() == Some(v)).and_then(|x| x.owner_id()).unwrap_or_default().to_string()
    };
    let endpoints = |v: &str| {
        let f = aws_sdk_ec2::types::Filter::builder().name("vpc-id").values(v).build();
        let o = rt().block_on(through.ec2.describe_vpc_endpoints().filters(f).send()).expect("DescribeVpcEndpoints");
        o.vpc_endpoints().iter().filter(|e| e.vpc_id() == Some(v)).count()
    };
    let mine = owners(&vpc);
    assert_eq!(mine.len(), 6);
    assert!(mine.iter().all(|o| o != "999988887777"), "{mine:?}");
    assert_eq!(endpoints(&vpc), 9, "without the rule the emulator's answer is passed on as it is");

    px.set(json!({"ec2_shared_vpc": {&vpc: "999988887777"}}));
    assert_eq!(owners(&vpc), vec!["999988887777".to_string(); 6], "the owner's subnets");
    assert_eq!(vpc_owner(&vpc), "999988887777");
    assert_eq!(endpoints(&vpc), 0, "a participant sees none of the owner's endpoints");
    assert!(owners(&other_vpc).iter().all(|o| o != "999988887777"), "scoped to its VPC");
    assert!(px.try_set(json!({"ec2_shared_vpc": {&vpc: "not-an-account"}})).unwrap_err().contains("12-digit"));
    px.set(json!({"ec2_shared_vpc": {&vpc: null}}));
    assert_eq!(endpoints(&vpc), 9);
}

#[test]
fn an_ipv6_family_and_dns64_are_shown_where_the_emulator_keeps_neither() {
    let c = cluster_name("lag-v6");
    let s = seed(&c, &[]);
    let private: Vec<String> = strings(&s["private_subnets"]);
    let px = proxy("lag-v6-px");
    let through = sdk_at(px.url());
    let family = || {
        let o = rt().block_on(through.eks.describe_cluster().name(&c).send()).expect("DescribeCluster");
        let net = o.cluster().and_then(|c| c.kubernetes_network_config()).cloned();
        net.and_then(|n| n.ip_family().map(|f| f.as_str().to_string())).unwrap_or_default()
    };
    let dns64 = || -> Vec<(String, bool)> {
        let o = rt().block_on(through.ec2.describe_subnets().subnet_ids(&private[0]).subnet_ids(&private[1]).send());
        let mut v: Vec<(String, bool)> = o
            .expect("DescribeSubnets")
            .subnets()
            .iter()
            .map(|s| (s.subnet_id().unwrap_or_default().to_string(), s.enable_dns64() == Some(true)))
            .collect();
        v.sort();
        v
    };
    assert_eq!(family(), "ipv4", "ministack answers ipv4 for every cluster");
    assert!(dns64().iter().all(|(_, on)| !on), "{:?}", dns64());
    px.set(json!({"eks_ip_family": {&c: "ipv6"}, "ec2_subnet_dns64": {&private[0]: true}}));
    assert_eq!(family(), "ipv6");
    let mut want = vec![(private[0].clone(), true), (private[1].clone(), false)];
    want.sort();
    assert_eq!(dns64(), want, "only the rule's subnet");
    assert!(px.calls_json().iter().any(|x| x["lag"] == "ec2_subnet_dns64"), "{:?}", px.calls_json());
    assert!(px.try_set(json!({"eks_ip_family": {&c: "dual"}})).unwrap_err().contains("ipv6"));
}

// --- Records AWS keeps: CloudTrail, CloudWatch, the IAM policy simulator -------------------------

/// An SDK config for the proxy at `url`, with `attempts` attempts per call (1: a throttled or
/// refused call comes back as it was answered).
fn conf_at(url: &str, attempts: u32) -> aws_types::SdkConfig {
    let creds = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "tests");
    aws_types::SdkConfig::builder()
        .endpoint_url(url)
        .region(aws_types::region::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(creds))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(attempts))
        .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
        .build()
}

const ROLE: &str = "arn:aws:iam::111122223333:role/karpenter/KarpenterController-trail";

fn by_source(source: &str) -> aws_sdk_cloudtrail::types::LookupAttribute {
    lookup_attr(aws_sdk_cloudtrail::types::LookupAttributeKey::EventSource, source)
}

fn lookup_attr(key: aws_sdk_cloudtrail::types::LookupAttributeKey, value: &str) -> aws_sdk_cloudtrail::types::LookupAttribute {
    aws_sdk_cloudtrail::types::LookupAttribute::builder().attribute_key(key).attribute_value(value).build().unwrap()
}

#[test]
fn cloudtrail_lookup_events_answers_records_in_aws_shape_paged_and_filtered() {
    use aws_sdk_cloudtrail::types::LookupAttributeKey as Key;
    let px = proxy("ctlookup");
    // 60 EC2 calls by the controller (one a minute, the newest refused), 5 IAM calls by a user.
    let mut records: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            json!({"role": ROLE, "event": "DescribeInstanceTypes", "source": "ec2.amazonaws.com",
                        "agent": "karpenter.sh-1.12.3", "minutes_ago": i + 1})
        })
        .collect();
    records[0] = json!({"role": ROLE, "event": "CreateFleet", "source": "ec2.amazonaws.com", "agent": "karpenter.sh-v1.12.3",
        "minutes_ago": 0.5, "error_code": "Client.UnauthorizedOperation",
        "error_message": "You are not authorized to perform this operation. User: x is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:111122223333:fleet/* with an explicit deny in a service control policy. Encoded authorization failure message: abc",
        "resource": "arn:aws:ec2:us-east-1:111122223333:fleet/*", "session": "eks-trail-karpenter-1"});
    records.extend((0..5).map(|i| {
        json!({"user": "arn:aws:iam::111122223333:user/alice", "event": "GetRole",
        "source": "iam.amazonaws.com", "minutes_ago": i})
    }));
    // A high lookup rate: this test is about pages and filters (the rate has its own test).
    px.set(json!({"cloudtrail_events": records, "cloudtrail_lookup_rps": 1000}));
    let ct = aws_sdk_cloudtrail::Client::new(&conf_at(px.url(), 1));

    // EventSource ec2: 50 then 10, newest first, the second page by NextToken.
    let first = rt().block_on(ct.lookup_events().lookup_attributes(by_source("ec2.amazonaws.com")).send()).expect("LookupEvents");
    assert_eq!(first.events().len(), 50);
    let token = first.next_token().expect("a NextToken after a full page").to_string();
    let second = rt()
        .block_on(ct.lookup_events().lookup_attributes(by_source("ec2.amazonaws.com")).next_token(&token).send())
        .expect("page 2");
    assert_eq!(second.events().len(), 10);
    assert_eq!(second.next_token(), None, "the last page has no NextToken");
    let all: Vec<_> = first.events().iter().chain(second.events()).collect();
    let times: Vec<_> = all.iter().map(|e| e.event_time().unwrap().secs()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
    assert!(all.iter().all(|e| e.event_source() == Some("ec2.amazonaws.com")));

    // The newest is the refused CreateFleet, in AWS's shape.
    let e = all[0];
    assert_eq!(
        (e.event_name(), e.read_only(), e.username()),
        (Some("CreateFleet"), Some("false"), Some("eks-trail-karpenter-1"))
    );
    assert_eq!(e.resources()[0].resource_type(), Some("AWS::EC2::Fleet"));
    let rec: serde_json::Value = serde_json::from_str(e.cloud_trail_event().unwrap()).unwrap();
    assert_eq!(rec["userIdentity"]["type"], "AssumedRole");
    assert_eq!(
        rec["userIdentity"]["arn"],
        "arn:aws:sts::111122223333:assumed-role/KarpenterController-trail/eks-trail-karpenter-1"
    );
    assert_eq!(rec["userIdentity"]["sessionContext"]["sessionIssuer"]["arn"], ROLE, "the issuer keeps the role's path");
    assert_eq!(rec["userIdentity"]["sessionContext"]["sessionIssuer"]["type"], "Role");
    assert_eq!(rec["userIdentity"]["sessionContext"]["sessionIssuer"]["userName"], "KarpenterController-trail");
    assert!(rec["userAgent"].as_str().unwrap().ends_with(" karpenter.sh-v1.12.3"), "{rec}");
    assert_eq!(rec["errorCode"], "Client.UnauthorizedOperation");
    assert!(rec["errorMessage"].as_str().unwrap().contains("service control policy"));
    assert_eq!((rec["eventSource"].as_str(), rec["eventName"].as_str()), (Some("ec2.amazonaws.com"), Some("CreateFleet")));
    assert_eq!(rec["awsRegion"], "us-east-1");
    assert!(rec["eventTime"].as_str().unwrap().ends_with('Z'));

    // StartTime/EndTime: the last ten minutes hold the CreateFleet and 10 describes (1..=10 min).
    let now = std::time::SystemTime::now();
    let ago = |m: u64| aws_sdk_cloudtrail::primitives::DateTime::from(now - Duration::from_secs(m * 60));
    let recent = rt()
        .block_on(
            ct.lookup_events().lookup_attributes(by_source("ec2.amazonaws.com")).start_time(ago(10)).end_time(ago(0)).send(),
        )
        .unwrap();
    // The CreateFleet (half a minute ago) and the describes of 2..=9 minutes ago: the one of ten
    // minutes ago was made before this test's `now`, so it is just outside.
    assert_eq!(recent.events().len(), 9);
    // Other attributes: EventName, Username, ReadOnly; MaxResults smaller pages.
    let fleets = rt().block_on(ct.lookup_events().lookup_attributes(lookup_attr(Key::EventName, "CreateFleet")).send()).unwrap();
    assert_eq!(fleets.events().len(), 1);
    let alice = rt().block_on(ct.lookup_events().lookup_attributes(lookup_attr(Key::Username, "alice")).send()).unwrap();
    assert_eq!(alice.events().len(), 5);
    let alice_rec: serde_json::Value = serde_json::from_str(alice.events()[0].cloud_trail_event().unwrap()).unwrap();
    assert_eq!(alice_rec["userIdentity"]["type"], "IAMUser", "another identity's calls");
    let writes = rt().block_on(ct.lookup_events().lookup_attributes(lookup_attr(Key::ReadOnly, "false")).send()).unwrap();
    assert_eq!(writes.events().len(), 1, "only the CreateFleet writes");
    let small = rt().block_on(ct.lookup_events().max_results(7).send()).unwrap();
    assert_eq!((small.events().len(), small.next_token().is_some()), (7, true));
    // AWS's limits: one attribute, 50 a page.
    let two = rt().block_on(
        ct.lookup_events()
            .lookup_attributes(by_source("ec2.amazonaws.com"))
            .lookup_attributes(lookup_attr(Key::EventName, "x"))
            .send(),
    );
    assert_eq!(code_of(two), Err("InvalidLookupAttributesException".to_string()));
    assert_eq!(code_of(rt().block_on(ct.lookup_events().max_results(51).send())), Err("InvalidMaxResultsException".to_string()));
    // The call log says what each lookup asked.
    let lookups: Vec<_> = px.calls_json().into_iter().filter(|c| c["operation"] == "LookupEvents").collect();
    assert_eq!(lookups[0]["service"], "cloudtrail");
    assert_eq!(
        lookups[0]["lookup"]["attributes"],
        json!([{"AttributeKey": "EventSource", "AttributeValue": "ec2.amazonaws.com"}])
    );
    assert_eq!(lookups[1]["lookup"]["next_token"], token.as_str());
    assert!(lookups[0]["lookup"]["start"].is_null() && lookups[2]["lookup"]["start"].is_number());
}

#[test]
fn cloudtrail_lookups_are_throttled_at_two_a_second_and_can_be_refused() {
    let px = proxy("ctrate");
    px.set(json!({"cloudtrail_events": [{"role": ROLE, "event": "DescribeSubnets", "source": "ec2.amazonaws.com"}]}));
    let ct = aws_sdk_cloudtrail::Client::new(&conf_at(px.url(), 1));
    // Twelve lookups at once: at most the bucket's two plus two a second get through.
    let started = Instant::now();
    let answers = rt().block_on(futures::future::join_all((0..12).map(|_| ct.lookup_events().send())));
    let elapsed = started.elapsed().as_secs_f64();
    let ok = answers.iter().filter(|r| r.is_ok()).count();
    let throttled = answers.iter().filter(|r| r.as_ref().err().and_then(|e| e.code()) == Some("ThrottlingException")).count();
    assert_eq!(ok + throttled, 12, "every lookup answered or throttled");
    assert!(ok >= 2 && (ok as f64) <= 2.0 + 2.0 * elapsed + 1.0, "{ok} lookups within {elapsed:.2}s");
    // A slower rate makes the second lookup throttled for sure; the SDK reads it as throttling.
    px.reset();
    px.set(json!({"cloudtrail_events": [], "cloudtrail_lookup_rps": 0.001}));
    rt().block_on(ct.lookup_events().send()).expect("the first lookup");
    let e = rt().block_on(ct.lookup_events().send()).expect_err("the second lookup");
    assert_eq!(e.code(), Some("ThrottlingException"), "{e:?}");
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(400));
    // Refused: AccessDeniedException naming the permission.
    px.set(json!({"cloudtrail_events": "AccessDenied", "cloudtrail_lookup_rps": null}));
    let e = rt().block_on(ct.lookup_events().send()).expect_err("a refused lookup");
    assert_eq!(e.code(), Some("AccessDeniedException"), "{e:?}");
    assert!(e.message().unwrap().contains("cloudtrail:LookupEvents"), "{e:?}");
    // A bad rule is refused with the reason.
    let err = px.try_set(json!({"cloudtrail_events": [{"event": "X", "source": "ec2.amazonaws.com"}]})).unwrap_err();
    assert!(err.contains("'role'"), "{err}");
}

#[test]
fn cloudtrail_records_say_whether_a_session_came_from_pod_identity_or_web_identity() {
    let px = proxy("ctsession");
    let provider = "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B7";
    px.set(json!({"cloudtrail_events": [
        {"role": ROLE, "event": "DescribeInstances", "source": "ec2.amazonaws.com", "minutes_ago": 1},
        {"role": ROLE, "event": "DescribeSubnets", "source": "ec2.amazonaws.com", "minutes_ago": 2, "web_identity": provider},
    ], "cloudtrail_lookup_rps": 1000}));
    let ct = aws_sdk_cloudtrail::Client::new(&conf_at(px.url(), 1));
    let out = rt().block_on(ct.lookup_events().lookup_attributes(by_source("ec2.amazonaws.com")).send()).expect("LookupEvents");
    let recs: Vec<serde_json::Value> =
        out.events().iter().map(|e| serde_json::from_str(e.cloud_trail_event().unwrap()).unwrap()).collect();
    assert_eq!(recs.len(), 2);
    // Pod Identity (the default): EKS Auth's session name, no web identity (AWS records `{}`).
    let pod = &recs[0]["userIdentity"];
    assert_eq!(recs[0]["eventName"], "DescribeInstances");
    assert_eq!(pod["sessionContext"]["webIdFederationData"], json!({}));
    let session = pod["arn"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    assert!(session.starts_with("eks-"), "{pod}");
    assert_eq!(out.events()[0].username(), Some(session.as_str()), "the lookup's Username is the session name");
    // IRSA: the provider named, a session of digits (the Go SDK's), the same role as issuer.
    let web = &recs[1]["userIdentity"];
    assert_eq!(web["type"], "AssumedRole");
    assert_eq!(web["sessionContext"]["webIdFederationData"]["federatedProvider"], provider);
    assert_eq!(web["sessionContext"]["sessionIssuer"]["arn"], ROLE);
    let session = web["arn"].as_str().unwrap().rsplit('/').next().unwrap();
    assert!(!session.is_empty() && session.bytes().all(|b| b.is_ascii_digit()), "{web}");
    // Not a provider ARN: refused with the reason.
    let err = px
        .try_set(json!({"cloudtrail_events": [{"role": ROLE, "event": "X", "source": "ec2.amazonaws.com", "web_identity": "oidc.eks"}]}))
        .unwrap_err();
    assert!(err.contains("web_identity must be an OIDC provider ARN"), "{err}");
}

fn metric_query(id: &str, ns: &str, metric: &str, dim: (&str, &str), stat: &str) -> aws_sdk_cloudwatch::types::MetricDataQuery {
    use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};
    let m = Metric::builder()
        .namespace(ns)
        .metric_name(metric)
        .dimensions(Dimension::builder().name(dim.0).value(dim.1).build())
        .build();
    MetricDataQuery::builder().id(id).metric_stat(MetricStat::builder().metric(m).period(300).stat(stat).build()).build()
}

#[test]
fn cloudwatch_get_metric_data_answers_scripted_datapoints() {
    let px = proxy("cwmetrics");
    px.set(json!({"cloudwatch_metrics": [
        {"namespace": "AWS/Events", "metric": "FailedInvocations", "dimensions": {"RuleName": "Karpenter-trail-spot"},
         "stat": "Sum", "points": [[5, 3], [20, 1]]},
        {"namespace": "AWS/SQS", "metric": "ApproximateAgeOfOldestMessage", "dimensions": {"QueueName": "Karpenter-trail"},
         "points": [[2, 900], [7, 600], [500, 1]]},
    ]}));
    let cw = aws_sdk_cloudwatch::Client::new(&conf_at(px.url(), 1));
    let now = std::time::SystemTime::now();
    let out = rt()
        .block_on(
            cw.get_metric_data()
                .metric_data_queries(metric_query(
                    "spot",
                    "AWS/Events",
                    "FailedInvocations",
                    ("RuleName", "Karpenter-trail-spot"),
                    "Sum",
                ))
                .metric_data_queries(metric_query(
                    "health",
                    "AWS/Events",
                    "FailedInvocations",
                    ("RuleName", "Karpenter-trail-health"),
                    "Sum",
                ))
                .metric_data_queries(metric_query(
                    "age",
                    "AWS/SQS",
                    "ApproximateAgeOfOldestMessage",
                    ("QueueName", "Karpenter-trail"),
                    "Maximum",
                ))
                .start_time(aws_sdk_cloudwatch::primitives::DateTime::from(now - Duration::from_secs(3600)))
                .end_time(aws_sdk_cloudwatch::primitives::DateTime::from(now))
                .send(),
        )
        .expect("GetMetricData");
    let results = out.metric_data_results();
    let ids: Vec<_> = results.iter().map(|r| r.id().unwrap()).collect();
    assert_eq!(ids, ["spot", "health", "age"]);
    assert_eq!(results[0].values(), [3.0, 1.0], "newest first");
    assert_eq!(results[0].timestamps().len(), 2);
    assert!(results[0].timestamps()[0].secs() > results[0].timestamps()[1].secs());
    assert_eq!(results[0].label(), Some("FailedInvocations"));
    assert!(results[1].values().is_empty(), "a rule that never failed sends no datapoints");
    assert_eq!(results[2].values(), [900.0, 600.0], "the point outside the window is left out");
    assert!(results.iter().all(|r| r.status_code() == Some(&aws_sdk_cloudwatch::types::StatusCode::Complete)));
    let call = px.calls_json().into_iter().find(|c| c["operation"] == "GetMetricData").unwrap();
    assert_eq!(call["service"], "monitoring");
    assert_eq!(call["queries"][2]["metric"]["Dimensions"], json!([{"Name": "QueueName", "Value": "Karpenter-trail"}]));
    // A stat the series was not scripted for has no points; refused: AccessDenied.
    let other_stat = rt()
        .block_on(
            cw.get_metric_data()
                .metric_data_queries(metric_query(
                    "spot",
                    "AWS/Events",
                    "FailedInvocations",
                    ("RuleName", "Karpenter-trail-spot"),
                    "Average",
                ))
                .start_time(aws_sdk_cloudwatch::primitives::DateTime::from(now - Duration::from_secs(3600)))
                .end_time(aws_sdk_cloudwatch::primitives::DateTime::from(now))
                .send(),
        )
        .unwrap();
    assert!(other_stat.metric_data_results()[0].values().is_empty());
    px.set(json!({"cloudwatch_metrics": "AccessDenied"}));
    let e = rt()
        .block_on(cw.get_metric_data().metric_data_queries(metric_query("a", "AWS/SQS", "X", ("QueueName", "q"), "Sum")).send())
        .expect_err("refused");
    assert_eq!(e.code(), Some("AccessDenied"), "{e:?}");
}

#[test]
fn iam_simulate_answers_decisions_per_action_paged_and_records_context_entries() {
    use aws_sdk_iam::types::{ContextEntry, ContextKeyTypeEnum, PolicyEvaluationDecisionType as D};
    let role = cluster_name("simrole");
    let arn = format!("arn:aws:iam::000000000000:role/{role}");
    let px = proxy("iamsim");
    px.set(json!({"iam_simulate": {&role: {
        "decisions": {"ec2:CreateFleet": "scp", "iam:PassRole": "boundary", "ec2:TerminateInstances": "explicitDeny", "ssm:*": "implicitDeny"},
        "context_keys": ["aws:RequestTag/kubernetes.io/cluster/trail", "ec2:CreateAction"]}}}));
    let iam = aws_sdk_iam::Client::new(&conf_at(px.url(), 1));

    let keys = rt().block_on(iam.get_context_keys_for_principal_policy().policy_source_arn(&arn).send()).expect("GetContextKeys");
    assert_eq!(keys.context_key_names(), ["aws:RequestTag/kubernetes.io/cluster/trail", "ec2:CreateAction"]);

    let actions = ["ec2:CreateFleet", "iam:PassRole", "ec2:TerminateInstances", "ssm:GetParameter", "ec2:DescribeSubnets"];
    let entry = ContextEntry::builder()
        .context_key_name("ec2:CreateAction")
        .context_key_values("CreateFleet")
        .context_key_values("RunInstances")
        .context_key_type(ContextKeyTypeEnum::StringList)
        .build();
    let mut results = vec![];
    let mut marker: Option<String> = None;
    let mut pages = 0;
    loop {
        let out = rt()
            .block_on(
                iam.simulate_principal_policy()
                    .policy_source_arn(&arn)
                    .set_action_names(Some(actions.iter().map(|s| s.to_string()).collect()))
                    .context_entries(entry.clone())
                    .max_items(2)
                    .set_marker(marker.clone())
                    .send(),
            )
            .expect("SimulatePrincipalPolicy");
        pages += 1;
        results.extend(out.evaluation_results().to_vec());
        if !out.is_truncated() {
            break;
        }
        marker = out.marker().map(str::to_string);
    }
    assert_eq!(pages, 3, "five actions, two a page");
    let of = |a: &str| results.iter().find(|r| r.eval_action_name() == a).unwrap();
    let org = |a: &str| of(a).organizations_decision_detail().map(|d| d.allowed_by_organizations());
    let boundary = |a: &str| of(a).permissions_boundary_decision_detail().map(|d| d.allowed_by_permissions_boundary());
    assert_eq!((of("ec2:CreateFleet").eval_decision(), org("ec2:CreateFleet")), (&D::ExplicitDeny, Some(false)));
    assert_eq!((of("iam:PassRole").eval_decision(), boundary("iam:PassRole")), (&D::ImplicitDeny, Some(false)));
    assert_eq!((of("ec2:TerminateInstances").eval_decision(), org("ec2:TerminateInstances")), (&D::ExplicitDeny, Some(true)));
    assert_eq!(of("ssm:GetParameter").eval_decision(), &D::ImplicitDeny, "a pattern");
    assert_eq!(of("ec2:DescribeSubnets").eval_decision(), &D::Allowed, "unlisted: allowed");
    assert_eq!(of("ec2:DescribeSubnets").matched_statements().len(), 1);
    assert_eq!(
        of("ec2:CreateFleet").missing_context_values(),
        ["aws:RequestTag/kubernetes.io/cluster/trail"],
        "the key no context entry gave"
    );
    // The call log carries the actions, the context entries and the marker of each page.
    let sims: Vec<_> = px.calls_json().into_iter().filter(|c| c["operation"] == "SimulatePrincipalPolicy").collect();
    assert_eq!(sims.len(), 3);
    assert_eq!(sims[0]["resource"], role.as_str());
    assert_eq!(sims[0]["actions"].as_array().unwrap().len(), 5);
    assert_eq!(
        sims[0]["context_entries"],
        json!([{"key": "ec2:CreateAction", "values": ["CreateFleet", "RunInstances"], "type": "stringList"}])
    );
    assert!(sims[0]["marker"].is_null() && sims[1]["marker"].is_string());
    // Scoped by role: another role goes upstream; refused on demand.
    px.set(json!({"iam_simulate": {&role: "AccessDenied"}}));
    let e = rt().block_on(iam.get_context_keys_for_principal_policy().policy_source_arn(&arn).send()).expect_err("refused");
    assert_eq!(e.code(), Some("AccessDenied"));
}

// --- Records where a real account keeps them (issue #42) ----------------------------------------

/// As `conf_at`, signed for `region`.
fn conf_in(url: &str, region: &str, attempts: u32) -> aws_types::SdkConfig {
    conf_at(url, attempts).into_builder().region(aws_types::region::Region::new(region.to_string())).build()
}

fn records_of(out: &aws_sdk_cloudtrail::operation::lookup_events::LookupEventsOutput) -> Vec<serde_json::Value> {
    out.events().iter().map(|e| serde_json::from_str(e.cloud_trail_event().unwrap()).unwrap()).collect()
}

#[test]
fn cloudtrail_each_region_keeps_its_records_and_paces_its_own_lookups() {
    let px = proxy("ctregion");
    let boundary = "User: x is not authorized to perform: iam:CreateInstanceProfile on resource: arn:aws:iam::111122223333:instance-profile/p with an explicit deny in a permissions boundary";
    px.set(json!({"cloudtrail_events": [
        {"role": ROLE, "event": "DescribeInstances", "source": "ec2.amazonaws.com", "region": "us-east-2", "minutes_ago": 1},
        {"role": ROLE, "event": "DescribeSubnets", "source": "ec2.amazonaws.com", "minutes_ago": 2},
        {"role": ROLE, "event": "CreateInstanceProfile", "source": "iam.amazonaws.com", "minutes_ago": 3,
         "error_code": "AccessDenied", "error_message": boundary},
        {"role": "arn:aws-cn:iam::111122223333:role/r", "event": "GetRole", "source": "iam.amazonaws.com", "minutes_ago": 4},
    ], "cloudtrail_lookup_rps": 1000}));
    let east2 = aws_sdk_cloudtrail::Client::new(&conf_in(px.url(), "us-east-2", 1));
    let east1 = aws_sdk_cloudtrail::Client::new(&conf_in(px.url(), "us-east-1", 1));
    let cn = aws_sdk_cloudtrail::Client::new(&conf_in(px.url(), "cn-north-1", 1));
    let names = |c: &aws_sdk_cloudtrail::Client| -> Vec<String> {
        let out = rt().block_on(c.lookup_events().send()).expect("LookupEvents");
        records_of(&out)
            .iter()
            .map(|r| format!("{}@{}", r["eventName"].as_str().unwrap(), r["awsRegion"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(names(&east2), ["DescribeInstances@us-east-2"], "a lookup signed for us-east-2 sees us-east-2's records only");
    assert_eq!(
        names(&east1),
        ["DescribeSubnets@us-east-1", "CreateInstanceProfile@us-east-1"],
        "IAM's records are us-east-1's (a global service), whatever the caller's Region"
    );
    assert_eq!(names(&cn), ["GetRole@cn-north-1"], "aws-cn's IAM records are cn-north-1's");
    let iam_east2 = rt().block_on(east2.lookup_events().lookup_attributes(by_source("iam.amazonaws.com")).send()).unwrap();
    assert!(iam_east2.events().is_empty(), "us-east-2 has no IAM record, ever");
    let regions: Vec<String> = px
        .calls_json()
        .into_iter()
        .filter(|c| c["operation"] == "LookupEvents")
        .map(|c| c["lookup"]["region"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(regions, ["us-east-2", "us-east-1", "cn-north-1", "us-east-2"], "the call log names each lookup's Region");

    // Each Region has its own two a second: us-east-1's second lookup is throttled, us-east-2's
    // first is not.
    px.set(json!({"cloudtrail_lookup_rps": 0.001}));
    px.reset();
    px.set(json!({"cloudtrail_events": [], "cloudtrail_lookup_rps": 0.001}));
    rt().block_on(east1.lookup_events().send()).expect("us-east-1's first");
    let e = rt().block_on(east1.lookup_events().send()).expect_err("us-east-1's second");
    assert_eq!(e.code(), Some("ThrottlingException"));
    rt().block_on(east2.lookup_events().send()).expect("us-east-2's first: a bucket of its own");
}

#[test]
fn cloudtrail_serves_fleet_errors_and_a_busy_accounts_other_callers() {
    use aws_sdk_cloudtrail::types::LookupAttributeKey as Key;
    let px = proxy("ctfleet");
    let scp = "You are not authorized to perform this operation. User: x is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:111122223333:instance/* with an explicit deny in a service control policy.";
    px.set(json!({"cloudtrail_events": [
        {"role": ROLE, "event": "CreateFleet", "source": "ec2.amazonaws.com", "agent": "karpenter.sh-1.12.3", "minutes_ago": 20,
         "fleet_errors": [{"code": "UnauthorizedOperation", "message": scp, "lifecycle": "spot", "type": "m5.large", "zone": "us-east-1a", "subnet": "subnet-1"}]},
        {"role": ROLE, "event": "CreateFleet", "source": "ec2.amazonaws.com", "agent": "karpenter.sh-1.12.3", "minutes_ago": 21,
         "fleet_errors": [{"code": "VcpuLimitExceeded", "lifecycle": "on-demand", "type": "c5.large"},
                          {"code": "InsufficientInstanceCapacity", "lifecycle": "spot", "type": "c5.xlarge"}]},
        {"others": 600, "source": "ec2.amazonaws.com", "minutes_ago": [0, 10]},
    ], "cloudtrail_lookup_rps": 1000}));
    let ct = aws_sdk_cloudtrail::Client::new(&conf_at(px.url(), 1));
    // By source: the newest 50 are other callers', and so are the next 11 pages.
    let mut token: Option<String> = None;
    let mut seen = Vec::new();
    for _ in 0..13 {
        let out = rt()
            .block_on(ct.lookup_events().lookup_attributes(by_source("ec2.amazonaws.com")).set_next_token(token.clone()).send())
            .unwrap();
        seen.extend(records_of(&out));
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen.len(), 602);
    assert!(seen[..600].iter().all(|r| r["eventName"] != "CreateFleet"), "600 newer records of others");
    let issuers: std::collections::BTreeSet<&str> =
        seen[..600].iter().map(|r| r["userIdentity"]["sessionContext"]["sessionIssuer"]["arn"].as_str().unwrap()).collect();
    assert!(issuers.len() >= 2 && !issuers.contains(ROLE), "{issuers:?}");
    assert!(seen[..100].iter().any(|r| r["eventName"] == "AssignPrivateIpAddresses"), "the VPC CNI's calls");
    // By name: the fleets, a page deep.
    let fleets = rt().block_on(ct.lookup_events().lookup_attributes(lookup_attr(Key::EventName, "CreateFleet")).send()).unwrap();
    let recs = records_of(&fleets);
    assert_eq!(recs.len(), 2);
    let one = &recs[0]["responseElements"]["CreateFleetResponse"]["errorSet"]["item"];
    assert!(one.is_object(), "one entry: an object, as XML made JSON: {one}");
    assert_eq!((one["errorCode"].as_str(), one["lifecycle"].as_str()), (Some("UnauthorizedOperation"), Some("spot")));
    assert_eq!(one["launchTemplateAndOverrides"]["overrides"]["instanceType"], "m5.large");
    assert_eq!(one["launchTemplateAndOverrides"]["overrides"]["availabilityZone"], "us-east-1a");
    assert!(recs[0].get("errorCode").is_none(), "the fleet call itself succeeded");
    let several = &recs[1]["responseElements"]["CreateFleetResponse"]["errorSet"]["item"];
    assert_eq!(several.as_array().map(|a| a.len()), Some(2), "several entries: a list: {several}");
    assert_eq!(several[0]["errorCode"], "VcpuLimitExceeded");
    let err = px.try_set(json!({"cloudtrail_events": [{"others": "many", "source": "ec2.amazonaws.com"}]})).unwrap_err();
    assert!(err.contains("others"), "{err}");
    let err = px
        .try_set(json!({"cloudtrail_events": [{"role": ROLE, "event": "CreateFleet", "source": "ec2.amazonaws.com", "fleet_errors": [{}]}]}))
        .unwrap_err();
    assert!(err.contains("fleet_errors"), "{err}");
}

#[test]
fn iam_simulate_decisions_depend_on_the_principal_arn_and_the_resource() {
    use aws_sdk_iam::types::{ContextEntry, ContextKeyTypeEnum, PolicyEvaluationDecisionType as D};
    let role = cluster_name("simctx");
    let arn = format!("arn:aws:iam::000000000000:role/{role}");
    let px = proxy("iamsimctx");
    px.set(json!({"iam_simulate": {&role: {"decisions": {
        "ec2:RunInstances": {"decision": "scp", "unless": {"aws:PrincipalArn": ["arn:aws:iam::*:role/simctx-*"]}},
        "ec2:CreateFleet": {"decision": "scp", "resources": ["arn:aws:ec2:*:*:fleet/*"]},
    }}}}));
    let iam = aws_sdk_iam::Client::new(&conf_at(px.url(), 1));
    let decide = |action: &str, resources: &[&str], principal: Option<&str>| -> (D, Option<bool>) {
        let mut call = iam.simulate_principal_policy().policy_source_arn(&arn).action_names(action);
        for r in resources {
            call = call.resource_arns(*r);
        }
        if let Some(p) = principal {
            call = call.context_entries(
                ContextEntry::builder()
                    .context_key_name("aws:PrincipalArn")
                    .context_key_values(p)
                    .context_key_type(ContextKeyTypeEnum::String)
                    .build(),
            );
        }
        let out = rt().block_on(call.send()).expect("SimulatePrincipalPolicy");
        let r = &out.evaluation_results()[0];
        (r.eval_decision().clone(), r.organizations_decision_detail().map(|d| d.allowed_by_organizations()))
    };
    assert_eq!(decide("ec2:RunInstances", &[], None), (D::ExplicitDeny, Some(false)), "no aws:PrincipalArn: the SCP denies");
    assert_eq!(decide("ec2:RunInstances", &[], Some(&arn)).0, D::Allowed, "the exempted role");
    assert_eq!(decide("ec2:RunInstances", &[], Some("arn:aws:iam::000000000000:role/other")).0, D::ExplicitDeny);
    assert_eq!(decide("ec2:CreateFleet", &[], None).0, D::Allowed, "Resource * misses an ARN-scoped statement");
    assert_eq!(decide("ec2:CreateFleet", &["arn:aws:ec2:us-east-1:000000000000:fleet/*"], None).0, D::ExplicitDeny);
    let sims: Vec<_> = px.calls_json().into_iter().filter(|c| c["operation"] == "SimulatePrincipalPolicy").collect();
    assert_eq!(sims.last().unwrap()["resources"], json!(["arn:aws:ec2:us-east-1:000000000000:fleet/*"]));
}

#[test]
fn servicequotas_get_service_quota_answers_scripted_values_or_refuses() {
    let px = proxy("sqquota");
    px.set(json!({"servicequotas_quotas": {"L-1216C47A": 32, "L-34B43A08": "AccessDenied"}}));
    let sq = aws_sdk_servicequotas::Client::new(&conf_in(px.url(), "us-east-2", 1));
    let out = rt().block_on(sq.get_service_quota().service_code("ec2").quota_code("L-1216C47A").send()).expect("GetServiceQuota");
    let q = out.quota().unwrap();
    assert_eq!((q.quota_code(), q.value()), (Some("L-1216C47A"), Some(32.0)));
    assert!(q.quota_arn().unwrap().contains(":us-east-2:"), "{q:?}");
    let e = rt().block_on(sq.get_service_quota().service_code("ec2").quota_code("L-34B43A08").send()).expect_err("refused");
    assert_eq!(e.code(), Some("AccessDeniedException"), "{e:?}");
    assert!(e.message().unwrap().contains("servicequotas:GetServiceQuota"));
    assert!(px.try_set(json!({"servicequotas_quotas": {"L-1": -1}})).unwrap_err().contains("servicequotas_quotas"));
}
