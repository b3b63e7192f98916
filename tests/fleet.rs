//! Many clusters in one run (issue 15): `--all` / `--clusters` over plans of two regions and a
//! role assumed with `assume_role_arn`, the summary and exit codes, a broken plan failing only
//! itself, the bounds on clusters and requests in flight (karpctl's own gauges in the JSON
//! document), `down` over several clusters; then AssumeRole into a second account on moto.
//!
//! Emulator gaps (measured): ministack serves every account and region from one store and its
//! `sts:AssumeRole` answers for any role, so the assumed-role plan here stays in ministack's
//! account 000000000000; a second account is shown on moto (AssumeRole into
//! arn:aws:iam::111111111111:role/x gives credentials whose GetCallerIdentity is account
//! 111111111111), where the cluster's VPC exists only in the seeding account, so that plan stops
//! at discovery after the account line.

use crate::common::*;
use serde_json::Value;

fn plan(c: &str, region: &str, extra: &str) -> String {
    plan_toml_in(c, region, &format!("{extra}\n[interruption]\nenabled = true\n"))
}

fn results(doc: &Value) -> Vec<(String, String)> {
    doc["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cluster"].as_str().unwrap().to_string(), r["result"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn all_plans_diff_up_and_a_broken_plan_fails_only_itself() {
    let wd = Workdir::new();
    let a = cluster_name("fleet-a");
    let b = cluster_name("fleet-b");
    let c = cluster_name("fleet-c");
    seed(&a, &[]);
    seed(&b, &["--region", "us-west-2"]);
    seed(&c, &[]);
    wd.plan(&a, &plan(&a, "us-east-1", ""));
    wd.plan(&b, &plan(&b, "us-west-2", ""));
    wd.plan(
        &c,
        &plan(&c, "us-east-1", "account_id = \"000000000000\"\nassume_role_arn = \"arn:aws:iam::000000000000:role/karpctl-fleet\"\nexternal_id = \"fleet-1\"\n"),
    );

    // diff over every plan: changes everywhere, exit 2, one JSON document with one entry each.
    let d = karpctl(&wd, &["diff", "--all", "--output", "json"]);
    assert_eq!(d.code, 2, "{d:?}");
    let doc = d.json();
    assert_eq!(doc["command"], "diff");
    let clusters = doc["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 3, "{doc}");
    for (entry, (name, region)) in clusters.iter().zip([(&a, "us-east-1"), (&b, "us-west-2"), (&c, "us-east-1")]) {
        assert_eq!(entry["cluster"], name.as_str());
        assert_eq!(entry["region"], region);
        assert_eq!(entry["format_version"], 2);
        assert!(entry["summary"]["add"].as_u64().unwrap() > 10, "{entry}");
    }
    for (_, r) in results(&doc) {
        assert!(r.ends_with("to add, 0 to change, 0 to destroy"), "{r}");
    }
    // The prefix is padded to the longest name in the run ("[a ] Account" when another is longer).
    assert!(
        d.stderr.lines().any(|l| l.starts_with(&format!("[{a}")) && l.contains("] Account")),
        "progress lines name their cluster: {}",
        d.stderr
    );
    assert!(d.stderr.contains("(role arn:aws:iam::000000000000:role/karpctl-fleet)"), "the role used is printed: {}", d.stderr);

    // Markdown: the summary table and a section per cluster.
    let md = karpctl(&wd, &["diff", "--clusters", &format!("{a},{b}"), "--output", "markdown"]);
    assert_eq!(md.code, 2, "{md:?}");
    assert!(md.stdout.starts_with("### karpctl diff\n\n| Cluster | Account | Region | Result | Karpenter |"), "{}", md.stdout);
    assert_eq!(md.stdout.matches("<details>").count(), 2, "{}", md.stdout);
    assert!(md.stdout.contains("```diff"), "{}", md.stdout);

    // up over every plan, two clusters at a time, each with at most two requests in flight and each
    // account with at most three.
    let up = karpctl(
        &wd,
        &["up", "--all", "--parallel-clusters", "2", "--concurrency", "2", "--account-concurrency", "3", "--output", "json"],
    );
    assert_eq!(up.code, 0, "{up:?}");
    let doc = up.json();
    assert_eq!(doc["peak_clusters_in_flight"], 2, "{doc}");
    let accounts = doc["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 2, "default credentials and the assumed role's account: {doc}");
    for acc in accounts {
        let peak = acc["peak_requests_in_flight"].as_u64().unwrap();
        assert!((1..=3).contains(&peak), "at most --account-concurrency requests per account: {acc}");
        assert_eq!(acc["concurrency"], 3, "{acc}");
    }
    for (_, r) in results(&doc) {
        assert!(r.starts_with("done: "), "{r}");
    }

    // output over many: each cluster's Helm values under its own header.
    let out = karpctl(&wd, &["output", "--all", "--format", "helm"]);
    assert_eq!(out.code, 0, "{out:?}");
    for n in [&a, &b, &c] {
        assert!(out.stdout.contains(&format!("clusterName: {n}\n")), "{n}: {}", out.stdout);
    }

    // Converged: exit 0 and a table saying so.
    let d = karpctl(&wd, &["diff", "--all"]);
    assert_eq!(d.code, 0, "{d:?}");
    for n in [&a, &b, &c] {
        assert!(d.stdout.lines().any(|l| l.contains(n.as_str()) && l.trim_end().ends_with("in sync")), "{n}: {}", d.stdout);
    }

    // One cluster's diff as a pull-request comment; markdown is for diff only.
    let one = karpctl(&wd, &["diff", "--cluster", &a, "--output", "markdown"]);
    assert_eq!(one.code, 0, "{one:?}");
    assert!(one.stdout.contains(&format!("| `{a}` | 000000000000 | us-east-1 | in sync |")), "{}", one.stdout);
    let refused = karpctl(&wd, &["up", "--cluster", &a, "--output", "markdown"]);
    assert_eq!(refused.code, 1, "{refused:?}");

    // A broken plan among them fails only itself.
    let bad = cluster_name("fleet-bad");
    wd.plan(&bad, &plan_toml_in(&bad, "mars-1", ""));
    let d = karpctl(&wd, &["up", "--all"]);
    assert_eq!(d.code, 1, "{d:?}");
    let row =
        d.stdout.lines().find(|l| l.contains(bad.as_str()) && l.contains("error:")).unwrap_or_else(|| panic!("{}", d.stdout));
    assert!(row.contains("region"), "{row}");
    for n in [&a, &b, &c] {
        assert!(
            d.stdout.lines().any(|l| l.starts_with(&format!("  {n}")) && l.trim_end().ends_with("in sync")),
            "{n}: {}",
            d.stdout
        );
    }
    std::fs::remove_file(wd.path().join("plans").join(format!("{bad}.toml"))).unwrap();

    // down: never --all; a spelled-out list with --yes.
    let refused = karpctl(&wd, &["down", "--all", "--yes"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("down --all is refused"), "{refused:?}");
    let no_yes = karpctl(&wd, &["down", "--clusters", &a]);
    assert_eq!(no_yes.code, 1, "{no_yes:?}");
    let down = karpctl(&wd, &["down", "--clusters", &format!("{a},{b},{c}"), "--yes"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(queue(&sdk(), &format!("Karpenter-{a}")).is_none());
}

/// A moto of this test's own without `MOTO_ACCOUNT_ID` (scripts/emulator pins the shared moto to
/// one account whatever the credentials, so AssumeRole there never changes the account): here an
/// assumed role's credentials are the role's account. Stopped by PID on drop.
struct OwnMoto {
    child: std::process::Child,
    url: String,
}

impl OwnMoto {
    fn start() -> OwnMoto {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(repo().join(".venv/bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env_remove("MOTO_ACCOUNT_ID")
            .env("DOCKER_HOST", "unix:///nonexistent/karpctl-no-docker.sock")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto_server");
        // Stopped (by PID) on drop, also when it never answers.
        let moto = OwnMoto { child, url: format!("http://127.0.0.1:{port}") };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return moto;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("moto_server did not start on port {port}");
    }
}

impl Drop for OwnMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_plan_assumes_a_role_in_another_account_on_moto() {
    let wd = Workdir::new();
    let home = cluster_name("fleet-home");
    let away = cluster_name("fleet-away");
    seed_strict(&home, &[]);
    seed_strict(&away, &[]);
    wd.plan(&home, &plan(&home, "us-east-1", ""));
    let role = "arn:aws:iam::111111111111:role/karpctl-deploy";
    wd.plan(
        &away,
        &plan(
            &away,
            "us-east-1",
            &format!("account_id = \"111111111111\"\nassume_role_arn = \"{role}\"\nsession_name = \"fleet-test\"\n"),
        ),
    );
    let sts = OwnMoto::start();
    let eps = StrictEndpoints::direct().via("STS", &sts.url);
    let d = karpctl_strict_at(&wd, &["diff", "--all", "--output", "json"], &eps, &[]);
    let doc = d.json();
    // The plain plan runs as the caller (moto's default account); the other plan's calls are made
    // as the role, in account 111111111111, and its pin holds against the assumed identity.
    assert!(d.stderr.contains(&format!("Account 123456789012, region us-east-1, cluster {home}")), "{}", d.stderr);
    assert!(d.stderr.contains(&format!("Account 111111111111 (role {role}), region us-east-1, cluster {away}")), "{}", d.stderr);
    assert!(!d.stderr.contains("is pinned to account"), "{}", d.stderr);
    let accounts: Vec<&str> = doc["accounts"].as_array().unwrap().iter().map(|a| a["account"].as_str().unwrap()).collect();
    assert_eq!(accounts, ["111111111111", "default credentials"], "one limiter per account: {doc}");
    // A pin that disagrees with the role's account is refused before any call.
    wd.plan(&away, &plan(&away, "us-east-1", &format!("account_id = \"222222222222\"\nassume_role_arn = \"{role}\"\n")));
    let bad = karpctl_strict_at(&wd, &["diff", "--cluster", &away], &eps, &[]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("pinned"), "{bad:?}");
}
