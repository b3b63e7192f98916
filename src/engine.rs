//! The commands `diff`, `up` (also from a saved plan) and `down`: prepare -> observe -> plan ->
//! execute -> render, each a few calls over `prepare`, `observe`, `planner` and `executor`.

use crate::executor;
use crate::facts::Command;
use crate::model::Outcome;
use crate::model::{Node, Observed, Plan};
use crate::observe::observe_nodes;
use crate::options::{Format, Options};
use crate::plan_file::UserError;
use crate::planner::{self, PlanOptions};
use crate::prepare::{Prepared, prepare};
use crate::report::Style;
use crate::resources::{self};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use crate::output::{EXIT_CHANGES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK};

pub fn stats_json(p: &Prepared) -> Value {
    serde_json::to_value(p.stats.report()).unwrap_or(Value::Null)
}

fn print_stats(p: &Prepared) {
    if !p.global.stats || p.global.output == Format::Json || p.global.scope.is_some() {
        return;
    }
    crate::output::print_stats_report(&p.stats.report());
}

fn plan_json(command: &str, p: &Prepared, plan: &Plan, results: Option<&BTreeMap<String, Outcome>>) -> Value {
    crate::report::plan_json(command, &p.spec.cluster, &p.facts.account_id, &p.facts.region, plan, results, stats_json(p))
}

fn print_plan(p: &Prepared, plan: &Plan) {
    if p.global.output == Format::Human && p.global.scope.is_none() {
        print!("{}", crate::report::render_plan(plan, Style::detect(std::io::stdout().is_terminal())));
    }
}

fn conflicts_error(plan: &Plan) -> anyhow::Error {
    let list: Vec<String> = plan.conflicts.iter().map(|c| format!("  - {}", c.message())).collect();
    let data = json!({
        "conflicts": plan.conflicts.iter().map(|c| json!({"id": c.id, "type": c.kind.label(), "name": c.name, "owner": c.owner, "message": c.message()})).collect::<Vec<_>>(),
    });
    UserError::new(format!(
        "{} object(s) karpctl would manage already exist and are not karpctl's for this cluster:\n{}",
        plan.conflicts.len(),
        list.join("\n")
    ))
    .hint("rename them in the plan, delete them, or run `karpctl up --adopt` to take over unowned ones (never another cluster's)")
    .data(data)
    .into()
}

/// A plan saved by `diff --out`: the steps, and every observation they were computed from.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SavedPlan {
    pub format_version: u32,
    pub cluster: String,
    pub account_id: String,
    pub region: String,
    pub observations: Vec<(Node, Option<Observed>)>,
    pub plan: Plan,
}

/// 2: nodes carry a typed `spec` per kind (1 had a string map).
const SAVED_PLAN_VERSION: u32 = 2;

pub async fn diff(global: &Options, adopt: bool, out: Option<&Path>) -> Result<i32> {
    let p = prepare(global, Command::Diff, true).await?;
    let observed = p.observe(p.nodes()).await?;
    let mut plan = planner::plan(observed.clone(), PlanOptions { adopt });
    plan.findings.extend(p.findings());
    if let Some(path) = out {
        let saved = SavedPlan {
            format_version: SAVED_PLAN_VERSION,
            cluster: p.spec.cluster.clone(),
            account_id: p.facts.account_id.clone(),
            region: p.facts.region.clone(),
            observations: observed,
            plan: plan.clone(),
        };
        std::fs::write(path, serde_json::to_string_pretty(&saved)?)
            .with_context(|| format!("writing the plan to {}", path.display()))?;
        p.info(&format!(
            "Saved the plan to {}; apply exactly it with `karpctl up --plan-file {}`",
            path.display(),
            path.display()
        ));
    }
    let doc = plan_json("diff", &p, &plan, None);
    if let Some(scope) = &global.scope {
        scope.capture(Some(&plan), doc.clone());
    }
    print_plan(&p, &plan);
    print_stats(&p);
    if !plan.conflicts.is_empty() {
        return Err(conflicts_error(&plan));
    }
    match global.output {
        _ if global.scope.is_some() => {}
        Format::Json => println!("{}", serde_json::to_string_pretty(&doc)?),
        Format::Markdown => {
            let section = crate::markdown::Section {
                cluster: p.spec.cluster.clone(),
                account_id: p.facts.account_id.clone(),
                region: p.facts.region.clone(),
                doc: Some(doc),
                error: None,
            };
            print!("{}", crate::markdown::render("diff", &[section]));
        }
        Format::Human => {}
    }
    Ok(if plan.steps.is_empty() { EXIT_OK } else { EXIT_CHANGES })
}

pub async fn up(global: &Options, adopt: bool) -> Result<i32> {
    let p = prepare(global, Command::Up, true).await?;
    let observed = p.observe(p.nodes()).await?;
    let mut plan = planner::plan(observed, PlanOptions { adopt });
    plan.findings.extend(p.findings());
    apply_plan("up", &p, plan).await
}

/// Apply a saved plan: only if it is for this cluster, account and region, and every object it
/// was computed from still reads the same.
pub async fn up_saved(global: &Options, file: &Path) -> Result<i32> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        UserError::new(format!("cannot read saved plan {}: {e}", file.display())).hint("check the --plan-file path")
    })?;
    let saved: SavedPlan = serde_json::from_str(&text).map_err(|e| {
        UserError::new(format!("{} is not a karpctl saved plan: {e}", file.display()))
            .hint("save one with `karpctl diff --out FILE`")
    })?;
    if saved.format_version != SAVED_PLAN_VERSION {
        return Err(UserError::new(format!(
            "saved plan format {} is not supported (expected {SAVED_PLAN_VERSION})",
            saved.format_version
        ))
        .hint("save the plan again with this karpctl version")
        .into());
    }
    if let Some(c) = &global.cluster
        && c != &saved.cluster
    {
        return Err(UserError::new(format!("the saved plan is for cluster {}, not {c}", saved.cluster))
            .hint("use the plan saved for this cluster")
            .into());
    }
    let mut g = global.clone();
    g.cluster = Some(saved.cluster.clone());
    let p = prepare(&g, Command::Up, false).await?;
    if p.facts.account_id != saved.account_id || p.facts.region != saved.region {
        return Err(UserError::new(format!(
            "the saved plan is for account {} in {}, but these credentials are for account {} in {}",
            saved.account_id, saved.region, p.facts.account_id, p.facts.region
        ))
        .hint("use the credentials and region the plan was made with, or save a new plan")
        .into());
    }
    let nodes: Vec<Node> = saved.observations.iter().map(|(n, _)| n.clone()).collect();
    let (now, extra) = tokio::try_join!(
        observe_nodes(&p.ctx, nodes.clone(), g.concurrency as usize),
        crate::aws::in_unit("discovery:unlisted", resources::discover(&p.ctx, &nodes))
    )?;
    let changed: Vec<String> = saved
        .observations
        .iter()
        .zip(now.iter())
        .filter(|((_, before), (_, after))| before != after)
        .map(|((n, _), _)| n.id.clone())
        .collect();
    let before_ids: std::collections::BTreeSet<&str> = saved.observations.iter().map(|(n, _)| n.id.as_str()).collect();
    // Objects that appeared since (found by discovery, not in the saved observations).
    let discovered: Vec<String> = extra.into_iter().map(|n| n.id).filter(|id| !before_ids.contains(id.as_str())).collect();
    if !changed.is_empty() || !discovered.is_empty() {
        let all: Vec<String> = changed.into_iter().chain(discovered).collect();
        return Err(UserError::new(format!("AWS changed since the plan was saved ({}); nothing was applied", all.join(", ")))
            .hint("run `karpctl diff --out FILE` again and review the new plan")
            .into());
    }
    apply_plan("up", &p, saved.plan).await
}

pub async fn down(global: &Options, yes: bool) -> Result<i32> {
    if !yes && !std::io::stdin().is_terminal() {
        return Err(UserError::new("karpctl down needs confirmation, and there is no terminal to ask on")
            .hint("pass --yes to confirm")
            .into());
    }
    let p = prepare(global, Command::Down, true).await?;
    let observed = p.observe(p.nodes()).await?;
    let plan = planner::plan(observed, PlanOptions::default());
    if !yes && !plan.steps.is_empty() {
        print_plan(&p, &plan);
        eprint!("Destroy these {} object(s) for cluster {}? Only 'yes' is accepted: ", plan.steps.len(), p.spec.cluster);
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if answer.trim() != "yes" {
            return Err(UserError::new("down cancelled; nothing was changed").into());
        }
    }
    apply_plan("down", &p, plan).await
}

async fn apply_plan(command: &str, p: &Prepared, plan: Plan) -> Result<i32> {
    if !plan.conflicts.is_empty() {
        if let Some(scope) = &p.global.scope {
            scope.capture(Some(&plan), plan_json(command, p, &plan, None));
        }
        print_plan(p, &plan);
        return Err(conflicts_error(&plan));
    }
    if p.install_agent {
        // The first write, once the plan has no conflicts (and a saved plan is not stale).
        crate::interrupt::writes_started();
        p.stats.set_phase("execute");
        crate::aws::in_unit("preflight:create-agent", crate::preflight::create_agent(&p.ctx, &p.spec)).await?;
    }
    if plan.steps.is_empty() {
        print_plan(p, &plan);
        let doc = plan_json(command, p, &plan, Some(&BTreeMap::new()));
        if let Some(scope) = &p.global.scope {
            scope.capture(Some(&plan), doc);
        } else if p.global.output == Format::Json {
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        print_stats(p);
        return Ok(EXIT_OK);
    }
    print_plan(p, &plan);
    crate::interrupt::writes_started();
    p.stats.set_phase("execute");
    let rx = crate::interrupt::cancelled();
    let ctx = p.ctx.clone();
    let started = Instant::now();
    let results = executor::execute(&plan.steps, p.global.concurrency as usize, rx, ctx.reporter.clone(), move |step| {
        let ctx = ctx.clone();
        async move { resources::apply(&ctx, &step).await }
    })
    .await?;
    let failed = results.values().filter(|o| matches!(o, Outcome::Failed(_))).count();
    let skipped = results.values().filter(|o| matches!(o, Outcome::Skipped(_))).count();
    let cancelled = results.values().filter(|o| matches!(o, Outcome::Cancelled)).count();
    let (mut add, mut change, mut destroy) = (0, 0, 0);
    for s in &plan.steps {
        if results.get(&s.id) == Some(&Outcome::Done) {
            use crate::model::Action::*;
            match s.action {
                Create => add += 1,
                Update | Adopt => change += 1,
                Replace => {
                    add += 1;
                    destroy += 1
                }
                Delete => destroy += 1,
            }
        }
    }
    let elapsed = started.elapsed();
    let failure = (failed > 0).then(|| {
        let errs: Vec<String> = results
            .iter()
            .filter_map(|(id, o)| match o {
                Outcome::Failed(e) => Some(format!("  - {id}: {e}")),
                _ => None,
            })
            .collect();
        UserError::new(format!(
            "{failed} step(s) failed{}:\n{}",
            if skipped > 0 { format!(" and {skipped} were skipped") } else { String::new() },
            errs.join("\n")
        ))
        .hint(format!("fix the cause above and run `karpctl {command}` again; completed steps are not repeated"))
    });
    if p.global.output == Format::Json || p.global.scope.is_some() {
        // One document on stdout, with the error in it when a step failed.
        let mut doc = plan_json(command, p, &plan, Some(&results));
        if let Some(f) = &failure {
            doc["error"] = json!({"message": f.message, "causes": [], "hint": f.hint});
        }
        match &p.global.scope {
            Some(scope) => scope.capture(Some(&plan), doc),
            None => println!("{}", serde_json::to_string_pretty(&doc)?),
        }
    } else {
        let verb = if command == "down" { "Destroy" } else { "Apply" };
        let state = if failed + skipped + cancelled == 0 { "complete" } else { "incomplete" };
        println!(
            "{verb} {state}! Resources: {add} added, {change} changed, {destroy} destroyed. ({:.1}s)",
            elapsed.as_secs_f64()
        );
    }
    print_stats(p);
    if cancelled > 0 {
        eprintln!(
            "Interrupted: {cancelled} step(s) not started. Run `karpctl {command}` again to finish; it picks up from what exists."
        );
        return Ok(EXIT_INTERRUPTED);
    }
    if let Some(f) = failure {
        if p.global.output == Format::Json && p.global.scope.is_none() {
            return Ok(EXIT_ERROR);
        }
        return Err(f.into());
    }
    Ok(EXIT_OK)
}
