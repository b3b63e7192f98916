//! Reading karpctl's `--output json` documents, once for every test: a plan's check results
//! (`checks.found`), the checks that ran (`checks.checked`) and its notes (`findings`), doctor's
//! findings and passed checks, string lists.
//! A key renamed in the JSON is renamed here. Each takes the document or the `Run` that printed it.

use super::Run;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// A `--output json` document: the `Value`, or the `Run` whose stdout it is.
pub trait Doc {
    fn doc(&self) -> Cow<'_, Value>;
}

impl Doc for Value {
    fn doc(&self) -> Cow<'_, Value> {
        Cow::Borrowed(self)
    }
}

impl Doc for Run {
    fn doc(&self) -> Cow<'_, Value> {
        Cow::Owned(self.json())
    }
}

/// The check results of a plan document (`checks.found` of `diff`/`up --output json`); none
/// when it has none.
pub fn found(doc: &impl Doc) -> Vec<Value> {
    doc.doc()["checks"]["found"].as_array().cloned().unwrap_or_default()
}

/// The checks a plan document says ran (`checks.checked`), in order.
pub fn checked(doc: &impl Doc) -> Vec<String> {
    str_list(&doc.doc()["checks"]["checked"])
}

/// The codes of a plan document's check results, in order.
pub fn found_codes(doc: &impl Doc) -> Vec<String> {
    found(doc).iter().map(|c| c["code"].as_str().unwrap_or_default().to_string()).collect()
}

/// A plan document's check results as code -> severity.
pub fn found_severities(doc: &impl Doc) -> BTreeMap<String, String> {
    found(doc).iter().map(|f| (text(f, "code"), text(f, "severity"))).collect()
}

/// A plan document's notes (`notes`; `findings` before format 2) as (id, level, message).
pub fn plan_notes(doc: &impl Doc) -> Vec<(String, String, String)> {
    let doc = doc.doc();
    doc["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("no notes array: {doc}"))
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("level"), s("message"))
        })
        .collect()
}

/// The findings of a doctor document (`doctor --output json`).
pub fn findings(doc: &impl Doc) -> Vec<Value> {
    let doc = doc.doc();
    doc["findings"].as_array().cloned().unwrap_or_else(|| panic!("no findings array: {doc}"))
}

/// The codes of a doctor document's findings.
pub fn finding_codes(doc: &impl Doc) -> BTreeSet<String> {
    findings(doc).iter().map(|f| text(f, "code")).collect()
}

/// A doctor document's finding with `code` (panics naming the document when there is none).
pub fn finding(doc: &impl Doc, code: &str) -> Value {
    let doc = doc.doc();
    findings(&*doc).into_iter().find(|f| f["code"] == code).unwrap_or_else(|| panic!("{code}: {doc}"))
}

/// The checks a doctor document says passed.
pub fn passed(doc: &impl Doc) -> BTreeSet<String> {
    str_list(&doc.doc()["passed"]).into_iter().collect()
}

/// The results (check results or findings) with `code`.
pub fn with_code(results: &[Value], code: &str) -> Vec<Value> {
    results.iter().filter(|f| f["code"] == code).cloned().collect()
}

/// The first result (check result or finding) with `code`.
pub fn first_with_code<'a>(results: &'a [Value], code: &str) -> Option<&'a Value> {
    results.iter().find(|c| c["code"] == code)
}

/// A JSON list of strings, in order (panics on anything else).
pub fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap_or_else(|| panic!("not a string: {x}")).to_string())
        .collect()
}

/// The string field `key` of `v` (panics naming it when it is not one).
fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("no string {key} in {v}")).to_string()
}
