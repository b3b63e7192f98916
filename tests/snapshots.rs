//! Whole CLI output under snapshot (insta): what a user reads of `diff` (human, markdown, JSON),
//! `up`, `down`, `doctor`, `output` and the main errors, with generated ids, ports and durations
//! made stable (`common::transcript::snapshot_text`). `INSTA_UPDATE=always scripts/test
//! snapshots::` rewrites them after a deliberate change; review the diff.

use crate::common::*;
use serde_json::Value;

/// Snapshot `text` (a run's stdout or stderr) under `name`, made stable for cluster `c`.
macro_rules! cli_snapshot {
    ($name:expr, $text:expr, $c:expr) => {
        insta::assert_snapshot!($name, steps_in_order(&crate::common::transcript::snapshot_text(&$text, $c)))
    };
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

/// A JSON document without its `stats` (call counts and timings vary run to run), its lists in
/// a stable order (made stable first: ids are random).
fn stable_json(r: &Run, c: &str) -> String {
    let mut doc: Value = r.json();
    if let Some(o) = doc.as_object_mut() {
        o.remove("stats");
    }
    let text = crate::common::transcript::snapshot_text(&serde_json::to_string_pretty(&doc).unwrap(), c);
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    for key in ["steps", "unchanged", "notes"] {
        if let Some(a) = doc[key].as_array_mut() {
            a.sort_by_key(|v| v.to_string());
        }
    }
    serde_json::to_string_pretty(&doc).unwrap()
}

#[test]
fn a_clusters_life_reads_the_same_every_time() {
    // A fixed name: the snapshot names it `say-when-east` anyway, and the seed is idempotent.
    let c = cluster_name("snap-life");
    seed(&c, &[]);
    let wd = Workdir::new();
    // A spot role, so that the readiness verdict does not depend on what other tests left.
    let _spot = spot_role_present(&sdk());

    let diff = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(diff.code, 2, "{diff:?}");
    cli_snapshot!("diff_from_nothing_human", diff.stdout, &c);
    let md = karpctl(&wd, &["diff", "--cluster", &c, "--output", "markdown"]);
    assert_eq!(md.code, 2, "{md:?}");
    cli_snapshot!("diff_from_nothing_markdown", md.stdout, &c);
    let json = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(json.code, 2, "{json:?}");
    insta::assert_snapshot!("diff_from_nothing_json", stable_json(&json, &c));

    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    cli_snapshot!("up_from_nothing", up.stdout, &c);
    let converged = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(converged.code, 0, "{converged:?}");
    cli_snapshot!("diff_converged", converged.stdout, &c);
    let doctor = karpctl(&wd, &["doctor", "--cluster", &c]);
    cli_snapshot!("doctor_after_up", doctor.stdout, &c);
    let manifests = karpctl(&wd, &["output", "--cluster", &c, "--format", "manifests"]);
    assert_eq!(manifests.code, 0, "{manifests:?}");
    cli_snapshot!("output_manifests", manifests.stdout, &c);

    let down = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    cli_snapshot!("down", down.stdout, &c);
}

#[test]
fn the_main_errors_read_the_same_every_time() {
    let c = cluster_name("snap-err");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan(&c, &format!("cluster = \"{c}\"\nregion = \"us-east-1\"\n\n[interruption]\nenabeld = true\n"));
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    cli_snapshot!("error_unknown_plan_key", r.stderr, &c);

    // In a region of its own: a full run seeds over a hundred clusters in us-east-1, past which
    // karpctl names the listing command instead of the closest cluster.
    let wd = Workdir::new();
    let lone = cluster_name("snap-lone");
    seed(&lone, &["--region", "ap-southeast-2"]);
    let r = karpctl(&wd, &["diff", "--cluster", &format!("{lone}-nope"), "--region", "ap-southeast-2"]);
    assert_eq!(r.code, 1, "{r:?}");
    cli_snapshot!("error_no_such_cluster", r.stderr, &lone);

    let r = karpctl_env(&wd, &["diff", "--cluster", &c, "--endpoint-url", "http://127.0.0.1:1"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    cli_snapshot!("error_unreachable_endpoint", r.stderr, &c);

    let r = karpctl(&wd, &["import", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    cli_snapshot!("error_import_needs_the_version", r.stderr, &c);
}
