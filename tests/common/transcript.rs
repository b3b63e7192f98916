//! Transcripts in the docs that a test generates: a block between `<!-- generated: NAME -->` and
//! `<!-- end generated -->` in a docs page must equal what the test saw (made stable by
//! `snapshot::stable`). `KARPCTL_BLESS_DOCS=1` rewrites the block instead of failing.

use super::repo;

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
