//! Pure: a validated plan plus facts about the account and the cluster -> the desired nodes and
//! their edges. Each kind builds its own nodes (`resources::<kind>::nodes`); this module only
//! puts them together. Nodes for switched-off features are still listed, with no desired fields,
//! so that objects karpctl made before are found and removed.

use crate::facts::Facts;
use crate::model::{Finding, Level, Node};
use crate::plan_file::Spec;
use crate::resources::{
    access_entry, discovery_tags, event_rule, iam_policy, iam_role, instance_profile, pod_identity, queue, queue_policy,
    role_policy_attachment,
};

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

/// Warnings about the plan itself that no AWS read can settle (shown by `diff` and `up`).
pub fn findings(spec: &Spec) -> Vec<Finding> {
    let mut out = Vec::new();
    if spec.interruption.enabled
        && let Some(key) = &spec.interruption.kms_key_id
    {
        out.push(Finding {
            id: "queue-kms-key-policy".into(),
            level: Level::Warning,
            message: format!(
                "the interruption queue is encrypted with KMS key {key}: EventBridge can deliver to it only if the key policy lets the service principal events.amazonaws.com use kms:GenerateDataKey and kms:Decrypt; karpctl cannot check key policies, and without that grant PutTargets still succeeds but no interruption event ever arrives"
            ),
        });
    }
    out
}

/// Every kind's nodes for this plan, in a fixed order.
pub fn build(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let builders: [fn(&Spec, &Facts) -> Vec<Node>; 10] = [
        queue::nodes,
        queue_policy::nodes,
        event_rule::nodes,
        iam_role::nodes,
        role_policy_attachment::nodes,
        instance_profile::nodes,
        access_entry::nodes,
        iam_policy::nodes,
        pod_identity::nodes,
        discovery_tags::nodes,
    ];
    let mut nodes: Vec<Node> = builders.iter().flat_map(|b| b(spec, facts)).collect();
    for n in &mut nodes {
        n.immutable = crate::resources::immutable(n.kind).iter().map(|f| f.to_string()).collect();
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::ClusterFacts;
    use crate::model::{Kind, OWNER_TAG, RESOURCE_TAG};
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
