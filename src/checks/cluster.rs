//! Checks on the cluster and the account: authentication mode, node roles and their access
//! entries, the Spot service-linked role, EKS Auto Mode. Each runs over a `Setup`; the pure
//! judgements they share are public for their tests and the preflight.

use super::row::{DOCTOR, EVERY, Group, PLAN, check};
use crate::facts::finding::{Checker, Code, Finding, Read, Severity};
use crate::facts::setup::Setup;
use crate::karpenter_iam;
use crate::policy::analysis;
use std::collections::BTreeSet;

/// This area's rows of the check catalog, in checklist order: each function with the checks
/// it runs (`checks::catalog` puts the areas together; `run` runs them).
pub(super) const CHECKS: &[Group] = &[
    Group {
        run: cluster_access,
        checks: &[check(Code::ClusterAuthConfigMap, "the cluster accepts access entries", &[Read::Cluster], DOCTOR)],
    },
    Group {
        run: node_roles,
        checks: &[
            check(Code::NodeRoleNotFound, "the node roles exist", &[Read::NodeRoles], DOCTOR),
            check(
                Code::NodeRoleMissingManagedPolicy,
                "the node roles have the managed policies nodes need",
                &[Read::NodeRoles],
                DOCTOR,
            ),
            check(Code::NodeRoleNoAccessEntry, "each node role has an EC2 access entry", &[Read::AccessEntries], DOCTOR),
            check(
                Code::NodeAccessEntryStale,
                "no access entry predates its role",
                &[Read::AccessEntries, Read::NodeRoles],
                DOCTOR,
            ),
        ],
    },
    Group {
        run: spot,
        checks: &[check(Code::SpotServiceLinkedRoleMissing, "the Spot service-linked role exists", &[Read::ListRoles], EVERY)],
    },
    Group {
        run: eks_auto_mode,
        checks: &[check(Code::AutoModeNodepoolsOverlap, "EKS Auto Mode does not manage Karpenter's NodePools", &[], PLAN)],
    },
];

/// The EC2 Spot service-linked role, account-wide.
pub const SPOT_ROLE: &str = "AWSServiceRoleForEC2Spot";
/// The path of the Spot service's linked roles.
pub const SPOT_ROLE_PATH: &str = "/aws-service-role/spot.amazonaws.com/";

/// A fresh account has no Spot service-linked role, and every Spot launch fails
/// (`AuthFailure.ServiceLinkedRoleCreationNotPermitted`: the controller may not create it).
pub fn spot_role(exists: bool) -> Option<Finding> {
    (!exists).then(|| Finding {
        code: Code::SpotServiceLinkedRoleMissing,
        severity: Severity::Warning,
        resource: format!("role{SPOT_ROLE_PATH}{SPOT_ROLE}"),
        message: "the account has no EC2 Spot service-linked role: every Spot launch fails (AuthFailure.ServiceLinkedRoleCreationNotPermitted); On-Demand nodes work".into(),
        fix: "set `create_spot_service_linked_role = true` under [account] in the plan and run `karpctl up`, or: aws iam create-service-linked-role --aws-service-name spot.amazonaws.com (once per account)".into(),
    })
}

/// EKS Auto Mode runs AWS's own Karpenter: both must not manage the same NodePools.
pub fn auto_mode(cluster: &str, enabled: bool) -> Option<Finding> {
    enabled.then(|| Finding {
        code: Code::AutoModeNodepoolsOverlap,
        severity: Severity::Warning,
        resource: format!("cluster/{cluster}"),
        message: "EKS Auto Mode is on (computeConfig.enabled): AWS runs its own Karpenter here, with the Pod Identity agent built in; Auto Mode and a self-managed Karpenter must not both manage the same NodePools".into(),
        fix: "give the self-managed Karpenter its own NodePools (Auto Mode's are `general-purpose` and `system`, class eks.amazonaws.com), or turn off Auto Mode's built-in node pools".into(),
    })
}

/// The Spot service-linked role (as found, or as `up` leaves it: it creates it first when the
/// plan opts in); not judged when not read.
pub(super) fn spot(s: &Setup, c: &mut Checker) {
    if let Some(exists) = s.spot_service_linked_role {
        c.record(Code::SpotServiceLinkedRoleMissing, spot_role(exists));
    }
}

pub(super) fn eks_auto_mode(s: &Setup, c: &mut Checker) {
    c.record(Code::AutoModeNodepoolsOverlap, auto_mode(&s.cluster, s.auto_mode));
}

pub(super) fn role_res(name: &str) -> String {
    format!("role/{name}")
}

pub(super) fn cluster_access(s: &Setup, c: &mut Checker) {
    c.ran(Code::ClusterAuthConfigMap);
    if s.authentication_mode == "CONFIG_MAP" {
        c.add(
            Code::ClusterAuthConfigMap,
            Severity::Warning,
            format!("cluster/{}", s.cluster),
            format!("cluster {} authenticates only through the aws-auth ConfigMap: access entries are unavailable, Karpenter's nodes join only if aws-auth maps the node role (doctor cannot read it)", s.cluster),
            format!("aws eks update-cluster-config --name {} --access-config authenticationMode=API_AND_CONFIG_MAP, then give the node role an EC2_LINUX access entry", s.cluster),
        );
    }
}

fn name_of_policy(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

pub(super) fn node_roles(s: &Setup, c: &mut Checker) {
    c.ran(Code::NodeRoleNotFound);
    if s.node_roles.is_empty() {
        c.add(
            Code::NodeRoleNotFound,
            Severity::Error,
            format!("cluster/{}", s.cluster),
            "no node role found: the controller's iam:PassRole names none and the cluster has no EC2_LINUX/EC2_WINDOWS access entry".into(),
            format!("create one (`karpctl up --cluster {}`), or name it with --node-role", s.cluster),
        );
        return;
    }
    let ipv6 = s.ip_family.eq_ignore_ascii_case("ipv6");
    let required = karpenter_iam::node_managed_policy_arns(&s.partition, &s.account_id, ipv6, s.version);
    for r in &s.node_roles {
        if !r.exists {
            c.add(
                Code::NodeRoleNotFound,
                Severity::Error,
                role_res(&r.name),
                format!("node role {} ({}) does not exist", r.name, r.how.join(", ")),
                "create the role, or fix the reference to it (the controller's iam:PassRole, the access entry, EC2NodeClass spec.role)".into(),
            );
            continue;
        }
        c.ran(Code::NodeRoleMissingManagedPolicy);
        let have: BTreeSet<&str> = r.attached.iter().map(|a| name_of_policy(a)).collect();
        let missing: Vec<&str> = required
            .iter()
            .map(|a| name_of_policy(a))
            .filter(|n| {
                let read_only = have.contains("AmazonEC2ContainerRegistryReadOnly");
                !(have.contains(n) || (*n == "AmazonEC2ContainerRegistryPullOnly" && read_only))
            })
            .collect();
        if !missing.is_empty() {
            let severity =
                if missing.iter().all(|m| *m == "AmazonSSMManagedInstanceCore") { Severity::Warning } else { Severity::Error };
            c.add(
                Code::NodeRoleMissingManagedPolicy,
                severity,
                role_res(&r.name),
                format!("node role {} lacks the managed policies {}", r.name, missing.join(", ")),
                format!(
                    "aws iam attach-role-policy --role-name {} --policy-arn <arn> for each of: {}",
                    r.name,
                    required.iter().filter(|a| missing.contains(&name_of_policy(a))).cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        if s.authentication_mode == "CONFIG_MAP" {
            continue;
        }
        c.ran(Code::NodeRoleNoAccessEntry);
        c.ran(Code::NodeAccessEntryStale);
        let entries: Vec<_> = s
            .access_entries
            .iter()
            .filter(|e| analysis::role_name(&e.principal_arn) == r.name && e.kind.starts_with("EC2_"))
            .collect();
        if entries.is_empty() {
            let (severity, unless) = if s.authentication_mode == "API" {
                (Severity::Error, "")
            } else {
                (Severity::Warning, " unless the aws-auth ConfigMap maps it (doctor cannot read it)")
            };
            c.add(
                Code::NodeRoleNoAccessEntry,
                severity,
                role_res(&r.name),
                format!(
                    "node role {} has no EC2_LINUX/EC2_WINDOWS access entry: Karpenter's nodes cannot join the cluster{unless}",
                    r.name
                ),
                format!("aws eks create-access-entry --cluster-name {} --principal-arn {} --type EC2_LINUX", s.cluster, r.arn),
            );
        }
        for e in entries {
            if let (Some(entry), Some(role)) = (e.created, r.created)
                && entry < role
            {
                c.add(
                    Code::NodeAccessEntryStale,
                    Severity::Error,
                    format!("access-entry/{}", e.principal_arn),
                    format!(
                        "the access entry of {} was made before the role was (made again): EKS binds the old role's id, so nodes with the new role cannot join",
                        r.name
                    ),
                    format!(
                        "delete and create the entry again: aws eks delete-access-entry --cluster-name {c} --principal-arn {p}; aws eks create-access-entry --cluster-name {c} --principal-arn {p} --type {t}",
                        c = s.cluster,
                        p = e.principal_arn,
                        t = e.kind
                    ),
                );
            }
        }
    }
}
