//! One AWS error type and one classifier, like Karpenter's `pkg/errors`: code decides what an
//! error means (not found, already exists, throttled, a consistency delay, access denied, bad
//! input), so no caller matches formatted text. The codes come from the API references of each
//! service (see docs/aws-behaviour.md sections 5 and 9).

use aws_smithy_types::error::metadata::ProvideErrorMetadata;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    Throttled,
    /// A write AWS refuses only until an earlier change has propagated (retry with a deadline).
    Consistency,
    AccessDenied,
    Validation,
    Other,
}

/// SQS answers with either spelling of its codes (the SDK's typed errors use the legacy one).
fn sqs(code: &str) -> &str {
    code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code)
}

/// What an AWS error code (and, where one code means two things, its message) says.
pub fn classify(code: &str, message: &str) -> ErrorKind {
    let c = sqs(code);
    match c {
        "NoSuchEntity" if message.contains("The role with name") && message.contains("cannot be found") => {
            // AddRoleToInstanceProfile right after CreateRole: the role is there, IAM has not
            // replicated it yet. A read's NoSuchEntity says "The role with name X cannot be
            // found." too, so callers that read treat Consistency as NotFound (`is_not_found`).
            ErrorKind::Consistency
        }
        "NoSuchEntity" | "ResourceNotFoundException" | "NonExistentQueue" | "QueueDoesNotExist" | "NotFoundException" => {
            ErrorKind::NotFound
        }
        _ if c.ends_with(".NotFound") => ErrorKind::NotFound,
        "EntityAlreadyExists"
        | "QueueAlreadyExists"
        | "QueueNameExists"
        | "ResourceInUseException"
        | "ResourceAlreadyExistsException" => ErrorKind::AlreadyExists,
        // CreateServiceLinkedRole when the account has the role: "Service role name X has been
        // taken in this account".
        "InvalidInput" if message.contains("has been taken in this account") => ErrorKind::AlreadyExists,
        "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "TooManyRequestsException"
        | "RequestLimitExceeded"
        | "LimitExceededException"
        | "RequestThrottledException" => ErrorKind::Throttled,
        "ConcurrentModification" | "DeleteConflict" | "QueueDeletedRecently" => ErrorKind::Consistency,
        "InvalidParameterException"
            if message.contains("invalid principal")
                || message.contains("Role provided in the request does not exist")
                || message.contains("Trust policy of the role provided is invalid") =>
        {
            ErrorKind::Consistency
        }
        "InvalidAttributeValue" if message.contains("Invalid value for the parameter Policy") => ErrorKind::Consistency,
        "AccessDenied"
        | "AccessDeniedException"
        | "UnauthorizedOperation"
        | "AuthFailure"
        | "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "ExpiredToken"
        | "ExpiredTokenException" => ErrorKind::AccessDenied,
        "ValidationError"
        | "ValidationException"
        | "InvalidParameterException"
        | "InvalidParameterValue"
        | "InvalidParameterValueException"
        | "InvalidRequestException"
        | "MalformedPolicyDocument"
        | "InvalidInput"
        | "InvalidAttributeValue"
        | "InvalidAttributeName"
        | "LimitExceeded" => ErrorKind::Validation,
        _ => ErrorKind::Other,
    }
}

/// An AWS error as karpctl keeps it: the operation, AWS's code and message, and its class.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{operation}: {code}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
pub struct AwsError {
    pub operation: String,
    pub code: String,
    pub message: String,
    pub kind: ErrorKind,
}

/// Classification on any SDK error (or anything with AWS error metadata).
pub trait Classify {
    fn kind(&self) -> ErrorKind;
    /// Not found: the object is not there (a read's answer is `None`, a delete is done).
    fn is_not_found(&self) -> bool {
        matches!(self.kind(), ErrorKind::NotFound) || self.is_missing_role()
    }
    fn is_already_exists(&self) -> bool {
        self.kind() == ErrorKind::AlreadyExists
    }
    /// IAM's "The role with name X cannot be found": not found to a read, a consistency delay
    /// to a write that names a role just made.
    fn is_missing_role(&self) -> bool {
        false
    }
}

impl<E: ProvideErrorMetadata> Classify for E {
    fn kind(&self) -> ErrorKind {
        classify(self.code().unwrap_or(""), self.message().unwrap_or(""))
    }
    fn is_missing_role(&self) -> bool {
        self.code() == Some("NoSuchEntity") && self.message().unwrap_or("").contains("The role with name")
    }
}

/// The class of an error anywhere in an anyhow chain (`Other` when no AWS error is in it).
pub fn kind_of(e: &anyhow::Error) -> ErrorKind {
    e.chain().find_map(|c| c.downcast_ref::<AwsError>()).map(|a| a.kind).unwrap_or(ErrorKind::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_each_service_spelling() {
        assert_eq!(classify("NoSuchEntity", "The policy with arn x was not found"), ErrorKind::NotFound);
        assert_eq!(classify("ResourceNotFoundException", ""), ErrorKind::NotFound);
        assert_eq!(classify("AWS.SimpleQueueService.NonExistentQueue", ""), ErrorKind::NotFound);
        assert_eq!(classify("QueueDoesNotExist", ""), ErrorKind::NotFound);
        assert_eq!(classify("InvalidSubnetID.NotFound", ""), ErrorKind::NotFound);
        assert_eq!(classify("EntityAlreadyExists", ""), ErrorKind::AlreadyExists);
        assert_eq!(
            classify(
                "InvalidInput",
                "Service role name AWSServiceRoleForEC2Spot has been taken in this account, please try a different suffix."
            ),
            ErrorKind::AlreadyExists
        );
        assert_eq!(classify("InvalidInput", "bad"), ErrorKind::Validation);
        assert_eq!(classify("QueueAlreadyExists", ""), ErrorKind::AlreadyExists);
        assert_eq!(classify("ResourceInUseException", "Association already exists: a-1"), ErrorKind::AlreadyExists);
        assert_eq!(classify("RequestThrottled", ""), ErrorKind::Throttled);
        assert_eq!(classify("ThrottlingException", ""), ErrorKind::Throttled);
        assert_eq!(classify("AWS.SimpleQueueService.QueueDeletedRecently", ""), ErrorKind::Consistency);
        assert_eq!(
            classify("InvalidParameterException", "The specified principalArn is invalid: invalid principal"),
            ErrorKind::Consistency
        );
        assert_eq!(classify("InvalidParameterException", "Trust policy of the role provided is invalid"), ErrorKind::Consistency);
        assert_eq!(classify("InvalidParameterException", "something else"), ErrorKind::Validation);
        assert_eq!(classify("NoSuchEntity", "The role with name r cannot be found."), ErrorKind::Consistency);
        assert_eq!(classify("AccessDenied", "explicit deny"), ErrorKind::AccessDenied);
        assert_eq!(classify("MalformedPolicyDocument", "Invalid principal"), ErrorKind::Validation);
        assert_eq!(classify("Weird", ""), ErrorKind::Other);
    }

    #[test]
    fn the_kind_survives_anyhow_context() {
        let e = anyhow::Error::new(AwsError {
            operation: "iam:GetRole".into(),
            code: "NoSuchEntity".into(),
            message: "gone".into(),
            kind: ErrorKind::NotFound,
        })
        .context("reading the node role");
        assert_eq!(kind_of(&e), ErrorKind::NotFound);
        assert_eq!(kind_of(&anyhow::anyhow!("plain")), ErrorKind::Other);
    }
}
