//! Many clusters in one run (`--all`, `--clusters`): each cluster runs as it would alone, at most
//! `--parallel-clusters` at once, an account's clusters sharing one limiter; one failing never
//! stops the others. Returns one summary (`FleetReport`) for the printer.

use crate::aws::{CallStats, Limiter};
use crate::cli::Command;
use crate::error::UserError;
use crate::exit::{EXIT_CHANGES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK};
use crate::options::Options;
use crate::plan_file::{self};
use crate::report::markdown::Section;
use crate::report::{AccountUse, ClusterRun, FleetReport, Prefixed, human, json};
use crate::scope::Scope;
use anyhow::Result;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The limiter key of the clusters whose plan names no role: the caller's own credentials.
const DEFAULT_ACCOUNT: &str = "default credentials";

/// None when the command names one cluster (or none); else the run over many.
pub async fn dispatch(global: &Options, command: &Command) -> Option<Result<FleetReport>> {
    if !global.all && global.clusters.is_none() {
        return None;
    }
    Some(run(global, command).await)
}

pub fn names(global: &Options) -> Result<Vec<String>, UserError> {
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
        Command::Import(_) => "import",
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
        Command::Import(_) => Err(UserError::new("karpctl import writes the plan of one cluster")
            .hint("run karpctl import --cluster C for each cluster")),
        _ => Ok(()),
    }
}

/// What one cluster's command returned: its plan or values, its JSON document, its error.
struct Produced {
    plan: Option<crate::model::Plan>,
    text: Option<String>,
    doc: Option<Value>,
    code: i32,
    error: Option<anyhow::Error>,
}

/// Run one cluster's command (its printer is muted: `g.scope` is set).
async fn produce(g: &Options, command: &Command) -> Produced {
    let plan = |r: Result<crate::report::PlanReport>| match r {
        Ok(r) => Produced {
            code: r.exit_code(),
            doc: Some(json::plan_doc(&r)),
            error: r.error().map(anyhow::Error::from),
            plan: Some(r.plan),
            text: None,
        },
        Err(e) => Produced { plan: None, text: None, doc: None, code: EXIT_ERROR, error: Some(e) },
    };
    match command {
        Command::Diff(a) => plan(crate::engine::diff(g, a.adopt, None).await),
        Command::Up(a) => plan(crate::engine::up(g, a.adopt, a.yes).await),
        Command::Down(_) => plan(crate::engine::down(g, true).await),
        Command::Output(a) => match crate::karpenter_values::run(g, a.format).await {
            Ok(v) => Produced { plan: None, text: Some(v.text), doc: Some(v.doc), code: EXIT_OK, error: None },
            Err(e) => Produced { plan: None, text: None, doc: None, code: EXIT_ERROR, error: Some(e) },
        },
        Command::Completions { .. } | Command::Doctor(_) | Command::Import(_) => unreachable!("refused by check"),
    }
}

/// `karpctl output --format caller-policy` (the document: `caller_policy::build`): the plans named (`--cluster`, `--clusters`, `--all`),
/// each with its account and partition from STS (no permission needed) and its region.
pub async fn caller_policy(
    global: &Options,
    wanted: &[crate::caller_policy::For],
) -> anyhow::Result<crate::report::ValuesReport> {
    use crate::error::UserError;
    let names: Vec<String> = if global.all || global.clusters.is_some() {
        names(global)?
    } else {
        vec![global.cluster.clone().or_else(|| global.settings.cluster.clone()).ok_or_else(|| {
            UserError::new("karpctl output --format caller-policy needs a cluster")
                .hint("pass --cluster NAME, --clusters A,B or --all (or set KARPCTL_CLUSTER)")
        })?]
    };
    let config = if names.len() == 1 { global.config.as_deref() } else { None };
    let mut known = Vec::new();
    for name in &names {
        let spec = crate::plan_file::load(config, Some(name), std::path::Path::new("plans"), &global.settings)?;
        let c = crate::prepare::connect_and_identify(global, &spec).await?;
        known.push((spec, c.account_id, c.partition, c.region));
    }
    let targets: Vec<crate::caller_policy::Target> = known
        .iter()
        .map(|(spec, a, p, r)| crate::caller_policy::Target { spec, account_id: a, partition: p, region: r })
        .collect();
    let parts = crate::caller_policy::build(&targets, wanted);
    let doc = if parts.len() == 1 { parts[0].clone() } else { serde_json::json!({ "parts": parts }) };
    let text = if parts.len() == 1 {
        serde_json::to_string_pretty(&parts[0])?
    } else {
        // Each part is one policy document: `jq '.parts[N]'` gives it to `aws iam put-role-policy`.
        serde_json::to_string_pretty(&doc)?
    };
    Ok(crate::report::ValuesReport { doc, text })
}

pub async fn run(global: &Options, command: &Command) -> Result<FleetReport> {
    check(global, command)?;
    let names = names(global)?;
    let cmd = command_name(command);
    let base = crate::report::fleet_reporter(global.quiet, global.settings.terminal);
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
            let spec = plan_file::load(None, Some(name), Path::new("plans"), &global.settings).ok();
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
            });
            let mut g = global.clone();
            g.cluster = Some(name.clone());
            g.all = false;
            g.clusters = None;
            g.scope = Some(scope.clone());
            let produced = produce(&g, command).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let doc = produced.doc.clone();
            let pick = |k: &str, fallback: Option<String>| {
                doc.as_ref().and_then(|d| d[k].as_str().map(str::to_string)).or(fallback).unwrap_or_default()
            };
            let error = produced.error.as_ref().map(human::error_brief);
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
            let mut doc = doc;
            if let Some(e) = &produced.error {
                // An error before any document: the same shape as a one-cluster error document.
                let d = doc.get_or_insert_with(|| {
                    json!({"format_version": 1, "command": cmd, "cluster": name, "account_id": section.account_id, "region": section.region, "stats": stats.clone()})
                });
                d["error"] = json::error_json(e);
            }
            ClusterRun { section, code: produced.code, plan: produced.plan, doc, text: produced.text, stats }
        }
    });
    let done: Vec<ClusterRun> = futures::future::join_all(runs).await;
    let limiters = limiters.into_inner().unwrap();
    Ok(FleetReport {
        command: cmd,
        exit_code: exit_code(&done),
        runs: done,
        parallel_clusters: global.parallel_clusters,
        peak_clusters_in_flight: peak.load(Ordering::SeqCst),
        accounts: limiters
            .iter()
            .map(|(k, l)| AccountUse {
                account: k.clone(),
                concurrency: global.account_concurrency,
                peak_requests_in_flight: l.gauge.peak(),
            })
            .collect(),
    })
}

fn exit_code(done: &[ClusterRun]) -> i32 {
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
