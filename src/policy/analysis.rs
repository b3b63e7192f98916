//! Pure reading of what AWS returned: which actions a set of IAM documents allows, what
//! `iam:PassRole` and `sqs:ReceiveMessage` name, which of Karpenter's interruption events an
//! event pattern matches, and which cluster a name or tags point at.

use crate::catalog::RULES;
use crate::policy::doc::{has_condition, is_allow, is_deny, statement_takes, statements, strings};
use serde_json::Value;
use std::collections::BTreeSet;

/// Whether the documents together allow `action` (on some resource): an Allow takes it in and no
/// unconditional Deny on every resource takes it back. Resources and conditions of Allow
/// statements are not weighed: this compares action sets.
pub fn allows(docs: &[&Value], action: &str) -> bool {
    let all: Vec<&Value> = docs.iter().flat_map(|d| statements(d)).collect();
    let allowed = all.iter().any(|s| is_allow(s) && statement_takes(s, action));
    let denied = all
        .iter()
        .any(|s| is_deny(s) && !has_condition(s) && strings(&s["Resource"]).contains("*") && statement_takes(s, action));
    allowed && !denied
}

/// Every action named in the documents' Allow statements (for the required set).
pub fn actions_of(docs: &[Value]) -> BTreeSet<String> {
    docs.iter().flat_map(statements).filter(|s| is_allow(s)).flat_map(|s| strings(&s["Action"])).collect()
}

fn has_wildcard(s: &str) -> bool {
    s.contains('*') || s.contains('?')
}

/// What the documents let the holder pass with `iam:PassRole`: the role ARNs named exactly, and
/// whether any Allow statement grants it on every role (`*`, or `...:role/*`).
pub fn pass_role(docs: &[&Value]) -> (Vec<String>, bool) {
    let mut roles = Vec::new();
    let mut unscoped = false;
    for s in docs.iter().flat_map(|d| statements(d)) {
        if !is_allow(s) || !statement_takes(s, "iam:PassRole") {
            continue;
        }
        for r in strings(&s["Resource"]) {
            if r == "*" || r.ends_with(":role/*") || r.ends_with(":*") {
                unscoped = true;
            } else if !has_wildcard(&r) && r.contains(":role/") && !roles.contains(&r) {
                roles.push(r);
            }
        }
    }
    (roles, unscoped)
}

/// Whether the document names this cluster the way Karpenter's policies do: its full ARN
/// (`arn:<p>:eks:<region>:<account>:cluster/<c>`, Karpenter's `eks:DescribeCluster` statement),
/// so that a cluster of the same name in another region or account is never taken for it.
pub fn names_cluster(doc: &Value, cluster_arn: &str) -> bool {
    doc.to_string().contains(&format!("{cluster_arn}\""))
}

/// Sids only Karpenter's controller policies use (v0.33 to v1.x, the terraform-aws-eks module's
/// and the CloudFormation guide's documents alike).
const KARPENTER_SIDS: [&str; 12] = [
    "AllowScopedEC2InstanceAccessActions",
    "AllowScopedEC2InstanceActions",
    "AllowScopedEC2LaunchTemplateAccessActions",
    "AllowScopedEC2InstanceActionsWithTags",
    "AllowScopedResourceCreationTagging",
    "AllowScopedResourceTagging",
    "AllowScopedDeletion",
    "AllowPassingInstanceRole",
    "AllowScopedInstanceProfileCreationActions",
    "AllowInterruptionQueueActions",
    "AllowAPIServerEndpointDiscovery",
    "AllowUnscopedInstanceProfileListAction",
];

/// Whether a controller policy document is recognisably Karpenter's own for this cluster
/// (`cluster_arn`): a statement carries a Sid only Karpenter's policies use and the document
/// names the cluster, or every Allow statement grants only actions some Karpenter release needs
/// (`karpenter_actions`) on every resource (`*`), like the hand-added `iam:ListInstanceProfiles`.
/// Anything scoped elsewhere (KMS rights, a second node role to pass, a custom AMI parameter) is
/// not, and stays on the role.
pub fn is_karpenter_policy(doc: &Value, karpenter_actions: &BTreeSet<String>, cluster_arn: &str) -> bool {
    let st = statements(doc);
    if st.iter().any(|s| s["Sid"].as_str().is_some_and(|sid| KARPENTER_SIDS.contains(&sid))) && names_cluster(doc, cluster_arn) {
        return true;
    }
    let allows: Vec<&Value> = st.iter().copied().filter(|s| is_allow(s)).collect();
    !allows.is_empty()
        && allows.iter().all(|s| {
            strings(&s["Resource"]).into_iter().eq(["*".to_string()])
                && strings(&s["Action"]).iter().all(|a| karpenter_actions.contains(a))
        })
}

/// Whether a controller policy document is the pre-v1 one (Karpenter v0.33-v0.37, the
/// terraform-aws-eks module v20's default `enable_v1_permissions = false`): its instance
/// statement is `AllowScopedEC2InstanceActions`, or it scopes by the v0.32 `provisioner-name`
/// tag, and it lacks v1's `AllowScopedEC2InstanceAccessActions`.
pub fn is_pre_v1_policy(doc: &Value) -> bool {
    let st = statements(doc);
    let sid = |want: &str| st.iter().any(|s| s["Sid"].as_str() == Some(want));
    (sid("AllowScopedEC2InstanceActions") || doc.to_string().contains("karpenter.sh/provisioner-name"))
        && !sid("AllowScopedEC2InstanceAccessActions")
}

/// The SQS queue ARNs the documents let the holder receive from, named exactly.
pub fn receive_queues(docs: &[&Value]) -> Vec<String> {
    let mut out = Vec::new();
    for s in docs.iter().flat_map(|d| statements(d)) {
        if is_allow(s) && statement_takes(s, "sqs:ReceiveMessage") {
            for r in strings(&s["Resource"]) {
                if r.contains(":sqs:") && !has_wildcard(&r) && !out.contains(&r) {
                    out.push(r);
                }
            }
        }
    }
    out
}

/// Which of Karpenter's interruption events (`RULES` parts) an event pattern matches: its
/// `source` holds the event's source and its `detail-type` the event's detail type.
pub fn pattern_kinds(pattern: &Value) -> Vec<&'static str> {
    let sources = strings(&pattern["source"]);
    let details = strings(&pattern["detail-type"]);
    RULES.iter().filter(|r| sources.contains(r.source) && details.contains(r.detail_type)).map(|r| r.part).collect()
}

/// Whether `name` occurs in `text` as a whole word: not next to a letter or digit.
pub fn names(text: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let bytes = text.as_bytes();
    text.match_indices(name).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + name.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric()) && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// Tag keys whose value names the cluster an object belongs to.
const CLUSTER_TAG_KEYS: [&str; 8] = [
    "karpctl.io/cluster",
    "eks:cluster-name",
    "alpha.eksctl.io/cluster-name",
    "karpenter.sh/discovery",
    "cluster",
    "Cluster",
    "ClusterName",
    "cluster_name",
];

/// Which cluster, other than `ours`, a rule's name and tags point at: a cluster-naming tag
/// (`karpctl.io/cluster`, `eks:cluster-name`, `kubernetes.io/cluster/<c>`, ...) with another
/// value, or else the name (or CloudFormation stack name) naming another of the region's
/// clusters and not ours. None: ours, or nothing says.
pub fn other_cluster(name: &str, tags: &[(String, String)], ours: &str, clusters: &[String]) -> Option<String> {
    let mut tagged: Vec<String> = Vec::new();
    for (k, v) in tags {
        if CLUSTER_TAG_KEYS.contains(&k.as_str()) {
            tagged.push(v.clone());
        } else if let Some(c) = k.strip_prefix("kubernetes.io/cluster/") {
            tagged.push(c.to_string());
        }
    }
    if tagged.iter().any(|t| t == ours) {
        return None;
    }
    if let Some(t) = tagged.into_iter().next() {
        return Some(t);
    }
    let texts: Vec<&str> = std::iter::once(name)
        .chain(tags.iter().filter(|(k, _)| k == "aws:cloudformation:stack-name").map(|(_, v)| v.as_str()))
        .collect();
    let matched: Vec<&String> = clusters.iter().filter(|c| texts.iter().any(|t| names(t, c))).collect();
    // A match inside a longer match is the longer one's ("c1" in "c1-b").
    let kept: Vec<&&String> = matched.iter().filter(|c| !matched.iter().any(|o| o.len() > c.len() && names(o, c))).collect();
    if kept.iter().any(|c| c.as_str() == ours) {
        return None;
    }
    kept.first().map(|c| c.to_string())
}

/// The name in a queue ARN, URL or plain name.
pub fn queue_name(s: &str) -> &str {
    let s = s.trim_end_matches('/');
    if s.starts_with("arn:") {
        return s.rsplit(':').next().unwrap_or(s);
    }
    if s.contains("://") {
        return s.rsplit('/').next().unwrap_or(s);
    }
    s
}

/// The name in a role ARN (the path dropped) or a plain name.
pub fn role_name(s: &str) -> &str {
    if s.starts_with("arn:") { s.rsplit('/').next().unwrap_or(s) } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::doc::glob;
    use serde_json::json;

    #[test]
    fn glob_is_iam_wildcards_case_insensitive() {
        assert!(glob("ec2:*", "ec2:RunInstances"));
        assert!(glob("*", "iam:PassRole"));
        assert!(glob("ec2:Describe*", "EC2:describeSubnets"));
        assert!(glob("sqs:?eceiveMessage", "sqs:ReceiveMessage"));
        assert!(!glob("ec2:Describe*", "ec2:RunInstances"));
        assert!(!glob("iam:Pass", "iam:PassRole"));
    }

    #[test]
    fn allows_weighs_wildcards_not_action_and_unconditional_denies() {
        let d = json!({"Statement": [{"Effect": "Allow", "Action": ["ec2:*"], "Resource": "*"}]});
        assert!(allows(&[&d], "ec2:CreateFleet"));
        assert!(!allows(&[&d], "iam:PassRole"));
        let not = json!({"Statement": {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}});
        assert!(allows(&[&not], "sqs:ReceiveMessage") && !allows(&[&not], "iam:PassRole"));
        let deny = json!({"Statement": [{"Effect": "Deny", "Action": "ec2:RunInstances", "Resource": "*"}]});
        assert!(!allows(&[&d, &deny], "ec2:RunInstances"));
        let conditional = json!({"Statement": [{"Effect": "Deny", "Action": "ec2:*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]});
        assert!(allows(&[&d, &conditional], "ec2:RunInstances"));
    }

    #[test]
    fn pass_role_names_roles_and_sees_unscoped_grants() {
        let d = json!({"Statement": [
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::1:role/karpctl/c/KarpenterNodeRole-c"},
            {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::1:role/Karpenter-*"},
        ]});
        assert_eq!(pass_role(&[&d]), (vec!["arn:aws:iam::1:role/karpctl/c/KarpenterNodeRole-c".to_string()], false));
        let star = json!({"Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}]});
        assert_eq!(pass_role(&[&star]), (vec![], true));
    }

    #[test]
    fn patterns_match_by_source_and_detail_type() {
        let spot = json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]});
        assert_eq!(pattern_kinds(&spot), ["SpotInterrupt"]);
        let both = json!({"source": ["aws.ec2", "aws.health"], "detail-type": ["AWS Health Event", "EC2 Instance Rebalance Recommendation"]});
        assert_eq!(pattern_kinds(&both), ["HealthEvent", "Rebalance"]);
        assert!(pattern_kinds(&json!({"source": ["aws.s3"]})).is_empty());
    }

    #[test]
    fn clusters_are_named_as_whole_words_longest_first() {
        assert!(names("Karpenter-c1-HealthEvent", "c1"));
        assert!(!names("Karpenter-c10-HealthEvent", "c1"));
        let clusters = vec!["c1".to_string(), "c1-b".to_string(), "prod".to_string()];
        assert_eq!(other_cluster("Karpenter-c1-b-Spot", &[], "c1", &clusters), Some("c1-b".into()));
        assert_eq!(other_cluster("Karpenter-c1-Spot", &[], "c1", &clusters), None);
        assert_eq!(other_cluster("KarpenterSpotInterrupt-abc", &[], "c1", &clusters), None);
        let tags = vec![("eks:cluster-name".to_string(), "prod".to_string())];
        assert_eq!(other_cluster("KarpenterSpotInterrupt-abc", &tags, "c1", &clusters), Some("prod".into()));
        let ours = vec![("karpctl.io/cluster".to_string(), "c1".to_string())];
        assert_eq!(other_cluster("Karpenter-prod-Spot", &ours, "c1", &clusters), None);
    }

    #[test]
    fn names_from_arns_and_urls() {
        assert_eq!(queue_name("arn:aws:sqs:us-east-1:1:Karpenter-c"), "Karpenter-c");
        assert_eq!(queue_name("https://sqs.us-east-1.amazonaws.com/1/Karpenter-c"), "Karpenter-c");
        assert_eq!(queue_name("Karpenter-c"), "Karpenter-c");
        assert_eq!(role_name("arn:aws:iam::1:role/karpctl/c/KarpenterNodeRole-c"), "KarpenterNodeRole-c");
        assert_eq!(role_name("KarpenterNodeRole-c"), "KarpenterNodeRole-c");
    }
}
