//! The hint an error carries, or one karpctl gives for a class of AWS error.

use crate::aws;
use crate::error::UserError;

/// The command and cluster of this run, for the hint of a refused call (set once by main).
static GRANT: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();

/// Name the command and its cluster(s) (`--cluster c`, `--clusters a,b`, `--all`) for the hint
/// of a refused call.
pub fn set_run(command: &str, clusters: &str) {
    let _ = GRANT.set((command.to_string(), clusters.to_string()));
}

/// The hint for an error: its own, or one for a missing permission.
pub fn hint_of(err: &anyhow::Error) -> Option<String> {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    user.and_then(|u| u.hint.clone()).or_else(|| aws::refusal_in(err).map(refused_hint))
}

/// A refused call: the action, the resource AWS named, and the command printing the policy
/// that grants what this command needs.
fn refused_hint(a: &aws::AwsError) -> String {
    let on = resource_in(&a.message).map(|r| format!(" on {r}")).unwrap_or_default();
    let mut h = format!("AWS refused {}{on}: the credentials lack this permission", a.operation);
    if let Some((command, clusters)) = GRANT.get() {
        let for_ = match command.as_str() {
            "up" | "diff" | "down" | "doctor" | "import" => format!(" --for {command}"),
            _ => String::new(),
        };
        h.push_str(&format!(
            "; `karpctl output {clusters} --format caller-policy{for_}` prints the IAM policy that grants what `karpctl {command}` needs (docs/security.md)"
        ));
    } else {
        h.push_str("; grant it, or run with credentials that have it");
    }
    h
}

/// The resource in an AWS refusal's message: "... to perform: iam:CreateRole on resource:
/// arn:aws:iam::1:role/x because ..." (None when the message names none).
fn resource_in(message: &str) -> Option<&str> {
    let rest = &message[message.find("on resource: ")? + "on resource: ".len()..];
    let end = rest.find(|c: char| c.is_whitespace() || c == ',').unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches('.')).filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_action_resource_and_the_policy_command() {
        set_run("up", "--cluster prod-east");
        let e = aws::AwsError {
            operation: "iam:CreateRole".into(),
            code: "AccessDenied".into(),
            message: "User: arn:aws:sts::1:assumed-role/ci/x is not authorized to perform: iam:CreateRole on resource: arn:aws:iam::1:role/karpctl/prod-east/R because no identity-based policy allows the iam:CreateRole action".into(),
            kind: aws::ErrorKind::AccessDenied,
        };
        let h = hint_of(&anyhow::Error::from(e)).expect("a hint");
        assert!(h.contains("AWS refused iam:CreateRole on arn:aws:iam::1:role/karpctl/prod-east/R"), "{h}");
        assert!(h.contains("`karpctl output --cluster prod-east --format caller-policy --for up`"), "{h}");
        assert_eq!(
            resource_in("not authorized to perform: sqs:CreateQueue on resource: arn:aws:sqs:r:1:q."),
            Some("arn:aws:sqs:r:1:q")
        );
        assert_eq!(resource_in("Access denied"), None);
    }
}
