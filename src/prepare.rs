//! Preparation, before any write: load and validate the plan, connect, identify the account,
//! describe the cluster and run preflight. Returns the facts (`Prepared`); starts the read-ahead.

use crate::aws::read::Readers;
use crate::aws::read::cloudtrail::READINESS;
use crate::aws::{self, CallStats, Classify, ConnectOptions, ConsistencyPolicy, in_unit};
use crate::ctx::Ctx;
use crate::desired;
use crate::error::UserError;
use crate::facts::finding::{Command, Outcome, PinSupport};
use crate::facts::observed::Running;
use crate::facts::prepared::{CLUSTER_NOT_FOUND, ClusterFacts, ClusterState, Facts, Intent};
use crate::facts::records::Trail;
use crate::model::Level;
use crate::model::{Node, Observed};
use crate::observe::{ReadAhead, observe, observe_after};
use crate::options::Options;
use crate::plan_file::{self};
use crate::report::{Event, Reporter, reporter_for};
use crate::resources;
use crate::spec::Spec;
use anyhow::{Context, Result};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::path::Path;
use std::sync::Arc;

/// Everything prepared before the first write: a validated plan, clients, preflight facts.
pub struct Prepared {
    pub spec: Spec,
    pub facts: Facts,
    pub ctx: Arc<Ctx>,
    pub stats: Arc<CallStats>,
    pub global: Options,
    /// What preflight found that `up` acts on first: the add-on to install, the Spot role.
    pub preflight: crate::gather::preflight::Preflight,
    pub cmd: Intent,
    pub(crate) ahead: std::sync::Mutex<Option<ReadAhead>>,
    /// Work `observe` started early for what comes after it (the bus's rule count), kept
    /// running until then (dropped with the `Prepared`).
    pub(crate) early: std::sync::Mutex<Option<crate::ctx::Background<()>>>,
    /// The Pod Identity association as `up` leaves it, from what `observe` read.
    pub(crate) association: std::sync::Mutex<crate::facts::observed::AssociationAsLeft>,
    /// CloudTrail's records of the running Karpenter, read in the background from the moment
    /// STS named the account (`up`, `diff`); joined by `observe` into `running`.
    pub(crate) trail: std::sync::Mutex<Option<crate::ctx::Background<Arc<Trail>>>>,
    /// What they show of the plan's controller and node roles (None: not read).
    pub(crate) running: std::sync::Mutex<Option<Running>>,
    /// The records, once joined (an identity switch joins them before the plan is made).
    pub(crate) joined_trail: std::sync::Mutex<Option<Arc<Trail>>>,
    /// Older Karpenter versions whose grants the plan keeps (an upgrade in flight, `upgrade`).
    pub(crate) upgrade_kept: std::sync::Mutex<Vec<crate::karpenter_iam::KarpenterVersion>>,
}

impl Prepared {
    pub fn info(&self, msg: &str) {
        self.ctx.reporter.event(Event::Info(msg));
    }

    /// What to tell the user with the plan besides the changes: discovery's notes.
    pub fn notes(&self) -> Vec<crate::model::Note> {
        let mut out = self.facts.discovery.notes.clone();
        out.extend(self.spec.interruption.rules_note.iter().map(|message| crate::model::Note {
            id: "plan-deprecated".into(),
            level: crate::model::Level::Info,
            message: message.clone(),
        }));
        out
    }

    /// The readiness checks on what this command makes (`up`, `diff`; none for `down`): can
    /// Karpenter work here? The catalog's runner over the setup as the plan leaves it.
    pub fn readiness(&self) -> Option<Outcome> {
        let command = match self.cmd {
            Intent::Up => Command::Up,
            Intent::Diff => Command::Diff,
            Intent::Down => return None,
        };
        let running = self.running.lock().unwrap().clone();
        let association = self.association.lock().unwrap().clone();
        let gathered = crate::gather::as_left::Gathered {
            preflight: &self.preflight,
            running: running.as_ref(),
            association: &association,
            today: self.ctx.settings.today,
        };
        Some(crate::checks::run(&crate::gather::as_left::setup(&self.facts, &self.spec, &gathered), command))
    }

    /// The pinned Karpenter version's support status today (`up`, `diff`).
    pub fn pin_support(&self) -> Option<PinSupport> {
        (self.cmd != Intent::Down)
            .then(|| crate::checks::running::pin_support(self.spec.identity.karpenter_version, self.ctx.settings.today))
    }

    /// The nodes this command works on (see `nodes_for`).
    pub fn nodes(&self) -> Vec<Node> {
        nodes_for(&self.spec, &self.facts, self.cmd)
    }

    /// Read these nodes and discover unlisted owned objects (see `observe`), using the reads
    /// made ahead during preflight.
    pub async fn observe(&self, nodes: Vec<Node>) -> Result<Vec<(Node, Option<Observed>)>> {
        self.stats.set_phase("observe");
        let concurrency = self.global.concurrency as usize;
        let ahead = self.ahead.lock().unwrap().take();
        let observed = match ahead {
            Some(a) => match a.finish().await {
                Some(reads) => {
                    if self.cmd != Intent::Down && reads.creates(crate::model::Kind::EventRule) {
                        // The plan creates a rule, so `quota_finding` counts the bus's rules:
                        // counted now, alongside the reads still in flight (the discovery tags'),
                        // rather than after them, between the plan and its first write.
                        let ctx = self.ctx.clone();
                        let count = crate::ctx::Background::spawn(in_unit("observe", async move {
                            let _ = resources::event_rule::bus_rule_count(&ctx).await;
                        }));
                        *self.early.lock().unwrap() = Some(count);
                    }
                    observe_after(&self.ctx, nodes, concurrency, reads).await
                }
                None => observe(&self.ctx, nodes, concurrency).await,
            },
            None => observe(&self.ctx, nodes, concurrency).await,
        }?;
        self.judge_observed(&observed);
        Ok(observed)
    }

    /// Keep what the readiness checks judge of what was observed (the Pod Identity association
    /// as `up` leaves it), for `Prepared::readiness`: `observe` does, and `up --plan-file` over
    /// its fresh reads.
    pub fn judge_observed(&self, observed: &[(Node, Option<Observed>)]) {
        *self.association.lock().unwrap() = resources::pod_identity::as_left(observed);
    }

    /// Wait for the CloudTrail read started in preparation and keep what it shows of the plan's
    /// roles for the readiness checks (the engine's report does, after the plan and its writes).
    pub async fn join_trail(&self) {
        if let Some(t) = self.trail_now().await {
            let (controller, nodes) = trail_roles(&self.spec, &self.facts);
            let mut running = Running::of(&t, &controller, &nodes);
            running.kept = self.upgrade_kept.lock().unwrap().clone();
            crate::gather::shared::read_quotas(&self.ctx.readers, &mut running).await;
            *self.running.lock().unwrap() = Some(running);
        }
    }

    /// The CloudTrail read started in preparation, waited for now and kept (None: not read).
    pub async fn trail_now(&self) -> Option<Arc<Trail>> {
        let pending = self.trail.lock().unwrap().take();
        if let Some(t) = pending {
            *self.joined_trail.lock().unwrap() = t.join().await;
        }
        self.joined_trail.lock().unwrap().clone()
    }
}

/// The roles whose CloudTrail records are the running Karpenter's: the plan's controller role,
/// and its node role (nodes call EC2 and ECR with it).
fn trail_roles(spec: &Spec, facts: &Facts) -> (Vec<String>, Vec<String>) {
    let node = crate::arns::node_role_arn(spec, facts);
    (vec![crate::arns::controller_role_arn(spec, facts)], [node].into_iter().filter(|n| !n.is_empty()).collect())
}

/// `karpenter_version = "running"`: the newest version CloudTrail shows the controller role
/// running, and the line saying so; none recorded (or the lookup refused): the error to stop
/// with, before any write.
fn follow_running(
    spec: &Spec,
    facts: &Facts,
    trail: &Trail,
) -> Result<(crate::karpenter_iam::KarpenterVersion, String), UserError> {
    let (controller, nodes) = trail_roles(spec, facts);
    let r = Running::of(trail, &controller, &nodes);
    let what = "set identity.karpenter_version to the release that runs (`helm list -n <namespace>` shows it), such as \"1.14\"; nothing was changed";
    let Some(newest) = r.newest() else {
        let why = match &r.problem {
            Some(p) => p.warning(),
            None => format!(
                "CloudTrail shows no call by the controller role {} in {}{}",
                controller[0],
                r.window_text(),
                r.cut_short_text()
            ),
        };
        return Err(UserError::new(format!("identity.karpenter_version = \"running\", but {why}"))
            .hint(format!("{what}{}", r.window_hint())));
    };
    let Some(v) = newest.known() else {
        return Err(UserError::new(format!(
            "identity.karpenter_version = \"running\": CloudTrail shows Karpenter {newest}, newer than karpctl knows (up to {})",
            crate::karpenter_iam::KarpenterVersion::LATEST
        ))
        .hint("upgrade karpctl, or pin identity.karpenter_version to a release it knows; nothing was changed"));
    };
    let all: Vec<String> = r.versions.iter().map(|s| s.version.to_string()).collect();
    let rollout =
        if all.len() > 1 { format!("; a rollout: {} run, the newest is followed", all.join(" and ")) } else { String::new() };
    Ok((
        v,
        format!(
            "Permissions follow Karpenter {v} (identity.karpenter_version = \"running\"): CloudTrail shows the controller role calling as karpenter.sh-{newest} in {}{rollout}",
            r.window_text()
        ),
    ))
}

async fn resolve_region(global: &Options, spec: &Spec) -> Result<String, UserError> {
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
    plan_file::validate_region(&region, global.settings.allow_unknown_region)
        .map_err(|e| UserError::new(format!("--region: {e}")).hint("use a region name such as us-east-1"))?;
    Ok(region)
}

/// Load the plan, connect, and run preflight checks. Makes only read calls.
///
/// Its calls are attributed (`aws::in_unit`, traced with `--stats` or KARPCTL_TRACE=1) to
/// `prepare:account` (STS), `prepare:cluster` (DescribeCluster), `preflight` (the checks, and
/// the early add-on check spawned without a unit of its own, by phase) and `discovery:select`
/// (the subnets and security group); the read-ahead's to each node's `read:<id>` and to
/// `discovery:unlisted`.
///
/// `read_ahead`: the command goes on to observe the plan's nodes (`diff`, `up`, `down`), so their
/// reads start as soon as the account is known, while EKS still describes the cluster (see
/// `ReadAhead`); `Prepared::observe` then uses them.
pub async fn prepare(global: &Options, cmd: Intent, read_ahead: bool) -> Result<Prepared> {
    prepare_on(global, cmd, read_ahead, None).await
}

/// `prepare` over a connection a read-only command already made (`import`'s diff): its clients,
/// account and cluster are taken as they are, so STS and DescribeCluster are asked once in the
/// run. Only when it is for the same region and credentials (no role to assume); else `prepare`
/// connects itself.
pub async fn prepare_on(global: &Options, cmd: Intent, read_ahead: bool, conn: Option<&Connected>) -> Result<Prepared> {
    aws::epoch();
    if global.plan_flag {
        reporter_for(global).event(Event::Note {
            level: Level::Warning,
            text: "--plan is deprecated and will be removed; use --config FILE (the TOML settings)",
        });
    }
    let settings = global.config.as_deref();
    let spec = plan_file::load(settings, global.cluster.as_deref(), Path::new("plans"), &global.settings)?;
    let region = resolve_region(global, &spec).await?;
    let stats = match &global.scope {
        Some(scope) => scope.stats.clone(),
        None => aws::STATS.get_or_init(|| Arc::new(CallStats::default())).clone(),
    };
    if global.stats || global.settings.trace {
        stats.enable_trace();
    }
    let concurrency = global.concurrency as usize;
    let assume_role = spec.assume_role.as_ref().map(|r| aws::AssumeRoleOptions {
        role_arn: r.role_arn.clone(),
        external_id: r.external_id.clone(),
        session_name: r.session_name.clone(),
    });
    let reporter = reporter_for(global);
    stats.tell_throttling(reporter.clone());
    let conn = conn.filter(|c| c.region == region && assume_role.is_none() && c.cluster.is_some());
    let clients = match conn {
        Some(c) => c.clients.clone(),
        None => aws::connect(&connect_options(global, &region, assume_role)?, stats.clone()).await,
    };
    let readers = match conn {
        Some(c) => c.readers.clone(),
        None => Arc::new(Readers::new(&clients)),
    };
    // STS and DescribeCluster together; once STS has answered (the account pin checked), the
    // Pod Identity add-on check and the plan's own reads start too, alongside DescribeCluster.
    let early = async {
        let (account_id, partition) = match conn {
            Some(c) => (c.account_id.clone(), c.partition.clone()),
            None => in_unit("prepare:account", caller_identity(&readers, &region, &spec)).await?,
        };
        reporter.event(Event::Info(&format!(
            "Account {account_id}{}, region {region}, cluster {}{}",
            spec.assume_role.as_ref().map(|r| format!(" (role {})", r.role_arn)).unwrap_or_default(),
            spec.cluster,
            spec.source.as_ref().map(|p| format!(", plan {}", p.display())).unwrap_or_else(|| ", plan: defaults".into())
        )));
        if let Some(pin) = &spec.account_id
            && pin != &account_id
        {
            return Err(UserError::new(format!(
                "the plan is pinned to account {pin} (`account_id`), but the credentials{} are for account {account_id}",
                spec.assume_role.as_ref().map(|r| format!(" (role {})", r.role_arn)).unwrap_or_default()
            ))
            .hint("use credentials (or --profile) for the pinned account, or fix `account_id` in the plan")
            .into());
        }
        let ctx = Arc::new(Ctx {
            aws: clients.clone(),
            cluster: spec.cluster.clone(),
            region: region.clone(),
            account_id: account_id.clone(),
            partition: partition.clone(),
            reporter: reporter.clone(),
            consistency: ConsistencyPolicy::standard(global.settings.consistency_deadline),
            settings: global.settings.clone(),
            readers: readers.clone(),
            once: Default::default(),
            written: Default::default(),
            settling: Default::default(),
        });
        let account_facts = Facts {
            account_id,
            region: region.clone(),
            partition: partition.clone(),
            cluster: ClusterFacts { name: spec.cluster.clone(), ..Default::default() },
            ..Default::default()
        };
        // CloudTrail's records of the running Karpenter: in the background, alongside every
        // other read (paced at CloudTrail's two lookups a second), joined where readiness is
        // judged; waited for here only when the plan follows the running version.
        let trail = (cmd != Intent::Down).then(|| {
            let readers = readers.clone();
            let window = global.settings.trail_window;
            crate::ctx::Background::spawn(in_unit("prepare:trail", async move { readers.trail.recent(window, &READINESS).await }))
        });
        let mut spec_now = spec.clone();
        let mut followed = None;
        if spec.identity.follow_running && trail.is_some() {
            let read = in_unit("prepare:trail", readers.trail.recent(global.settings.trail_window, &READINESS)).await;
            let (v, line) = follow_running(&spec, &account_facts, &read)?;
            reporter.event(Event::Info(&line));
            spec_now.identity.karpenter_version = v;
            followed = Some(v);
        }
        stats.set_phase("preflight");
        let early_checks = crate::gather::preflight::start_early_checks(&ctx, &spec_now, cmd);
        let ahead = read_ahead.then(|| ReadAhead::start(ctx.clone(), nodes_for(&spec_now, &account_facts, cmd), concurrency));
        Ok::<_, anyhow::Error>((ctx, ahead, early_checks, trail, followed))
    };
    let described = async {
        match conn {
            Some(c) => Ok(c.cluster.clone()),
            None => in_unit("prepare:cluster", describe_cluster(&readers, &spec.cluster)).await,
        }
    };
    let (early, cluster) = tokio::join!(early, described);
    let (ctx, ahead, early_checks, trail, followed) = early?;
    let mut spec = spec;
    if let Some(v) = followed {
        spec.identity.karpenter_version = v;
    }
    let cluster = cluster?;
    // A cluster EKS does not know is most often a typo: name the closest of the region's.
    let others = match cluster {
        None => in_unit("prepare:cluster", missing_cluster_hint(&readers, &spec.cluster, &region)).await,
        Some(_) => None,
    };
    let cluster = cluster_status_check(
        cluster,
        &spec.cluster,
        &region,
        cmd,
        reporter.as_ref(),
        others,
        global.settings.eks_active_timeout,
    )?;
    resources::eks::remember_status(&ctx, &spec.cluster, &cluster.status);
    let mut facts = Facts {
        account_id: ctx.account_id.clone(),
        region,
        partition: ctx.partition.clone(),
        cluster,
        discovery: Default::default(),
        existing_node_role_arn: None,
        kms_key: None,
    };
    desired::validate(&desired::build(&spec, &facts))?;
    let preflight = in_unit("preflight", crate::gather::preflight::check(&ctx, &spec, &facts, cmd)).await?;
    facts.kms_key = preflight.kms_key.clone();
    drop(early_checks);
    if let Some(existing) = &spec.identity.existing_node_role {
        // Read (memoised) by preflight; a name may hide a path, so use the live ARN.
        let name = existing.rsplit('/').next().unwrap_or(existing);
        facts.existing_node_role_arn = in_unit("preflight", resources::iam_role::get_role(&ctx, name)).await?.map(|r| r.arn);
    }
    stats.set_phase("discovery:select");
    facts.discovery = in_unit("discovery:select", crate::gather::discovery::select(&ctx, &spec, &facts, cmd)).await?;
    Ok(Prepared {
        spec,
        facts,
        ctx,
        stats,
        global: global.clone(),
        preflight,
        cmd,
        ahead: std::sync::Mutex::new(ahead),
        early: Default::default(),
        association: Default::default(),
        trail: std::sync::Mutex::new(trail),
        running: Default::default(),
        joined_trail: Default::default(),
        upgrade_kept: Default::default(),
    })
}

/// What a read-only command that loads no plan needs (`doctor`): clients, the account and the
/// cluster as EKS describes it (None: no such cluster).
pub struct Connected {
    /// The clients, for a `prepare_on` that goes on with them.
    pub clients: aws::Clients,
    /// The readers of these clients (doctor and import read through them).
    pub readers: Arc<Readers>,
    pub stats: Arc<CallStats>,
    pub account_id: String,
    pub partition: String,
    pub region: String,
    /// The cluster as EKS describes it (None: no such cluster).
    pub cluster: Option<ClusterFacts>,
    /// DescribeCluster was refused (AccessDenied): what AWS said. `cluster` is then None.
    pub cluster_refused: Option<aws::AwsError>,
}

/// How to connect: the options' profile, endpoint and concurrency (the cluster's shared limiter in
/// a many-cluster run), AWS_CA_BUNDLE, and the role to assume if any.
fn connect_options(global: &Options, region: &str, assume_role: Option<aws::AssumeRoleOptions>) -> Result<ConnectOptions> {
    Ok(ConnectOptions {
        region: region.to_string(),
        profile: global.profile.clone(),
        endpoint_url: global.endpoint_url.clone(),
        max_attempts: aws::throttle::THROTTLE_ATTEMPTS,
        max_in_flight: global.concurrency as usize,
        ca_bundle: aws::ca_bundle(global.settings.ca_bundle.as_deref())?,
        limiter: global.scope.as_ref().map(|s| s.limiter.clone()),
        assume_role,
        settings: global.settings.clone(),
    })
}

/// Connect and identify for a read-only command (`doctor`): the region and the role to assume
/// from `spec` (the cluster's plan when there is one, else the defaults), then STS and
/// DescribeCluster at once. A refused DescribeCluster is kept in `cluster_refused` (doctor
/// reports it and goes on); it fails only when STS does not answer either. Read calls only.
pub async fn connect_and_identify(global: &Options, spec: &Spec) -> Result<Connected> {
    let region = resolve_region(global, spec).await?;
    let stats = aws::STATS.get_or_init(|| Arc::new(CallStats::default())).clone();
    let assume_role = spec.assume_role.as_ref().map(|r| aws::AssumeRoleOptions {
        role_arn: r.role_arn.clone(),
        external_id: r.external_id.clone(),
        session_name: r.session_name.clone(),
    });
    let clients = aws::connect(&connect_options(global, &region, assume_role)?, stats.clone()).await;
    let readers = Arc::new(Readers::new(&clients));
    let cluster = &spec.cluster;
    let (identity, described) = tokio::join!(caller_identity(&readers, &region, spec), readers.eks.cluster(cluster));
    let (account_id, partition) = identity?;
    let (cluster, cluster_refused) = match described {
        Err(e) if e.kind() == aws::ErrorKind::AccessDenied => {
            (None, aws::refusal_in(&aws::aws_err("eks:DescribeCluster", e)).cloned())
        }
        r => (cluster_facts(cluster, r)?, None),
    };
    Ok(Connected { clients, readers, stats, account_id, partition, region, cluster, cluster_refused })
}

/// The nodes a command works on: the desired graph; for `down`, every node unwanted.
pub fn nodes_for(spec: &Spec, facts: &Facts, cmd: Intent) -> Vec<Node> {
    let mut nodes = desired::build(spec, facts);
    if cmd == Intent::Down {
        for n in &mut nodes {
            n.fields = None;
            n.keep_existing = false;
        }
    }
    nodes
}

fn credentials_hint() -> &'static str {
    "check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or --profile) and that the endpoint is reachable (--endpoint-url / AWS_ENDPOINT_URL)"
}

/// The account and partition of the credentials (sts:GetCallerIdentity). The partition comes from
/// the caller's ARN (`arn:<partition>:...`), not the region's name: newer partitions exist
/// (docs/aws-behaviour.md section 9); the region decides only when the ARN is not usable.
async fn caller_identity(readers: &Readers, region: &str, spec: &Spec) -> Result<(String, String)> {
    match readers.sts.caller_identity().await {
        Ok(o) => {
            let partition =
                o.arn.as_deref().and_then(aws::partition_of_arn).unwrap_or_else(|| aws::partition(region)).to_string();
            Ok((o.account, partition))
        }
        Err(e) => {
            // No answer at all (no credentials, an endpoint that refuses or is silent): say so plainly.
            let op = if spec.assume_role.is_some() { "sts:AssumeRole" } else { "sts:GetCallerIdentity" };
            if let Some(plain) = aws::https::unanswered(op, &e) {
                return Err(plain.into());
            }
            let what = match (e.code(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_string(),
                _ => format!("{}", aws_smithy_types::error::display::DisplayErrorContext(&e)),
            };
            if let Some(r) = &spec.assume_role {
                return Err(UserError::new(format!(
                    "cannot assume role {} or identify its account (sts:AssumeRole, sts:GetCallerIdentity): {what}",
                    r.role_arn
                ))
                .hint("check that the role exists, that it trusts your credentials (and `external_id` if its trust needs one), and that your credentials may call sts:AssumeRole on it")
                .into());
            }
            Err(UserError::new(format!("cannot identify the AWS account (sts:GetCallerIdentity): {what}"))
                .hint(credentials_hint())
                .into())
        }
    }
}

/// DescribeCluster; None when there is no such cluster.
async fn describe_cluster(readers: &Readers, name: &str) -> Result<Option<ClusterFacts>> {
    cluster_facts(name, readers.eks.cluster(name).await)
}

type DescribeClusterResult = crate::aws::read::eks::ClusterAnswer;

/// What DescribeCluster's answer says about the cluster (None: no such cluster).
fn cluster_facts(name: &str, answer: DescribeClusterResult) -> Result<Option<ClusterFacts>> {
    let o = match answer {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => {
            if let Some(plain) = aws::https::unanswered("eks:DescribeCluster", &e) {
                return Err(plain.into());
            }
            return Err(anyhow::Error::new(
                UserError::new(format!(
                    "cannot describe EKS cluster {name}: {}",
                    aws_smithy_types::error::display::DisplayErrorContext(&e)
                ))
                .hint(credentials_hint()),
            ));
        }
    };
    let c = o.cluster().context("eks:DescribeCluster returned no cluster")?;
    let vpc = c.resources_vpc_config();
    Ok(Some(ClusterFacts {
        name: name.to_string(),
        arn: c.arn().unwrap_or_default().to_string(),
        status: c.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
        version: c.version().unwrap_or_default().to_string(),
        vpc_id: vpc.and_then(|v| v.vpc_id()).unwrap_or_default().to_string(),
        subnet_ids: vpc.map(|v| v.subnet_ids().to_vec()).unwrap_or_default(),
        cluster_security_group_id: vpc.and_then(|v| v.cluster_security_group_id()).unwrap_or_default().to_string(),
        security_group_ids: vpc.map(|v| v.security_group_ids().to_vec()).unwrap_or_default(),
        authentication_mode: c
            .access_config()
            .and_then(|a| a.authentication_mode())
            .map(|m| m.as_str().to_string())
            .unwrap_or_else(|| "CONFIG_MAP".into()),
        auto_mode: c.compute_config().and_then(|cc| cc.enabled()).unwrap_or(false),
        oidc_issuer: c.identity().and_then(|i| i.oidc()).and_then(|o| o.issuer()).unwrap_or_default().to_string(),
        ip_family: c
            .kubernetes_network_config()
            .and_then(|k| k.ip_family())
            .map(|f| f.as_str().to_string())
            .unwrap_or_else(|| "ipv4".into()),
    }))
}

/// What to say about a cluster EKS does not know (eks:ListClusters in the region): "did you
/// mean" the closest name, else the names there are (a few), else that there are none. None
/// when the list cannot be read.
async fn missing_cluster_hint(readers: &Readers, name: &str, region: &str) -> Option<String> {
    let mut names: Vec<String> = readers.eks.clusters().await.ok()?;
    names.sort();
    Some(match crate::suggest::closest(name, names.iter().map(String::as_str)) {
        Some(c) => format!("did you mean `{c}`?"),
        None if names.is_empty() => format!("region {region} has no EKS cluster these credentials can see"),
        None if names.len() <= 10 => format!("the clusters in {region} are {}", names.join(", ")),
        None => format!("{region} has {} clusters: `aws eks list-clusters --region {region}` lists them", names.len()),
    })
}

/// What the cluster's status allows this command (docs/aws-behaviour.md section 9): IAM, SQS,
/// EventBridge and EC2 never need the cluster; access entries and associations go with it.
///
/// - Gone (`down` only), DELETING, FAILED: `down` removes everything else and skips the EKS
///   objects (they go with the cluster); `up` fails here, before any write; `diff` shows the plan.
/// - CREATING, UPDATING (minutes to an hour during a version upgrade), PENDING: `diff` shows the
///   plan with a note; `up` and `down` go on, their EKS steps waiting (once, shared) for ACTIVE.
fn cluster_status_check(
    cluster: Option<ClusterFacts>,
    name: &str,
    region: &str,
    cmd: Intent,
    reporter: &dyn Reporter,
    others: Option<String>,
    eks_active_timeout: std::time::Duration,
) -> Result<ClusterFacts> {
    let Some(cluster) = cluster else {
        if cmd != Intent::Down {
            let check = "check --cluster and --region (or the plan's `cluster` and `region`); `karpctl down` still removes what karpctl made around a deleted cluster";
            // Several hints go on lines of their own (as `combine_errors` writes them).
            return Err(UserError::new(format!("EKS cluster {name} does not exist in region {region}"))
                .hint(match others {
                    Some(o) => format!("{o}\n      {check}"),
                    None => check.to_string(),
                })
                .into());
        }
        reporter.event(Event::Note { level: Level::Info, text: &format!(
            "EKS cluster {name} does not exist in region {region}{}; its access entries and Pod Identity associations went with the cluster, karpctl removes the rest",
            others.filter(|o| o.starts_with("did you mean")).map(|o| format!(" ({o})")).unwrap_or_default()
        ) });
        return Ok(ClusterFacts {
            name: name.to_string(),
            status: CLUSTER_NOT_FOUND.to_string(),
            authentication_mode: "API_AND_CONFIG_MAP".into(),
            ip_family: "ipv4".into(),
            ..Default::default()
        });
    };
    let status = cluster.status.as_str();
    match (ClusterState::of(status), cmd) {
        (ClusterState::Active, _) => {}
        (ClusterState::Going, Intent::Up) => {
            let hint = if status == "FAILED" {
                format!(
                    "a FAILED cluster cannot be repaired: delete it (aws eks delete-cluster --name {name} --region {region}), run `karpctl down` to remove what karpctl made around it, then create the cluster again"
                )
            } else {
                "wait until the deletion ends, then run `karpctl down` to remove what karpctl made around the cluster".to_string()
            };
            return Err(UserError::new(format!("EKS cluster {name} is {status}; karpctl up cannot set Karpenter up around it"))
                .hint(hint)
                .into());
        }
        (ClusterState::Going, _) => reporter.event(Event::Note { level: Level::Info, text: &format!(
            "EKS cluster {name} is {status}; its access entries and Pod Identity associations go with the cluster, so karpctl leaves them alone and removes the rest"
        ) }),
        (ClusterState::Busy, Intent::Diff) => reporter.event(Event::Note { level: Level::Info, text: &format!(
            "EKS cluster {name} is {status}; `karpctl up` can run now: the steps that need the cluster (access entry, Pod Identity) wait until it is ACTIVE"
        ) }),
        (ClusterState::Busy, _) => reporter.event(Event::Note { level: Level::Info, text: &format!(
            "EKS cluster {name} is {status}; IAM, SQS, EventBridge and EC2 steps go on, the EKS steps wait until it is ACTIVE (up to {} s; {})",
            eks_active_timeout.as_secs(),
            resources::eks::ACTIVE_TIMEOUT_ENV
        ) }),
    }
    Ok(cluster)
}
