//! CLI behaviour that needs no AWS: help, completions, argument errors.

use crate::common::*;

#[test]
fn help_lists_each_command_and_flag_with_one_line_help() {
    let wd = Workdir::new();
    let r = karpctl(&wd, &["--help"]);
    assert_eq!(r.code, 0, "{r:?}");
    for cmd in ["up", "diff", "down", "completions"] {
        assert!(r.stdout.contains(cmd), "{cmd}: {r:?}");
    }
    for sub in ["up", "diff", "down"] {
        let r = karpctl(&wd, &[sub, "--help"]);
        assert_eq!(r.code, 0, "{r:?}");
        for flag in [
            "--cluster",
            "--plan",
            "--region",
            "--profile",
            "--endpoint-url",
            "--concurrency",
            "--output",
            "--verbose",
            "--quiet",
            "--stats",
        ] {
            assert!(r.stdout.contains(flag), "{sub} --help lacks {flag}: {r:?}");
        }
    }
    assert!(karpctl(&wd, &["down", "--help"]).stdout.contains("--yes"));
    assert!(karpctl(&wd, &["up", "--help"]).stdout.contains("--adopt"));
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
