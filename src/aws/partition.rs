//! Partitions: from the caller's ARN, else from the region's name.

/// The partition of a region, from its name (a fallback: the caller's ARN is the authority).
pub fn partition(region: &str) -> &'static str {
    const PREFIXES: [(&str, &str); 7] = [
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-iso-", "aws-iso"),
        ("us-isob-", "aws-iso-b"),
        ("eu-isoe-", "aws-iso-e"),
        ("us-isof-", "aws-iso-f"),
        ("eusc-", "aws-eusc"),
    ];
    PREFIXES.iter().find(|(p, _)| region.starts_with(p)).map(|(_, part)| *part).unwrap_or("aws")
}

/// The partition in an ARN (`arn:aws-cn:sts::1:assumed-role/...` -> `aws-cn`).
pub fn partition_of_arn(arn: &str) -> Option<&str> {
    let mut parts = arn.split(':');
    match (parts.next(), parts.next()) {
        (Some("arn"), Some(p)) if !p.is_empty() && p.starts_with("aws") => Some(p),
        _ => None,
    }
}

/// The Region whose CloudTrail event history holds a partition's global services (IAM, STS's
/// global endpoint): since 2021-11-22 no other Region's does. None where AWS does not say.
pub fn global_region(partition: &str) -> Option<&'static str> {
    match partition {
        "aws" => Some("us-east-1"),
        "aws-cn" => Some("cn-north-1"),
        "aws-us-gov" => Some("us-gov-west-1"),
        _ => None,
    }
}

/// The Region of the Price List endpoint Karpenter's pricing client calls for a cluster in
/// `region` (karpenter-provider-aws `pkg/providers/pricing`: `ap-*` ap-south-1, `eu-*`
/// eu-central-1, `cn-*` cn-northwest-1, else us-east-1), where its calls are recorded. None
/// where that endpoint is not in the cluster's partition (GovCloud and the isolated ones).
pub fn pricing_region(region: &str) -> Option<&'static str> {
    match partition(region) {
        "aws" if region.starts_with("ap-") => Some("ap-south-1"),
        "aws" if region.starts_with("eu-") => Some("eu-central-1"),
        "aws" => Some("us-east-1"),
        "aws-cn" => Some("cn-northwest-1"),
        _ => None,
    }
}
