//! What the engine tells while it runs (steps starting, finishing, retrying, waiting; notes and
//! warnings), as values. The engine only emits them; `report` renders them.

use crate::model::{Level, Step};
use std::time::Duration;

pub enum Event<'a> {
    Started {
        step: &'a Step,
    },
    Still {
        step: &'a Step,
        elapsed: Duration,
    },
    Finished {
        step: &'a Step,
        elapsed: Duration,
    },
    Failed {
        step: &'a Step,
        error: &'a str,
        elapsed: Duration,
    },
    Skipped {
        step: &'a Step,
        because: &'a str,
    },
    Cancelling {
        in_flight: usize,
    },
    /// The interrupt stopped a step part-way (a retry or a wait cut short, or abandoned).
    Stopped {
        step: &'a Step,
        elapsed: Duration,
    },
    Retrying {
        id: &'a str,
        operation: &'a str,
        code: &'a str,
        attempt: u32,
        elapsed: Duration,
    },
    /// A write succeeded and karpctl waits for AWS to show it (or for a delete to take effect).
    Waiting {
        id: &'a str,
        what: &'a str,
        elapsed: Duration,
    },
    /// A plain progress line.
    Info(&'a str),
    /// A message with a level (`note:` / `warning:`), the level a field and not text.
    Note {
        level: Level,
        text: &'a str,
    },
}

pub trait Reporter: Send + Sync {
    fn event(&self, e: Event<'_>);
}

/// Discards everything (used for `--quiet` and JSON output).
pub struct Silent;
impl Reporter for Silent {
    fn event(&self, _: Event<'_>) {}
}
