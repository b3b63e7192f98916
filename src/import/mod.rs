//! `karpctl import` (reads only): what doctor's discovery found -> a plan file naming those objects
//! for `up --adopt`, what `up --adopt` would then change (the planner, read-only), and the steps to
//! let go of them in the tool that made them (docs/import.md).

#[cfg(test)]
mod fixtures;
pub mod found;
pub mod let_go;
pub mod plan_text;

use self::found::{Policies, found_of, sort_policies};
use self::let_go::{let_go, terraform_steps};
use self::plan_text::{plan_toml, summary};
use crate::error::UserError;
use crate::facts::prepared::Facts;
use crate::karpenter_iam::KarpenterVersion;
use crate::options::Options;
use crate::report::{ImportReport, LetGo};
use anyhow::Result;
use std::path::PathBuf;

/// What the user asked of `import` (flags), engine-side.
pub struct ImportOptions {
    pub force: bool,
    pub terraform_module: String,
    pub karpenter_version: Option<String>,
    pub namespace: String,
    pub service_account: String,
}

/// The node role's instance profiles that Karpenter did not make (Karpenter tags its own with
/// `karpenter.k8s.aws/ec2nodeclass`): (name, path).
async fn instance_profiles(aws: &crate::aws::read::Readers, role: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, path) in aws.iam.profiles_for_role(role).await? {
        let Some(p) = aws.iam.instance_profile(&name).await? else { continue };
        if !p.tags.contains_key("karpenter.k8s.aws/ec2nodeclass") {
            out.push((name, path));
        }
    }
    Ok(out)
}

/// The plan file `import` writes: `--config FILE`, else `plans/<cluster>.toml`.
fn target(global: &Options, cluster: &str) -> PathBuf {
    global.config.clone().unwrap_or_else(|| PathBuf::from("plans").join(format!("{cluster}.toml")))
}

pub async fn run(global: &Options, args: &ImportOptions) -> Result<ImportReport> {
    let cluster =
        global.cluster.clone().or_else(|| global.settings.cluster.clone()).ok_or_else(|| {
            UserError::new("karpctl import needs a cluster").hint("pass --cluster NAME (or set KARPCTL_CLUSTER)")
        })?;
    crate::plan_file::validate_cluster_name(&cluster).map_err(|e| UserError::new(format!("--cluster {cluster:?}: {e}")))?;
    // The permissions follow the release that runs: the flag, else the version CloudTrail
    // shows in the controller's calls (`karpenter.sh-<version>` in their user agent). Never
    // guessed: with neither, import stops before it writes.
    let flagged =
        match args.karpenter_version.as_deref() {
            Some(v) => Some(KarpenterVersion::parse(v).map_err(|e| {
                UserError::new(format!("--karpenter-version: {e}")).hint("pass the release that runs, such as 1.14")
            })?),
            None => None,
        };
    let path = target(global, &cluster);
    if path.exists() && !args.force {
        return Err(UserError::new(format!("{} exists; import never overwrites a plan file", path.display()))
            .hint("pass --force to replace it, or --config OTHER.toml to write elsewhere")
            .into());
    }

    let mut spec = crate::plan_file::defaults(&cluster)?;
    spec.region = global.region.clone();
    let connected = crate::prepare::connect_and_identify(global, &spec).await?;
    let Some(facts) = connected.cluster.clone() else {
        if let Some(refused) = &connected.cluster_refused {
            // AWS refused DescribeCluster: said as every refusal of karpctl's own calls is
            // (the action, the resource, the caller-policy command that grants it).
            return Err(anyhow::Error::new(refused.clone()));
        }
        return Err(UserError::new(format!("EKS cluster {cluster} does not exist in region {}", connected.region))
            .hint("check --cluster and --region")
            .into());
    };
    let inputs = crate::gather::setup::Inputs {
        cluster: facts.clone(),
        account_id: connected.account_id.clone(),
        partition: connected.partition.clone(),
        region: connected.region.clone(),
        version: flagged.unwrap_or(KarpenterVersion::LATEST),
        follow_running: false,
        version_from: String::new(),
        namespace: args.namespace.clone(),
        service_account: args.service_account.clone(),
        controller_role: None,
        node_roles: vec![],
        queue: None,
        discovery_tag: (crate::tags::DISCOVERY_TAG.to_string(), cluster.clone()),
        refused: vec![],
        associate_public_ip: false,
        bus_quota: global.settings.rules_per_bus,
        trail_window: global.settings.trail_window,
        metrics: false,
        simulate: false,
    };
    let mut setup = crate::gather::setup::gather(&connected.readers, &inputs).await?;
    let (version, from_trail) = match flagged {
        Some(v) => (v, None),
        None => running_version(&setup, &args.namespace)?,
    };
    setup.version = version;
    // CloudTrail is the only read import does without: it only names the version.
    if let Some(u) = setup.unreadable.iter().find(|u| u.code != crate::facts::finding::Code::CloudtrailUnreadable) {
        return Err(UserError::new(format!("import cannot read the setup: {} was refused ({})", u.operation, u.aws_code))
            .hint("import needs the read permissions doctor needs (docs/doctor.md); nothing was written")
            .into());
    }
    let mut found = found_of(&setup, version);
    if let Some(n) = found.node_role.as_ref().filter(|_| found.node_role_shared.is_none()) {
        found.instance_profile = instance_profiles(&connected.readers, &n.name).await?.into_iter().next();
    }

    // The plan without retirements, parsed as `up` will parse it: its own policies' ARNs are
    // adopted in place (the getting-started stack names them as karpctl does), never retired.
    let zonal = Policies { zonal_shift: sort_policies(&found, &[]).zonal_shift, ..Default::default() };
    let (draft, _) = plan_toml(&found, &zonal);
    let spec = crate::plan_file::parse_with(&draft, &path.display().to_string(), Some(&cluster), &global.settings)?;
    let plan_facts = Facts {
        account_id: connected.account_id.clone(),
        region: connected.region.clone(),
        partition: connected.partition.clone(),
        cluster: facts,
        discovery: Default::default(),
        existing_node_role_arn: None,
        kms_key: None,
    };
    let own: Vec<String> = crate::resources::iam_policy::controller_policies(&spec, &plan_facts)
        .into_iter()
        .filter(|p| p.doc.is_some())
        .map(|p| p.arn)
        .collect();
    let ipv6 = plan_facts.cluster.ip_family.eq_ignore_ascii_case("ipv6");
    let node_wanted = crate::karpenter_iam::node_managed_policy_arns(
        &plan_facts.partition,
        &plan_facts.account_id,
        ipv6,
        spec.identity.karpenter_version,
    );
    found.extra_node_policies = found.node_attached.iter().filter(|a| !node_wanted.contains(a)).cloned().collect();
    let policies = sort_policies(&found, &own);
    let mut let_go = let_go(&found, &args.terraform_module);
    let mut found_lines = summary(&found, &policies);
    if let Some(line) = from_trail {
        found_lines.push(("karpenter version".into(), line));
    }
    let (text, mut notes) = plan_toml(&found, &policies);
    // What was found and how to let go are said even when the plan cannot be used as it is.
    let parsed = crate::plan_file::parse_with(&text, &path.display().to_string(), Some(&cluster), &global.settings);
    if let Err(e) = &parsed {
        notes.push(format!("the plan written needs a change before up --adopt can use it: {}", e.message));
    }
    if let LetGo::Terraform { steps, .. } = &mut let_go {
        *steps = terraform_steps(&found, &policies, parsed.as_ref().ok());
    }

    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| UserError::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true);
    if args.force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    use std::io::Write as _;
    open.open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| UserError::new(format!("cannot write {}: {e}", path.display())))?;

    // What `up --adopt` will change: the same read-only diff, with the file just written. A
    // refusal (a preflight check, say) is reported after what was found, not instead of it.
    let diff = match parsed {
        Ok(_) => {
            let mut with_plan = global.clone();
            with_plan.config = Some(path.clone());
            with_plan.cluster = Some(cluster.clone());
            crate::engine::diff_on(&with_plan, true, None, Some(&connected)).await.map_err(|e| {
                let hint = crate::report::hint_of(&e).map(|h| format!("\nhint: {h}")).unwrap_or_default();
                format!("{e:#}{hint}")
            })
        }
        Err(e) => Err(e.message.clone()),
    };
    Ok(ImportReport { cluster, path, text, notes, found_lines, diff, let_go, stats: connected.stats.report() })
}

/// The version CloudTrail shows the controller role running (the newest during a rollout), and
/// the line saying where it came from; without one, the error asking for the flag.
fn running_version(setup: &crate::facts::setup::Setup, namespace: &str) -> Result<(KarpenterVersion, Option<String>)> {
    let running = setup.running.as_ref();
    let why = match running {
        Some(r) if r.problem.is_some() => {
            format!("CloudTrail could not be read ({})", r.problem.as_ref().map(|p| p.warning()).unwrap_or_default())
        }
        Some(r) if r.controller_roles.is_empty() => "no controller role was found to look for in CloudTrail".to_string(),
        Some(r) => format!("CloudTrail shows no call of the controller role in {}{}", r.window_text(), r.cut_short_text()),
        None => "CloudTrail was not read".to_string(),
    };
    let Some(r) = running.filter(|r| r.newest().is_some()) else {
        let window = running.map(|r| r.window_hint()).unwrap_or("");
        return Err(UserError::new(format!("import needs the Karpenter release that runs: pass --karpenter-version ({why})"))
            .hint(format!(
                "read it with `helm list -n {namespace}` (the karpenter chart's APP VERSION, e.g. 1.6.3 -> --karpenter-version 1.6){window}; nothing was written"
            ))
            .into());
    };
    let newest = r.newest().cloned().unwrap_or_else(|| unreachable!());
    if newest.major == 0 {
        return Err(UserError::new(format!(
            "CloudTrail shows Karpenter {newest} running, a release before 1.0: karpctl's permissions start at Karpenter 1.0"
        ))
        .hint("upgrade Karpenter to 1.0 or later first, then import; or pass --karpenter-version with the 1.x release you move to (the pre-v1 policy stays on the role while CloudTrail shows a pre-v1 release); nothing was written")
        .into());
    }
    let Some(v) = newest.known() else {
        return Err(UserError::new(format!(
            "CloudTrail shows Karpenter {newest} running, newer than karpctl knows (up to {})",
            KarpenterVersion::LATEST
        ))
        .hint("upgrade karpctl, or pass --karpenter-version to pin an older permission set; nothing was written")
        .into());
    };
    let rollout = if r.versions.len() > 1 {
        let all: Vec<String> = r.versions.iter().map(|s| s.version.to_string()).collect();
        format!("; a rollout: {} run, the newest is used", all.join(" and "))
    } else {
        String::new()
    };
    Ok((
        v,
        Some(format!(
            "{v} (from CloudTrail: the controller role's calls name karpenter.sh-{newest} in {}{rollout}; --karpenter-version overrides)",
            r.window_text()
        )),
    ))
}
