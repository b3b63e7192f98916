//! Every IAM document karpctl writes for Karpenter, by pinned Karpenter version
//! (docs/aws-behaviour.md section 3: the v1.14 split for every version, each release's changes).
//! Each document is returned canonical ([`doc::canonical`]) with `"Version"`.

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::policy::doc;

/// A supported Karpenter minor release, v1.0 to v1.14.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KarpenterVersion {
    pub minor: u32,
}

impl KarpenterVersion {
    pub const OLDEST: Self = Self { minor: 0 };
    pub const LATEST: Self = Self { minor: 14 };

    /// Parse `"1.14"`, `"v1.14"` or `"1.14.2"` (the patch is ignored; a pre-release suffix on
    /// the patch such as `1.14.0-rc.1` is accepted). Anything outside 1.0..=1.14 is an error.
    pub fn parse(s: &str) -> Result<Self, String> {
        let text = s.trim();
        let bare = text.strip_prefix('v').or_else(|| text.strip_prefix('V')).unwrap_or(text);
        let invalid = || format!("invalid Karpenter version `{text}`: expected MAJOR.MINOR such as 1.14");
        let mut parts = bare.splitn(3, '.');
        let major = parts.next().filter(|p| is_number(p)).ok_or_else(invalid)?;
        let minor = parts.next().filter(|p| is_number(p)).ok_or_else(invalid)?;
        if let Some(patch) = parts.next() {
            let digits = patch.split(['-', '+']).next().unwrap_or("");
            if !is_number(digits) {
                return Err(invalid());
            }
        }
        let supported =
            || format!("unsupported Karpenter version `{text}`: karpctl supports {} to {}", Self::OLDEST, Self::LATEST);
        let major: u32 = major.parse().map_err(|_| supported())?;
        let minor: u32 = minor.parse().map_err(|_| supported())?;
        if major != 1 || minor > Self::LATEST.minor {
            return Err(supported());
        }
        Ok(Self { minor })
    }

    /// Every supported version, oldest first.
    pub fn all() -> impl Iterator<Item = Self> {
        (Self::OLDEST.minor..=Self::LATEST.minor).map(|minor| Self { minor })
    }

    fn since(self, minor: u32) -> bool {
        self.minor >= minor
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

impl fmt::Display for KarpenterVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl FromStr for KarpenterVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// What the controller policies are built from.
#[derive(Debug, Clone, Copy)]
pub struct ControllerPolicyInputs<'a> {
    pub partition: &'a str,
    pub region: &'a str,
    pub account_id: &'a str,
    pub cluster: &'a str,
    pub node_role_arn: &'a str,
    /// `None`: no Interruption part.
    pub queue_arn: Option<&'a str>,
    /// The queue's KMS key (SSE-KMS): the controller gets kms:Decrypt on it, which SQS requires
    /// of every consumer of an encrypted queue.
    pub kms_key_arn: Option<&'a str>,
    /// ZonalShift part only when true and version >= 1.12.
    pub zonal_shift: bool,
    pub version: KarpenterVersion,
}

/// One customer-managed controller policy (`KarpenterController<Part>Policy-<c>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyPart {
    NodeLifecycle,
    IamIntegration,
    EksIntegration,
    Interruption,
    ResourceDiscovery,
    ZonalShift,
}

impl PolicyPart {
    pub const ALL: [PolicyPart; 6] = [
        PolicyPart::NodeLifecycle,
        PolicyPart::IamIntegration,
        PolicyPart::EksIntegration,
        PolicyPart::Interruption,
        PolicyPart::ResourceDiscovery,
        PolicyPart::ZonalShift,
    ];

    /// The `<Part>` in `KarpenterController<Part>Policy-<c>`, spelled as upstream does.
    pub fn name(&self) -> &'static str {
        match self {
            PolicyPart::NodeLifecycle => "NodeLifecycle",
            PolicyPart::IamIntegration => "IAMIntegration",
            PolicyPart::EksIntegration => "EKSIntegration",
            PolicyPart::Interruption => "Interruption",
            PolicyPart::ResourceDiscovery => "ResourceDiscovery",
            PolicyPart::ZonalShift => "ZonalShift",
        }
    }
}

impl fmt::Display for PolicyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The controller's customer-managed policies, in [`PolicyPart`] order, each a canonical
/// document. Interruption is present only with a queue; ZonalShift only when enabled and the
/// version is 1.12 or later.
pub fn controller_policies(i: &ControllerPolicyInputs) -> Vec<(PolicyPart, Value)> {
    let b = Builder(i);
    PolicyPart::ALL
        .iter()
        .filter_map(|&part| {
            let statements = match part {
                PolicyPart::NodeLifecycle => b.node_lifecycle(),
                PolicyPart::IamIntegration => b.iam_integration(),
                PolicyPart::EksIntegration => b.eks_integration(),
                PolicyPart::Interruption => b.interruption()?,
                PolicyPart::ResourceDiscovery => b.resource_discovery(),
                PolicyPart::ZonalShift => b.zonal_shift()?,
            };
            Some((part, document(statements)))
        })
        .collect()
}

/// EC2's service principal in a partition: `ec2.amazonaws.com.cn` in China, where
/// `ec2.amazonaws.com` fails CreateRole with "Invalid principal" (Karpenter's CloudFormation writes
/// `ec2.${AWS::URLSuffix}`; docs/aws-behaviour.md section 9).
pub fn ec2_principal(partition: &str) -> &'static str {
    if partition == "aws-cn" { "ec2.amazonaws.com.cn" } else { "ec2.amazonaws.com" }
}

/// Trust policy of the node role: EC2 may assume it. With `source_account` (the plan's
/// `identity.node_trust_source_account`), only with `aws:SourceAccount` equal to that account,
/// as the terraform-aws-eks module's `node_iam_role_source_account_condition` (v21.20) writes it.
pub fn node_role_trust(partition: &str, source_account: Option<&str>) -> Value {
    let mut statement = json!({
        "Effect": "Allow",
        "Principal": {"Service": ec2_principal(partition)},
        "Action": "sts:AssumeRole",
    });
    if let Some(account) = source_account {
        statement["Condition"] = json!({"StringEquals": {"aws:SourceAccount": account}});
    }
    document(vec![statement])
}

/// Who may assume the controller role through EKS Pod Identity: the Karpenter service account
/// of this cluster only.
#[derive(Debug, Clone, Copy)]
pub struct PodIdentityScope<'a> {
    /// `arn:<p>:eks:<r>:<a>:cluster/<c>`
    pub cluster_arn: &'a str,
    pub namespace: &'a str,
    pub service_account: &'a str,
}

/// Trust policy of the controller role for EKS Pod Identity: `sts:AssumeRole` and `sts:TagSession`
/// in one statement, only with the session tags naming this cluster, namespace and service account
/// (EKS user guide's example; upstream has no condition: docs/aws-behaviour.md 9.7).
pub fn controller_trust_pod_identity(scope: &PodIdentityScope) -> Value {
    document(vec![json!({
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {
            "StringEquals": {
                "aws:RequestTag/eks-cluster-arn": scope.cluster_arn,
                "aws:RequestTag/kubernetes-namespace": scope.namespace,
                "aws:RequestTag/kubernetes-service-account": scope.service_account,
            }
        },
    })])
}

/// Trust policy of the controller role for IRSA. `issuer_host_path` is the cluster's OIDC
/// issuer URL without `https://` (e.g. `oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE`); a
/// leading `https://` is tolerated and removed.
pub fn controller_trust_irsa(oidc_provider_arn: &str, issuer_host_path: &str, namespace: &str, service_account: &str) -> Value {
    let issuer = issuer_host_path.strip_prefix("https://").unwrap_or(issuer_host_path).trim_end_matches('/');
    document(vec![json!({
        "Effect": "Allow",
        "Principal": {"Federated": oidc_provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {
            "StringEquals": {
                format!("{issuer}:aud"): "sts.amazonaws.com",
                format!("{issuer}:sub"): format!("system:serviceaccount:{namespace}:{service_account}"),
            }
        },
    })])
}

/// Managed policies for the node role, as full ARNs for the partition: AmazonEKSWorkerNodePolicy,
/// AmazonEKS_CNI_Policy (IPv6: the customer policy `arn:<p>:iam::<a>:policy/AmazonEKS_CNI_IPv6_Policy`,
/// which the user must already have), AmazonEC2ContainerRegistryPullOnly (before v1.4:
/// AmazonEC2ContainerRegistryReadOnly), AmazonSSMManagedInstanceCore.
pub fn node_managed_policy_arns(partition: &str, account_id: &str, ipv6: bool, version: KarpenterVersion) -> Vec<String> {
    let aws = |name: &str| format!("arn:{partition}:iam::aws:policy/{name}");
    let cni = if ipv6 {
        format!("arn:{partition}:iam::{account_id}:policy/AmazonEKS_CNI_IPv6_Policy")
    } else {
        aws("AmazonEKS_CNI_Policy")
    };
    let registry = if version.since(4) { "AmazonEC2ContainerRegistryPullOnly" } else { "AmazonEC2ContainerRegistryReadOnly" };
    vec![aws("AmazonEKSWorkerNodePolicy"), cni, aws(registry), aws("AmazonSSMManagedInstanceCore")]
}

/// `arn:<p>:events:<r>:<a>:rule/<name>`: a rule on the default event bus.
pub fn event_rule_arn(partition: &str, region: &str, account_id: &str, name: &str) -> String {
    format!("arn:{partition}:events:{region}:{account_id}:rule/{name}")
}

/// The interruption queue's policy: EventBridge may send only on behalf of the given rules
/// (`aws:SourceArn`; no `sqs.amazonaws.com` principal, unlike upstream: docs/aws-behaviour.md
/// 9.12), and nothing may use the queue without TLS. `Id` and the Deny's Sid are upstream's
/// CloudFormation ones, the Allow's Sid the terraform-aws-eks module's `SqsWrite`.
pub fn queue_policy(queue_arn: &str, rule_arns: &[String]) -> Value {
    let mut doc = document(vec![
        json!({
            "Sid": "SqsWrite",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}},
        }),
        json!({
            "Sid": "DenyHTTP",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": queue_arn,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }),
    ]);
    doc["Id"] = json!("EC2InterruptionPolicy");
    doc::canonical(&doc)
}

// ---------------------------------------------------------------------------------------------

fn document(statements: Vec<Value>) -> Value {
    doc::canonical(&json!({
        "Version": doc::POLICY_VERSION,
        "Statement": statements,
    }))
}

struct Builder<'i, 'a>(&'i ControllerPolicyInputs<'a>);

impl Builder<'_, '_> {
    fn v(&self) -> KarpenterVersion {
        self.0.version
    }

    /// `arn:<p>:ec2:<r>:*:<resource>`
    fn ec2(&self, resource: &str) -> String {
        format!("arn:{}:ec2:{}:*:{resource}", self.0.partition, self.0.region)
    }

    /// `arn:<p>:ec2:<r>::<resource>` (images and snapshots have no account)
    fn ec2_shared(&self, resource: &str) -> String {
        format!("arn:{}:ec2:{}::{resource}", self.0.partition, self.0.region)
    }

    fn ec2_all(&self, resources: &[&str]) -> Vec<String> {
        resources.iter().map(|r| self.ec2(r)).collect()
    }

    fn cluster_arn(&self) -> String {
        let i = self.0;
        format!("arn:{}:eks:{}:{}:cluster/{}", i.partition, i.region, i.account_id, i.cluster)
    }

    fn instance_profiles(&self) -> String {
        format!("arn:{}:iam::{}:instance-profile/*", self.0.partition, self.0.account_id)
    }

    /// `aws:ResourceTag/kubernetes.io/cluster/<c>` or `aws:RequestTag/...`
    fn cluster_tag(&self, kind: &str) -> String {
        format!("aws:{kind}/kubernetes.io/cluster/{}", self.0.cluster)
    }

    /// The six resources an instance launch creates (and tags).
    fn launch_created(&self) -> Vec<String> {
        self.ec2_all(&[
            "fleet/*",
            "instance/*",
            "volume/*",
            "network-interface/*",
            "launch-template/*",
            "spot-instances-request/*",
        ])
    }

    fn node_lifecycle(&self) -> Vec<Value> {
        let c = self.0.cluster;
        let mut accessed =
            vec![self.ec2_shared("image/*"), self.ec2_shared("snapshot/*"), self.ec2("security-group/*"), self.ec2("subnet/*")];
        if self.v().since(3) {
            accessed.push(self.ec2("capacity-reservation/*"));
        }
        if self.v().since(11) {
            accessed.push(self.ec2("placement-group/*"));
        }
        // v1.3 to v1.8 (the single upstream policy) also listed capacity reservations among the
        // resources created with tags; the v1.9 split dropped them there (docs/aws-behaviour.md 9.16).
        let mut with_tags = self.launch_created();
        if self.v().since(3) && !self.v().since(9) {
            with_tags.push(self.ec2("capacity-reservation/*"));
        }
        let owned_nodepool = json!({
            "StringEquals": {self.cluster_tag("ResourceTag"): "owned"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
        });
        vec![
            json!({
                "Sid": "AllowScopedEC2InstanceAccessActions",
                "Effect": "Allow",
                "Resource": accessed,
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            }),
            json!({
                "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
                "Effect": "Allow",
                "Resource": self.ec2("launch-template/*"),
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Condition": owned_nodepool,
            }),
            json!({
                "Sid": "AllowScopedEC2InstanceActionsWithTags",
                "Effect": "Allow",
                "Resource": with_tags,
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Condition": {
                    "StringEquals": {
                        self.cluster_tag("RequestTag"): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedResourceCreationTagging",
                "Effect": "Allow",
                "Resource": self.launch_created(),
                "Action": "ec2:CreateTags",
                "Condition": {
                    "StringEquals": {
                        self.cluster_tag("RequestTag"): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedResourceTagging",
                "Effect": "Allow",
                "Resource": self.ec2("instance/*"),
                "Action": "ec2:CreateTags",
                "Condition": {
                    "StringEquals": {self.cluster_tag("ResourceTag"): "owned"},
                    "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                    "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": c},
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"],
                    },
                },
            }),
            json!({
                "Sid": "AllowScopedDeletion",
                "Effect": "Allow",
                "Resource": self.ec2_all(&["instance/*", "launch-template/*"]),
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Condition": owned_nodepool,
            }),
        ]
    }

    fn iam_integration(&self) -> Vec<Value> {
        let (c, r) = (self.0.cluster, self.0.region);
        // Both EC2 principals for every version: v1.0's release named only ec2.amazonaws.com,
        // which upstream corrected in its v1.0 docs (aws/karpenter-provider-aws #6839); without
        // the China one, Karpenter in aws-cn cannot pass the node role to its instances.
        let passed_to = ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"];
        let profiles = self.instance_profiles();
        vec![
            json!({
                "Sid": "AllowPassingInstanceRole",
                "Effect": "Allow",
                "Resource": self.0.node_role_arn,
                "Action": "iam:PassRole",
                "Condition": {"StringEquals": {"iam:PassedToService": passed_to}},
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileCreationActions",
                "Effect": "Allow",
                "Resource": profiles,
                "Action": ["iam:CreateInstanceProfile"],
                "Condition": {
                    "StringEquals": {
                        self.cluster_tag("RequestTag"): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "aws:RequestTag/topology.kubernetes.io/region": r,
                    },
                    "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileTagActions",
                "Effect": "Allow",
                "Resource": profiles,
                "Action": ["iam:TagInstanceProfile"],
                "Condition": {
                    "StringEquals": {
                        self.cluster_tag("ResourceTag"): "owned",
                        "aws:ResourceTag/topology.kubernetes.io/region": r,
                        self.cluster_tag("RequestTag"): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": c,
                        "aws:RequestTag/topology.kubernetes.io/region": r,
                    },
                    "StringLike": {
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                        "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    },
                },
            }),
            json!({
                "Sid": "AllowScopedInstanceProfileActions",
                "Effect": "Allow",
                "Resource": profiles,
                "Action": [
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile",
                ],
                "Condition": {
                    "StringEquals": {
                        self.cluster_tag("ResourceTag"): "owned",
                        "aws:ResourceTag/topology.kubernetes.io/region": r,
                    },
                    "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            }),
        ]
    }

    fn eks_integration(&self) -> Vec<Value> {
        vec![json!({
            "Sid": "AllowAPIServerEndpointDiscovery",
            "Effect": "Allow",
            "Resource": self.cluster_arn(),
            "Action": "eks:DescribeCluster",
        })]
    }

    fn interruption(&self) -> Option<Vec<Value>> {
        let queue_arn = self.0.queue_arn?;
        let mut statements = vec![json!({
            "Sid": "AllowInterruptionQueueActions",
            "Effect": "Allow",
            "Resource": queue_arn,
            "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        })];
        if let Some(key) = self.0.kms_key_arn {
            statements.push(json!({
                "Sid": "AllowInterruptionQueueDecryption",
                "Effect": "Allow",
                "Resource": key,
                "Action": "kms:Decrypt",
            }));
        }
        Some(statements)
    }

    fn resource_discovery(&self) -> Vec<Value> {
        let (p, r, a) = (self.0.partition, self.0.region, self.0.account_id);
        let v = self.v();
        let mut reads = vec![
            "ec2:DescribeImages",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplates",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory",
            "ec2:DescribeSubnets",
        ];
        if !v.since(1) {
            reads.push("ec2:DescribeAvailabilityZones");
        }
        if v.since(3) {
            reads.push("ec2:DescribeCapacityReservations");
        }
        if v.since(11) {
            reads.push("ec2:DescribePlacementGroups");
        }
        if v.since(13) {
            reads.push("ec2:DescribeInstanceStatus");
        }
        let mut statements = vec![
            json!({
                "Sid": "AllowRegionalReadActions",
                "Effect": "Allow",
                "Resource": "*",
                "Action": reads,
                "Condition": {"StringEquals": {"aws:RequestedRegion": r}},
            }),
            json!({
                "Sid": "AllowSSMReadActions",
                "Effect": "Allow",
                "Resource": format!("arn:{p}:ssm:{r}::parameter/aws/service/*"),
                "Action": "ssm:GetParameter",
            }),
            json!({
                "Sid": "AllowPricingReadActions",
                "Effect": "Allow",
                "Resource": "*",
                "Action": "pricing:GetProducts",
            }),
            json!({
                "Sid": "AllowInstanceProfileReadActions",
                "Effect": "Allow",
                "Resource": format!("arn:{p}:iam::{a}:instance-profile/*"),
                "Action": "iam:GetInstanceProfile",
            }),
        ];
        if v.since(7) {
            statements.push(json!({
                "Sid": "AllowUnscopedInstanceProfileListAction",
                "Effect": "Allow",
                "Resource": "*",
                "Action": "iam:ListInstanceProfiles",
            }));
        }
        if v == (KarpenterVersion { minor: 12 }) {
            // Upstream v1.12 granted DescribeInstanceStatus in its own statement, unscoped by
            // region; v1.13 folded it into AllowRegionalReadActions.
            statements.push(json!({
                "Sid": "AllowUnscopedEC2DescribeInstanceStatus",
                "Effect": "Allow",
                "Resource": "*",
                "Action": "ec2:DescribeInstanceStatus",
            }));
        }
        statements
    }

    fn zonal_shift(&self) -> Option<Vec<Value>> {
        if !self.0.zonal_shift || !self.v().since(12) {
            return None;
        }
        // v1.12 as released named the cluster ARN as the resource, which
        // arc-zonal-shift:GetManagedResource does not support: the controller fails
        // (aws/karpenter-provider-aws #9118, fixed in v1.13 by #9123 / #9167). karpctl writes the
        // working form for 1.12 too (docs/aws-behaviour.md 9.15).
        Some(vec![json!({
            "Sid": "AllowZonalShiftStatusReadOnly",
            "Effect": "Allow",
            "Resource": "*",
            "Action": ["arc-zonal-shift:GetManagedResource"],
            "Condition": {
                "StringEquals": {"arc-zonal-shift:ResourceIdentifier": self.cluster_arn()},
            },
        })])
    }
}

// ---------------------------------------------------------------------------------------------

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

/// The key policy of the key karpctl makes: IAM policies in the account may grant its use (so the
/// controller's Interruption policy can give it kms:Decrypt, and administrators keep access),
/// and EventBridge may encrypt what it sends to the queue.
pub fn key_policy(partition: &str, account_id: &str) -> serde_json::Value {
    crate::policy::doc::canonical(&serde_json::json!({
        "Version": crate::policy::doc::POLICY_VERSION,
        "Id": "karpctl-interruption-queue",
        "Statement": [
            iam_delegation_statement(partition, account_id),
            events_key_statement(),
        ],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::doc::{equivalent, size_without_whitespace};

    const ACCOUNT: &str = "111122223333";

    fn v(minor: u32) -> KarpenterVersion {
        KarpenterVersion { minor }
    }

    fn inputs<'a>(version: KarpenterVersion, queue: Option<&'a str>, zonal: bool) -> ControllerPolicyInputs<'a> {
        ControllerPolicyInputs {
            partition: "aws",
            region: "us-west-2",
            account_id: ACCOUNT,
            cluster: "demo",
            node_role_arn: "arn:aws:iam::111122223333:role/KarpenterNodeRole-demo",
            queue_arn: queue,
            kms_key_arn: None,
            zonal_shift: zonal,
            version,
        }
    }

    const QUEUE: &str = "arn:aws:sqs:us-west-2:111122223333:Karpenter-demo";

    fn policies(version: KarpenterVersion) -> Vec<(PolicyPart, Value)> {
        controller_policies(&inputs(version, Some(QUEUE), true))
    }

    fn part(policies: &[(PolicyPart, Value)], part: PolicyPart) -> Option<&Value> {
        policies.iter().find(|(p, _)| *p == part).map(|(_, d)| d)
    }

    fn all_statements(policies: &[(PolicyPart, Value)]) -> Vec<&Value> {
        policies.iter().flat_map(|(_, d)| d["Statement"].as_array().unwrap().iter()).collect()
    }

    fn statement<'p>(policies: &'p [(PolicyPart, Value)], sid: &str) -> Option<&'p Value> {
        all_statements(policies).into_iter().find(|s| s["Sid"] == sid)
    }

    fn strings(v: &Value) -> Vec<&str> {
        v.as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect()
    }

    fn has_action(policies: &[(PolicyPart, Value)], action: &str) -> bool {
        all_statements(policies).iter().any(|s| strings(&s["Action"]).contains(&action))
    }

    #[test]
    fn version_parsing() {
        assert_eq!(KarpenterVersion::parse("1.14"), Ok(v(14)));
        assert_eq!(KarpenterVersion::parse("v1.14"), Ok(v(14)));
        assert_eq!(KarpenterVersion::parse("1.14.2"), Ok(v(14)));
        assert_eq!(KarpenterVersion::parse(" 1.0 "), Ok(v(0)));
        assert_eq!(KarpenterVersion::parse("v1.7.0-rc.1"), Ok(v(7)));
        assert_eq!("1.3".parse::<KarpenterVersion>(), Ok(v(3)));
        for bad in ["", "1", "v", "1.", "1.x", "x.1", "1.14.", "1.14.x", "1.-1", "1.14 .1"] {
            let err = KarpenterVersion::parse(bad).unwrap_err();
            assert!(err.contains("invalid"), "{bad}: {err}");
        }
        for unsupported in ["0.37", "1.15", "2.0", "1.99.1", "1.99999999999"] {
            let err = KarpenterVersion::parse(unsupported).unwrap_err();
            assert!(err.contains("supports 1.0 to 1.14"), "{unsupported}: {err}");
        }
        assert_eq!(KarpenterVersion::LATEST.to_string(), "1.14");
        assert_eq!(v(0).to_string(), "1.0");
        assert!(v(6) < v(7) && v(13) < KarpenterVersion::LATEST);
        assert_eq!(KarpenterVersion::all().count(), 15);
    }

    #[test]
    fn part_names() {
        let names: Vec<_> = PolicyPart::ALL.iter().map(PolicyPart::name).collect();
        assert_eq!(
            names,
            ["NodeLifecycle", "IAMIntegration", "EKSIntegration", "Interruption", "ResourceDiscovery", "ZonalShift"]
        );
    }

    #[test]
    fn every_part_fits_in_a_managed_policy_for_the_longest_names() {
        let cluster = "c".repeat(100);
        for (partition, region) in [("aws", "ap-northeast-1"), ("aws-us-gov", "us-gov-west-1")] {
            // Worst cases: a role under a path that names the cluster, a 64-character role
            // name, an 80-character queue name.
            let node_role_arn = format!("arn:{partition}:iam::{ACCOUNT}:role/karpctl/{cluster}/{}", "r".repeat(64));
            let queue_arn = format!("arn:{partition}:sqs:{region}:{ACCOUNT}:{}", "q".repeat(80));
            for version in KarpenterVersion::all() {
                let docs = controller_policies(&ControllerPolicyInputs {
                    partition,
                    region,
                    account_id: ACCOUNT,
                    cluster: &cluster,
                    node_role_arn: &node_role_arn,
                    queue_arn: Some(&queue_arn),
                    kms_key_arn: None,
                    zonal_shift: true,
                    version,
                });
                assert!(docs.len() >= 5);
                for (part, doc) in &docs {
                    let size = size_without_whitespace(doc);
                    assert!(size < 6144, "{partition} {region} v{version} {part}: {size}");
                    let wire = doc::to_wire(doc);
                    assert!(wire.contains(&format!("arn:{partition}:")), "{part}");
                    assert!(!wire.contains("arn:aws:") || partition == "aws", "{part}: {wire}");
                }
            }
        }
    }

    /// docs/aws-behaviour.md section 3, transcribed for cluster `demo` in us-west-2.
    fn expected_v1_14() -> Vec<(PolicyPart, Value)> {
        let ec2 = |r: &str| format!("arn:aws:ec2:us-west-2:*:{r}");
        let created = [
            ec2("fleet/*"),
            ec2("instance/*"),
            ec2("volume/*"),
            ec2("network-interface/*"),
            ec2("launch-template/*"),
            ec2("spot-instances-request/*"),
        ];
        let owned = "aws:ResourceTag/kubernetes.io/cluster/demo";
        let req_owned = "aws:RequestTag/kubernetes.io/cluster/demo";
        let profiles = "arn:aws:iam::111122223333:instance-profile/*";
        let cluster_arn = "arn:aws:eks:us-west-2:111122223333:cluster/demo";
        let doc = |s: Value| json!({"Version": "2012-10-17", "Statement": s});
        vec![
            (
                PolicyPart::NodeLifecycle,
                doc(json!([
                    {"Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow",
                     "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                     "Resource": ["arn:aws:ec2:us-west-2::image/*", "arn:aws:ec2:us-west-2::snapshot/*",
                         ec2("security-group/*"), ec2("subnet/*"), ec2("capacity-reservation/*"), ec2("placement-group/*")]},
                    {"Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow",
                     "Action": ["ec2:RunInstances", "ec2:CreateFleet"], "Resource": ec2("launch-template/*"),
                     "Condition": {"StringEquals": {owned: "owned"},
                                   "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
                    {"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow",
                     "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"], "Resource": created,
                     "Condition": {"StringEquals": {req_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": "demo"},
                                   "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
                    {"Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow",
                     "Action": "ec2:CreateTags", "Resource": created,
                     "Condition": {"StringEquals": {req_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": "demo",
                                                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                                   "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
                    {"Sid": "AllowScopedResourceTagging", "Effect": "Allow",
                     "Action": "ec2:CreateTags", "Resource": ec2("instance/*"),
                     "Condition": {"StringEquals": {owned: "owned"},
                                   "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                                   "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": "demo"},
                                   "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]}}},
                    {"Sid": "AllowScopedDeletion", "Effect": "Allow",
                     "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                     "Resource": [ec2("instance/*"), ec2("launch-template/*")],
                     "Condition": {"StringEquals": {owned: "owned"},
                                   "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
                ])),
            ),
            (
                PolicyPart::IamIntegration,
                doc(json!([
                    {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
                     "Resource": "arn:aws:iam::111122223333:role/KarpenterNodeRole-demo",
                     "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}},
                    {"Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow",
                     "Action": "iam:CreateInstanceProfile", "Resource": profiles,
                     "Condition": {"StringEquals": {req_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": "demo",
                                                    "aws:RequestTag/topology.kubernetes.io/region": "us-west-2"},
                                   "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
                    {"Sid": "AllowScopedInstanceProfileTagActions", "Effect": "Allow",
                     "Action": "iam:TagInstanceProfile", "Resource": profiles,
                     "Condition": {"StringEquals": {owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": "us-west-2",
                                                    req_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": "demo",
                                                    "aws:RequestTag/topology.kubernetes.io/region": "us-west-2"},
                                   "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                                                  "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
                    {"Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
                     "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
                     "Resource": profiles,
                     "Condition": {"StringEquals": {owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": "us-west-2"},
                                   "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
                ])),
            ),
            (
                PolicyPart::EksIntegration,
                doc(json!([
                    {"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow",
                     "Action": "eks:DescribeCluster", "Resource": cluster_arn},
                ])),
            ),
            (
                PolicyPart::Interruption,
                doc(json!([
                    {"Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
                     "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"], "Resource": QUEUE},
                ])),
            ),
            (
                PolicyPart::ResourceDiscovery,
                doc(json!([
                    {"Sid": "AllowRegionalReadActions", "Effect": "Allow", "Resource": "*",
                     "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                         "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                         "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
                         "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
                     "Condition": {"StringEquals": {"aws:RequestedRegion": "us-west-2"}}},
                    {"Sid": "AllowSSMReadActions", "Effect": "Allow", "Action": "ssm:GetParameter",
                     "Resource": "arn:aws:ssm:us-west-2::parameter/aws/service/*"},
                    {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
                    {"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow",
                     "Action": "iam:ListInstanceProfiles", "Resource": "*"},
                    {"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow",
                     "Action": "iam:GetInstanceProfile", "Resource": profiles},
                ])),
            ),
            (
                PolicyPart::ZonalShift,
                doc(json!([
                    {"Sid": "AllowZonalShiftStatusReadOnly", "Effect": "Allow", "Resource": "*",
                     "Action": "arc-zonal-shift:GetManagedResource",
                     "Condition": {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn}}},
                ])),
            ),
        ]
    }

    #[test]
    fn v1_14_matches_aws_md_exactly() {
        let got = policies(KarpenterVersion::LATEST);
        let want = expected_v1_14();
        let got_parts: Vec<_> = got.iter().map(|(p, _)| *p).collect();
        assert_eq!(got_parts, PolicyPart::ALL);
        for ((gp, gd), (wp, wd)) in got.iter().zip(&want) {
            assert_eq!(gp, wp);
            assert!(equivalent(gd, wd), "{gp}: {}", doc::render_diff(Some(wd), Some(gd)).unwrap_or_default());
            assert_eq!(gd["Version"], "2012-10-17");
            assert_eq!(gd, &doc::canonical(gd), "{gp} is returned canonical");
        }
    }

    #[test]
    fn v1_14_spot_checks() {
        let p = policies(KarpenterVersion::LATEST);
        let pass = statement(&p, "AllowPassingInstanceRole").unwrap();
        assert_eq!(
            strings(&pass["Condition"]["StringEquals"]["iam:PassedToService"]),
            ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]
        );
        assert_eq!(strings(&pass["Resource"]), [inputs(v(14), None, false).node_role_arn]);
        let tagging = statement(&p, "AllowScopedResourceTagging").unwrap();
        assert_eq!(
            strings(&tagging["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"]),
            ["Name", "eks:eks-cluster-name", "karpenter.sh/nodeclaim"]
        );
        let zonal = statement(&p, "AllowZonalShiftStatusReadOnly").unwrap();
        assert_eq!(strings(&zonal["Resource"]), ["*"]);
        assert_eq!(
            strings(&zonal["Condition"]["StringEquals"]["arc-zonal-shift:ResourceIdentifier"]),
            ["arn:aws:eks:us-west-2:111122223333:cluster/demo"]
        );
        assert!(statement(&p, "AllowUnscopedEC2DescribeInstanceStatus").is_none());
        assert!(!has_action(&p, "ec2:DescribeAvailabilityZones"));
    }

    #[test]
    fn statements_land_in_their_parts() {
        let p = policies(KarpenterVersion::LATEST);
        let sids = |which: PolicyPart| -> Vec<String> {
            let mut s: Vec<String> = part(&p, which).unwrap()["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["Sid"].as_str().unwrap().to_string())
                .collect();
            s.sort();
            s
        };
        assert_eq!(
            sids(PolicyPart::ResourceDiscovery),
            [
                "AllowInstanceProfileReadActions",
                "AllowPricingReadActions",
                "AllowRegionalReadActions",
                "AllowSSMReadActions",
                "AllowUnscopedInstanceProfileListAction"
            ]
        );
        assert_eq!(sids(PolicyPart::EksIntegration), ["AllowAPIServerEndpointDiscovery"]);
        assert_eq!(sids(PolicyPart::Interruption), ["AllowInterruptionQueueActions"]);
        assert_eq!(sids(PolicyPart::NodeLifecycle).len(), 6);
        assert_eq!(sids(PolicyPart::IamIntegration).len(), 4);
    }

    #[test]
    fn v1_0_permission_set() {
        let p = policies(v(0));
        assert!(has_action(&p, "ec2:DescribeAvailabilityZones"));
        let regional = statement(&p, "AllowRegionalReadActions").unwrap();
        assert!(strings(&regional["Action"]).contains(&"ec2:DescribeAvailabilityZones"));
        assert!(part(&p, PolicyPart::ResourceDiscovery).unwrap()["Statement"].as_array().unwrap().contains(regional));
        assert!(!has_action(&p, "ec2:DescribeCapacityReservations"));
        assert!(!has_action(&p, "iam:ListInstanceProfiles"));
        assert!(!p.iter().any(|(_, d)| doc::to_wire(d).contains("capacity-reservation")));
        assert!(part(&p, PolicyPart::ZonalShift).is_none(), "zonal shift needs 1.12");
    }

    #[test]
    fn v1_1_drops_availability_zones() {
        assert!(!has_action(&policies(v(1)), "ec2:DescribeAvailabilityZones"));
    }

    #[test]
    fn pass_role_names_both_ec2_principals_for_every_version() {
        // v1.0's release named only ec2.amazonaws.com; upstream corrected it (#6839).
        for minor in KarpenterVersion::OLDEST.minor..=KarpenterVersion::LATEST.minor {
            let pass = statement(&policies(v(minor)), "AllowPassingInstanceRole").unwrap().clone();
            assert_eq!(
                strings(&pass["Condition"]["StringEquals"]["iam:PassedToService"]),
                ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"],
                "1.{minor}"
            );
        }
    }

    #[test]
    fn capacity_reservations_from_v1_3() {
        for (minor, expected) in [(2, false), (3, true), (14, true)] {
            let p = policies(v(minor));
            assert_eq!(has_action(&p, "ec2:DescribeCapacityReservations"), expected, "1.{minor}");
            let access = statement(&p, "AllowScopedEC2InstanceAccessActions").unwrap();
            assert_eq!(
                strings(&access["Resource"]).contains(&"arn:aws:ec2:us-west-2:*:capacity-reservation/*"),
                expected,
                "1.{minor}"
            );
        }
    }

    #[test]
    fn capacity_reservations_among_tagged_creations_from_v1_3_to_v1_8() {
        for version in KarpenterVersion::all() {
            let p = policies(version);
            let with_tags = statement(&p, "AllowScopedEC2InstanceActionsWithTags").unwrap();
            let listed = strings(&with_tags["Resource"]).contains(&"arn:aws:ec2:us-west-2:*:capacity-reservation/*");
            assert_eq!(listed, (3..=8).contains(&version.minor), "v{version}");
            // The creation tagging never listed them.
            let tagging = statement(&p, "AllowScopedResourceCreationTagging").unwrap();
            assert!(!doc::to_wire(tagging).contains("capacity-reservation"), "v{version}");
        }
    }

    #[test]
    fn list_instance_profiles_from_v1_7() {
        assert!(!has_action(&policies(v(6)), "iam:ListInstanceProfiles"));
        assert!(statement(&policies(v(6)), "AllowUnscopedInstanceProfileListAction").is_none());
        let p = policies(v(7));
        let list = statement(&p, "AllowUnscopedInstanceProfileListAction").unwrap();
        assert_eq!(strings(&list["Action"]), ["iam:ListInstanceProfiles"]);
        assert_eq!(strings(&list["Resource"]), ["*"]);
    }

    #[test]
    fn placement_groups_from_v1_11() {
        for (minor, expected) in [(10, false), (11, true)] {
            let p = policies(v(minor));
            assert_eq!(has_action(&p, "ec2:DescribePlacementGroups"), expected, "1.{minor}");
            let access = statement(&p, "AllowScopedEC2InstanceAccessActions").unwrap();
            assert_eq!(strings(&access["Resource"]).contains(&"arn:aws:ec2:us-west-2:*:placement-group/*"), expected);
        }
    }

    #[test]
    fn describe_instance_status_from_v1_12() {
        assert!(!has_action(&policies(v(11)), "ec2:DescribeInstanceStatus"));
        // 1.12: its own unscoped statement, as upstream shipped it
        let p12 = policies(v(12));
        let own = statement(&p12, "AllowUnscopedEC2DescribeInstanceStatus").unwrap();
        assert_eq!(strings(&own["Action"]), ["ec2:DescribeInstanceStatus"]);
        assert!(own.get("Condition").is_none());
        let regional = statement(&p12, "AllowRegionalReadActions").unwrap();
        assert!(!strings(&regional["Action"]).contains(&"ec2:DescribeInstanceStatus"));
        // 1.13+: a regional read
        for minor in [13, 14] {
            let p = policies(v(minor));
            assert!(statement(&p, "AllowUnscopedEC2DescribeInstanceStatus").is_none());
            let regional = statement(&p, "AllowRegionalReadActions").unwrap();
            assert!(strings(&regional["Action"]).contains(&"ec2:DescribeInstanceStatus"));
        }
    }

    #[test]
    fn zonal_shift_only_when_enabled_and_from_v1_12() {
        for version in KarpenterVersion::all() {
            for enabled in [false, true] {
                let docs = controller_policies(&inputs(version, Some(QUEUE), enabled));
                let present = part(&docs, PolicyPart::ZonalShift).is_some();
                assert_eq!(present, enabled && version >= v(12), "v{version} enabled={enabled}");
            }
        }
        // 1.12 in the working form (as released it named the cluster ARN as resource, which fails)
        for minor in [12, 13, 14] {
            let p = policies(v(minor));
            let z = statement(&p, "AllowZonalShiftStatusReadOnly").unwrap();
            assert_eq!(strings(&z["Resource"]), ["*"], "1.{minor}");
            assert_eq!(strings(&z["Action"]), ["arc-zonal-shift:GetManagedResource"]);
            assert_eq!(
                strings(&z["Condition"]["StringEquals"]["arc-zonal-shift:ResourceIdentifier"]),
                ["arn:aws:eks:us-west-2:111122223333:cluster/demo"],
                "1.{minor}"
            );
        }
        assert_eq!(part(&policies(v(12)), PolicyPart::ZonalShift), part(&policies(v(14)), PolicyPart::ZonalShift));
    }

    #[test]
    fn interruption_absent_without_queue() {
        for version in KarpenterVersion::all() {
            let docs = controller_policies(&inputs(version, None, false));
            assert!(part(&docs, PolicyPart::Interruption).is_none());
            assert!(!has_action(&docs, "sqs:ReceiveMessage"));
            let parts: Vec<_> = docs.iter().map(|(p, _)| *p).collect();
            assert_eq!(
                parts,
                [
                    PolicyPart::NodeLifecycle,
                    PolicyPart::IamIntegration,
                    PolicyPart::EksIntegration,
                    PolicyPart::ResourceDiscovery
                ]
            );
            let with_queue = controller_policies(&inputs(version, Some(QUEUE), false));
            let q = part(&with_queue, PolicyPart::Interruption).unwrap();
            assert_eq!(strings(&q["Statement"][0]["Resource"]), [QUEUE]);
        }
    }

    #[test]
    fn partition_is_used_in_every_arn() {
        let i = ControllerPolicyInputs {
            partition: "aws-cn",
            region: "cn-north-1",
            account_id: ACCOUNT,
            cluster: "demo",
            node_role_arn: "arn:aws-cn:iam::111122223333:role/KarpenterNodeRole-demo",
            queue_arn: Some("arn:aws-cn:sqs:cn-north-1:111122223333:Karpenter-demo"),
            kms_key_arn: None,
            zonal_shift: true,
            version: KarpenterVersion::LATEST,
        };
        for (part, doc) in controller_policies(&i) {
            let wire = doc::to_wire(&doc);
            assert!(!wire.contains("arn:aws:"), "{part}: {wire}");
        }
        let arns = node_managed_policy_arns("aws-cn", ACCOUNT, false, KarpenterVersion::LATEST);
        assert!(arns.iter().all(|a| a.starts_with("arn:aws-cn:iam::aws:policy/")), "{arns:?}");
    }

    #[test]
    fn node_managed_policies() {
        assert_eq!(
            node_managed_policy_arns("aws", ACCOUNT, false, KarpenterVersion::LATEST),
            [
                "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
                "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
                "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
            ]
        );
        let ipv6_old = node_managed_policy_arns("aws-us-gov", ACCOUNT, true, v(3));
        assert_eq!(
            ipv6_old,
            [
                "arn:aws-us-gov:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                "arn:aws-us-gov:iam::111122223333:policy/AmazonEKS_CNI_IPv6_Policy",
                "arn:aws-us-gov:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
                "arn:aws-us-gov:iam::aws:policy/AmazonSSMManagedInstanceCore",
            ]
        );
        assert!(node_managed_policy_arns("aws", ACCOUNT, false, v(4))[2].ends_with("/AmazonEC2ContainerRegistryPullOnly"));
    }

    const PARTITIONS: [(&str, &str); 3] = [("aws", "us-west-2"), ("aws-cn", "cn-north-1"), ("aws-us-gov", "us-gov-west-1")];

    #[test]
    fn node_trust_without_and_with_source_account() {
        let node = node_role_trust("aws", None);
        assert!(equivalent(
            &node,
            &json!({"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}})
        ));
        assert_eq!(node, doc::canonical(&node));
        for (partition, principal) in [
            ("aws", "ec2.amazonaws.com"),
            ("aws-cn", "ec2.amazonaws.com.cn"),
            ("aws-us-gov", "ec2.amazonaws.com"),
            ("aws-eusc", "ec2.amazonaws.com"),
        ] {
            let want = json!({"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Service":principal},"Action":"sts:AssumeRole"}});
            assert!(equivalent(&node_role_trust(partition, None), &want), "{partition}");
            let scoped = node_role_trust(partition, Some(ACCOUNT));
            let want = json!({"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"Service":principal},"Action":"sts:AssumeRole",
                "Condition":{"StringEquals":{"aws:SourceAccount":ACCOUNT}}}});
            assert!(equivalent(&scoped, &want), "{partition}: {scoped:#}");
            assert_eq!(scoped, doc::canonical(&scoped));
        }
    }

    #[test]
    fn pod_identity_trust_requires_this_clusters_service_account() {
        for (partition, region) in PARTITIONS {
            let cluster_arn = format!("arn:{partition}:eks:{region}:{ACCOUNT}:cluster/demo");
            let scope = PodIdentityScope { cluster_arn: &cluster_arn, namespace: "karpenter", service_account: "karpenter-ctl" };
            let pod = controller_trust_pod_identity(&scope);
            assert_eq!(pod, doc::canonical(&pod));
            let want = json!({"Version":"2012-10-17","Statement":[{"Effect":"Allow",
                "Principal":{"Service":["pods.eks.amazonaws.com"]},"Action":["sts:TagSession","sts:AssumeRole"],
                "Condition":{"StringEquals":{
                    "aws:RequestTag/eks-cluster-arn": cluster_arn,
                    "aws:RequestTag/kubernetes-namespace": "karpenter",
                    "aws:RequestTag/kubernetes-service-account": "karpenter-ctl"}}}]});
            assert!(equivalent(&pod, &want), "{partition}: {pod:#}");
            // Exactly one statement, so no unconditioned path to either action remains.
            assert_eq!(pod["Statement"].as_array().unwrap().len(), 1);
            // Another namespace, service account or cluster is another document.
            for other in [
                PodIdentityScope { namespace: "kube-system", ..scope },
                PodIdentityScope { service_account: "karpenter", ..scope },
                PodIdentityScope { cluster_arn: "arn:aws:eks:us-west-2:111122223333:cluster/other", ..scope },
            ] {
                assert!(!equivalent(&controller_trust_pod_identity(&other), &pod));
            }
        }
    }

    #[test]
    fn irsa_trust() {
        let issuer = "oidc.eks.us-west-2.amazonaws.com/id/ABCDEF";
        let provider = format!("arn:aws:iam::111122223333:oidc-provider/{issuer}");
        let irsa = controller_trust_irsa(&provider, issuer, "kube-system", "karpenter");
        let want = json!({"Version":"2012-10-17","Statement":[{
            "Effect":"Allow","Principal":{"Federated":provider},"Action":"sts:AssumeRoleWithWebIdentity",
            "Condition":{"StringEquals":{
                "oidc.eks.us-west-2.amazonaws.com/id/ABCDEF:aud":"sts.amazonaws.com",
                "oidc.eks.us-west-2.amazonaws.com/id/ABCDEF:sub":"system:serviceaccount:kube-system:karpenter"}}}]});
        assert!(equivalent(&irsa, &want), "{irsa:#}");
        let with_scheme = controller_trust_irsa(&provider, &format!("https://{issuer}"), "kube-system", "karpenter");
        assert_eq!(with_scheme, irsa);
    }

    #[test]
    fn queue_policy_accepts_only_the_plans_rules() {
        for (partition, region) in PARTITIONS {
            let queue = format!("arn:{partition}:sqs:{region}:{ACCOUNT}:Karpenter-demo");
            let rules: Vec<String> = ["HealthEvent", "SpotInterrupt"]
                .iter()
                .map(|p| event_rule_arn(partition, region, ACCOUNT, &format!("Karpenter-demo-{p}")))
                .collect();
            assert_eq!(rules[0], format!("arn:{partition}:events:{region}:{ACCOUNT}:rule/Karpenter-demo-HealthEvent"));
            let q = queue_policy(&queue, &rules);
            assert_eq!(q, doc::canonical(&q));
            let want = json!({"Version":"2012-10-17","Id":"EC2InterruptionPolicy","Statement":[
                {"Sid":"SqsWrite","Effect":"Allow","Principal":{"Service":"events.amazonaws.com"},
                 "Action":"sqs:SendMessage","Resource":queue,
                 "Condition":{"ArnEquals":{"aws:SourceArn":rules}}},
                {"Sid":"DenyHTTP","Effect":"Deny","Principal":"*","Action":"sqs:*","Resource":queue,
                 "Condition":{"Bool":{"aws:SecureTransport":false}}}]});
            assert!(equivalent(&q, &want), "{partition}: {q:#}");
            assert!(!doc::to_wire(&q).contains("sqs.amazonaws.com"), "no sqs.amazonaws.com principal");
            // What SQS hands back (a string) reads as the same document.
            let back = doc::parse(&doc::to_wire(&q)).unwrap();
            assert!(equivalent(&back, &q));
            // One rule fewer is a different document: the condition names exactly the plan's rules.
            assert!(!equivalent(&queue_policy(&queue, &rules[..1]), &q));
        }
    }
}
