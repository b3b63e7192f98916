//! CLI behaviour that needs no AWS: help, completions, argument errors.

use crate::common::*;

/// The flag lines of a help text (`-x, --name` or `--name`), in order.
fn flags(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split([' ', ',']).find(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches('.').to_string())
        .collect()
}

#[test]
fn help_lists_each_command_and_flag_with_one_line_help() {
    let wd = Workdir::new();
    let r = karpctl(&wd, &["--help"]);
    assert_eq!(r.code, 0, "{r:?}");
    for cmd in ["up", "diff", "down", "output", "doctor", "import", "completions"] {
        assert!(r.stdout.contains(cmd), "{cmd}: {r:?}");
    }
    let global =
        ["--cluster", "--config", "--region", "--profile", "--endpoint-url", "--concurrency", "--stats", "--verbose", "--quiet"];
    // Each command: its own flags first, then (where taken) the many-cluster ones, then the
    // global ones; examples; and no flag the command would refuse.
    let cases: [(&str, &[&str], &[&str]); 6] = [
        ("up", &["--yes", "--adopt", "--plan-file", "--output"], &["--all", "--clusters"]),
        ("diff", &["--adopt", "--out", "--output"], &["--all", "--clusters"]),
        ("down", &["--yes", "--output"], &["--clusters"]),
        ("output", &["--format"], &["--all", "--clusters"]),
        ("doctor", &["--namespace", "--karpenter-version", "--output"], &[]),
        ("import", &["--force", "--karpenter-version", "--output"], &[]),
    ];
    for (cmd, own, many) in cases {
        let r = karpctl(&wd, &[cmd, "--help"]);
        assert_eq!(r.code, 0, "{r:?}");
        let listed = flags(&r.stdout);
        let at = |f: &str| listed.iter().position(|l| l == f).unwrap_or_else(|| panic!("{cmd} --help lacks {f}: {r:?}"));
        let last_own = own.iter().map(|f| at(f)).max().unwrap();
        let first_global = global.iter().map(|f| at(f)).min().unwrap();
        assert!(last_own < first_global, "{cmd}: its own flags come first: {listed:?}");
        for f in many {
            assert!(last_own < at(f) && at(f) < first_global, "{cmd}: {f} between its own and the global flags: {listed:?}");
        }
        assert!(r.stdout.contains("Examples:\n  karpctl "), "{cmd} --help has examples: {r:?}");
        // Not offered where refused: --all (down, doctor, import), --clusters (doctor, import),
        // markdown (everything but diff).
        if !many.contains(&"--all") {
            assert!(!listed.contains(&"--all".to_string()), "{cmd} refuses --all: {listed:?}");
        }
        if many.is_empty() {
            assert!(!listed.iter().any(|f| f == "--clusters" || f == "--parallel-clusters"), "{cmd}: {listed:?}");
        }
        assert_eq!(r.stdout.contains("markdown"), cmd == "diff", "{cmd}: --output markdown only where taken: {r:?}");
    }
    let r = karpctl(&wd, &["completions", "--help"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(flags(&r.stdout).iter().all(|f| f == "--help"), "completions takes no AWS flag: {r:?}");
    // What help hides is refused, or means nothing, where it is hidden.
    assert_eq!(karpctl(&wd, &["doctor", "--all"]).code, 1);
    assert_eq!(karpctl(&wd, &["up", "--output", "markdown"]).code, 1);
}

#[test]
fn completions_are_printed() {
    let wd = Workdir::new();
    let r = karpctl(&wd, &["completions", "bash"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("karpctl"), "{r:?}");
}

#[test]
fn no_cluster_and_several_plans_lists_the_choices() {
    let wd = Workdir::new();
    wd.plan("alpha", "cluster = \"alpha\"\n");
    wd.plan("beta", "cluster = \"beta\"\n");
    let r = karpctl(&wd, &["diff"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("alpha, beta"), "{r:?}");
    assert!(r.stderr.contains("--cluster"), "{r:?}");
}

#[test]
fn invalid_concurrency_is_rejected() {
    let wd = Workdir::new();
    let r = karpctl(&wd, &["diff", "--cluster", "x", "--concurrency", "0"]);
    assert_eq!(r.code, 1, "usage errors exit 1, never 2 (2 means changes pending): {r:?}");
    assert!(r.stderr.contains("--concurrency"), "{r:?}");
}
