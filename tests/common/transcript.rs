//! Transcripts in the docs that a test generates: a block between `<!-- generated: NAME -->` and
//! `<!-- end generated -->` in a docs page must equal what the test saw (made stable: the test's
//! cluster name, subnet and security group ids replaced). `KARPCTL_BLESS_DOCS=1` rewrites the
//! block instead of failing.

use super::repo;

/// `text` with the run's own names made stable: the cluster name becomes `say-when-east`, and
/// each subnet, security group and VPC id a numbered one in order of appearance.
pub fn stable(text: &str, cluster: &str) -> String {
    let mut out = text.replace(cluster, "say-when-east");
    for (prefix, fake) in [("subnet-", "subnet-0aaa"), ("sg-", "sg-0bbb"), ("vpc-", "vpc-0ccc")] {
        let mut seen: Vec<String> = Vec::new();
        let mut result = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(prefix) {
            let (head, tail) = rest.split_at(at);
            // Whole words only: `node-sg-blocks-control-plane` holds no id.
            let before = head.chars().last().or_else(|| result.chars().last());
            let word_start = before.is_none_or(|c| !c.is_ascii_alphanumeric());
            result.push_str(head);
            let hex = tail[prefix.len()..].chars().take_while(|c| c.is_ascii_hexdigit()).count();
            let word_end = tail[prefix.len() + hex..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
            let id_len = if word_start && word_end && hex >= 4 { prefix.len() + hex } else { prefix.len() };
            let id = &tail[..id_len];
            if id_len == prefix.len() {
                result.push_str(prefix);
            } else {
                let n = match seen.iter().position(|s| s == id) {
                    Some(n) => n,
                    None => {
                        seen.push(id.to_string());
                        seen.len() - 1
                    }
                };
                result.push_str(&format!("{fake}{n}"));
            }
            rest = &tail[id_len..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// Check (or with KARPCTL_BLESS_DOCS=1 rewrite) the block `name` of `page` (under docs/).
pub fn check(page: &str, name: &str, text: &str) {
    let path = repo().join("docs").join(page);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let start = format!("<!-- generated: {name} -->\n```\n");
    let end = "```\n<!-- end generated -->";
    let s = doc.find(&start).unwrap_or_else(|| panic!("{} has no block {start:?}", path.display()));
    let body_at = s + start.len();
    let e = body_at + doc[body_at..].find(end).unwrap_or_else(|| panic!("block {name} has no end"));
    let want = if text.ends_with('\n') { text.to_string() } else { format!("{text}\n") };
    if std::env::var("KARPCTL_BLESS_DOCS").as_deref() == Ok("1") {
        let new = format!("{}{want}{}", &doc[..body_at], &doc[e..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    assert_eq!(
        &doc[body_at..e],
        want,
        "the {name} transcript in docs/{page} drifted from what karpctl prints; run the test with KARPCTL_BLESS_DOCS=1 to rewrite it"
    );
}

/// `text` as a CLI snapshot keeps it: the cluster name and every generated id made stable (ids
/// numbered in order of appearance, per prefix, only at a word start), ports, durations and
/// the emulator's endpoint removed. Deterministic for the same run of karpctl.
pub fn snapshot_text(text: &str, cluster: &str) -> String {
    let mut out = stable(text, cluster);
    for prefix in ["rtb-", "igw-", "nat-", "eigw-", "pcx-", "vpce-", "a-", "eni-", "key/"] {
        out = number_ids(&out, prefix);
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

/// Ids `prefix<hex>` numbered in order of appearance (`prefix<n>`), only where the prefix starts
/// a word.
fn number_ids(text: &str, prefix: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    let mut result = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let word_start = result.chars().last().or_else(|| rest[..at].chars().last()).is_none_or(|c| !c.is_ascii_alphanumeric());
        let (head, tail) = rest.split_at(at);
        result.push_str(head);
        let hex = tail[prefix.len()..].chars().take_while(|c| c.is_ascii_hexdigit()).count();
        let at_start = head.chars().last().map_or(word_start, |c| !c.is_ascii_alphanumeric());
        if hex >= 4 && at_start {
            let id = &tail[..prefix.len() + hex];
            let n = seen.iter().position(|s| s == id).unwrap_or_else(|| {
                seen.push(id.to_string());
                seen.len() - 1
            });
            result.push_str(&format!("{prefix}{n}"));
            rest = &tail[prefix.len() + hex..];
        } else {
            result.push_str(prefix);
            rest = &tail[prefix.len()..];
        }
    }
    result.push_str(rest);
    result
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
