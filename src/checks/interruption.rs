//! Checks on interruption handling as doctor found it: the queue, its encryption and policy, the
//! EventBridge rules that feed it, and the default event bus's rule quota.

use super::row::{DOCTOR, Group, check};
use crate::catalog::RULES;
use crate::facts::finding::{Checker, Code, Read, Severity};
use crate::facts::setup::{Queue, Rule, Setup};
use crate::policy::doc::strings;
use crate::policy::doc::{glob, statements};
use serde_json::Value;

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: queue_found,
        checks: &[check(Code::QueueNotFound, "an interruption queue is found", &[Read::InterruptionRules, Read::Queue], DOCTOR)],
    },
    Group {
        run: queue_encryption,
        checks: &[check(Code::QueueKmsAwsManaged, "EventBridge can write to the queue's encryption key", &[Read::Queue], DOCTOR)],
    },
    Group {
        run: queue_policy,
        checks: &[
            check(Code::QueuePolicyBlocksEventbridge, "the queue policy lets EventBridge send", &[Read::Queue], DOCTOR),
            check(
                Code::QueuePolicyUnconditioned,
                "the queue policy limits EventBridge to the account's rules",
                &[Read::Queue],
                DOCTOR,
            ),
            check(
                Code::QueuePolicyRefusesRule,
                "the queue policy lets every rule that targets the queue send",
                &[Read::Queue, Read::InterruptionRules],
                DOCTOR,
            ),
        ],
    },
    Group {
        run: rules,
        checks: &[
            check(
                Code::QueueShared,
                "the queue serves this cluster only",
                &[Read::Clusters, Read::InterruptionRules, Read::RuleTags],
                DOCTOR,
            ),
            check(
                Code::InterruptionRuleMissing,
                "a rule sends each interruption event to the queue",
                &[Read::InterruptionRules],
                DOCTOR,
            ),
            check(Code::InterruptionRuleDisabled, "those rules are enabled", &[Read::InterruptionRules], DOCTOR),
        ],
    },
    Group {
        run: bus_quota,
        checks: &[check(
            Code::EventBusRuleQuota,
            "the default event bus has room for more rules (EventBridge's quota per bus)",
            &[Read::InterruptionRules],
            DOCTOR,
        )],
    },
];

fn queue_res(name: &str) -> String {
    format!("queue/{name}")
}

/// The region's default event bus near or past EventBridge's rules-per-bus quota: one more
/// cluster's rules may not fit.
pub(super) fn bus_quota(s: &Setup, c: &mut Checker) {
    c.ran(Code::EventBusRuleQuota);
    if let Some(message) = bus_quota_message_at(s.bus_quota, &s.region, s.bus_rules, 0) {
        c.add(
            Code::EventBusRuleQuota,
            Severity::Warning,
            format!("event-bus/default ({})", s.region),
            message,
            "request a higher \"Maximum number of rules per event bus\" in Service Quotas, or move clusters to interruption.rules = \"merged\"".into(),
        );
    }
}

/// The queue the other queue checks judge: found and existing (else `queue-not-found` says why,
/// and they do not run).
fn existing(s: &Setup) -> Option<&Queue> {
    s.queue.as_ref().filter(|q| q.exists)
}

pub(super) fn queue_found(s: &Setup, c: &mut Checker) {
    c.ran(Code::QueueNotFound);
    let Some(q) = &s.queue else {
        let others = if s.other_queues.is_empty() {
            String::new()
        } else {
            format!(" (Karpenter's rules target other queues, not taken as this cluster's: {})", s.other_queues.join(", "))
        };
        c.add(
            Code::QueueNotFound,
            Severity::Warning,
            format!("cluster/{}", s.cluster),
            format!("no interruption queue found: no EventBridge rule with Karpenter's event patterns targets an SQS queue of this cluster, so interruption handling is off{others}"),
            format!("create the queue, its policy and rules (`karpctl up --cluster {}`) and set settings.interruptionQueue; or name the queue with --queue", s.cluster),
        );
        return;
    };
    if !q.exists {
        c.add(
            Code::QueueNotFound,
            Severity::Error,
            queue_res(&q.name),
            format!("the interruption queue {} ({}) does not exist", q.name, q.how),
            "create it, or point settings.interruptionQueue and the rules' targets at the queue that exists".into(),
        );
    }
}

pub(super) fn queue_encryption(s: &Setup, c: &mut Checker) {
    let Some(q) = existing(s) else { return };
    c.ran(Code::QueueKmsAwsManaged);
    if q.kms_master_key_id.as_deref().is_some_and(|k| k == "alias/aws/sqs" || k.ends_with(":alias/aws/sqs")) {
        c.add(
            Code::QueueKmsAwsManaged,
            Severity::Error,
            queue_res(&q.name),
            format!("queue {} is encrypted with the AWS managed key alias/aws/sqs, whose key policy EventBridge cannot use: interruption events never arrive", q.name),
            format!("aws sqs set-queue-attributes --queue-url {} --attributes KmsMasterKeyId=,SqsManagedSseEnabled=true (or a customer managed key granting events.amazonaws.com kms:GenerateDataKey and kms:Decrypt)", q.url.as_deref().unwrap_or(&q.name)),
        );
    }
}

fn takes_events(st: &Value) -> bool {
    let p = &st["Principal"];
    p.as_str() == Some("*")
        || strings(&p["AWS"]).contains("*")
        || strings(&p["Service"]).iter().any(|x| x == "events.amazonaws.com")
}

fn on_queue(st: &Value, arn: &str) -> bool {
    strings(&st["Resource"]).iter().any(|r| glob(r, arn))
}

fn sends(st: &Value) -> bool {
    let takes = |field: &str| strings(&st[field]).iter().any(|a| glob(a, "sqs:SendMessage"));
    if st.get("NotAction").is_some() { !takes("NotAction") } else { takes("Action") }
}

/// The queue policy lets EventBridge send, and only for the account's rules.
pub(super) fn queue_policy(s: &Setup, c: &mut Checker) {
    let Some(q) = existing(s) else { return };
    c.ran(Code::QueuePolicyBlocksEventbridge);
    let stmts: Vec<&Value> = q.policy.as_ref().map(statements).unwrap_or_default();
    let effect = |st: &Value, e: &str| st["Effect"].as_str().is_some_and(|x| x.eq_ignore_ascii_case(e));
    let allowing: Vec<&Value> =
        stmts.iter().copied().filter(|st| effect(st, "allow") && takes_events(st) && sends(st) && on_queue(st, &q.arn)).collect();
    let denying = stmts
        .iter()
        .any(|st| effect(st, "deny") && takes_events(st) && sends(st) && on_queue(st, &q.arn) && st.get("Condition").is_none());
    if allowing.is_empty() || denying {
        let why = if denying {
            "a Deny statement refuses events.amazonaws.com sqs:SendMessage"
        } else if q.policy.is_none() {
            "the queue has no policy"
        } else {
            "no statement allows events.amazonaws.com sqs:SendMessage on it"
        };
        c.add(
            Code::QueuePolicyBlocksEventbridge,
            Severity::Error,
            queue_res(&q.name),
            format!("EventBridge cannot deliver to queue {}: {why}; interruption events never arrive", q.name),
            format!(
                "allow the service principal events.amazonaws.com sqs:SendMessage on {} (with aws:SourceArn of the rules)",
                q.arn
            ),
        );
        return;
    }
    refused_rules(s, q, &allowing, c);
    c.ran(Code::QueuePolicyUnconditioned);
    let conditioned = |st: &Value| {
        st["Condition"].as_object().into_iter().flatten().any(|(_, kv)| {
            kv.as_object().into_iter().flatten().any(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k == "aws:sourcearn" || k == "aws:sourceaccount"
            })
        })
    };
    if allowing.iter().any(|st| !conditioned(st)) {
        c.add(
            Code::QueuePolicyUnconditioned,
            Severity::Warning,
            queue_res(&q.name),
            format!("queue {}'s policy lets events.amazonaws.com send without an aws:SourceArn or aws:SourceAccount condition: another account's rule could inject fake interruptions", q.name),
            format!("add \"Condition\": {{\"StringEquals\": {{\"aws:SourceAccount\": \"{}\"}}}} (or aws:SourceArn = the rules' ARNs) to the statement", s.account_id),
        );
    }
}

/// Whether an Allow statement of the queue policy lets the rule `arn` send: no `aws:SourceArn`
/// condition, or one whose values (patterns with `ArnLike`) match it.
fn lets_send(st: &Value, arn: &str) -> bool {
    let mut limited = false;
    for (_, kv) in st["Condition"].as_object().into_iter().flatten() {
        for (k, v) in kv.as_object().into_iter().flatten() {
            if k.eq_ignore_ascii_case("aws:SourceArn") {
                limited = true;
                if strings(v).iter().any(|p| glob(p, arn)) {
                    return true;
                }
            }
        }
    }
    !limited
}

/// Every enabled rule that targets the queue can send: one the policy refuses loses its events
/// (EventBridge drops what the queue refuses), an error when no allowed rule carries its kinds.
fn refused_rules(s: &Setup, q: &Queue, allowing: &[&Value], c: &mut Checker) {
    c.ran(Code::QueuePolicyRefusesRule);
    let feeding: Vec<&Rule> = s.rules.iter().filter(|r| r.enabled && r.queue_arns.contains(&q.arn)).collect();
    let allowed = |r: &Rule| allowing.iter().any(|st| lets_send(st, &r.arn));
    for r in feeding.iter().filter(|r| !allowed(r)) {
        let covered = r.kinds.iter().all(|k| feeding.iter().any(|o| o.kinds.contains(k) && allowed(o)));
        let (severity, effect) = if covered {
            (Severity::Warning, "another rule the policy allows carries the same events, so none is lost")
        } else {
            (Severity::Error, "no rule the policy allows carries its events: Karpenter never hears of them")
        };
        c.add(
            Code::QueuePolicyRefusesRule,
            severity,
            queue_res(&q.name),
            format!("rule {} targets queue {} but the queue policy's aws:SourceArn does not name it: EventBridge's deliveries are refused; {effect}", r.name, q.name),
            format!("add {} to the policy's aws:SourceArn (`karpctl up` keeps every rule that targets its queue), or delete the rule in the tool that made it", r.arn),
        );
    }
}

/// The rules that feed the queue: this cluster's only, one enabled for each event kind.
pub(super) fn rules(s: &Setup, c: &mut Checker) {
    let Some(q) = existing(s) else { return };
    let ours: Vec<&Rule> = s.rules.iter().filter(|r| r.queue_arns.contains(&q.arn)).collect();
    c.ran(Code::QueueShared);
    let shared: Vec<String> =
        ours.iter().filter_map(|r| r.other_cluster.as_ref().map(|o| format!("{} (cluster {o})", r.name))).collect();
    if !shared.is_empty() {
        c.add(
            Code::QueueShared,
            Severity::Error,
            queue_res(&q.name),
            format!("queue {} also receives another cluster's interruption rules: {}; Karpenter deletes every message it reads, so each cluster misses the other's events", q.name, shared.join(", ")),
            "give each cluster its own queue and rules (karpctl makes Karpenter-<cluster>)".into(),
        );
    }
    c.ran(Code::InterruptionRuleMissing);
    c.ran(Code::InterruptionRuleDisabled);
    for crate::catalog::Rule { part, detail_type: detail, since_minor: since, missing, .. } in RULES.iter() {
        if s.version.minor < *since {
            continue;
        }
        let of_kind: Vec<&&Rule> = ours.iter().filter(|r| r.kinds.contains(part)).collect();
        if of_kind.is_empty() {
            let severity = if *missing == crate::catalog::Missing::Warning { Severity::Warning } else { Severity::Error };
            c.add(
                Code::InterruptionRuleMissing,
                severity,
                format!("rule/{part}"),
                format!("no EventBridge rule sends \"{detail}\" events to queue {}: Karpenter never hears of them", q.name),
                format!("create the rule (or `karpctl up --cluster {}`) with the pattern {{\"source\": [...], \"detail-type\": [\"{detail}\"]}} and the queue as target", s.cluster),
            );
        } else if !of_kind.iter().any(|r| r.enabled) {
            let names: Vec<&str> = of_kind.iter().map(|r| r.name.as_str()).collect();
            c.add(
                Code::InterruptionRuleDisabled,
                Severity::Error,
                format!("rule/{}", names[0]),
                format!("the rule for \"{detail}\" events ({}) is disabled", names.join(", ")),
                format!("aws events enable-rule --name {}", names[0]),
            );
        }
    }
}

/// Pure: what to say when a bus holding `existing` rules gets `adding` more, against a quota of
/// `quota` rules per bus: past the quota (PutRule will be refused with LimitExceededException)
/// or past 90% of it. None: room enough.
pub fn bus_quota_message_at(quota: usize, region: &str, existing: usize, adding: usize) -> Option<String> {
    let total = existing + adding;
    if total * 10 <= quota * 9 {
        return None;
    }
    let what = if total > quota {
        format!("over the quota of {quota} rules per event bus: EventBridge will refuse the new rules (LimitExceededException)")
    } else {
        format!("{total} of the quota of {quota} rules per event bus")
    };
    Some(format!(
        "the default event bus in {region} has {existing} rule(s){}, {what}; raise the Service Quotas quota \"Maximum number of rules per event bus\" (Amazon EventBridge; then set KARPCTL_RULES_PER_BUS to it) or use interruption.rules = \"merged\" (one rule per cluster instead of one per event kind)",
        if adding > 0 { format!(" and this plan adds {adding}") } else { String::new() }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bus_quota_is_said_past_90_percent_and_past_the_quota() {
        let q = crate::settings::DEFAULT_RULES_PER_BUS;
        assert_eq!(bus_quota_message_at(q, "us-east-1", 260, 5), None);
        let near = bus_quota_message_at(q, "us-east-1", 270, 5).unwrap();
        assert!(near.contains("275 of the quota of 300") && near.contains("merged"), "{near}");
        let over = bus_quota_message_at(q, "us-east-1", 298, 5).unwrap();
        assert!(over.contains("LimitExceededException") && over.contains("Maximum number of rules per event bus"), "{over}");
        assert!(bus_quota_message_at(q, "eu-west-1", 299, 0).unwrap().contains("has 299 rule(s),"));
        assert_eq!(bus_quota_message_at(1000, "us-east-1", 298, 5), None, "a raised quota");
    }
}
