//! doctor's checks on AWS's records of the interruption path (a rule whose deliveries fail, a
//! queue nobody reads) and on the policy simulator's decisions (`--simulate`: SCP and boundary
//! denials); docs/doctor.md, "Records and simulation".

use super::row::{DOCTOR, Group, check};
use crate::facts::finding::{Checker, Code, Read, Severity};
use crate::facts::setup::{Queue, Setup};
use crate::policy::doc::{glob, is_allow, is_deny, statement_takes, statements, strings};
use crate::running::metrics::{OLDEST_MESSAGE_LIMIT_S, failing_rules, unread_queue};
use crate::running::simulation::{BLIND_SPOTS, Denial, denials};
use serde_json::Value;
use std::time::Duration;

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: records,
        checks: &[
            check(
                Code::InterruptionRuleFailing,
                "no interruption rule failed to deliver to the queue in the last hour (CloudWatch FailedInvocations)",
                &[Read::Metrics],
                DOCTOR,
            ),
            check(
                Code::QueueUnread,
                "something reads the queue: no message waits past five minutes (CloudWatch ApproximateAgeOfOldestMessage)",
                &[Read::Metrics],
                DOCTOR,
            ),
        ],
    },
    Group {
        run: simulation,
        checks: &[
            check(
                Code::SimulationScpDenied,
                "no SCP denies an action of the permission set (IAM policy simulator)",
                &[Read::Simulation],
                DOCTOR,
            ),
            check(
                Code::SimulationBoundaryDenied,
                "the permissions boundary allows every action of the permission set (IAM policy simulator)",
                &[Read::Simulation],
                DOCTOR,
            ),
            check(Code::SimulationNotRun, "--simulate found a controller role to simulate", &[Read::Simulation], DOCTOR),
            check(
                Code::SimulationScope,
                "what the IAM policy simulator was asked and cannot see (a note whenever it ran)",
                &[Read::Simulation],
                DOCTOR,
            ),
        ],
    },
];

/// How far back doctor reads the metrics.
pub const METRICS_WINDOW: Duration = Duration::from_secs(3600);

/// An epoch second as `2026-01-01T00:00:00Z`.
fn time(epoch: i64) -> String {
    aws_smithy_types::DateTime::from_secs(epoch)
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_else(|_| epoch.to_string())
}

// ------------------------------------------------------------------------- CloudWatch metrics

/// Whether a statement's principal takes in EventBridge.
fn names_events(st: &Value) -> bool {
    let p = &st["Principal"];
    p.as_str() == Some("*")
        || strings(&p["AWS"]).contains("*")
        || strings(&p["Service"]).iter().any(|x| x == crate::karpenter_iam::EVENTS_PRINCIPAL)
}

/// Whether a statement's conditions hold for a delivery by `rule_arn` of `account`. The keys
/// EventBridge's delivery carries are judged (aws:SourceArn, aws:SourceAccount; it always
/// sends over TLS, aws:SecureTransport true); a condition on any other key holds as `unknown`
/// says (true for an Allow: doctor does not blame what it cannot judge; false for a Deny).
fn conditions_hold(st: &Value, rule_arn: &str, account: &str, unknown: bool) -> bool {
    let Some(cond) = st["Condition"].as_object() else { return true };
    cond.iter().all(|(op, kv)| {
        let negated = op.contains("Not");
        kv.as_object().into_iter().flatten().all(|(k, v)| {
            let want = strings(v);
            let hit = match k.to_ascii_lowercase().as_str() {
                "aws:sourcearn" => want.iter().any(|w| glob(w, rule_arn)),
                "aws:sourceaccount" => want.contains(account),
                "aws:securetransport" => want.iter().any(|w| w.eq_ignore_ascii_case("true")),
                _ => return unknown,
            };
            hit != negated
        })
    })
}

/// Whether the queue's policy lets EventBridge deliver `rule_arn`'s events (sqs:SendMessage on
/// the queue, conditions met, no Deny that applies).
pub fn policy_lets_rule_send(policy: Option<&Value>, queue_arn: &str, rule_arn: &str, account: &str) -> bool {
    let Some(policy) = policy else { return false };
    let applies = |st: &Value, unknown: bool| {
        let resources = strings(&st["Resource"]);
        names_events(st)
            && statement_takes(st, "sqs:SendMessage")
            && (resources.is_empty() || resources.iter().any(|r| glob(r, queue_arn)))
            && conditions_hold(st, rule_arn, account, unknown)
    };
    let st = statements(policy);
    st.iter().any(|s| is_allow(s) && applies(s, true)) && !st.iter().any(|s| is_deny(s) && applies(s, false))
}

/// Why EventBridge's deliveries of a rule likely fail, from what doctor read.
enum Cause {
    /// The queue policy does not let the rule's ARN send.
    Policy,
    /// The queue's key does not let EventBridge use it (its ARN or alias).
    Key(String),
    /// Neither shows a cause: both to check.
    Unknown,
}

fn cause(s: &Setup, q: Option<&Queue>, rule_arn: &str) -> Cause {
    let Some(q) = q else { return Cause::Unknown };
    if !rule_arn.is_empty() && !policy_lets_rule_send(q.policy.as_ref(), &q.arn, rule_arn, &s.account_id) {
        return Cause::Policy;
    }
    if let Some(k) = q.kms_master_key_id.as_deref().filter(|k| crate::plan_file::is_aws_managed_sqs_key(k)) {
        return Cause::Key(k.to_string());
    }
    match (&q.kms_key_arn, &q.kms_key_policy) {
        (Some(k), Some(p)) if super::kms::kms_key_lets_eventbridge_in(k, p).is_some() => Cause::Key(k.clone()),
        _ => Cause::Unknown,
    }
}

/// The interruption rules' deliveries and the queue's oldest message, as CloudWatch recorded them.
pub(super) fn records(s: &Setup, c: &mut Checker) {
    for failed in &s.records_failed {
        // Failed otherwise than refused (throttled past the retries, no answer): the same code
        // as a refusal, a note, since nothing is known to be wrong.
        c.add(
            failed.code,
            Severity::Note,
            failed.operation.clone(),
            failed.message.clone(),
            "run doctor again: the read was throttled or got no answer, nothing is known to be wrong".into(),
        );
    }
    let Some(m) = &s.metrics else { return };
    let q = s.queue.as_ref().filter(|q| q.exists);
    let queue = q.map(|q| q.name.as_str()).unwrap_or("the interruption queue");
    c.ran(Code::InterruptionRuleFailing);
    for f in failing_rules(&m.failed_invocations) {
        let arn = s.rules.iter().find(|r| r.name == f.rule).map(|r| r.arn.clone()).unwrap_or_default();
        let seen = format!(
            "EventBridge failed to deliver {} event(s) of rule {} to queue {queue} in the last hour (AWS/Events FailedInvocations, last at {}): those interruption events never reached Karpenter",
            f.failed,
            f.rule,
            time(f.last_epoch)
        );
        let (message, fix) = match (cause(s, q, &arn), q) {
            (Cause::Policy, Some(q)) => (
                format!("{seen}; the queue policy does not let this rule ({arn}) send"),
                format!(
                    "allow events.amazonaws.com sqs:SendMessage on {} with \"Condition\": {{\"ArnEquals\": {{\"aws:SourceArn\": \"{arn}\"}}}} (or aws:SourceAccount {}) in the queue policy; `karpctl up` writes such a policy for the queues it manages",
                    q.arn, s.account_id
                ),
            ),
            (Cause::Key(k), _) => (
                format!(
                    "{seen}; the queue's KMS key {k} does not let {} use it (kms:GenerateDataKey, kms:Decrypt)",
                    crate::karpenter_iam::EVENTS_PRINCIPAL
                ),
                if crate::plan_file::is_aws_managed_sqs_key(&k) {
                    "encrypt the queue with SQS managed encryption (SqsManagedSseEnabled=true) or a customer managed key whose policy lets events.amazonaws.com use it: the AWS managed key's policy cannot".to_string()
                } else {
                    format!("add to the key policy of {k}: {}", crate::karpenter_iam::events_key_statement())
                },
            ),
            _ => (
                format!("{seen}; the queue policy and key doctor read do not show why"),
                format!(
                    "check both: that the queue policy lets events.amazonaws.com sqs:SendMessage on the queue with aws:SourceArn {} (or aws:SourceAccount {}), and that a customer managed KMS key on the queue lets events.amazonaws.com use kms:GenerateDataKey and kms:Decrypt",
                    if arn.is_empty() { f.rule.as_str() } else { arn.as_str() },
                    s.account_id
                ),
            ),
        };
        c.add(Code::InterruptionRuleFailing, Severity::Error, format!("rule/{}", f.rule), message, fix);
    }
    let Some((name, series)) = &m.oldest_message else { return };
    c.ran(Code::QueueUnread);
    let Some(u) = unread_queue(name, series, OLDEST_MESSAGE_LIMIT_S) else { return };
    let arn = q.map(|q| q.arn.as_str()).unwrap_or(name);
    let role = s.controller.as_ref().filter(|r| r.exists);
    let docs: Vec<&Value> = role.iter().flat_map(|r| r.policies.iter().filter_map(|p| p.document.as_ref())).collect();
    let may_receive = role.is_none() || crate::policy::analysis::receive_queues(&docs).iter().any(|a| glob(a, arn));
    let receive = match role {
        Some(r) if !may_receive => {
            format!("the controller role {} does not allow sqs:ReceiveMessage on {arn} (the likely cause); ", r.name)
        }
        Some(r) => format!(
            "that the controller role {} may call sqs:ReceiveMessage on {arn} (and kms:Decrypt with a customer managed key); ",
            r.name
        ),
        None => format!("that the controller's role may call sqs:ReceiveMessage on {arn}; "),
    };
    c.add(
        Code::QueueUnread,
        Severity::Error,
        format!("queue/{}", u.queue),
        format!(
            "the oldest message in queue {} had waited {:.0} minutes at {} (AWS/SQS ApproximateAgeOfOldestMessage; Karpenter deletes each message it reads within seconds): nothing reads this queue, so interruption events go unhandled",
            u.queue,
            u.oldest_age_s / 60.0,
            time(u.at_epoch)
        ),
        format!(
            "check that Karpenter's Helm value settings.interruptionQueue is {}; {receive}and that the Karpenter controller runs (kubectl -n {} get pods). doctor only reads the metric: it never receives, hides or deletes a message",
            u.queue, s.namespace
        ),
    );
}

// ----------------------------------------------------------------------- the policy simulator

/// The simulator's denials of one kind, split by whether CloudTrail recorded AWS refusing the
/// same action to the controller role by the same kind of policy: the severity (an error when
/// it did for one of them: a fact; else a warning: the simulator's verdict is a hint) and the
/// text saying which.
fn confirmed(s: &Setup, actions: &[&str], kind: crate::running::refusal::RefusalKind) -> (Severity, String) {
    let seen: Vec<&str> = actions
        .iter()
        .copied()
        .filter(|a| {
            s.running.as_ref().is_some_and(|r| r.refusals.iter().any(|g| g.kind == kind && g.action.eq_ignore_ascii_case(a)))
        })
        .collect();
    let window = s.running.as_ref().map(|r| r.window_text()).unwrap_or_else(|| "the window".into());
    if seen.is_empty() {
        (
            Severity::Warning,
            format!(
                "; a hint, not a fact: CloudTrail shows no such refusal in {window} (the simulator knows only the context it is given and cannot evaluate SCPs that test global condition keys)"
            ),
        )
    } else {
        (Severity::Error, format!("; CloudTrail shows AWS refusing {} to the role this way in {window}", seen.join(", ")))
    }
}

/// `doctor --simulate`: the actions an SCP or the permissions boundary denies the controller
/// role, one finding per kind of denial (an error when CloudTrail shows the same refusal, else a
/// warning), and what the simulator cannot see.
pub(super) fn simulation(s: &Setup, c: &mut Checker) {
    use crate::running::refusal::RefusalKind;
    let Some(sim) = &s.simulation else { return };
    let Some(role_arn) = &sim.role_arn else {
        c.add(
            Code::SimulationNotRun,
            Severity::Note,
            "--simulate",
            "no controller role was found, so nothing was simulated".into(),
            "see controller-role-not-found; simulate again once the controller role exists".into(),
        );
        return;
    };
    let role = crate::policy::analysis::role_name(role_arn);
    c.ran(Code::SimulationScpDenied);
    c.ran(Code::SimulationBoundaryDenied);
    let denied = denials(&sim.decisions);
    let of = |kind: Denial| -> Vec<&str> {
        let mut v: Vec<&str> = denied.iter().filter(|(_, d)| *d == kind).map(|(a, _)| a.as_str()).collect();
        v.dedup();
        v
    };
    let scp = of(Denial::Scp);
    if !scp.is_empty() {
        let (severity, fact) = confirmed(s, &scp, RefusalKind::Scp);
        c.add(
            Code::SimulationScpDenied,
            severity,
            format!("role/{role}"),
            format!(
                "a service control policy of the AWS Organization denies the controller role {role} {} action(s) of Karpenter {}'s permission set (IAM policy simulator): {}{fact}",
                scp.len(),
                s.version,
                scp.join(", ")
            ),
            "an SCP cannot be overridden by the role's own policies: ask the organization's administrators to exempt the role (for example a condition on aws:PrincipalArn) or to allow these actions in the SCP".into(),
        );
    }
    let boundary = of(Denial::PermissionsBoundary);
    if !boundary.is_empty() {
        let (severity, fact) = confirmed(s, &boundary, RefusalKind::PermissionsBoundary);
        c.add(
            Code::SimulationBoundaryDenied,
            severity,
            format!("role/{role}"),
            format!(
                "the permissions boundary of the controller role {role} does not allow {} action(s) of Karpenter {}'s permission set (IAM policy simulator): {}{fact}",
                boundary.len(),
                s.version,
                boundary.join(", ")
            ),
            format!(
                "a boundary caps what the role's policies grant: add these actions to the boundary policy (aws iam get-role --role-name {role} --query Role.PermissionsBoundary names it), or remove the boundary (aws iam delete-role-permissions-boundary --role-name {role})"
            ),
        );
    }
    let own = of(Denial::IdentityPolicy).len();
    let own = if own == 0 {
        String::new()
    } else {
        format!("; {own} action(s) the role's own policies do not allow (see controller-missing-permissions)")
    };
    let keys: Vec<&str> = sim.context.iter().map(|v| v.key.as_str()).collect();
    let unknown = if sim.unknown_keys.is_empty() {
        String::new()
    } else {
        format!(
            "; keys the role's policies test that karpctl has no value for (absent in the simulation): {}",
            sim.unknown_keys.join(", ")
        )
    };
    c.add(
        Code::SimulationScope,
        Severity::Note,
        role_arn.clone(),
        format!(
            "{} action(s) simulated for {role_arn} with context keys [{}]{own}{unknown}. What it cannot see: {BLIND_SPOTS}",
            sim.actions.len(),
            keys.join(", ")
        ),
        "read a simulated allow or deny as a hint: the refusals CloudTrail recorded (calls-refused) are the evidence".into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const Q: &str = "arn:aws:sqs:us-east-1:111122223333:Karpenter-c1";
    const RULE: &str = "arn:aws:events:us-east-1:111122223333:rule/Karpenter-c1-spot";

    fn policy(condition: Value) -> Value {
        json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage", "Resource": Q, "Condition": condition}]})
    }

    #[test]
    fn the_queue_policy_lets_a_rule_send_by_its_arn_or_account() {
        let ok = |p: &Value| policy_lets_rule_send(Some(p), Q, RULE, "111122223333");
        assert!(ok(&policy(json!({"ArnEquals": {"aws:SourceArn": RULE}}))));
        assert!(ok(&policy(json!({"ArnLike": {"aws:SourceArn": "arn:aws:events:us-east-1:111122223333:rule/Karpenter-c1-*"}}))));
        assert!(ok(&policy(json!({"StringEquals": {"aws:SourceAccount": "111122223333"}}))));
        assert!(ok(&policy(json!({}))));
        assert!(!ok(&policy(json!({"ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:111122223333:rule/other"}}))));
        assert!(!ok(&policy(json!({"StringEquals": {"aws:SourceAccount": "444455556666"}}))));
        assert!(!ok(&policy(json!({"ArnNotEquals": {"aws:SourceArn": RULE}}))));
        assert!(!policy_lets_rule_send(None, Q, RULE, "111122223333"), "no policy: nothing may send");
        let mut denied = policy(json!({}));
        denied["Statement"]
            .as_array_mut()
            .unwrap()
            .push(json!({"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": Q}));
        assert!(!ok(&denied));
        let mut tls = policy(json!({}));
        tls["Statement"]
            .as_array_mut()
            .unwrap()
            .push(json!({"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": Q,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}));
        assert!(ok(&tls), "EventBridge delivers over TLS");
        let mut other = policy(json!({}));
        other["Statement"]
            .as_array_mut()
            .unwrap()
            .push(json!({"Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": Q,
            "Condition": {"StringNotEquals": {"aws:PrincipalOrgID": "o-1"}}}));
        assert!(ok(&other), "a Deny on a key doctor cannot judge is not blamed");
    }
}
