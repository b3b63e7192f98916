//! `karpctl doctor`: diagnose the Karpenter setup around a cluster, whoever made it; reads only.
//! A thin command: `gather::setup` finds the pieces without knowing their names, `crate::checks`
//! judges them, `report::doctor` renders. Exit 0 clean, 2 on findings, 1 cannot run.

use crate::cli::DoctorArgs;
use crate::error::UserError;
use crate::karpenter_iam::KarpenterVersion;
use crate::options::Options;
use crate::report::DoctorReport;
use crate::tags::DISCOVERY_TAG;
use anyhow::Result;

fn cluster_of(global: &Options) -> Result<String, UserError> {
    global
        .cluster
        .clone()
        .or_else(|| global.settings.cluster.clone())
        .ok_or_else(|| UserError::new("karpctl doctor needs a cluster").hint("pass --cluster NAME (or set KARPCTL_CLUSTER)"))
}

fn discovery_tag(arg: Option<&str>, cluster: &str) -> Result<(String, String), UserError> {
    let Some(a) = arg else { return Ok((DISCOVERY_TAG.to_string(), cluster.to_string())) };
    match a.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(UserError::new(format!("--discovery-tag {a:?} is not KEY=VALUE"))
            .hint(format!("for example --discovery-tag {DISCOVERY_TAG}={cluster}"))),
    }
}

/// A read AWS refused: say which permission doctor needs, and the command printing all of them
/// (`caller_policy`, the one source of what karpctl needs).
fn explain(e: anyhow::Error, cluster: &str) -> anyhow::Error {
    let denied = crate::aws::refusal_in(&e).cloned();
    match denied {
        Some(a) => UserError::new(format!(
            "doctor cannot read the setup: {} was refused ({}{})",
            a.operation,
            a.code,
            if a.message.is_empty() { String::new() } else { format!(": {}", a.message) }
        ))
        .hint(format!(
            "grant these credentials the read permission {} (doctor needs only read permissions): `{}` prints the IAM policy that grants every call doctor makes",
            a.operation,
            crate::policy::doc::grant_command(cluster, "doctor")
        ))
        .into(),
        None => e,
    }
}

/// One version per judgement, the one `diff` judges with on the same account: the flag; else
/// the plan's pin when there is a plan (its "running" follows CloudTrail, as `diff` does); else
/// the version CloudTrail shows running (resolved once the trail is read, the newest without
/// one). (version until then, whether it follows the running one, why.)
fn version_choice(flagged: Option<KarpenterVersion>, spec: &crate::spec::Spec) -> (KarpenterVersion, bool, String) {
    if let Some(v) = flagged {
        return (v, false, "--karpenter-version".into());
    }
    let Some(path) = &spec.source else { return (KarpenterVersion::LATEST, true, String::new()) };
    if spec.identity.follow_running {
        let why = format!("the plan {} sets identity.karpenter_version = \"running\", as `diff` follows it", path.display());
        return (KarpenterVersion::LATEST, true, why);
    }
    let v = spec.identity.karpenter_version;
    (
        v,
        false,
        format!(
            "the plan's pin: identity.karpenter_version in {} (the newest when it sets none), as `diff` judges with",
            path.display()
        ),
    )
}

pub async fn run(global: &Options, args: &DoctorArgs) -> Result<DoctorReport> {
    let cluster = cluster_of(global)?;
    let flagged = match &args.karpenter_version {
        Some(v) => Some(
            KarpenterVersion::parse(v)
                .map_err(|e| UserError::new(format!("--karpenter-version: {e}")).hint("pass a release such as 1.14"))?,
        ),
        None => None,
    };
    let tag = discovery_tag(args.discovery_tag.as_deref(), &cluster)?;
    // The cluster's plan, when there is one: its region and `assume_role_arn` (doctor reads as
    // that role, as `up` writes as it); without one, the defaults.
    let spec = crate::plan_file::load(global.config.as_deref(), Some(&cluster), std::path::Path::new("plans"), &global.settings)?;
    let (version, follow_running, version_from) = version_choice(flagged, &spec);
    let connected = crate::prepare::connect_and_identify(global, &spec).await?;
    let mut refused = Vec::new();
    let facts = match (&connected.cluster, &connected.cluster_refused) {
        (Some(f), _) => f.clone(),
        (None, Some(a)) => {
            // STS answered: every read that needs only the cluster's name still runs.
            refused.push(crate::facts::setup::Unreadable {
                code: crate::facts::finding::Code::ClusterUnreadable,
                operation: a.operation.clone(),
                aws_code: a.code.clone(),
            });
            crate::facts::prepared::ClusterFacts { name: cluster.clone(), ..Default::default() }
        }
        (None, None) => {
            return Err(UserError::new(format!("EKS cluster {cluster} does not exist in region {}", connected.region))
                .hint("check --cluster and --region")
                .into());
        }
    };
    let inputs = crate::gather::setup::Inputs {
        cluster: facts,
        account_id: connected.account_id.clone(),
        partition: connected.partition.clone(),
        region: connected.region.clone(),
        version,
        follow_running,
        version_from,
        namespace: args.namespace.clone(),
        service_account: args.service_account.clone(),
        controller_role: args.controller_role.clone(),
        node_roles: args.node_role.clone(),
        queue: args.queue.clone(),
        discovery_tag: tag,
        refused,
        associate_public_ip: spec.discovery.associate_public_ip,
        bus_quota: global.settings.rules_per_bus,
        trail_window: global.settings.trail_window,
        metrics: true,
        simulate: args.simulate,
    };
    let mut setup = crate::gather::setup::gather(&connected.readers, &inputs).await.map_err(|e| explain(e, &cluster))?;
    setup.today = Some(global.settings.today);
    let outcome = crate::checks::run(&setup, crate::facts::finding::Command::Doctor);
    Ok(DoctorReport { setup, outcome, stats: connected.stats.report() })
}
