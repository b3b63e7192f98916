//! Reading back the YAML karpctl prints, as its readers do: `yaml_1_2` with saphyr (a YAML 1.2
//! loader that shares no code with karpctl's serializer) and `yaml_1_1` the way Kubernetes and
//! Helm read it (sigs.k8s.io/yaml, go-yaml v2: `yes`/`on`/`y` are booleans, `0x1f`, `0b1`, `017`
//! and `1_000` integers, `1e3` a float). Also compiled into the unit tests (`#[path]`).

#![allow(dead_code)]

use saphyr::{LoadableYamlNode, Scalar, Yaml};
use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Value, json};

/// Every document of `text` as a YAML 1.2 loader types it.
pub fn yaml_1_2(text: &str) -> Vec<Value> {
    Yaml::load_from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}")).iter().map(to_json).collect()
}

fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Value(Scalar::Null) => Value::Null,
        Yaml::Value(Scalar::Boolean(b)) => json!(b),
        Yaml::Value(Scalar::Integer(i)) => json!(i),
        Yaml::Value(Scalar::FloatingPoint(f)) => json!(f.0),
        Yaml::Value(Scalar::String(s)) => json!(s),
        Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = match to_json(k) {
                        Value::String(s) => s,
                        // A key that is not a string cannot be told from one in JSON: mark it.
                        other => format!("!!not-a-string {other}"),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// Every document of `text` as go-yaml v2 (YAML 1.1 rules) types it, which is how the API server
/// and Helm read manifests and values.
pub fn yaml_1_1(text: &str) -> Vec<Value> {
    enum Frame {
        Seq(Vec<Value>),
        Map(Map<String, Value>, Option<String>),
    }
    fn put(stack: &mut [Frame], docs: &mut Vec<Value>, v: Value) {
        match stack.last_mut() {
            None => docs.push(v),
            Some(Frame::Seq(items)) => items.push(v),
            Some(Frame::Map(m, key)) => match key.take() {
                None => {
                    *key = Some(match v {
                        Value::String(s) => s,
                        other => format!("!!not-a-string {other}"),
                    })
                }
                Some(k) => {
                    m.insert(k, v);
                }
            },
        }
    }
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    for event in Parser::new_from_str(text) {
        let (event, _) = event.unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"));
        match event {
            Event::Scalar(v, style, _, tag) => {
                let value = if style == ScalarStyle::Plain && tag.is_none() { resolve_1_1(&v) } else { json!(v) };
                put(&mut stack, &mut docs, value);
            }
            Event::SequenceStart(..) => stack.push(Frame::Seq(Vec::new())),
            Event::MappingStart(..) => stack.push(Frame::Map(Map::new(), None)),
            Event::SequenceEnd | Event::MappingEnd => {
                let v = match stack.pop() {
                    Some(Frame::Seq(items)) => Value::Array(items),
                    Some(Frame::Map(m, _)) => Value::Object(m),
                    None => panic!("unbalanced YAML events"),
                };
                put(&mut stack, &mut docs, v);
            }
            Event::Alias(_) => panic!("karpctl writes no aliases:\n{text}"),
            _ => {}
        }
    }
    docs
}

/// What go-yaml v2's `resolve` makes of an untagged plain scalar.
pub fn resolve_1_1(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => return json!(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => return json!(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF" | ".nan" | ".NaN" | ".NAN" => {
            return json!(format!("!!float {s}"));
        }
        _ => {}
    }
    let plain = s.replace('_', "");
    if let Some(i) = go_parse_int(&plain) {
        return json!(i);
    }
    if is_yaml_1_1_float(&plain) {
        return plain.parse::<f64>().map(|f| json!(f)).unwrap_or_else(|_| json!(format!("!!float {s}")));
    }
    json!(s)
}

/// Go's `strconv.ParseInt(s, 0, 64)`: a sign, then `0x`, `0o`, `0b` or a leading `0` (octal).
fn go_parse_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// go-yaml v2's float pattern: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_1_1_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// The cluster names a YAML 1.1 reader takes for another type when they are written unquoted
/// (EKS allows each: `^[0-9A-Za-z][A-Za-z0-9_-]*$`).
pub const TRICKY_NAMES: &[&str] = &["2024", "true", "yes", "null", "1e3", "0x1f", "on", "y", "NO", "1_000", "0b1", "017", "1e-3"];

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker itself: it must see what go-yaml v2 sees, or it cannot fail.
    #[test]
    fn the_yaml_1_1_reading_types_what_go_yaml_v2_types() {
        for (s, want) in [
            ("2024", json!(2024)),
            ("true", json!(true)),
            ("yes", json!(true)),
            ("on", json!(true)),
            ("y", json!(true)),
            ("NO", json!(false)),
            ("null", Value::Null),
            ("1e3", json!(1000.0)),
            ("1e-3", json!(0.001)),
            ("0x1f", json!(31)),
            ("0b1", json!(1)),
            ("017", json!(15)),
            ("1_000", json!(1000)),
            ("say-when-east", json!("say-when-east")),
            ("12e", json!("12e")),
            ("0x1g", json!("0x1g")),
            ("1.14", json!(1.14)),
        ] {
            assert_eq!(resolve_1_1(s), want, "{s}");
        }
        let docs = yaml_1_1("a: yes\nb: 'yes'\nc:\n  - 0x1f\n  - \"0x1f\"\n---\nd: 2024\n");
        assert_eq!(docs, vec![json!({"a": true, "b": "yes", "c": [31, "0x1f"]}), json!({"d": 2024})]);
        assert_eq!(yaml_1_2("a: yes\nb: 2024\n"), vec![json!({"a": "yes", "b": 2024})]);
    }
}
