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
    /// The errors this one combines (`combine_errors`), each whole; empty for a single error.
    pub parts: Vec<UserError>,
}

impl UserError {
    pub fn new(message: impl Into<String>) -> Self {
        UserError { message: message.into(), hint: None, data: None, parts: Vec::new() }
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
/// retries) is returned as it is; user errors are listed together with all their hints, and
/// each keeps its own structured data (`parts`), so combining never re-parses text.
pub fn combine_errors(errors: Vec<anyhow::Error>) -> Result<()> {
    let mut flat: Vec<UserError> = Vec::new();
    for e in errors {
        match e.downcast::<UserError>() {
            Ok(u) if u.parts.is_empty() => flat.push(u),
            Ok(u) => flat.extend(u.parts),
            Err(other) => return Err(other.context("preflight check failed")),
        }
    }
    match flat.len() {
        0 => Ok(()),
        1 => Err(flat.remove(0).into()),
        n => {
            let mut hints: Vec<&str> = Vec::new();
            for h in flat.iter().filter_map(|u| u.hint.as_deref()) {
                if !hints.contains(&h) {
                    hints.push(h);
                }
            }
            let hint = (!hints.is_empty()).then(|| hints.join("\n      "));
            let lines: Vec<String> = flat.iter().map(|u| format!("  - {}", u.message)).collect();
            let message = format!("{n} preflight checks failed:\n{}", lines.join("\n"));
            // The JSON error document: each error's data merged (keys are distinct by kind).
            let mut data = serde_json::Map::new();
            for d in flat.iter().filter_map(|u| u.data.as_ref()).filter_map(|d| d.as_object()) {
                data.extend(d.clone());
            }
            let data = (!data.is_empty()).then_some(serde_json::Value::Object(data));
            Err(UserError { message, hint, data, parts: flat }.into())
        }
    }
}
