//! IAM and SQS policy documents: parse what AWS returns (percent-decoded), make equal meanings
//! equal `Value`s (docs/aws-behaviour.md section 6), render them for the wire, measure them
//! against IAM's size limit, and diff them for a plan.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use percent_encoding::percent_decode_str;
use serde_json::{Map, Value};

/// The policy language version karpctl always sends.
pub const POLICY_VERSION: &str = "2012-10-17";

/// Lines of unchanged context around each change in [`render_diff`].
const DIFF_CONTEXT: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum PolicyDocError {
    #[error("policy document is empty")]
    Empty,
    #[error("policy document is percent-encoded but does not decode to UTF-8 text")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("policy document is not valid JSON (it starts with `{snippet}`)")]
    NotJson {
        snippet: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("policy document must be a JSON object, found {found}")]
    NotObject { found: &'static str },
}

/// Percent-decode if the text looks percent-encoded (IAM returns documents URL-encoded;
/// plain JSON is tolerated too), parse, canonicalise.
pub fn parse(text: &str) -> Result<Value, PolicyDocError> {
    let doc = decode_and_parse(text)?;
    Ok(canonical(&doc))
}

/// Parse an EventBridge event pattern. Key order is ignored by construction (serde_json's map
/// is sorted); array order stays significant, so nothing is sorted here.
pub fn parse_event_pattern(text: &str) -> Result<Value, PolicyDocError> {
    let trimmed = trim_text(text);
    if trimmed.is_empty() {
        return Err(PolicyDocError::Empty);
    }
    parse_object(trimmed)
}

/// Canonical form so that semantically equal documents are equal `Value`s:
/// - `Statement` is always an array, sorted by each statement's canonical serialisation,
///   duplicates removed;
/// - `Action` / `NotAction` / `Resource` / `NotResource` are sorted, de-duplicated arrays of
///   strings;
/// - `Principal` / `NotPrincipal`: `"*"` stays `"*"`, otherwise `{type: sorted array}`;
/// - `Condition`: `{operator: {key: sorted array of strings}}`, booleans and numbers turned
///   into strings;
/// - `Effect` is `"Allow"` or `"Deny"` whatever its case;
/// - `Version`, `Id`, `Sid` and unknown keys are kept as they are (an absent `Version` stays
///   absent).
///
/// A value that is not an object is returned unchanged.
pub fn canonical(doc: &Value) -> Value {
    let Value::Object(map) = doc else {
        return doc.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "Statement" => canonical_statements(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// Whether two documents mean the same thing (see [`canonical`]).
pub fn equivalent(a: &Value, b: &Value) -> bool {
    canonical(a) == canonical(b)
}

/// Compact JSON to send to AWS: the canonical document, with `"Version": "2012-10-17"` added
/// when the document has none. Single values are sent as one-element arrays.
pub fn to_wire(doc: &Value) -> String {
    let mut doc = canonical(doc);
    if let Value::Object(map) = &mut doc {
        map.entry("Version").or_insert_with(|| Value::String(POLICY_VERSION.to_string()));
    }
    doc.to_string()
}

/// Characters of the wire form, whitespace not counted: the way IAM counts against its
/// 6,144-character managed-policy limit (and the 10,240 inline-policy total per role).
pub fn size_without_whitespace(doc: &Value) -> usize {
    to_wire(doc).chars().filter(|c| !c.is_whitespace()).count()
}

/// Human diff for a plan. Both documents are canonicalised and pretty-printed (statements
/// ordered by `Sid` so that a changed statement stays in place), then compared line by line
/// (Myers, from the `similar` crate). Only changed lines and [`DIFF_CONTEXT`] lines around them are shown, prefixed
/// `"- "`, `"+ "` or `"  "`; separate hunks are divided by a `"  ..."` line.
/// `None` when both are absent or the documents are equivalent.
pub fn render_diff(before: Option<&Value>, after: Option<&Value>) -> Option<String> {
    if let (Some(b), Some(a)) = (before, after)
        && equivalent(b, a)
    {
        return None;
    }
    if before.is_none() && after.is_none() {
        return None;
    }
    let old = before.map(display_text).unwrap_or_default();
    let new = after.map(display_text).unwrap_or_default();
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    Some(render_hunks(&old_lines, &new_lines, DIFF_CONTEXT))
}

// ---------------------------------------------------------------------------------------------
// Parsing

fn trim_text(text: &str) -> &str {
    text.trim_start_matches('\u{feff}').trim()
}

fn decode_and_parse(text: &str) -> Result<Value, PolicyDocError> {
    let trimmed = trim_text(text);
    if trimmed.is_empty() {
        return Err(PolicyDocError::Empty);
    }
    if !looks_percent_encoded(trimmed) {
        return parse_object(trimmed);
    }
    let decoded = percent_decode_str(trimmed).decode_utf8().map_err(PolicyDocError::NotUtf8)?;
    match parse_object(decoded.trim()) {
        Ok(doc) => Ok(doc),
        // IAM encodes per RFC 3986 (space = %20), but a form-style encoder writes a space as
        // `+`. `+` is never valid between JSON tokens, so retry with `+` read as a space.
        Err(first) if trimmed.contains('+') => {
            let spaced = trimmed.replace('+', "%20");
            let decoded = percent_decode_str(&spaced).decode_utf8().map_err(PolicyDocError::NotUtf8)?;
            parse_object(decoded.trim()).map_err(|_| first)
        }
        Err(e) => Err(e),
    }
}

/// Plain JSON starts with `{` (or `[`, which then fails as "not an object"); an encoded
/// document starts with `%7B` and holds at least one `%XX` escape.
fn looks_percent_encoded(text: &str) -> bool {
    if text.starts_with('{') || text.starts_with('[') {
        return false;
    }
    let bytes = text.as_bytes();
    bytes.windows(3).any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit())
}

fn parse_object(text: &str) -> Result<Value, PolicyDocError> {
    let value: Value = serde_json::from_str(text).map_err(|source| PolicyDocError::NotJson { snippet: snippet(text), source })?;
    match value {
        Value::Object(_) => Ok(value),
        other => Err(PolicyDocError::NotObject { found: kind(&other) }),
    }
}

fn snippet(text: &str) -> String {
    const MAX: usize = 40;
    let mut s: String = text.chars().take(MAX).collect();
    if text.chars().count() > MAX {
        s.push_str("...");
    }
    s
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Canonical form

fn canonical_statements(value: &Value) -> Value {
    let statements: Vec<Value> = match value {
        Value::Array(items) => items.iter().map(canonical_statement).collect(),
        Value::Object(_) => vec![canonical_statement(value)],
        other => return other.clone(),
    };
    let mut keyed: Vec<(String, Value)> = statements.into_iter().map(|s| (s.to_string(), s)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    Value::Array(keyed.into_iter().map(|(_, s)| s).collect())
}

fn canonical_statement(statement: &Value) -> Value {
    let Value::Object(map) = statement else {
        return statement.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let value = match key.as_str() {
            "Effect" => canonical_effect(value),
            "Action" | "NotAction" | "Resource" | "NotResource" => string_set(value),
            "Principal" | "NotPrincipal" => canonical_principal(value),
            "Condition" => canonical_condition(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn canonical_effect(value: &Value) -> Value {
    match value {
        Value::String(s) if s.eq_ignore_ascii_case("allow") => Value::String("Allow".into()),
        Value::String(s) if s.eq_ignore_ascii_case("deny") => Value::String("Deny".into()),
        other => other.clone(),
    }
}

fn canonical_principal(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().map(|(kind, ids)| (kind.clone(), string_set(ids))).collect()),
        // "*" (and anything malformed) stays as it is.
        other => other.clone(),
    }
}

fn canonical_condition(value: &Value) -> Value {
    let Value::Object(operators) = value else {
        return value.clone();
    };
    let mut out = Map::new();
    for (operator, block) in operators {
        let block = match block {
            Value::Object(keys) => Value::Object(keys.iter().map(|(key, values)| (key.clone(), string_set(values))).collect()),
            other => other.clone(),
        };
        out.insert(operator.clone(), block);
    }
    Value::Object(out)
}

/// A single value or an array of values as a sorted, de-duplicated array. Booleans and
/// numbers become strings; anything else (null, objects, nested arrays) is kept and sorted
/// after the strings.
fn string_set(value: &Value) -> Value {
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut out: Vec<Value> = items
        .into_iter()
        .map(|item| match item {
            Value::Bool(b) => Value::String(b.to_string()),
            Value::Number(n) => Value::String(n.to_string()),
            other => other.clone(),
        })
        .collect();
    out.sort_by(compare_set_items);
    out.dedup();
    Value::Array(out)
}

fn compare_set_items(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::String(_), _) => Ordering::Less,
        (_, Value::String(_)) => Ordering::Greater,
        (x, y) => x.to_string().cmp(&y.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Diff

/// Pretty text of the canonical document, statements ordered by Sid (then by content) so a
/// statement whose content changes keeps its place among the others.
fn display_text(doc: &Value) -> String {
    let mut doc = canonical(doc);
    if let Some(Value::Array(statements)) = doc.get_mut("Statement") {
        statements.sort_by_cached_key(|s| {
            let sid = s.get("Sid").and_then(Value::as_str).unwrap_or("").to_string();
            (sid, s.to_string())
        });
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| doc.to_string())
}

/// Changed lines with `context` unchanged lines around them (the `similar` crate's diff and
/// hunk grouping), prefixed `"- "`, `"+ "` or `"  "`; hunks divided by a `"  ..."` line.
fn render_hunks(old: &[&str], new: &[&str], context: usize) -> String {
    let diff = similar::TextDiff::configure().algorithm(similar::Algorithm::Myers).diff_slices(old, new);
    let mut out = String::new();
    for (i, group) in diff.grouped_ops(context).iter().enumerate() {
        if i > 0 {
            out.push_str("  ...\n");
        }
        for op in group {
            for change in diff.iter_changes(op) {
                out.push_str(match change.tag() {
                    similar::ChangeTag::Equal => "  ",
                    similar::ChangeTag::Delete => "- ",
                    similar::ChangeTag::Insert => "+ ",
                });
                out.push_str(change.value());
                out.push('\n');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------

// Reading what a document allows (doctor's analysis and the readiness checks on key policies).

/// The set of strings a policy field holds (a string or an array of strings).
pub fn strings(v: &Value) -> BTreeSet<String> {
    match v {
        Value::String(s) => [s.clone()].into(),
        Value::Array(a) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        _ => BTreeSet::new(),
    }
}

/// IAM's action (and resource) wildcard match: `*` any run of characters, `?` one; actions are
/// case-insensitive.
pub fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], t) || (!t.is_empty() && go(p, &t[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &t[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let t: Vec<char> = text.to_lowercase().chars().collect();
    go(&p, &t)
}

/// The statements of a document (one statement or a list).
pub fn statements(doc: &Value) -> Vec<&Value> {
    match &doc["Statement"] {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![&doc["Statement"]],
        _ => vec![],
    }
}

pub fn is_allow(s: &Value) -> bool {
    s["Effect"].as_str().is_some_and(|e| e.eq_ignore_ascii_case("allow"))
}

pub fn is_deny(s: &Value) -> bool {
    s["Effect"].as_str().is_some_and(|e| e.eq_ignore_ascii_case("deny"))
}

/// Whether a statement's Action (or NotAction) takes in `action`.
pub fn statement_takes(s: &Value, action: &str) -> bool {
    if s.get("NotAction").is_some() {
        return !strings(&s["NotAction"]).iter().any(|p| glob(p, action));
    }
    strings(&s["Action"]).iter().any(|p| glob(p, action))
}

pub fn has_condition(s: &Value) -> bool {
    s.get("Condition").is_some_and(|c| c.as_object().is_some_and(|m| !m.is_empty()))
}

/// The command that prints the IAM policy karpctl itself needs for `command` on `cluster`
/// (`caller_policy`): what a refusal of karpctl's own call points to.
pub fn grant_command(cluster: &str, command: &str) -> String {
    let f = match command {
        "up" | "diff" | "down" | "doctor" | "import" => format!(" --for {command}"),
        _ => String::new(),
    };
    format!("karpctl output --cluster {cluster} --format caller-policy{f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

    fn encode(text: &str) -> String {
        percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
    }

    #[test]
    fn percent_encoded_and_plain_parse_to_the_same_document() {
        let encoded = encode(PLAIN);
        assert!(encoded.starts_with("%7B"));
        let a = parse(&encoded).unwrap();
        let b = parse(PLAIN).unwrap();
        assert_eq!(a, b);
        assert_eq!(a["Statement"][0]["Principal"]["Service"], json!(["ec2.amazonaws.com"]));
    }

    #[test]
    fn pretty_percent_encoded_document_with_spaces_parses() {
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<Value>(PLAIN).unwrap()).unwrap();
        // RFC 3986 style (%20) ...
        assert_eq!(parse(&encode(&pretty)).unwrap(), parse(PLAIN).unwrap());
        // ... and form style, where a space is '+'.
        let form = encode(&pretty).replace("%20", "+");
        assert_eq!(parse(&form).unwrap(), parse(PLAIN).unwrap());
    }

    #[test]
    fn plain_json_with_percent_in_a_value_is_not_decoded() {
        let doc = parse(r#"{"Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/%41"}}"#).unwrap();
        assert_eq!(doc["Statement"][0]["Resource"], json!(["arn:aws:s3:::b/%41"]));
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        assert!(matches!(parse(""), Err(PolicyDocError::Empty)));
        assert!(matches!(parse("   "), Err(PolicyDocError::Empty)));
        assert!(matches!(parse("[1,2]"), Err(PolicyDocError::NotObject { found: "an array" })));
        assert!(matches!(parse("%5B%5D"), Err(PolicyDocError::NotObject { found: "an array" })));
        let err = parse(r#"{"Version": "#).unwrap_err();
        assert!(matches!(err, PolicyDocError::NotJson { .. }));
        assert!(err.to_string().contains("not valid JSON"), "{err}");
        assert!(matches!(parse("%FF%FE"), Err(PolicyDocError::NotUtf8(_))));
    }

    #[test]
    fn one_statement_equals_one_element_array() {
        let a = json!({"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:*","Resource":"*"}});
        let b = json!({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["*"]}]});
        assert!(equivalent(&a, &b));
        assert!(canonical(&a)["Statement"].is_array());
    }

    #[test]
    fn string_equals_one_element_array_and_order_and_duplicates_are_ignored() {
        let a = json!({"Statement":[{"Effect":"Allow","Action":"ec2:RunInstances","NotResource":"x"}]});
        let b = json!({"Statement":[{"Effect":"Allow","Action":["ec2:RunInstances"],"NotResource":["x"]}]});
        assert!(equivalent(&a, &b));
        let c = json!({"Statement":[{"Effect":"Allow","Action":["b","a","b"],"Resource":["2","1"]}]});
        let d = json!({"Statement":[{"Effect":"Allow","Action":["a","b"],"Resource":["1","2"]}]});
        assert!(equivalent(&c, &d));
        assert_eq!(canonical(&c)["Statement"][0]["Action"], json!(["a", "b"]));
    }

    #[test]
    fn statement_order_is_ignored_and_duplicates_collapse() {
        let s1 = json!({"Sid":"One","Effect":"Allow","Action":"a:A","Resource":"*"});
        let s2 = json!({"Sid":"Two","Effect":"Deny","Action":"b:B","Resource":"*"});
        let a = json!({"Version":"2012-10-17","Statement":[s1.clone(), s2.clone()]});
        let b = json!({"Version":"2012-10-17","Statement":[s2.clone(), s1.clone(), s2.clone()]});
        assert!(equivalent(&a, &b));
        assert_eq!(canonical(&b)["Statement"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn condition_booleans_and_numbers_equal_their_strings() {
        let a = json!({"Statement":[{"Effect":"Deny","Action":"sqs:*","Resource":"q","Principal":"*",
            "Condition":{"Bool":{"aws:SecureTransport":false},"NumericLessThan":{"s3:max-keys":10}}}]});
        let b = json!({"Statement":[{"Effect":"Deny","Action":"sqs:*","Resource":"q","Principal":"*",
            "Condition":{"Bool":{"aws:SecureTransport":"false"},"NumericLessThan":{"s3:max-keys":["10"]}}}]});
        assert!(equivalent(&a, &b));
        assert_eq!(canonical(&a)["Statement"][0]["Condition"]["Bool"]["aws:SecureTransport"], json!(["false"]));
        let c = json!({"Statement":[{"Effect":"Deny","Action":"sqs:*","Resource":"q","Principal":"*",
            "Condition":{"Bool":{"aws:SecureTransport":true},"NumericLessThan":{"s3:max-keys":10}}}]});
        assert!(!equivalent(&a, &c));
    }

    #[test]
    fn condition_value_order_is_ignored() {
        let a = json!({"Statement":[{"Effect":"Allow","Action":"iam:PassRole","Resource":"r",
            "Condition":{"StringEquals":{"iam:PassedToService":["ec2.amazonaws.com","ec2.amazonaws.com.cn"]}}}]});
        let b = json!({"Statement":[{"Effect":"Allow","Action":"iam:PassRole","Resource":"r",
            "Condition":{"StringEquals":{"iam:PassedToService":["ec2.amazonaws.com.cn","ec2.amazonaws.com"]}}}]});
        assert!(equivalent(&a, &b));
    }

    #[test]
    fn effect_is_case_insensitive() {
        let a = json!({"Statement":[{"Effect":"allow","Action":"a:A","Resource":"*"}]});
        let b = json!({"Statement":[{"Effect":"Allow","Action":"a:A","Resource":"*"}]});
        let c = json!({"Statement":[{"Effect":"DENY","Action":"a:A","Resource":"*"}]});
        assert!(equivalent(&a, &b));
        assert_eq!(canonical(&c)["Statement"][0]["Effect"], json!("Deny"));
        assert!(!equivalent(&a, &c));
    }

    #[test]
    fn principal_string_equals_array_and_star_stays_star() {
        let a = json!({"Statement":[{"Effect":"Allow","Principal":{"Service":"x"},"Action":"sts:AssumeRole"}]});
        let b = json!({"Statement":[{"Effect":"Allow","Principal":{"Service":["x"]},"Action":"sts:AssumeRole"}]});
        assert!(equivalent(&a, &b));
        let star = json!({"Statement":[{"Effect":"Deny","Principal":"*","NotPrincipal":{"AWS":["b","a"]},"Action":"sqs:*"}]});
        let c = canonical(&star);
        assert_eq!(c["Statement"][0]["Principal"], json!("*"));
        assert_eq!(c["Statement"][0]["NotPrincipal"], json!({"AWS":["a","b"]}));
    }

    #[test]
    fn version_sid_and_unknown_keys_are_kept() {
        let doc = json!({"Id":"X","Statement":[{"Sid":"S","Effect":"Allow","Action":"a:A","Resource":"*","Extra":{"k":1}}]});
        let c = canonical(&doc);
        assert!(c.get("Version").is_none(), "absent Version stays absent");
        assert_eq!(c["Id"], json!("X"));
        assert_eq!(c["Statement"][0]["Sid"], json!("S"));
        assert_eq!(c["Statement"][0]["Extra"], json!({"k":1}));
        // canonical is idempotent
        assert_eq!(canonical(&c), c);
    }

    #[test]
    fn differing_documents_are_not_equivalent() {
        let base = json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","Action":"a:A","Resource":"*"}]});
        let variants = [
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","Action":"a:B","Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","Action":["a:A","a:B"],"Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Deny","Action":"a:A","Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"T","Effect":"Allow","Action":"a:A","Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","NotAction":"a:A","Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","Action":"a:A","Resource":"arn:x"}]}),
            json!({"Statement":[{"Sid":"S","Effect":"Allow","Action":"a:A","Resource":"*"}]}),
            json!({"Version":"2012-10-17","Statement":[{"Sid":"S","Effect":"Allow","Action":"a:A","Resource":"*",
                "Condition":{"StringEquals":{"aws:RequestedRegion":"us-east-1"}}}]}),
        ];
        for v in &variants {
            assert!(!equivalent(&base, v), "{v}");
        }
    }

    #[test]
    fn to_wire_adds_version_and_is_compact() {
        let doc = json!({"Statement":{"Effect":"allow","Action":"a:A","Resource":"*"}});
        let wire = to_wire(&doc);
        assert!(!wire.contains(' ') && !wire.contains('\n'), "{wire}");
        let back: Value = serde_json::from_str(&wire).unwrap();
        assert_eq!(back["Version"], json!(POLICY_VERSION));
        assert!(equivalent(
            &back,
            &json!({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["a:A"],"Resource":["*"]}]})
        ));
        // an existing Version is not replaced
        let old = json!({"Version":"2008-10-17","Statement":[]});
        assert!(to_wire(&old).contains("2008-10-17"));
    }

    #[test]
    fn size_counts_non_whitespace_characters_of_the_wire_form() {
        let doc = json!({"Version":"2012-10-17","Statement":[{"Sid":"A b","Effect":"Allow","Action":["x:Y"],"Resource":["*"]}]});
        let wire = to_wire(&doc);
        assert_eq!(size_without_whitespace(&doc), wire.len() - 1); // the one space in "A b"
    }

    #[test]
    fn event_patterns_ignore_key_order_but_not_array_order() {
        let a = parse_event_pattern(r#"{"source":["aws.ec2"],"detail-type":["A","B"]}"#).unwrap();
        let b = parse_event_pattern(r#"{"detail-type":["A","B"], "source":["aws.ec2"]}"#).unwrap();
        let c = parse_event_pattern(r#"{"detail-type":["B","A"],"source":["aws.ec2"]}"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(matches!(parse_event_pattern("[]"), Err(PolicyDocError::NotObject { .. })));
        assert!(matches!(parse_event_pattern("nope"), Err(PolicyDocError::NotJson { .. })));
    }

    fn three_statements(middle_action: &str) -> Value {
        json!({"Version":"2012-10-17","Statement":[
            {"Sid":"AlphaStatement","Effect":"Allow","Action":["alpha:One","alpha:Two","alpha:Three"],"Resource":"arn:alpha"},
            {"Sid":"BetaStatement","Effect":"Allow","Action":["beta:One", middle_action],"Resource":"arn:beta"},
            {"Sid":"GammaStatement","Effect":"Allow","Action":["gamma:One","gamma:Two","gamma:Three"],"Resource":"arn:gamma"}
        ]})
    }

    #[test]
    fn render_diff_shows_only_the_changed_statement() {
        let before = three_statements("beta:Two");
        let after = three_statements("beta:Zwei");
        let diff = render_diff(Some(&before), Some(&after)).expect("documents differ");
        assert!(diff.lines().any(|l| l.starts_with("- ") && l.trim_end().ends_with("\"beta:Two\"")), "{diff}");
        assert!(diff.lines().any(|l| l.starts_with("+ ") && l.trim_end().ends_with("\"beta:Zwei\"")), "{diff}");
        for line in diff.lines() {
            assert!(line.starts_with("  ") || line.starts_with("+ ") || line.starts_with("- "), "bad prefix: {line:?}");
            assert!(!line.contains("alpha") && !line.contains("gamma"), "{diff}");
        }
        assert_eq!(diff.lines().filter(|l| l.starts_with("- ")).count(), 1, "{diff}");
        assert_eq!(diff.lines().filter(|l| l.starts_with("+ ")).count(), 1, "{diff}");
    }

    #[test]
    fn render_diff_none_when_equivalent_or_both_absent() {
        let a = three_statements("beta:Two");
        let mut b = a.clone();
        b["Statement"].as_array_mut().unwrap().reverse();
        assert_eq!(render_diff(Some(&a), Some(&b)), None);
        assert_eq!(render_diff(None, None), None);
    }

    #[test]
    fn render_diff_for_create_and_delete_shows_everything() {
        let doc = three_statements("beta:Two");
        let created = render_diff(None, Some(&doc)).unwrap();
        assert!(created.lines().all(|l| l.starts_with("+ ")), "{created}");
        assert!(created.contains("alpha") && created.contains("gamma"));
        let deleted = render_diff(Some(&doc), None).unwrap();
        assert!(deleted.lines().all(|l| l.starts_with("- ")), "{deleted}");
    }

    #[test]
    fn render_diff_separates_distant_hunks() {
        let before = json!({"Statement":[
            {"Sid":"A","Effect":"Allow","Action":["a:1","a:2","a:3","a:4","a:5","a:6"],"Resource":"*"},
            {"Sid":"Z","Effect":"Allow","Action":["z:1","z:2","z:3","z:4","z:5","z:6"],"Resource":"*"}]});
        let after = json!({"Statement":[
            {"Sid":"A","Effect":"Allow","Action":["a:0","a:2","a:3","a:4","a:5","a:6"],"Resource":"*"},
            {"Sid":"Z","Effect":"Allow","Action":["z:1","z:2","z:3","z:4","z:5","z:7"],"Resource":"*"}]});
        let diff = render_diff(Some(&before), Some(&after)).unwrap();
        assert!(diff.contains("  ...\n"), "{diff}");
        assert!(!diff.contains("a:4"), "{diff}");
    }
}
