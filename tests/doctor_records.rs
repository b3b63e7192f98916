//! `karpctl doctor` and what AWS records (issue #36 items 5 and 6), through the lag proxy (neither
//! emulator emits CloudWatch metrics; moto lacks the policy simulator and ministack ignores its
//! context entries): a rule whose deliveries fail (with the cause doctor reads from the queue
//! policy), a queue nobody reads, no datapoints (no finding), a refused GetMetricData (a warning,
//! nothing else changes), and `--simulate` with an SCP and a boundary denial (the context entries
//! sent are in the proxy's call log); without the flag no simulator call is made.

use crate::common::lag::LagProxy;
use crate::common::names::*;
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// A karpctl-made setup for a fresh cluster, and a lag proxy in front of the emulator.
fn setup(prefix: &str) -> (String, Workdir, LagProxy, std::sync::RwLockReadGuard<'static, ()>) {
    let c = cluster_name(prefix);
    seed(&c, &[]);
    let sdk = sdk();
    let spot = spot_role_present(&sdk);
    let wd = Workdir::new();
    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    let px = LagProxy::start(&cluster_name(&format!("{prefix}-px")), &endpoint());
    (c, wd, px, spot)
}

fn doctor(wd: &Workdir, px: &LagProxy, c: &str, extra: &[&str]) -> Run {
    let mut args = vec!["doctor", "--cluster", c, "--output", "json"];
    args.extend_from_slice(extra);
    let r = karpctl_at(wd, px.url(), &args, &[]);
    assert!(r.code == 0 || r.code == 2, "doctor ran to its end: {r:?}");
    assert_eq!(r.json()["stats"]["writes"], 0, "doctor never writes: {r:?}");
    r
}

/// No call of the proxy's log received, hid or deleted a message, or ran the simulator.
fn only_reads(px: &LagProxy, simulator: bool) {
    for op in ["ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility", "PurgeQueue"] {
        assert_eq!(px.count(op), 0, "doctor never touches a message ({op})");
    }
    if !simulator {
        assert_eq!(
            px.count("SimulatePrincipalPolicy") + px.count("GetContextKeysForPrincipalPolicy"),
            0,
            "no simulator call without --simulate"
        );
    }
}

/// CloudWatch as the proxy answers it with datapoints of another metric only: the rules' and
/// the queue's queries get none. (ministack 1.5.33 answers GetMetricData in JSON under a CBOR
/// content type when its optional cbor2 module is missing, as in the pinned install: doctor
/// then notes that the metrics could not be read.)
fn no_datapoints(px: &LagProxy, c: &str) {
    px.set(json!({"cloudwatch_metrics": [{"namespace": "AWS/SQS", "metric": "NumberOfMessagesSent",
        "dimensions": {"QueueName": queue_name(c)}, "points": [[5, 1]]}]}));
}

#[test]
fn records_a_failing_rule_names_its_cause_an_old_message_means_nothing_reads_the_queue() {
    let (c, wd, px, _spot) = setup("drec-cw");
    let sdk = sdk();
    let q = queue(&sdk, &queue_name(&c)).expect("queue");
    let queue_arn = q.attrs["QueueArn"].clone();
    let a = queue_arn.split(':').nth(4).unwrap().to_string();

    // No datapoints (a rule that never failed sends none): both checks pass, one GetMetricData
    // for every rule of the queue and the queue.
    no_datapoints(&px, &c);
    let base = doctor(&wd, &px, &c, &[]);
    let baseline = finding_codes(&base);
    assert!(!baseline.contains("interruption-rule-failing") && !baseline.contains("queue-unread"), "{base:?}");
    assert!(passed(&base).contains("interruption-rule-failing") && passed(&base).contains("queue-unread"), "{base:?}");
    let rules: Vec<String> = base.json()["discovered"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["queues"][0] == queue_arn.as_str())
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(rules.len(), 5, "{base:?}");
    let calls: Vec<Value> = px.calls_json().into_iter().filter(|c| c["operation"] == "GetMetricData").collect();
    assert_eq!(calls.len(), 1, "one GetMetricData for all rules and the queue");
    let asked: Vec<String> = calls[0]["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["metric"]["Dimensions"][0]["Value"].as_str().unwrap().to_string())
        .collect();
    for r in &rules {
        assert!(asked.contains(r), "{r} asked: {asked:?}");
    }
    assert!(asked.contains(&queue_name(&c)), "{asked:?}");
    only_reads(&px, false);

    // The spot rule failed three times; the queue policy lets only the other rules send.
    let spot_rule = rule_name(&c, "SpotInterrupt");
    let others: Vec<String> =
        rules.iter().filter(|r| **r != spot_rule).map(|r| format!("arn:aws:events:us-east-1:{a}:rule/{r}")).collect();
    let policy = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage", "Resource": &queue_arn, "Condition": {"ArnEquals": {"aws:SourceArn": others}}}]});
    rt().block_on(
        sdk.sqs
            .set_queue_attributes()
            .queue_url(&q.url)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, policy.to_string())
            .send(),
    )
    .unwrap();
    px.set(json!({"cloudwatch_metrics": [
        {"namespace": "AWS/Events", "metric": "FailedInvocations", "dimensions": {"RuleName": &spot_rule}, "stat": "Sum", "points": [[10, 2], [25, 1]]},
        {"namespace": "AWS/SQS", "metric": "ApproximateAgeOfOldestMessage", "dimensions": {"QueueName": queue_name(&c)}, "stat": "Maximum", "points": [[3, 1800], [8, 1500]]},
    ]}));
    let r = doctor(&wd, &px, &c, &[]);
    assert_eq!(r.code, 2, "{r:?}");
    let f = finding(&r, "interruption-rule-failing");
    assert_eq!(
        (f["severity"].as_str(), f["resource"].as_str()),
        (Some("error"), Some(format!("rule/{spot_rule}").as_str())),
        "{f}"
    );
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("3 event(s)") && msg.contains(&spot_rule), "{msg}");
    assert!(msg.contains("the queue policy does not let this rule"), "the cause: {msg}");
    assert!(f["fix"].as_str().unwrap().contains(&format!("arn:aws:events:us-east-1:{a}:rule/{spot_rule}")), "{f}");
    assert_eq!(with_code(&findings(&r), "interruption-rule-failing").len(), 1, "only the failing rule: {r:?}");
    let f = finding(&r, "queue-unread");
    assert_eq!(f["severity"], "error");
    assert!(
        f["message"].as_str().unwrap().contains("30 minutes") && f["message"].as_str().unwrap().contains("nothing reads"),
        "{f}"
    );
    let hint = f["fix"].as_str().unwrap();
    assert!(
        hint.contains("settings.interruptionQueue") && hint.contains("sqs:ReceiveMessage") && hint.contains("get pods"),
        "{hint}"
    );
    // The human report says it too.
    let h = karpctl_at(&wd, px.url(), &["doctor", "--cluster", &c], &[]);
    assert!(h.stdout.contains("interruption-rule-failing") && h.stdout.contains("queue-unread"), "{h:?}");
    only_reads(&px, false);
}

#[test]
fn records_a_refused_get_metric_data_is_a_warning_and_nothing_else_changes() {
    let (c, wd, px, _spot) = setup("drec-deny");
    no_datapoints(&px, &c);
    let base = doctor(&wd, &px, &c, &[]);
    let mut baseline = finding_codes(&base);
    px.set(json!({"cloudwatch_metrics": "AccessDenied"}));
    let r = doctor(&wd, &px, &c, &[]);
    assert_eq!(r.code, 2, "{r:?}");
    let f = finding(&r, "metrics-unreadable");
    assert_eq!(f["severity"], "warning", "{f}");
    assert!(f["message"].as_str().unwrap().contains("cloudwatch:GetMetricData"), "{f}");
    assert!(f["message"].as_str().unwrap().contains("interruption-rule-failing, queue-unread"), "the skipped checks: {f}");
    baseline.insert("metrics-unreadable".into());
    assert_eq!(finding_codes(&r), baseline, "every other check as before: {r:?}");
    assert!(!passed(&r).contains("queue-unread") && passed(&r).contains("queue-policy-blocks-eventbridge"), "{r:?}");
    assert_eq!(r.json()["summary"]["errors"], base.json()["summary"]["errors"], "no error added: {r:?}");
    assert!(!finding_codes(&base).contains("metrics-unreadable"), "no failed read said: {base:?}");
}

#[test]
fn simulate_reports_scp_and_boundary_denials_by_action_with_karpenters_context() {
    let (c, wd, px, _spot) = setup("drec-sim");
    let role = controller_role(&c);
    no_datapoints(&px, &c);
    px.set(json!({"iam_simulate": {&role: {
        "decisions": {"ec2:CreateFleet": "scp", "ec2:RunInstances": "scp", "iam:PassRole": "boundary"},
        "context_keys": ["aws:RequestedRegion", format!("aws:RequestTag/kubernetes.io/cluster/{c}"), "ec2:CreateAction", "iam:PassedToService", "aws:PrincipalOrgID"]}}}));

    // Without the flag: no simulator call, no simulation checks.
    let plain = doctor(&wd, &px, &c, &[]);
    only_reads(&px, false);
    assert!(
        !passed(&plain).contains("simulation-scp-denied") && !finding_codes(&plain).contains("simulation-scope"),
        "{plain:?}"
    );

    let r = doctor(&wd, &px, &c, &["--simulate"]);
    assert_eq!(r.code, 2, "{r:?}");
    let scp = finding(&r, "simulation-scp-denied");
    // A hint, not a fact: CloudTrail shows no such refusal, so a warning.
    assert_eq!((scp["severity"].as_str(), scp["resource"].as_str()), (Some("warning"), Some(format!("role/{role}").as_str())));
    assert!(scp["message"].as_str().unwrap().contains("a hint"), "{scp}");
    let m = scp["message"].as_str().unwrap();
    assert!(m.contains("ec2:CreateFleet") && m.contains("ec2:RunInstances") && !m.contains("iam:PassRole"), "{m}");
    let b = finding(&r, "simulation-boundary-denied");
    let m = b["message"].as_str().unwrap();
    assert!(m.contains("iam:PassRole") && !m.contains("ec2:CreateFleet"), "{m}");
    assert!(b["fix"].as_str().unwrap().contains("boundary"), "{b}");
    let scope = finding(&r, "simulation-scope");
    assert_eq!(scope["severity"], "note", "{scope}");
    let note = scope["message"].as_str().unwrap_or_else(|| panic!("a note: {r:?}"));
    assert!(note.contains("resource control policies") && note.contains("session policies"), "what it cannot see: {note}");
    assert!(note.contains("aws:PrincipalOrgID"), "the key without a value: {note}");

    // The calls: the context keys first, then the pinned set in batches of at most 50, each
    // with the context entries Karpenter's launches carry.
    assert_eq!(px.count("GetContextKeysForPrincipalPolicy"), 1);
    let sims: Vec<Value> = px.calls_json().into_iter().filter(|c| c["operation"] == "SimulatePrincipalPolicy").collect();
    assert!(!sims.is_empty());
    let mut actions = BTreeSet::new();
    for s in &sims {
        assert_eq!(s["resource"], role.as_str());
        let a = s["actions"].as_array().unwrap();
        assert!(a.len() <= 50, "batches of 50: {}", a.len());
        actions.extend(a.iter().map(|x| x.as_str().unwrap().to_string()));
        let entries: BTreeSet<(String, String)> = s["context_entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["key"].as_str().unwrap().to_string(), e["values"][0].as_str().unwrap().to_string()))
            .collect();
        for want in [
            ("aws:RequestedRegion", "us-east-1".to_string()),
            ("ec2:CreateAction", "CreateFleet".to_string()),
            ("iam:PassedToService", "ec2.amazonaws.com".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain([(format!("aws:RequestTag/kubernetes.io/cluster/{c}"), "owned".to_string())])
        {
            assert!(entries.contains(&want), "{want:?} sent: {entries:?}");
        }
        assert!(!entries.iter().any(|(k, _)| k == "aws:PrincipalOrgID"), "no made-up value: {entries:?}");
    }
    for a in ["ec2:CreateFleet", "ec2:RunInstances", "iam:PassRole", "sqs:ReceiveMessage"] {
        assert!(actions.contains(a), "{a} simulated: {actions:?}");
    }
    only_reads(&px, true);

    // The simulator refused: a warning, the simulation checks skipped.
    px.set(json!({"iam_simulate": {&role: "AccessDenied"}}));
    let denied = doctor(&wd, &px, &c, &["--simulate"]);
    let f = finding(&denied, "simulation-unreadable");
    assert_eq!(f["severity"], "warning", "{f}");
    assert!(!finding_codes(&denied).contains("simulation-scp-denied"), "{denied:?}");
}

#[test]
fn simulate_passes_the_principal_and_the_resource_and_cloudtrail_makes_a_denial_an_error() {
    let (c, wd, px, _spot) = setup("drec-simctx");
    let role = controller_role(&c);
    no_datapoints(&px, &c);
    let a = "000000000000";
    let role_arn_pattern = format!("arn:aws:iam::*:role/karpctl/{c}/{role}");
    // An SCP denying launches to everyone but the controller role (by aws:PrincipalArn), and one
    // denying fleets by ARN (a statement scoped to fleet ARNs: Resource "*" misses it).
    px.set(json!({"iam_simulate": {&role: {
        "decisions": {
            "ec2:RunInstances": {"decision": "scp", "unless": {"aws:PrincipalArn": [role_arn_pattern]}},
            "ec2:CreateFleet": {"decision": "scp", "resources": ["arn:aws:ec2:*:*:fleet/*"]}},
        "context_keys": ["aws:RequestedRegion"]}}}));
    let r = doctor(&wd, &px, &c, &["--simulate"]);
    let scp = finding(&r, "simulation-scp-denied");
    let m = scp["message"].as_str().unwrap();
    assert!(m.contains("ec2:CreateFleet"), "the ARN-scoped denial is seen with ResourceArns: {m}");
    assert!(!m.contains("ec2:RunInstances"), "the role is exempted by aws:PrincipalArn: no denial: {m}");
    assert_eq!(scp["severity"], "warning", "nothing recorded: a hint: {scp}");
    let sims: Vec<Value> = px.calls_json().into_iter().filter(|c| c["operation"] == "SimulatePrincipalPolicy").collect();
    let fleet = sims
        .iter()
        .find(|s| s["actions"].as_array().unwrap().iter().any(|x| x == "ec2:CreateFleet"))
        .unwrap_or_else(|| panic!("{sims:?}"));
    assert_eq!(fleet["resources"], json!([format!("arn:aws:ec2:us-east-1:{a}:fleet/*")]), "{fleet}");
    let keys: BTreeSet<(String, String)> = fleet["context_entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].as_str().unwrap().to_string(), e["values"][0].as_str().unwrap().to_string()))
        .collect();
    assert!(keys.iter().any(|(k, v)| k == "aws:PrincipalArn" && v.ends_with(&format!("role/karpctl/{c}/{role}"))), "{keys:?}");
    assert!(keys.contains(&("aws:PrincipalAccount".to_string(), a.to_string())), "{keys:?}");
    assert!(keys.contains(&("aws:PrincipalType".to_string(), "AssumedRole".to_string())), "{keys:?}");
    assert!(keys.iter().any(|(k, _)| k.starts_with("aws:PrincipalTag/karpctl.io/cluster")), "the role's tags: {keys:?}");

    // CloudTrail shows the same refusal (CreateFleet, by an SCP): an error.
    let controller_arn = format!("arn:aws:iam::{a}:role/karpctl/{c}/{role}");
    px.set(json!({"cloudtrail_lookup_rps": 1000, "cloudtrail_events": [
        {"role": controller_arn, "event": "CreateFleet", "source": "ec2.amazonaws.com", "agent": "karpenter.sh-1.14.0", "minutes_ago": 3,
         "error_code": "Client.UnauthorizedOperation",
         "error_message": format!("You are not authorized to perform this operation. User: x is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:{a}:fleet/* with an explicit deny in a service control policy.")}]}));
    let r = doctor(&wd, &px, &c, &["--simulate"]);
    let scp = finding(&r, "simulation-scp-denied");
    assert_eq!(scp["severity"], "error", "{scp}");
    assert!(scp["message"].as_str().unwrap().contains("CloudTrail shows AWS refusing ec2:CreateFleet"), "{scp}");
}
