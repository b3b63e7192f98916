//! IAM reads: roles (memoised by name), their attached and inline policies (memoised by role),
//! managed policies and versions, instance profiles, scoped lists, the Spot service-linked role,
//! the account's policies-per-role quota and OIDC providers.

use super::memo::Memo;
use crate::aws::{Classify, aws_err};
use crate::model::Tags;
use anyhow::Result;
use aws_sdk_iam::types::{PolicyScopeType, Tag};

/// IAM tags as a map.
pub fn tags_from(tags: &[Tag]) -> Tags {
    tags.iter().map(|t| (t.key().to_string(), t.value().to_string())).collect()
}

/// What GetRole says about a role.
#[derive(Clone, Debug)]
pub struct LiveRole {
    pub name: String,
    pub arn: String,
    pub path: String,
    /// The trust policy as IAM returns it (percent-encoded).
    pub trust: Option<String>,
    /// The permissions boundary's policy ARN, if any.
    pub boundary: Option<String>,
    pub tags: Tags,
    /// When it was made (seconds since the epoch).
    pub created: i64,
}

/// A managed policy attached to a role.
#[derive(Clone, Debug, PartialEq)]
pub struct AttachedPolicy {
    pub name: String,
    pub arn: String,
}

/// A role as ListRoles gives it (no tags: ListRoles never returns them).
#[derive(Clone, Debug)]
pub struct RoleSummary {
    pub name: String,
    pub arn: String,
    pub path: String,
    /// The trust policy as IAM returns it (percent-encoded).
    pub trust: Option<String>,
}

/// What GetPolicy says.
#[derive(Clone, Debug)]
pub struct LivePolicy {
    pub arn: String,
    pub path: String,
    pub default_version: String,
    pub tags: Tags,
}

/// One version of a managed policy as ListPolicyVersions gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Version {
    pub id: String,
    pub is_default: bool,
    /// Seconds since the epoch (0 when unknown).
    pub created: i64,
}

/// What GetInstanceProfile says.
#[derive(Clone, Debug)]
pub struct LiveProfile {
    pub arn: String,
    pub path: String,
    pub roles: Vec<String>,
    pub tags: Tags,
}

/// Everything a managed policy is attached to: (roles, users, groups).
pub type Entities = (Vec<String>, Vec<String>, Vec<String>);

pub struct Iam {
    client: aws_sdk_iam::Client,
    roles: Memo<Option<LiveRole>>,
    attached: Memo<Option<Vec<AttachedPolicy>>>,
    inline: Memo<Option<Vec<String>>>,
    at_path: Memo<bool>,
}

impl Iam {
    pub fn new(client: aws_sdk_iam::Client) -> Iam {
        Iam { client, roles: Memo::default(), attached: Memo::default(), inline: Memo::default(), at_path: Memo::default() }
    }

    /// GetRole now (for writes: ownership must be current). None when missing.
    pub async fn role_now(&self, name: &str) -> Result<Option<LiveRole>> {
        match self.client.get_role().role_name(name).send().await {
            Ok(o) => Ok(o.role().map(|r| LiveRole {
                name: r.role_name().to_string(),
                arn: r.arn().to_string(),
                path: r.path().to_string(),
                trust: r.assume_role_policy_document().map(str::to_string),
                boundary: r.permissions_boundary().and_then(|b| b.permissions_boundary_arn()).map(str::to_string),
                tags: tags_from(r.tags()),
                created: r.create_date().secs(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("iam:GetRole", e)),
        }
    }

    /// GetRole, memoised for the rest of the observation (shared by a role and its attachments).
    pub async fn role(&self, name: &str) -> Result<Option<LiveRole>> {
        self.roles.get(name, || self.role_now(name)).await
    }

    pub fn forget_role(&self, name: &str) {
        self.roles.forget(name);
    }

    /// The managed policies attached to a role (ListAttachedRolePolicies, paginated), now. None
    /// when the role does not exist.
    pub async fn attached_now(&self, role: &str) -> Result<Option<Vec<AttachedPolicy>>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let o = match self.client.list_attached_role_policies().role_name(role).set_marker(marker).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(aws_err("iam:ListAttachedRolePolicies", e)),
            };
            out.extend(o.attached_policies().iter().filter_map(|p| {
                Some(AttachedPolicy { name: p.policy_name().unwrap_or_default().to_string(), arn: p.policy_arn()?.to_string() })
            }));
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                break;
            }
        }
        Ok(Some(out))
    }

    /// `attached_now`, memoised for the observation.
    pub async fn attached(&self, role: &str) -> Result<Option<Vec<AttachedPolicy>>> {
        self.attached.get(role, || self.attached_now(role)).await
    }

    pub fn forget_attached(&self, role: &str) {
        self.attached.forget(role);
    }

    /// The role's inline policy names (ListRolePolicies, paginated), now. None: no such role.
    pub async fn inline_names_now(&self, role: &str) -> Result<Option<Vec<String>>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let o = match self.client.list_role_policies().role_name(role).set_marker(marker).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(aws_err("iam:ListRolePolicies", e)),
            };
            out.extend(o.policy_names().iter().cloned());
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                return Ok(Some(out));
            }
        }
    }

    /// `inline_names_now`, memoised for the observation.
    pub async fn inline_names(&self, role: &str) -> Result<Option<Vec<String>>> {
        self.inline.get(role, || self.inline_names_now(role)).await
    }

    pub fn forget_inline(&self, role: &str) {
        self.inline.forget(role);
    }

    /// An inline policy's document as IAM returns it (GetRolePolicy). None when missing.
    pub async fn role_policy(&self, role: &str, name: &str) -> Result<Option<String>> {
        match self.client.get_role_policy().role_name(role).policy_name(name).send().await {
            Ok(o) => Ok(Some(o.policy_document().to_string())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("iam:GetRolePolicy", e)),
        }
    }

    /// GetPolicy; None when missing.
    pub async fn policy(&self, arn: &str) -> Result<Option<LivePolicy>> {
        match self.client.get_policy().policy_arn(arn).send().await {
            Ok(o) => Ok(o.policy().map(|p| LivePolicy {
                arn: p.arn().unwrap_or(arn).to_string(),
                path: p.path().unwrap_or("/").to_string(),
                default_version: p.default_version_id().unwrap_or_default().to_string(),
                tags: tags_from(p.tags()),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("iam:GetPolicy", e)),
        }
    }

    /// GetPolicyVersion: Some(its document as IAM returns it, if any); None: no such version.
    pub async fn policy_version(&self, arn: &str, id: &str) -> Result<Option<Option<String>>> {
        match self.client.get_policy_version().policy_arn(arn).version_id(id).send().await {
            Ok(o) => Ok(Some(o.policy_version().and_then(|v| v.document()).map(str::to_string))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("iam:GetPolicyVersion", e)),
        }
    }

    /// ListPolicyVersions, paginated (none when the policy is gone).
    pub async fn policy_versions(&self, arn: &str) -> Result<Vec<Version>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let o = match self.client.list_policy_versions().policy_arn(arn).set_marker(marker).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => break,
                Err(e) => return Err(aws_err("iam:ListPolicyVersions", e)),
            };
            out.extend(o.versions().iter().map(|v| Version {
                id: v.version_id().unwrap_or_default().to_string(),
                is_default: v.is_default_version(),
                created: v.create_date().map(|d| d.secs()).unwrap_or(0),
            }));
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Every role, user and group the policy is attached to (ListEntitiesForPolicy, paginated).
    pub async fn policy_entities(&self, arn: &str) -> Result<Entities> {
        let (mut roles, mut users, mut groups) = (Vec::new(), Vec::new(), Vec::new());
        let mut marker: Option<String> = None;
        loop {
            let o = match self.client.list_entities_for_policy().policy_arn(arn).set_marker(marker).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => break,
                Err(e) => return Err(aws_err("iam:ListEntitiesForPolicy", e)),
            };
            roles.extend(o.policy_roles().iter().filter_map(|r| r.role_name().map(str::to_string)));
            users.extend(o.policy_users().iter().filter_map(|u| u.user_name().map(str::to_string)));
            groups.extend(o.policy_groups().iter().filter_map(|g| g.group_name().map(str::to_string)));
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                break;
            }
        }
        Ok((roles, users, groups))
    }

    /// The ARN of the customer managed policy named `name` (case-insensitively), at any path
    /// (ListPolicies, Scope=Local, paginated until found).
    pub async fn policy_named(&self, name: &str) -> Result<Option<String>> {
        let mut marker: Option<String> = None;
        loop {
            let o = self
                .client
                .list_policies()
                .scope(PolicyScopeType::Local)
                .set_marker(marker)
                .send()
                .await
                .map_err(|e| aws_err("iam:ListPolicies", e))?;
            if let Some(p) = o.policies().iter().find(|p| p.policy_name().is_some_and(|n| n.eq_ignore_ascii_case(name))) {
                return Ok(p.arn().map(str::to_string));
            }
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                return Ok(None);
            }
        }
    }

    /// ListRoles (with a PathPrefix, or every role of the account), paginated.
    pub async fn roles(&self, path_prefix: Option<&str>) -> Result<Vec<RoleSummary>> {
        let req = self.client.list_roles().set_path_prefix(path_prefix.map(str::to_string));
        let roles: Vec<_> = req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("iam:ListRoles", e))?;
        Ok(roles
            .iter()
            .map(|r| RoleSummary {
                name: r.role_name().to_string(),
                arn: r.arn().to_string(),
                path: r.path().to_string(),
                trust: r.assume_role_policy_document().map(str::to_string),
            })
            .collect())
    }

    /// (name, ARN) of the account's customer managed policies under a path (paginated).
    pub async fn local_policies(&self, path_prefix: &str) -> Result<Vec<(String, String)>> {
        let req = self.client.list_policies().scope(PolicyScopeType::Local).path_prefix(path_prefix);
        let policies: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("iam:ListPolicies", e))?;
        Ok(policies.iter().filter_map(|p| Some((p.policy_name()?.to_string(), p.arn()?.to_string()))).collect())
    }

    /// (name, ARN) of the instance profiles under a path (paginated).
    pub async fn instance_profiles(&self, path_prefix: &str) -> Result<Vec<(String, String)>> {
        let req = self.client.list_instance_profiles().path_prefix(path_prefix);
        let profiles: Vec<_> =
            req.into_paginator().items().send().try_collect().await.map_err(|e| aws_err("iam:ListInstanceProfiles", e))?;
        Ok(profiles.iter().map(|p| (p.instance_profile_name().to_string(), p.arn().to_string())).collect())
    }

    /// (name, path) of the role's instance profiles (ListInstanceProfilesForRole, paginated;
    /// none when the role is gone).
    pub async fn profiles_for_role(&self, role: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let o = match self.client.list_instance_profiles_for_role().role_name(role).set_marker(marker).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => break,
                Err(e) => return Err(aws_err("iam:ListInstanceProfilesForRole", e)),
            };
            out.extend(o.instance_profiles().iter().map(|p| (p.instance_profile_name().to_string(), p.path().to_string())));
            marker = o.marker().map(str::to_string);
            if !o.is_truncated() || marker.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// GetInstanceProfile; None when missing.
    pub async fn instance_profile(&self, name: &str) -> Result<Option<LiveProfile>> {
        match self.client.get_instance_profile().instance_profile_name(name).send().await {
            Ok(o) => Ok(o.instance_profile().map(|p| LiveProfile {
                arn: p.arn().to_string(),
                path: p.path().to_string(),
                roles: p.roles().iter().map(|r| r.role_name().to_string()).collect(),
                tags: tags_from(p.tags()),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("iam:GetInstanceProfile", e)),
        }
    }

    /// Whether the account has a role at exactly this path (ListRoles by PathPrefix), memoised:
    /// the Spot service-linked role is found this one way (an emulator may name it otherwise).
    pub async fn role_at_path(&self, path: &str) -> Result<bool> {
        self.at_path.get(path, || async { Ok(self.roles(Some(path)).await?.iter().any(|r| r.path == path)) }).await
    }

    /// The account's quota of managed policies per role (GetAccountSummary, SummaryMap
    /// `AttachedPoliciesPerRoleQuota`); None when the answer has none.
    pub async fn policies_per_role_quota(&self) -> Result<Option<usize>> {
        let o = self.client.get_account_summary().send().await.map_err(|e| aws_err("iam:GetAccountSummary", e))?;
        Ok(o.summary_map()
            .and_then(|m| m.get(&aws_sdk_iam::types::SummaryKeyType::AttachedPoliciesPerRoleQuota))
            .and_then(|n| usize::try_from(*n).ok())
            .filter(|n| *n > 0))
    }

    /// Whether the IAM OIDC provider exists (GetOpenIDConnectProvider).
    pub async fn oidc_provider_exists(&self, arn: &str) -> Result<bool> {
        match self.client.get_open_id_connect_provider().open_id_connect_provider_arn(arn).send().await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(aws_err("iam:GetOpenIDConnectProvider", e)),
        }
    }
}
