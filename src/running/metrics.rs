//! What the rules' and queue's CloudWatch datapoints say (FailedInvocations per rule, the age of
//! the queue's oldest message), as plain data for the checks; the metrics' meaning is in
//! docs/aws-behaviour.md, "What AWS records of the Karpenter that runs".

/// A queue whose oldest message is older than this is not being read. Karpenter receives with a
/// 20-second long poll in a loop and deletes every message it handles within seconds, so in a
/// healthy cluster the oldest message is seconds old; SQS publishes the metric once a minute (with
/// a few minutes' delay) and a controller restart or leader election pauses reading for about a
/// minute. Five minutes is past all of that, and a Spot interruption warning (two minutes'
/// notice) left waiting that long has already been missed.
pub const OLDEST_MESSAGE_LIMIT_S: f64 = 300.0;

/// The datapoints of one metric query (GetMetricData's `MetricDataResults` entry).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Seconds since the epoch, as returned (newest first by default).
    pub timestamps: Vec<i64>,
    pub values: Vec<f64>,
}

/// A rule whose deliveries failed in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct FailingRule {
    pub rule: String,
    /// FailedInvocations summed over the window.
    pub failed: f64,
    /// The newest datapoint with failures (seconds since the epoch).
    pub last_epoch: i64,
}

/// The rules among `(rule name, FailedInvocations Sum)` with failures, in the order given.
pub fn failing_rules(rules: &[(String, Series)]) -> Vec<FailingRule> {
    rules
        .iter()
        .filter_map(|(rule, s)| {
            let failing: Vec<(i64, f64)> =
                s.timestamps.iter().copied().zip(s.values.iter().copied()).filter(|(_, v)| *v > 0.0).collect();
            let last_epoch = failing.iter().map(|(t, _)| *t).max()?;
            Some(FailingRule { rule: rule.clone(), failed: failing.iter().map(|(_, v)| v).sum(), last_epoch })
        })
        .collect()
}

/// A queue nobody reads: its oldest message's age at the newest datapoint.
#[derive(Debug, Clone, PartialEq)]
pub struct UnreadQueue {
    pub queue: String,
    pub oldest_age_s: f64,
    pub at_epoch: i64,
}

/// The queue's `ApproximateAgeOfOldestMessage` (Maximum) at its newest datapoint, when above
/// `limit_s` (normally [`OLDEST_MESSAGE_LIMIT_S`]). Only the newest point counts: an old
/// backlog since read away is no finding.
pub fn unread_queue(queue: &str, s: &Series, limit_s: f64) -> Option<UnreadQueue> {
    let (at_epoch, age) = s.timestamps.iter().copied().zip(s.values.iter().copied()).max_by_key(|(t, _)| *t)?;
    (age > limit_s).then(|| UnreadQueue { queue: queue.to_string(), oldest_age_s: age, at_epoch })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(i64, f64)]) -> Series {
        Series { timestamps: points.iter().map(|p| p.0).collect(), values: points.iter().map(|p| p.1).collect() }
    }

    #[test]
    fn rules_with_failed_invocations_are_named_with_their_count() {
        let rules = vec![
            ("spot".to_string(), series(&[(300, 2.0), (200, 0.0), (100, 1.0)])),
            ("health".to_string(), Series::default()),
            ("rebalance".to_string(), series(&[(300, 0.0)])),
        ];
        assert_eq!(failing_rules(&rules), [FailingRule { rule: "spot".into(), failed: 3.0, last_epoch: 300 }]);
    }

    #[test]
    fn a_queue_is_unread_when_its_newest_oldest_message_is_old() {
        let limit = OLDEST_MESSAGE_LIMIT_S;
        assert_eq!(
            unread_queue("q", &series(&[(200, 900.0), (100, 10.0)]), limit),
            Some(UnreadQueue { queue: "q".into(), oldest_age_s: 900.0, at_epoch: 200 })
        );
        assert_eq!(unread_queue("q", &series(&[(100, 900.0), (200, 12.0)]), limit), None, "read since");
        assert_eq!(unread_queue("q", &Series::default(), limit), None);
        assert_eq!(unread_queue("q", &series(&[(100, 300.0)]), limit), None, "at the limit is fine");
    }
}
