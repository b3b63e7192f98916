//! Readiness: can Karpenter work here? Each check is a pure function over facts read once, with
//! a stable code, a severity, the resource, what is wrong and the fix (the fields doctor's
//! findings have). `up` runs them on what it just made, `diff` on what it would make, `doctor` on
//! whatever it found: one home for each check (docs/aws-behaviour.md, "What Karpenter needs").

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Karpenter cannot work: `up` exits 1.
    Error,
    /// Karpenter works, but something will go wrong later or for some nodes.
    Warning,
}

/// One check's result when it found something.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub code: &'static str,
    pub severity: Severity,
    pub resource: String,
    pub message: String,
    pub fix: String,
}

/// The checks that ran and what they found (`up` and `diff` carry it; doctor has its own list).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Readiness {
    /// The codes of every check that ran.
    pub checked: Vec<&'static str>,
    /// What they found, errors first.
    pub found: Vec<Check>,
}

impl Readiness {
    /// Record a check that ran, and its finding if it found something.
    pub fn record(&mut self, code: &'static str, found: Option<Check>) {
        self.checked.push(code);
        if let Some(c) = found {
            self.found.push(c);
        }
        self.found.sort_by_key(|c| c.severity != Severity::Error);
    }
    pub fn errors(&self) -> usize {
        self.found.iter().filter(|c| c.severity == Severity::Error).count()
    }
    /// Checks that found nothing.
    pub fn passed(&self) -> usize {
        self.checked.iter().filter(|code| !self.found.iter().any(|c| c.code == **code)).count()
    }
}

/// The code of the Spot service-linked role check.
pub const SPOT_ROLE_MISSING: &str = "spot-service-linked-role-missing";
/// The EC2 Spot service-linked role, account-wide.
pub const SPOT_ROLE: &str = "AWSServiceRoleForEC2Spot";
/// The path of the Spot service's linked roles.
pub const SPOT_ROLE_PATH: &str = "/aws-service-role/spot.amazonaws.com/";
/// The code of the EKS Auto Mode check.
pub const AUTO_MODE_OVERLAP: &str = "auto-mode-nodepools-overlap";

/// A fresh account has no Spot service-linked role, and every Spot launch fails
/// (`AuthFailure.ServiceLinkedRoleCreationNotPermitted`: the controller may not create it).
pub fn spot_role(exists: bool) -> Option<Check> {
    (!exists).then(|| Check {
        code: SPOT_ROLE_MISSING,
        severity: Severity::Warning,
        resource: format!("role{SPOT_ROLE_PATH}{SPOT_ROLE}"),
        message: "the account has no EC2 Spot service-linked role: every Spot launch fails (AuthFailure.ServiceLinkedRoleCreationNotPermitted); On-Demand nodes work".into(),
        fix: "set `create_spot_service_linked_role = true` under [account] in the plan and run `karpctl up`, or: aws iam create-service-linked-role --aws-service-name spot.amazonaws.com (once per account)".into(),
    })
}

/// EKS Auto Mode runs AWS's own Karpenter: both must not manage the same NodePools.
pub fn auto_mode(cluster: &str, enabled: bool) -> Option<Check> {
    enabled.then(|| Check {
        code: AUTO_MODE_OVERLAP,
        severity: Severity::Warning,
        resource: format!("cluster/{cluster}"),
        message: "EKS Auto Mode is on (computeConfig.enabled): AWS runs its own Karpenter here, with the Pod Identity agent built in; Auto Mode and a self-managed Karpenter must not both manage the same NodePools".into(),
        fix: "give the self-managed Karpenter its own NodePools (Auto Mode's are `general-purpose` and `system`, class eks.amazonaws.com), or turn off Auto Mode's built-in node pools".into(),
    })
}

/// The code of the check that every discovery-tagged subnet has a way out.
pub const SUBNET_NO_WAY_OUT: &str = "subnet-no-way-out";
/// The code of the check that says where karpctl cannot confirm a tagged subnet's way out (a
/// firewall endpoint, a shared VPC's invisible endpoints).
pub const SUBNET_WAY_OUT_UNCONFIRMED: &str = "subnet-way-out-unconfirmed";

/// A subnet carrying `karpenter.sh/discovery=<cluster>`, as the way-out checks see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedSubnet {
    pub candidate: crate::egress::Candidate,
    /// It carries karpctl's marker (`karpctl.io/discovery`): karpctl put the tag there.
    pub karpctls: bool,
}

/// Karpenter launches into any subnet carrying the discovery tag, whoever put it there: one
/// nodes cannot work from (no route out, a public one without public IPs, isolated without the
/// endpoints) makes nodes that never join (an error); one whose way out karpctl cannot confirm
/// is a warning. `up` and `diff` run it on the subnets Karpenter will see once the plan is
/// applied, doctor on every tagged subnet of the cluster's VPC: both judge with
/// `egress::judge`. Returns the two checks by code.
pub fn tagged_subnets_have_a_way_out(
    (tag_key, tag_value): (&str, &str),
    subnets: &[TaggedSubnet],
    net: &crate::egress::Network,
) -> [(&'static str, Option<Check>); 2] {
    use crate::egress::{Verdict, Way, judge};
    let (mut bad, mut unsure) = (Vec::new(), Vec::new());
    for s in subnets {
        match judge(&s.candidate, net) {
            Verdict::Usable => {}
            Verdict::Unconfirmed { why, fix } => unsure.push((s.candidate.id.as_str(), why, fix)),
            Verdict::Unusable(why) => bad.push((s, why)),
        }
    }
    let error = (!bad.is_empty()).then(|| {
        let mut fix: Vec<String> = bad
            .iter()
            .map(|(s, _)| {
                let id = &s.candidate.id;
                if s.karpctls {
                    return format!("{id}: karpctl tagged it; run `karpctl up`, which removes its tag from subnets nodes cannot work from");
                }
                let terraform = match s.candidate.way {
                    Way::Public(_) => "public_subnet_tags",
                    _ => "private_subnet_tags or intra_subnet_tags",
                };
                format!(
                    "{id}: the tag is not karpctl's (no {} marker): another tool or a person put it there, e.g. terraform-aws-vpc's {terraform}; remove it there, or: aws ec2 delete-tags --resources {id} --tags Key={tag_key},Value={tag_value}",
                    crate::tags::MARKER_TAG,
                )
            })
            .collect();
        let unusable: Vec<&crate::egress::Candidate> = bad.iter().map(|(s, _)| &s.candidate).collect();
        fix.extend(crate::egress::fixes(&unusable, net).into_iter().map(|f| format!("or give them a way out: {f}")));
        Check {
            code: SUBNET_NO_WAY_OUT,
            severity: Severity::Error,
            resource: "subnets".into(),
            message: format!(
                "Karpenter launches nodes into every subnet tagged {tag_key}={tag_value}, and nodes in these never join: {}",
                by_reason(bad.iter().map(|(s, why)| (s.candidate.id.as_str(), why.as_str())))
            ),
            fix: fix.join("; "),
        }
    });
    let warning = (!unsure.is_empty()).then(|| {
        let mut fix: Vec<String> = Vec::new();
        for (_, _, f) in &unsure {
            if !fix.contains(f) {
                fix.push(f.clone());
            }
        }
        Check {
            code: SUBNET_WAY_OUT_UNCONFIRMED,
            severity: Severity::Warning,
            resource: "subnets".into(),
            message: format!(
                "karpctl cannot confirm that nodes can work from these discovery-tagged subnets: {}",
                by_reason(unsure.iter().map(|(id, why, _)| (*id, why.as_str())))
            ),
            fix: fix.join("; "),
        }
    });
    [(SUBNET_NO_WAY_OUT, error), (SUBNET_WAY_OUT_UNCONFIRMED, warning)]
}

/// "a, b: why; c: other why": subnets that share a reason, named together, in first-seen order.
fn by_reason<'a>(items: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for (id, why) in items {
        match groups.iter_mut().find(|(_, w)| *w == why) {
            Some((ids, _)) => ids.push(id),
            None => groups.push((vec![id], why)),
        }
    }
    groups.iter().map(|(ids, why)| format!("{}: {why}", ids.join(", "))).collect::<Vec<_>>().join("; ")
}

/// The code of the node security group check.
pub const NODE_SG_BLOCKS_CONTROL_PLANE: &str = "node-sg-blocks-control-plane";

/// One security group rule, as EC2 describes it (`IpPermissions` / `IpPermissionsEgress`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SgRule {
    /// `-1` (all traffic), `tcp`, `udp`, `icmp`, or a protocol number.
    pub protocol: String,
    pub from_port: Option<i32>,
    pub to_port: Option<i32>,
    /// Source (ingress) or destination (egress) security groups.
    pub groups: Vec<String>,
    /// IPv4 and IPv6 ranges and prefix lists.
    pub cidrs: Vec<String>,
}

impl SgRule {
    /// The rule lets TCP traffic on `port` through.
    fn covers_tcp(&self, port: i32) -> bool {
        match self.protocol.as_str() {
            "-1" | "all" => true,
            "tcp" | "6" => match (self.from_port, self.to_port) {
                (Some(f), Some(t)) => f == -1 || (f <= port && port <= t),
                _ => true,
            },
            _ => false,
        }
    }
}

/// A security group's rules.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupRules {
    pub ingress: Vec<SgRule>,
    pub egress: Vec<SgRule>,
}

/// The ports the control plane calls nodes on: kubelet, and webhooks.
const FROM_CONTROL_PLANE: [i32; 2] = [10250, 443];

/// Nodes in `group` must accept the control plane (kubelet 10250, webhooks 443) and reach it on
/// 443. The control plane's network interfaces carry the cluster security group (EKS's
/// `eks-cluster-sg-*`, which allows all traffic among its members) and the cluster's extra
/// `securityGroupIds`; a rule from one of those groups, or from an address range, lets it in.
/// A warning (not an error): a range or prefix list karpctl cannot resolve may still cover it.
pub fn node_group_lets_control_plane_in(group_id: &str, rules: &GroupRules, control_plane: &[String]) -> Option<Check> {
    if control_plane.iter().any(|g| g == group_id) {
        // The cluster security group itself (or one the control plane carries): all traffic
        // among its members is allowed by EKS's own rule, which karpctl checks too.
        if rules.ingress.iter().any(|r| r.protocol == "-1" && r.groups.iter().any(|g| g == group_id)) {
            return None;
        }
    }
    let from_cp = |r: &SgRule| !r.cidrs.is_empty() || r.groups.iter().any(|g| control_plane.contains(g));
    let blocked: Vec<i32> =
        FROM_CONTROL_PLANE.into_iter().filter(|p| !rules.ingress.iter().any(|r| r.covers_tcp(*p) && from_cp(r))).collect();
    let no_egress = !rules.egress.iter().any(|r| r.covers_tcp(443));
    if blocked.is_empty() && !no_egress {
        return None;
    }
    let source = control_plane.first().map(String::as_str).unwrap_or("<the cluster security group>");
    let mut wrong = Vec::new();
    let mut fix = Vec::new();
    if !blocked.is_empty() {
        let ports: Vec<String> = blocked.iter().map(|p| p.to_string()).collect();
        wrong.push(format!("no ingress rule lets the control plane ({source}) in on TCP {}", ports.join(" and ")));
        for p in &blocked {
            fix.push(format!(
                "aws ec2 authorize-security-group-ingress --group-id {group_id} --protocol tcp --port {p} --source-group {source}"
            ));
        }
    }
    if no_egress {
        wrong.push("no egress rule lets nodes reach the control plane on TCP 443".to_string());
        fix.push(format!(
            "aws ec2 authorize-security-group-egress --group-id {group_id} --ip-permissions IpProtocol=tcp,FromPort=443,ToPort=443,UserIdGroupPairs=[{{GroupId={source}}}]"
        ));
    }
    Some(Check {
        code: NODE_SG_BLOCKS_CONTROL_PLANE,
        severity: Severity::Warning,
        resource: format!("security-group/{group_id}"),
        message: format!(
            "the node security group {group_id} (tagged for Karpenter): {}; nodes will not join or webhooks will time out",
            wrong.join("; ")
        ),
        fix: fix.join("; "),
    })
}

/// The code of the check that EventBridge may use the queue's KMS key.
pub const KMS_KEY_POLICY_EVENTS: &str = "kms-key-policy-events";
/// The code of the check that the controller may decrypt with the queue's KMS key.
pub const KMS_KEY_POLICY_CONTROLLER: &str = "kms-key-policy-controller";
/// The code of the check that could not read the key policy.
pub const KMS_KEY_POLICY_UNREADABLE: &str = "kms-key-policy-unreadable";

/// EventBridge's service principal, the producer of every interruption message.
pub const EVENTS_PRINCIPAL: &str = "events.amazonaws.com";
/// What EventBridge needs of the key to send to an SSE-KMS queue.
pub const EVENTS_KMS_ACTIONS: [&str; 2] = ["kms:GenerateDataKey", "kms:Decrypt"];

/// The key-policy statement that lets EventBridge send to a queue encrypted with the key.
pub fn events_key_statement() -> serde_json::Value {
    serde_json::json!({
        "Sid": "AllowEventBridgeToSendInterruptionEvents",
        "Effect": "Allow",
        "Principal": {"Service": EVENTS_PRINCIPAL},
        "Action": EVENTS_KMS_ACTIONS,
        "Resource": "*",
    })
}

/// The key-policy statement that lets IAM policies in the account grant use of the key (KMS's
/// default key policy has it; without it an IAM policy's kms:Decrypt has no effect).
pub fn iam_delegation_statement(partition: &str, account_id: &str) -> serde_json::Value {
    serde_json::json!({
        "Sid": "EnableIAMPolicies",
        "Effect": "Allow",
        "Principal": {"AWS": format!("arn:{partition}:iam::{account_id}:root")},
        "Action": "kms:*",
        "Resource": "*",
    })
}

/// Whether a key-policy statement's principal takes in one of `who` (service names, account
/// roots, account ids, role ARNs) or everyone (`*`).
fn principal_names(s: &serde_json::Value, field: &str, who: &[&str]) -> bool {
    let p = &s["Principal"];
    if p.as_str() == Some("*") {
        return true;
    }
    let names = crate::policy_doc::strings(&p[field]);
    names.contains("*") || who.iter().any(|w| names.contains(*w))
}

/// The Allow statements of `policy` naming one of `who` under `field` take in `action`.
fn key_policy_allows(policy: &serde_json::Value, field: &str, who: &[&str], action: &str) -> bool {
    use crate::policy_doc::{is_allow, is_deny, statement_takes, statements};
    let st = statements(policy);
    let allowed = st.iter().any(|s| is_allow(s) && principal_names(s, field, who) && statement_takes(s, action));
    let denied = st.iter().any(|s| {
        is_deny(s) && !crate::policy_doc::has_condition(s) && principal_names(s, field, who) && statement_takes(s, action)
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
pub fn kms_key_lets_eventbridge_in(key_arn: &str, policy: &serde_json::Value) -> Option<Check> {
    let missing: Vec<&str> =
        EVENTS_KMS_ACTIONS.into_iter().filter(|a| !key_policy_allows(policy, "Service", &[EVENTS_PRINCIPAL], a)).collect();
    (!missing.is_empty()).then(|| Check {
        code: KMS_KEY_POLICY_EVENTS,
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
) -> Option<Check> {
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
    Some(Check {
        code: KMS_KEY_POLICY_CONTROLLER,
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

/// The key policy could not be read: the two checks above did not run.
pub fn kms_key_policy_unreadable(key_arn: &str, why: &str) -> Check {
    Check {
        code: KMS_KEY_POLICY_UNREADABLE,
        severity: Severity::Warning,
        resource: key_arn.to_string(),
        message: format!(
            "could not read the key policy of the interruption queue's KMS key {key_arn} ({why}); not checked: that {EVENTS_PRINCIPAL} may use kms:GenerateDataKey and kms:Decrypt, and that the controller may use kms:Decrypt"
        ),
        fix: format!(
            "allow kms:GetKeyPolicy on {key_arn} to the credentials karpctl runs with, or check the key policy by hand: it needs {}",
            events_key_statement()
        ),
    }
}

/// The code of the check that an association with session tags off does not serve a role whose
/// trust needs them.
pub const POD_IDENTITY_SESSION_TAGS_DISABLED: &str = "pod-identity-session-tags-disabled";
/// The code of the check that reports an association's session policy.
pub const POD_IDENTITY_SESSION_POLICY: &str = "pod-identity-session-policy";
/// EKS Pod Identity's service principal, the one that assumes the controller role.
pub const PODS_PRINCIPAL: &str = "pods.eks.amazonaws.com";

/// What the two Pod Identity checks need of an association (DescribePodIdentityAssociation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Association {
    pub cluster: String,
    pub id: String,
    /// `<namespace>/<service account>`.
    pub name: String,
    /// The role EKS assumes for it.
    pub role_arn: String,
    pub disable_session_tags: bool,
    /// The inline session policy (JSON text), if any.
    pub session_policy: Option<String>,
    /// The EKS add-on that owns it (changed only through the add-on).
    pub owner_arn: Option<String>,
}

impl Association {
    fn resource(&self) -> String {
        format!("podidentityassociation/{}/{}", self.cluster, self.id)
    }
    fn label(&self) -> String {
        format!("EKS Pod Identity association {} ({})", self.name, self.id)
    }
    fn update_command(&self, args: &str) -> String {
        match &self.owner_arn {
            Some(addon) => format!(
                "the EKS add-on {addon} owns it: change its Pod Identity association through the add-on (aws eks update-addon --cluster-name {} --addon-name <add-on> --pod-identity-associations ...)",
                self.cluster
            ),
            None => format!(
                "aws eks update-pod-identity-association --cluster-name {} --association-id {} {args}",
                self.cluster, self.id
            ),
        }
    }
}

/// The condition keys of a role's trust policy that only session tags satisfy: `aws:RequestTag/*`
/// or `aws:PrincipalTag/*` (not under an `...IfExists` operator, which passes without the tag; a
/// `Null` condition only when it requires the tag) in an Allow statement that lets EKS Pod
/// Identity (or everyone) use sts:AssumeRole or sts:TagSession. EKS passes `eks-cluster-arn`,
/// `eks-cluster-name`, `kubernetes-namespace`, `kubernetes-service-account` and the pod's tags
/// only with session tags on (docs/aws-behaviour.md section 9.7).
pub fn session_tag_conditions(trust: &serde_json::Value) -> Vec<String> {
    use crate::policy_doc::{is_allow, statement_takes, statements};
    let mut keys = std::collections::BTreeSet::new();
    for st in statements(trust) {
        let assumes = statement_takes(st, "sts:AssumeRole") || statement_takes(st, "sts:TagSession");
        if !is_allow(st) || !assumes || !principal_names(st, "Service", &[PODS_PRINCIPAL]) {
            continue;
        }
        for (op, kv) in st["Condition"].as_object().into_iter().flatten() {
            if op.to_ascii_lowercase().ends_with("ifexists") {
                continue;
            }
            for (k, v) in kv.as_object().into_iter().flatten() {
                let key = k.to_ascii_lowercase();
                let tag = key.starts_with("aws:requesttag/") || key.starts_with("aws:principaltag/");
                let needs = !op.eq_ignore_ascii_case("Null") || crate::policy_doc::strings(v).contains("false");
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
pub fn pod_identity_session_tags(a: &Association, trust: &serde_json::Value) -> Option<Check> {
    if !a.disable_session_tags {
        return None;
    }
    let keys = session_tag_conditions(trust);
    (!keys.is_empty()).then(|| Check {
        code: POD_IDENTITY_SESSION_TAGS_DISABLED,
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
pub fn pod_identity_session_policy(a: &Association) -> Option<Check> {
    let policy = a.session_policy.as_deref().filter(|p| !p.trim().is_empty())?;
    let size = policy.chars().filter(|c| !c.is_whitespace()).count();
    Some(Check {
        code: POD_IDENTITY_SESSION_POLICY,
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

    fn rule(protocol: &str, from: i32, to: i32, groups: &[&str], cidrs: &[&str]) -> SgRule {
        SgRule {
            protocol: protocol.into(),
            from_port: Some(from),
            to_port: Some(to),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn all_out() -> Vec<SgRule> {
        vec![rule("-1", -1, -1, &[], &["0.0.0.0/0"])]
    }

    fn cp() -> Vec<String> {
        vec!["sg-cluster".to_string()]
    }

    #[test]
    fn the_cluster_security_group_lets_its_members_in() {
        let r = GroupRules { ingress: vec![rule("-1", -1, -1, &["sg-cluster"], &[])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-cluster", &r, &cp()), None);
    }

    #[test]
    fn a_node_group_with_rules_from_the_cluster_group_passes() {
        let r = GroupRules {
            ingress: vec![rule("tcp", 10250, 10250, &["sg-cluster"], &[]), rule("tcp", 443, 443, &["sg-cluster"], &[])],
            egress: all_out(),
        };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &r, &cp()), None);
        let range = GroupRules { ingress: vec![rule("tcp", 0, 65535, &["sg-cluster"], &[])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &range, &cp()), None);
        let cidr = GroupRules { ingress: vec![rule("-1", -1, -1, &[], &["10.0.0.0/16"])], egress: all_out() };
        assert_eq!(node_group_lets_control_plane_in("sg-node", &cidr, &cp()), None);
    }

    #[test]
    fn a_missing_kubelet_rule_is_named_with_the_command_to_add_it() {
        let r = GroupRules { ingress: vec![rule("tcp", 443, 443, &["sg-cluster"], &[])], egress: all_out() };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert_eq!(c.code, NODE_SG_BLOCKS_CONTROL_PLANE);
        assert_eq!(c.severity, Severity::Warning);
        assert!(c.message.contains("TCP 10250") && !c.message.contains("443 and"), "{}", c.message);
        assert_eq!(
            c.fix,
            "aws ec2 authorize-security-group-ingress --group-id sg-node --protocol tcp --port 10250 --source-group sg-cluster"
        );
    }

    #[test]
    fn rules_from_other_groups_or_other_protocols_do_not_count() {
        let r = GroupRules {
            ingress: vec![rule("tcp", 0, 65535, &["sg-other"], &[]), rule("udp", 0, 65535, &["sg-cluster"], &[])],
            egress: all_out(),
        };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert!(c.message.contains("TCP 10250 and 443"), "{}", c.message);
    }

    #[test]
    fn no_egress_to_443_is_named() {
        let r = GroupRules {
            ingress: vec![rule("-1", -1, -1, &["sg-cluster"], &[])],
            egress: vec![rule("tcp", 80, 80, &[], &["0.0.0.0/0"])],
        };
        let c = node_group_lets_control_plane_in("sg-node", &r, &cp()).expect("warns");
        assert!(c.message.contains("no egress rule") && !c.message.contains("ingress"), "{}", c.message);
        assert!(c.fix.contains("authorize-security-group-egress --group-id sg-node"), "{}", c.fix);
    }

    fn tagged(id: &str, karpctls: bool, map_public_ip: bool, way: crate::egress::Way) -> TaggedSubnet {
        TaggedSubnet {
            candidate: crate::egress::Candidate {
                id: id.into(),
                map_public_ip,
                way,
                table: Some("rtb-1".into()),
                ignored: vec![],
            },
            karpctls,
        }
    }

    #[test]
    fn a_tagged_subnet_nodes_cannot_work_from_is_an_error_naming_where_the_tag_comes_from() {
        use crate::egress::{Network, Way};
        let net = Network { region: "us-east-1".into(), ..Default::default() };
        let subnets = [
            tagged("subnet-nat", true, false, Way::Private("nat-1".into())),
            tagged("subnet-tf", false, false, Way::Public("igw-1".into())),
            tagged("subnet-ours", true, false, Way::None),
        ];
        let [(code, error), (_, warning)] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets, &net);
        assert_eq!(code, SUBNET_NO_WAY_OUT);
        assert_eq!(warning, None);
        let e = error.expect("an error");
        assert_eq!(e.severity, Severity::Error);
        assert!(e.message.contains("subnet-tf: public") && e.message.contains("subnet-ours: no route out"), "{}", e.message);
        assert!(!e.message.contains("subnet-nat"), "{}", e.message);
        assert!(
            e.fix.contains("aws ec2 delete-tags --resources subnet-tf --tags Key=karpenter.sh/discovery,Value=c1")
                && e.fix.contains("public_subnet_tags"),
            "{}",
            e.fix
        );
        assert!(e.fix.contains("subnet-ours: karpctl tagged it; run `karpctl up`"), "{}", e.fix);
        assert!(!e.fix.contains("--resources subnet-ours"), "karpctl's own tag is karpctl's to remove: {}", e.fix);
        // With public IPs from the EC2NodeClass the public subnet works.
        let key = Network { associate_public_ip: true, ..net.clone() };
        let [(_, error), _] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets[..2], &key);
        assert_eq!(error, None);
    }

    #[test]
    fn a_way_out_karpctl_cannot_see_is_a_warning() {
        use crate::egress::{Network, Way};
        let net = Network { region: "us-east-1".into(), ..Default::default() };
        let subnets = [tagged("subnet-fw", false, false, Way::Firewall("vpce-fw".into()))];
        let [(_, error), (code, warning)] = tagged_subnets_have_a_way_out(("karpenter.sh/discovery", "c1"), &subnets, &net);
        assert_eq!((error, code), (None, SUBNET_WAY_OUT_UNCONFIRMED));
        let w = warning.expect("a warning");
        assert_eq!(w.severity, Severity::Warning);
        assert!(w.message.contains("vpce-fw") && w.fix.contains("NAT gateway"), "{w:?}");
    }

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
        assert_eq!((c.code, c.severity), (KMS_KEY_POLICY_EVENTS, Severity::Error));
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
        assert_eq!((c.code, c.severity), (KMS_KEY_POLICY_CONTROLLER, Severity::Error));
        assert!(c.fix.contains(ROLE) && c.fix.contains("arn:aws:iam::111122223333:root"), "{}", c.fix);
    }

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
        assert_eq!((c.code, c.severity), (POD_IDENTITY_SESSION_TAGS_DISABLED, Severity::Error));
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
        assert_eq!((c.code, c.severity), (POD_IDENTITY_SESSION_POLICY, Severity::Warning));
        assert!(c.message.contains("EKS Pod Identity association kube-system/karpenter (a-123)"), "{}", c.message);
        assert!(c.fix.contains("--policy ''"), "{}", c.fix);
    }
}
