//! The checks that need AWS before any write (docs/reference.md lists them; the managed-policy
//! headroom once the plan is known): independent ones run at once and every failure is reported
//! together, each a `UserError` saying what to do. `down` runs none of them.

use crate::aws;
use crate::ctx::{Background, Ctx};
use crate::error::UserError;
use crate::error::combine_errors;
use crate::events::Event;
use crate::facts::prepared::Facts;
use crate::facts::prepared::Intent;
use crate::model::{Action, Level, NodeSpec, Note, Plan};
use crate::spec::{IdentityMode, Spec};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::resources::eks;
use crate::resources::eks::POD_IDENTITY_AGENT;

#[derive(Debug, PartialEq, Eq)]
enum Agent {
    NotNeeded,
    Present,
    Missing,
}

/// What preflight found that `up` acts on before its plan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Preflight {
    /// `up` installs the Pod Identity agent add-on (the plan asked for it and it is missing).
    pub install_agent: bool,
    /// What preflight read that doctor reads too (`gather::shared`: the Spot service-linked
    /// role), with the reads AWS refused; the setup a plan leaves starts from it (None: `down`).
    pub found: Option<crate::facts::setup::Setup>,
    /// `up` creates it (the plan opted in and it is missing).
    pub create_spot_role: bool,
    /// The queue's KMS key (`interruption.kms_key_id`), resolved.
    pub kms_key: Option<crate::facts::prepared::KmsKeyFacts>,
}

use crate::checks::cluster::SPOT_ROLE;

/// Read-only checks before any write.
pub async fn check(ctx: &Ctx, spec: &Spec, facts: &Facts, cmd: Intent) -> Result<Preflight> {
    if cmd == Intent::Down {
        return Ok(Preflight::default());
    }
    // Discovery's choice of subnets and security group is checked here too (memoised: the
    // engine's own call afterwards reuses it), so every problem is reported in one run and
    // nothing is written unless all of it passes.
    let (auth, agent, oidc, role, discovery, shared, kms) = tokio::join!(
        async { authentication_mode(spec, facts) },
        pod_identity_agent(ctx, spec, facts),
        oidc_provider(ctx, spec, facts),
        existing_node_role(ctx, spec),
        crate::gather::discovery::select(ctx, spec, facts, cmd),
        crate::gather::shared::read(&ctx.readers),
        kms_key(ctx, spec, facts),
    );
    let mut errors: Vec<anyhow::Error> = Vec::new();
    let agent_missing = match agent {
        Ok(a) => a == Agent::Missing,
        Err(e) => {
            errors.push(e);
            false
        }
    };
    // A refused read is said with the checks (`spot-role-unreadable`), its check skipped.
    let mut found = crate::facts::setup::Setup::empty(&spec.cluster);
    if let Err(e) = shared.into(&mut found) {
        errors.push(e);
    }
    let spot = found.spot_service_linked_role;
    let kms_key = match kms {
        Ok(k) => k,
        Err(e) => {
            errors.push(e);
            None
        }
    };
    errors.extend([auth.err(), oidc.err(), role.err(), discovery.err()].into_iter().flatten());
    let c = &spec.cluster;
    if agent_missing && !spec.identity.create_pod_identity_agent {
        errors.push(
            UserError::new(format!(
                "the {POD_IDENTITY_AGENT} add-on is not installed on EKS cluster {c}; Karpenter's controller gets its AWS credentials through EKS Pod Identity, which needs it"
            ))
            .hint(format!(
                "install it (aws eks create-addon --cluster-name {c} --addon-name {POD_IDENTITY_AGENT} --region {}), or set `create_pod_identity_agent = true` under [identity] in the plan to have `karpctl up` install it, or use `mode = \"irsa\"`",
                facts.region
            ))
            .into(),
        );
    }
    combine_errors(errors)?;
    if agent_missing {
        // Every other check passed and the plan asked for the add-on: `up` installs it once
        // the plan has no conflicts, as its first write (see engine::apply_plan).
        ctx.reporter.event(Event::Note { level: Level::Info, text: &format!(
            "the {POD_IDENTITY_AGENT} add-on is not installed; `karpctl up` will install it (create_pod_identity_agent = true)"
        ) });
    }
    let create_spot_role = spec.create_spot_role && spot == Some(false);
    if create_spot_role {
        ctx.reporter.event(Event::Note { level: Level::Info, text: &format!(
            "the account has no {SPOT_ROLE}; `karpctl up` will create it (account.create_spot_service_linked_role = true; account-wide, so `down` never deletes it)"
        ) });
    }
    Ok(Preflight {
        install_agent: agent_missing && cmd == Intent::Up,
        found: Some(found),
        create_spot_role: create_spot_role && cmd == Intent::Up,
        kms_key,
    })
}

/// AWS's default quota of managed policies attached to one IAM role (Service Quotas, IAM:
/// "Managed policies per role"; adjustable up to 20). No account has less, so a role that ends
/// with at most this many needs no look-up.
pub const POLICIES_PER_ROLE: usize = 10;

/// One role the plan attaches managed policies to: how many are attached today and the policies
/// the plan attaches that are not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleHeadroom {
    pub role: String,
    pub attached: usize,
    pub adding: Vec<String>,
}

impl RoleHeadroom {
    pub fn total(&self) -> usize {
        self.attached + self.adding.len()
    }
}

/// Pure: per role, the policies the plan attaches (its attachment steps that are not deletes).
pub fn attaching(plan: &Plan) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &plan.steps {
        if let (NodeSpec::RolePolicyAttachment(a), false) = (&s.node.spec, s.action == Action::Delete) {
            out.entry(a.role.clone()).or_default().insert(a.policy_arn.clone());
        }
    }
    out
}

/// Pure: the roles of `uses` that would end over `quota`, with the message and the fix.
pub fn headroom_error(uses: &[RoleHeadroom], quota: usize, quota_note: Option<&str>) -> Option<UserError> {
    let over: Vec<&RoleHeadroom> = uses.iter().filter(|u| u.total() > quota).collect();
    if over.is_empty() {
        return None;
    }
    let lines: Vec<String> = over
        .iter()
        .map(|u| {
            format!(
                "IAM role {} has {} managed policies attached and this plan attaches {} more ({}): {} in all, over the account's quota of {quota} managed policies per role",
                u.role,
                u.attached,
                u.adding.len(),
                u.adding.iter().map(|a| a.rsplit('/').next().unwrap_or(a)).collect::<Vec<_>>().join(", "),
                u.total()
            )
        })
        .collect();
    let mut message = lines.join("; ");
    message.push_str(
        "; IAM would refuse AttachRolePolicy part-way (LimitExceeded). Old policies in identity.retire_policies count: they are taken off only after karpctl's are attached, so that the controller never lacks a permission",
    );
    if let Some(n) = quota_note {
        message.push_str(&format!(" ({n})"));
    }
    let hint = format!(
        "raise the quota in Service Quotas (AWS Identity and Access Management, \"Managed policies per role\", adjustable up to 20) to at least {}, or detach a managed policy the role does not need, then run `karpctl up` again",
        over.iter().map(|u| u.total()).max().unwrap_or(quota)
    );
    let data = serde_json::json!({"policies_per_role": {
        "quota": quota,
        "roles": over.iter().map(|u| serde_json::json!({"role": u.role, "attached": u.attached, "adding": u.adding, "total": u.total()})).collect::<Vec<_>>(),
    }});
    Some(UserError::new(message).hint(hint).data(data))
}

/// The account's quota of managed policies per role (`iam:GetAccountSummary`, SummaryMap
/// `AttachedPoliciesPerRoleQuota`), or AWS's default with the reason it could not be read.
async fn policies_per_role(ctx: &Ctx) -> (usize, Option<String>) {
    match ctx.readers.iam.policies_per_role_quota().await {
        Ok(Some(n)) => (n, None),
        Ok(None) => (
            POLICIES_PER_ROLE,
            Some(format!(
                "iam:GetAccountSummary gave no AttachedPoliciesPerRoleQuota; AWS's default of {POLICIES_PER_ROLE} was assumed"
            )),
        ),
        Err(e) => {
            let why = if aws::is_refused(&e) { "was refused".to_string() } else { format!("failed ({e})") };
            (
                POLICIES_PER_ROLE,
                Some(format!(
                    "iam:GetAccountSummary {why}, so AWS's default quota of {POLICIES_PER_ROLE} was assumed; if the quota was raised, allow it to the credentials karpctl runs with or set {}=<quota>",
                    crate::settings::IAM_POLICIES_PER_ROLE
                )),
            )
        }
    }
}

/// Before any write: whether the managed policies the plan attaches fit each role's quota. What is
/// attached today comes from the attachments' own reads (memoised: no new call);
/// `iam:GetAccountSummary` is read only when a role would end with more than AWS's default quota,
/// so a converged run, or one that attaches within the default, makes no extra call. Over the
/// quota, `up` stops here (exit 1, nothing written); `diff` gets a warning saying so.
pub async fn policy_headroom(ctx: &Ctx, plan: &Plan, cmd: Intent) -> Result<Option<Note>> {
    let mut uses = Vec::new();
    for (role, policies) in attaching(plan) {
        let today = crate::resources::role_policy_attachment::attached(ctx, &role).await?.unwrap_or_default();
        let adding: Vec<String> = policies.into_iter().filter(|p| !today.contains(p)).collect();
        if !adding.is_empty() {
            uses.push(RoleHeadroom { role, attached: today.len(), adding });
        }
    }
    if uses.iter().all(|u| u.total() <= POLICIES_PER_ROLE) {
        return Ok(None);
    }
    // KARPCTL_IAM_POLICIES_PER_ROLE says the quota when the credentials may not read it.
    let (quota, note) = match ctx.settings.iam_policies_per_role {
        Some(n) => (n, None),
        None => policies_per_role(ctx).await,
    };
    if let Some(n) = &note {
        ctx.reporter.event(Event::Note { level: Level::Warning, text: n });
    }
    let Some(e) = headroom_error(&uses, quota, note.as_deref()) else { return Ok(None) };
    if cmd == Intent::Up {
        return Err(e.into());
    }
    Ok(Some(Note {
        id: "role-policy-quota".into(),
        level: Level::Warning,
        message: format!("{}; `karpctl up` stops before any write until it fits: {}", e.message, e.hint.unwrap_or_default()),
    }))
}

/// The queue's KMS key: for a key the plan names, it must exist, be enabled and be customer
/// managed (an AWS managed key's policy cannot let EventBridge in), and its ARN is what the
/// controller's kms:Decrypt names; its key policy is read for the readiness checks (a refused
/// read skips them, said so). For `"create"`, the ARN of karpctl's key if it exists already.
async fn kms_key(ctx: &Ctx, spec: &Spec, facts: &Facts) -> Result<Option<crate::facts::prepared::KmsKeyFacts>> {
    use crate::facts::prepared::KmsKeyFacts;
    use crate::resources::kms_key;
    let i = &spec.interruption;
    let Some(key) = i.kms_key_id.as_deref().filter(|_| i.enabled) else { return Ok(None) };
    let field = "interruption.kms_key_id";
    let denied = aws::is_refused;
    if i.create_key {
        return match kms_key::described(ctx, key).await {
            Ok(live) => Ok(Some(KmsKeyFacts { arn: live.map(|k| k.arn), ..Default::default() })),
            Err(e) if denied(&e) => Err(UserError::new(format!(
                "{field} = \"create\": cannot tell whether karpctl's key {key} exists (kms:DescribeKey was refused)"
            ))
            .hint("allow kms:DescribeKey, kms:CreateKey, kms:CreateAlias, kms:GetKeyPolicy, kms:PutKeyPolicy, kms:ListResourceTags and kms:TagResource to the credentials karpctl runs with")
            .into()),
            Err(e) => Err(e),
        };
    }
    let where_ = format!("account {}, region {}", facts.account_id, facts.region);
    let live = match kms_key::describe(ctx, key).await {
        Ok(Some(k)) => k,
        Ok(None) => {
            return Err(UserError::new(format!("{field} = {key:?}: there is no such KMS key in {where_}"))
                .hint("give the key's id, ARN, alias or alias ARN (aws kms list-aliases), or \"create\" to have karpctl make one")
                .into());
        }
        Err(e) if denied(&e) && key.starts_with("arn:") && key.contains(":key/") => {
            // A key ARN needs no resolving: the controller's grant can name it as given.
            return Ok(Some(KmsKeyFacts {
                arn: Some(key.to_string()),
                policy: None,
                policy_unreadable: crate::gather::shared::refusal(&e, crate::facts::finding::Code::KmsKeyUnreadable),
            }));
        }
        Err(e) if denied(&e) => {
            return Err(UserError::new(format!(
                "{field} = {key:?}: cannot resolve the key to its ARN (kms:DescribeKey was refused); the controller's kms:Decrypt must name the key's ARN"
            ))
            .hint("allow kms:DescribeKey on the key to the credentials karpctl runs with, or give the key's ARN (arn:aws:kms:<region>:<account>:key/<id>)")
            .into());
        }
        Err(e) => return Err(e),
    };
    if live.manager == "AWS" {
        return Err(UserError::new(format!(
            "{field} = {key:?} is an AWS managed key ({}): its key policy cannot let events.amazonaws.com use it, so EventBridge could never deliver an interruption event",
            live.arn
        ))
        .hint("use a customer managed key whose key policy lets events.amazonaws.com use kms:GenerateDataKey and kms:Decrypt, \"create\", or remove kms_key_id to use SSE-SQS")
        .into());
    }
    if live.state != "Enabled" {
        return Err(UserError::new(format!(
            "{field} = {key:?}: KMS key {} is {}; SQS cannot encrypt with it and EventBridge cannot deliver",
            live.arn, live.state
        ))
        .hint(format!(
            "enable the key (aws kms enable-key --key-id {}; a key pending deletion needs aws kms cancel-key-deletion first), or choose another key",
            live.arn
        ))
        .into());
    }
    let (policy, policy_unreadable) = match kms_key::policy(ctx, &live.arn).await {
        Ok(p) => (Some(p), None),
        Err(e) if denied(&e) => (None, crate::gather::shared::refusal(&e, crate::facts::finding::Code::KmsKeyUnreadable)),
        Err(e) => return Err(e),
    };
    Ok(Some(KmsKeyFacts { arn: Some(live.arn), policy, policy_unreadable }))
}

fn authentication_mode(spec: &Spec, facts: &Facts) -> Result<()> {
    if facts.cluster.authentication_mode == "CONFIG_MAP" {
        let c = &spec.cluster;
        return Err(UserError::new(format!(
            "EKS cluster {c} uses authentication mode CONFIG_MAP; Karpenter's nodes join through an EKS access entry, which needs API_AND_CONFIG_MAP or API"
        ))
        .hint(format!(
            "switch the cluster (karpctl never changes it; aws-auth mappings keep working): aws eks update-cluster-config --name {c} --access-config authenticationMode=API_AND_CONFIG_MAP --region {}",
            facts.region
        ))
        .into());
    }
    Ok(())
}

/// Checks that need only the plan and the account, started as soon as STS has answered, so that
/// they run while EKS still describes the cluster: the add-on's DescribeAddon (memoised; `check`
/// takes its answer, or makes the call again if this one failed). Dropping the returned task
/// cancels it.
pub fn start_early_checks(ctx: &Arc<Ctx>, spec: &Spec, cmd: Intent) -> Option<Background<()>> {
    if cmd == Intent::Down || spec.identity.mode != IdentityMode::PodIdentity {
        return None;
    }
    let (ctx, cluster) = (ctx.clone(), spec.cluster.clone());
    Some(Background::spawn(async move {
        let _ = addon_status(&ctx, &cluster).await;
    }))
}

/// The add-on's status ("" when EKS gives none), or None when it is not installed. Memoised.
async fn addon_status(ctx: &Ctx, cluster: &str) -> Result<Option<String>> {
    ctx.readers.eks.addon_status(cluster, POD_IDENTITY_AGENT).await
}

async fn pod_identity_agent(ctx: &Ctx, spec: &Spec, facts: &Facts) -> Result<Agent> {
    // EKS Auto Mode has the Pod Identity agent built in.
    if spec.identity.mode != IdentityMode::PodIdentity || facts.cluster.auto_mode {
        return Ok(Agent::NotNeeded);
    }
    let Some(status) = addon_status(ctx, &spec.cluster).await? else { return Ok(Agent::Missing) };
    match status.as_str() {
        "DELETING" => Ok(Agent::Missing),
        "" | "ACTIVE" | "CREATING" | "UPDATING" => Ok(Agent::Present),
        other => {
            ctx.reporter.event(Event::Note {
                level: Level::Warning,
                text: &format!("the {POD_IDENTITY_AGENT} add-on is {other}; Karpenter needs it working to get AWS credentials"),
            });
            Ok(Agent::Present)
        }
    }
}

/// Install the add-on (`up`, create_pod_identity_agent = true, the add-on missing). CreateAddon
/// needs an ACTIVE cluster; when the cluster is busy (UPDATING during a version upgrade), this
/// returns at once, so that `up`'s other steps are not held up, and the Pod Identity step installs
/// the add-on once the shared wait for ACTIVE is over (`eks::install_pending_agent`).
pub async fn create_agent(ctx: &Ctx, spec: &Spec) -> Result<()> {
    let status = eks::remembered_status(ctx, &spec.cluster).await?;
    if crate::facts::prepared::ClusterState::of(&status) != crate::facts::prepared::ClusterState::Active {
        eks::defer_agent(ctx, &spec.cluster, &spec.tags);
        ctx.reporter.event(Event::Note { level: Level::Info, text: &format!(
            "EKS cluster {} is {status}; the {POD_IDENTITY_AGENT} add-on is installed with the Pod Identity association, once the cluster is ACTIVE",
            spec.cluster
        ) });
        return Ok(());
    }
    eks::install_agent(ctx, &spec.cluster, &spec.tags).await
}

/// The IAM OIDC provider ARN for a cluster's issuer URL.
pub fn oidc_provider_arn(partition: &str, account_id: &str, issuer: &str) -> String {
    let host_path = issuer.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
    format!("arn:{partition}:iam::{account_id}:oidc-provider/{host_path}")
}

async fn oidc_provider(ctx: &Ctx, spec: &Spec, facts: &Facts) -> Result<()> {
    if spec.identity.mode != IdentityMode::Irsa {
        return Ok(());
    }
    let c = &spec.cluster;
    let issuer = &facts.cluster.oidc_issuer;
    if issuer.is_empty() {
        return Err(UserError::new(format!("`identity.mode = \"irsa\"` but EKS cluster {c} reports no OIDC issuer"))
            .hint("use the default Pod Identity mode")
            .into());
    }
    let arn = oidc_provider_arn(&facts.partition, &facts.account_id, issuer);
    match ctx.readers.iam.oidc_provider_exists(&arn).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(UserError::new(format!(
            "`identity.mode = \"irsa\"` needs the cluster's IAM OIDC provider, and {arn} does not exist"
        ))
        .hint(format!(
            "create it (eksctl utils associate-iam-oidc-provider --cluster {c} --region {} --approve), or use the default Pod Identity mode",
            facts.region
        ))
        .into()),
        Err(e) => Err(e),
    }
}

async fn existing_node_role(ctx: &Ctx, spec: &Spec) -> Result<()> {
    let Some(given) = &spec.identity.existing_node_role else { return Ok(()) };
    let name = given.rsplit('/').next().unwrap_or(given);
    // Memoised: the engine takes the role's real ARN (with its path) from the same read.
    match crate::resources::iam_role::get_role(ctx, name).await? {
        Some(live) => {
            if given.starts_with("arn:") && live.arn != *given {
                return Err(UserError::new(format!(
                    "`identity.existing_node_role` is {given}, but the role named {name} in this account is {}",
                    live.arn
                ))
                .hint("use the role's exact ARN (path and account included), or just its name")
                .into());
            }
            Ok(())
        }
        None => Err(UserError::new(format!(
            "`identity.existing_node_role` names IAM role {name}, which does not exist in account {}",
            ctx.account_id
        ))
        .hint("fix the name, create the role first, or remove `existing_node_role` to have karpctl create the node role")
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_errors_are_flat_and_keep_every_hint() {
        let a = || anyhow::Error::from(UserError::new("a").hint("ha"));
        let b = || anyhow::Error::from(UserError::new("b").hint("hb"));
        let inner = combine_errors(vec![a(), b()]).unwrap_err();
        let e =
            combine_errors(vec![anyhow::Error::from(UserError::new("c")), inner]).unwrap_err().downcast::<UserError>().unwrap();
        assert_eq!(e.message, "3 preflight checks failed:\n  - c\n  - a\n  - b");
        assert_eq!(e.hint.as_deref(), Some("ha\n      hb"));
        let one = combine_errors(vec![a()]).unwrap_err().downcast::<UserError>().unwrap();
        assert_eq!((one.message.as_str(), one.hint.as_deref()), ("a", Some("ha")));
        assert!(combine_errors(vec![]).is_ok());
        // Each error stays whole: its data reaches the JSON document, alone or combined.
        let d = || anyhow::Error::from(UserError::new("d").data(serde_json::json!({"subnets": ["s-1"]})));
        let one = combine_errors(vec![d()]).unwrap_err().downcast::<UserError>().unwrap();
        assert_eq!(one.data, Some(serde_json::json!({"subnets": ["s-1"]})));
        let two = combine_errors(vec![a(), d()]).unwrap_err().downcast::<UserError>().unwrap();
        assert_eq!(two.data, Some(serde_json::json!({"subnets": ["s-1"]})));
        assert_eq!(two.parts.iter().map(|u| u.message.as_str()).collect::<Vec<_>>(), ["a", "d"]);
    }

    #[test]
    fn policy_headroom_counts_what_is_attached_and_what_the_plan_attaches() {
        use crate::model::{AttachmentSpec, Kind, Node, Step};
        let step = |id: &str, kind: Kind, action: Action, role: &str, arn: &str| {
            let a = AttachmentSpec { role: role.into(), policy_arn: arn.into(), owner_from: "controller-role".into() };
            let spec = if kind == Kind::RetiredPolicy { NodeSpec::RetiredPolicy(a) } else { NodeSpec::RolePolicyAttachment(a) };
            let node = Node::new(id, id, spec);
            Step {
                id: id.into(),
                kind,
                name: id.into(),
                action,
                changes: vec![],
                deps: vec![],
                node,
                observed: None,
                removed_with: None,
            }
        };
        let plan = Plan {
            steps: vec![
                step("a1", Kind::RolePolicyAttachment, Action::Create, "ctrl", "arn:aws:iam::1:policy/A"),
                step("a2", Kind::RolePolicyAttachment, Action::Create, "ctrl", "arn:aws:iam::1:policy/B"),
                step("n1", Kind::RolePolicyAttachment, Action::Create, "node", "arn:aws:iam::aws:policy/N"),
                // Deletes and retirements free room only later: they never count as room.
                step("gone", Kind::RolePolicyAttachment, Action::Delete, "ctrl", "arn:aws:iam::1:policy/Gone"),
                step("old", Kind::RetiredPolicy, Action::Delete, "ctrl", "arn:aws:iam::1:policy/Old"),
            ],
            ..Default::default()
        };
        let by_role = attaching(&plan);
        assert_eq!(by_role.keys().collect::<Vec<_>>(), ["ctrl", "node"]);
        assert_eq!(by_role["ctrl"].len(), 2);
        let ctrl = RoleHeadroom {
            role: "ctrl".into(),
            attached: 9,
            adding: vec!["arn:aws:iam::1:policy/A".into(), "arn:aws:iam::1:policy/B".into()],
        };
        let node = RoleHeadroom { role: "node".into(), attached: 4, adding: vec!["arn:aws:iam::aws:policy/N".into()] };
        let e = headroom_error(&[ctrl.clone(), node.clone()], 10, None).expect("9 + 2 is over 10");
        assert!(e.message.starts_with("IAM role ctrl has 9 managed policies attached and this plan attaches 2 more (A, B): 11 in all, over the account's quota of 10"), "{}", e.message);
        assert!(!e.message.contains("role node"), "the node role fits: {}", e.message);
        let hint = e.hint.unwrap();
        assert!(hint.contains("Managed policies per role") && hint.contains("at least 11") && hint.contains("detach"), "{hint}");
        assert_eq!(e.data.unwrap()["policies_per_role"]["roles"][0]["total"], 11);
        assert!(headroom_error(&[ctrl.clone(), node], 20, None).is_none(), "a raised quota fits");
        let exact = RoleHeadroom { attached: 8, ..ctrl };
        assert!(headroom_error(&[exact], 10, None).is_none(), "10 of 10 fits");
    }

    #[test]
    fn oidc_provider_arns_drop_the_scheme_and_trailing_slash() {
        assert_eq!(
            oidc_provider_arn("aws", "123456789012", "https://oidc.eks.us-east-1.amazonaws.com/id/ABC/"),
            "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
    }

    #[test]
    fn config_map_mode_fails_with_the_remedy() {
        let spec = crate::plan_file::defaults("c1").unwrap();
        let mut facts = Facts::example();
        facts.cluster.authentication_mode = "CONFIG_MAP".into();
        let e = authentication_mode(&spec, &facts).unwrap_err().downcast::<UserError>().unwrap();
        assert!(e.message.contains("CONFIG_MAP"));
        assert!(
            e.hint
                .unwrap()
                .contains("aws eks update-cluster-config --name c1 --access-config authenticationMode=API_AND_CONFIG_MAP")
        );
        facts.cluster.authentication_mode = "API_AND_CONFIG_MAP".into();
        assert!(authentication_mode(&spec, &facts).is_ok());
    }
}
