//! The AWS names karpctl derives from a cluster name (docs/aws-behaviour.md), written once for
//! every test: what a test looks up, injects a fault for, or expects in an ARN.

/// The IAM path of everything karpctl makes in IAM for cluster `c`.
pub fn iam_path(c: &str) -> String {
    format!("/karpctl/{c}/")
}

pub fn node_role(c: &str) -> String {
    format!("KarpenterNodeRole-{c}")
}

pub fn controller_role(c: &str) -> String {
    format!("KarpenterController-{c}")
}

/// One of the five controller policies, e.g. `part` = "NodeLifecycle".
pub fn policy_name(c: &str, part: &str) -> String {
    format!("KarpenterController{part}Policy-{c}")
}

pub fn instance_profile(c: &str) -> String {
    format!("KarpenterNodeInstanceProfile-{c}")
}

/// The interruption queue.
pub fn queue_name(c: &str) -> String {
    format!("Karpenter-{c}")
}

/// One of the five EventBridge rules, e.g. `part` = "HealthEvent".
pub fn rule_name(c: &str, part: &str) -> String {
    format!("Karpenter-{c}-{part}")
}

/// The ARN of an AWS managed policy, e.g. "AmazonEKSWorkerNodePolicy".
pub fn aws_managed(name: &str) -> String {
    format!("arn:aws:iam::aws:policy/{name}")
}
