//! Command-line interface (clap derive).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "karpctl",
    version,
    about = "Create, diff and remove the AWS pieces Karpenter needs around an EKS cluster",
    long_about = "karpctl provisions the AWS resources Karpenter needs around an EKS cluster \
(interruption queue and rules, IAM roles and policies, access entry, Pod Identity, discovery tags) \
without Terraform and without a state file: ownership lives in tags on the AWS objects.\n\n\
Exit codes: 0 done or in sync, 1 error, 2 `diff` found changes, 130 interrupted."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct Global {
    /// EKS cluster name (default: KARPCTL_CLUSTER, or the only plan in plans/)
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The cluster's settings file, TOML (default: plans/<cluster>.toml if it exists, else built-in
    /// defaults). Not a saved plan: that is `diff --out FILE` / `up --plan-file FILE`
    #[arg(long, global = true, value_name = "FILE", conflicts_with = "plan")]
    pub config: Option<PathBuf>,
    /// Deprecated spelling of --config
    #[arg(long, global = true, value_name = "FILE", hide = true)]
    pub plan: Option<PathBuf>,
    /// AWS region (default: the plan's `region`, then AWS_REGION / the profile)
    #[arg(long, global = true, value_name = "REGION")]
    pub region: Option<String>,
    /// AWS shared-config profile to use
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send every AWS call to this endpoint (an emulator); AWS_ENDPOINT_URL works too
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// Most AWS requests in flight at once (and most steps and node reads); 1 makes one call at a time
    #[arg(long, global = true, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// Output format on stdout
    #[arg(long, global = true, value_enum, default_value_t = Output::Human)]
    pub output: Output,
    /// Print AWS call counts (by service and operation, retries separately) after the run
    #[arg(long, global = true)]
    pub stats: bool,
    /// More logging on stderr (-vv for SDK details; credentials are never logged)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr; no progress
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Every plan in plans/ (diff, up, output; not down), clusters run concurrently
    #[arg(long, global = true, conflicts_with_all = ["cluster", "clusters", "config", "plan"])]
    pub all: bool,
    /// These clusters (comma-separated; their plans/<name>.toml or defaults), run concurrently
    #[arg(long, global = true, value_name = "A,B,...", value_delimiter = ',', conflicts_with_all = ["cluster", "config", "plan"])]
    pub clusters: Option<Vec<String>>,
    /// With --all/--clusters: most clusters in flight at once (each keeps its own --concurrency)
    #[arg(long, global = true, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel_clusters: u32,
    /// With --all/--clusters: most AWS requests in flight at once per account, across its clusters
    #[arg(long, global = true, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub account_concurrency: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Human,
    Json,
    /// GitHub-flavoured Markdown for a pull-request comment (`diff` only)
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or repair everything the plan describes, and remove what it no longer names
    Up(UpArgs),
    /// Show what `up` would change; exit 2 when out of sync, 0 when in sync
    Diff(DiffArgs),
    /// Remove everything karpctl made for the cluster, and nothing else
    Down(DownArgs),
    /// Print what to pass on to Karpenter (Helm values, EC2NodeClass), read from live AWS
    Output(OutputArgs),
    /// Diagnose the Karpenter setup around a cluster, whoever made it (reads only); exit 2 on findings
    Doctor(DoctorArgs),
    /// Write a plan that takes over a setup made by Terraform or CloudFormation (reads only)
    Import(ImportArgs),
    /// Print shell completions
    Completions {
        /// Shell to generate completions for
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Take over unowned objects of the expected names (migrating from Terraform or eksctl)
    #[arg(long)]
    pub adopt: bool,
    /// Apply exactly the steps of a plan saved by `diff --out`; refuse if AWS changed since
    #[arg(long, value_name = "FILE")]
    pub plan_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Show what `up --adopt` would do
    #[arg(long)]
    pub adopt: bool,
    /// Save the plan to FILE for `up --plan-file`
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// What to print: Helm values, an EC2NodeClass snippet, or everything as JSON
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Helm,
    Nodeclass,
    Json,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Karpenter's namespace (its Pod Identity association or IRSA trust names it)
    #[arg(long, default_value = "kube-system", value_name = "NS")]
    pub namespace: String,
    /// Karpenter's service account
    #[arg(long, default_value = "karpenter", value_name = "NAME")]
    pub service_account: String,
    /// Check the controller's permissions against this Karpenter release (1.0 to 1.14; default the newest)
    #[arg(long, value_name = "VERSION")]
    pub karpenter_version: Option<String>,
    /// The controller role (name or ARN) instead of finding it
    #[arg(long, value_name = "ROLE")]
    pub controller_role: Option<String>,
    /// A node role (name or ARN) instead of finding them; repeatable
    #[arg(long, value_name = "ROLE")]
    pub node_role: Vec<String>,
    /// The interruption queue (name, URL or ARN) instead of finding it
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// The tag Karpenter's subnet and security group selectors use (default karpenter.sh/discovery=<cluster>)
    #[arg(long, value_name = "KEY=VALUE")]
    pub discovery_tag: Option<String>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Replace the plan file if it exists
    #[arg(long)]
    pub force: bool,
    /// The Terraform address of the karpenter module, for `terraform state rm` (the whole module)
    #[arg(long, default_value = "module.karpenter", value_name = "ADDRESS")]
    pub terraform_module: String,
    /// The Karpenter release the cluster runs (1.0 to 1.14; needed: `helm list -n <namespace>` shows it)
    #[arg(long, value_name = "VERSION")]
    pub karpenter_version: Option<String>,
    /// Karpenter's namespace
    #[arg(long, default_value = "kube-system", value_name = "NS")]
    pub namespace: String,
    /// Karpenter's service account
    #[arg(long, default_value = "karpenter", value_name = "NAME")]
    pub service_account: String,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Do not ask for confirmation (required when not on a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_the_settings_file_and_plan_its_deprecated_spelling() {
        let c = Cli::try_parse_from(["karpctl", "--config", "a.toml", "diff"]).unwrap();
        assert_eq!(c.global.config.as_deref(), Some(std::path::Path::new("a.toml")));
        let old = Cli::try_parse_from(["karpctl", "diff", "--plan", "b.toml"]).unwrap();
        assert_eq!(old.global.plan.as_deref(), Some(std::path::Path::new("b.toml")));
        assert!(Cli::try_parse_from(["karpctl", "--config", "a", "--plan", "b", "diff"]).is_err());
    }

    #[test]
    fn many_clusters_are_all_or_a_list_never_with_one_cluster() {
        let c = Cli::try_parse_from(["karpctl", "diff", "--clusters", "a,b", "--parallel-clusters", "2"]).unwrap();
        assert_eq!(c.global.clusters, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(c.global.parallel_clusters, 2);
        assert!(Cli::try_parse_from(["karpctl", "diff", "--all"]).unwrap().global.all);
        assert!(Cli::try_parse_from(["karpctl", "diff", "--all", "--cluster", "a"]).is_err());
        assert!(Cli::try_parse_from(["karpctl", "diff", "--clusters", "a", "--cluster", "a"]).is_err());
        assert!(Cli::try_parse_from(["karpctl", "diff", "--all", "--clusters", "a"]).is_err());
    }
}
