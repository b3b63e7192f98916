//! Pure: a validated plan plus the facts read -> the desired nodes and their edges, each kind's
//! from its own `resources::<kind>::nodes`. Switched-off features keep their nodes, without
//! desired fields, so that what karpctl made before is found and removed.

use crate::facts::prepared::Facts;
use crate::model::Node;
use crate::spec::Spec;

/// Check what AWS would reject late: every managed policy document within IAM's 6,144
/// characters (whitespace not counted).
pub fn validate(nodes: &[Node]) -> Result<(), crate::error::UserError> {
    for n in nodes {
        if let Some(doc) = n.fields.as_ref().and_then(|f| f.get("PolicyDocument")) {
            let size = crate::policy::doc::size_without_whitespace(doc);
            if size > 6144 {
                return Err(crate::error::UserError::new(format!(
                    "policy {} would be {size} characters, over IAM's 6,144-character limit for a managed policy",
                    n.name
                ))
                .hint("use a shorter cluster name, IAM path or node role name"));
            }
        }
    }
    Ok(())
}

/// Every kind's nodes for this plan, in a fixed order.
pub fn build(spec: &Spec, facts: &Facts) -> Vec<Node> {
    let mut nodes: Vec<Node> = crate::resources::KINDS.iter().flat_map(|k| (k.nodes)(spec, facts)).collect();
    for n in &mut nodes {
        n.immutable = crate::resources::immutable(n.kind).iter().map(|f| f.to_string()).collect();
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;
    use crate::plan_file;
    use crate::tags::{OWNER_TAG, RESOURCE_TAG};

    pub fn facts() -> Facts {
        Facts::example_of("say-when-east")
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
                "rule-CapacityReservation",
                "rule-Merged"
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
    fn merged_rules_are_one_rule_and_the_separate_ones_go_after_it() {
        let mut spec = plan_file::defaults("c").unwrap();
        spec.interruption.merged = true;
        let nodes: Vec<Node> = build(&spec, &facts()).into_iter().filter(|n| n.kind == Kind::EventRule).collect();
        let wanted: Vec<&Node> = nodes.iter().filter(|n| n.fields.is_some()).collect();
        assert_eq!(wanted.len(), 1);
        assert_eq!(wanted[0].name, "Karpenter-c-Interruption");
        let p = &wanted[0].fields.as_ref().unwrap()["EventPattern"];
        assert_eq!(p["source"], serde_json::json!(["aws.health", "aws.ec2"]));
        assert_eq!(p["detail-type"].as_array().unwrap().len(), crate::catalog::RULES.len());
        assert!(wanted[0].notes.iter().any(|n| n.contains("deliberate difference")), "{:?}", wanted[0].notes);
        for n in nodes.iter().filter(|n| n.fields.is_none()) {
            assert_eq!(n.delete_after, ["rule-Merged"], "{} goes after the merged rule exists", n.id);
        }
        let policy = build(&spec, &facts()).into_iter().find(|n| n.id == "queue-policy").unwrap();
        assert_eq!(policy.deps, ["queue", "rule-Merged"]);
        let text = serde_json::to_string(&policy.fields.unwrap()["Policy"]).unwrap();
        assert!(text.contains("rule/Karpenter-c-Interruption") && !text.contains("rule/Karpenter-c-SpotInterrupt"), "{text}");
        // Back to separate rules: the merged rule goes after they all exist.
        spec.interruption.merged = false;
        let merged = build(&spec, &facts()).into_iter().find(|n| n.id == "rule-Merged").unwrap();
        assert!(merged.fields.is_none());
        assert_eq!(merged.delete_after.len(), crate::catalog::RULES.len());
    }

    #[test]
    fn interruption_off_keeps_nodes_without_desired_fields() {
        let mut spec = plan_file::defaults("c").unwrap();
        spec.interruption.enabled = false;
        let nodes: Vec<Node> = build(&spec, &facts())
            .into_iter()
            .filter(|n| matches!(n.kind, Kind::Queue | Kind::QueuePolicy | Kind::EventRule))
            .collect();
        assert_eq!(nodes.len(), 8);
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
    fn field(nodes: &[Node], id: &str, field: &str) -> serde_json::Value {
        let n = nodes.iter().find(|n| n.id == id).unwrap_or_else(|| panic!("no node {id}"));
        n.fields.as_ref().unwrap_or_else(|| panic!("{id} has no desired fields"))[field].clone()
    }

    fn allow_statement(doc: &serde_json::Value) -> serde_json::Value {
        doc["Statement"].as_array().unwrap().iter().find(|s| s["Effect"] == "Allow").unwrap().clone()
    }

    fn strings(v: &serde_json::Value) -> Vec<String> {
        match v {
            serde_json::Value::Array(a) => a.iter().map(|s| s.as_str().unwrap().to_string()).collect(),
            other => vec![other.as_str().unwrap().to_string()],
        }
    }

    #[test]
    fn queue_policy_names_exactly_the_wanted_rules_of_the_pinned_version() {
        let rule_arn = |c: &str, part: &str| format!("arn:aws:events:us-east-1:123456789012:rule/Karpenter-{c}-{part}");
        for (version, parts) in [
            ("1.9", vec!["HealthEvent", "Rebalance", "SpotInterrupt", "StateChange"]),
            ("1.10", vec!["CapacityReservation", "HealthEvent", "Rebalance", "SpotInterrupt", "StateChange"]),
        ] {
            let mut spec = plan_file::defaults("say-when-east").unwrap();
            spec.identity.karpenter_version = version.parse().unwrap();
            let nodes = build(&spec, &facts());
            let allow = allow_statement(&field(&nodes, "queue-policy", "Policy"));
            assert_eq!(strings(&allow["Principal"]["Service"]), ["events.amazonaws.com"], "{version}");
            let mut want: Vec<String> = parts.iter().map(|p| rule_arn("say-when-east", p)).collect();
            want.sort();
            let mut got = strings(&allow["Condition"]["ArnEquals"]["aws:SourceArn"]);
            got.sort();
            assert_eq!(got, want, "{version}");
            // Each rule the plan creates is named in the condition, under the name it gets.
            for n in nodes.iter().filter(|n| n.kind == Kind::EventRule && n.fields.is_some()) {
                assert!(got.contains(&format!("arn:aws:events:us-east-1:123456789012:rule/{}", n.name)), "{}", n.name);
            }
        }
    }

    #[test]
    fn queue_policy_rule_arns_follow_partition_region_and_shortened_names() {
        for (partition, region) in [("aws", "us-west-2"), ("aws-cn", "cn-north-1"), ("aws-us-gov", "us-gov-west-1")] {
            let c = "c".repeat(100);
            let spec = plan_file::defaults(&c).unwrap();
            let f = Facts { partition: partition.into(), region: region.into(), ..facts() };
            let nodes = build(&spec, &f);
            let allow = allow_statement(&field(&nodes, "queue-policy", "Policy"));
            let got = strings(&allow["Condition"]["ArnEquals"]["aws:SourceArn"]);
            let names: Vec<&str> =
                nodes.iter().filter(|n| n.kind == Kind::EventRule && n.fields.is_some()).map(|n| n.name.as_str()).collect();
            assert_eq!(got.len(), names.len());
            for name in names {
                assert!(name.len() <= 64);
                let arn = format!("arn:{partition}:events:{region}:123456789012:rule/{name}");
                assert!(got.contains(&arn), "{arn} in {got:?}");
            }
            assert_eq!(
                strings(&allow["Resource"]),
                [format!("arn:{partition}:sqs:{region}:123456789012:{}", spec.interruption.queue_name)]
            );
        }
    }

    #[test]
    fn controller_trust_names_the_plans_service_account_and_the_cluster() {
        let mut spec = plan_file::defaults("say-when-east").unwrap();
        spec.identity.namespace = "karpenter".into();
        spec.identity.service_account = "karpenter-controller".into();
        // The ARN EKS reported, when there is one.
        let mut f = facts();
        f.cluster.arn = "arn:aws:eks:us-east-1:123456789012:cluster/say-when-east".into();
        let trust = field(&build(&spec, &f), "controller-role", "AssumeRolePolicyDocument");
        let allow = allow_statement(&trust);
        assert_eq!(strings(&allow["Action"]), ["sts:AssumeRole", "sts:TagSession"]);
        let cond = &allow["Condition"]["StringEquals"];
        assert_eq!(strings(&cond["aws:RequestTag/eks-cluster-arn"]), [f.cluster.arn.clone()]);
        assert_eq!(strings(&cond["aws:RequestTag/kubernetes-namespace"]), ["karpenter"]);
        assert_eq!(strings(&cond["aws:RequestTag/kubernetes-service-account"]), ["karpenter-controller"]);
        // Without one (facts from a partition other than aws): computed the same way.
        for (partition, region) in [("aws-cn", "cn-north-1"), ("aws-us-gov", "us-gov-west-1")] {
            let f = Facts { partition: partition.into(), region: region.into(), ..facts() };
            let trust = field(&build(&spec, &f), "controller-role", "AssumeRolePolicyDocument");
            assert_eq!(
                strings(&allow_statement(&trust)["Condition"]["StringEquals"]["aws:RequestTag/eks-cluster-arn"]),
                [format!("arn:{partition}:eks:{region}:123456789012:cluster/say-when-east")]
            );
        }
        // IRSA keeps its sub/aud conditions and nothing else.
        spec.identity.mode = crate::spec::IdentityMode::Irsa;
        let mut f = facts();
        f.cluster.oidc_issuer = "https://oidc.eks.us-east-1.amazonaws.com/id/ABC".into();
        let trust = field(&build(&spec, &f), "controller-role", "AssumeRolePolicyDocument");
        let cond = &allow_statement(&trust)["Condition"]["StringEquals"];
        assert_eq!(
            strings(&cond["oidc.eks.us-east-1.amazonaws.com/id/ABC:sub"]),
            ["system:serviceaccount:karpenter:karpenter-controller"]
        );
        assert_eq!(cond.as_object().unwrap().len(), 2);
    }

    #[test]
    fn node_trust_source_account_is_opt_in() {
        let mut spec = plan_file::defaults("say-when-east").unwrap();
        assert!(!spec.identity.node_trust_source_account, "default false");
        let trust = field(&build(&spec, &facts()), "node-role", "AssumeRolePolicyDocument");
        assert!(allow_statement(&trust).get("Condition").is_none());
        spec.identity.node_trust_source_account = true;
        let f = Facts { partition: "aws-cn".into(), region: "cn-north-1".into(), ..facts() };
        let trust = field(&build(&spec, &f), "node-role", "AssumeRolePolicyDocument");
        let allow = allow_statement(&trust);
        assert_eq!(strings(&allow["Principal"]["Service"]), ["ec2.amazonaws.com.cn"]);
        assert_eq!(strings(&allow["Condition"]["StringEquals"]["aws:SourceAccount"]), ["123456789012"]);
        let parsed = plan_file::parse("cluster = \"a\"\n[identity]\nnode_trust_source_account = true\n", "p.toml", None).unwrap();
        assert!(parsed.identity.node_trust_source_account);
    }
}
