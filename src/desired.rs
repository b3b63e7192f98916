//! Pure: a validated plan plus facts about the account and the cluster -> the desired nodes and
//! their edges. Nodes for switched-off features are still listed, with no desired fields, so
//! that objects karpctl made before are found and removed.

use crate::facts::Facts;
use crate::karpenter_iam;
use crate::model::{Kind, Node, OWNER_TAG, RESOURCE_TAG, Tags};
use crate::names;
use crate::plan_file::Spec;
use crate::resources::{event_rule, queue};
use std::collections::BTreeMap;

/// The tags every object karpctl creates carries: the user's, then ownership.
pub fn tags_for(spec: &Spec, id: &str) -> Tags {
    let mut t = spec.tags.clone();
    t.insert(OWNER_TAG.to_string(), spec.cluster.clone());
    t.insert(RESOURCE_TAG.to_string(), id.to_string());
    t
}

pub fn queue_arn(facts: &Facts, queue_name: &str) -> String {
    format!("arn:{}:sqs:{}:{}:{queue_name}", facts.partition, facts.region, facts.account_id)
}

pub fn rule_name(cluster: &str, part: &str) -> (String, bool) {
    names::fit(&format!("Karpenter-{cluster}-{part}"), 64)
}

/// Check what AWS would reject late: every managed policy document within IAM's 6,144
/// characters (whitespace not counted).
pub fn validate(nodes: &[Node]) -> Result<(), crate::plan_file::UserError> {
    for n in nodes {
        if let Some(doc) = n.fields.as_ref().and_then(|f| f.get("PolicyDocument")) {
            let size = crate::policy_doc::size_without_whitespace(doc);
            if size > 6144 {
                return Err(crate::plan_file::UserError::new(format!(
                    "policy {} would be {size} characters, over IAM's 6,144-character limit for a managed policy",
                    n.name
                ))
                .hint("use a shorter cluster name, IAM path or node role name"));
            }
        }
    }
    Ok(())
}

pub fn build(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let mut nodes = Vec::new();
    interruption(spec, facts, &mut nodes);
    identity(spec, facts, &mut nodes);
    nodes.extend(crate::resources::discovery_tags::nodes(spec, facts));
    nodes
}

pub fn role_arn(facts: &Facts, path: &str, name: &str) -> String {
    format!("arn:{}:iam::{}:role{path}{name}", facts.partition, facts.account_id)
}

pub fn policy_arn(facts: &Facts, path: &str, name: &str) -> String {
    format!("arn:{}:iam::{}:policy{path}{name}", facts.partition, facts.account_id)
}

/// The node role's ARN: the one karpctl creates, or the existing one the plan names.
pub fn node_role_arn(spec: &Spec, facts: &Facts) -> String {
    let id = &spec.identity;
    match (&id.node_role, &id.existing_node_role) {
        (Some(n), _) => role_arn(facts, &id.path, &n.name),
        (None, Some(e)) if e.starts_with("arn:") => e.clone(),
        (None, Some(_)) if facts.existing_node_role_arn.is_some() => facts.existing_node_role_arn.clone().unwrap_or_default(),
        (None, Some(e)) => role_arn(facts, "/", e),
        (None, None) => String::new(),
    }
}

fn str_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn fields(pairs: Vec<(&str, serde_json::Value)>) -> crate::model::Fields {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The last segment of a policy ARN, used in ids and names of attachments.
fn policy_short_name(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

/// Identity nodes. Field contracts (what each kind's read must return to compare):
/// - IamRole: `path`, `AssumeRolePolicyDocument` (canonical), `tags`; spec `arn`.
/// - IamPolicy: `path`, `PolicyDocument` (canonical), `tags`; spec `arn`.
/// - RolePolicyAttachment: `PolicyArn`; spec `role` (role name), `policy_arn`; owner = the role's.
/// - InstanceProfile: `path`, `Role` (role name), `tags`; spec `arn`.
/// - AccessEntry: `type`, `tags`; name and spec `principal_arn` = node role ARN.
/// - PodIdentity: `namespace`, `service_account`, `role_arn`, `tags`; name `<ns>/<sa>`.
fn identity(spec: &Spec, facts: &Facts, nodes: &mut Vec<Node>) {
    use serde_json::json;
    let id = &spec.identity;
    let path = id.path.as_str();
    let node_role_name = id.node_role_name();
    let node_role_arn = node_role_arn(spec, facts);

    // Node role and its managed policies (only when karpctl creates the role).
    let default_node_role =
        crate::plan_file::Named { name: names::fit(&format!("KarpenterNodeRole-{}", spec.cluster), 64).0, note: None };
    let created = id.node_role.as_ref();
    let role_node = created.unwrap_or(&default_node_role);
    if created.is_some()
        || id.existing_node_role.as_deref().map(|e| e.rsplit('/').next().unwrap_or(e)) != Some(role_node.name.as_str())
    {
        nodes.push(Node {
            id: "node-role".into(),
            kind: Kind::IamRole,
            name: role_node.name.clone(),
            fields: created.map(|_| {
                fields(vec![
                    ("path", json!(path)),
                    ("AssumeRolePolicyDocument", karpenter_iam::node_role_trust()),
                    ("tags", crate::tags::to_value(&tags_for(spec, "node-role"))),
                ])
            }),
            deps: vec![],
            spec: str_map(&[("arn", &role_arn(facts, path, &role_node.name))]),
            notes: role_node.note.iter().cloned().collect(),
        });
    }
    if created.is_some() {
        let ipv6 = facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
        let mut arns = karpenter_iam::node_managed_policy_arns(&facts.partition, &facts.account_id, ipv6, id.karpenter_version);
        for extra in &id.extra_node_policy_arns {
            if !arns.contains(extra) {
                arns.push(extra.clone());
            }
        }
        // Node policies an older plan (another Karpenter version, IPv4/IPv6) may have attached:
        // listed without desired fields so that they are detached when no longer wanted.
        let mut previous: Vec<String> = Vec::new();
        for v in [karpenter_iam::KarpenterVersion { minor: 0 }, karpenter_iam::KarpenterVersion::LATEST] {
            for six in [false, true] {
                previous.extend(karpenter_iam::node_managed_policy_arns(&facts.partition, &facts.account_id, six, v));
            }
        }
        previous.sort();
        previous.dedup();
        previous.retain(|a| !arns.contains(a));
        let wanted = arns.iter().map(|a| (a, true));
        let unwanted = previous.iter().map(|a| (a, false));
        for (arn, want) in wanted.chain(unwanted) {
            let short = policy_short_name(arn);
            nodes.push(Node {
                id: format!("node-role-policy-{short}"),
                kind: Kind::RolePolicyAttachment,
                name: format!("{node_role_name}/{short}"),
                fields: want.then(|| fields(vec![("PolicyArn", json!(arn))])),
                deps: vec!["node-role".into()],
                spec: str_map(&[
                    ("role", &node_role_name),
                    ("policy_arn", arn),
                    ("owner_from", "node-role"),
                    ("contained_in", "node-role"),
                ]),
                notes: vec![],
            });
        }
    }

    // Instance profile (opt-in), holding the node role.
    let ip = &id.instance_profile_name;
    nodes.push(Node {
        id: "node-instance-profile".into(),
        kind: Kind::InstanceProfile,
        name: ip.name.clone(),
        fields: id.instance_profile.as_ref().map(|_| {
            fields(vec![
                ("path", json!(path)),
                ("Role", json!(node_role_name)),
                ("tags", crate::tags::to_value(&tags_for(spec, "node-instance-profile"))),
            ])
        }),
        deps: if created.is_some() { vec!["node-role".into()] } else { vec![] },
        spec: str_map(&[(
            "arn",
            &format!("arn:{}:iam::{}:instance-profile{path}{}", facts.partition, facts.account_id, ip.name),
        )]),
        notes: ip.note.iter().cloned().collect(),
    });

    // Access entry for the node role.
    nodes.push(Node {
        id: "node-access-entry".into(),
        kind: Kind::AccessEntry,
        name: node_role_arn.clone(),
        fields: Some(fields(vec![
            ("type", json!(id.access_entry_type)),
            ("tags", crate::tags::to_value(&tags_for(spec, "node-access-entry"))),
        ])),
        deps: if created.is_some() { vec!["node-role".into()] } else { vec![] },
        spec: str_map(&[("principal_arn", &node_role_arn), ("cluster", &spec.cluster)]),
        notes: vec![],
    });

    // Controller role.
    let ctrl = &id.controller_role;
    let ctrl_arn = role_arn(facts, path, &ctrl.name);
    let trust = match id.mode {
        crate::plan_file::IdentityMode::PodIdentity => karpenter_iam::controller_trust_pod_identity(),
        crate::plan_file::IdentityMode::Irsa => {
            let issuer =
                facts.cluster.oidc_issuer.trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
            let provider = format!("arn:{}:iam::{}:oidc-provider/{issuer}", facts.partition, facts.account_id);
            karpenter_iam::controller_trust_irsa(&provider, issuer, &id.namespace, &id.service_account)
        }
    };
    nodes.push(Node {
        id: "controller-role".into(),
        kind: Kind::IamRole,
        name: ctrl.name.clone(),
        fields: Some(fields(vec![
            ("path", json!(path)),
            ("AssumeRolePolicyDocument", trust),
            ("tags", crate::tags::to_value(&tags_for(spec, "controller-role"))),
        ])),
        deps: vec![],
        spec: str_map(&[("arn", &ctrl_arn)]),
        notes: ctrl.note.iter().cloned().collect(),
    });

    // Controller policies, split as upstream does, each attached to the controller role.
    let qarn = queue_arn(facts, &spec.interruption.queue_name);
    let inputs = karpenter_iam::ControllerPolicyInputs {
        partition: &facts.partition,
        region: &facts.region,
        account_id: &facts.account_id,
        cluster: &spec.cluster,
        node_role_arn: &node_role_arn,
        queue_arn: spec.interruption.enabled.then_some(qarn.as_str()),
        zonal_shift: id.zonal_shift,
        version: id.karpenter_version,
    };
    let docs: BTreeMap<karpenter_iam::PolicyPart, serde_json::Value> =
        karpenter_iam::controller_policies(&inputs).into_iter().collect();
    for part in karpenter_iam::PolicyPart::ALL {
        let (pname, short) = names::fit(&format!("KarpenterController{}Policy-{}", part.name(), spec.cluster), 128);
        let parn = policy_arn(facts, path, &pname);
        let pid = format!("controller-policy-{}", part.name());
        let doc = docs.get(&part).cloned();
        let want = doc.is_some();
        nodes.push(Node {
            id: pid.clone(),
            kind: Kind::IamPolicy,
            name: pname.clone(),
            fields: doc.map(|d| {
                fields(vec![("path", json!(path)), ("PolicyDocument", d), ("tags", crate::tags::to_value(&tags_for(spec, &pid)))])
            }),
            deps: vec![],
            spec: str_map(&[("arn", &parn)]),
            notes: if short { vec![format!("policy name shortened to fit IAM's 128 characters: {pname}")] } else { vec![] },
        });
        nodes.push(Node {
            id: format!("controller-policy-attachment-{}", part.name()),
            kind: Kind::RolePolicyAttachment,
            name: format!("{}/{pname}", ctrl.name),
            fields: want.then(|| fields(vec![("PolicyArn", json!(parn))])),
            deps: vec!["controller-role".into(), pid.clone()],
            spec: str_map(&[
                ("role", &ctrl.name),
                ("policy_arn", &parn),
                ("owner_from", "controller-role"),
                ("contained_in", "controller-role"),
            ]),
            notes: vec![],
        });
    }

    // Pod Identity association (Pod Identity mode only).
    nodes.push(Node {
        id: "pod-identity".into(),
        kind: Kind::PodIdentity,
        name: format!("{}/{}", id.namespace, id.service_account),
        fields: (id.mode == crate::plan_file::IdentityMode::PodIdentity).then(|| {
            fields(vec![
                ("namespace", json!(id.namespace)),
                ("service_account", json!(id.service_account)),
                ("role_arn", json!(ctrl_arn)),
                ("tags", crate::tags::to_value(&tags_for(spec, "pod-identity"))),
            ])
        }),
        deps: vec!["controller-role".into()],
        spec: str_map(&[("cluster", &spec.cluster), ("namespace", &id.namespace), ("service_account", &id.service_account)]),
        notes: vec![],
    });
}

fn interruption(spec: &Spec, facts: &Facts, nodes: &mut Vec<Node>) {
    let on = spec.interruption.enabled;
    let qname = spec.interruption.queue_name.clone();
    let qarn = queue_arn(facts, &qname);
    let mut spec_map = BTreeMap::new();
    spec_map.insert("arn".to_string(), qarn.clone());
    nodes.push(Node {
        id: "queue".into(),
        kind: Kind::Queue,
        name: qname.clone(),
        fields: on.then(|| queue::desired_fields(spec.interruption.kms_key_id.as_deref(), &tags_for(spec, "queue"))),
        deps: vec![],
        spec: spec_map.clone(),
        notes: spec.interruption.queue_name_note.iter().cloned().collect(),
    });
    let mut policy_spec = spec_map.clone();
    policy_spec.insert("contained_in".into(), "queue".into());
    nodes.push(Node {
        id: "queue-policy".into(),
        kind: Kind::QueuePolicy,
        name: qname.clone(),
        fields: on.then(|| {
            let mut f = crate::model::Fields::new();
            f.insert("Policy".into(), karpenter_iam::queue_policy(&qarn));
            f
        }),
        deps: vec!["queue".into()],
        spec: policy_spec,
        notes: vec![],
    });
    for (part, source, detail, since) in event_rule::RULES {
        let id = format!("rule-{part}");
        let (name, shortened) = rule_name(&spec.cluster, part);
        // A rule newer than the pinned Karpenter version (capacity reservations: v1.10) is not wanted.
        let wanted = on && spec.identity.karpenter_version.minor >= since;
        nodes.push(Node {
            id: id.clone(),
            kind: Kind::EventRule,
            fields: wanted.then(|| event_rule::desired_fields(source, detail, &qarn, &spec.cluster, &tags_for(spec, &id))),
            notes: if shortened { vec![format!("name shortened to fit EventBridge's 64 characters: {name}")] } else { vec![] },
            name,
            deps: vec!["queue".into()],
            spec: spec_map.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::ClusterFacts;
    use crate::plan_file;

    pub fn facts() -> Facts {
        Facts {
            account_id: "123456789012".into(),
            region: "us-east-1".into(),
            partition: "aws".into(),
            cluster: ClusterFacts { name: "say-when-east".into(), status: "ACTIVE".into(), ..Default::default() },
            discovery: Default::default(),
            existing_node_role_arn: None,
        }
    }

    #[test]
    fn interruption_nodes() {
        let spec = plan_file::defaults("say-when-east").unwrap();
        let nodes: Vec<Node> = build(&spec, &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .collect();
        let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "queue",
                "queue-policy",
                "rule-HealthEvent",
                "rule-SpotInterrupt",
                "rule-Rebalance",
                "rule-StateChange",
                "rule-CapacityReservation"
            ]
        );
        let q = &nodes[0];
        assert_eq!(q.name, "Karpenter-say-when-east");
        let f = q.fields.as_ref().unwrap();
        assert_eq!(f["MessageRetentionPeriod"], "300");
        assert_eq!(f["SqsManagedSseEnabled"], "true");
        assert_eq!(f["tags"][OWNER_TAG], "say-when-east");
        assert_eq!(f["tags"][RESOURCE_TAG], "queue");
        let rule = &nodes[3];
        assert_eq!(rule.name, "Karpenter-say-when-east-SpotInterrupt");
        let rf = rule.fields.as_ref().unwrap();
        assert_eq!(
            rf["EventPattern"],
            serde_json::json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]})
        );
        assert_eq!(rf["Targets"][0]["Arn"], "arn:aws:sqs:us-east-1:123456789012:Karpenter-say-when-east");
        assert_eq!(rf["Targets"][0]["Id"], "KarpenterInterruptionQueueTarget");
    }

    #[test]
    fn interruption_off_keeps_nodes_without_desired_fields() {
        let mut spec = plan_file::defaults("c").unwrap();
        spec.interruption.enabled = false;
        let nodes: Vec<Node> = build(&spec, &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .collect();
        assert_eq!(nodes.len(), 7);
        assert!(nodes.iter().all(|n| n.fields.is_none()));
    }

    #[test]
    fn long_cluster_names_fit_rule_limits() {
        let spec = plan_file::defaults(&"c".repeat(100)).unwrap();
        for n in build(&spec, &facts()) {
            if n.kind == Kind::EventRule {
                assert!(n.name.len() <= 64, "{}", n.name);
                assert!(!n.notes.is_empty());
            }
        }
    }
}
