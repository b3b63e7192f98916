//! Process-wide interrupt state. Ctrl-C before any write ends the run at once (exit 130, nothing
//! changed); once writes have started it stops scheduling new steps and lets in-flight ones
//! finish; a second Ctrl-C leaves at once.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

static CANCEL: std::sync::OnceLock<watch::Sender<bool>> = std::sync::OnceLock::new();
static APPLYING: AtomicBool = AtomicBool::new(false);

/// Ctrl-C before any write ends the run at once (exit 130, nothing changed); during `up`/`down`
/// it stops scheduling new steps and lets in-flight ones finish; a second Ctrl-C leaves at once.
pub fn install_interrupt_handler() {
    let (tx, _rx) = watch::channel(false);
    if CANCEL.set(tx).is_err() {
        return;
    }
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        if !APPLYING.load(Ordering::SeqCst) {
            crate::report::interrupted_before_writes();
            std::process::exit(crate::exit::EXIT_INTERRUPTED);
        }
        if let Some(tx) = CANCEL.get() {
            let _ = tx.send(true);
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(crate::exit::EXIT_INTERRUPTED);
        }
    });
}

/// From now on Ctrl-C lets in-flight writes finish instead of leaving at once.
pub fn writes_started() {
    APPLYING.store(true, Ordering::SeqCst);
}

/// A receiver that turns true when the user asks to stop.
pub fn cancelled() -> watch::Receiver<bool> {
    match CANCEL.get() {
        Some(tx) => tx.subscribe(),
        None => watch::channel(false).1,
    }
}
