//! What AWS records of the setup, as plain data: CloudTrail's events as its lookups return them
//! (`aws::read::cloudtrail` reads them, `facts::observed::Running` and the identity switch judge
//! them) and CloudWatch's metrics of the interruption rules and queue (`aws::read::cloudwatch`).

use crate::running::metrics::Series;
use std::time::Duration;

/// One event as LookupEvents returns it: the record (`CloudTrailEvent`, a JSON text) and the
/// event's resource names. Parse with `running::record::parse_record`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub cloudtrail_event: String,
    pub resources: Vec<String>,
}

/// Why the lookups stopped short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupProblem {
    /// `cloudtrail:LookupEvents` is not allowed to the caller.
    Refused { message: String },
    /// CloudTrail kept throttling after the SDK's retries.
    Throttled,
    /// Any other failure (network, an error AWS sent), as its message.
    Failed { message: String },
}

impl LookupProblem {
    /// The warning to show: what could not be read and the permission that reads it.
    pub fn warning(&self) -> String {
        match self {
            LookupProblem::Refused { message } => format!(
                "CloudTrail records could not be read: cloudtrail:LookupEvents was refused ({message}); allow cloudtrail:LookupEvents to the caller to check the running Karpenter"
            ),
            LookupProblem::Throttled => "CloudTrail records could not all be read: cloudtrail:LookupEvents stayed throttled (two lookups a second per account and Region, shared with every other caller); run again later".to_string(),
            LookupProblem::Failed { message } => {
                format!("CloudTrail records could not be read: cloudtrail:LookupEvents failed: {message}")
            }
        }
    }
}

/// What one lookup (one attribute, in one Region) read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupRead {
    pub region: String,
    /// `EventSource` or `EventName`.
    pub key: &'static str,
    pub value: String,
    pub events: usize,
    pub pages: usize,
    /// Its pages were all full up to the bound: older records in the window were not read.
    pub cut_short: bool,
}

impl LookupRead {
    /// "ec2.amazonaws.com in us-east-2", "CreateFleet in us-east-2".
    pub fn what(&self) -> String {
        format!("{} in {}", self.value, self.region)
    }
}

/// What the lookups read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trail {
    /// Every event read once (a record two lookups found is kept once), newest first per lookup.
    pub events: Vec<RawEvent>,
    /// LookupEvents calls that answered.
    pub pages: usize,
    /// A lookup had more pages than its bound: older records in the window were not read.
    pub truncated: bool,
    /// The first problem met; the events read before it are kept.
    pub problem: Option<LookupProblem>,
    /// How far back it read (set by `aws::read::cloudtrail::Trails::recent`).
    pub window: Duration,
    /// Each lookup made, in order.
    pub reads: Vec<LookupRead>,
}

impl Trail {
    /// The lookups cut short by their page bound.
    pub fn cut_short(&self) -> Vec<&LookupRead> {
        self.reads.iter().filter(|r| r.cut_short).collect()
    }

    /// Whether reading further back (`--trail-window`) would read more: some lookup reached the
    /// window's start (a lookup cut short by its bound reads the same newest pages however long
    /// the window), and none stopped on a problem.
    pub fn longer_window_reads_more(&self) -> bool {
        self.problem.is_none() && self.reads.iter().any(|r| !r.cut_short)
    }
}

/// What the metrics say, per rule and for the queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// (rule name, FailedInvocations Sum), in the order asked; no points: no failures sent.
    pub failed_invocations: Vec<(String, Series)>,
    /// (queue name, ApproximateAgeOfOldestMessage Maximum).
    pub oldest_message: Option<(String, Series)>,
}
