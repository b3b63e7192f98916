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
    /// The standard schedule with the default deadline (an empty environment's).
    fn default() -> Self {
        ConsistencyPolicy::standard(crate::settings::Settings::default().consistency_deadline)
    }
}

impl ConsistencyPolicy {
    /// The schedule of every consistency retry and wait, going on for `deadline`
    /// (`Settings::consistency_deadline`).
    pub fn standard(deadline: Duration) -> Self {
        ConsistencyPolicy {
            deadline,
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

/// Spaces calls from the start of one to the start of the next: a call that took `t` is
/// followed by a pause of `spacing - t` (none when it took longer). So "every 250 ms" and "1 s
/// apart" hold for when the calls go out, and a call's own latency is not added to every pause:
/// on AWS a refused EKS create takes about as long as the fast poll's pause, so pausing after
/// the answer would poll half as often as the schedule says (docs/aws-behaviour.md section 9).
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    last_start: Instant,
}

impl Pacer {
    /// A call starts now.
    pub fn start() -> Pacer {
        Pacer { last_start: Instant::now() }
    }
    /// The next call starts now.
    pub fn started(&mut self, at: Instant) {
        self.last_start = at;
    }
    /// The pause at `now` before a call that must start `spacing` after the last one did.
    pub fn pause(&self, now: Instant, spacing: Duration) -> Duration {
        spacing.saturating_sub(now.saturating_duration_since(self.last_start))
    }
}

/// How often a retry or a wait is shown while it goes on, after the first ones: the fast polls
/// would otherwise print four lines a second.
const SHOW_EVERY: Duration = Duration::from_secs(3);
/// Every one of the first retries of a call is shown.
const SHOW_FIRST: u32 = 5;

/// How many reads in a row must agree, and how far apart, before karpctl takes a change as one
/// AWS shows everywhere. AWS answers SQS, IAM and EKS reads from replicas: for a while after a
/// write or a delete, one read shows the change and the next does not. The first read that agrees
/// proves nothing; several in a row, spread over time, do (docs/aws-behaviour.md section 9.18,
/// where the counts are explained).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreement {
    pub reads: u32,
    pub apart: Duration,
}

impl Agreement {
    /// One read: the first answer that agrees is taken (for waits where AWS is consistent).
    pub const FIRST: Agreement = Agreement { reads: 1, apart: Duration::ZERO };
    /// SQS attributes after SetQueueAttributes or CreateQueue: 3 reads, 1 s apart.
    pub const SQS_ATTRIBUTES: Agreement = Agreement { reads: 3, apart: Duration::from_secs(1) };
    /// A queue after DeleteQueue: 5 not-found reads, 2 s apart.
    pub const SQS_QUEUE_GONE: Agreement = Agreement { reads: 5, apart: Duration::from_secs(2) };
    /// An access entry or Pod Identity association after its delete: 3 not-found reads, 1 s apart.
    pub const EKS_GONE: Agreement = Agreement { reads: 3, apart: Duration::from_secs(1) };
}

/// Poll `check` on the consistency schedule until it answers true (Ok(true)) or the deadline
/// passes (Ok(false)): for AWS changes that succeed at once but show late. Progress is reported
/// as `waiting for <what>`.
pub async fn wait_until<F, Fut>(
    policy: &ConsistencyPolicy,
    reporter: &dyn Reporter,
    step_id: &str,
    what: &str,
    check: F,
) -> anyhow::Result<bool>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    wait_agreed(policy, Agreement::FIRST, reporter, step_id, what, check).await
}

/// Poll `check` until `agreement.reads` answers in a row are true, `agreement.apart` apart (a
/// false answer starts the count again, and the polls go back to the consistency schedule), or
/// the deadline passes or Ctrl-C stops the run (Ok(false)). One read when AWS is consistent and the agreement is
/// `FIRST`. Reads are spaced from one's start to the next's (`Pacer`): the first goes out at
/// once, the last `(reads - 1) * apart` later. Progress is reported as `waiting for <what>`
/// while the reads disagree.
pub async fn wait_agreed<F, Fut>(
    policy: &ConsistencyPolicy,
    agreement: Agreement,
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
    let mut pacer = Pacer::start();
    let mut slow = 0;
    let mut agreed = 0u32;
    let mut shown: Option<Instant> = None;
    loop {
        if check().await? {
            agreed += 1;
            if agreed >= agreement.reads.max(1) {
                return Ok(true);
            }
        } else {
            agreed = 0;
        }
        let spacing = if agreed > 0 { agreement.apart } else { policy.next_delay(start.elapsed(), &mut slow) };
        let delay = pacer.pause(Instant::now(), spacing);
        if start.elapsed() + delay > policy.deadline {
            return Ok(false);
        }
        if agreed == 0 && shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
            reporter.event(Event::Waiting { id: step_id, what, elapsed: start.elapsed() });
            shown = Some(Instant::now());
        }
        // Ctrl-C ends the wait like its deadline (the step is then stopped, not failed).
        if !crate::interrupt::sleep(delay).await {
            return Ok(false);
        }
        pacer.started(Instant::now());
    }
}

/// The retry of one write on the consistency schedule, for loops that decide themselves what is
/// worth another attempt (a create answered "already exists" while the read says there is
/// nothing: a replica race). `again` pauses and reports the retry, or answers false when the
/// deadline would pass.
pub struct Retry<'a> {
    policy: &'a ConsistencyPolicy,
    reporter: &'a dyn Reporter,
    step_id: &'a str,
    operation: &'a str,
    start: Instant,
    /// When the last attempt started, if the caller says (`Retry::attempt`).
    pacer: Option<Pacer>,
    slow: u32,
    attempt: u32,
    shown: Option<Instant>,
}

impl<'a> Retry<'a> {
    pub fn new(policy: &'a ConsistencyPolicy, reporter: &'a dyn Reporter, step_id: &'a str, operation: &'a str) -> Self {
        Retry { policy, reporter, step_id, operation, start: Instant::now(), pacer: None, slow: 0, attempt: 1, shown: None }
    }

    /// An attempt starts now: `again` then spaces the next one from this one's start (`Pacer`).
    /// Without it, `again` pauses the whole delay after the answer.
    pub fn attempt(&mut self) {
        self.pacer = Some(Pacer::start());
    }

    /// Pause before the next attempt (reported with `code`), or false when the deadline would pass
    /// or Ctrl-C stops the run.
    pub async fn again(&mut self, code: &str) -> bool {
        let spacing = self.policy.next_delay(self.start.elapsed(), &mut self.slow);
        let delay = match &self.pacer {
            Some(p) => p.pause(Instant::now(), spacing),
            None => spacing,
        };
        if self.start.elapsed() + delay > self.policy.deadline {
            return false;
        }
        if self.attempt <= SHOW_FIRST || self.shown.is_none_or(|t| t.elapsed() >= SHOW_EVERY) {
            let (id, operation, attempt, elapsed) = (self.step_id, self.operation, self.attempt, self.start.elapsed());
            self.reporter.event(Event::Retrying { id, operation, code, attempt, elapsed });
            self.shown = Some(Instant::now());
        }
        if !crate::interrupt::sleep(delay).await {
            return false;
        }
        self.attempt += 1;
        true
    }
}

/// Run `f` again while it fails with one of the `retryable` conditions (the eventual-consistency
/// kind that deserves a retry with a deadline, docs/aws-behaviour.md section 5), on the
/// consistency schedule (attempts spaced from start to start), until the deadline. Each retry is
/// reported (operation, code, attempt, elapsed).
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
    let mut retry = Retry::new(policy, reporter, step_id, operation);
    loop {
        retry.attempt();
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                if !e.is_any(retryable) || !retry.again(e.raw_code()).await {
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Silent as Quiet;
    use std::sync::Mutex;

    fn quick() -> ConsistencyPolicy {
        ConsistencyPolicy {
            deadline: Duration::from_secs(2),
            fast: Duration::from_millis(5),
            fast_for: Duration::from_secs(10),
            initial: Duration::from_millis(5),
            max: Duration::from_millis(5),
        }
    }

    /// `wait_agreed` over a scripted series of answers: its result and how many reads it made.
    fn agreed(answers: &[bool], reads: u32) -> (bool, usize) {
        let script = Mutex::new(answers.iter().copied().collect::<std::collections::VecDeque<_>>());
        let made = Mutex::new(0usize);
        let agreement = Agreement { reads, apart: Duration::from_millis(5) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let ok = rt
            .block_on(wait_agreed(&quick(), agreement, &Quiet, "s", "x", || async {
                *made.lock().unwrap() += 1;
                Ok(script.lock().unwrap().pop_front().unwrap_or(false))
            }))
            .unwrap();
        (ok, made.into_inner().unwrap())
    }

    #[test]
    fn agreement_wants_that_many_reads_in_a_row() {
        assert_eq!(agreed(&[true, true, true], 3), (true, 3), "three agreeing reads end the wait");
        assert_eq!(agreed(&[true], 1), (true, 1), "FIRST: one read when AWS already agrees");
        // Reads that flip start the count again.
        assert_eq!(agreed(&[true, false, true, true, false, true, true, true], 3), (true, 8));
        assert_eq!(agreed(&[false, false, true, true, true], 3), (true, 5));
    }

    #[test]
    fn calls_are_spaced_from_start_to_start() {
        let t0 = Instant::now();
        let mut p = Pacer { last_start: t0 };
        let ms = Duration::from_millis;
        // A read that took 60 ms: 40 ms more make the 100 ms between the starts (the old
        // schedule paused the whole 100 ms after the answer).
        assert_eq!(p.pause(t0 + ms(60), ms(100)), ms(40));
        // A call slower than the spacing: the next one goes at once.
        assert_eq!(p.pause(t0 + ms(300), ms(250)), Duration::ZERO);
        p.started(t0 + ms(300));
        assert_eq!(p.pause(t0 + ms(301), ms(250)), ms(249));
    }

    #[test]
    fn reads_that_never_agree_long_enough_end_at_the_deadline() {
        let flipping: Vec<bool> = (0..2000).map(|i| i % 2 == 0).collect();
        let (ok, made) = agreed(&flipping, 2);
        assert!(!ok, "no two reads in a row agreed");
        assert!(made > 10, "it kept reading until the deadline: {made}");
    }
}
