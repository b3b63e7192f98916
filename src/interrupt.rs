//! Process-wide interrupt state (docs/how-it-works.md, "Ctrl-C"): before any write Ctrl-C ends the
//! run; once writes started, no step, retry, back-off or wait goes on (in-flight calls finish) and
//! a second Ctrl-C leaves in-flight steps too. The summary is printed either way.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How far the user asked the run to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    Running,
    /// One Ctrl-C: no new step, no retry, back-off or wait; calls in flight finish.
    Stopping,
    /// Two: steps in flight are left as they are (a crash's state, which the next run repairs).
    Abandon,
}

/// What the handler tells the user, said by whoever installed it (`report`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Ctrl-C before any write: the process exits next.
    BeforeWrites,
    /// A second Ctrl-C whose summary did not come within `ABANDON_GRACE`: the process exits next.
    NoSummary,
}

/// After a second Ctrl-C the run has this long to print its summary before the process leaves
/// without it.
pub const ABANDON_GRACE: Duration = Duration::from_secs(5);

static STATE: std::sync::OnceLock<watch::Sender<Stop>> = std::sync::OnceLock::new();
static LEVEL: AtomicU8 = AtomicU8::new(0);
static APPLYING: AtomicBool = AtomicBool::new(false);

fn sender() -> &'static watch::Sender<Stop> {
    STATE.get_or_init(|| watch::channel(Stop::Running).0)
}

/// Move to `s` (never back).
fn raise(s: Stop) {
    LEVEL.fetch_max(s as u8, Ordering::SeqCst);
    sender().send_if_modified(|now| {
        let raised = s > *now;
        if raised {
            *now = s;
        }
        raised
    });
}

/// Ctrl-C before any write ends the run at once (exit 130, nothing changed); during `up`/`down`
/// the first stops the run (`Stop::Stopping`), the second abandons the steps in flight
/// (`Stop::Abandon`) and the third leaves at once. `say` tells the user (`Notice`).
pub fn install_interrupt_handler(say: fn(Notice)) {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    sender();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        if !APPLYING.load(Ordering::SeqCst) {
            say(Notice::BeforeWrites);
            std::process::exit(crate::exit::EXIT_INTERRUPTED);
        }
        raise(Stop::Stopping);
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        raise(Stop::Abandon);
        // The summary is due now; if something still holds it up, leave without it.
        std::thread::spawn(move || {
            std::thread::sleep(ABANDON_GRACE);
            say(Notice::NoSummary);
            std::process::exit(crate::exit::EXIT_INTERRUPTED);
        });
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(crate::exit::EXIT_INTERRUPTED);
        }
    });
}

/// From now on Ctrl-C lets in-flight writes finish instead of leaving at once.
pub fn writes_started() {
    APPLYING.store(true, Ordering::SeqCst);
}

/// The user asked the run to stop (one Ctrl-C or more).
pub fn stopping() -> bool {
    LEVEL.load(Ordering::SeqCst) >= Stop::Stopping as u8
}

/// The user pressed Ctrl-C twice: nothing is waited for any more.
pub fn abandoned() -> bool {
    LEVEL.load(Ordering::SeqCst) >= Stop::Abandon as u8
}

/// A receiver of the stop state (the executor's).
pub fn watch() -> watch::Receiver<Stop> {
    sender().subscribe()
}

/// Wait until the user asks the run to stop (forever if never).
pub async fn stopped() {
    let mut rx = watch();
    let _ = rx.wait_for(|s| *s >= Stop::Stopping).await;
}

/// Sleep `d` unless the run is stopped first: true when the whole pause passed, false when the
/// stop cut it short (and the current step is marked as stopped, see [`watched`]).
pub async fn sleep(d: Duration) -> bool {
    if stopping() {
        reached();
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stopped() => {
            reached();
            false
        }
    }
}

tokio::task_local! {
    /// Set when the stop reached the current step: a retry, back-off or wait it cut short.
    static REACHED: Arc<AtomicBool>;
}

/// The stop cut short something the current step was doing (a retry, a back-off, a wait).
pub fn reached() {
    let _ = REACHED.try_with(|r| r.store(true, Ordering::SeqCst));
}

/// The error of a step the stop reached: it did not fail, it was stopped part-way.
#[derive(Debug)]
pub struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped by the interrupt")
    }
}

impl std::error::Error for Stopped {}

/// Run a step; an error after the stop cut short one of its retries or waits is the step's
/// stop (`Stopped`, the cause kept under it), not its failure.
pub async fn watched<T, F: Future<Output = anyhow::Result<T>>>(f: F) -> anyhow::Result<T> {
    let flag = Arc::new(AtomicBool::new(false));
    let r = REACHED.scope(flag.clone(), f).await;
    match r {
        Err(e) if flag.load(Ordering::SeqCst) => Err(e.context(Stopped)),
        r => r,
    }
}

/// Whether a step's error is its stop (see [`watched`]).
pub fn is_stopped(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Stopped>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_step_cut_short_by_the_stop_is_stopped_not_failed() {
        let failed = watched(async { Err::<(), _>(anyhow::anyhow!("AccessDenied")) }).await.unwrap_err();
        assert!(!is_stopped(&failed), "an error the stop did not reach is a failure");
        let stopped = watched(async {
            reached();
            Err::<(), _>(anyhow::anyhow!("Throttling"))
        })
        .await
        .unwrap_err();
        assert!(is_stopped(&stopped));
        assert!(format!("{stopped:#}").contains("Throttling"), "the cause stays: {stopped:#}");
        assert_eq!(watched(async { Ok::<_, anyhow::Error>(3) }).await.unwrap(), 3);
    }
}
