//! Runs the steps of a plan concurrently. A step starts as soon as the steps it depends on have
//! finished (not in waves); a failure skips only the steps that depend on it, transitively; a
//! stop ends scheduling and lets in-flight steps end (`Stop::Abandon`: at once).

use crate::events::{Event, Reporter};
use crate::interrupt::Stop;
use crate::model::{Action, Outcome, Step};
use anyhow::{Result, bail};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Edges between steps as (before, after) pairs of step indexes. Creates and updates follow the
/// dependency direction; deletes follow it reversed (a dependent goes before what it depends on),
/// like Terraform's destroy edges.
pub fn edges(steps: &[Step]) -> Result<Vec<(usize, usize)>> {
    let index: HashMap<&str, usize> = steps.iter().enumerate().map(|(i, s)| (s.id.as_str(), i)).collect();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        for d in &s.deps {
            let Some(&j) = index.get(d.as_str()) else { continue };
            let s_del = s.action == Action::Delete;
            let d_del = steps[j].action == Action::Delete;
            match (s_del, d_del) {
                (false, false) => out.push((j, i)),
                (true, true) => out.push((i, j)),
                // A kept object never depends on one being deleted; a deleted dependent of a
                // kept dependency needs no order.
                _ => {}
            }
        }
        // A delete that must wait for what replaces it (`Node::delete_after`), and a write that
        // must wait for deletes (`Node::after_deletes`).
        let waits_for: Vec<&String> =
            if s.action == Action::Delete { s.node.delete_after.iter().collect() } else { s.node.after_deletes.iter().collect() };
        for a in waits_for {
            if let Some(&j) = index.get(a.as_str())
                && (steps[j].action == Action::Delete) != (s.action == Action::Delete)
            {
                out.push((j, i));
            }
        }
    }
    let mut g: DiGraph<(), ()> = DiGraph::new();
    let nodes: Vec<NodeIndex> = steps.iter().map(|_| g.add_node(())).collect();
    for &(a, b) in &out {
        g.add_edge(nodes[a], nodes[b], ());
    }
    if let Err(cycle) = petgraph::algo::toposort(&g, None) {
        bail!("dependency cycle in the plan at {}", steps[cycle.node_id().index()].id);
    }
    Ok(out)
}

/// Execute `steps` with at most `concurrency` in flight. `run` performs one step. Once `stop`
/// says `Stopping`, no step starts and a step that ends with its stop (`interrupt::is_stopped`) is
/// `Cancelled`, not failed; `Abandon` drops the steps in flight (`Cancelled` too).
pub async fn execute<F, Fut>(
    steps: &[Step],
    concurrency: usize,
    mut stop: watch::Receiver<Stop>,
    reporter: Arc<dyn Reporter>,
    run: F,
) -> Result<BTreeMap<String, Outcome>>
where
    F: Fn(Step) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let concurrency = concurrency.max(1);
    let edges = edges(steps)?;
    let n = steps.len();
    let mut indegree = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in &edges {
        indegree[b] += 1;
        dependents[a].push(b);
    }
    // Ready steps start longest remaining chain first (the critical path is never kept waiting
    // behind short independent steps), then slowest kind first (`resources::read_rank`: EKS,
    // whose creates wait for IAM to propagate a new role, before IAM, before the rest), so that
    // a full set of slots never holds back the step the run waits longest for; then by id:
    // deterministic.
    let height = chain_lengths(n, &dependents);
    let key = |i: usize| (std::cmp::Reverse(height[i]), crate::resources::read_rank(steps[i].kind), steps[i].id.clone(), i);
    let mut ready: BTreeSet<(std::cmp::Reverse<usize>, u8, String, usize)> =
        (0..n).filter(|&i| indegree[i] == 0).map(key).collect();
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut running: HashMap<tokio::task::Id, (usize, Instant, u64)> = HashMap::new();
    let mut set: JoinSet<Result<()>> = JoinSet::new();
    let mut level = *stop.borrow();
    let mut watching = true;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

    loop {
        while level == Stop::Running && running.len() < concurrency {
            let Some(first) = ready.iter().next().cloned() else { break };
            ready.remove(&first);
            let i = first.3;
            reporter.event(Event::Started { step: &steps[i] });
            let fut = run(steps[i].clone());
            let handle = set.spawn(fut);
            running.insert(handle.id(), (i, Instant::now(), 0));
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = set.join_next_with_id() => {
                let Some(joined) = joined else { break };
                let (id, result) = match joined {
                    Ok((id, r)) => (id, r),
                    Err(e) if e.is_cancelled() => (e.id(), Err(anyhow::Error::new(crate::interrupt::Stopped))),
                    Err(e) => (e.id(), Err(anyhow::anyhow!("step panicked: {e}"))),
                };
                let Some((i, started, _)) = running.remove(&id) else { continue };
                let elapsed = started.elapsed();
                match result {
                    Err(e) if crate::interrupt::is_stopped(&e) => {
                        reporter.event(Event::Stopped { step: &steps[i], elapsed });
                        outcomes.insert(steps[i].id.clone(), Outcome::Cancelled);
                    }
                    Ok(()) => {
                        reporter.event(Event::Finished { step: &steps[i], elapsed });
                        outcomes.insert(steps[i].id.clone(), Outcome::Done);
                        for &d in &dependents[i] {
                            indegree[d] -= 1;
                            if indegree[d] == 0 && !outcomes.contains_key(&steps[d].id) {
                                ready.insert(key(d));
                            }
                        }
                    }
                    Err(e) => {
                        let msg = format!("{e:#}");
                        reporter.event(Event::Failed { step: &steps[i], error: &msg, elapsed });
                        outcomes.insert(steps[i].id.clone(), Outcome::Failed(msg));
                        skip_dependents(i, steps, &dependents, &mut outcomes, reporter.as_ref());
                    }
                }
            }
            changed = stop.changed(), if watching && level < Stop::Abandon => {
                if changed.is_err() {
                    // No one can ask to stop any more.
                    watching = false;
                    continue;
                }
                let now = *stop.borrow();
                if now >= Stop::Stopping && level == Stop::Running {
                    reporter.event(Event::Cancelling { in_flight: running.len() });
                }
                if now == Stop::Abandon {
                    // Left as a crash leaves them: the next run repairs what they did.
                    set.abort_all();
                }
                level = level.max(now);
            }
            _ = tick.tick() => {
                for (i, started, reported) in running.values_mut() {
                    let secs = started.elapsed().as_secs();
                    let mark = secs / 10;
                    if mark > *reported {
                        *reported = mark;
                        reporter.event(Event::Still { step: &steps[*i], elapsed: started.elapsed() });
                    }
                }
            }
        }
    }
    for s in steps {
        outcomes.entry(s.id.clone()).or_insert(Outcome::Cancelled);
    }
    Ok(outcomes)
}

/// For each step, the number of steps on the longest chain that starts at it.
fn chain_lengths(n: usize, dependents: &[Vec<usize>]) -> Vec<usize> {
    fn visit(i: usize, dependents: &[Vec<usize>], memo: &mut Vec<Option<usize>>) -> usize {
        if let Some(h) = memo[i] {
            return h;
        }
        let h = 1 + dependents[i].iter().map(|&d| visit(d, dependents, memo)).max().unwrap_or(0);
        memo[i] = Some(h);
        h
    }
    let mut memo = vec![None; n];
    (0..n).map(|i| visit(i, dependents, &mut memo)).collect()
}

/// Mark every transitive dependent of a failed step as skipped. (Dependents are never in the
/// ready set: their in-degree includes the failed step.)
fn skip_dependents(
    failed: usize,
    steps: &[Step],
    dependents: &[Vec<usize>],
    outcomes: &mut BTreeMap<String, Outcome>,
    reporter: &dyn Reporter,
) {
    let mut stack = vec![failed];
    while let Some(i) = stack.pop() {
        for &d in &dependents[i] {
            if outcomes.contains_key(&steps[d].id) {
                continue;
            }
            let because = format!("{} did not complete", steps[i].id);
            reporter.event(Event::Skipped { step: &steps[d], because: &because });
            outcomes.insert(steps[d].id.clone(), Outcome::Skipped(because));
            stack.push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, Node};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Quiet;
    impl Reporter for Quiet {
        fn event(&self, _: Event<'_>) {}
    }

    fn step(id: &str, action: Action, deps: &[&str]) -> Step {
        let node = Node::new(id, id, crate::model::NodeSpec::for_tests(Kind::Queue)).with_deps(deps.iter().copied());
        Step {
            id: id.into(),
            kind: Kind::Queue,
            name: id.into(),
            action,
            changes: vec![],
            deps: node.deps.clone(),
            node,
            observed: None,
            removed_with: None,
        }
    }

    fn no_cancel() -> watch::Receiver<Stop> {
        watch::channel(Stop::Running).1
    }

    type Log = Arc<Mutex<Vec<String>>>;

    async fn run_with(
        steps: Vec<Step>,
        conc: usize,
        fail: &'static [&'static str],
        delay_ms: u64,
    ) -> (BTreeMap<String, Outcome>, Vec<String>, usize) {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let active = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let out = execute(&steps, conc, no_cancel(), Arc::new(Quiet), |s: Step| {
            let log = log.clone();
            let active = active.clone();
            let peak = peak.clone();
            async move {
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                log.lock().unwrap().push(format!("start {}", s.id));
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                log.lock().unwrap().push(format!("end {}", s.id));
                active.fetch_sub(1, Ordering::SeqCst);
                if fail.contains(&s.id.as_str()) {
                    anyhow::bail!("boom")
                }
                Ok(())
            }
        })
        .await
        .unwrap();
        let log = log.lock().unwrap().clone();
        (out, log, peak.load(Ordering::SeqCst))
    }

    fn pos(log: &[String], what: &str) -> usize {
        log.iter().position(|l| l == what).unwrap_or_else(|| panic!("{what} not in {log:?}"))
    }

    #[tokio::test]
    async fn dependencies_finish_before_dependents_start() {
        let steps = vec![
            step("queue", Action::Create, &[]),
            step("policy", Action::Create, &["queue"]),
            step("rule", Action::Create, &["queue"]),
        ];
        let (out, log, _) = run_with(steps, 10, &[], 5).await;
        assert!(out.values().all(|o| *o == Outcome::Done));
        assert!(pos(&log, "end queue") < pos(&log, "start policy"));
        assert!(pos(&log, "end queue") < pos(&log, "start rule"));
    }

    #[tokio::test]
    async fn deletes_run_in_reverse_dependency_order() {
        let steps = vec![step("queue", Action::Delete, &[]), step("rule", Action::Delete, &["queue"])];
        let (_, log, _) = run_with(steps, 10, &[], 5).await;
        assert!(pos(&log, "end rule") < pos(&log, "start queue"));
    }

    #[tokio::test]
    async fn a_delete_waits_for_what_replaces_it() {
        let mut old = step("rule-old", Action::Delete, &[]);
        old.node.delete_after = vec!["rule-new".into()];
        let steps = vec![old, step("rule-new", Action::Create, &[])];
        let (_, log, _) = run_with(steps, 10, &[], 5).await;
        assert!(pos(&log, "end rule-new") < pos(&log, "start rule-old"), "{log:?}");
    }

    #[tokio::test]
    async fn a_write_waits_for_the_deletes_it_names() {
        // The queue policy drops the old rules' names only once they are gone; a delete named
        // by a write that is itself a delete, or a write named, sets no order.
        let mut policy = step("policy", Action::Update, &[]);
        policy.node.after_deletes = vec!["rule-old".into(), "rule-new".into()];
        let steps = vec![policy, step("rule-old", Action::Delete, &[]), step("rule-new", Action::Create, &[])];
        assert_eq!(edges(&steps).unwrap(), [(1, 0)]);
        let (_, log, _) = run_with(steps, 10, &[], 5).await;
        assert!(pos(&log, "end rule-old") < pos(&log, "start policy"), "{log:?}");
    }

    #[tokio::test]
    async fn a_step_starts_when_its_own_dependencies_finish_not_in_waves() {
        // a(slow) and b(fast) are independent; c depends on b only: c must start before a ends.
        let steps = vec![step("a", Action::Create, &[]), step("b", Action::Create, &[]), step("c", Action::Create, &["b"])];
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        execute(&steps, 10, no_cancel(), Arc::new(Quiet), |s: Step| {
            let log = log.clone();
            async move {
                let ms = if s.id == "a" { 200 } else { 5 };
                log.lock().unwrap().push(format!("start {}", s.id));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                log.lock().unwrap().push(format!("end {}", s.id));
                Ok(())
            }
        })
        .await
        .unwrap();
        let log = log.lock().unwrap().clone();
        assert!(pos(&log, "start c") < pos(&log, "end a"), "{log:?}");
    }

    #[tokio::test]
    async fn the_longest_chain_starts_first() {
        // One slot: "z-head" heads a chain of two, so it goes before "a" and "b" despite its id.
        let steps = vec![
            step("a", Action::Create, &[]),
            step("b", Action::Create, &[]),
            step("z-head", Action::Create, &[]),
            step("z-tail", Action::Create, &["z-head"]),
        ];
        let (_, log, _) = run_with(steps, 1, &[], 1).await;
        assert_eq!(log[0], "start z-head", "{log:?}");
    }

    #[tokio::test]
    async fn among_equal_chains_the_slowest_kind_starts_first() {
        // One slot, three steps with no dependents: the Pod Identity association (EKS, which
        // waits for IAM to propagate its role) goes before the queue and the rule despite its id.
        let mut eks = step("z-pod-identity", Action::Create, &[]);
        eks.kind = Kind::PodIdentity;
        let mut rule = step("b-rule", Action::Create, &[]);
        rule.kind = Kind::EventRule;
        let steps = vec![step("a-queue", Action::Create, &[]), rule, eks];
        let (_, log, _) = run_with(steps, 1, &[], 1).await;
        let starts: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("start ")).collect();
        assert_eq!(starts, ["z-pod-identity", "a-queue", "b-rule"], "{log:?}");
    }

    #[tokio::test]
    async fn concurrency_is_bounded() {
        let steps: Vec<Step> = (0..12).map(|i| step(&format!("s{i:02}"), Action::Create, &[])).collect();
        let (_, _, peak) = run_with(steps.clone(), 3, &[], 20).await;
        assert_eq!(peak, 3);
        let (_, _, peak) = run_with(steps, 1, &[], 2).await;
        assert_eq!(peak, 1);
    }

    #[tokio::test]
    async fn failure_skips_only_dependents() {
        let steps = vec![
            step("queue", Action::Create, &[]),
            step("policy", Action::Create, &["queue"]),
            step("rule", Action::Create, &["policy"]),
            step("role", Action::Create, &[]),
        ];
        let (out, log, _) = run_with(steps, 10, &["queue"], 1).await;
        assert!(matches!(out["queue"], Outcome::Failed(_)));
        assert!(matches!(out["policy"], Outcome::Skipped(_)));
        assert!(matches!(out["rule"], Outcome::Skipped(_)));
        assert_eq!(out["role"], Outcome::Done);
        assert!(!log.iter().any(|l| l == "start policy"));
    }

    #[tokio::test]
    async fn cancellation_stops_scheduling_and_lets_in_flight_finish() {
        let steps = vec![step("a", Action::Create, &[]), step("b", Action::Create, &["a"])];
        let (tx, rx) = watch::channel(Stop::Running);
        let tx = Arc::new(tx);
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let out = execute(&steps, 10, rx, Arc::new(Quiet), |s: Step| {
            let log = log.clone();
            let tx = tx.clone();
            async move {
                log.lock().unwrap().push(format!("start {}", s.id));
                tx.send(Stop::Stopping).unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
                log.lock().unwrap().push(format!("end {}", s.id));
                Ok(())
            }
        })
        .await
        .unwrap();
        assert_eq!(out["a"], Outcome::Done, "in-flight step finished");
        assert_eq!(out["b"], Outcome::Cancelled);
        assert_eq!(log.lock().unwrap().clone(), vec!["start a", "end a"]);
    }

    #[tokio::test]
    async fn a_step_the_stop_cut_short_is_cancelled_and_a_second_stop_abandons_the_rest() {
        // a: stopped part-way (its retry was cut short); b: failed on its own; c: still running at
        // the second Ctrl-C, abandoned; d: never started.
        let steps = vec![
            step("a", Action::Create, &[]),
            step("b", Action::Create, &[]),
            step("c", Action::Create, &[]),
            step("d", Action::Create, &["a"]),
        ];
        let (tx, rx) = watch::channel(Stop::Running);
        let tx = Arc::new(tx);
        let started = std::time::Instant::now();
        let out = execute(&steps, 10, rx, Arc::new(Quiet), |s: Step| {
            let tx = tx.clone();
            crate::interrupt::watched(async move {
                match s.id.as_str() {
                    "a" => {
                        tx.send(Stop::Stopping).unwrap();
                        crate::interrupt::reached();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        anyhow::bail!("Throttling: Rate exceeded")
                    }
                    "b" => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        anyhow::bail!("AccessDenied")
                    }
                    _ => {
                        tokio::time::sleep(Duration::from_millis(60)).await;
                        tx.send(Stop::Abandon).unwrap();
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Ok(())
                    }
                }
            })
        })
        .await
        .unwrap();
        assert_eq!(out["a"], Outcome::Cancelled, "stopped, not failed");
        assert!(matches!(out["b"], Outcome::Failed(_)), "a failure of its own stays one: {out:?}");
        assert_eq!(out["c"], Outcome::Cancelled, "abandoned at the second stop");
        assert_eq!(out["d"], Outcome::Cancelled, "never started");
        assert!(started.elapsed() < Duration::from_secs(5), "the abandoned step was not waited for");
    }

    #[test]
    fn cycles_are_rejected() {
        let steps = vec![step("a", Action::Create, &["b"]), step("b", Action::Create, &["a"])];
        assert!(edges(&steps).is_err());
    }
}
