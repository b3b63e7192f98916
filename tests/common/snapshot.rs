//! The one snapshot macro, `karpctl_snapshot!`, and the filters every snapshot and docs
//! transcript goes through: the test's cluster name and each generated id made stable (whole
//! words only, numbered in order of appearance), ports and durations removed.

use super::Run;
use serde_json::Value;

/// Snapshot a karpctl run's output (insta, under tests/snapshots/) as `name`, made stable for
/// cluster `c`: `karpctl_snapshot!("up", up.stdout, &c)` for text (stdout or stderr),
/// `karpctl_snapshot!("diff_json", json: &run, &c)` for a `--output json` document.
/// `INSTA_UPDATE=always` rewrites the snapshots after a deliberate change; review the diff.
macro_rules! karpctl_snapshot {
    ($name:expr, json: $run:expr, $c:expr) => {
        insta::assert_snapshot!($name, $crate::common::snapshot::json($run, $c))
    };
    ($name:expr, $text:expr, $c:expr) => {
        insta::assert_snapshot!($name, $crate::common::snapshot::text(&$text, $c))
    };
}
pub(crate) use karpctl_snapshot;

/// `text` (a run's stdout or stderr) as a snapshot keeps it: `snapshot_text`, then each run of
/// steps of one kind in a stable order.
pub fn text(text: &str, c: &str) -> String {
    steps_in_order(&snapshot_text(text, c))
}

/// A JSON document without its `stats` (call counts and timings vary run to run), its lists in
/// a stable order (made stable first: ids are random).
pub fn json(r: &Run, c: &str) -> String {
    let mut doc: Value = r.json();
    if let Some(o) = doc.as_object_mut() {
        o.remove("stats");
    }
    let text = snapshot_text(&serde_json::to_string_pretty(&doc).unwrap(), c);
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    for key in ["steps", "unchanged", "notes"] {
        if let Some(a) = doc[key].as_array_mut() {
            a.sort_by_key(|v| v.to_string());
        }
    }
    serde_json::to_string_pretty(&doc).unwrap()
}

/// `text` with the run's own names made stable: the cluster name becomes `say-when-east`, and
/// each subnet, security group and VPC id a numbered one in order of appearance.
pub fn stable(text: &str, cluster: &str) -> String {
    let mut out = text.replace(cluster, "say-when-east");
    for (prefix, fake) in [("subnet-", "subnet-0aaa"), ("sg-", "sg-0bbb"), ("vpc-", "vpc-0ccc")] {
        out = number_ids(&out, prefix, fake);
    }
    out
}

/// `text` as a CLI snapshot keeps it: the cluster name and every generated id made stable (ids
/// numbered in order of appearance, per prefix, whole words only), ports, durations and
/// the emulator's endpoint removed. Deterministic for the same run of karpctl.
pub fn snapshot_text(text: &str, cluster: &str) -> String {
    let mut out = stable(text, cluster);
    for prefix in ["rtb-", "igw-", "nat-", "eigw-", "pcx-", "vpce-", "a-", "eni-", "key/"] {
        out = number_ids(&out, prefix, prefix);
    }
    out = after_each(&out, "127.0.0.1:", |c| c.is_ascii_digit(), "<port>");
    out = after_each(&out, "access-entry/say-when-east/", |c| c.is_ascii_hexdigit(), "<id>");
    // Durations: "(1.2s)" and "after 3s".
    let mut result = String::new();
    let mut rest = out.as_str();
    while let Some(at) = rest.find('(') {
        let (head, tail) = rest.split_at(at);
        result.push_str(head);
        let digits = tail[1..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').count();
        if digits > 0 && tail[1 + digits..].starts_with("s)") {
            result.push_str("(<t>s)");
            rest = &tail[1 + digits + 2..];
        } else {
            result.push('(');
            rest = &tail[1..];
        }
    }
    result.push_str(rest);
    result
}

/// Each `prefix` followed by characters `keep` takes, replaced by `prefix` + `with`.
fn after_each(text: &str, prefix: &str, keep: impl Fn(char) -> bool, with: &str) -> String {
    let mut result = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let (head, tail) = rest.split_at(at + prefix.len());
        result.push_str(head);
        let n: usize = tail.chars().take_while(|c| keep(*c)).map(char::len_utf8).sum();
        if n > 0 {
            result.push_str(with);
        }
        rest = &tail[n..];
    }
    result.push_str(rest);
    result
}

/// Each id `prefix<hex>` (at least four hex digits, a whole word: nothing alphanumeric either
/// side) replaced by `fake<n>`, `n` numbering the distinct ids in order of appearance.
fn number_ids(text: &str, prefix: &str, fake: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut result = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let (head, tail) = rest.split_at(at);
        // Whole words only: `node-sg-blocks-control-plane` holds no id.
        let before = head.chars().last().or_else(|| result.chars().last());
        let word_start = before.is_none_or(|c| !c.is_ascii_alphanumeric());
        result.push_str(head);
        let hex = tail[prefix.len()..].chars().take_while(|c| c.is_ascii_hexdigit()).count();
        let word_end = tail[prefix.len() + hex..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
        if word_start && word_end && hex >= 4 {
            let id = &tail[..prefix.len() + hex];
            let n = seen.iter().position(|s| s == id).unwrap_or_else(|| {
                seen.push(id.to_string());
                seen.len() - 1
            });
            result.push_str(&format!("{fake}{n}"));
            rest = &tail[prefix.len() + hex..];
        } else {
            result.push_str(prefix);
            rest = &tail[prefix.len()..];
        }
    }
    result.push_str(rest);
    result
}

/// Steps of one kind are listed by id, and a subnet's id is random: each run of steps of one
/// kind (from a header `  + <id> <type> (...)`, or Markdown's `**`+` `<id>`** <type>`, to the
/// next header or the plan's end) sorted by its (already stable) text, so that the snapshot
/// does not follow the emulator's random ids.
fn steps_in_order(text: &str) -> String {
    let kind_of = |l: &str| -> Option<String> {
        let human = l.starts_with("  ") && !l.starts_with("   ");
        let md = l.starts_with("**`");
        if !(human || md) {
            return None;
        }
        let mut w = l.trim_start_matches("**`").split_whitespace();
        let sym = w.next()?.trim_end_matches('`');
        if !["+", "-", "~", "-/+"].contains(&sym) {
            return None;
        }
        w.next()?;
        w.next().map(str::to_string)
    };
    let ends = |l: &str| {
        ["Plan: ", "</details>", "**Karpenter readiness", "Karpenter can work", "- **conflict"].iter().any(|p| l.starts_with(p))
    };
    // Segments: (kind of the step, its lines) or (None, a line outside any step).
    let mut segments: Vec<(Option<String>, Vec<&str>)> = Vec::new();
    let mut in_step = false;
    for l in text.lines() {
        if let Some(k) = kind_of(l) {
            segments.push((Some(k), vec![l]));
            in_step = true;
        } else if in_step && !ends(l) {
            segments.last_mut().unwrap().1.push(l);
        } else {
            in_step = false;
            segments.push((None, vec![l]));
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < segments.len() {
        let k = segments[i].0.clone();
        let mut j = i + 1;
        while k.is_some() && j < segments.len() && segments[j].0 == k {
            j += 1;
        }
        // Blank lines between steps stay where they were: each step sorted without its own,
        // the first step's count between them, the last one's after the run.
        let blanks = |ls: &Vec<&str>| ls.iter().rev().take_while(|l| l.is_empty()).count();
        let (between, after) = (blanks(&segments[i].1), blanks(&segments[j - 1].1));
        let mut run: Vec<Vec<&str>> = segments[i..j].iter().map(|(_, ls)| ls[..ls.len() - blanks(ls)].to_vec()).collect();
        run.sort();
        for (n, ls) in run.into_iter().enumerate() {
            out.extend(ls.iter().map(|l| l.to_string()));
            let pad = if n + 1 == j - i { after } else { between };
            out.extend(std::iter::repeat_n(String::new(), pad));
        }
        i = j;
    }
    out.join("\n") + if text.ends_with('\n') { "\n" } else { "" }
}

#[test]
fn stable_replaces_whole_ids_only() {
    let text = "node-sg-blocks-control-plane sg-0123abcd tags-subnet-0a1b2c3d4e5f60718, \"sg-0123abcd\" vpc-deadbeef/x sg-beef";
    assert_eq!(
        stable(text, "zz-cluster"),
        "node-sg-blocks-control-plane sg-0bbb0 tags-subnet-0aaa0, \"sg-0bbb0\" vpc-0ccc0/x sg-0bbb1",
        "a check code that holds `sg-b` is not an id; ids keep their order"
    );
}

#[test]
fn every_filter_replaces_whole_ids_only() {
    let text = "eni-0123abcd eni-0123abcdz xeni-0123abcd rtb-beef0001 rtb-beef0001 key/1234abcd-aa (2.5s) 127.0.0.1:4566";
    assert_eq!(
        snapshot_text(text, "zz-cluster"),
        "eni-0 eni-0123abcdz xeni-0123abcd rtb-0 rtb-0 key/0-aa (<t>s) 127.0.0.1:<port>",
        "an id is a whole word: a longer word that starts or ends like one is left as it is"
    );
}
