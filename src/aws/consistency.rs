//! Waiting for AWS to agree: the consistency schedule (fast polls first, then back-off), the
//! retry of calls AWS refuses until an earlier change has propagated, and polls for changes that
//! show late.

use super::error::{Classify, Condition};
use crate::events::{Event, Reporter};
use std::time::{Duration, Instant};

/// Settings for the consistency retry loop. The schedule polls often while AWS is most likely to
/// become ready (every `fast` for the first `fast_for`: IAM changes typically reach EKS within 2
/// to 10 s, and a poll of these cheap calls costs little), then backs off exponentially from
/// `initial` to `max` until `deadline`. Exponential backoff from the start would overshoot the
/// moment AWS is ready by as much again as the wait itself (docs/aws-behaviour.md section 9).
#[derive(Clone, Debug)]
pub struct ConsistencyPolicy {
    pub deadline: Duration,
    pub fast: Duration,
    pub fast_for: Duration,
    pub initial: Duration,
    pub max: Duration,
}

impl Default for ConsistencyPolicy {
    fn default() -> Self {
        let secs = std::env::var("KARPCTL_CONSISTENCY_DEADLINE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
        ConsistencyPolicy {
            deadline: Duration::from_secs(secs),
            fast: Duration::from_millis(250),
            fast_for: Duration::from_secs(10),
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl ConsistencyPolicy {
    /// The pause before the next attempt, `elapsed` after the first one and `slow` pauses into the
    /// back-off phase.
    pub fn next_delay(&self, elapsed: Duration, slow: &mut u32) -> Duration {
        if elapsed < self.fast_for {
            return self.fast;
        }
        let d = self.initial.saturating_mul(1u32 << (*slow).min(16)).min(self.max);
        *slow += 1;
        d
    }
}

/// How often a retry or a wait is shown while it goes on, after the first ones: the fast polls
/// would otherwise print four lines a second.
const SHOW_EVERY: Duration = Duration::from_secs(3);
/// Every one of the first retries of a call is shown.
const SHOW_FIRST: u32 = 5;

/// Poll `check` on the consistency schedule until it answers true (Ok(true)) or the deadline
/// passes (Ok(false)): for AWS changes that succeed at once but show late (SQS attributes, a
/// deleted queue). Progress is reported as `waiting for <what>`.
pub async fn wait_until<F, Fut>(
    policy: &ConsistencyPolicy,
    reporter: &dyn Reporter,
    step_id: &str,
    what: &str,
    mut check: F,
) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    let mut slow = 0;
    let mut shown: Option<Instant> = None;
    loop {
        if check().await? {
            return Ok(true);
        }
        let delay = policy.next_delay(start.elapsed(), &mut slow);
        if start.elapsed() + delay > policy.deadline {
            return Ok(false);
        }
        if shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
            reporter.event(Event::Waiting { id: step_id, what, elapsed: start.elapsed() });
            shown = Some(Instant::now());
        }
        tokio::time::sleep(delay).await;
    }
}

/// Run `f` again while it fails with one of the `retryable` conditions (the eventual-consistency
/// kind that deserves a retry with a deadline, docs/aws-behaviour.md section 5), with exponential
/// backoff, until the deadline. Each retry is reported (operation, code, attempt, elapsed).
pub async fn with_consistency<T, E, F, Fut>(
    policy: &ConsistencyPolicy,
    reporter: &dyn Reporter,
    step_id: &str,
    operation: &str,
    retryable: &[Condition],
    mut f: F,
) -> Result<T, E>
where
    E: Classify,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    let mut slow = 0;
    let mut attempt = 1u32;
    let mut shown: Option<Instant> = None;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let delay = policy.next_delay(start.elapsed(), &mut slow);
                if !e.is_any(retryable) || start.elapsed() + delay > policy.deadline {
                    return Err(e);
                }
                if attempt <= SHOW_FIRST || shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
                    let code = e.raw_code();
                    reporter.event(Event::Retrying { id: step_id, operation, code, attempt, elapsed: start.elapsed() });
                    shown = Some(Instant::now());
                }
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}
