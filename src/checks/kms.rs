//! Checks on the interruption queue's KMS key policy: EventBridge may encrypt with it, the
//! controller may decrypt. Pure over the key's ARN and policy in the setup: as `up` will write
//! it or reads it (`up`, `diff`), as doctor found it; plus the statements they need.

use super::row::{EVERY, Group, check};
use crate::facts::finding::{Checker, Code, Finding, Read, Severity};
use crate::facts::setup::Setup;
use crate::karpenter_iam::{EVENTS_KMS_ACTIONS, EVENTS_PRINCIPAL, events_key_statement, iam_delegation_statement};

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[Group {
    run: kms_key,
    checks: &[
        check(Code::KmsKeyPolicyEvents, "EventBridge may use the queue's KMS key", &[Read::Queue, Read::KmsKey], EVERY),
        check(
            Code::KmsKeyPolicyController,
            "the controller may decrypt with the queue's KMS key",
            &[Read::Controller, Read::Queue, Read::KmsKey],
            EVERY,
        ),
    ],
}];

/// Whether a key-policy statement's principal takes in one of `who` (service names, account
/// roots, account ids, role ARNs) or everyone (`*`).
pub(super) fn principal_names(s: &serde_json::Value, field: &str, who: &[&str]) -> bool {
    let p = &s["Principal"];
    if p.as_str() == Some("*") {
        return true;
    }
    let names = crate::policy::doc::strings(&p[field]);
    names.contains("*") || who.iter().any(|w| names.contains(*w))
}

/// The Allow statements of `policy` naming one of `who` under `field` take in `action`.
fn key_policy_allows(policy: &serde_json::Value, field: &str, who: &[&str], action: &str) -> bool {
    use crate::policy::doc::{is_allow, is_deny, statement_takes, statements};
    let st = statements(policy);
    let allowed = st.iter().any(|s| is_allow(s) && principal_names(s, field, who) && statement_takes(s, action));
    let denied = st.iter().any(|s| {
        is_deny(s) && !crate::policy::doc::has_condition(s) && principal_names(s, field, who) && statement_takes(s, action)
    });
    allowed && !denied
}

fn put_key_policy_fix(key_arn: &str, statement: &serde_json::Value) -> String {
    format!(
        "add this statement to the key policy (aws kms get-key-policy --key-id {key_arn} --policy-name default --query Policy --output text > key-policy.json; add it to Statement; aws kms put-key-policy --key-id {key_arn} --policy-name default --policy file://key-policy.json): {statement}"
    )
}

/// EventBridge writes every interruption event into the queue: with SSE-KMS it needs
/// kms:GenerateDataKey and kms:Decrypt on the key, from the key policy (a service principal has
/// no IAM policy). Without them PutTargets still succeeds and no event ever arrives.
pub fn kms_key_lets_eventbridge_in(key_arn: &str, policy: &serde_json::Value) -> Option<Finding> {
    let missing: Vec<&str> =
        EVENTS_KMS_ACTIONS.into_iter().filter(|a| !key_policy_allows(policy, "Service", &[EVENTS_PRINCIPAL], a)).collect();
    (!missing.is_empty()).then(|| Finding {
        code: Code::KmsKeyPolicyEvents,
        severity: Severity::Error,
        resource: key_arn.to_string(),
        message: format!(
            "the key policy of the interruption queue's KMS key {key_arn} does not let {EVENTS_PRINCIPAL} use {}: EventBridge cannot put interruption events into the queue (PutTargets still succeeds, and no event ever arrives)",
            missing.join(" and ")
        ),
        fix: put_key_policy_fix(key_arn, &events_key_statement()),
    })
}

/// Karpenter's controller reads the queue: SQS decrypts each message with the caller's rights,
/// so it needs kms:Decrypt on the key. karpctl grants it in the controller's Interruption policy;
/// an IAM grant counts only if the key policy delegates to the account's IAM (the `:root`
/// principal) or names the role itself.
pub fn kms_key_lets_controller_decrypt(
    key_arn: &str,
    policy: &serde_json::Value,
    partition: &str,
    account_id: &str,
    controller_role_arn: &str,
) -> Option<Finding> {
    let root = format!("arn:{partition}:iam::{account_id}:root");
    if key_policy_allows(policy, "AWS", &[&root, account_id, controller_role_arn], "kms:Decrypt") {
        return None;
    }
    let role_statement = serde_json::json!({
        "Sid": "AllowKarpenterToReadInterruptionEvents",
        "Effect": "Allow",
        "Principal": {"AWS": controller_role_arn},
        "Action": "kms:Decrypt",
        "Resource": "*",
    });
    Some(Finding {
        code: Code::KmsKeyPolicyController,
        severity: Severity::Error,
        resource: key_arn.to_string(),
        message: format!(
            "the key policy of the interruption queue's KMS key {key_arn} neither lets IAM policies grant its use (no statement for {root}) nor lets the controller role {controller_role_arn} use kms:Decrypt: Karpenter's sqs:ReceiveMessage fails and interruption handling stops"
        ),
        fix: format!(
            "{} (or KMS's default statement that lets IAM policies grant use of the key: {})",
            put_key_policy_fix(key_arn, &role_statement),
            iam_delegation_statement(partition, account_id)
        ),
    })
}

/// The queue's customer managed key: EventBridge and the controller may use it.
pub(super) fn kms_key(s: &Setup, c: &mut Checker) {
    let Some(q) = &s.queue else { return };
    let (Some(arn), Some(policy)) = (&q.kms_key_arn, &q.kms_key_policy) else { return };
    c.record(Code::KmsKeyPolicyEvents, kms_key_lets_eventbridge_in(arn, policy));
    if let Some(role) = s.controller.as_ref().filter(|r| r.exists) {
        c.record(
            Code::KmsKeyPolicyController,
            kms_key_lets_controller_decrypt(arn, policy, &s.partition, &s.account_id, &role.arn),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "arn:aws:kms:us-east-1:111122223333:key/k1";
    const ROLE: &str = "arn:aws:iam::111122223333:role/KarpenterController-c1";

    fn key_policy(statements: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"Version": "2012-10-17", "Statement": statements})
    }

    #[test]
    fn kms_default_policy_and_the_events_statement_pass() {
        let p = key_policy(serde_json::json!([iam_delegation_statement("aws", "111122223333"), events_key_statement()]));
        assert_eq!(kms_key_lets_eventbridge_in(KEY, &p), None);
        assert_eq!(kms_key_lets_controller_decrypt(KEY, &p, "aws", "111122223333", ROLE), None);
        let wild = key_policy(
            serde_json::json!([{"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sns.amazonaws.com"]}, "Action": ["kms:GenerateDataKey*", "kms:Decrypt"], "Resource": "*"}]),
        );
        assert_eq!(kms_key_lets_eventbridge_in(KEY, &wild), None);
        let by_role = key_policy(
            serde_json::json!({"Effect": "Allow", "Principal": {"AWS": [ROLE]}, "Action": "kms:Decrypt", "Resource": "*"}),
        );
        assert_eq!(kms_key_lets_controller_decrypt(KEY, &by_role, "aws", "111122223333", ROLE), None);
    }

    #[test]
    fn a_key_policy_without_eventbridge_names_the_missing_actions_and_the_statement() {
        let p = key_policy(serde_json::json!([iam_delegation_statement("aws", "111122223333"),
            {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "kms:Decrypt", "Resource": "*"}]));
        let c = kms_key_lets_eventbridge_in(KEY, &p).expect("fails");
        assert_eq!((c.code, c.severity), (Code::KmsKeyPolicyEvents, Severity::Error));
        assert!(c.message.contains("kms:GenerateDataKey") && !c.message.contains("and kms:Decrypt"), "{}", c.message);
        assert!(
            c.fix.contains("aws kms put-key-policy --key-id arn:aws:kms") && c.fix.contains("\"events.amazonaws.com\""),
            "{}",
            c.fix
        );
        let denied = key_policy(serde_json::json!([events_key_statement(),
            {"Effect": "Deny", "Principal": "*", "Action": "kms:*", "Resource": "*"}]));
        assert!(kms_key_lets_eventbridge_in(KEY, &denied).is_some());
    }

    #[test]
    fn a_key_policy_that_does_not_delegate_to_iam_fails_the_controller_check() {
        let p = key_policy(serde_json::json!([events_key_statement(),
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:role/Admin"}, "Action": "kms:*", "Resource": "*"}]));
        let c = kms_key_lets_controller_decrypt(KEY, &p, "aws", "111122223333", ROLE).expect("fails");
        assert_eq!((c.code, c.severity), (Code::KmsKeyPolicyController, Severity::Error));
        assert!(c.fix.contains(ROLE) && c.fix.contains("arn:aws:iam::111122223333:root"), "{}", c.fix);
    }
}
