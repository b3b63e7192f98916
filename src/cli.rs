//! The command line (clap derive). Each command lists its own flags, then the many-cluster ones it
//! takes, then the global ones (`help_heading`); a flag a command would refuse is not offered to it
//! (hidden where kept for a better error). Each command's examples are its `after_help`.

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// The help section of the flags every command takes.
const GLOBAL: &str = "Global options";
/// The help section of `--all`, `--clusters` and their limits.
const MANY: &str = "Many clusters";

#[derive(Debug, Parser)]
#[command(
    name = "karpctl",
    version,
    about = "Create, diff and remove the AWS pieces Karpenter needs around an EKS cluster",
    long_about = "karpctl provisions the AWS resources Karpenter needs around an EKS cluster \
(interruption queue and rules, IAM roles and policies, access entry, Pod Identity, discovery tags) \
without Terraform and without a state file: ownership lives in tags on the AWS objects.\n\n\
Exit codes: 0 done or in sync, 1 error, 2 `diff` found changes, 130 interrupted.",
    after_help = "Examples:
  karpctl diff --cluster prod-east            # what up would change (exit 2 when out of sync)
  karpctl up --cluster prod-east              # create or repair; asks before deleting anything
  karpctl output --cluster prod-east --format helm
  karpctl doctor --cluster prod-east          # diagnose a setup, whoever made it
  karpctl <command> --help                    # each command's flags and examples"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes (except `completions`, which hides them).
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// EKS cluster name (default: KARPCTL_CLUSTER, or the only plan in plans/)
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub cluster: Option<String>,
    /// The cluster's settings file, TOML (default: plans/<cluster>.toml if it exists, else built-in
    /// defaults). Not a saved plan: that is `diff --out FILE` / `up --plan-file FILE`
    #[arg(long, global = true, value_name = "FILE", conflicts_with = "plan", help_heading = GLOBAL)]
    pub config: Option<PathBuf>,
    /// Deprecated spelling of --config
    #[arg(long, global = true, value_name = "FILE", hide = true)]
    pub plan: Option<PathBuf>,
    /// AWS region (default: the plan's `region`, then AWS_REGION / the profile)
    #[arg(long, global = true, value_name = "REGION", help_heading = GLOBAL)]
    pub region: Option<String>,
    /// AWS shared-config profile to use
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    pub profile: Option<String>,
    /// Send every AWS call to this endpoint (an emulator); AWS_ENDPOINT_URL works too
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub endpoint_url: Option<String>,
    /// Most AWS requests in flight at once (and most steps and node reads); 1 makes one call at a time
    #[arg(long, global = true, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256), help_heading = GLOBAL)]
    pub concurrency: u32,
    /// Print AWS call counts (by service and operation, retries separately) after the run
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub stats: bool,
    /// More logging on stderr (-vv for SDK details; credentials are never logged)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    pub verbose: u8,
    /// Only errors on stderr; no progress
    #[arg(short, long, global = true, conflicts_with = "verbose", help_heading = GLOBAL)]
    pub quiet: bool,
}

/// `--all` / `--clusters` and their limits (`diff`, `up`, `output`; `down` without `--all`).
#[derive(Debug, Args, Clone, Default)]
pub struct Many {
    /// Every plan in plans/, clusters run concurrently
    #[arg(long, conflicts_with_all = ["cluster", "clusters", "config", "plan"], help_heading = MANY)]
    pub all: bool,
    /// These clusters (comma-separated; their plans/<name>.toml or defaults), run concurrently
    #[arg(long, value_name = "A,B,...", value_delimiter = ',', conflicts_with_all = ["cluster", "config", "plan"], help_heading = MANY)]
    pub clusters: Option<Vec<String>>,
    /// Most clusters in flight at once (each keeps its own --concurrency)
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), help_heading = MANY)]
    pub parallel_clusters: u32,
    /// Most AWS requests in flight at once per account, across its clusters
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), help_heading = MANY)]
    pub account_concurrency: u32,
}

/// What `up`, `down`, `doctor` and `import` print on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    #[default]
    Human,
    Json,
}

/// What `diff` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DiffOutput {
    #[default]
    Human,
    Json,
    /// GitHub-flavoured Markdown for a pull-request comment
    Markdown,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or repair everything the plan describes, and remove what it no longer names
    #[command(after_help = "Examples:
  karpctl up --cluster prod-east                   # shows the plan; on a terminal asks before deleting or replacing
  karpctl up --cluster prod-east --yes             # no question (without a terminal, as in CI, it never asks)
  karpctl diff --cluster prod-east --out plan.json && karpctl up --plan-file plan.json   # exactly the reviewed steps
  karpctl up --cluster prod-east --adopt           # take over what Terraform or eksctl made (see `karpctl import`)
  karpctl up --clusters prod-east,prod-west --yes  # several clusters at once")]
    Up(UpArgs),
    /// Show what `up` would change; exit 2 when out of sync, 0 when in sync
    #[command(after_help = "Examples:
  karpctl diff --cluster prod-east                 # the plan, like `terraform plan`; exit 2 when out of sync
  karpctl diff --cluster prod-east --out plan.json # save it for `karpctl up --plan-file plan.json`
  karpctl diff --all --output markdown >diff.md    # every plans/*.toml, as a pull-request comment")]
    Diff(DiffArgs),
    /// Remove everything karpctl made for the cluster, and nothing else
    #[command(
        after_help = "Examples:
  karpctl down --cluster old-east                  # shows what goes, asks for 'yes' on a terminal
  karpctl down --cluster old-east --yes            # no question (needed without a terminal)
  karpctl down --clusters old-a,old-b --yes        # several clusters: name each one",
        mut_arg("all", |a| a.hide(true))
    )]
    Down(DownArgs),
    /// Print what to pass on to Karpenter (Helm values, EC2NodeClass and NodePool), read from live AWS
    #[command(after_help = "Examples:
  karpctl output --cluster prod-east --format helm >values.yaml   # then the helm command on its first line
  karpctl output --cluster prod-east --format manifests | kubectl apply -f -   # an EC2NodeClass and a NodePool
  karpctl output --cluster prod-east               # everything as JSON
  karpctl output --all --format helm")]
    Output(OutputArgs),
    /// Diagnose the Karpenter setup around a cluster, whoever made it (reads only); exit 2 on findings
    #[command(after_help = "Examples:
  karpctl doctor --cluster prod-east
  karpctl doctor --cluster prod-east --karpenter-version 1.12 --output json
  karpctl doctor --cluster prod-east --namespace karpenter --queue Karpenter-prod-east
  karpctl doctor --cluster prod-east --simulate    # also ask IAM's policy simulator (SCPs, boundary)")]
    Doctor(DoctorArgs),
    /// Write a plan that takes over a setup made by Terraform or CloudFormation (reads only)
    #[command(after_help = "Examples:
  karpctl import --cluster prod-east --karpenter-version 1.12   # writes plans/prod-east.toml, prints the let-go steps
  karpctl up --cluster prod-east --adopt                        # then take it over")]
    Import(ImportArgs),
    /// Print shell completions
    #[command(after_help = "Examples:
  karpctl completions bash >/etc/bash_completion.d/karpctl
  karpctl completions zsh >\"${fpath[1]}/_karpctl\"")]
    Completions {
        /// Shell to generate completions for
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Do not ask before deleting or replacing (on a terminal `up` asks when the plan does;
    /// without a terminal it never asks)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Take over unowned objects of the expected names (migrating from Terraform or eksctl)
    #[arg(long)]
    pub adopt: bool,
    /// Apply exactly the steps of a plan saved by `diff --out` (reviewed: no question); refuse if
    /// AWS changed since
    #[arg(long, value_name = "FILE", conflicts_with = "adopt")]
    pub plan_file: Option<PathBuf>,
    /// During an identity.mode switch: remove the old path now (the IRSA trust statement, or the
    /// Pod Identity statement and association) without waiting for CloudTrail to show the
    /// controller on the new one; only once the new path is in place (docs/reference.md)
    #[arg(long, conflicts_with = "plan_file")]
    pub finish_identity_switch: bool,
    /// How far back to read CloudTrail for the running Karpenter (90s, 30m, 2h, 1d; default 1h
    /// or KARPCTL_TRAIL_WINDOW)
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::parse_trail_window)]
    pub trail_window: Option<std::time::Duration>,
    /// Output format on stdout
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
    #[command(flatten)]
    pub many: Many,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Show what `up --adopt` would do
    #[arg(long)]
    pub adopt: bool,
    /// Save the plan to FILE for `up --plan-file`
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Show what `up --finish-identity-switch` would do
    #[arg(long)]
    pub finish_identity_switch: bool,
    /// How far back to read CloudTrail for the running Karpenter (90s, 30m, 2h, 1d; default 1h
    /// or KARPCTL_TRAIL_WINDOW)
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::parse_trail_window)]
    pub trail_window: Option<std::time::Duration>,
    /// Output format on stdout
    #[arg(long, value_enum, default_value_t = DiffOutput::Human)]
    pub output: DiffOutput,
    #[command(flatten)]
    pub many: Many,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// What to print: Helm values, an EC2NodeClass, an EC2NodeClass and a NodePool (for
    /// `kubectl apply`), or everything as JSON (`--output` is the same flag)
    #[arg(long, visible_alias = "output", value_enum, default_value_t = OutputFormat::Json)]
    pub format: OutputFormat,
    /// With `--format caller-policy`: the commands the policy lets run (comma-separated or
    /// repeated; default all)
    #[arg(long = "for", value_name = "COMMAND", value_enum, value_delimiter = ',')]
    pub for_commands: Vec<PolicyFor>,
    #[command(flatten)]
    pub many: Many,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Helm values for the karpenter chart, the install command on the first line
    Helm,
    /// An EC2NodeClass
    Nodeclass,
    /// An EC2NodeClass and a NodePool that uses it, ready for `kubectl apply -f -`
    Manifests,
    /// Everything as one JSON document
    Json,
    /// The IAM policy karpctl itself needs for the plan (`--for diff,up,...`; docs/security.md)
    CallerPolicy,
}

/// A command whose needs `output --format caller-policy` grants (`--for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum PolicyFor {
    Diff,
    Up,
    Down,
    Doctor,
    Import,
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
    /// How far back to read CloudTrail for the running Karpenter (90s, 30m, 2h, 1d; default 1h
    /// or KARPCTL_TRAIL_WINDOW)
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::parse_trail_window)]
    pub trail_window: Option<std::time::Duration>,
    /// Also ask IAM's policy simulator whether an SCP or a permissions boundary denies the
    /// controller role actions of Karpenter's permission set (iam:SimulatePrincipalPolicy)
    #[arg(long)]
    pub simulate: bool,
    /// Output format on stdout
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Replace the plan file if it exists
    #[arg(long)]
    pub force: bool,
    /// The Terraform address of the karpenter module, for `terraform state rm` (the whole module)
    #[arg(long, default_value = "module.karpenter", value_name = "ADDRESS")]
    pub terraform_module: String,
    /// The Karpenter release the cluster runs (1.0 to 1.14; default: the one CloudTrail shows running;
    /// `helm list -n <namespace>` shows it)
    #[arg(long, value_name = "VERSION")]
    pub karpenter_version: Option<String>,
    /// How far back to read CloudTrail for the running Karpenter (90s, 30m, 2h, 1d; default 1h
    /// or KARPCTL_TRAIL_WINDOW)
    #[arg(long, value_name = "DURATION", value_parser = crate::settings::parse_trail_window)]
    pub trail_window: Option<std::time::Duration>,
    /// Karpenter's namespace
    #[arg(long, default_value = "kube-system", value_name = "NS")]
    pub namespace: String,
    /// Karpenter's service account
    #[arg(long, default_value = "karpenter", value_name = "NAME")]
    pub service_account: String,
    /// Output format on stdout
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Do not ask for confirmation (required when not on a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Output format on stdout
    #[arg(long, value_enum, default_value_t = Output::Human)]
    pub output: Output,
    #[command(flatten)]
    pub many: Many,
}

impl Command {
    /// The many-cluster flags of this command (default: one cluster).
    pub fn many(&self) -> Many {
        match self {
            Command::Up(a) => a.many.clone(),
            Command::Diff(a) => a.many.clone(),
            Command::Down(a) => a.many.clone(),
            Command::Output(a) => a.many.clone(),
            Command::Doctor(_) | Command::Import(_) | Command::Completions { .. } => Many::default(),
        }
    }
}

/// The clap command: `Cli`'s, with the global flags hidden on `completions` (it takes none).
/// clap does not hand a global flag down to a subcommand that has a flag of the same id, so
/// `completions` gets hidden, ignored copies (changed before the command is built: an argument
/// changed after it breaks clap's index of flags).
pub fn command() -> clap::Command {
    let c = Cli::command();
    let globals: Vec<clap::Arg> = c.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    c.mut_subcommand("completions", |s| globals.into_iter().fold(s, |s, a| s.arg(a.global(false).hide(true))))
}

/// Parse the process's arguments.
pub fn parse() -> Result<Cli, clap::Error> {
    let mut c = command();
    let m = c.try_get_matches_from_mut(std::env::args_os())?;
    Cli::from_arg_matches(&m).map_err(|e| e.format(&mut c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_from(args: &[&str]) -> Result<Cli, clap::Error> {
        let m = command().try_get_matches_from(args)?;
        Cli::from_arg_matches(&m)
    }

    #[test]
    fn config_is_the_settings_file_and_plan_its_deprecated_spelling() {
        let c = parse_from(&["karpctl", "--config", "a.toml", "diff"]).unwrap();
        assert_eq!(c.global.config.as_deref(), Some(std::path::Path::new("a.toml")));
        let old = parse_from(&["karpctl", "diff", "--plan", "b.toml"]).unwrap();
        assert_eq!(old.global.plan.as_deref(), Some(std::path::Path::new("b.toml")));
        assert!(parse_from(&["karpctl", "--config", "a", "--plan", "b", "diff"]).is_err());
    }

    #[test]
    fn many_clusters_are_all_or_a_list_never_with_one_cluster() {
        let c = parse_from(&["karpctl", "diff", "--clusters", "a,b", "--parallel-clusters", "2"]).unwrap();
        assert_eq!(c.command.many().clusters, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(c.command.many().parallel_clusters, 2);
        assert!(parse_from(&["karpctl", "diff", "--all"]).unwrap().command.many().all);
        assert!(parse_from(&["karpctl", "diff", "--all", "--cluster", "a"]).is_err());
        assert!(parse_from(&["karpctl", "diff", "--clusters", "a", "--cluster", "a"]).is_err());
        assert!(parse_from(&["karpctl", "diff", "--all", "--clusters", "a"]).is_err());
        // Commands of one cluster do not take them.
        assert!(parse_from(&["karpctl", "doctor", "--all"]).is_err());
        assert!(parse_from(&["karpctl", "import", "--clusters", "a"]).is_err());
    }

    #[test]
    fn output_takes_format_or_output_as_one_flag() {
        for flag in ["--format", "--output"] {
            let c = parse_from(&["karpctl", "output", flag, "manifests"]).unwrap();
            let Command::Output(a) = c.command else { panic!() };
            assert_eq!(a.format, OutputFormat::Manifests);
        }
        assert!(parse_from(&["karpctl", "output", "--format", "helm", "--output", "json"]).is_err());
    }

    #[test]
    fn markdown_is_offered_to_diff_only() {
        assert!(parse_from(&["karpctl", "diff", "--output", "markdown"]).is_ok());
        for cmd in ["up", "down", "doctor", "import"] {
            assert!(parse_from(&["karpctl", cmd, "--output", "markdown"]).is_err(), "{cmd}");
            assert!(parse_from(&["karpctl", cmd, "--output", "json"]).is_ok(), "{cmd}");
        }
    }

    #[test]
    fn help_shows_own_flags_first_and_no_refused_flag() {
        let help = |name: &str| {
            let mut c = command();
            c.build();
            c.find_subcommand_mut(name).unwrap().render_long_help().to_string()
        };
        let up = help("up");
        let own = up.find("--yes").unwrap();
        assert!(own < up.find("--all").unwrap() && up.find("--all").unwrap() < up.find("--cluster ").unwrap(), "{up}");
        assert!(up.contains("Examples:"), "{up}");
        assert!(!help("down").contains("--all"), "down refuses --all: {}", help("down"));
        assert!(help("down").contains("--clusters"));
        for cmd in ["doctor", "import"] {
            let h = help(cmd);
            assert!(!h.contains("--all") && !h.contains("--clusters") && !h.contains("markdown"), "{cmd}: {h}");
        }
        assert!(!help("up").contains("markdown"));
        assert!(help("diff").contains("markdown"));
        let completions = help("completions");
        assert!(!completions.contains("--cluster") && !completions.contains("--output"), "{completions}");
        // ... and still ignores them, as before.
        assert!(parse_from(&["karpctl", "completions", "bash", "--cluster", "x", "-v"]).is_ok());
        assert!(parse_from(&["karpctl", "--cluster", "x", "completions", "bash"]).is_ok());
    }
}
