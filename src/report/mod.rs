//! The one output room. Commands return values; the `Printer` renders them as human text, JSON or
//! Markdown and is, with `main.rs`, the only code that writes to stdout or stderr. Progress goes
//! through a `Reporter`; levels are fields (`Event::Note`), never text inside a message.

#[cfg(test)]
mod docs_examples;
pub mod doctor;
mod handoff;
mod hint;
pub mod human;
pub mod import;
pub mod json;
pub mod markdown;
mod progress;
mod style;
mod values;

pub use crate::events::{Event, Reporter, Silent};
pub use handoff::Handoff;
pub use hint::{hint_of, set_run};
pub use import::{HandAddedPolicy, ImportReport, LetGo, ModuleOutput, Stack, TerraformSteps};
pub use progress::{Prefixed, Progress};
pub use style::Style;
pub use values::{AccountUse, Applied, ClusterRun, DoctorReport, FleetReport, PlanReport, ValuesReport};

use crate::aws::{self, StatsReport};
use crate::model::Plan;
use crate::options::{Format, Options};
use crate::settings::Terminal;
use markdown::Section;
use serde_json::Value;
use std::io::Write as _;
use std::sync::Arc;

/// The progress reporter for a command's options: its cluster's (many-cluster run), silent with
/// `--quiet`, else progress on stderr (with a live line on a terminal).
pub fn reporter_for(global: &Options) -> Arc<dyn Reporter> {
    if let Some(scope) = &global.scope {
        scope.reporter.clone()
    } else if global.quiet {
        Arc::new(Silent)
    } else {
        let t = global.settings.terminal;
        Arc::new(Progress::new(t.stderr, Style::stderr(&t), t.columns))
    }
}

/// The progress of a many-cluster run: no live status line (several clusters' steps interleave;
/// every line names its cluster), silent with `--quiet`.
pub fn fleet_reporter(quiet: bool, t: Terminal) -> Arc<dyn Reporter> {
    if quiet { Arc::new(Silent) } else { Arc::new(Progress::new(false, Style::stderr(&t), t.columns)) }
}

/// The only writer to stdout and stderr besides `main.rs`: renders what commands return, in the
/// format asked for. In a many-cluster run each cluster's printer is muted (the run's summary
/// is printed once, at the end).
pub struct Printer {
    format: Format,
    stats: bool,
    muted: bool,
    /// Which streams are terminals, and NO_COLOR.
    terminal: Terminal,
}

fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

fn pretty(doc: &Value) -> String {
    serde_json::to_string_pretty(doc).unwrap_or_default() + "\n"
}

impl Printer {
    pub fn new(global: &Options) -> Printer {
        Printer { format: global.output, stats: global.stats, muted: global.scope.is_some(), terminal: global.settings.terminal }
    }

    fn human(&self) -> bool {
        self.format == Format::Human && !self.muted
    }

    fn stdout_style(&self) -> Style {
        Style::stdout(&self.terminal)
    }

    fn stderr_style(&self) -> Style {
        Style::stderr(&self.terminal)
    }

    fn stats_table(&self, stats: &StatsReport) {
        if self.human() && self.stats {
            err(&human::stats_table(stats));
        }
    }

    /// The plan `up`/`down` are about to apply, before their progress (human output only).
    pub fn plan_preview(&self, plan: &Plan) {
        if self.human() {
            out(&human::render_plan(plan, self.stdout_style()));
        }
    }

    /// The plan before a question: on stdout as usual, or, when stdout is JSON or not the
    /// terminal, on stderr with the question, so that nobody answers without seeing it.
    pub fn plan_for_question(&self, plan: &Plan) {
        if self.human() && self.terminal.stdout {
            out(&human::render_plan(plan, self.stdout_style()));
        } else {
            err(&human::render_plan(plan, self.stderr_style()));
        }
    }

    /// A question on stderr (the answer is read by the caller).
    pub fn prompt(&self, question: &str) {
        err(question);
    }

    /// A command's plan report: the plan or what was applied, the stats, the error it ended with.
    /// Returns the exit code.
    pub fn plan(&self, r: &PlanReport) -> i32 {
        let code = r.exit_code();
        if self.muted {
            return code;
        }
        let conflicts = r.conflicts_error();
        match self.format {
            Format::Human => {
                match &r.applied {
                    None => out(&human::render_plan(&r.plan, self.stdout_style())),
                    Some(a) => out(&human::apply_line(r.command, a)),
                }
                match (&r.plan.identity_switch, &r.applied) {
                    // The switch says the restart itself, in its order (after the Helm change);
                    // after a step failed, as the plan said it (`up` has to run again).
                    (Some(s), Some(a)) => {
                        let done = a.failed + a.skipped + a.cancelled == 0;
                        out(&human::identity_switch(s, self.stdout_style(), done))
                    }
                    (Some(_), None) => {}
                    (None, _) => {
                        if let Some(cmd) = r.restart_command() {
                            out(&human::restart_note(&cmd, self.stdout_style()));
                        }
                    }
                }
                if let Some(h) = &r.handoff {
                    out(&handoff::handoff_text(h, self.stdout_style()));
                }
                if let Some(checks) = r.readiness.as_ref().filter(|_| r.plan.conflicts.is_empty() && r.failure.is_none()) {
                    out(&human::readiness(checks, r.pin.as_ref(), self.stdout_style()));
                }
                self.stats_table(&r.stats);
                err(&human::throttled_note(&r.stats.throttled, self.stderr_style()));
                if let Some(a) = r.applied.as_ref().filter(|a| a.cancelled > 0) {
                    err(&human::interrupted(r.command, a.cancelled));
                    return code;
                }
                if let Some(e) = r.error() {
                    self.error(&e.into(), r.command);
                }
            }
            Format::Json => match conflicts {
                Some(e) => out(&pretty(&json::error_doc(&e.into(), r.command, Some(&r.stats)))),
                None => out(&pretty(&json::plan_doc(r))),
            },
            Format::Markdown => match conflicts {
                Some(e) => err(&human::error_text(&e.into(), self.stderr_style())),
                None => out(&markdown::render(r.command, &[section_of(r)])),
            },
        }
        code
    }

    /// An error a command ended with: one JSON document on stdout, or `error:` / `caused by:` /
    /// `hint:` on stderr (then the stats table with `--stats`).
    pub fn error(&self, e: &anyhow::Error, command: &str) {
        if self.muted {
            return;
        }
        if self.format == Format::Json {
            let stats = aws::STATS.get().map(|s| s.report());
            out(&pretty(&json::error_doc(e, command, stats.as_ref())));
            return;
        }
        err(&human::error_text(e, self.stderr_style()));
    }

    /// The stats table after an error (human output with `--stats`).
    pub fn stats_after_error(&self) {
        if let Some(stats) = aws::STATS.get() {
            self.stats_table(&stats.report());
        }
    }

    pub fn values(&self, r: &ValuesReport) {
        if !self.muted {
            out(&format!("{}\n", r.text));
        }
    }

    pub fn doctor(&self, r: &DoctorReport) -> i32 {
        match self.format {
            Format::Json => {
                out(&pretty(&doctor::json_doc(&r.setup, &r.outcome, serde_json::to_value(&r.stats).unwrap_or_default())))
            }
            // Markdown is refused for every command but diff before anything runs (main.rs).
            Format::Human | Format::Markdown => {
                out(&doctor::human(&r.setup, &r.outcome, self.stdout_style()));
                self.stats_table(&r.stats);
            }
        }
        r.exit_code()
    }

    /// `karpctl import`: what it found and wrote, what `up --adopt` will change, how to let go.
    pub fn import(&self, r: &ImportReport) -> i32 {
        match self.format {
            Format::Json => out(&pretty(&import::json_doc(r))),
            Format::Human | Format::Markdown => {
                out(&import::human(r, self.stdout_style()));
                self.stats_table(&r.stats);
            }
        }
        // The plan is written and the let-go steps said; `up --adopt` would refuse it as it is.
        if r.diff.is_err() { crate::exit::EXIT_ERROR } else { crate::exit::EXIT_OK }
    }

    /// A many-cluster run's summary: one JSON document, one Markdown comment, or each cluster's
    /// part and a table.
    pub fn fleet(&self, r: &FleetReport) -> i32 {
        match self.format {
            Format::Json => out(&pretty(&json::fleet_doc(r))),
            Format::Markdown => {
                let sections: Vec<Section> = r.runs.iter().map(|d| d.section.clone()).collect();
                out(&markdown::render(r.command, &sections));
            }
            Format::Human => {
                let style = self.stdout_style();
                for d in &r.runs {
                    out(&human::fleet_cluster(r.command, d, style));
                }
                if self.stats {
                    for d in &r.runs {
                        err(&format!("[{}] AWS calls: {}\n", d.section.cluster, d.stats["calls"]));
                    }
                }
                let style = self.stderr_style();
                for d in &r.runs {
                    let t = serde_json::from_value(d.stats["throttled"].clone()).unwrap_or_default();
                    for line in human::throttled_note(&t, style).lines() {
                        err(&format!("[{}] {line}\n", d.section.cluster));
                    }
                }
                out(&human::summary_table(r.command, &r.runs));
            }
        }
        r.exit_code
    }
}

/// One cluster's section from its plan report.
fn section_of(r: &PlanReport) -> Section {
    Section {
        cluster: r.cluster.clone(),
        account_id: r.account_id.clone(),
        region: r.region.clone(),
        doc: Some(json::plan_doc(r)),
        // As a many-cluster run says it: a not-ready `diff` is an error, not "in sync".
        error: r.error().map(|e| human::error_brief(&e.into())),
    }
}

/// What the Ctrl-C handler tells the user (the process exits next).
pub fn interrupt_notice(n: crate::interrupt::Notice) {
    match n {
        crate::interrupt::Notice::BeforeWrites => err("Interrupted before any change; nothing was written.\n"),
        crate::interrupt::Notice::NoSummary => err(&format!(
            "Interrupted again, and the run did not end within {} s: leaving without its summary. Run the command again to finish; it picks up from what exists.\n",
            crate::interrupt::ABANDON_GRACE.as_secs()
        )),
    }
}
