//! Errors a user can act on: what is wrong and what to do, and several checks' errors as one.

use anyhow::Result;

/// A user-facing error: what is wrong, and what to do about it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserError {
    pub message: String,
    pub hint: Option<String>,
    /// Structured detail for `--output json` (merged into the error document).
    pub data: Option<serde_json::Value>,
}

impl UserError {
    pub fn new(message: impl Into<String>) -> Self {
        UserError { message: message.into(), hint: None, data: None }
    }
    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Several independent checks' errors as one: an AWS failure (credentials, throttling beyond
/// retries) is returned as it is; user errors are listed together with all their hints.
pub fn combine_errors(errors: Vec<anyhow::Error>) -> Result<()> {
    let mut messages: Vec<String> = Vec::new();
    let mut hints: Vec<String> = Vec::new();
    for e in errors {
        match e.downcast::<UserError>() {
            Ok(u) => {
                let (m, h) = parts(u);
                messages.extend(m);
                hints.extend(h);
            }
            Err(other) => return Err(other.context("preflight check failed")),
        }
    }
    hints.dedup();
    let hint = (!hints.is_empty()).then(|| hints.join(HINT_SEP));
    let message = match messages.len() {
        0 => return Ok(()),
        1 => messages.remove(0),
        n => format!("{n}{COMBINED}{}", messages.iter().map(|m| format!("  - {m}")).collect::<Vec<_>>().join("\n")),
    };
    Err(UserError { message, hint, data: None }.into())
}

const COMBINED: &str = " preflight checks failed:\n";
const HINT_SEP: &str = "\n      ";

/// The messages and hints of a user error, split again if it combines several.
fn parts(u: UserError) -> (Vec<String>, Vec<String>) {
    let hints: Vec<String> = u.hint.map(|h| h.split(HINT_SEP).map(str::to_string).collect()).unwrap_or_default();
    match u.message.split_once(COMBINED) {
        Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => {
            (rest.lines().map(|l| l.trim_start_matches("  - ").to_string()).collect(), hints)
        }
        _ => (vec![u.message], hints),
    }
}
