//! Checks on how Karpenter's controller gets its credentials and what they allow: the role, its
//! permissions and trust, the Pod Identity agent and association. Each runs over a `Setup`;
//! the association's two judgements are public over the plain association.

use super::cluster::role_res;
use super::row::{DOCTOR, EVERY, Group, check};
use crate::facts::finding::{Checker, Code, Finding, Read, Severity};
use crate::facts::observed::Association;
use crate::facts::setup::{ControllerRole, Setup};
use crate::karpenter_iam::{self, ControllerPolicyInputs};
use crate::policy::analysis::{self, allows};
use crate::policy::doc::size_without_whitespace;
use crate::policy::doc::strings;
use crate::policy::doc::{glob, statements};
use crate::spec::IdentityMode;
use serde_json::Value;
use std::collections::BTreeSet;

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: controller_role,
        checks: &[check(
            Code::ControllerRoleNotFound,
            "Karpenter's controller role is found",
            &[Read::Cluster, Read::Controller],
            DOCTOR,
        )],
    },
    Group {
        run: permissions,
        checks: &[check(
            Code::ControllerMissingPermissions,
            "the controller role allows every action of Karpenter's permission set",
            &[Read::Controller, Read::KmsKey],
            DOCTOR,
        )],
    },
    Group {
        run: pass_role,
        checks: &[check(
            Code::ControllerPassroleUnscoped,
            "the controller may pass only the node roles",
            &[Read::Controller],
            DOCTOR,
        )],
    },
    Group {
        run: size_limit,
        checks: &[check(
            Code::PolicyNearSizeLimit,
            "the controller's customer managed policies have room under IAM's size limit",
            &[Read::Controller],
            DOCTOR,
        )],
    },
    Group {
        run: agent,
        checks: &[check(
            Code::PodIdentityAgentMissing,
            "the eks-pod-identity-agent add-on is installed (Pod Identity)",
            &[Read::Cluster, Read::PodIdentityAgent],
            DOCTOR,
        )],
    },
    Group {
        run: trust,
        checks: &[check(
            Code::ControllerTrustMismatch,
            "the controller role trusts Karpenter's service account",
            &[Read::Cluster, Read::Controller],
            DOCTOR,
        )],
    },
    Group {
        run: association,
        checks: &[
            check(
                Code::PodIdentitySessionTagsDisabled,
                "the Pod Identity association passes the session tags the role's trust requires",
                &[Read::Controller],
                EVERY,
            ),
            check(
                Code::PodIdentitySessionPolicy,
                "the Pod Identity association has no session policy cutting the role's permissions",
                &[Read::Controller],
                EVERY,
            ),
        ],
    },
];

/// IAM's limit on a managed policy, whitespace not counted.
pub const MANAGED_POLICY_LIMIT: usize = 6144;
/// A policy above this share of the limit leaves no room for the next release's statements.
pub const NEAR_LIMIT: usize = MANAGED_POLICY_LIMIT * 9 / 10;

/// The actions of karpctl's permission set for the setup's Karpenter version (the Interruption
/// part only with a queue; the opt-in ZonalShift part never).
pub fn required_actions(s: &Setup) -> BTreeSet<String> {
    let queue_arn = s.queue.as_ref().filter(|q| q.exists).map(|q| q.arn.as_str());
    let docs: Vec<Value> = karpenter_iam::controller_policies(&ControllerPolicyInputs {
        partition: &s.partition,
        region: &s.region,
        account_id: &s.account_id,
        cluster: &s.cluster,
        node_role_arn: "arn:aws:iam::111122223333:role/node",
        queue_arn,
        kms_key_arn: s.queue.as_ref().and_then(|q| q.kms_key_arn.as_deref()),
        zonal_shift: false,
        version: s.version,
    })
    .into_iter()
    .map(|(_, d)| d)
    .collect();
    analysis::actions_of(&docs)
}

/// The controller role the other controller checks judge: found, existing, and given to
/// Karpenter's pods (else `controller-role-not-found` says why, and they do not run).
fn usable(s: &Setup) -> Option<&ControllerRole> {
    s.controller.as_ref().filter(|r| r.exists && r.how != crate::facts::setup::UNASSOCIATED)
}

pub(super) fn controller_role(s: &Setup, c: &mut Checker) {
    c.ran(Code::ControllerRoleNotFound);
    let sa = format!("{}/{}", s.namespace, s.service_account);
    let Some(role) = s.controller.as_ref().filter(|r| r.exists) else {
        let (resource, message) = match &s.controller {
            Some(r) => (role_res(&r.name), format!("the controller role {} ({}) does not exist", r.name, r.how)),
            None => (format!("serviceaccount/{sa}"), format!("no controller role found for {sa}: {}", s.controller_searched)),
        };
        c.add(
            Code::ControllerRoleNotFound,
            Severity::Error,
            resource,
            message,
            format!(
                "give Karpenter's service account {sa} a role (a Pod Identity association, or an IRSA role trusting the cluster's OIDC provider), e.g. with `karpctl up --cluster {}`; or name it with --controller-role",
                s.cluster
            ),
        );
        return;
    };
    if role.how == crate::facts::setup::UNASSOCIATED {
        // The role is there, but nothing gives it to Karpenter's pods (the module v20's defaults).
        c.add(
            Code::ControllerRoleNotFound,
            Severity::Error,
            format!("serviceaccount/{sa}"),
            format!(
                "no Pod Identity association gives {sa} a role; {} is trusted by Pod Identity and names this cluster, but no association uses it",
                role.name
            ),
            format!(
                "associate it: `aws eks create-pod-identity-association --cluster-name {} --namespace {} --service-account {} --role-arn {}` (or `karpctl import` then `karpctl up --adopt`, which makes it)",
                s.cluster, s.namespace, s.service_account, role.arn
            ),
        );
    }
}

pub(super) fn permissions(s: &Setup, c: &mut Checker) {
    let Some(role) = usable(s) else { return };
    let docs: Vec<&Value> = role.policies.iter().filter_map(|p| p.document.as_ref()).collect();
    c.ran(Code::ControllerMissingPermissions);
    let missing: Vec<String> = required_actions(s).into_iter().filter(|a| !allows(&docs, a)).collect();
    if !missing.is_empty() {
        let unread: Vec<&str> = role.policies.iter().filter(|p| p.document.is_none()).map(|p| p.name.as_str()).collect();
        let unread = if unread.is_empty() { String::new() } else { format!(" (policies not readable: {})", unread.join(", ")) };
        c.add(
            Code::ControllerMissingPermissions,
            Severity::Error,
            role_res(&role.name),
            format!(
                "the controller role {} lacks {} action(s) of Karpenter {}'s permission set{unread}: {}",
                role.name,
                missing.len(),
                s.version,
                missing.join(", ")
            ),
            format!(
                "add them to the role's policies (Karpenter's CloudFormation/Terraform for v{} has them), or let karpctl manage the role: `karpctl diff --cluster {}` shows the policies; use --karpenter-version if Karpenter runs an older release",
                s.version, s.cluster
            ),
        );
    }
}

pub(super) fn pass_role(s: &Setup, c: &mut Checker) {
    let Some(role) = usable(s) else { return };
    let docs: Vec<&Value> = role.policies.iter().filter_map(|p| p.document.as_ref()).collect();
    c.ran(Code::ControllerPassroleUnscoped);
    let (_, unscoped) = analysis::pass_role(&docs);
    if unscoped {
        c.add(
            Code::ControllerPassroleUnscoped,
            Severity::Warning,
            role_res(&role.name),
            format!("the controller role {} may pass any role (iam:PassRole on *): a compromised controller can launch instances with any role of the account", role.name),
            "scope iam:PassRole to the node role ARN(s), with the condition iam:PassedToService = ec2.amazonaws.com".into(),
        );
    }
}

pub(super) fn size_limit(s: &Setup, c: &mut Checker) {
    let Some(role) = usable(s) else { return };
    c.ran(Code::PolicyNearSizeLimit);
    for p in role.policies.iter().filter(|p| p.customer_managed) {
        if let Some(d) = &p.document {
            let size = size_without_whitespace(d);
            if size > NEAR_LIMIT {
                c.add(
                    Code::PolicyNearSizeLimit,
                    Severity::Warning,
                    format!("policy/{}", p.name),
                    format!(
                        "policy {} is {size} of IAM's {MANAGED_POLICY_LIMIT} characters (whitespace excluded, over 90%): the next Karpenter release's statements may not fit",
                        p.name
                    ),
                    "split it as upstream Karpenter does since v1.9 (NodeLifecycle, IAMIntegration, EKSIntegration, Interruption, ResourceDiscovery); karpctl always does".into(),
                );
            }
        }
    }
}

pub(super) fn trust(s: &Setup, c: &mut Checker) {
    let Some(role) = usable(s) else { return };
    let sa = format!("{}/{}", s.namespace, s.service_account);
    c.ran(Code::ControllerTrustMismatch);
    if let (Some(trust), Some(hop)) = (&role.trust, &role.assumed_through) {
        // A target role: the association's role assumes it (sts:AssumeRole, from its ARN or its
        // account's root).
        let root = format!("arn:{}:iam::{}:root", s.partition, hop.split(':').nth(4).unwrap_or_default());
        let lets_in = statements(trust).iter().any(|st| {
            crate::policy::doc::is_allow(st)
                && crate::policy::doc::statement_takes(st, "sts:AssumeRole")
                && strings(&st["Principal"]["AWS"]).iter().any(|p| p == hop || *p == root || p == "*")
        });
        if !lets_in {
            c.add(
                Code::ControllerTrustMismatch,
                Severity::Error,
                role_res(&role.name),
                format!("the target role {}'s trust policy does not let the association's role {hop} use sts:AssumeRole: Karpenter gets no credentials", role.name),
                format!("let {hop} assume the target role (sts:AssumeRole and sts:TagSession) in its trust policy"),
            );
        }
    } else if let (Some(trust), Some(mode)) = (&role.trust, s.mode)
        && !trusts(trust, mode, &s.namespace, &s.service_account)
    {
        let want = match mode {
            IdentityMode::PodIdentity => {
                "the service principal pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession".to_string()
            }
            IdentityMode::Irsa => {
                format!("sts:AssumeRoleWithWebIdentity from the cluster's OIDC provider for system:serviceaccount:{sa}")
            }
        };
        c.add(
            Code::ControllerTrustMismatch,
            Severity::Error,
            role_res(&role.name),
            format!("the controller role {}'s trust policy does not allow {want}: Karpenter cannot assume it", role.name),
            "fix the role's trust policy (aws iam update-assume-role-policy)".into(),
        );
    }
}

/// The association's session tags and session policy (section 9.7), as doctor found them.
pub(super) fn association(s: &Setup, c: &mut Checker) {
    let Some(role) = usable(s) else { return };
    // The association's session tags and session policy (section 9.7). With a target role the
    // trust read is the target's, not that of the role EKS assumes with the tags: not judged.
    if let Some(a) = &role.association {
        if let (Some(trust), None) = (&role.trust, &role.assumed_through) {
            c.record(Code::PodIdentitySessionTagsDisabled, pod_identity_session_tags(a, trust));
        }
        c.record(Code::PodIdentitySessionPolicy, pod_identity_session_policy(a));
    }
}

pub(super) fn agent(s: &Setup, c: &mut Checker) {
    if usable(s).is_none() {
        return;
    }
    c.ran(Code::PodIdentityAgentMissing);
    if s.mode == Some(IdentityMode::PodIdentity) && !s.pod_identity_agent {
        c.add(
            Code::PodIdentityAgentMissing,
            Severity::Error,
            format!("addon/{}/eks-pod-identity-agent", s.cluster),
            "Karpenter gets its role through Pod Identity, but the eks-pod-identity-agent add-on is not installed: the controller has no credentials".into(),
            format!("aws eks create-addon --cluster-name {} --addon-name eks-pod-identity-agent", s.cluster),
        );
    }
}

/// Whether a trust policy lets Karpenter's service account assume the role in this mode.
pub fn trusts(trust: &Value, mode: IdentityMode, namespace: &str, service_account: &str) -> bool {
    let sub = format!("system:serviceaccount:{namespace}:{service_account}");
    statements(trust).iter().any(|st| {
        if !st["Effect"].as_str().is_some_and(|e| e.eq_ignore_ascii_case("allow")) {
            return false;
        }
        let actions = strings(&st["Action"]);
        let has = |a: &str| actions.iter().any(|p| glob(p, a));
        match mode {
            IdentityMode::PodIdentity => {
                strings(&st["Principal"]["Service"]).contains("pods.eks.amazonaws.com")
                    && has("sts:AssumeRole")
                    && has("sts:TagSession")
            }
            IdentityMode::Irsa => {
                !strings(&st["Principal"]["Federated"]).is_empty()
                    && has("sts:AssumeRoleWithWebIdentity")
                    && irsa_subject(st, &sub)
            }
        }
    })
}

/// Whether a statement's conditions admit the service account subject (`<issuer>:sub`).
pub fn irsa_subject(st: &Value, sub: &str) -> bool {
    let Some(cond) = st["Condition"].as_object() else { return true };
    let mut seen = false;
    for (op, kv) in cond {
        for (k, v) in kv.as_object().into_iter().flatten() {
            if k.ends_with(":sub") {
                seen = true;
                let like = op.contains("Like");
                if strings(v).iter().any(|p| if like { glob(p, sub) } else { p == sub }) {
                    return true;
                }
            }
        }
    }
    !seen
}

/// EKS Pod Identity's service principal, the one that assumes the controller role.
pub const PODS_PRINCIPAL: &str = "pods.eks.amazonaws.com";

/// The condition keys of a role's trust policy that only session tags satisfy: `aws:RequestTag/*`
/// or `aws:PrincipalTag/*` (not under an `...IfExists` operator, which passes without the tag; a
/// `Null` condition only when it requires the tag) in an Allow statement that lets EKS Pod
/// Identity (or everyone) use sts:AssumeRole or sts:TagSession. EKS passes `eks-cluster-arn`,
/// `eks-cluster-name`, `kubernetes-namespace`, `kubernetes-service-account` and the pod's tags
/// only with session tags on (docs/aws-behaviour.md section 9.7).
pub fn session_tag_conditions(trust: &serde_json::Value) -> Vec<String> {
    use crate::policy::doc::{is_allow, statement_takes, statements};
    let mut keys = std::collections::BTreeSet::new();
    for st in statements(trust) {
        let assumes = statement_takes(st, "sts:AssumeRole") || statement_takes(st, "sts:TagSession");
        if !is_allow(st) || !assumes || !super::kms::principal_names(st, "Service", &[PODS_PRINCIPAL]) {
            continue;
        }
        for (op, kv) in st["Condition"].as_object().into_iter().flatten() {
            if op.to_ascii_lowercase().ends_with("ifexists") {
                continue;
            }
            for (k, v) in kv.as_object().into_iter().flatten() {
                let key = k.to_ascii_lowercase();
                let tag = key.starts_with("aws:requesttag/") || key.starts_with("aws:principaltag/");
                let needs = !op.eq_ignore_ascii_case("Null") || crate::policy::doc::strings(v).contains("false");
                if tag && needs {
                    keys.insert(k.clone());
                }
            }
        }
    }
    keys.into_iter().collect()
}

/// An association with session tags off (`disableSessionTags`) serving a role whose trust needs
/// them: EKS's sts:AssumeRole carries no tags, the trust refuses it, and Karpenter gets no
/// credentials.
pub fn pod_identity_session_tags(a: &Association, trust: &serde_json::Value) -> Option<Finding> {
    if !a.disable_session_tags {
        return None;
    }
    let keys = session_tag_conditions(trust);
    (!keys.is_empty()).then(|| Finding {
        code: Code::PodIdentitySessionTagsDisabled,
        severity: Severity::Error,
        resource: a.resource(),
        message: format!(
            "{} has session tags turned off (disableSessionTags), but the trust policy of its role {} requires them ({}): EKS cannot assume the role, and Karpenter gets no credentials",
            a.label(),
            a.role_arn,
            keys.join(", ")
        ),
        fix: match a.session_policy.as_deref().filter(|p| !p.trim().is_empty()) {
            // A session policy needs session tags off: both go in one call.
            Some(_) => format!(
                "turn session tags back on and drop the session policy, which needs them off: {}; or drop those conditions from the role's trust policy",
                a.update_command("--no-disable-session-tags --policy ''")
            ),
            None => format!(
                "turn session tags back on: {}; or drop those conditions from the role's trust policy",
                a.update_command("--no-disable-session-tags")
            ),
        },
    })
}

/// An association's inline session policy: the credentials get only what both the role and that
/// policy allow, so it can refuse Karpenter actions the role grants.
pub fn pod_identity_session_policy(a: &Association) -> Option<Finding> {
    let policy = a.session_policy.as_deref().filter(|p| !p.trim().is_empty())?;
    let size = policy.chars().filter(|c| !c.is_whitespace()).count();
    Some(Finding {
        code: Code::PodIdentitySessionPolicy,
        severity: Severity::Warning,
        resource: a.resource(),
        message: format!(
            "{} carries a session policy ({size} characters): Karpenter's credentials get only what both the role {} and that policy allow, so actions the role grants can be refused",
            a.label(),
            a.role_arn
        ),
        fix: format!(
            "remove it ({}; karpctl up does so for an association it manages), or make sure it allows every action of Karpenter's permission set",
            a.update_command("--policy ''")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::111122223333:role/KarpenterController-c1";

    fn association(off: bool, policy: Option<&str>) -> Association {
        Association {
            cluster: "c1".into(),
            id: "a-123".into(),
            name: "kube-system/karpenter".into(),
            role_arn: ROLE.into(),
            disable_session_tags: off,
            session_policy: policy.map(str::to_string),
            owner_arn: None,
        }
    }

    fn karpctl_trust() -> serde_json::Value {
        crate::karpenter_iam::controller_trust_pod_identity(&crate::karpenter_iam::PodIdentityScope {
            cluster_arn: "arn:aws:eks:us-east-1:111122223333:cluster/c1",
            namespace: "kube-system",
            service_account: "karpenter",
        })
    }

    #[test]
    fn session_tags_off_with_a_trust_that_needs_them_is_an_error() {
        let c = pod_identity_session_tags(&association(true, None), &karpctl_trust()).expect("an error");
        assert_eq!((c.code, c.severity), (Code::PodIdentitySessionTagsDisabled, Severity::Error));
        assert!(
            c.message.contains("kube-system/karpenter") && c.message.contains("aws:RequestTag/eks-cluster-arn"),
            "{}",
            c.message
        );
        assert!(c.fix.contains("--no-disable-session-tags") && c.fix.contains("--association-id a-123"), "{}", c.fix);
        // Session tags on: nothing.
        assert_eq!(pod_identity_session_tags(&association(false, None), &karpctl_trust()), None);
        // Upstream's trust (no tag conditions) works without session tags.
        let upstream = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]});
        assert_eq!(pod_identity_session_tags(&association(true, None), &upstream), None);
        // PrincipalTag counts; an IfExists operator, a Null that forbids the tag, and another
        // principal's statement do not.
        let trust = |cond: serde_json::Value, principal: &str| {
            serde_json::json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": principal},
                "Action": "sts:AssumeRole", "Condition": cond}]})
        };
        let pods = PODS_PRINCIPAL;
        assert_eq!(
            session_tag_conditions(&trust(
                serde_json::json!({"StringEquals": {"aws:PrincipalTag/kubernetes-namespace": "kube-system"}}),
                pods
            )),
            ["aws:PrincipalTag/kubernetes-namespace"]
        );
        assert!(
            session_tag_conditions(&trust(
                serde_json::json!({"StringEqualsIfExists": {"aws:RequestTag/eks-cluster-name": "c1"}}),
                pods
            ))
            .is_empty()
        );
        assert!(session_tag_conditions(&trust(serde_json::json!({"Null": {"aws:RequestTag/x": "true"}}), pods)).is_empty());
        assert_eq!(
            session_tag_conditions(&trust(serde_json::json!({"Null": {"aws:RequestTag/x": "false"}}), pods)),
            ["aws:RequestTag/x"]
        );
        assert!(
            session_tag_conditions(&trust(serde_json::json!({"StringEquals": {"aws:RequestTag/x": "y"}}), "ec2.amazonaws.com"))
                .is_empty()
        );
        // An add-on's association: the fix goes through the add-on.
        let mut addon = association(true, None);
        addon.owner_arn = Some("arn:aws:eks:us-east-1:111122223333:addon/c1/karpenter/x".into());
        let c = pod_identity_session_tags(&addon, &karpctl_trust()).unwrap();
        assert!(c.fix.contains("update-addon") && c.fix.contains("addon/c1/karpenter/x"), "{}", c.fix);
    }

    #[test]
    fn a_session_policy_is_a_warning_naming_the_association() {
        assert_eq!(pod_identity_session_policy(&association(true, None)), None);
        assert_eq!(pod_identity_session_policy(&association(true, Some(""))), None);
        let c = pod_identity_session_policy(&association(true, Some(r#"{"Version":"2012-10-17","Statement":[]}"#))).unwrap();
        assert_eq!((c.code, c.severity), (Code::PodIdentitySessionPolicy, Severity::Warning));
        assert!(c.message.contains("EKS Pod Identity association kube-system/karpenter (a-123)"), "{}", c.message);
        assert!(c.fix.contains("--policy ''"), "{}", c.fix);
    }
}
