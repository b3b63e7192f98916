//! What karpctl prints besides the live progress (`report`): exit codes, the `--stats` table,
//! and errors, for the terminal or as one JSON document.

use crate::aws;
use crate::error::UserError;
use crate::options::Format;
use crate::report::Style;
use serde_json::{Value, json};
use std::io::IsTerminal;

pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_CHANGES: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

/// The `--stats` table on stderr.
pub fn print_stats_report(r: &aws::StatsReport) {
    eprintln!("AWS calls: {} ({} reads, {} writes), {} retries", r.calls, r.reads, r.writes, r.retries);
    for (op, c) in &r.operations {
        let retries = c.attempts.saturating_sub(c.calls);
        eprintln!("  {op:<45} {:>4}{}", c.calls, if retries > 0 { format!("  ({retries} retries)") } else { String::new() });
    }
    if let Some(t) = &r.trace {
        eprintln!("  ({} units of work traced: `--output json` gives each one's calls under stats.trace)", t.len());
    }
}

/// The `error` object of a JSON document: message, causes, hint, and the error's own data.
pub fn error_json(err: &anyhow::Error) -> Value {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    let mut e = json!({"message": err.to_string(), "causes": err.chain().skip(1).map(|e| e.to_string()).collect::<Vec<_>>(), "hint": hint_of(err)});
    if let Some(Value::Object(extra)) = user.and_then(|u| u.data.clone()) {
        for (k, v) in extra {
            e[k] = v;
        }
    }
    e
}

/// The hint for an error: its own, or one for a missing permission.
pub fn hint_of(err: &anyhow::Error) -> Option<String> {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    user.and_then(|u| u.hint.clone()).or_else(|| {
        (aws::kind_of(err) == aws::ErrorKind::AccessDenied).then(|| {
            "the credentials lack a permission: the message above names the action; grant it, or run with credentials that have it".to_string()
        })
    })
}

/// Render an error for the terminal or as JSON.
pub fn report_error(err: &anyhow::Error, output: Format, command: &str) {
    let hint = hint_of(err);
    let causes: Vec<String> = err.chain().skip(1).map(|e| e.to_string()).collect();
    if output == Format::Json {
        let stats = aws::STATS.get().map(|s| serde_json::to_value(s.report()).unwrap_or(Value::Null));
        let doc = json!({
            "format_version": 1,
            "command": command,
            "error": error_json(err),
            "stats": stats,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return;
    }
    let style = Style::detect(std::io::stderr().is_terminal());
    eprintln!("{}: {err}", style.red("error"));
    for c in causes {
        eprintln!("  caused by: {c}");
    }
    if let Some(h) = hint {
        eprintln!("{}: {h}", style.bold("hint"));
    }
}
