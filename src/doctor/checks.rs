//! The checks: pure functions of a gathered [`Setup`], each finding with a stable code.

use super::analysis::{self, allows, glob, statements};
use super::model::{Finding, IdentityMode, Setup, Severity, strings};
use crate::karpenter_iam::{self, ControllerPolicyInputs};
use crate::policy_doc::size_without_whitespace;
use crate::readiness;
use crate::resources::event_rule::RULES;
use serde_json::Value;
use std::collections::BTreeSet;

/// IAM's limit on a managed policy, whitespace not counted.
pub const MANAGED_POLICY_LIMIT: usize = 6144;
/// A policy above this share of the limit leaves no room for the next release's statements.
pub const NEAR_LIMIT: usize = MANAGED_POLICY_LIMIT * 9 / 10;

/// Every check's code with what it looks at, in checklist order.
pub const CHECKS: [(&str, &str); 32] = [
    ("controller-role-not-found", "Karpenter's controller role is found"),
    ("controller-missing-permissions", "the controller role allows every action of Karpenter's permission set"),
    ("controller-passrole-unscoped", "the controller may pass only the node roles"),
    ("policy-near-size-limit", "the controller's customer managed policies have room under IAM's size limit"),
    ("pod-identity-agent-missing", "the eks-pod-identity-agent add-on is installed (Pod Identity)"),
    ("cluster-auth-config-map", "the cluster accepts access entries"),
    ("node-role-not-found", "the node roles exist"),
    ("node-role-missing-managed-policy", "the node roles have the managed policies nodes need"),
    ("node-role-no-access-entry", "each node role has an EC2 access entry"),
    ("node-access-entry-stale", "no access entry predates its role"),
    ("queue-not-found", "an interruption queue is found"),
    ("queue-kms-aws-managed", "EventBridge can write to the queue's encryption key"),
    ("queue-policy-blocks-eventbridge", "the queue policy lets EventBridge send"),
    ("queue-policy-unconditioned", "the queue policy limits EventBridge to the account's rules"),
    ("queue-shared", "the queue serves this cluster only"),
    ("interruption-rule-missing", "a rule sends each interruption event to the queue"),
    ("interruption-rule-disabled", "those rules are enabled"),
    ("event-bus-rule-quota", "the default event bus has room for more rules (EventBridge's quota per bus)"),
    ("discovery-no-subnets", "subnets carry the discovery tag"),
    ("discovery-az-without-subnet", "every AZ of the cluster has a discovery-tagged subnet"),
    ("discovery-no-security-groups", "a security group carries the discovery tag"),
    ("discovery-multiple-security-groups", "exactly one security group carries it"),
    ("discovery-outside-cluster-vpc", "tagged subnets and groups are in the cluster's VPC"),
    (readiness::SUBNET_NO_WAY_OUT, "every discovery-tagged subnet has a way out"),
    (readiness::SUBNET_WAY_OUT_UNCONFIRMED, "karpctl can see each tagged subnet's way out"),
    (readiness::NODE_SG_BLOCKS_CONTROL_PLANE, "the node security group lets the control plane in"),
    (readiness::KMS_KEY_POLICY_EVENTS, "EventBridge may use the queue's KMS key"),
    (readiness::KMS_KEY_POLICY_CONTROLLER, "the controller may decrypt with the queue's KMS key"),
    ("spot-service-linked-role-missing", "the Spot service-linked role exists"),
    ("controller-trust-mismatch", "the controller role trusts Karpenter's service account"),
    (
        readiness::POD_IDENTITY_SESSION_TAGS_DISABLED,
        "the Pod Identity association passes the session tags the role's trust requires",
    ),
    (readiness::POD_IDENTITY_SESSION_POLICY, "the Pod Identity association has no session policy cutting the role's permissions"),
];

/// Each read doctor makes that AWS may refuse: the finding it becomes, what it reads, and the
/// checks it feeds (skipped when it is refused; every other check still runs).
pub const UNREADABLE: [(&str, &str, &[&str]); 15] = [
    // A node group's role is then judged as a node role of Karpenter's (node-role checks).
    ("nodegroups-unreadable", "the cluster's managed node groups (eks:ListNodegroups, eks:DescribeNodegroup)", &[]),
    (
        "cluster-unreadable",
        "the EKS cluster (eks:DescribeCluster)",
        &[
            "cluster-auth-config-map",
            "controller-role-not-found",
            "controller-trust-mismatch",
            "pod-identity-agent-missing",
            "discovery-az-without-subnet",
            "discovery-outside-cluster-vpc",
            readiness::SUBNET_NO_WAY_OUT,
            readiness::SUBNET_WAY_OUT_UNCONFIRMED,
            readiness::NODE_SG_BLOCKS_CONTROL_PLANE,
        ],
    ),
    (
        "controller-unreadable",
        "Karpenter's controller role and its policies",
        &[
            "controller-role-not-found",
            "controller-missing-permissions",
            "controller-passrole-unscoped",
            "policy-near-size-limit",
            "controller-trust-mismatch",
            readiness::KMS_KEY_POLICY_CONTROLLER,
            readiness::POD_IDENTITY_SESSION_TAGS_DISABLED,
            readiness::POD_IDENTITY_SESSION_POLICY,
        ],
    ),
    ("access-entries-unreadable", "the cluster's access entries", &["node-role-no-access-entry", "node-access-entry-stale"]),
    ("pod-identity-agent-unreadable", "the eks-pod-identity-agent add-on", &["pod-identity-agent-missing"]),
    ("spot-role-unreadable", "the account's Spot service-linked role (iam:ListRoles)", &["spot-service-linked-role-missing"]),
    ("clusters-unreadable", "the region's EKS clusters", &["queue-shared"]),
    (
        "interruption-rules-unreadable",
        "the EventBridge rules",
        &["interruption-rule-missing", "interruption-rule-disabled", "queue-not-found", "queue-shared", "event-bus-rule-quota"],
    ),
    (
        "subnets-unreadable",
        "the cluster's and the discovery-tagged subnets",
        &[
            "discovery-no-subnets",
            "discovery-az-without-subnet",
            "discovery-outside-cluster-vpc",
            readiness::SUBNET_NO_WAY_OUT,
            readiness::SUBNET_WAY_OUT_UNCONFIRMED,
        ],
    ),
    (
        "security-groups-unreadable",
        "the discovery-tagged security groups",
        &[
            "discovery-no-security-groups",
            "discovery-multiple-security-groups",
            "discovery-outside-cluster-vpc",
            readiness::NODE_SG_BLOCKS_CONTROL_PLANE,
        ],
    ),
    (
        "route-tables-unreadable",
        "the VPC's route tables and endpoints",
        &[readiness::SUBNET_NO_WAY_OUT, readiness::SUBNET_WAY_OUT_UNCONFIRMED],
    ),
    (
        "queue-unreadable",
        "the interruption queue",
        &[
            "queue-not-found",
            "queue-kms-aws-managed",
            "queue-policy-blocks-eventbridge",
            "queue-policy-unconditioned",
            readiness::KMS_KEY_POLICY_EVENTS,
            readiness::KMS_KEY_POLICY_CONTROLLER,
        ],
    ),
    ("rule-tags-unreadable", "the interruption rules' tags", &["queue-shared"]),
    (
        "node-roles-unreadable",
        "the node roles",
        &["node-role-not-found", "node-role-missing-managed-policy", "node-access-entry-stale"],
    ),
    (
        "kms-key-unreadable",
        "the queue's KMS key and its key policy",
        &[readiness::KMS_KEY_POLICY_EVENTS, readiness::KMS_KEY_POLICY_CONTROLLER, "controller-missing-permissions"],
    ),
];

/// The findings, worst first, and the codes that were checked and found nothing.
#[derive(Debug, Default)]
pub struct Outcome {
    pub findings: Vec<Finding>,
    pub passed: Vec<&'static str>,
}

#[derive(Default)]
struct Checker {
    findings: Vec<Finding>,
    ran: BTreeSet<&'static str>,
    /// Checks whose input AWS refused to show: neither run nor reported.
    skip: BTreeSet<&'static str>,
}

impl Checker {
    fn ran(&mut self, code: &'static str) {
        if !self.skip.contains(code) {
            self.ran.insert(code);
        }
    }
    fn add(&mut self, code: &'static str, severity: Severity, resource: impl Into<String>, message: String, hint: String) {
        if self.skip.contains(code) {
            return;
        }
        self.ran.insert(code);
        self.findings.push(Finding { code, severity, resource: resource.into(), message, hint });
    }
    /// A check `up` and `diff` run too (`src/readiness.rs`), as a finding.
    fn readiness(&mut self, code: &'static str, found: Option<readiness::Check>) {
        self.ran(code);
        if let Some(f) = found {
            let severity = match f.severity {
                readiness::Severity::Error => Severity::Error,
                readiness::Severity::Warning => Severity::Warning,
            };
            self.add(f.code, severity, f.resource, f.message, f.fix);
        }
    }
}

pub fn check(s: &Setup) -> Outcome {
    let mut c = Checker::default();
    for u in &s.unreadable {
        if let Some((_, _, skipped)) = UNREADABLE.iter().find(|(code, _, _)| *code == u.code) {
            c.skip.extend(skipped.iter().copied());
        }
    }
    controller(s, &mut c);
    cluster_access(s, &mut c);
    node_roles(s, &mut c);
    queue(s, &mut c);
    bus_quota(s, &mut c);
    discovery(s, &mut c);
    c.readiness(readiness::SPOT_ROLE_MISSING, readiness::spot_role(s.spot_service_linked_role));
    network(s, &mut c);
    kms_key(s, &mut c);
    unreadable(s, &mut c);
    let mut findings = c.findings;
    findings.sort_by(|a, b| (a.severity, order(a.code), &a.resource).cmp(&(b.severity, order(b.code), &b.resource)));
    let failed: BTreeSet<&str> = findings.iter().map(|f| f.code).collect();
    let passed = CHECKS.iter().map(|(code, _)| *code).filter(|code| c.ran.contains(code) && !failed.contains(code)).collect();
    Outcome { findings, passed }
}

/// The tagged subnets of the cluster's VPC and what judging them needs, as `up` and `diff` build
/// them from the plan (`any_vpc`: with no cluster VPC known, take every tagged subnet). A subnet
/// in another VPC is `discovery-outside-cluster-vpc`; its routes are not read.
pub fn subnets_as_judged(s: &Setup, any_vpc: bool) -> (Vec<readiness::TaggedSubnet>, crate::egress::Network) {
    let ipv6 = s.ip_family.eq_ignore_ascii_case("ipv6");
    let in_vpc: Vec<&super::model::TaggedSubnet> =
        s.discovery.subnets.iter().filter(|t| t.vpc_id == s.cluster_vpc || (any_vpc && s.cluster_vpc.is_empty())).collect();
    let tagged = in_vpc
        .iter()
        .map(|t| readiness::TaggedSubnet {
            candidate: crate::egress::Candidate::new(&t.id, t.map_public_ip, &s.route_tables, ipv6),
            karpctls: t.karpctls,
        })
        .collect();
    let net = crate::egress::Network {
        region: s.region.clone(),
        endpoints: s.endpoints.clone(),
        interruption: s.queue.as_ref().is_some_and(|q| q.exists),
        pod_identity: s.mode == Some(IdentityMode::PodIdentity),
        associate_public_ip: s.associate_public_ip,
        shared_by: in_vpc.iter().map(|t| t.owner_id.as_str()).find(|o| !o.is_empty() && *o != s.account_id).map(str::to_string),
    };
    (tagged, net)
}

/// The tagged subnets' way out and the node security group's control-plane rules (the checks
/// `up` and `diff` make on what they tag).
fn network(s: &Setup, c: &mut Checker) {
    if !s.route_tables.is_empty() && !s.discovery.subnets.is_empty() {
        let (tagged, net) = subnets_as_judged(s, false);
        let tag = (s.discovery.tag_key.as_str(), s.discovery.tag_value.as_str());
        for (code, found) in readiness::tagged_subnets_have_a_way_out(tag, &tagged, &net) {
            c.readiness(code, found);
        }
    }
    if !s.control_plane_groups.is_empty() && !s.discovery.groups.is_empty() {
        // Karpenter attaches every tagged group: a node gets the union of their rules.
        let mut rules = readiness::GroupRules::default();
        for g in &s.discovery.groups {
            rules.ingress.extend(g.rules.ingress.iter().cloned());
            rules.egress.extend(g.rules.egress.iter().cloned());
        }
        let ids: Vec<&str> = s.discovery.groups.iter().map(|g| g.id.as_str()).collect();
        c.readiness(
            readiness::NODE_SG_BLOCKS_CONTROL_PLANE,
            readiness::node_group_lets_control_plane_in(&ids.join("+"), &rules, &s.control_plane_groups),
        );
    }
}

/// The queue's customer managed key: EventBridge and the controller may use it.
fn kms_key(s: &Setup, c: &mut Checker) {
    let Some(q) = &s.queue else { return };
    let (Some(arn), Some(policy)) = (&q.kms_key_arn, &q.kms_key_policy) else { return };
    c.readiness(readiness::KMS_KEY_POLICY_EVENTS, readiness::kms_key_lets_eventbridge_in(arn, policy));
    if let Some(role) = s.controller.as_ref().filter(|r| r.exists) {
        c.readiness(
            readiness::KMS_KEY_POLICY_CONTROLLER,
            readiness::kms_key_lets_controller_decrypt(arn, policy, &s.partition, &s.account_id, &role.arn),
        );
    }
}

/// Each refused read, as an error naming the permission and the checks it skipped.
fn unreadable(s: &Setup, c: &mut Checker) {
    for u in &s.unreadable {
        let Some((code, what, skipped)) = UNREADABLE.iter().find(|(code, _, _)| *code == u.code) else { continue };
        c.findings.push(Finding {
            code,
            severity: Severity::Error,
            resource: u.operation.clone(),
            message: format!(
                "doctor could not read {what}: AWS refused {} ({}); skipped: {}",
                u.operation,
                u.aws_code,
                skipped.join(", ")
            ),
            hint: format!(
                "grant {} to the credentials doctor runs with (doctor only reads: iam:Get*/List*, eks:Describe*/List*, events:List*, sqs:GetQueueUrl/GetQueueAttributes, ec2:Describe*, kms:DescribeKey/GetKeyPolicy)",
                u.operation
            ),
        });
    }
}

fn order(code: &str) -> usize {
    CHECKS.iter().position(|(c, _)| *c == code).unwrap_or(usize::MAX)
}

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

fn role_res(name: &str) -> String {
    format!("role/{name}")
}

fn controller(s: &Setup, c: &mut Checker) {
    c.ran("controller-role-not-found");
    let sa = format!("{}/{}", s.namespace, s.service_account);
    let Some(role) = s.controller.as_ref().filter(|r| r.exists) else {
        let (resource, message) = match &s.controller {
            Some(r) => (role_res(&r.name), format!("the controller role {} ({}) does not exist", r.name, r.how)),
            None => (format!("serviceaccount/{sa}"), format!("no controller role found for {sa}: {}", s.controller_searched)),
        };
        c.add(
            "controller-role-not-found",
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
    if role.how == super::model::UNASSOCIATED {
        // The role is there, but nothing gives it to Karpenter's pods (the module v20's defaults).
        c.add(
            "controller-role-not-found",
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
        return;
    }
    let docs: Vec<&Value> = role.policies.iter().filter_map(|p| p.document.as_ref()).collect();
    c.ran("controller-missing-permissions");
    let missing: Vec<String> = required_actions(s).into_iter().filter(|a| !allows(&docs, a)).collect();
    if !missing.is_empty() {
        let unread: Vec<&str> = role.policies.iter().filter(|p| p.document.is_none()).map(|p| p.name.as_str()).collect();
        let unread = if unread.is_empty() { String::new() } else { format!(" (policies not readable: {})", unread.join(", ")) };
        c.add(
            "controller-missing-permissions",
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
    c.ran("controller-passrole-unscoped");
    let (_, unscoped) = analysis::pass_role(&docs);
    if unscoped {
        c.add(
            "controller-passrole-unscoped",
            Severity::Warning,
            role_res(&role.name),
            format!("the controller role {} may pass any role (iam:PassRole on *): a compromised controller can launch instances with any role of the account", role.name),
            "scope iam:PassRole to the node role ARN(s), with the condition iam:PassedToService = ec2.amazonaws.com".into(),
        );
    }
    c.ran("policy-near-size-limit");
    for p in role.policies.iter().filter(|p| p.customer_managed) {
        if let Some(d) = &p.document {
            let size = size_without_whitespace(d);
            if size > NEAR_LIMIT {
                c.add(
                    "policy-near-size-limit",
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
    c.ran("controller-trust-mismatch");
    if let (Some(trust), Some(hop)) = (&role.trust, &role.assumed_through) {
        // A target role: the association's role assumes it (sts:AssumeRole, from its ARN or its
        // account's root).
        let root = format!("arn:{}:iam::{}:root", s.partition, hop.split(':').nth(4).unwrap_or_default());
        let lets_in = statements(trust).iter().any(|st| {
            crate::policy_doc::is_allow(st)
                && crate::policy_doc::statement_takes(st, "sts:AssumeRole")
                && strings(&st["Principal"]["AWS"]).iter().any(|p| p == hop || *p == root || p == "*")
        });
        if !lets_in {
            c.add(
                "controller-trust-mismatch",
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
            "controller-trust-mismatch",
            Severity::Error,
            role_res(&role.name),
            format!("the controller role {}'s trust policy does not allow {want}: Karpenter cannot assume it", role.name),
            "fix the role's trust policy (aws iam update-assume-role-policy)".into(),
        );
    }
    // The association's session tags and session policy (section 9.7). With a target role the
    // trust read is the target's, not that of the role EKS assumes with the tags: not judged.
    if let Some(a) = &role.association {
        if let (Some(trust), None) = (&role.trust, &role.assumed_through) {
            c.readiness(readiness::POD_IDENTITY_SESSION_TAGS_DISABLED, readiness::pod_identity_session_tags(a, trust));
        }
        c.readiness(readiness::POD_IDENTITY_SESSION_POLICY, readiness::pod_identity_session_policy(a));
    }
    c.ran("pod-identity-agent-missing");
    if s.mode == Some(IdentityMode::PodIdentity) && !s.pod_identity_agent {
        c.add(
            "pod-identity-agent-missing",
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

fn cluster_access(s: &Setup, c: &mut Checker) {
    c.ran("cluster-auth-config-map");
    if s.authentication_mode == "CONFIG_MAP" {
        c.add(
            "cluster-auth-config-map",
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

fn node_roles(s: &Setup, c: &mut Checker) {
    c.ran("node-role-not-found");
    if s.node_roles.is_empty() {
        c.add(
            "node-role-not-found",
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
                "node-role-not-found",
                Severity::Error,
                role_res(&r.name),
                format!("node role {} ({}) does not exist", r.name, r.how.join(", ")),
                "create the role, or fix the reference to it (the controller's iam:PassRole, the access entry, EC2NodeClass spec.role)".into(),
            );
            continue;
        }
        c.ran("node-role-missing-managed-policy");
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
                "node-role-missing-managed-policy",
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
        c.ran("node-role-no-access-entry");
        c.ran("node-access-entry-stale");
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
                "node-role-no-access-entry",
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
                    "node-access-entry-stale",
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

fn queue_res(name: &str) -> String {
    format!("queue/{name}")
}

/// The region's default event bus near or past EventBridge's rules-per-bus quota: one more
/// cluster's rules may not fit.
fn bus_quota(s: &Setup, c: &mut Checker) {
    c.ran("event-bus-rule-quota");
    if let Some(message) = crate::resources::event_rule::bus_quota_message_at(s.bus_quota, &s.region, s.bus_rules, 0) {
        c.add(
            "event-bus-rule-quota",
            Severity::Warning,
            format!("event-bus/default ({})", s.region),
            message,
            "request a higher \"Maximum number of rules per event bus\" in Service Quotas, or move clusters to interruption.rules = \"merged\"".into(),
        );
    }
}

fn queue(s: &Setup, c: &mut Checker) {
    c.ran("queue-not-found");
    let Some(q) = &s.queue else {
        let others = if s.other_queues.is_empty() {
            String::new()
        } else {
            format!(" (Karpenter's rules target other queues, not taken as this cluster's: {})", s.other_queues.join(", "))
        };
        c.add(
            "queue-not-found",
            Severity::Warning,
            format!("cluster/{}", s.cluster),
            format!("no interruption queue found: no EventBridge rule with Karpenter's event patterns targets an SQS queue of this cluster, so interruption handling is off{others}"),
            format!("create the queue, its policy and rules (`karpctl up --cluster {}`) and set settings.interruptionQueue; or name the queue with --queue", s.cluster),
        );
        return;
    };
    if !q.exists {
        c.add(
            "queue-not-found",
            Severity::Error,
            queue_res(&q.name),
            format!("the interruption queue {} ({}) does not exist", q.name, q.how),
            "create it, or point settings.interruptionQueue and the rules' targets at the queue that exists".into(),
        );
        return;
    }
    c.ran("queue-kms-aws-managed");
    if q.kms_master_key_id.as_deref().is_some_and(|k| k == "alias/aws/sqs" || k.ends_with(":alias/aws/sqs")) {
        c.add(
            "queue-kms-aws-managed",
            Severity::Error,
            queue_res(&q.name),
            format!("queue {} is encrypted with the AWS managed key alias/aws/sqs, whose key policy EventBridge cannot use: interruption events never arrive", q.name),
            format!("aws sqs set-queue-attributes --queue-url {} --attributes KmsMasterKeyId=,SqsManagedSseEnabled=true (or a customer managed key granting events.amazonaws.com kms:GenerateDataKey and kms:Decrypt)", q.url.as_deref().unwrap_or(&q.name)),
        );
    }
    queue_policy(s, q, c);
    rules(s, q, c);
}

fn takes_events(st: &Value) -> bool {
    let p = &st["Principal"];
    p.as_str() == Some("*")
        || strings(&p["AWS"]).contains("*")
        || strings(&p["Service"]).iter().any(|x| x == "events.amazonaws.com")
}

fn on_queue(st: &Value, arn: &str) -> bool {
    strings(&st["Resource"]).iter().any(|r| glob(r, arn))
}

fn sends(st: &Value) -> bool {
    let takes = |field: &str| strings(&st[field]).iter().any(|a| glob(a, "sqs:SendMessage"));
    if st.get("NotAction").is_some() { !takes("NotAction") } else { takes("Action") }
}

fn queue_policy(s: &Setup, q: &super::model::Queue, c: &mut Checker) {
    c.ran("queue-policy-blocks-eventbridge");
    let stmts: Vec<&Value> = q.policy.as_ref().map(statements).unwrap_or_default();
    let effect = |st: &Value, e: &str| st["Effect"].as_str().is_some_and(|x| x.eq_ignore_ascii_case(e));
    let allowing: Vec<&Value> =
        stmts.iter().copied().filter(|st| effect(st, "allow") && takes_events(st) && sends(st) && on_queue(st, &q.arn)).collect();
    let denying = stmts
        .iter()
        .any(|st| effect(st, "deny") && takes_events(st) && sends(st) && on_queue(st, &q.arn) && st.get("Condition").is_none());
    if allowing.is_empty() || denying {
        let why = if denying {
            "a Deny statement refuses events.amazonaws.com sqs:SendMessage"
        } else if q.policy.is_none() {
            "the queue has no policy"
        } else {
            "no statement allows events.amazonaws.com sqs:SendMessage on it"
        };
        c.add(
            "queue-policy-blocks-eventbridge",
            Severity::Error,
            queue_res(&q.name),
            format!("EventBridge cannot deliver to queue {}: {why}; interruption events never arrive", q.name),
            format!(
                "allow the service principal events.amazonaws.com sqs:SendMessage on {} (with aws:SourceArn of the rules)",
                q.arn
            ),
        );
        return;
    }
    c.ran("queue-policy-unconditioned");
    let conditioned = |st: &Value| {
        st["Condition"].as_object().into_iter().flatten().any(|(_, kv)| {
            kv.as_object().into_iter().flatten().any(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k == "aws:sourcearn" || k == "aws:sourceaccount"
            })
        })
    };
    if allowing.iter().any(|st| !conditioned(st)) {
        c.add(
            "queue-policy-unconditioned",
            Severity::Warning,
            queue_res(&q.name),
            format!("queue {}'s policy lets events.amazonaws.com send without an aws:SourceArn or aws:SourceAccount condition: another account's rule could inject fake interruptions", q.name),
            format!("add \"Condition\": {{\"StringEquals\": {{\"aws:SourceAccount\": \"{}\"}}}} (or aws:SourceArn = the rules' ARNs) to the statement", s.account_id),
        );
    }
}

fn rules(s: &Setup, q: &super::model::Queue, c: &mut Checker) {
    let ours: Vec<&super::model::Rule> = s.rules.iter().filter(|r| r.queue_arns.contains(&q.arn)).collect();
    c.ran("queue-shared");
    let shared: Vec<String> =
        ours.iter().filter_map(|r| r.other_cluster.as_ref().map(|o| format!("{} (cluster {o})", r.name))).collect();
    if !shared.is_empty() {
        c.add(
            "queue-shared",
            Severity::Error,
            queue_res(&q.name),
            format!("queue {} also receives another cluster's interruption rules: {}; Karpenter deletes every message it reads, so each cluster misses the other's events", q.name, shared.join(", ")),
            "give each cluster its own queue and rules (karpctl makes Karpenter-<cluster>)".into(),
        );
    }
    c.ran("interruption-rule-missing");
    c.ran("interruption-rule-disabled");
    for crate::catalog::Rule { part, detail_type: detail, since_minor: since, missing, .. } in RULES.iter() {
        if s.version.minor < *since {
            continue;
        }
        let of_kind: Vec<&&super::model::Rule> = ours.iter().filter(|r| r.kinds.contains(part)).collect();
        if of_kind.is_empty() {
            let severity = if *missing == crate::catalog::Missing::Warning { Severity::Warning } else { Severity::Error };
            c.add(
                "interruption-rule-missing",
                severity,
                format!("rule/{part}"),
                format!("no EventBridge rule sends \"{detail}\" events to queue {}: Karpenter never hears of them", q.name),
                format!("create the rule (or `karpctl up --cluster {}`) with the pattern {{\"source\": [...], \"detail-type\": [\"{detail}\"]}} and the queue as target", s.cluster),
            );
        } else if !of_kind.iter().any(|r| r.enabled) {
            let names: Vec<&str> = of_kind.iter().map(|r| r.name.as_str()).collect();
            c.add(
                "interruption-rule-disabled",
                Severity::Error,
                format!("rule/{}", names[0]),
                format!("the rule for \"{detail}\" events ({}) is disabled", names.join(", ")),
                format!("aws events enable-rule --name {}", names[0]),
            );
        }
    }
}

fn discovery(s: &Setup, c: &mut Checker) {
    let d = &s.discovery;
    let tag = format!("{}={}", d.tag_key, d.tag_value);
    c.ran("discovery-no-subnets");
    if d.subnets.is_empty() {
        c.add(
            "discovery-no-subnets",
            Severity::Error,
            format!("tag/{tag}"),
            format!("no subnet carries {tag}: Karpenter's subnetSelectorTerms find nothing and it cannot launch nodes"),
            format!(
                "tag the cluster's private subnets: aws ec2 create-tags --resources <subnet-ids> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        );
    } else if !s.cluster_azs.is_empty() {
        c.ran("discovery-az-without-subnet");
        let covered: BTreeSet<&str> = d.subnets.iter().map(|x| x.az.as_str()).collect();
        for az in s.cluster_azs.iter().filter(|az| !covered.contains(az.as_str())) {
            c.add(
                "discovery-az-without-subnet",
                Severity::Warning,
                format!("az/{az}"),
                format!("Availability Zone {az} has cluster subnets but none tagged {tag}: Karpenter cannot launch nodes there"),
                format!(
                    "tag a subnet of {az}: aws ec2 create-tags --resources <subnet-id> --tags Key={},Value={}",
                    d.tag_key, d.tag_value
                ),
            );
        }
    }
    c.ran("discovery-no-security-groups");
    match d.groups.len() {
        0 => c.add(
            "discovery-no-security-groups",
            Severity::Error,
            format!("tag/{tag}"),
            format!("no security group carries {tag}: Karpenter's securityGroupSelectorTerms find nothing"),
            format!(
                "tag the node security group: aws ec2 create-tags --resources <sg-id> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        ),
        1 => c.ran("discovery-multiple-security-groups"),
        _ => {
            let list: Vec<String> = d.groups.iter().map(|g| format!("{} ({})", g.id, g.name)).collect();
            c.add(
                "discovery-multiple-security-groups",
                Severity::Warning,
                format!("tag/{tag}"),
                format!("{} security groups carry {tag} and Karpenter attaches every one: {}", d.groups.len(), list.join(", ")),
                "keep the tag on the node security group only (aws ec2 delete-tags on the others)".into(),
            );
        }
    }
    if s.cluster_vpc.is_empty() {
        return;
    }
    c.ran("discovery-outside-cluster-vpc");
    let outside: Vec<String> = d
        .subnets
        .iter()
        .filter(|x| x.vpc_id != s.cluster_vpc)
        .map(|x| format!("{} ({})", x.id, x.vpc_id))
        .chain(d.groups.iter().filter(|g| g.vpc_id != s.cluster_vpc).map(|g| format!("{} ({})", g.id, g.vpc_id)))
        .collect();
    if !outside.is_empty() {
        c.add(
            "discovery-outside-cluster-vpc",
            Severity::Error,
            format!("tag/{tag}"),
            format!(
                "objects outside the cluster's VPC {} carry {tag}: {}; Karpenter would launch nodes there that cannot join",
                s.cluster_vpc,
                outside.join(", ")
            ),
            format!(
                "remove the tag from them: aws ec2 delete-tags --resources <ids> --tags Key={},Value={}",
                d.tag_key, d.tag_value
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::*;
    use super::*;

    /// The queue policy of karpctl's earlier releases and upstream: EventBridge may send, no condition.
    fn unconditioned_queue_policy() -> serde_json::Value {
        let mut p = karpenter_iam::queue_policy(Q, &[]);
        for st in p["Statement"].as_array_mut().unwrap() {
            if st["Effect"] == "Allow" {
                st.as_object_mut().unwrap().remove("Condition");
            }
        }
        p
    }
    use serde_json::json;

    const C: &str = "demo";
    const Q: &str = "arn:aws:sqs:us-east-1:111122223333:Karpenter-demo";
    const NODE: &str = "arn:aws:iam::111122223333:role/KarpenterNodeRole-demo";

    /// A setup as karpctl makes it, with a queue policy conditioned on the account.
    fn clean() -> Setup {
        let mut s = Setup::empty(C);
        s.cluster_vpc = "vpc-1".into();
        s.cluster_azs = ["us-east-1a", "us-east-1b"].iter().map(|a| a.to_string()).collect();
        let policies = karpenter_iam::controller_policies(&ControllerPolicyInputs {
            partition: "aws",
            region: "us-east-1",
            account_id: "111122223333",
            cluster: C,
            node_role_arn: NODE,
            queue_arn: Some(Q),
            kms_key_arn: Some(KEY),
            zonal_shift: false,
            version: s.version,
        });
        s.controller = Some(ControllerRole {
            name: "KarpenterController-demo".into(),
            arn: "arn:aws:iam::111122223333:role/KarpenterController-demo".into(),
            how: "Pod Identity association".into(),
            exists: true,
            trust: Some(karpenter_iam::controller_trust_pod_identity(&karpenter_iam::PodIdentityScope {
                cluster_arn: "arn:aws:eks:us-east-1:111122223333:cluster/demo",
                namespace: "kube-system",
                service_account: "karpenter",
            })),
            policies: policies
                .into_iter()
                .map(|(p, d)| RolePolicy {
                    name: p.name().into(),
                    arn: Some(p.name().into()),
                    customer_managed: true,
                    document: Some(d),
                })
                .collect(),
            assumed_through: None,
            association: Some(readiness::Association {
                cluster: "demo".into(),
                id: "a-0123456789abcdef0".into(),
                name: "kube-system/karpenter".into(),
                role_arn: "arn:aws:iam::111122223333:role/KarpenterController-demo".into(),
                ..Default::default()
            }),
        });
        s.mode = Some(IdentityMode::PodIdentity);
        s.pod_identity_agent = true;
        s.node_roles = vec![NodeRole {
            name: "KarpenterNodeRole-demo".into(),
            arn: NODE.into(),
            how: vec!["PassRole".into()],
            exists: true,
            created: Some(100),
            attached: karpenter_iam::node_managed_policy_arns("aws", "111122223333", false, s.version),
        }];
        s.access_entries = vec![AccessEntry { principal_arn: NODE.into(), kind: "EC2_LINUX".into(), created: Some(101) }];
        let mut policy = karpenter_iam::queue_policy(Q, &[]);
        policy["Statement"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .filter(|st| st["Effect"] == "Allow")
            .for_each(|st| st["Condition"] = json!({"StringEquals": {"aws:SourceAccount": ["111122223333"]}}));
        s.queue = Some(Queue {
            name: "Karpenter-demo".into(),
            arn: Q.into(),
            url: Some("https://q".into()),
            how: "rules".into(),
            exists: true,
            kms_master_key_id: Some("alias/karpenter-demo".into()),
            kms_key_arn: Some(KEY.into()),
            kms_key_policy: Some(crate::resources::kms_key::key_policy("aws", "111122223333")),
            policy: Some(policy),
        });
        s.rules = RULES
            .iter()
            .map(|crate::catalog::Rule { part: p, .. }| Rule {
                name: format!("Karpenter-demo-{p}"),
                arn: format!("arn:aws:events:us-east-1:111122223333:rule/Karpenter-demo-{p}"),
                enabled: true,
                kinds: vec![*p],
                queue_arns: vec![Q.into()],
                other_cluster: None,
            })
            .collect();
        s.discovery.subnets = ["us-east-1a", "us-east-1b"]
            .iter()
            .enumerate()
            .map(|(n, az)| TaggedSubnet {
                id: format!("subnet-{n}"),
                az: az.to_string(),
                vpc_id: "vpc-1".into(),
                ..Default::default()
            })
            .collect();
        let all = |groups: &[&str], cidrs: &[&str]| crate::readiness::SgRule {
            protocol: "-1".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        };
        s.discovery.groups = vec![TaggedGroup {
            id: "sg-1".into(),
            name: "nodes".into(),
            vpc_id: "vpc-1".into(),
            rules: crate::readiness::GroupRules {
                ingress: vec![all(&["sg-cluster"], &[])],
                egress: vec![all(&[], &["0.0.0.0/0"])],
            },
        }];
        s.control_plane_groups = vec!["sg-cluster".into()];
        s.route_tables = vec![crate::egress::RouteTable {
            id: "rtb-main".into(),
            main: true,
            subnets: vec![],
            default_routes: vec![crate::egress::DefaultRoute {
                gateway_id: None,
                other_target: Some("nat-1".into()),
                ..Default::default()
            }],
        }];
        s.spot_service_linked_role = true;
        s
    }

    const KEY: &str = "arn:aws:kms:us-east-1:111122223333:key/k1";

    fn codes(s: &Setup) -> Vec<&'static str> {
        let mut c: Vec<&'static str> = check(s).findings.iter().map(|f| f.code).collect();
        c.dedup();
        c
    }

    fn controller_mut(s: &mut Setup) -> &mut ControllerRole {
        s.controller.as_mut().unwrap()
    }

    #[test]
    fn a_karpctl_setup_is_clean_and_every_check_ran() {
        let o = check(&clean());
        assert!(o.findings.is_empty(), "{:#?}", o.findings);
        assert_eq!(o.passed.len(), CHECKS.len(), "{:?}", o.passed);
    }

    #[test]
    fn each_defect_gives_its_code_and_only_it() {
        type Defect = (&'static str, fn(&mut Setup));
        let defects: Vec<Defect> = vec![
            ("controller-role-not-found", |s| s.controller = None),
            ("controller-missing-permissions", |s| {
                let r = controller_mut(s);
                r.policies.retain(|p| p.name != "EKSIntegration");
            }),
            ("controller-passrole-unscoped", |s| {
                controller_mut(s).policies.push(RolePolicy {
                    name: "extra".into(),
                    document: Some(json!({"Statement": [{"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]})),
                    ..Default::default()
                })
            }),
            ("policy-near-size-limit", |s| {
                let big: Vec<String> = (0..400).map(|n| format!("arn:aws:s3:::bucket-{n}")).collect();
                controller_mut(s).policies.push(RolePolicy {
                    name: "big".into(),
                    customer_managed: true,
                    document: Some(json!({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": big}]})),
                    ..Default::default()
                })
            }),
            ("pod-identity-agent-missing", |s| s.pod_identity_agent = false),
            ("controller-trust-mismatch", |s| controller_mut(s).trust = Some(karpenter_iam::node_role_trust("aws", None))),
            ("pod-identity-session-tags-disabled", |s| {
                controller_mut(s).association.as_mut().unwrap().disable_session_tags = true
            }),
            ("pod-identity-session-policy", |s| {
                controller_mut(s).association.as_mut().unwrap().session_policy =
                    Some(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:*","Resource":"*"}]}"#.into())
            }),
            ("cluster-auth-config-map", |s| s.authentication_mode = "CONFIG_MAP".into()),
            ("node-role-not-found", |s| s.node_roles[0].exists = false),
            ("node-role-missing-managed-policy", |s| {
                s.node_roles[0].attached.remove(0);
            }),
            ("node-role-no-access-entry", |s| s.access_entries.clear()),
            ("node-access-entry-stale", |s| s.node_roles[0].created = Some(500)),
            ("queue-not-found", |s| s.queue.as_mut().unwrap().exists = false),
            ("queue-kms-aws-managed", |s| s.queue.as_mut().unwrap().kms_master_key_id = Some("alias/aws/sqs".into())),
            ("queue-policy-blocks-eventbridge", |s| {
                let p = s.queue.as_mut().unwrap().policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().push(
                    json!({"Effect": "Deny", "Principal": {"Service": ["events.amazonaws.com"]}, "Action": ["sqs:SendMessage"], "Resource": [Q]}),
                );
            }),
            ("queue-policy-unconditioned", |s| s.queue.as_mut().unwrap().policy = Some(unconditioned_queue_policy())),
            ("queue-shared", |s| s.rules[1].other_cluster = Some("prod".into())),
            ("interruption-rule-missing", |s| {
                s.rules.remove(1);
            }),
            ("interruption-rule-disabled", |s| s.rules[2].enabled = false),
            ("discovery-no-subnets", |s| s.discovery.subnets.clear()),
            ("discovery-az-without-subnet", |s| s.discovery.subnets.truncate(1)),
            ("discovery-no-security-groups", |s| s.discovery.groups.clear()),
            ("discovery-multiple-security-groups", |s| {
                let rules = s.discovery.groups[0].rules.clone();
                s.discovery.groups.push(TaggedGroup { id: "sg-2".into(), name: "more".into(), vpc_id: "vpc-1".into(), rules })
            }),
            ("discovery-outside-cluster-vpc", |s| {
                s.discovery.subnets.push(TaggedSubnet {
                    id: "subnet-x".into(),
                    az: "us-east-1a".into(),
                    vpc_id: "vpc-2".into(),
                    ..Default::default()
                })
            }),
            ("spot-service-linked-role-missing", |s| s.spot_service_linked_role = false),
            ("event-bus-rule-quota", |s| s.bus_rules = 290),
            ("subnet-no-way-out", |s| s.route_tables[0].default_routes.clear()),
            ("subnet-way-out-unconfirmed", |s| {
                s.route_tables[0].default_routes[0] =
                    crate::egress::DefaultRoute { gateway_id: Some("vpce-firewall".into()), ..Default::default() }
            }),
            ("node-sg-blocks-control-plane", |s| s.discovery.groups[0].rules.ingress.clear()),
            ("kms-key-policy-events", |s| {
                let p = s.queue.as_mut().unwrap().kms_key_policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().retain(|st| st["Sid"] != "AllowEventBridgeToSendInterruptionEvents");
            }),
            ("kms-key-policy-controller", |s| {
                let p = s.queue.as_mut().unwrap().kms_key_policy.as_mut().unwrap();
                p["Statement"].as_array_mut().unwrap().retain(|st| st["Sid"] != "EnableIAMPolicies");
            }),
        ];
        let mut covered: BTreeSet<&str> = BTreeSet::new();
        for (code, inject) in defects {
            let mut s = clean();
            inject(&mut s);
            let got = codes(&s);
            let expected: &[&str] = match code {
                // The queue's part of the permission set is not required without a queue.
                "cluster-auth-config-map" => &["cluster-auth-config-map"],
                _ => &[code],
            };
            assert_eq!(got, expected, "{code}");
            let f = &check(&s).findings[0];
            assert!(!f.message.is_empty() && !f.hint.is_empty() && !f.resource.is_empty(), "{f:?}");
            covered.insert(code);
        }
        assert_eq!(covered.len(), CHECKS.len(), "every check has a defect test");
    }

    #[test]
    fn tagged_subnets_are_judged_with_the_plan_and_the_mode() {
        // A public subnet without public IPs: an error, unless the plan gives nodes public IPs.
        let mut s = clean();
        s.route_tables[0].default_routes[0] =
            crate::egress::DefaultRoute { gateway_id: Some("igw-1".into()), ..Default::default() };
        assert_eq!(codes(&s), ["subnet-no-way-out"]);
        s.associate_public_ip = true;
        assert!(codes(&s).is_empty(), "{:?}", check(&s).findings);
        // Isolated with every endpoint but eks-auth: fine with IRSA, an error with Pod Identity.
        let mut s = clean();
        s.route_tables[0].default_routes.clear();
        s.endpoints = ["ec2", "ecr.api", "ecr.dkr", "sts", "ssm", "eks", "sqs", "s3"]
            .iter()
            .map(|svc| crate::egress::Endpoint {
                service_name: format!("com.amazonaws.us-east-1.{svc}"),
                kind: "Interface".into(),
                ..Default::default()
            })
            .collect();
        s.mode = Some(IdentityMode::Irsa);
        assert!(!codes(&s).contains(&"subnet-no-way-out"), "{:?}", check(&s).findings);
        s.mode = Some(IdentityMode::PodIdentity);
        let f = check(&s).findings.into_iter().find(|f| f.code == "subnet-no-way-out").expect("eks-auth missing");
        assert!(f.message.contains("eks-auth"), "{}", f.message);
        // A VPC another account shares: its endpoints are invisible, so a warning, not an error.
        s.endpoints.clear();
        for t in &mut s.discovery.subnets {
            t.owner_id = "999988887777".into();
        }
        let c = codes(&s);
        assert!(c.contains(&"subnet-way-out-unconfirmed") && !c.contains(&"subnet-no-way-out"), "{c:?}");
    }

    #[test]
    fn a_refused_read_skips_the_checks_it_feeds_and_says_which() {
        let mut s = clean();
        s.controller = None;
        s.unreadable.push(super::super::model::Unreadable {
            code: "controller-unreadable",
            operation: "iam:GetRole".into(),
            aws_code: "AccessDenied".into(),
        });
        let o = check(&s);
        let codes: Vec<&str> = o.findings.iter().map(|f| f.code).collect();
        assert_eq!(codes, ["controller-unreadable"], "no false controller-role-not-found");
        assert_eq!(o.findings[0].severity, Severity::Error);
        assert!(
            o.findings[0].message.contains("iam:GetRole") && o.findings[0].message.contains("controller-missing-permissions")
        );
        assert!(!o.passed.contains(&"controller-role-not-found") && o.passed.contains(&"queue-not-found"), "{:?}", o.passed);
        for (code, _, skipped) in UNREADABLE {
            assert!(code.ends_with("-unreadable"));
            for k in skipped {
                assert!(CHECKS.iter().any(|(c, _)| c == k), "{code} skips an unknown check {k}");
            }
        }
    }

    #[test]
    fn wildcards_cover_the_permission_set_and_missing_actions_are_listed() {
        let mut s = clean();
        controller_mut(&mut s).policies = vec![RolePolicy {
            name: "admin".into(),
            document: Some(
                json!({"Statement": [{"Effect": "Allow", "Action": ["ec2:*", "iam:*", "eks:*", "sqs:*", "ssm:*", "pricing:*", "kms:Decrypt"], "Resource": "*"}]}),
            ),
            ..Default::default()
        }];
        // iam:* on * passes any role: the one finding.
        assert_eq!(codes(&s), ["controller-passrole-unscoped"]);
        controller_mut(&mut s).policies[0].document =
            Some(json!({"Statement": [{"Effect": "Allow", "Action": ["ec2:*"], "Resource": "*"}]}));
        let o = check(&s);
        let f = o.findings.iter().find(|f| f.code == "controller-missing-permissions").unwrap();
        assert!(f.message.contains("iam:PassRole") && f.message.contains("sqs:ReceiveMessage"), "{}", f.message);
        assert!(!f.message.contains("ec2:RunInstances"), "{}", f.message);
    }

    #[test]
    fn versions_change_what_is_required() {
        let mut s = clean();
        s.rules.retain(|r| !r.kinds.contains(&"CapacityReservation"));
        assert_eq!(codes(&s), ["interruption-rule-missing"]);
        assert_eq!(check(&s).findings[0].severity, Severity::Warning);
        s.version = KarpenterVersionExt::v(9);
        assert!(codes(&s).is_empty(), "capacity reservations only from 1.10");
    }

    #[test]
    fn missing_ssm_only_is_a_warning_and_read_only_registry_satisfies_pull_only() {
        let mut s = clean();
        s.node_roles[0].attached = vec![
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".into(),
            "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy".into(),
            "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly".into(),
        ];
        let o = check(&s);
        assert_eq!(o.findings.len(), 1);
        assert_eq!((o.findings[0].code, o.findings[0].severity), ("node-role-missing-managed-policy", Severity::Warning));
        assert!(o.findings[0].message.contains("AmazonSSMManagedInstanceCore"));
    }

    #[test]
    fn no_queue_is_a_warning_and_errors_come_first() {
        let mut s = clean();
        s.queue = None;
        s.discovery.groups.clear();
        let o = check(&s);
        let got: Vec<(&str, Severity)> = o.findings.iter().map(|f| (f.code, f.severity)).collect();
        assert_eq!(got, [("discovery-no-security-groups", Severity::Error), ("queue-not-found", Severity::Warning)]);
    }

    #[test]
    fn irsa_trust_needs_the_service_account_subject() {
        let t = karpenter_iam::controller_trust_irsa(
            "arn:aws:iam::1:oidc-provider/oidc.example/id/X",
            "oidc.example/id/X",
            "kube-system",
            "karpenter",
        );
        assert!(trusts(&t, IdentityMode::Irsa, "kube-system", "karpenter"));
        assert!(!trusts(&t, IdentityMode::Irsa, "karpenter", "karpenter"));
        assert!(!trusts(&t, IdentityMode::PodIdentity, "kube-system", "karpenter"));
    }

    trait KarpenterVersionExt {
        fn v(minor: u32) -> Self;
    }
    impl KarpenterVersionExt for crate::karpenter_iam::KarpenterVersion {
        fn v(minor: u32) -> Self {
            crate::karpenter_iam::KarpenterVersion::parse(&format!("1.{minor}")).unwrap()
        }
    }
}
