//! CloudTrail `LookupEvents`: what the running Karpenter did, as AWS recorded it
//! (docs/aws-behaviour.md, "What AWS records of the Karpenter that runs").

/// CloudTrail answers `LookupEvents` two times a second per account and Region and throttles
/// beyond (ThrottlingException); the account's pacer for `cloudtrail` starts at this rate.
pub const LOOKUPS_PER_SECOND: f64 = 2.0;
