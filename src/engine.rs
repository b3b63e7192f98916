//! The commands: load and validate the plan, preflight, observe, plan, and (for up/down) execute.

use crate::aws::{Classify, self, CallStats, Clients, ConnectOptions, ConsistencyPolicy};
use crate::cli::{Global, Output};
use crate::desired;
use crate::facts::{ClusterFacts, Command, Facts};
use crate::executor;
use crate::model::Outcome;
use crate::model::{Kind, Node, Observed, Plan};
use crate::plan_file::{self, Spec, UserError};
use crate::planner::{self, PlanOptions};
use crate::report::{Event, Progress, Reporter, Silent, Style};
use crate::resources::{self, Ctx};
use anyhow::{Context, Result};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tokio::sync::watch;

pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_CHANGES: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

static CANCEL: std::sync::OnceLock<watch::Sender<bool>> = std::sync::OnceLock::new();
static APPLYING: AtomicBool = AtomicBool::new(false);

/// Ctrl-C before any write ends the run at once (exit 130, nothing changed); during `up`/`down`
/// it stops scheduling new steps and lets in-flight ones finish; a second Ctrl-C leaves at once.
pub fn install_interrupt_handler() {
    let (tx, _rx) = watch::channel(false);
    if CANCEL.set(tx).is_err() {
        return;
    }
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        if !APPLYING.load(Ordering::SeqCst) {
            eprintln!("Interrupted before any change; nothing was written.");
            std::process::exit(EXIT_INTERRUPTED);
        }
        if let Some(tx) = CANCEL.get() {
            let _ = tx.send(true);
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(EXIT_INTERRUPTED);
        }
    });
}

/// Everything prepared before the first write: a validated plan, clients, preflight facts.
pub struct Prepared {
    pub spec: Spec,
    pub facts: Facts,
    pub ctx: Arc<Ctx>,
    pub stats: Arc<CallStats>,
    pub global: Global,
    /// `up` installs the eks-pod-identity-agent add-on first (create_pod_identity_agent = true).
    pub install_agent: bool,
    pub cmd: Command,
    ahead: std::sync::Mutex<Option<ReadAhead>>,
}

impl Prepared {
    pub fn info(&self, msg: &str) {
        self.ctx.reporter.event(Event::Info(msg));
    }

    /// The nodes this command works on (see `nodes_for`).
    pub fn nodes(&self) -> Vec<Node> {
        nodes_for(&self.spec, &self.facts, self.cmd)
    }

    /// Read these nodes and discover unlisted owned objects (see `observe`), using the reads
    /// made ahead during preflight.
    pub async fn observe(&self, nodes: Vec<Node>) -> Result<Vec<(Node, Option<Observed>)>> {
        let concurrency = self.global.concurrency as usize;
        let ahead = self.ahead.lock().unwrap().take();
        match ahead {
            Some(a) => match a.finish().await {
                Some(reads) => observe_after(&self.ctx, nodes, concurrency, reads).await,
                None => observe(&self.ctx, nodes, concurrency).await,
            },
            None => observe(&self.ctx, nodes, concurrency).await,
        }
    }
}

fn reporter_for(global: &Global) -> Arc<dyn Reporter> {
    if global.quiet {
        Arc::new(Silent)
    } else {
        let tty = std::io::stderr().is_terminal();
        Arc::new(Progress::new(tty, Style::detect(tty)))
    }
}

async fn resolve_region(global: &Global, spec: &Spec) -> Result<String, UserError> {
    let region = match (&global.region, &spec.region) {
        (Some(f), Some(p)) if f != p => {
            return Err(UserError::new(format!("--region {f} disagrees with the plan's `region = \"{p}\"`"))
                .hint("drop --region, or fix `region` in the plan file"));
        }
        (Some(f), _) => Some(f.clone()),
        (None, Some(p)) => Some(p.clone()),
        (None, None) => {
            let mut chain = aws_config::default_provider::region::DefaultRegionChain::builder();
            if let Some(p) = &global.profile {
                chain = chain.profile_name(p);
            }
            chain.build().region().await.map(|r| r.to_string())
        }
    };
    let Some(region) = region else {
        return Err(UserError::new("no AWS region given").hint("set `region` in the plan, pass --region, or set AWS_REGION"));
    };
    plan_file::validate_region(&region)
        .map_err(|e| UserError::new(format!("--region: {e}")).hint("use a region name such as us-east-1"))?;
    Ok(region)
}

/// Load the plan, connect, and run preflight checks. Makes only read calls.
///
/// `read_ahead`: the command goes on to observe the plan's nodes (`diff`, `up`, `down`), so their
/// reads start as soon as the account is known, while EKS still describes the cluster (see
/// `ReadAhead`); `Prepared::observe` then uses them.
pub async fn prepare(global: &Global, cmd: Command, read_ahead: bool) -> Result<Prepared> {
    let spec = plan_file::load(global.plan.as_deref(), global.cluster.as_deref(), Path::new("plans"))?;
    let region = resolve_region(global, &spec).await?;
    let stats = aws::STATS.get_or_init(|| Arc::new(CallStats::default())).clone();
    let concurrency = global.concurrency as usize;
    let clients = aws::connect(
        &ConnectOptions {
            region: region.clone(),
            profile: global.profile.clone(),
            endpoint_url: global.endpoint_url.clone(),
            max_attempts: 8,
            max_in_flight: concurrency,
        },
        stats.clone(),
    )
    .await;
    let reporter = reporter_for(global);
    let partition = aws::partition(&region).to_string();
    // STS and DescribeCluster together; once STS has answered (the account pin checked), the
    // Pod Identity add-on check and the plan's own reads start too, alongside DescribeCluster.
    let early = async {
        let account_id = caller_account(&clients).await?;
        reporter.event(Event::Info(&format!(
            "Account {account_id}, region {region}, cluster {}{}",
            spec.cluster,
            spec.source.as_ref().map(|p| format!(", plan {}", p.display())).unwrap_or_else(|| ", plan: defaults".into())
        )));
        if let Some(pin) = &spec.account_id {
            if pin != &account_id {
                return Err(UserError::new(format!(
                    "the plan is pinned to account {pin} (`account_id`), but the credentials are for account {account_id}"
                ))
                .hint("use credentials (or --profile) for the pinned account, or fix `account_id` in the plan")
                .into());
            }
        }
        let ctx = Arc::new(Ctx {
            aws: clients.clone(),
            cluster: spec.cluster.clone(),
            region: region.clone(),
            account_id: account_id.clone(),
            partition: partition.clone(),
            reporter: reporter.clone(),
            consistency: ConsistencyPolicy::default(),
            queue_urls: Default::default(),
            queue_attrs: Default::default(),
            queue_tags: Default::default(),
            any: Default::default(),
        });
        let early_checks = crate::preflight::start_early_checks(&ctx, &spec, cmd);
        let ahead = read_ahead.then(|| {
            let facts = Facts {
                account_id,
                region: region.clone(),
                partition: partition.clone(),
                cluster: ClusterFacts { name: spec.cluster.clone(), ..Default::default() },
                ..Default::default()
            };
            ReadAhead::start(ctx.clone(), nodes_for(&spec, &facts, cmd), concurrency)
        });
        Ok::<_, anyhow::Error>((ctx, ahead, early_checks))
    };
    let (early, cluster) = tokio::join!(early, describe_cluster(&clients, &spec.cluster, &region));
    let (ctx, ahead, early_checks) = early?;
    let cluster = cluster?;
    if cluster.status != "ACTIVE" {
        return Err(UserError::new(format!("EKS cluster {} is {}, not ACTIVE", spec.cluster, cluster.status))
            .hint("wait until the cluster is ACTIVE, then run karpctl again")
            .into());
    }
    let mut facts = Facts {
        account_id: ctx.account_id.clone(),
        region,
        partition,
        cluster,
        discovery: Default::default(),
        existing_node_role_arn: None,
    };
    desired::validate(&desired::build(&spec, &facts))?;
    let install_agent = crate::preflight::check(&ctx, &spec, &facts, cmd).await?;
    drop(early_checks);
    if let Some(existing) = &spec.identity.existing_node_role {
        // Read (memoised) by preflight; a name may hide a path, so use the live ARN.
        let name = existing.rsplit('/').next().unwrap_or(existing);
        facts.existing_node_role_arn = resources::iam_role::get_role(&ctx, name).await?.map(|r| r.arn);
    }
    facts.discovery = crate::discovery::select(&ctx, &spec, &facts, cmd).await?;
    Ok(Prepared {
        spec,
        facts,
        ctx,
        stats,
        global: global.clone(),
        install_agent,
        cmd,
        ahead: std::sync::Mutex::new(ahead),
    })
}

/// The nodes a command works on: the desired graph; for `down`, every node unwanted.
pub fn nodes_for(spec: &Spec, facts: &Facts, cmd: Command) -> Vec<Node> {
    let mut nodes = desired::build(spec, facts);
    if cmd == Command::Down {
        for n in &mut nodes {
            n.fields = None;
        }
    }
    nodes
}

/// Reads started before preflight is done, as soon as the account is known: the reads of every
/// node that does not depend on the cluster's facts (all but the discovery tags, which need the
/// selected subnets), built from the plan and the account alone, and the discovery of objects
/// the plan no longer names. Reads take only a node's kind, name and spec; `observe` uses a read
/// ahead only for a node that turned out the same once the cluster's facts were in (it differs,
/// for example, for an IPv6 cluster's node policies or an existing node role with a path), and
/// the discovery only when every node did. A read that failed here fails the observation, as it
/// would have there (after the SDK's own retries; it is not made twice), once preflight has
/// passed. Dropping it (preflight failed) cancels what is still in flight.
pub struct ReadAhead(resources::Background<AheadReads>);

pub struct AheadReads {
    nodes: Vec<Node>,
    reads: Vec<(Node, Result<Option<Observed>>)>,
    found: Result<Vec<(Node, Option<Observed>)>>,
}

impl ReadAhead {
    pub fn start(ctx: Arc<Ctx>, nodes: Vec<Node>, concurrency: usize) -> ReadAhead {
        ReadAhead(resources::Background::spawn(async move {
            let nodes: Vec<Node> = nodes.into_iter().filter(|n| n.kind != Kind::DiscoveryTags).collect();
            let mut order = nodes.clone();
            order.sort_by_key(|n| resources::read_rank(n.kind));
            let reads = futures::stream::iter(order)
                .map(|n| {
                    let ctx = ctx.clone();
                    async move {
                        let o = read_node(&ctx, &n).await;
                        (n, o)
                    }
                })
                .buffer_unordered(concurrency.max(1))
                .collect::<Vec<_>>();
            let found = observe_unlisted(&ctx, &nodes, concurrency);
            let (reads, found) = tokio::join!(reads, found);
            AheadReads { nodes, reads, found }
        }))
    }

    async fn finish(self) -> Option<AheadReads> {
        self.0.join().await
    }
}

fn credentials_hint() -> &'static str {
    "check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or --profile) and that the endpoint is reachable (--endpoint-url / AWS_ENDPOINT_URL)"
}

async fn caller_account(clients: &Clients) -> Result<String> {
    match clients.sts.get_caller_identity().send().await {
        Ok(o) => Ok(o.account().unwrap_or_default().to_string()),
        Err(e) => {
            let what = match (e.code(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_string(),
                _ => format!("{}", aws_smithy_types::error::display::DisplayErrorContext(&e)),
            };
            Err(UserError::new(format!("cannot identify the AWS account (sts:GetCallerIdentity): {what}"))
                .hint(credentials_hint())
                .into())
        }
    }
}

async fn describe_cluster(clients: &Clients, name: &str, region: &str) -> Result<ClusterFacts> {
    let o = match clients.eks.describe_cluster().name(name).send().await {
        Ok(o) => o,
        Err(e) if e.is_not_found() => {
            return Err(UserError::new(format!("EKS cluster {name} does not exist in region {region}"))
                .hint("check --cluster and --region (or the plan's `cluster` and `region`)")
                .into());
        }
        Err(e) => {
            return Err(anyhow::Error::new(UserError::new(format!(
                "cannot describe EKS cluster {name}: {}",
                aws_smithy_types::error::display::DisplayErrorContext(&e)
            ))
            .hint(credentials_hint())));
        }
    };
    let c = o.cluster().context("eks:DescribeCluster returned no cluster")?;
    let vpc = c.resources_vpc_config();
    Ok(ClusterFacts {
        name: name.to_string(),
        arn: c.arn().unwrap_or_default().to_string(),
        status: c.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
        version: c.version().unwrap_or_default().to_string(),
        vpc_id: vpc.and_then(|v| v.vpc_id()).unwrap_or_default().to_string(),
        subnet_ids: vpc.map(|v| v.subnet_ids().to_vec()).unwrap_or_default(),
        cluster_security_group_id: vpc.and_then(|v| v.cluster_security_group_id()).unwrap_or_default().to_string(),
        authentication_mode: c
            .access_config()
            .and_then(|a| a.authentication_mode())
            .map(|m| m.as_str().to_string())
            .unwrap_or_else(|| "CONFIG_MAP".into()),
        oidc_issuer: c.identity().and_then(|i| i.oidc()).and_then(|o| o.issuer()).unwrap_or_default().to_string(),
        ip_family: c
            .kubernetes_network_config()
            .and_then(|k| k.ip_family())
            .map(|f| f.as_str().to_string())
            .unwrap_or_else(|| "ipv4".into()),
    })
}

/// Read every node (and discover unlisted owned objects) with at most `concurrency` reads in flight.
/// The scoped discovery lists run at the same time as the reads of the known nodes; only the
/// objects they find wait for them.
pub async fn observe(ctx: &Arc<Ctx>, nodes: Vec<Node>, concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    let known = observe_nodes(ctx, nodes.clone(), concurrency);
    let found = observe_unlisted(ctx, &nodes, concurrency);
    let (mut known, found) = tokio::try_join!(known, found)?;
    known.extend(found);
    Ok(known)
}

/// The owned objects the plan no longer names (see `resources::discover`), read.
async fn observe_unlisted(ctx: &Arc<Ctx>, nodes: &[Node], concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    let discovered = resources::discover(ctx, nodes).await?;
    observe_nodes(ctx, discovered, concurrency).await
}

/// `observe`, using what was read ahead: a node read ahead with the same kind, name and spec
/// keeps that read; the others are read now; the discovery read ahead is used when the read-ahead
/// saw exactly these nodes.
async fn observe_after(
    ctx: &Arc<Ctx>,
    nodes: Vec<Node>,
    concurrency: usize,
    ahead: AheadReads,
) -> Result<Vec<(Node, Option<Observed>)>> {
    let mut early: std::collections::HashMap<String, (Node, Result<Option<Observed>>)> =
        ahead.reads.into_iter().map(|(n, o)| (n.id.clone(), (n, o))).collect();
    let mut done: Vec<Option<Option<Observed>>> = Vec::with_capacity(nodes.len());
    let mut missing: Vec<Node> = Vec::new();
    for n in &nodes {
        match early.remove(&n.id) {
            Some((a, o)) if a.kind == n.kind && a.name == n.name && a.spec == n.spec => done.push(Some(o?)),
            _ => {
                done.push(None);
                missing.push(n.clone());
            }
        }
    }
    let planned: Vec<&Node> = nodes.iter().filter(|n| n.kind != Kind::DiscoveryTags).collect();
    let same_nodes = planned.len() == ahead.nodes.len() && planned.iter().zip(&ahead.nodes).all(|(a, b)| *a == b);
    let fresh = observe_nodes(ctx, missing, concurrency);
    let found = async {
        match same_nodes {
            true => ahead.found,
            false => observe_unlisted(ctx, &nodes, concurrency).await,
        }
    };
    let (fresh, found) = tokio::try_join!(fresh, found)?;
    let mut fresh = fresh.into_iter().map(|(_, o)| o);
    let mut out: Vec<(Node, Option<Observed>)> = nodes
        .into_iter()
        .zip(done)
        .map(|(n, d)| {
            let o = match d {
                Some(o) => o,
                None => fresh.next().expect("one fresh read per node not read ahead"),
            };
            (n, o)
        })
        .collect();
    out.extend(found);
    Ok(out)
}

/// One node's read, its error naming the node.
async fn read_node(ctx: &Ctx, n: &Node) -> Result<Option<Observed>> {
    resources::read(ctx, n).await.with_context(|| format!("reading {} {} ({})", n.kind.label(), n.name, n.id))
}

/// Read exactly these nodes, in order.
pub async fn observe_nodes(ctx: &Arc<Ctx>, all: Vec<Node>, concurrency: usize) -> Result<Vec<(Node, Option<Observed>)>> {
    // Slowest kinds first (see `read_rank`); unordered, so a finished read frees its slot at
    // once; the order is restored after.
    let mut all: Vec<(usize, Node)> = all.into_iter().enumerate().collect();
    all.sort_by_key(|(i, n)| (resources::read_rank(n.kind), *i));
    let results: Vec<Result<(usize, Node, Option<Observed>)>> = futures::stream::iter(all)
        .map(|(i, n)| {
            let ctx = ctx.clone();
            async move {
                let o = read_node(&ctx, &n).await?;
                Ok((i, n, o))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut done = results.into_iter().collect::<Result<Vec<_>>>()?;
    done.sort_by_key(|(i, _, _)| *i);
    Ok(done.into_iter().map(|(_, n, o)| (n, o)).collect())
}

pub fn stats_json(p: &Prepared) -> Value {
    serde_json::to_value(p.stats.report()).unwrap_or(Value::Null)
}

fn print_stats(p: &Prepared) {
    if !p.global.stats || p.global.output == Output::Json {
        return;
    }
    print_stats_report(&p.stats.report());
}

/// The `--stats` table on stderr.
pub fn print_stats_report(r: &aws::StatsReport) {
    eprintln!("AWS calls: {} ({} reads, {} writes), {} retries", r.calls, r.reads, r.writes, r.retries);
    for (op, c) in &r.operations {
        let retries = c.attempts.saturating_sub(c.calls);
        eprintln!("  {op:<45} {:>4}{}", c.calls, if retries > 0 { format!("  ({retries} retries)") } else { String::new() });
    }
}

fn plan_json(command: &str, p: &Prepared, plan: &Plan, results: Option<&BTreeMap<String, Outcome>>) -> Value {
    crate::report::plan_json(command, &p.spec.cluster, &p.facts.account_id, &p.facts.region, plan, results, stats_json(p))
}

fn print_plan(p: &Prepared, plan: &Plan) {
    if p.global.output == Output::Human {
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

const SAVED_PLAN_VERSION: u32 = 1;

pub async fn diff(global: &Global, adopt: bool, out: Option<&Path>) -> Result<i32> {
    let p = prepare(global, Command::Diff, true).await?;
    let observed = p.observe(p.nodes()).await?;
    let mut plan = planner::plan(observed.clone(), PlanOptions { adopt });
    plan.findings.extend(p.facts.discovery.findings.iter().cloned());
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
        p.info(&format!("Saved the plan to {}; apply exactly it with `karpctl up --plan-file {}`", path.display(), path.display()));
    }
    print_plan(&p, &plan);
    print_stats(&p);
    if !plan.conflicts.is_empty() {
        return Err(conflicts_error(&plan));
    }
    if global.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&plan_json("diff", &p, &plan, None))?);
    }
    Ok(if plan.steps.is_empty() { EXIT_OK } else { EXIT_CHANGES })
}

pub async fn up(global: &Global, adopt: bool) -> Result<i32> {
    let p = prepare(global, Command::Up, true).await?;
    let observed = p.observe(p.nodes()).await?;
    let mut plan = planner::plan(observed, PlanOptions { adopt });
    plan.findings.extend(p.facts.discovery.findings.iter().cloned());
    apply_plan("up", &p, plan).await
}

/// Apply a saved plan: only if it is for this cluster, account and region, and every object it
/// was computed from still reads the same.
pub async fn up_saved(global: &Global, file: &Path) -> Result<i32> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| UserError::new(format!("cannot read saved plan {}: {e}", file.display())).hint("check the --plan-file path"))?;
    let saved: SavedPlan = serde_json::from_str(&text).map_err(|e| {
        UserError::new(format!("{} is not a karpctl saved plan: {e}", file.display())).hint("save one with `karpctl diff --out FILE`")
    })?;
    if saved.format_version != SAVED_PLAN_VERSION {
        return Err(UserError::new(format!("saved plan format {} is not supported (expected {SAVED_PLAN_VERSION})", saved.format_version))
            .hint("save the plan again with this karpctl version")
            .into());
    }
    if let Some(c) = &global.cluster {
        if c != &saved.cluster {
            return Err(UserError::new(format!("the saved plan is for cluster {}, not {c}", saved.cluster))
                .hint("use the plan saved for this cluster")
                .into());
        }
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
        resources::discover(&p.ctx, &nodes)
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
        return Err(UserError::new(format!(
            "AWS changed since the plan was saved ({}); nothing was applied",
            all.join(", ")
        ))
        .hint("run `karpctl diff --out FILE` again and review the new plan")
        .into());
    }
    apply_plan("up", &p, saved.plan).await
}

pub async fn down(global: &Global, yes: bool) -> Result<i32> {
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
        print_plan(p, &plan);
        return Err(conflicts_error(&plan));
    }
    if p.install_agent {
        // The first write, once the plan has no conflicts (and a saved plan is not stale).
        APPLYING.store(true, Ordering::SeqCst);
        crate::preflight::create_agent(&p.ctx, &p.spec).await?;
    }
    if plan.steps.is_empty() {
        print_plan(p, &plan);
        if p.global.output == Output::Json {
            println!("{}", serde_json::to_string_pretty(&plan_json(command, p, &plan, Some(&BTreeMap::new())))?);
        }
        print_stats(p);
        return Ok(EXIT_OK);
    }
    print_plan(p, &plan);
    APPLYING.store(true, Ordering::SeqCst);
    let rx = match CANCEL.get() {
        Some(tx) => tx.subscribe(),
        None => watch::channel(false).1,
    };
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
    if p.global.output == Output::Json {
        // One document on stdout, with the error in it when a step failed.
        let mut doc = plan_json(command, p, &plan, Some(&results));
        if let Some(f) = &failure {
            doc["error"] = json!({"message": f.message, "causes": [], "hint": f.hint});
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
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
        eprintln!("Interrupted: {cancelled} step(s) not started. Run `karpctl {command}` again to finish; it picks up from what exists.");
        return Ok(EXIT_INTERRUPTED);
    }
    if let Some(f) = failure {
        if p.global.output == Output::Json {
            return Ok(EXIT_ERROR);
        }
        return Err(f.into());
    }
    Ok(EXIT_OK)
}

/// Render an error for the terminal or as JSON.
pub fn report_error(err: &anyhow::Error, output: Output, command: &str) {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    let hint = user.and_then(|u| u.hint.clone()).or_else(|| {
        (aws::kind_of(err) == aws::ErrorKind::AccessDenied).then(|| {
            "the credentials lack a permission: the message above names the action; grant it, or run with credentials that have it".to_string()
        })
    });
    let causes: Vec<String> = err.chain().skip(1).map(|e| e.to_string()).collect();
    if output == Output::Json {
        let stats = aws::STATS.get().map(|s| serde_json::to_value(s.report()).unwrap_or(Value::Null));
        let mut doc = json!({
            "format_version": 1,
            "command": command,
            "error": {"message": err.to_string(), "causes": causes, "hint": hint},
            "stats": stats,
        });
        if let Some(Value::Object(extra)) = user.and_then(|u| u.data.clone()) {
            for (k, v) in extra {
                doc["error"][k] = v;
            }
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return;
    }
    let style = Style::detect(std::io::stderr().is_terminal());
    eprintln!("{}: {err}", style.red("error"));
    for c in causes {
        eprintln!("  caused by: {c}");
    }
    if let Some(h) = hint {
        eprintln!("{}: {h}", style.bold("hint"));
    }
}
