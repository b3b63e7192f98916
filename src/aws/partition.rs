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
