//! Whole CLI output under snapshot (insta): what a user reads of `diff` (human, markdown, JSON),
//! `up`, `down`, `doctor`, `output` and the main errors, with generated ids, ports and durations
//! made stable (`karpctl_snapshot!`, in `common::snapshot`). `INSTA_UPDATE=always scripts/test
//! snapshots::` rewrites them after a deliberate change; review the diff.

use crate::common::*;

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
    karpctl_snapshot!("diff_from_nothing_human", diff.stdout, &c);
    let md = karpctl(&wd, &["diff", "--cluster", &c, "--output", "markdown"]);
    assert_eq!(md.code, 2, "{md:?}");
    karpctl_snapshot!("diff_from_nothing_markdown", md.stdout, &c);
    let json = karpctl(&wd, &["diff", "--cluster", &c, "--output", "json"]);
    assert_eq!(json.code, 2, "{json:?}");
    karpctl_snapshot!("diff_from_nothing_json", json: &json, &c);

    let up = karpctl(&wd, &["up", "--cluster", &c]);
    assert_eq!(up.code, 0, "{up:?}");
    karpctl_snapshot!("up_from_nothing", up.stdout, &c);
    let converged = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(converged.code, 0, "{converged:?}");
    karpctl_snapshot!("diff_converged", converged.stdout, &c);
    let doctor = karpctl(&wd, &["doctor", "--cluster", &c]);
    karpctl_snapshot!("doctor_after_up", doctor.stdout, &c);
    let manifests = karpctl(&wd, &["output", "--cluster", &c, "--format", "manifests"]);
    assert_eq!(manifests.code, 0, "{manifests:?}");
    karpctl_snapshot!("output_manifests", manifests.stdout, &c);

    let down = karpctl(&wd, &["down", "--cluster", &c, "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    karpctl_snapshot!("down", down.stdout, &c);
}

#[test]
fn the_main_errors_read_the_same_every_time() {
    let c = cluster_name("snap-err");
    seed(&c, &[]);
    let wd = Workdir::new();
    wd.plan_for(&c, "\n[interruption]\nenabeld = true\n");
    let r = karpctl(&wd, &["diff", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    karpctl_snapshot!("error_unknown_plan_key", r.stderr, &c);

    // In a region of its own: a full run seeds over a hundred clusters in us-east-1, past which
    // karpctl names the listing command instead of the closest cluster.
    let wd = Workdir::new();
    let lone = cluster_name("snap-lone");
    seed(&lone, &["--region", "ap-southeast-2"]);
    let r = karpctl(&wd, &["diff", "--cluster", &format!("{lone}-nope"), "--region", "ap-southeast-2"]);
    assert_eq!(r.code, 1, "{r:?}");
    karpctl_snapshot!("error_no_such_cluster", r.stderr, &lone);

    let r = karpctl_env(&wd, &["diff", "--cluster", &c, "--endpoint-url", "http://127.0.0.1:1"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    karpctl_snapshot!("error_unreachable_endpoint", r.stderr, &c);

    let r = karpctl(&wd, &["import", "--cluster", &c]);
    assert_eq!(r.code, 1, "{r:?}");
    karpctl_snapshot!("error_import_needs_the_version", r.stderr, &c);
}
