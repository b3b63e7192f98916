//! Live progress on stderr, like `terraform apply`.

use super::style::Style;
use crate::events::{Event, Reporter};
use crate::model::{Action, Level, Step};
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress on stderr, like `terraform apply`: plain lines, and on a terminal a live status line
/// of the steps in flight, redrawn under the log lines.
pub struct Progress {
    pub style: Style,
    /// stderr is a terminal: keep a live view of in-flight steps.
    pub live: bool,
    /// The terminal's width.
    pub columns: usize,
    pub in_flight: std::sync::Mutex<std::collections::BTreeMap<String, Instant>>,
}

impl Progress {
    /// `columns`: the terminal's width (COLUMNS, `Terminal::columns`).
    pub fn new(live: bool, style: Style, columns: usize) -> Self {
        Progress { style, live, columns, in_flight: Default::default() }
    }

    fn status_line(&self) -> Option<String> {
        let m = self.in_flight.lock().unwrap();
        let oldest = m.values().min()?;
        let names: Vec<&str> = m.keys().map(String::as_str).take(6).collect();
        let more = if m.len() > names.len() { format!(" +{}", m.len() - names.len()) } else { String::new() };
        let line = format!("In flight ({}) [{}]: {}{more}", m.len(), secs(oldest.elapsed()), names.join(", "));
        // One terminal row at most (a wrapped line could not be redrawn in place).
        let width = self.columns.max(20) - 1;
        Some(if line.chars().count() > width { line.chars().take(width - 3).chain("...".chars()).collect() } else { line })
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

impl Reporter for Progress {
    fn event(&self, e: Event<'_>) {
        match &e {
            Event::Started { step } => {
                self.in_flight.lock().unwrap().insert(step.id.clone(), Instant::now());
            }
            Event::Finished { step, .. }
            | Event::Failed { step, .. }
            | Event::Skipped { step, .. }
            | Event::Stopped { step, .. } => {
                self.in_flight.lock().unwrap().remove(&step.id);
            }
            _ => {}
        }
        let line = match e {
            Event::Started { step } => {
                if step.removed_with.is_some() {
                    None
                } else {
                    Some(format!("{}: {}... [{}]", step.id, step.action.progress(), step.name))
                }
            }
            // On a terminal the live line shows elapsed time; elsewhere a line every 10 s.
            Event::Still { step, elapsed } => (!self.live)
                .then(|| format!("{}: Still {}... [{} elapsed]", step.id, step.action.progress().to_lowercase(), secs(elapsed))),
            Event::Finished { step, elapsed } => Some(if let Some(p) = &step.removed_with {
                format!("{}: removed with {p}", step.id)
            } else {
                let what = match step.action {
                    Action::Create => "Creation",
                    Action::Delete => "Destruction",
                    Action::Replace => "Replacement",
                    Action::Update | Action::Adopt => "Modifications",
                };
                format!("{}: {what} complete after {}", step.id, secs(elapsed))
            }),
            Event::Failed { step, error, elapsed } => {
                Some(format!("{}: {} after {}: {error}", step.id, self.style.red("failed"), secs(elapsed)))
            }
            Event::Skipped { step, because } => Some(format!("{}: skipped ({because})", step.id)),
            Event::Cancelling { in_flight } => Some(format!(
                "Interrupt received: no new steps will start, and no retry or wait goes on; waiting for the calls of {in_flight} in-flight step(s) to finish (Ctrl-C again to stop at once)..."
            )),
            Event::Stopped { step, elapsed } => {
                Some(format!("{}: stopped by the interrupt after {}; not done", step.id, secs(elapsed)))
            }
            Event::Retrying { id, operation, code, attempt, elapsed } => Some(format!(
                "{id}: {operation} returned {code} (AWS is still propagating a change); retry {attempt} [{} elapsed]",
                secs(elapsed)
            )),
            Event::Waiting { id, what, elapsed } => Some(format!("{id}: waiting for {what} [{} elapsed]", secs(elapsed))),
            Event::Info(s) => Some(s.to_string()),
            Event::Note { level, text } => Some(match level {
                Level::Info => format!("note: {text}"),
                Level::Warning => format!("{}: {text}", self.style.yellow("warning")),
            }),
        };
        let mut err = std::io::stderr().lock();
        if self.live {
            let _ = write!(err, "\r\x1b[2K");
        }
        if let Some(line) = line {
            let _ = writeln!(err, "{line}");
        }
        if self.live {
            if let Some(status) = self.status_line() {
                let _ = write!(err, "{}", self.style.bold(&status));
            }
            let _ = err.flush();
        }
    }
}

/// Every progress line of a cluster, prefixed with `[<cluster>] ` (step ids included, so the live
/// view of steps in flight names the cluster too).
pub struct Prefixed {
    pub prefix: String,
    pub inner: Arc<dyn Reporter>,
}

impl Prefixed {
    fn step(&self, s: &Step) -> Step {
        let mut s = s.clone();
        s.id = format!("{}{}", self.prefix, s.id);
        s
    }
}

impl Reporter for Prefixed {
    fn event(&self, e: Event<'_>) {
        let p = &self.prefix;
        let r = &self.inner;
        match e {
            Event::Info(s) => r.event(Event::Info(&format!("{p}{s}"))),
            Event::Note { level, text } => r.event(Event::Info(&format!(
                "{p}{}: {text}",
                match level {
                    Level::Info => "note",
                    Level::Warning => "warning",
                }
            ))),
            Event::Started { step } => r.event(Event::Started { step: &self.step(step) }),
            Event::Still { step, elapsed } => r.event(Event::Still { step: &self.step(step), elapsed }),
            Event::Finished { step, elapsed } => r.event(Event::Finished { step: &self.step(step), elapsed }),
            Event::Failed { step, error, elapsed } => r.event(Event::Failed { step: &self.step(step), error, elapsed }),
            Event::Skipped { step, because } => r.event(Event::Skipped { step: &self.step(step), because }),
            Event::Retrying { id, operation, code, attempt, elapsed } => {
                r.event(Event::Retrying { id: &format!("{p}{id}"), operation, code, attempt, elapsed })
            }
            Event::Waiting { id, what, elapsed } => r.event(Event::Waiting { id: &format!("{p}{id}"), what, elapsed }),
            Event::Cancelling { .. } => r.event(e),
            Event::Stopped { step, elapsed } => r.event(Event::Stopped { step: &self.step(step), elapsed }),
        }
    }
}
