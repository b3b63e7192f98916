//! What the import tests share: a setup as the Terraform module's example leaves it.

use super::found::{Found, FoundPolicy, FoundRole};
use crate::karpenter_iam::KarpenterVersion;
use crate::spec::IdentityMode;
use serde_json::json;

pub(super) const TS: &str = "2024031512000012340000000a";

pub(super) fn doc(stmts: serde_json::Value) -> Option<serde_json::Value> {
    Some(json!({"Version": "2012-10-17", "Statement": stmts}))
}

pub(super) fn managed(arn: &str, d: Option<serde_json::Value>) -> FoundPolicy {
    FoundPolicy { id: arn.into(), document: d }
}

pub(super) fn tf() -> Found {
    let c = "say-when-east";
    Found {
        cluster: c.into(),
        cluster_arn: format!("arn:aws:eks:us-east-1:123456789012:cluster/{c}"),
        region: "us-east-1".into(),
        account_id: "123456789012".into(),
        mode: Some(IdentityMode::PodIdentity),
        namespace: "kube-system".into(),
        service_account: "karpenter".into(),
        controller: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/KarpenterController-{TS}"))),
        controller_searched: String::new(),
        controller_policies: vec![
            managed(
                &format!("arn:aws:iam::123456789012:policy/KarpenterController-{TS}"),
                doc(json!([{"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
                            "Resource": format!("arn:aws:eks:us-east-1:123456789012:cluster/{c}")}])),
            ),
            FoundPolicy {
                id: "ListInstanceProfiles".into(),
                document: doc(json!([{"Effect": "Allow", "Action": "iam:ListInstanceProfiles", "Resource": "*"}])),
            },
            managed(
                "arn:aws:iam::123456789012:policy/ebs-kms",
                doc(json!([{"Effect": "Allow", "Action": ["kms:CreateGrant", "kms:Decrypt"], "Resource": "*"}])),
            ),
            managed("arn:aws:iam::aws:policy/ReadOnlyAccess", None),
            managed(
                &format!("arn:aws:iam::123456789012:policy/KarpenterControllerZonalShiftPolicy-{c}"),
                doc(json!([{"Effect": "Allow", "Action": "arc-zonal-shift:GetManagedResource", "Resource": "*"}])),
            ),
            FoundPolicy {
                id: "team-s3".into(),
                document: doc(json!([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}])),
            },
        ],
        node_role: Some(FoundRole::of_arn(&format!("arn:aws:iam::123456789012:role/{c}"))),
        node_role_shared: None,
        node_roles_left: vec![],
        node_attached: vec![
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy".into(),
            "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore".into(),
        ],
        extra_node_policies: vec![],
        access_entry_type: Some("EC2_LINUX".into()),
        instance_profile: None,
        association: true,
        queue: Some(format!("Karpenter-{c}")),
        queue_kms_key: None,
        rules: [("SpotInterrupt".to_string(), format!("KarpenterSpotInterrupt-{TS}"))].into_iter().collect(),
        rules_left: vec![],
        subnets: vec!["subnet-1".into()],
        subnets_left: vec![("subnet-2".into(), "public (default route to igw-1) but MapPublicIpOnLaunch is false".into())],
        security_group: Some("sg-1".into()),
        version: KarpenterVersion::LATEST,
        pre_v1_running: None,
    }
}
