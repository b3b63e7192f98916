//! Many clusters in one run (`--all`, `--clusters a,b,c`): each cluster's command runs as it would
//! alone (its `Scope` takes its output, its requests stay within its own `--concurrency`), at most
//! `--parallel-clusters` at once; the clusters of one account also share one request limiter of
//! `--account-concurrency` (AWS throttles per account); one cluster failing never
//! stops the others. Then one summary: a table, one JSON document, or one Markdown comment.

use crate::aws::{CallStats, Limiter};
use crate::cli::{Command, OutputFormat};
use crate::markdown::{self, Section};
use crate::options::{Format, Options};
use crate::output::{EXIT_CHANGES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK};
use crate::plan_file::{self, UserError};
use crate::report::{Progress, Reporter, Silent, Style};
use crate::scope::{Captured, Prefixed, Scope};
use anyhow::Result;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The limiter key of the clusters whose plan names no role: the caller's own credentials.
const DEFAULT_ACCOUNT: &str = "default credentials";

/// None when the command names one cluster (or none); else the run over many.
pub async fn dispatch(global: &Options, command: &Command) -> Option<Result<i32>> {
    if !global.all && global.clusters.is_none() {
        return None;
    }
    Some(run(global, command).await)
}

fn names(global: &Options) -> Result<Vec<String>, UserError> {
    let mut names: Vec<String> = if global.all {
        let dir = Path::new("plans");
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| {
                UserError::new(format!("--all: cannot read plans/: {e}")).hint("run from the directory that holds plans/")
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().to_string()))
            .collect();
        found.sort();
        found
    } else {
        global.clusters.clone().unwrap_or_default().into_iter().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()
    };
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    if names.is_empty() {
        return Err(UserError::new(if global.all { "--all: there is no plan in plans/" } else { "--clusters names no cluster" })
            .hint("add plans/<cluster>.toml files, or name clusters with --clusters a,b"));
    }
    Ok(names)
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Up(_) => "up",
        Command::Diff(_) => "diff",
        Command::Down(_) => "down",
        Command::Output(_) => "output",
        Command::Completions { .. } => "completions",
        Command::Doctor(_) => "doctor",
    }
}

/// What many clusters cannot do, refused before anything runs.
fn check(global: &Options, command: &Command) -> Result<(), UserError> {
    match command {
        Command::Diff(a) if a.out.is_some() => {
            Err(UserError::new("--out saves the plan of one cluster").hint("use --cluster C with --out, once per cluster"))
        }
        Command::Up(a) if a.plan_file.is_some() => {
            Err(UserError::new("--plan-file applies the plan of one cluster").hint("use --cluster C with --plan-file"))
        }
        Command::Down(_) if global.all => Err(UserError::new("karpctl down --all is refused: name the clusters to remove")
            .hint("spell the list out: karpctl down --clusters a,b --yes")),
        Command::Down(a) if !a.yes => Err(UserError::new("karpctl down over several clusters needs --yes")
            .hint("review `karpctl diff` of each, then pass --yes")),
        Command::Completions { .. } => Err(UserError::new("completions takes no cluster")),
        Command::Doctor(_) => Err(UserError::new("karpctl doctor diagnoses one cluster at a time")
            .hint("run karpctl doctor --cluster C for each cluster")),
        _ => Ok(()),
    }
}

/// One cluster's end: its name, where it runs, its exit code, its captured result, its error.
struct Done {
    section: Section,
    code: i32,
    captured: Captured,
    stats: Value,
}

pub async fn run(global: &Options, command: &Command) -> Result<i32> {
    check(global, command)?;
    let names = names(global)?;
    let cmd = command_name(command);
    let base: Arc<dyn Reporter> = if global.quiet {
        Arc::new(Silent)
    } else {
        // No live status line: several clusters' steps interleave; every line names its cluster.
        Arc::new(Progress::new(false, Style::detect(std::io::stderr().is_terminal())))
    };
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    let limiters: std::sync::Mutex<BTreeMap<String, Limiter>> = Default::default();
    let in_flight = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let gate = tokio::sync::Semaphore::new(global.parallel_clusters.max(1) as usize);
    let accounts: std::sync::Mutex<BTreeMap<String, String>> = Default::default();
    let runs = names.iter().map(|name| {
        let (base, limiters, gate, accounts) = (&base, &limiters, &gate, &accounts);
        let (in_flight, peak) = (&in_flight, &peak);
        async move {
            let _slot = gate.acquire().await.expect("never closed");
            let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(n, Ordering::SeqCst);
            // The plan decides the account (its role's, or the caller's): its limiter and, for an
            // error before STS answers, what the summary shows.
            let spec = plan_file::load(None, Some(name), Path::new("plans")).ok();
            let key = spec
                .as_ref()
                .and_then(|s| s.assume_role.as_ref().map(|r| r.account_id.clone()))
                .unwrap_or_else(|| DEFAULT_ACCOUNT.to_string());
            // The cluster's own --concurrency, inside its account's --account-concurrency.
            let account = limiters
                .lock()
                .unwrap()
                .entry(key.clone())
                .or_insert_with(|| Limiter::new(global.account_concurrency as usize))
                .clone();
            let limiter = Limiter::inside(global.concurrency as usize, &account);
            let scope = Arc::new(Scope {
                cluster: name.clone(),
                reporter: Arc::new(Prefixed { prefix: format!("[{name:<width$}] "), inner: base.clone() }),
                limiter,
                stats: Arc::new(CallStats::default()),
                captured: Default::default(),
            });
            let mut g = global.clone();
            g.cluster = Some(name.clone());
            g.all = false;
            g.clusters = None;
            g.scope = Some(scope.clone());
            let result = match command {
                Command::Diff(a) => crate::engine::diff(&g, a.adopt, None).await,
                Command::Up(a) => crate::engine::up(&g, a.adopt).await,
                Command::Down(_) => crate::engine::down(&g, true).await,
                Command::Output(a) => crate::outputs::run(&g, a.format).await,
                Command::Completions { .. } | Command::Doctor(_) => unreachable!("refused by check"),
            };
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let captured = scope.take();
            let doc = captured.doc.clone();
            let pick = |k: &str, fallback: Option<String>| {
                doc.as_ref().and_then(|d| d[k].as_str().map(str::to_string)).or(fallback).unwrap_or_default()
            };
            let (code, error) = match &result {
                Ok(c) => (*c, doc.as_ref().and_then(|d| d["error"]["message"].as_str().map(str::to_string))),
                Err(e) => (EXIT_ERROR, Some(error_text(e))),
            };
            let account_id = pick(
                "account_id",
                spec.as_ref().and_then(|s| s.account_id.clone().or(s.assume_role.as_ref().map(|r| r.account_id.clone()))),
            );
            accounts.lock().unwrap().insert(name.clone(), key);
            let section = Section {
                cluster: name.clone(),
                region: pick("region", spec.as_ref().and_then(|s| s.region.clone()).or(global.region.clone())),
                account_id,
                doc: doc.clone(),
                error,
            };
            let stats = serde_json::to_value(scope.stats.report()).unwrap_or(Value::Null);
            let error_doc = result.as_ref().err().map(crate::output::error_json);
            let mut captured = captured;
            if let Some(e) = error_doc {
                // An error before any document: the same shape as a one-cluster error document.
                let d = captured.doc.get_or_insert_with(|| {
                    json!({"format_version": 1, "command": cmd, "cluster": name, "account_id": section.account_id, "region": section.region, "stats": stats.clone()})
                });
                d["error"] = e;
            }
            Done { section, code, captured, stats }
        }
    });
    let done: Vec<Done> = futures::future::join_all(runs).await;
    let limiters = limiters.into_inner().unwrap();
    let code = exit_code(&done);
    match global.output {
        Format::Json => {
            let clusters: Vec<Value> = done.iter().map(|d| d.captured.doc.clone().unwrap_or(Value::Null)).collect();
            let doc = json!({
                "format_version": 1,
                "command": cmd,
                "clusters": clusters,
                "summary": done.iter().map(|d| json!({
                    "cluster": d.section.cluster, "account_id": d.section.account_id, "region": d.section.region,
                    "result": markdown::result_text(cmd, &d.section), "exit_code": d.code,
                })).collect::<Vec<_>>(),
                "parallel_clusters": global.parallel_clusters,
                "peak_clusters_in_flight": peak.load(Ordering::SeqCst),
                "accounts": limiters.iter().map(|(k, l)| json!({
                    "account": k, "concurrency": global.account_concurrency, "peak_requests_in_flight": l.gauge.peak(),
                })).collect::<Vec<_>>(),
                "exit_code": code,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Format::Markdown => {
            let sections: Vec<Section> = done.iter().map(|d| d.section.clone()).collect();
            print!("{}", markdown::render(cmd, &sections));
        }
        Format::Human => {
            for d in &done {
                print_cluster(command, d);
            }
            if global.stats {
                for d in &done {
                    eprintln!("[{}] AWS calls: {}", d.section.cluster, d.stats["calls"]);
                }
            }
            print!("{}", summary_table(cmd, &done));
        }
    }
    Ok(code)
}

fn error_text(e: &anyhow::Error) -> String {
    let mut s = e.to_string();
    if let Some(h) = crate::output::hint_of(e) {
        s.push_str(&format!("\nhint: {h}"));
    }
    s
}

fn exit_code(done: &[Done]) -> i32 {
    let codes: Vec<i32> = done.iter().map(|d| d.code).collect();
    if codes.contains(&EXIT_INTERRUPTED) {
        EXIT_INTERRUPTED
    } else if codes.contains(&EXIT_ERROR) || codes.iter().any(|c| ![EXIT_OK, EXIT_CHANGES].contains(c)) {
        EXIT_ERROR
    } else if codes.contains(&EXIT_CHANGES) {
        EXIT_CHANGES
    } else {
        EXIT_OK
    }
}

/// A cluster's own part of the human output: its plan (`diff`), its outputs (`output`), its error.
fn print_cluster(command: &Command, d: &Done) {
    let style = Style::detect(std::io::stdout().is_terminal());
    let s = &d.section;
    let head = format!("== {} (account {}, region {}) ==", s.cluster, dash(&s.account_id), dash(&s.region));
    match command {
        Command::Diff(_) => {
            println!("{}", style.bold(&head));
            if let Some(p) = &d.captured.plan {
                print!("{}", crate::report::render_plan(p, style));
            }
        }
        Command::Output(a) => {
            println!("# {head}");
            if let Some(doc) = d.captured.doc.as_ref().filter(|_| s.error.is_none()) {
                let text = match a.format {
                    OutputFormat::Json => serde_json::to_string_pretty(doc).unwrap_or_default(),
                    OutputFormat::Helm => crate::outputs::helm(doc, doc["identity_mode"] == "irsa"),
                    OutputFormat::Nodeclass => crate::outputs::nodeclass(doc),
                };
                println!("{text}");
            }
        }
        _ => {}
    }
    if let Some(e) = &s.error {
        if !matches!(command, Command::Diff(_) | Command::Output(_)) {
            println!("{}", style.bold(&head));
        }
        for (i, line) in e.lines().enumerate() {
            if i == 0 {
                println!("{}: {line}", style.red("error"));
            } else {
                println!("  {line}");
            }
        }
    }
    println!();
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn summary_table(cmd: &str, done: &[Done]) -> String {
    let rows: Vec<[String; 4]> = done
        .iter()
        .map(|d| {
            let s = &d.section;
            [s.cluster.clone(), dash(&s.account_id).to_string(), dash(&s.region).to_string(), markdown::result_text(cmd, s)]
        })
        .collect();
    let head = ["CLUSTER".to_string(), "ACCOUNT".into(), "REGION".into(), "RESULT".into()];
    let mut w = [0usize; 3];
    for r in rows.iter().chain(std::iter::once(&head)) {
        for i in 0..3 {
            w[i] = w[i].max(r[i].chars().count());
        }
    }
    let mut out = format!("Summary of {} cluster(s):\n", rows.len());
    for r in std::iter::once(&head).chain(rows.iter()) {
        out.push_str(&format!("  {:<a$}  {:<b$}  {:<c$}  {}\n", r[0], r[1], r[2], r[3], a = w[0], b = w[1], c = w[2]));
    }
    out
}
