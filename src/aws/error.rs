//! The one AWS error type and its classifier: every AWS error code and message fragment karpctl
//! decides on, as classes ([`ErrorKind`]) and named conditions ([`Condition`]), asked through
//! [`Classify`]. The conditions an operation retries sit with it in its resource file.

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
    /// A service quota is full (EventBridge rules per bus or targets per rule, a KMS resource
    /// quota): retrying cannot help until the quota is raised or room is made. Never throttling
    /// (see [`quota_not_throttling`]).
    Quota,
    Other,
}

/// SQS answers with either spelling of its codes (the SDK's typed errors use the legacy one).
fn sqs(code: &str) -> &str {
    code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code)
}

// The message fragments that tell apart what one code means.

/// IAM NoSuchEntity about a role: "The role with name X cannot be found."
const ROLE_WITH_NAME: &str = "The role with name";
const CANNOT_BE_FOUND: &str = "cannot be found";
/// IAM NoSuchEntity of AddRoleToInstanceProfile about the profile: "Instance Profile X cannot be found."
const INSTANCE_PROFILE: &str = "Instance Profile";
/// The answer for an instance profile IAM has not replicated yet (InvalidParameterValue).
const INSTANCE_PROFILE_NAME_INVALID: &str = "Invalid IAM Instance Profile name";
/// IAM CreateServiceLinkedRole when the account has the role (InvalidInput).
const NAME_TAKEN: &str = "has been taken in this account";
/// EKS CreateAccessEntry for a role EKS does not see yet (InvalidParameterException).
const EKS_INVALID_PRINCIPAL: &str = "The specified principalArn is invalid: invalid principal";
/// EKS Create/UpdatePodIdentityAssociation for a role EKS does not see yet (InvalidParameterException).
const EKS_ROLE_MISSING: &str = "Role provided in the request does not exist";
/// EKS Create/UpdatePodIdentityAssociation when the role's trust policy does not let EKS in, as
/// EKS sees it (InvalidParameterException).
const EKS_TRUST_INVALID: &str = "Trust policy of the role provided is invalid";
/// EKS access-entry calls on a CONFIG_MAP cluster (InvalidRequestException): "The cluster's
/// authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation."
const EKS_AUTHENTICATION_MODE: &str = "authentication mode";
/// EventBridge DeleteRule while it still sees targets (ValidationException): "Rule can't be
/// deleted since it has targets."
const RULE_HAS_TARGETS: &str = "has targets";
/// SQS SetQueueAttributes(Policy) naming what SQS cannot resolve yet (InvalidAttributeValue).
const QUEUE_POLICY_INVALID: &str = "Invalid value for the parameter Policy";

/// A specific answer of an AWS API that karpctl acts on (retries it, takes it as done, or explains
/// it): a code and, where one code means several things, a message fragment; SQS codes match in
/// both spellings. Callers ask [`Classify`] (`e.is_resource_in_use()`, `e.is(Condition::X)`) and
/// never compare codes or message text themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// IAM AttachRolePolicy, DetachRolePolicy, DeleteRole: `ConcurrentModification`, another
    /// change to the same role is in flight (a concurrent run, or IAM still applying ours).
    ConcurrentModification,
    /// IAM DeleteRole and DeletePolicy: `DeleteConflict`, IAM still sees something attached (a
    /// detach that has not propagated yet, or a concurrent run that attached or versioned again).
    DeleteConflict,
    /// IAM CreatePolicyVersion: `LimitExceeded`, the policy already has the five versions IAM
    /// keeps (another run added one between karpctl's prune and its create: prune again).
    PolicyVersionLimit,
    /// IAM: `NoSuchEntity` "The role with name X cannot be found.". To a read the role is not
    /// there; to AttachRolePolicy or AddRoleToInstanceProfile right after CreateRole, IAM has not
    /// replicated it yet.
    MissingRole,
    /// IAM AttachRolePolicy: `NoSuchEntity` about anything but the role, that is the policy
    /// ("Policy arn:... does not exist or is not attachable."): right after CreatePolicy IAM has
    /// not replicated it yet; otherwise the ARN is wrong.
    MissingPolicy,
    /// IAM AddRoleToInstanceProfile right after CreateInstanceProfile: `NoSuchEntity` "Instance
    /// Profile X cannot be found.", not replicated yet.
    MissingInstanceProfile,
    /// `InvalidParameterValue` "Invalid IAM Instance Profile name": an instance profile made a
    /// moment ago, not replicated yet (retried on AddRoleToInstanceProfile).
    InstanceProfileNotYetValid,
    /// EKS CreateAccessEntry right after CreateRole: `InvalidParameterException` "The specified
    /// principalArn is invalid: invalid principal", EKS does not see the role yet.
    PrincipalNotYetVisible,
    /// EKS Create/UpdatePodIdentityAssociation right after CreateRole: `InvalidParameterException`
    /// "Role provided in the request does not exist", EKS does not see the role yet.
    RoleNotYetVisible,
    /// EKS Create/UpdatePodIdentityAssociation: `InvalidParameterException` "Trust policy of the
    /// role provided is invalid". Right after CreateRole or UpdateAssumeRolePolicy it is
    /// propagation (EKS still sees the old trust); otherwise the trust policy is wrong.
    TrustPolicyRefused,
    /// EKS CreateAddon, CreateAccessEntry, CreatePodIdentityAssociation: 409
    /// `ResourceInUseException`, the object exists already; right after DeleteAccessEntry of the
    /// same principal, EKS still holds the old entry.
    ResourceInUse,
    /// EKS access-entry calls (Describe/List/CreateAccessEntry) on a cluster in `CONFIG_MAP`
    /// authentication mode: `InvalidRequestException` "The cluster's authentication mode must be
    /// set to one of [API, API_AND_CONFIG_MAP] ...". The cluster has no access entries and can
    /// hold none until its mode changes.
    ConfigMapOnly,
    /// EKS: any `InvalidRequestException`, "the request is invalid given the state of the
    /// cluster". ListAccessEntries answers it on a CONFIG_MAP cluster (see [`Self::ConfigMapOnly`]
    /// for that message); doctor takes any such answer as "no access entries".
    InvalidForClusterState,
    /// EventBridge DeleteRule right after RemoveTargets: `ValidationException` "Rule can't be
    /// deleted since it has targets.", for up to five minutes.
    RuleHasTargets,
    /// SQS CreateQueue within about 60 s of DeleteQueue of the name: `QueueDeletedRecently`.
    QueueDeletedRecently,
    /// SQS: `NonExistentQueue` / `QueueDoesNotExist`. The queue is gone; or it was made a moment
    /// ago and SQS does not have it everywhere yet (section 9.1).
    MissingQueue,
    /// SQS SetQueueAttributes(Policy): `InvalidAttributeValue` "Invalid value for the parameter
    /// Policy", for a policy naming what SQS cannot resolve yet (propagation).
    QueuePolicyNotYetValid,
    /// KMS: `NotFoundException`. Right after CreateKey, CreateAlias, DescribeKey and EnableKey
    /// can answer it for a key (or an alias) that exists: KMS has not propagated it yet (KMS
    /// developer guide, "eventual consistency"). Otherwise the key or alias is not there.
    KmsNotFound,
    /// KMS: `KMSInvalidStateException`, the key's state does not allow the call. Right after
    /// CreateKey or CancelKeyDeletion it is propagation (KMS still sees the key being made, or
    /// pending deletion); otherwise the state is what it says (a key pending deletion).
    KmsInvalidState,
    /// SQS CreateQueue: `QueueAlreadyExists` / `QueueNameExists`, a queue of that name exists with
    /// other attributes.
    QueueNameTaken,
    /// EC2 DeleteTags: `InvalidID`, the resource ID is not valid (the resource is gone).
    InvalidResourceId,
    /// A create that carries tags, refused because the partition cannot tag on create (the ISO
    /// partitions): `UnsupportedOperation`, `InvalidAction`, `UnknownOperationException`,
    /// `OperationNotPermitted`, or `InvalidParameterValue` naming tags. Terraform's AWS provider
    /// creates without tags and tags afterwards on the same answers (outside the `aws` partition
    /// only, as karpctl does: in `aws` they mean what they say).
    TagOnCreateUnsupported,
}

impl Condition {
    /// Whether an error of this code and message is this condition.
    fn matches(self, code: &str, message: &str) -> bool {
        let (code, has) = (sqs(code), |fragment: &str| message.contains(fragment));
        match self {
            Condition::ConcurrentModification => code == "ConcurrentModification",
            Condition::DeleteConflict => code == "DeleteConflict",
            Condition::PolicyVersionLimit => code == "LimitExceeded",
            Condition::MissingRole => code == "NoSuchEntity" && has(ROLE_WITH_NAME),
            Condition::MissingPolicy => code == "NoSuchEntity" && !has(ROLE_WITH_NAME),
            Condition::MissingInstanceProfile => code == "NoSuchEntity" && has(INSTANCE_PROFILE),
            Condition::InstanceProfileNotYetValid => code == "InvalidParameterValue" && has(INSTANCE_PROFILE_NAME_INVALID),
            Condition::PrincipalNotYetVisible => code == "InvalidParameterException" && has(EKS_INVALID_PRINCIPAL),
            Condition::RoleNotYetVisible => code == "InvalidParameterException" && has(EKS_ROLE_MISSING),
            Condition::TrustPolicyRefused => code == "InvalidParameterException" && has(EKS_TRUST_INVALID),
            Condition::ResourceInUse => code == "ResourceInUseException",
            Condition::ConfigMapOnly => code == "InvalidRequestException" && has(EKS_AUTHENTICATION_MODE),
            Condition::InvalidForClusterState => code == "InvalidRequestException",
            Condition::RuleHasTargets => code == "ValidationException" && has(RULE_HAS_TARGETS),
            Condition::QueueDeletedRecently => code == "QueueDeletedRecently",
            Condition::MissingQueue => matches!(code, "NonExistentQueue" | "QueueDoesNotExist"),
            Condition::QueuePolicyNotYetValid => code == "InvalidAttributeValue" && has(QUEUE_POLICY_INVALID),
            Condition::KmsNotFound => code == "NotFoundException",
            Condition::KmsInvalidState => code == "KMSInvalidStateException",
            Condition::QueueNameTaken => matches!(code, "QueueAlreadyExists" | "QueueNameExists"),
            Condition::InvalidResourceId => code == "InvalidID",
            Condition::TagOnCreateUnsupported => {
                matches!(code, "UnsupportedOperation" | "InvalidAction" | "UnknownOperationException" | "OperationNotPermitted")
                    || (code == "InvalidParameterValue" && (has("tag") || has("Tag")))
            }
        }
    }
}

/// The code EventBridge and KMS answer when a resource quota is full: EventBridge PutRule (rules
/// per event bus), PutTargets (targets per rule); KMS CreateKey (keys per Region), CreateAlias
/// (aliases per key). Both services throttle with `ThrottlingException` instead. IAM's quota
/// answer is `LimitExceeded` ([`Condition::PolicyVersionLimit`] for policy versions).
const QUOTA_CODE: &str = "LimitExceededException";

/// The services (signing names) whose `LimitExceededException` is a quota, not throttling.
const QUOTA_SERVICES: &[&str] = &["events", "kms"];

/// Whether an answer of `service` with `code` is a full quota although the SDK's standard retry
/// classifier lists the code among throttling codes (it does so for services where the code
/// means a request rate). Such an answer fails at once: no retry, no cut of the pace, not
/// counted as throttling (`throttle::QuotaIsNotThrottling`).
pub fn quota_not_throttling(service: &str, code: &str) -> bool {
    code == QUOTA_CODE && QUOTA_SERVICES.contains(&service)
}

/// How to raise an adjustable quota of `service_code` (the Service Quotas service code).
fn raise(service_code: &str, console: &str) -> String {
    format!(
        "raise it in Service Quotas ({console}; `aws service-quotas request-service-quota-increase --service-code {service_code} --quota-code <code> --desired-value <n>`, the codes from `aws service-quotas list-service-quotas --service-code {service_code}`)"
    )
}

/// Which quota an operation answered `LimitExceededException` for, and what to do: named for
/// the calls karpctl makes, AWS's message otherwise. Sources: EventBridge quotas and the
/// PutTargets reference (300 rules per event bus, 5 targets per rule); KMS resource quotas
/// (100,000 keys per Region, whatever their state; 50 aliases per key; all adjustable).
pub fn quota_advice(operation: &str) -> String {
    match operation {
        "events:PutRule" => format!(
            "EventBridge's quota of rules per event bus (300 by default) is full: {} and set KARPCTL_RULES_PER_BUS to it, or use interruption.rules = \"merged\" (one rule per cluster instead of one per event kind)",
            raise("events", "Amazon EventBridge")
        ),
        "events:PutTargets" => "the rule has the 5 targets EventBridge allows per rule by default: something else added targets to it; list them with `aws events list-targets-by-rule --rule <name>` and remove one that is not karpctl's, or see in Service Quotas (Amazon EventBridge) whether the account can raise the quota".to_string(),
        "kms:CreateKey" => format!(
            "the account's quota of KMS keys in this Region (100,000 by default, keys pending deletion included) is full: {}",
            raise("kms", "AWS Key Management Service")
        ),
        "kms:CreateAlias" => format!("the key has the 50 aliases KMS allows per key by default: {}", raise("kms", "AWS Key Management Service")),
        _ => "a service quota is full (AWS's message names it): raise it in Service Quotas (`aws service-quotas request-service-quota-increase`)".to_string(),
    }
}

/// What an AWS error code (and, where one code means two things, its message) says.
pub fn classify(code: &str, message: &str) -> ErrorKind {
    let is = |c: Condition| c.matches(code, message);
    let c = sqs(code);
    match c {
        "NoSuchEntity" if is(Condition::MissingRole) && message.contains(CANNOT_BE_FOUND) => {
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
        "InvalidInput" if message.contains(NAME_TAKEN) => ErrorKind::AlreadyExists,
        "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "TooManyRequestsException"
        | "RequestLimitExceeded"
        | "RequestThrottledException" => ErrorKind::Throttled,
        // EventBridge and KMS: a quota is full (the SDK lists the code among throttling codes).
        QUOTA_CODE => ErrorKind::Quota,
        "ConcurrentModification" | "DeleteConflict" | "QueueDeletedRecently" => ErrorKind::Consistency,
        "InvalidParameterException"
            if is(Condition::PrincipalNotYetVisible) || is(Condition::RoleNotYetVisible) || is(Condition::TrustPolicyRefused) =>
        {
            ErrorKind::Consistency
        }
        "InvalidAttributeValue" if is(Condition::QueuePolicyNotYetValid) => ErrorKind::Consistency,
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
#[error("{operation}: {code}{}{}",
    if message.is_empty() { String::new() } else { format!(": {message}") },
    if *kind == ErrorKind::Quota { format!(" ({}; retrying cannot help)", quota_advice(operation)) } else { String::new() })]
pub struct AwsError {
    pub operation: String,
    pub code: String,
    pub message: String,
    pub kind: ErrorKind,
}

/// The code and message of an error, for the classifier only: the trait cannot be named outside
/// this module, so no caller compares them itself (`aws::with_consistency` reports the code
/// through a `Classify` bound).
mod raw {
    pub trait Raw {
        /// AWS's error code ("" when the service sent none).
        fn raw_code(&self) -> &str;
        /// AWS's error message ("" when none).
        fn raw_message(&self) -> &str;
    }
}

impl<E: ProvideErrorMetadata> raw::Raw for E {
    fn raw_code(&self) -> &str {
        self.code().unwrap_or("")
    }
    fn raw_message(&self) -> &str {
        self.message().unwrap_or("")
    }
}

impl raw::Raw for AwsError {
    fn raw_code(&self) -> &str {
        &self.code
    }
    fn raw_message(&self) -> &str {
        &self.message
    }
}

/// The one classifier, on any SDK error (anything with AWS error metadata) and on an
/// [`AwsError`] (see [`aws_error_in`] for one inside an anyhow chain): the class of an error and
/// the named [`Condition`]s.
pub trait Classify: raw::Raw {
    fn kind(&self) -> ErrorKind {
        classify(self.raw_code(), self.raw_message())
    }
    /// Whether the error is this condition.
    fn is(&self, c: Condition) -> bool {
        c.matches(self.raw_code(), self.raw_message())
    }
    /// Whether the error is one of these conditions (an empty list: never).
    fn is_any(&self, conditions: &[Condition]) -> bool {
        conditions.iter().any(|c| self.is(*c))
    }
    /// Not found: the object is not there (a read's answer is `None`, a delete is done).
    fn is_not_found(&self) -> bool {
        matches!(self.kind(), ErrorKind::NotFound) || self.is_missing_role()
    }
    fn is_already_exists(&self) -> bool {
        self.kind() == ErrorKind::AlreadyExists
    }
    /// Bad input by AWS's answer ([`ErrorKind::Validation`]): retrying the same call cannot help.
    fn is_invalid_input(&self) -> bool {
        self.kind() == ErrorKind::Validation
    }
    /// [`Condition::MissingRole`]: not found to a read, a consistency delay to a write that names
    /// a role just made.
    fn is_missing_role(&self) -> bool {
        self.is(Condition::MissingRole)
    }
    /// [`Condition::MissingPolicy`].
    fn is_missing_policy(&self) -> bool {
        self.is(Condition::MissingPolicy)
    }
    /// [`Condition::TrustPolicyRefused`].
    fn is_trust_policy_refused(&self) -> bool {
        self.is(Condition::TrustPolicyRefused)
    }
    /// [`Condition::ResourceInUse`].
    fn is_resource_in_use(&self) -> bool {
        self.is(Condition::ResourceInUse)
    }
    /// [`Condition::ConfigMapOnly`].
    fn is_config_map_only(&self) -> bool {
        self.is(Condition::ConfigMapOnly)
    }
    /// [`Condition::InvalidForClusterState`].
    fn is_invalid_for_cluster_state(&self) -> bool {
        self.is(Condition::InvalidForClusterState)
    }
    /// [`Condition::MissingQueue`].
    fn is_missing_queue(&self) -> bool {
        self.is(Condition::MissingQueue)
    }
    /// [`Condition::QueueNameTaken`].
    fn is_queue_name_taken(&self) -> bool {
        self.is(Condition::QueueNameTaken)
    }
    /// [`Condition::InvalidResourceId`].
    fn is_invalid_resource_id(&self) -> bool {
        self.is(Condition::InvalidResourceId)
    }
}

impl<T: raw::Raw + ?Sized> Classify for T {}

/// The AWS error anywhere in an anyhow chain (None when there is none).
pub fn aws_error_in(e: &anyhow::Error) -> Option<&AwsError> {
    e.chain().find_map(|c| c.downcast_ref::<AwsError>())
}

/// The AWS refusal (AccessDenied, AccessDeniedException, UnauthorizedOperation, ...) anywhere in
/// an anyhow chain: what doctor reports as unreadable and preflight as a skipped check.
pub fn refusal_in(e: &anyhow::Error) -> Option<&AwsError> {
    aws_error_in(e).filter(|a| a.kind == ErrorKind::AccessDenied)
}

/// Whether an anyhow chain holds an AWS refusal.
pub fn is_refused(e: &anyhow::Error) -> bool {
    refusal_in(e).is_some()
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
    fn a_full_quota_is_not_throttling_and_says_which_quota_and_how_to_raise_it() {
        assert_eq!(
            classify("LimitExceededException", "The requested resource exceeds the maximum number allowed."),
            ErrorKind::Quota
        );
        // IAM's own spelling stays what it was (policy versions: PolicyVersionLimit).
        assert_eq!(classify("LimitExceeded", "A managed policy can have up to 5 versions."), ErrorKind::Validation);
        assert!(err("LimitExceeded", "").is(Condition::PolicyVersionLimit));
        assert!(!err("LimitExceededException", "").is(Condition::PolicyVersionLimit));
        for service in ["events", "kms"] {
            assert!(quota_not_throttling(service, "LimitExceededException"), "{service}");
            assert!(!quota_not_throttling(service, "ThrottlingException"), "{service} throttles with ThrottlingException");
        }
        assert!(!quota_not_throttling("iam", "LimitExceededException"), "only where the code is a quota");
        let rules = AwsError {
            operation: "events:PutRule".into(),
            code: "LimitExceededException".into(),
            message: "The requested resource exceeds the maximum number allowed.".into(),
            kind: ErrorKind::Quota,
        }
        .to_string();
        for needle in
            ["rules per event bus", "Service Quotas", "request-service-quota-increase", "KARPCTL_RULES_PER_BUS", "merged"]
        {
            assert!(rules.contains(needle), "{needle}: {rules}");
        }
        assert!(quota_advice("events:PutTargets").contains("targets") && quota_advice("kms:CreateKey").contains("KMS keys"));
        assert!(quota_advice("kms:CreateAlias").contains("aliases"));
        assert!(!err("AccessDenied", "x").to_string().contains("Service Quotas"), "only a quota says so");
    }

    fn err(code: &str, message: &str) -> AwsError {
        AwsError { operation: "op".into(), code: code.into(), message: message.into(), kind: classify(code, message) }
    }

    /// Each condition on the answers of its API (the messages as AWS words them), and not on its
    /// code with another message or on another code.
    #[test]
    fn each_condition_is_its_code_and_message() {
        use Condition::*;
        let cases: [(Condition, &str, &str); 23] = [
            (ConcurrentModification, "ConcurrentModification", "Rate exceeded for this role"),
            (DeleteConflict, "DeleteConflict", "Cannot delete entity, must detach all policies first."),
            (PolicyVersionLimit, "LimitExceeded", "A managed policy can have up to 5 versions."),
            (MissingRole, "NoSuchEntity", "The role with name KarpenterNodeRole-c cannot be found."),
            (MissingPolicy, "NoSuchEntity", "Policy arn:aws:iam::aws:policy/X does not exist or is not attachable."),
            (MissingInstanceProfile, "NoSuchEntity", "Instance Profile KarpenterNodeInstanceProfile-c cannot be found."),
            (InstanceProfileNotYetValid, "InvalidParameterValue", "Invalid IAM Instance Profile name"),
            (PrincipalNotYetVisible, "InvalidParameterException", "The specified principalArn is invalid: invalid principal"),
            (RoleNotYetVisible, "InvalidParameterException", "Role provided in the request does not exist"),
            (TrustPolicyRefused, "InvalidParameterException", "Trust policy of the role provided is invalid"),
            (ResourceInUse, "ResourceInUseException", "Association already exists: a-1"),
            (
                ConfigMapOnly,
                "InvalidRequestException",
                "The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this operation.",
            ),
            (InvalidForClusterState, "InvalidRequestException", "The cluster is not ACTIVE"),
            (RuleHasTargets, "ValidationException", "Rule can't be deleted since it has targets."),
            (QueueDeletedRecently, "AWS.SimpleQueueService.QueueDeletedRecently", "You must wait 60 seconds"),
            (MissingQueue, "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."),
            (QueuePolicyNotYetValid, "InvalidAttributeValue", "Invalid value for the parameter Policy."),
            (KmsNotFound, "NotFoundException", "Key 'arn:aws:kms:us-east-1:111122223333:key/k' does not exist"),
            (KmsInvalidState, "KMSInvalidStateException", "arn:aws:kms:us-east-1:111122223333:key/k is pending deletion."),
            (QueueNameTaken, "QueueAlreadyExists", "A queue already exists with the same name"),
            (InvalidResourceId, "InvalidID", "The ID 'subnet-x' is not valid"),
            (TagOnCreateUnsupported, "AWS.SimpleQueueService.UnsupportedOperation", "Tagging on create is not supported"),
            (TagOnCreateUnsupported, "InvalidParameterValue", "Tags are not supported in this partition"),
        ];
        for (c, code, message) in cases {
            assert!(err(code, message).is(c), "{c:?}: {code}: {message}");
            assert!(!err("SomethingElse", message).is(c), "{c:?} needs its code");
        }
        // Where a code means several things, the message decides.
        for (c, code) in [
            (MissingRole, "NoSuchEntity"),
            (MissingInstanceProfile, "NoSuchEntity"),
            (InstanceProfileNotYetValid, "InvalidParameterValue"),
            (PrincipalNotYetVisible, "InvalidParameterException"),
            (RoleNotYetVisible, "InvalidParameterException"),
            (TrustPolicyRefused, "InvalidParameterException"),
            (ConfigMapOnly, "InvalidRequestException"),
            (RuleHasTargets, "ValidationException"),
            (QueuePolicyNotYetValid, "InvalidAttributeValue"),
            (TagOnCreateUnsupported, "InvalidParameterValue"),
        ] {
            assert!(!err(code, "something else").is(c), "{c:?}");
        }
        assert!(!err("NoSuchEntity", "The role with name r cannot be found.").is(MissingPolicy), "the role is not the policy");
        assert!(err("NoSuchEntity", "").is(MissingPolicy));
        // SQS's two spellings.
        for code in ["QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently"] {
            assert!(err(code, "").is(QueueDeletedRecently), "{code}");
        }
        for code in ["NonExistentQueue", "QueueDoesNotExist", "AWS.SimpleQueueService.QueueDoesNotExist"] {
            assert!(err(code, "").is(MissingQueue), "{code}");
        }
        assert!(
            err("AWS.SimpleQueueService.InvalidAttributeValue", "Invalid value for the parameter Policy")
                .is(QueuePolicyNotYetValid)
        );
        assert!(err("QueueNameExists", "").is(QueueNameTaken));
    }

    #[test]
    fn named_predicates_ask_their_condition() {
        let in_use = err("ResourceInUseException", "The specified access entry resource is already in use on this cluster.");
        assert!(in_use.is_resource_in_use() && in_use.is_already_exists());
        assert!(!err("EntityAlreadyExists", "").is_resource_in_use());
        let config_map = err("InvalidRequestException", "The cluster's authentication mode must be set to one of [API]");
        assert!(config_map.is_config_map_only() && config_map.is_invalid_for_cluster_state());
        let other_state = err("InvalidRequestException", "The cluster is CREATING");
        assert!(!other_state.is_config_map_only() && other_state.is_invalid_for_cluster_state());
        assert!(err("InvalidParameterException", "Trust policy of the role provided is invalid").is_trust_policy_refused());
        assert!(!err("InvalidParameterException", "Role provided in the request does not exist").is_trust_policy_refused());
        let policy = err("NoSuchEntity", "Policy arn:aws:iam::aws:policy/X does not exist or is not attachable.");
        assert!(policy.is_missing_policy() && !policy.is_missing_role() && policy.is_not_found());
        let role = err("NoSuchEntity", "The role with name r cannot be found.");
        assert!(role.is_missing_role() && !role.is_missing_policy() && role.is_not_found());
        assert!(err("AWS.SimpleQueueService.NonExistentQueue", "").is_missing_queue());
        assert!(!err("NoSuchEntity", "").is_missing_queue());
        assert!(err("QueueNameExists", "").is_queue_name_taken());
        assert!(err("InvalidID", "The ID 'sg-1' is not valid").is_invalid_resource_id());
        assert!(!err("InvalidGroup.NotFound", "").is_invalid_resource_id());
        // Bad input, as the classifier has it: an InvalidParameterException that is propagation is not.
        assert!(err("InvalidParameterException", "the session policy may not be empty").is_invalid_input());
        assert!(!err("InvalidParameterException", "Role provided in the request does not exist").is_invalid_input());
        assert!(!err("ThrottlingException", "").is_invalid_input());
    }

    #[test]
    fn a_retry_list_matches_any_of_its_conditions_and_an_empty_one_nothing() {
        let l = [Condition::PrincipalNotYetVisible, Condition::ResourceInUse];
        assert!(err("InvalidParameterException", "The specified principalArn is invalid: invalid principal").is_any(&l));
        assert!(err("ResourceInUseException", "").is_any(&l));
        assert!(!err("InvalidParameterException", "something else").is_any(&l));
        assert!(!err("AccessDenied", "invalid principal").is_any(&l));
        assert!(!err("ResourceInUseException", "").is_any(&[]));
    }

    #[test]
    fn an_aws_error_is_found_in_an_anyhow_chain() {
        let e = anyhow::Error::new(err("AWS.SimpleQueueService.NonExistentQueue", "gone")).context("reading the queue");
        assert!(aws_error_in(&e).is_some_and(|a| a.is_missing_queue()));
        assert!(aws_error_in(&anyhow::anyhow!("NonExistentQueue")).is_none(), "text is not an AWS error");
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
        assert_eq!(aws_error_in(&e).map(|a| a.kind), Some(ErrorKind::NotFound));
        assert!(aws_error_in(&anyhow::anyhow!("plain")).is_none());
        assert!(!is_refused(&e));
        let denied = anyhow::Error::new(AwsError {
            operation: "kms:GetKeyPolicy".into(),
            code: "AccessDeniedException".into(),
            message: String::new(),
            kind: ErrorKind::AccessDenied,
        })
        .context("reading the key policy");
        assert_eq!(refusal_in(&denied).map(|a| a.operation.as_str()), Some("kms:GetKeyPolicy"));
    }
}
