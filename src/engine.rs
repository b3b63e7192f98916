//! The commands `diff`, `up` (also from a saved plan) and `down`: prepare -> observe -> plan ->
//! execute. Each returns a `PlanReport` for the printer to render; `up` and `down` show the plan
//! through the reporter before they apply it.

use crate::error::UserError;
use crate::executor;
use crate::facts::prepared::Intent;
use crate::model::Outcome;
use crate::model::{Node, Observed, Plan};
use crate::observe::observe_nodes;
use crate::options::Options;
use crate::planner::{self, PlanOptions};
use crate::prepare::{Prepared, prepare};
use crate::report::{Applied, PlanReport, Printer};
use crate::resources::{self};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The report of a plan (and, after `up`/`down`, of what became of its steps). The CloudTrail
/// read started in preparation is joined only here, so it never delays the plan or a write.
async fn report(
    command: &'static str,
    p: &Prepared,
    plan: Plan,
    results: Option<BTreeMap<String, Outcome>>,
    applied: Option<Applied>,
    failure: Option<UserError>,
) -> PlanReport {
    if !crate::interrupt::abandoned() {
        p.join_trail().await;
    }
    let handoff = results.as_ref().filter(|_| command == "up").map(|r| {
        let kept = p.upgrade_kept.lock().unwrap().clone();
        crate::karpenter_values::handoff(&plan, r, &p.spec, &p.facts, &kept, p.global.config.as_deref())
    });
    PlanReport {
        command,
        cluster: p.spec.cluster.clone(),
        account_id: p.facts.account_id.clone(),
        region: p.facts.region.clone(),
        plan,
        results,
        applied,
        failure,
        readiness: p.readiness(),
        pin: p.pin_support(),
        handoff,
        stats: p.stats.report(),
    }
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

pub async fn diff(global: &Options, adopt: bool, out: Option<&Path>) -> Result<PlanReport> {
    diff_on(global, adopt, out, None).await
}

/// `diff` over a connection already made (`prepare_on`): `import`'s.
pub async fn diff_on(
    global: &Options,
    adopt: bool,
    out: Option<&Path>,
    conn: Option<&crate::prepare::Connected>,
) -> Result<PlanReport> {
    let p = crate::prepare::prepare_on(global, Intent::Diff, true, conn).await?;
    phase(&p, "prepare", crate::aws::epoch());
    let t = Instant::now();
    let observed = p.observe(p.nodes()).await?;
    let (observed, switch) = identity_switch(&p, observed).await;
    let (observed, upgrade) = karpenter_upgrade(&p, observed).await;
    phase(&p, "observe", t);
    let t = Instant::now();
    let mut plan = planner::plan(observed.clone(), PlanOptions { adopt });
    plan.identity_switch = switch;
    plan_notes(&p, &mut plan, upgrade, Intent::Diff).await?;
    phase(&p, "plan", t);
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
    Ok(report("diff", &p, plan, None, None, None).await)
}

/// `up`: on a terminal, a plan that deletes or replaces anything is shown and applied only after
/// the answer `yes` (as `down` asks); `yes` skips the question. Without a terminal (CI) it goes
/// on. In a many-cluster run on a terminal no cluster can ask: such a plan is refused unless
/// `yes`.
pub async fn up(global: &Options, adopt: bool, yes: bool) -> Result<PlanReport> {
    let p = prepare(global, Intent::Up, true).await?;
    phase(&p, "prepare", crate::aws::epoch());
    let t = Instant::now();
    let observed = p.observe(p.nodes()).await?;
    let (observed, switch) = identity_switch(&p, observed).await;
    let (observed, upgrade) = karpenter_upgrade(&p, observed).await;
    phase(&p, "observe", t);
    let t = Instant::now();
    let mut plan = planner::plan(observed, PlanOptions { adopt });
    plan.identity_switch = switch;
    plan_notes(&p, &mut plan, upgrade, Intent::Up).await?;
    // Over a role's managed-policy quota: stop here, before any question or write.
    crate::gather::preflight::policy_headroom(&p.ctx, &plan, Intent::Up).await?;
    phase(&p, "plan", t);
    let destructive = destroys(&plan);
    let shown = if yes || destructive == 0 || !plan.conflicts.is_empty() || !global.settings.terminal.stdin {
        false
    } else if global.scope.is_some() {
        return Err(UserError::new(format!(
            "the plan for cluster {} deletes or replaces {destructive} object(s); nothing was changed",
            p.spec.cluster
        ))
        .hint("review it with `karpctl diff`, then run again with --yes (several clusters cannot each ask on one terminal)")
        .into());
    } else {
        confirm(
            &p,
            &plan,
            &format!(
                "Apply this plan to cluster {}? It deletes or replaces {destructive} object(s). Only 'yes' is accepted: ",
                p.spec.cluster
            ),
            "up",
        )?;
        true
    };
    apply_plan("up", &p, plan, shown).await
}

/// A change of `identity.mode` in progress (`identity_switch`): the observed nodes' desired
/// state follows its stage. CloudTrail's read is waited for here only when its evidence decides
/// (the new path is in place and `--finish-identity-switch` was not given).
async fn identity_switch(
    p: &Prepared,
    mut observed: Vec<(Node, Option<Observed>)>,
) -> (Vec<(Node, Option<Observed>)>, Option<crate::model::IdentitySwitch>) {
    use crate::identity_switch as sw;
    let Some(d) = sw::detect(&p.spec, &observed) else { return (observed, None) };
    let finish = p.global.finish_identity_switch;
    let trail = if d.needs_evidence(finish) { p.trail_now().await } else { None };
    let role = crate::arns::controller_role_arn(&p.spec, &p.facts);
    let (stage, reason) = sw::stage(&d, finish, || sw::seen(trail.as_deref(), &role, d.from, d.to));
    let switch = sw::apply(&mut observed, &p.spec, &p.facts, &d, stage, reason);
    (observed, Some(switch))
}

/// A Karpenter upgrade in flight (`upgrade`): the controller policies' desired documents follow
/// what CloudTrail shows running. Its read is waited for here only when the plan changes a live
/// controller policy's document (a converged plan never waits for it).
async fn karpenter_upgrade(
    p: &Prepared,
    mut observed: Vec<(Node, Option<Observed>)>,
) -> (Vec<(Node, Option<Observed>)>, Option<crate::upgrade::Upgrade>) {
    if !crate::upgrade::needs_evidence(&observed) {
        return (observed, None);
    }
    let trail = p.trail_now().await;
    let upgrade = crate::upgrade::apply(&mut observed, &p.spec, &p.facts, trail.as_deref());
    *p.upgrade_kept.lock().unwrap() = crate::upgrade::kept_by(&observed);
    (observed, upgrade)
}

/// The notes `diff` and `up` add to their plan, in this order: the upgrade in flight (with the
/// commands that upgrade Karpenter), a finish flag with nothing to finish, preparation's notes,
/// the bus's rule quota, the managed-policy headroom (`diff` only: `up` stops on it instead, after
/// this) and a queue that Karpenter still polls.
async fn plan_notes(p: &Prepared, plan: &mut Plan, upgrade: Option<crate::upgrade::Upgrade>, intent: Intent) -> Result<()> {
    if let Some(u) = upgrade {
        let helm = crate::karpenter_values::helm_steps(&p.spec, p.global.config.as_deref());
        plan.notes.push(u.note(plan, &helm));
    }
    plan.notes.extend(nothing_to_finish(p, plan));
    plan.notes.extend(p.notes());
    plan.notes.extend(crate::resources::event_rule::quota_finding(&p.ctx, plan).await?);
    if intent == Intent::Diff {
        plan.notes.extend(crate::gather::preflight::policy_headroom(&p.ctx, plan, Intent::Diff).await?);
    }
    plan.notes.extend(queue_in_use_notes(p, plan));
    Ok(())
}

/// `--finish-identity-switch` with no switch in progress: said, nothing else.
fn nothing_to_finish(p: &Prepared, plan: &Plan) -> Option<crate::model::Note> {
    (p.global.finish_identity_switch && plan.identity_switch.is_none()).then(|| crate::model::Note {
        id: "identity-switch".into(),
        level: crate::model::Level::Info,
        message: "--finish-identity-switch: no identity switch is in progress (the controller role trusts only the plan's identity.mode); nothing to finish".into(),
    })
}

/// The steps of a plan that delete or replace an object (what `up` asks about).
fn destroys(plan: &Plan) -> usize {
    use crate::model::Action;
    plan.steps.iter().filter(|s| matches!(s.action, Action::Delete | Action::Replace)).count()
}

/// Show the plan, ask `question` on the terminal and go on only on the answer `yes`; anything
/// else (or no answer) is an error saying nothing was changed. Shared by `up` and `down`.
fn confirm(p: &Prepared, plan: &Plan, question: &str, command: &str) -> Result<()> {
    let printer = Printer::new(&p.global);
    printer.plan_for_question(plan);
    printer.prompt(question);
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if answer.trim() != "yes" {
        return Err(UserError::new(format!("{command} cancelled; nothing was changed")).into());
    }
    Ok(())
}

/// A plan that deletes the interruption queue the plan names: that name is the one `karpctl
/// output` handed on as `settings.interruptionQueue`, so a Karpenter installed from it keeps
/// polling a queue that is gone. Said in the plan (`diff` and `up`).
fn queue_in_use_notes(p: &Prepared, plan: &Plan) -> Vec<crate::model::Note> {
    use crate::model::{Action, Kind, Level, Note};
    let handed_on = &p.spec.interruption.queue_name;
    plan.steps
        .iter()
        .filter(|s| s.kind == Kind::Queue && matches!(s.action, Action::Delete | Action::Replace) && &s.name == handed_on)
        .map(|s| Note {
            id: format!("{}-in-use", s.id),
            level: Level::Warning,
            message: format!(
                "SQS queue {} is deleted: it is the queue Karpenter's settings.interruptionQueue names if you installed it from `karpctl output`; {}",
                s.name,
                if p.spec.interruption.enabled {
                    "set it again from `karpctl output --format helm` after up".to_string()
                } else {
                    "remove settings.interruptionQueue from Karpenter's Helm values (`karpctl output --format helm` no longer sets it), or Karpenter keeps failing to read it".to_string()
                }
            ),
        })
        .collect()
}

/// Apply a saved plan: only if it is for this cluster, account and region, and every object it
/// was computed from still reads the same.
pub async fn up_saved(global: &Options, file: &Path) -> Result<PlanReport> {
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
    let p = prepare(&g, Intent::Up, false).await?;
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
    // Plain `up`'s checks over what it read (they read the same as when the plan was saved),
    // with the grants the saved plan keeps for an older Karpenter (an upgrade in flight).
    p.judge_observed(&now);
    *p.upgrade_kept.lock().unwrap() = crate::upgrade::kept_by(&saved.observations);
    crate::gather::preflight::policy_headroom(&p.ctx, &saved.plan, Intent::Up).await?;
    apply_plan("up", &p, saved.plan, false).await
}

pub async fn down(global: &Options, yes: bool) -> Result<PlanReport> {
    if !yes && !global.settings.terminal.stdin {
        return Err(UserError::new("karpctl down needs confirmation, and there is no terminal to ask on")
            .hint("pass --yes to confirm")
            .into());
    }
    let mut p = prepare(global, Intent::Down, true).await?;
    phase(&p, "prepare", crate::aws::epoch());
    let t = Instant::now();
    // Without a plan file, the names come from what this cluster's objects link to
    // (docs/reference.md, "`down` without a plan").
    let (mut incomplete, mut extra) = (None, Vec::new());
    if p.spec.source.is_none() {
        let located =
            crate::aws::in_unit("discovery:locate", crate::gather::locate::without_plan(&p.ctx, &p.spec, &p.facts)).await?;
        for n in &located.notes {
            p.info(&format!("Without a plan file, found {n}"));
        }
        p.spec = located.spec;
        incomplete = located.incomplete;
        extra = located.extra;
    }
    let mut nodes = p.nodes();
    nodes.extend(extra);
    let attached = crate::aws::in_unit("discovery:unlisted", resources::iam_orphans::attached_to_roles(&p.ctx, &nodes)).await?;
    nodes.extend(attached);
    let observed = p.observe(nodes).await?;
    phase(&p, "observe", t);
    let plan = planner::plan(observed, PlanOptions::default());
    if let Some(why) = &incomplete {
        if !plan.steps.is_empty() {
            return Err(crate::gather::locate::refusal(&p.spec.cluster, why, &plan).into());
        }
        p.info(&format!(
            "Without a plan file, the controller role could not be searched for ({why}); nothing else of cluster {} was found",
            p.spec.cluster
        ));
    }
    let shown = !yes && !plan.steps.is_empty();
    if shown {
        confirm(
            &p,
            &plan,
            &format!("Destroy these {} object(s) for cluster {}? Only 'yes' is accepted: ", plan.steps.len(), p.spec.cluster),
            "down",
        )?;
    }
    apply_plan("down", &p, plan, shown).await
}

/// With tracing, note the phase `what` of the run, from `start` until now (`CallStats::span`).
fn phase(p: &Prepared, what: &str, start: Instant) {
    p.stats.span("run", what, start, Instant::now());
}

/// Wait for the agreement waits the steps left running (`Ctx::settle_later`); a step whose wait
/// failed is failed. With tracing, each wait is a `settle` span of its step.
async fn settle(
    p: &Prepared,
    plan: &Plan,
    mut results: BTreeMap<String, Outcome>,
    started: Instant,
) -> BTreeMap<String, Outcome> {
    for s in p.ctx.settled().await {
        p.stats.span(&format!("step:{}", s.step_id), "settle", s.began, s.ended);
        let Err(e) = s.result else { continue };
        let step = plan.steps.iter().find(|st| st.id == s.step_id);
        if crate::interrupt::is_stopped(&e) {
            if let Some(step) = step {
                p.ctx.reporter.event(crate::events::Event::Stopped { step, elapsed: started.elapsed() });
            }
            results.insert(s.step_id, Outcome::Cancelled);
            continue;
        }
        let msg = format!("{e:#}");
        if let Some(step) = step {
            p.ctx.reporter.event(crate::events::Event::Failed { step, error: &msg, elapsed: started.elapsed() });
        }
        results.insert(s.step_id, Outcome::Failed(msg));
    }
    results
}

/// Apply a plan (`shown`: it was shown already, before a question).
async fn apply_plan(command: &'static str, p: &Prepared, plan: Plan, shown: bool) -> Result<PlanReport> {
    if !plan.conflicts.is_empty() {
        return Ok(report(command, p, plan, None, None, None).await);
    }
    if p.preflight.create_spot_role && command == "up" {
        // Account-wide, before the plan's steps: Karpenter's first Spot launch needs it.
        crate::interrupt::writes_started();
        p.stats.set_phase("execute");
        let t = Instant::now();
        crate::aws::in_unit("preflight:create-spot-role", crate::resources::iam::create_spot_role(&p.ctx)).await?;
        p.stats.span("preflight:create-spot-role", "apply", t, Instant::now());
    }
    if p.preflight.install_agent {
        // The first write, once the plan has no conflicts (and a saved plan is not stale).
        crate::interrupt::writes_started();
        p.stats.set_phase("execute");
        let t = Instant::now();
        crate::aws::in_unit("preflight:create-agent", crate::gather::preflight::create_agent(&p.ctx, &p.spec)).await?;
        p.stats.span("preflight:create-agent", "apply", t, Instant::now());
    }
    if plan.steps.is_empty() {
        return Ok(report(command, p, plan, Some(BTreeMap::new()), None, None).await);
    }
    if !shown {
        Printer::new(&p.global).plan_preview(&plan);
    }
    crate::interrupt::writes_started();
    p.stats.set_phase("execute");
    let rx = crate::interrupt::watch();
    let (ctx, stats) = (p.ctx.clone(), p.stats.clone());
    let started = Instant::now();
    let results = executor::execute(&plan.steps, p.global.concurrency as usize, rx, ctx.reporter.clone(), move |step| {
        let (ctx, stats) = (ctx.clone(), stats.clone());
        crate::interrupt::watched(async move {
            let t = Instant::now();
            let r = resources::apply(&ctx, &step).await;
            stats.span(&format!("step:{}", step.id), "apply", t, Instant::now());
            r
        })
    })
    .await?;
    phase(p, "execute", started);
    let t = Instant::now();
    let results = settle(p, &plan, results, started).await;
    phase(p, "settle", t);
    let mut applied = Applied {
        failed: results.values().filter(|o| matches!(o, Outcome::Failed(_))).count(),
        skipped: results.values().filter(|o| matches!(o, Outcome::Skipped(_))).count(),
        cancelled: results.values().filter(|o| matches!(o, Outcome::Cancelled)).count(),
        ..Default::default()
    };
    for s in &plan.steps {
        if results.get(&s.id) == Some(&Outcome::Done) {
            use crate::model::Action::*;
            match s.action {
                Create => applied.add += 1,
                Update | Adopt => applied.change += 1,
                Replace => {
                    applied.add += 1;
                    applied.destroy += 1
                }
                Delete => applied.destroy += 1,
            }
        }
    }
    applied.elapsed = started.elapsed();
    let (failed, skipped) = (applied.failed, applied.skipped);
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
    Ok(report(command, p, plan, Some(results), Some(applied), failure).await)
}
