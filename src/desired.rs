//! Pure: a validated plan plus facts about the account and the cluster -> the desired nodes and
//! their edges. Nodes for switched-off features are still listed, with no desired fields, so
//! that objects karpctl made before are found and removed.

use crate::karpenter_iam;
use crate::model::{Kind, Node, OWNER_TAG, RESOURCE_TAG, Tags};
use crate::names;
use crate::plan_file::Spec;
use crate::resources::{event_rule, queue};
use std::collections::BTreeMap;

/// What preflight learned about where karpctl runs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Facts {
    pub account_id: String,
    pub region: String,
    pub partition: String,
    pub cluster: ClusterFacts,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ClusterFacts {
    pub name: String,
    pub arn: String,
    pub status: String,
    pub version: String,
    pub vpc_id: String,
    pub subnet_ids: Vec<String>,
    pub cluster_security_group_id: String,
    pub authentication_mode: String,
    pub oidc_issuer: String,
    pub ip_family: String,
}

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

pub fn build(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let mut nodes = Vec::new();
    interruption(spec, facts, &mut nodes);
    nodes
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
    for (part, source, detail, _since) in event_rule::RULES {
        let id = format!("rule-{part}");
        let (name, shortened) = rule_name(&spec.cluster, part);
        nodes.push(Node {
            id: id.clone(),
            kind: Kind::EventRule,
            fields: on.then(|| event_rule::desired_fields(source, detail, &qarn, &spec.cluster, &tags_for(spec, &id))),
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
    use crate::plan_file;

    pub fn facts() -> Facts {
        Facts {
            account_id: "123456789012".into(),
            region: "us-east-1".into(),
            partition: "aws".into(),
            cluster: ClusterFacts { name: "say-when-east".into(), status: "ACTIVE".into(), ..Default::default() },
        }
    }

    #[test]
    fn interruption_nodes() {
        let spec = plan_file::defaults("say-when-east").unwrap();
        let nodes = build(&spec, &facts());
        let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            ["queue", "queue-policy", "rule-HealthEvent", "rule-SpotInterrupt", "rule-Rebalance", "rule-StateChange", "rule-CapacityReservation"]
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
        assert_eq!(rf["EventPattern"], serde_json::json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]}));
        assert_eq!(rf["Targets"][0]["Arn"], "arn:aws:sqs:us-east-1:123456789012:Karpenter-say-when-east");
        assert_eq!(rf["Targets"][0]["Id"], "KarpenterInterruptionQueueTarget");
    }

    #[test]
    fn interruption_off_keeps_nodes_without_desired_fields() {
        let mut spec = plan_file::defaults("c").unwrap();
        spec.interruption.enabled = false;
        let nodes = build(&spec, &facts());
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
