//! The domain lists, each defined once: Karpenter's interruption rules. The file imports nothing,
//! so the integration tests compile this same file (`#[path]` in tests/common) and derive their
//! expectations from it instead of listing the rules by hand.

/// The interruption rules of docs/aws-behaviour.md section 2: (part, source, detail-type, since minor version).
pub const RULES: [(&str, &str, &str, u32); 5] = [
    ("HealthEvent", "aws.health", "AWS Health Event", 0),
    ("SpotInterrupt", "aws.ec2", "EC2 Spot Instance Interruption Warning", 0),
    ("Rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation", 0),
    ("StateChange", "aws.ec2", "EC2 Instance State-change Notification", 0),
    ("CapacityReservation", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", 10),
];
