//! The domain lists, each defined once: Karpenter's interruption rules. The file imports nothing,
//! so the integration tests compile this same file (`#[path]` in tests/common) and derive their
//! expectations from it instead of listing the rules by hand.

/// How serious doctor finds a missing rule of a kind (`interruption-rule-missing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Karpenter misses events it acts on for every cluster.
    Error,
    /// Only some clusters send these events (capacity reservations).
    Warning,
}

/// One of Karpenter's interruption rules (docs/aws-behaviour.md section 2): every fact about it
/// lives in its row of `RULES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// karpctl's name for the event kind: node id `rule-<part>`, rule name
    /// `Karpenter-<cluster>-<part>`, key of `interruption.rule_names`.
    pub part: &'static str,
    /// The event pattern's `source`.
    pub source: &'static str,
    /// The event pattern's `detail-type`.
    pub detail_type: &'static str,
    /// The first Karpenter minor version (1.x) that handles these events.
    pub since_minor: u32,
    /// What doctor says when no rule sends these events to the queue.
    pub missing: Missing,
    /// The terraform-aws-eks `karpenter` module's key in its `events` map.
    pub tf_key: &'static str,
    /// The module's `name` of the rule: it names the rule `Karpenter<tf_name>-<suffix>`.
    pub tf_name: &'static str,
    /// The logical id of the rule in Karpenter's getting-started CloudFormation stack, which
    /// names an unnamed rule `<stack>-<logical id>-<random>`.
    pub cfn_id: &'static str,
}

impl Rule {
    /// The node id karpctl gives the rule, `rule-<part>`.
    pub fn node_id(&self) -> String {
        format!("rule-{}", self.part)
    }

    /// The prefix of the Terraform module's generated rule name, `Karpenter<tf_name>-`.
    pub fn tf_prefix(&self) -> String {
        format!("Karpenter{}-", self.tf_name)
    }
}

/// The interruption rules of docs/aws-behaviour.md section 2.
pub const RULES: &[Rule] = &[
    Rule {
        part: "HealthEvent",
        source: "aws.health",
        detail_type: "AWS Health Event",
        since_minor: 0,
        missing: Missing::Error,
        tf_key: "health_event",
        tf_name: "HealthEvent",
        cfn_id: "ScheduledChangeRule",
    },
    Rule {
        part: "SpotInterrupt",
        source: "aws.ec2",
        detail_type: "EC2 Spot Instance Interruption Warning",
        since_minor: 0,
        missing: Missing::Error,
        tf_key: "spot_interrupt",
        tf_name: "SpotInterrupt",
        cfn_id: "SpotInterruptionRule",
    },
    Rule {
        part: "Rebalance",
        source: "aws.ec2",
        detail_type: "EC2 Instance Rebalance Recommendation",
        since_minor: 0,
        missing: Missing::Error,
        tf_key: "instance_rebalance",
        tf_name: "InstanceRebalance",
        cfn_id: "RebalanceRule",
    },
    Rule {
        part: "StateChange",
        source: "aws.ec2",
        detail_type: "EC2 Instance State-change Notification",
        since_minor: 0,
        missing: Missing::Error,
        tf_key: "instance_state_change",
        tf_name: "InstanceStateChange",
        cfn_id: "InstanceStateChangeRule",
    },
    Rule {
        part: "CapacityReservation",
        source: "aws.ec2",
        detail_type: "EC2 Capacity Reservation Instance Interruption Warning",
        since_minor: 10,
        missing: Missing::Warning,
        tf_key: "capacity_reservation_interruption",
        tf_name: "CRInterruption",
        cfn_id: "CapacityReservationInterruptionRule",
    },
];

/// The row of a rule part, if it is one.
pub fn rule(part: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.part == part)
}
