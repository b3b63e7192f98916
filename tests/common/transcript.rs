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
            result.push_str(head);
            let id_len = prefix.len() + tail[prefix.len()..].chars().take_while(|c| c.is_ascii_hexdigit()).count();
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
