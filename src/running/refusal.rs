//! Calls AWS refused, grouped by action and by the kind of policy that refused them (read from
//! AWS's fixed phrases in `errorMessage`), each kind with its fix; docs/aws-behaviour.md, "What
//! AWS records of the Karpenter that runs".

use super::record::{Call, action_in_message, encoded_in_message, resource_in_message};
use std::collections::BTreeMap;
use std::fmt;

/// The error codes of a refused call.
pub const REFUSAL_CODES: [&str; 4] =
    ["AccessDenied", "AccessDeniedException", "Client.UnauthorizedOperation", "UnauthorizedOperation"];

/// Whether a call was refused for want of permission.
pub fn is_refused(call: &Call) -> bool {
    call.error_code.as_deref().is_some_and(|c| REFUSAL_CODES.contains(&c))
}

/// One refusal: a refused call, or a launch refused inside a fleet that succeeded.
struct Refused<'a> {
    call: &'a Call,
    code: &'a str,
    message: &'a str,
    resource: Option<String>,
    /// Inside a fleet: the launch's `spot`/`on-demand` and instance type.
    fleet: Option<(Option<&'a str>, Option<&'a str>)>,
}

/// The refusals a call records: its own, and each refused launch of its `errorSet`.
fn refused_in(c: &Call) -> impl Iterator<Item = Refused<'_>> {
    let own = is_refused(c).then(|| Refused {
        call: c,
        code: c.error_code.as_deref().unwrap_or(""),
        message: c.error_message.as_deref().unwrap_or(""),
        resource: c.resource.clone(),
        fleet: None,
    });
    let inside = c.fleet_errors.iter().filter(|e| REFUSAL_CODES.contains(&e.code.as_str())).map(move |e| Refused {
        call: c,
        code: &e.code,
        message: &e.message,
        resource: resource_in_message(&e.message),
        fleet: Some((e.lifecycle.as_deref(), e.instance_type.as_deref())),
    });
    own.into_iter().chain(inside)
}

/// Which kind of policy refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusalKind {
    /// A service control policy of the organization (an explicit deny, or no SCP allows it).
    Scp,
    /// A resource control policy of the organization.
    Rcp,
    /// The role's permissions boundary (an explicit deny, or the boundary does not allow it).
    PermissionsBoundary,
    /// A session policy passed when the credentials were made (a Pod Identity association's
    /// `policy`, AssumeRole's `Policy`/`PolicyArns`).
    SessionPolicy,
    /// No policy of the role allows the action.
    NoIdentityPolicy,
    /// A policy of the role denies it.
    IdentityPolicyDeny,
    /// The resource's own policy (a key policy, a queue policy).
    ResourcePolicy,
    /// A VPC endpoint's policy.
    VpcEndpointPolicy,
    /// The message does not say (EC2's plain "You are not authorized to perform this operation").
    Unknown,
}

impl RefusalKind {
    /// AWS's phrases, most specific first (each kind has an explicit-deny and an implicit form).
    const PHRASES: [(&'static str, RefusalKind); 14] = [
        ("explicit deny in a service control policy", RefusalKind::Scp),
        ("no service control policy allows", RefusalKind::Scp),
        ("explicit deny in a resource control policy", RefusalKind::Rcp),
        ("no resource control policy allows", RefusalKind::Rcp),
        ("explicit deny in a permissions boundary", RefusalKind::PermissionsBoundary),
        ("no permissions boundary allows", RefusalKind::PermissionsBoundary),
        ("explicit deny in a session policy", RefusalKind::SessionPolicy),
        ("no session policy allows", RefusalKind::SessionPolicy),
        ("explicit deny in an identity-based policy", RefusalKind::IdentityPolicyDeny),
        ("no identity-based policy allows", RefusalKind::NoIdentityPolicy),
        ("explicit deny in a resource-based policy", RefusalKind::ResourcePolicy),
        ("no resource-based policy allows", RefusalKind::ResourcePolicy),
        ("explicit deny in a vpc endpoint policy", RefusalKind::VpcEndpointPolicy),
        ("no vpc endpoint policy allows", RefusalKind::VpcEndpointPolicy),
    ];

    /// The kind an `errorMessage` names.
    pub fn of_message(message: &str) -> RefusalKind {
        let m = message.to_ascii_lowercase();
        Self::PHRASES.iter().find(|(p, _)| m.contains(p)).map_or(RefusalKind::Unknown, |(_, k)| *k)
    }

    /// What to do about a refusal of `action` of this kind.
    pub fn fix(&self, action: &str) -> String {
        match self {
            RefusalKind::Scp => format!(
                "a service control policy of the organization refuses {action}: ask the organization's administrators to allow it for this role (karpctl cannot change SCPs)"
            ),
            RefusalKind::Rcp => format!(
                "a resource control policy of the organization refuses {action} on this resource: ask the organization's administrators to exempt the role"
            ),
            RefusalKind::PermissionsBoundary => format!(
                "the role's permissions boundary does not allow {action}: add it to the boundary policy (identity.permissions_boundary) or remove the boundary"
            ),
            RefusalKind::SessionPolicy => format!(
                "a session policy limits the credentials: allow {action} in the Pod Identity association's session policy (or the AssumeRole caller's Policy/PolicyArns)"
            ),
            RefusalKind::NoIdentityPolicy => format!(
                "no policy of the role allows {action}: the pinned permission set lacks it; set identity.karpenter_version to the running version (or \"running\") and run `karpctl up`"
            ),
            RefusalKind::IdentityPolicyDeny => {
                format!(
                    "a policy attached to the role denies {action}: remove that Deny statement (karpctl's own policies never deny)"
                )
            }
            RefusalKind::ResourcePolicy => {
                format!("the resource's own policy (a key or queue policy) refuses {action}: allow the role there")
            }
            RefusalKind::VpcEndpointPolicy => {
                format!("the VPC endpoint's policy refuses {action}: allow it in the endpoint policy")
            }
            RefusalKind::Unknown => format!(
                "AWS's message does not say which policy refused {action}; decode it (see the encoded message) or look at the role's policies, boundary, the organization's SCPs and the session policy"
            ),
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalKind::Scp => "service control policy",
            RefusalKind::Rcp => "resource control policy",
            RefusalKind::PermissionsBoundary => "permissions boundary",
            RefusalKind::SessionPolicy => "session policy",
            RefusalKind::NoIdentityPolicy => "no identity-based policy allows it",
            RefusalKind::IdentityPolicyDeny => "explicit deny in an identity-based policy",
            RefusalKind::ResourcePolicy => "resource-based policy",
            RefusalKind::VpcEndpointPolicy => "VPC endpoint policy",
            RefusalKind::Unknown => "not stated",
        })
    }
}

/// The refusals of one action by one kind of policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusalGroup {
    /// The action refused (from the message when it names one, else the call's).
    pub action: String,
    pub kind: RefusalKind,
    pub count: usize,
    /// The last refusal's time as recorded, and in seconds since the epoch.
    pub last: String,
    pub last_epoch: i64,
    /// The last refusal's resource.
    pub resource: Option<String>,
    pub error_code: String,
    /// The last refusal's encoded authorization message (EC2).
    pub encoded: Option<String>,
    /// Who was refused (role ARNs), sorted.
    pub callers: Vec<String>,
    /// How many of `count` were launches refused inside a `CreateFleet` that succeeded, their
    /// `spot`/`on-demand` and their instance types (sorted).
    pub in_fleet: usize,
    pub lifecycles: Vec<String>,
    pub instance_types: Vec<String>,
}

impl RefusalGroup {
    /// How to see the whole request context of an encoded message: the command when the caller
    /// may use `sts:DecodeAuthorizationMessage`, else the permission it needs. None without one.
    /// "; inside CreateFleet (the call succeeded, these launches did not): spot launches of
    /// c5.large, m5.large", or nothing when none was inside a fleet.
    pub fn fleet_text(&self) -> String {
        if self.in_fleet == 0 {
            return String::new();
        }
        let lifecycles = if self.lifecycles.is_empty() { String::new() } else { format!("{} ", self.lifecycles.join(" and ")) };
        let types =
            if self.instance_types.is_empty() { String::new() } else { format!(" of {}", self.instance_types.join(", ")) };
        format!(
            "; {} of them inside CreateFleet (the call succeeded, these launches did not): {lifecycles}launches{types}",
            self.in_fleet
        )
    }

    pub fn decode_hint(&self, may_decode: bool) -> Option<String> {
        let e = self.encoded.as_deref()?;
        Some(if may_decode {
            format!("aws sts decode-authorization-message --encoded-message {e} --query DecodedMessage --output text")
        } else {
            "decoding AWS's encoded authorization message needs sts:DecodeAuthorizationMessage (not granted to the caller)"
                .to_string()
        })
    }
}

/// The refused calls among `calls`, grouped per (action, kind), the most recent group first.
pub fn refusals<'a>(calls: impl IntoIterator<Item = &'a Call>) -> Vec<RefusalGroup> {
    let mut by: BTreeMap<(String, RefusalKind), RefusalGroup> = BTreeMap::new();
    for r in calls.into_iter().flat_map(refused_in) {
        let (c, message) = (r.call, r.message);
        let action = action_in_message(message).unwrap_or_else(|| c.action.clone());
        let kind = RefusalKind::of_message(message);
        let g = by.entry((action.clone(), kind)).or_insert_with(|| RefusalGroup {
            action,
            kind,
            count: 0,
            last: String::new(),
            last_epoch: i64::MIN,
            resource: None,
            error_code: String::new(),
            encoded: None,
            callers: vec![],
            in_fleet: 0,
            lifecycles: vec![],
            instance_types: vec![],
        });
        g.count += 1;
        if let Some((lifecycle, instance_type)) = r.fleet {
            g.in_fleet += 1;
            for (list, v) in [(&mut g.lifecycles, lifecycle), (&mut g.instance_types, instance_type)] {
                if let Some(v) = v
                    && !list.iter().any(|x| x == v)
                {
                    list.push(v.to_string());
                    list.sort();
                }
            }
        }
        if let Some(who) = &c.issuer_arn
            && !g.callers.contains(who)
        {
            g.callers.push(who.clone());
            g.callers.sort();
        }
        if c.epoch >= g.last_epoch {
            g.last_epoch = c.epoch;
            g.last = c.time.clone();
            g.resource = r.resource.clone().or(g.resource.take());
            g.error_code = r.code.to_string();
            g.encoded = encoded_in_message(message).or(g.encoded.take());
        }
    }
    let mut out: Vec<RefusalGroup> = by.into_values().collect();
    out.sort_by(|a, b| b.last_epoch.cmp(&a.last_epoch).then_with(|| a.action.cmp(&b.action)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::record::{parse_record, resource_in_message};
    use serde_json::json;

    const ROLE: &str = "arn:aws:iam::111122223333:role/KarpenterController-c1";
    const NODE: &str = "arn:aws:iam::111122223333:role/KarpenterNodeRole-c1";

    fn refused(role: &str, source: &str, name: &str, code: &str, message: &str, time: &str) -> Call {
        let r = json!({
            "userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"type": "Role", "arn": role}}},
            "eventTime": time, "eventSource": source, "eventName": name, "userAgent": "karpenter.sh-1.12.3",
            "errorCode": code, "errorMessage": message,
        });
        parse_record(&r.to_string(), &[]).unwrap()
    }

    const SCP: &str = "You are not authorized to perform this operation. User: arn:aws:sts::111122223333:assumed-role/KarpenterController-c1/s is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:111122223333:fleet/* with an explicit deny in a service control policy. Encoded authorization failure message: EncOdEd1";
    const BOUNDARY: &str = "You are not authorized to perform this operation. User: arn:aws:sts::111122223333:assumed-role/KarpenterController-c1/s is not authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-east-1:111122223333:fleet/* because no permissions boundary allows the ec2:CreateFleet action. Encoded authorization failure message: EncOdEd2";

    #[test]
    fn the_kind_comes_from_aws_phrases() {
        for (m, k) in [
            (SCP, RefusalKind::Scp),
            (BOUNDARY, RefusalKind::PermissionsBoundary),
            (
                "User: x is not authorized to perform: iam:PassRole on resource: y with an explicit deny in a permissions boundary",
                RefusalKind::PermissionsBoundary,
            ),
            (
                "User: x is not authorized to perform: ssm:GetParameter on resource: y because no service control policy allows the ssm:GetParameter action",
                RefusalKind::Scp,
            ),
            (
                "User: x is not authorized to perform: sqs:ReceiveMessage on resource: y with an explicit deny in a session policy",
                RefusalKind::SessionPolicy,
            ),
            (
                "User: x is not authorized to perform: kms:Decrypt on resource: y with an explicit deny in a resource control policy",
                RefusalKind::Rcp,
            ),
            (
                "User: x is not authorized to perform: pricing:GetProducts because no identity-based policy allows the pricing:GetProducts action",
                RefusalKind::NoIdentityPolicy,
            ),
            (
                "User: x is not authorized to perform: ec2:RunInstances with an explicit deny in an identity-based policy",
                RefusalKind::IdentityPolicyDeny,
            ),
            (
                "User: x is not authorized to perform: kms:Decrypt on resource: k because no resource-based policy allows the kms:Decrypt action",
                RefusalKind::ResourcePolicy,
            ),
            (
                "User: x is not authorized to perform: ec2:DescribeImages with an explicit deny in a VPC endpoint policy",
                RefusalKind::VpcEndpointPolicy,
            ),
            (
                "You are not authorized to perform this operation. Encoded authorization failure message: abc",
                RefusalKind::Unknown,
            ),
        ] {
            assert_eq!(RefusalKind::of_message(m), k, "{m}");
            assert!(RefusalKind::of_message(m).fix("ec2:CreateFleet").contains("ec2:CreateFleet"));
        }
        assert!(RefusalKind::Scp.fix("a:b").contains("SCP"));
        assert!(RefusalKind::PermissionsBoundary.fix("a:b").contains("boundary"));
        assert!(RefusalKind::NoIdentityPolicy.fix("a:b").contains("karpenter_version"));
    }

    #[test]
    fn messages_name_the_action_the_resource_and_the_encoded_message() {
        assert_eq!(action_in_message(SCP).as_deref(), Some("ec2:CreateFleet"));
        assert_eq!(resource_in_message(SCP).as_deref(), Some("arn:aws:ec2:us-east-1:111122223333:fleet/*"));
        assert_eq!(encoded_in_message(SCP).as_deref(), Some("EncOdEd1"));
        let iam = "User: arn:aws:sts::1:assumed-role/r/s is not authorized to perform: iam:GetInstanceProfile on resource: instance profile arn:aws:iam::1:instance-profile/p.";
        assert_eq!(action_in_message(iam).as_deref(), Some("iam:GetInstanceProfile"));
        assert_eq!(resource_in_message("... on resource: arn:aws:iam::1:role/N."), Some("arn:aws:iam::1:role/N".to_string()));
        assert_eq!(action_in_message("denied"), None);
        assert_eq!(encoded_in_message(BOUNDARY).as_deref(), Some("EncOdEd2"));
    }

    #[test]
    fn refusals_group_per_action_and_kind_with_count_last_time_and_resource() {
        let calls = vec![
            refused(ROLE, "ec2.amazonaws.com", "CreateFleet", "Client.UnauthorizedOperation", SCP, "2026-08-01T10:00:00Z"),
            refused(ROLE, "ec2.amazonaws.com", "CreateFleet", "Client.UnauthorizedOperation", SCP, "2026-08-01T10:03:00Z"),
            refused(ROLE, "ec2.amazonaws.com", "CreateFleet", "Client.UnauthorizedOperation", BOUNDARY, "2026-08-01T10:01:00Z"),
            refused(
                NODE,
                "ecr.amazonaws.com",
                "GetAuthorizationToken",
                "AccessDeniedException",
                "User: x is not authorized to perform: ecr:GetAuthorizationToken because no identity-based policy allows the ecr:GetAuthorizationToken action",
                "2026-08-01T09:00:00Z",
            ),
            // A call the role made that succeeded, and one that failed for another reason.
            parse_record(
                &json!({"userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"arn": ROLE}}},
                "eventSource": "ec2.amazonaws.com", "eventName": "DescribeSubnets", "eventTime": "2026-08-01T10:05:00Z"})
                .to_string(),
                &[],
            )
            .unwrap(),
            refused(ROLE, "ec2.amazonaws.com", "CreateFleet", "InvalidParameterValue", "bad", "2026-08-01T10:05:00Z"),
        ];
        let groups = refusals(&calls);
        let got: Vec<_> = groups.iter().map(|g| (g.action.as_str(), g.kind, g.count, g.last.as_str())).collect();
        assert_eq!(
            got,
            [
                ("ec2:CreateFleet", RefusalKind::Scp, 2, "2026-08-01T10:03:00Z"),
                ("ec2:CreateFleet", RefusalKind::PermissionsBoundary, 1, "2026-08-01T10:01:00Z"),
                ("ecr:GetAuthorizationToken", RefusalKind::NoIdentityPolicy, 1, "2026-08-01T09:00:00Z"),
            ]
        );
        let scp = &groups[0];
        assert_eq!(scp.resource.as_deref(), Some("arn:aws:ec2:us-east-1:111122223333:fleet/*"));
        assert_eq!(
            (scp.error_code.as_str(), scp.callers.as_slice()),
            ("Client.UnauthorizedOperation", [ROLE.to_string()].as_slice())
        );
        assert_eq!(
            scp.decode_hint(true).unwrap(),
            "aws sts decode-authorization-message --encoded-message EncOdEd1 --query DecodedMessage --output text"
        );
        assert!(scp.decode_hint(false).unwrap().contains("sts:DecodeAuthorizationMessage"));
        assert_eq!(groups[2].decode_hint(true), None, "no encoded message: nothing to decode");
        assert_eq!(groups[2].callers, [NODE], "the node role's refusals too");
    }

    #[test]
    fn launches_refused_inside_a_fleet_go_through_the_same_classifier_with_spot_and_types() {
        let scp_run = "You are not authorized to perform this operation. User: arn:aws:sts::111122223333:assumed-role/KarpenterController-c1/s is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-2:111122223333:instance/* with an explicit deny in a service control policy. Encoded authorization failure message: EncFleet";
        let fleet = |time: &str, items: serde_json::Value| {
            let r = json!({
                "userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"type": "Role", "arn": ROLE}}},
                "eventTime": time, "eventSource": "ec2.amazonaws.com", "eventName": "CreateFleet", "userAgent": "karpenter.sh-1.12.3",
                "responseElements": {"CreateFleetResponse": {"fleetId": "fleet-1", "errorSet": {"item": items}}},
            });
            parse_record(&r.to_string(), &[]).unwrap()
        };
        let entry = |code: &str, lifecycle: &str, t: &str, msg: &str| {
            json!({"errorCode": code, "errorMessage": msg, "lifecycle": lifecycle,
                   "launchTemplateAndOverrides": {"overrides": {"instanceType": t, "availabilityZone": "us-east-2a"}}})
        };
        let calls = vec![
            fleet("2026-08-01T10:00:00Z", entry("UnauthorizedOperation", "spot", "m5.large", scp_run)),
            fleet(
                "2026-08-01T10:02:00Z",
                json!([
                    entry("UnauthorizedOperation", "spot", "c5.large", scp_run),
                    entry("UnauthorizedOperation", "spot", "m5.large", scp_run),
                    entry("InsufficientInstanceCapacity", "spot", "c5.xlarge", "no capacity"),
                ]),
            ),
        ];
        let groups = refusals(&calls);
        assert_eq!(groups.len(), 1, "{groups:?}");
        let g = &groups[0];
        assert_eq!((g.action.as_str(), g.kind, g.count, g.in_fleet), ("ec2:RunInstances", RefusalKind::Scp, 3, 3));
        assert_eq!((g.last.as_str(), g.error_code.as_str()), ("2026-08-01T10:02:00Z", "UnauthorizedOperation"));
        assert_eq!(g.resource.as_deref(), Some("arn:aws:ec2:us-east-2:111122223333:instance/*"));
        assert_eq!(
            (g.lifecycles.as_slice(), g.instance_types.as_slice()),
            (["spot".to_string()].as_slice(), ["c5.large".to_string(), "m5.large".to_string()].as_slice())
        );
        assert!(g.fleet_text().contains("spot launches of c5.large, m5.large"), "{}", g.fleet_text());
        assert_eq!(g.encoded.as_deref(), Some("EncFleet"));
    }

    #[test]
    fn a_call_refused_for_another_action_is_grouped_under_that_action() {
        let m = "You are not authorized to perform this operation. User: x is not authorized to perform: iam:PassRole on resource: arn:aws:iam::111122223333:role/KarpenterNodeRole-c1 with an explicit deny in a permissions boundary. Encoded authorization failure message: Z";
        let g = refusals(&[refused(
            ROLE,
            "ec2.amazonaws.com",
            "RunInstances",
            "Client.UnauthorizedOperation",
            m,
            "2026-08-01T10:00:00Z",
        )]);
        assert_eq!((g[0].action.as_str(), g[0].kind), ("iam:PassRole", RefusalKind::PermissionsBoundary));
        assert_eq!(g[0].resource.as_deref(), Some("arn:aws:iam::111122223333:role/KarpenterNodeRole-c1"));
    }
}
