//! Karpenter's CRDs as a test oracle: an object checked against a CRD version's OpenAPI schema
//! as the API server does on create (defaults applied first; unknown fields refused, as
//! `kubectl apply` does by default; types, enums, patterns, lengths, bounds, required fields) and
//! against every `x-kubernetes-validations` rule that does not use `oldSelf`, evaluated with a CEL
//! interpreter (the `cel` crate, with the strings extension and Kubernetes' regex `find`).
//! Compiled into the unit tests (`#[path]` in src/karpenter_values.rs).

#![allow(dead_code)]

use serde_json::{Map, Value};
use std::sync::Arc;

/// The `openAPIV3Schema` of `version` in a CRD (YAML text).
pub fn schema(crd_yaml: &str, version: &str) -> Value {
    let docs = super::yaml_read::yaml_1_2(crd_yaml);
    let versions = docs[0]["spec"]["versions"].as_array().expect("a CRD with versions").clone();
    let v = versions.into_iter().find(|v| v["name"] == version).unwrap_or_else(|| panic!("no version {version}"));
    v["schema"]["openAPIV3Schema"].clone()
}

/// What the API server refuses in `object` (empty: it is created), each as `path: why`.
pub fn refusals(schema: &Value, object: &Value) -> Vec<String> {
    let mut obj = object.clone();
    default(schema, &mut obj);
    let mut out = Vec::new();
    check(schema, &obj, "", &mut out, true);
    out
}

/// Structural defaulting: a missing property whose schema has a `default` gets it.
fn default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, s) in props {
                    if !m.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                }
                for (k, s) in props {
                    if let Some(child) = m.get_mut(k) {
                        default(s, child);
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for child in m.values_mut() {
                    default(&schema["additionalProperties"], child);
                }
            }
        }
        Value::Array(items) => {
            for i in items {
                default(&schema["items"], i);
            }
        }
        _ => {}
    }
}

fn type_ok(schema: &Value, v: &Value) -> Result<(), String> {
    if v.is_null() && schema["nullable"] == true {
        return Ok(());
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return if v.is_i64() || v.is_u64() || v.is_string() {
            Ok(())
        } else {
            Err(format!("{v} is not an integer or a string"))
        };
    }
    let ok = match schema["type"].as_str() {
        None => true,
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some(t) => panic!("schema type {t}"),
    };
    if ok { Ok(()) } else { Err(format!("{v} is not of type {}", schema["type"])) }
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>, root: bool) {
    let here = if path.is_empty() { "<root>" } else { path };
    if let Err(e) = type_ok(schema, v) {
        out.push(format!("{here}: {e}"));
        return;
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let passes = any.iter().any(|s| {
            let mut o = Vec::new();
            check(s, v, path, &mut o, false);
            o.is_empty()
        });
        if !passes {
            out.push(format!("{here}: {v} matches none of anyOf"));
        }
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        out.push(format!("{here}: {v} is not one of {}", schema["enum"]));
    }
    match v {
        Value::String(s) => {
            if let Some(p) = schema["pattern"].as_str() {
                let re = regex::Regex::new(p).unwrap_or_else(|e| panic!("pattern {p}: {e}"));
                if !re.is_match(s) {
                    out.push(format!("{here}: {s:?} does not match {p}"));
                }
            }
            let n = s.chars().count() as u64;
            if schema["maxLength"].as_u64().is_some_and(|m| n > m) {
                out.push(format!("{here}: longer than {}", schema["maxLength"]));
            }
            if schema["minLength"].as_u64().is_some_and(|m| n < m) {
                out.push(format!("{here}: shorter than {}", schema["minLength"]));
            }
        }
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or_default();
            if schema["minimum"].as_f64().is_some_and(|m| f < m) {
                out.push(format!("{here}: below {}", schema["minimum"]));
            }
            if schema["maximum"].as_f64().is_some_and(|m| f > m) {
                out.push(format!("{here}: above {}", schema["maximum"]));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if schema["maxItems"].as_u64().is_some_and(|m| n > m) {
                out.push(format!("{here}: more than {} items", schema["maxItems"]));
            }
            if schema["minItems"].as_u64().is_some_and(|m| n < m) {
                out.push(format!("{here}: fewer than {} items", schema["minItems"]));
            }
            for (i, item) in items.iter().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"), out, false);
            }
        }
        Value::Object(m) => {
            let n = m.len() as u64;
            if schema["maxProperties"].as_u64().is_some_and(|x| n > x) {
                out.push(format!("{here}: more than {} properties", schema["maxProperties"]));
            }
            if schema["minProperties"].as_u64().is_some_and(|x| n < x) {
                out.push(format!("{here}: fewer than {} properties", schema["minProperties"]));
            }
            for r in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !m.contains_key(r) {
                    out.push(format!("{here}: {r} is required"));
                }
            }
            let props = schema["properties"].as_object();
            let extra = &schema["additionalProperties"];
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            for (k, child) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                // The API server checks apiVersion, kind and metadata itself.
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match props.and_then(|ps| ps.get(k)) {
                    Some(s) => check(s, child, &p, out, false),
                    None if extra.is_object() => check(extra, child, &p, out, false),
                    None if preserve || extra == &Value::Bool(true) => {}
                    // kubectl apply's default field validation (Strict) refuses it.
                    None => out.push(format!("{p}: unknown field")),
                }
            }
        }
        _ => {}
    }
    for rule in schema["x-kubernetes-validations"].as_array().into_iter().flatten() {
        let text = rule["rule"].as_str().unwrap_or_default();
        if text.contains("oldSelf") {
            continue;
        }
        match eval(text, v) {
            Ok(true) => {}
            Ok(false) => out.push(format!("{here}: {} (rule: {text})", rule["message"].as_str().unwrap_or("failed"))),
            Err(e) => out.push(format!("{here}: rule {text} did not evaluate: {e}")),
        }
    }
}

/// One CEL rule with `self` bound to `v`, in the environment the API server gives CRD rules
/// that Karpenter's use: the standard library, the strings extension (`split`) and Kubernetes'
/// regex library (`find`).
pub fn eval(rule: &str, v: &Value) -> Result<bool, String> {
    let mut env = cel::Env::stdlib();
    cel::extensions::strings(&mut env).map_err(|e| format!("{e:?}"))?;
    let env = Arc::new(env);
    let program = env.compile(rule).map_err(|e| format!("compile: {e}"))?;
    let mut ctx = cel::Context::with_env(env);
    ctx.add_function("find", |cel::extractors::This(s): cel::extractors::This<Arc<String>>, re: Arc<String>| -> String {
        regex::Regex::new(&re).ok().and_then(|r| r.find(&s).map(|m| m.as_str().to_string())).unwrap_or_default()
    })
    .map_err(|e| format!("{e:?}"))?;
    ctx.add_variable_from_value("self", to_cel(v));
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("not a boolean: {other:?}")),
        Err(e) => Err(format!("{e}")),
    }
}

/// A JSON value as CEL sees an object's field: integers as `int`, maps keyed by strings.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<cel::objects::Key, cel::Value> =
                m.iter().map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// Every key path (`settings.clusterName`) of a YAML mapping, to the depth of `want`'s paths.
pub fn has_path(values: &Value, path: &str) -> bool {
    let mut v = values;
    for k in path.split('.') {
        match v.get(k) {
            Some(next) => v = next,
            None => return false,
        }
    }
    true
}

/// The key paths of a JSON object's leaves (`settings.clusterName`), maps named by their key.
pub fn leaf_paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Object(m) = v {
        for (k, child) in m {
            let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            if child.is_object() && !child.as_object().is_some_and(Map::is_empty) {
                leaf_paths(child, &p, out);
            } else {
                out.push(p);
            }
        }
    }
}
