//! The tag keys karpctl reads and writes, and how a tag map becomes a desired field.

use serde_json::Value;
use std::collections::BTreeMap;

/// Tag naming the cluster that owns an object.
pub const OWNER_TAG: &str = "karpctl.io/cluster";
/// Tag naming the logical id of the object in karpctl's graph.
pub const RESOURCE_TAG: &str = "karpctl.io/resource";
/// The tag Karpenter selects subnets and security groups by.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";
/// karpctl's marker: karpctl added the discovery tag on this object (value: the cluster).
pub const MARKER_TAG: &str = "karpctl.io/discovery";

/// A tag map as the JSON object a `tags` field holds.
pub fn to_value(tags: &BTreeMap<String, String>) -> Value {
    Value::Object(tags.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}

/// karpctl's record of the user tag keys it set on an object (the plan's `tags`), space
/// separated: a key the plan no longer names is removed on the next `up`, while tags others set
/// stay. A key with a space in it is not recorded (it cannot be told apart), nor keys past
/// AWS's 256-character tag value (those are left on the object when the plan drops them).
pub const TRACK_TAG: &str = "karpctl.io/tags";

/// The value of `TRACK_TAG` for the plan's user tag keys (None: no user tags).
pub fn track_value<'a>(keys: impl IntoIterator<Item = &'a String>) -> Option<String> {
    let mut out = String::new();
    for k in keys.into_iter().filter(|k| !k.contains(' ')) {
        if out.len() + k.len() + usize::from(!out.is_empty()) > 256 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(k);
    }
    (!out.is_empty()).then_some(out)
}

/// Tag keys on a live object that karpctl set (named by its `TRACK_TAG`) and `wanted` no longer
/// has, and the record itself when `wanted` has none: the keys an update removes.
pub fn stale_keys(live: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> Vec<String> {
    let Some(track) = live.get(TRACK_TAG) else { return vec![] };
    let mut out: Vec<String> = track
        .split(' ')
        .filter(|k| !k.is_empty() && !wanted.contains_key(*k) && live.contains_key(*k))
        .map(str::to_string)
        .collect();
    if !wanted.contains_key(TRACK_TAG) {
        out.push(TRACK_TAG.to_string());
    }
    out
}

/// A tag map's change as Terraform shows one: a line per added (`+`), changed (`~`) or removed
/// (`-`) key, in key order, and how many keys stay as they are.
pub fn changes(before: &Value, after: &Value) -> (Vec<(char, String)>, usize) {
    let empty = serde_json::Map::new();
    let (b, a) = (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    let mut lines = Vec::new();
    let mut unchanged = 0;
    for k in keys {
        let q = |v: &Value| serde_json::to_string(v).unwrap_or_default();
        match (b.get(k), a.get(k)) {
            (Some(x), Some(y)) if x == y => unchanged += 1,
            (Some(x), Some(y)) => lines.push(('~', format!("{} = {} -> {}", q(&Value::String(k.to_string())), q(x), q(y)))),
            (None, Some(y)) => lines.push(('+', format!("{} = {}", q(&Value::String(k.to_string())), q(y)))),
            (Some(x), None) => lines.push(('-', format!("{} = {}", q(&Value::String(k.to_string())), q(x)))),
            (None, None) => {}
        }
    }
    (lines, unchanged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn only_keys_karpctl_recorded_are_stale() {
        let live = m(&[("team", "a"), ("env", "b"), ("theirs", "c"), (TRACK_TAG, "team env")]);
        let wanted = m(&[("team", "a"), (TRACK_TAG, "team")]);
        assert_eq!(stale_keys(&live, &wanted), ["env"], "env was karpctl's; theirs never was");
        assert_eq!(stale_keys(&live, &m(&[])), ["team", "env", TRACK_TAG], "no user tags left: the record goes too");
        assert!(stale_keys(&m(&[("team", "a")]), &m(&[])).is_empty(), "nothing recorded, nothing removed");
    }

    #[test]
    fn the_record_fits_a_tag_value() {
        let keys: Vec<String> = vec!["b".into(), "a b".into(), "c".into()];
        assert_eq!(track_value(&keys).as_deref(), Some("b c"), "a key with a space is not recorded");
        let long: Vec<String> = (0..100).map(|i| format!("key-{i:03}")).collect();
        assert!(track_value(&long).unwrap().len() <= 256);
        assert_eq!(track_value(&Vec::<String>::new()), None);
    }
}
