//! karpctl: the AWS pieces Karpenter needs around an EKS cluster, without Terraform.

#[cfg(test)]
mod architecture;
mod arns;
mod aws;
mod catalog;
mod cli;
mod desired;
mod discovery;
mod doctor;
mod egress;
mod engine;
mod error;
mod events;
mod executor;
mod exit;
mod facts;
mod fleet;
mod import;
mod interrupt;
mod karpenter_iam;
mod karpenter_values;
mod model;
mod names;
mod observe;
mod options;
mod plan_file;
mod planner;
mod policy_doc;
mod preflight;
mod prepare;
mod readiness;
mod report;
mod resources;
mod scope;
mod spec;
mod suggest;
mod tags;

use clap::{CommandFactory, Parser};
use cli::{Cli, Command};

fn init_tracing(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let base = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "warn,karpctl=debug",
        (false, _) => "info,karpctl=trace,aws_smithy_runtime=debug,aws_config=debug",
    };
    // Signing and credential internals can carry secrets (session tokens in canonical
    // requests): they are never logged, whatever RUST_LOG says.
    let filter = format!(
        "{},aws_sigv4=off,aws_credential_types=off,aws_runtime::auth=off",
        std::env::var("RUST_LOG").unwrap_or_else(|_| base.to_string())
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn fleet_name(c: &Command) -> &'static str {
    match c {
        Command::Up(_) => "up",
        Command::Diff(_) => "diff",
        Command::Down(_) => "down",
        Command::Doctor(_) => "doctor",
        Command::Import(_) => "import",
        _ => "output",
    }
}

/// The engine's options from the parsed global flags (the engine never sees the clap struct).
fn options(g: &cli::Global) -> options::Options {
    options::Options {
        cluster: g.cluster.clone(),
        config: g.config.clone().or_else(|| g.plan.clone()),
        plan_flag: g.plan.is_some(),
        region: g.region.clone(),
        profile: g.profile.clone(),
        endpoint_url: g.endpoint_url.clone(),
        concurrency: g.concurrency,
        output: match g.output {
            cli::Output::Human => options::Format::Human,
            cli::Output::Json => options::Format::Json,
            cli::Output::Markdown => options::Format::Markdown,
        },
        stats: g.stats,
        quiet: g.quiet,
        all: g.all,
        clusters: g.clusters.clone(),
        parallel_clusters: g.parallel_clusters,
        account_concurrency: g.account_concurrency,
        scope: None,
    }
}

fn main() {
    // Usage errors exit 1 (not clap's 2, which means "diff found changes" here).
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { exit::EXIT_ERROR } else { exit::EXIT_OK });
        }
    };
    init_tracing(cli.global.verbose, cli.global.quiet);
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "karpctl", &mut std::io::stdout());
        return;
    }
    let opts = options(&cli.global);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let printer = report::Printer::new(&opts);
    let (name, result) = rt.block_on(async {
        interrupt::install_interrupt_handler();
        if opts.output == options::Format::Markdown && !matches!(cli.command, Command::Diff(_)) {
            let e = error::UserError::new("--output markdown is for `karpctl diff` (a pull-request comment)")
                .hint("use --output human or json with this command");
            return ("karpctl", Err(e.into()));
        }
        if let Some(r) = fleet::dispatch(&opts, &cli.command).await {
            return (fleet_name(&cli.command), r.map(|f| printer.fleet(&f)));
        }
        let plan = |r: anyhow::Result<report::PlanReport>| r.map(|r| printer.plan(&r));
        match &cli.command {
            Command::Up(a) => match &a.plan_file {
                Some(f) => ("up", plan(engine::up_saved(&opts, f).await)),
                None => ("up", plan(engine::up(&opts, a.adopt).await)),
            },
            Command::Diff(a) => ("diff", plan(engine::diff(&opts, a.adopt, a.out.as_deref()).await)),
            Command::Output(a) => (
                "output",
                crate::karpenter_values::run(&opts, a.format).await.map(|v| {
                    printer.values(&v);
                    exit::EXIT_OK
                }),
            ),
            Command::Down(a) => ("down", plan(engine::down(&opts, a.yes).await)),
            Command::Doctor(a) => ("doctor", doctor::run(&opts, a).await.map(|r| printer.doctor(&r))),
            Command::Import(a) => {
                let args = import::ImportOptions {
                    force: a.force,
                    terraform_module: a.terraform_module.clone(),
                    karpenter_version: a.karpenter_version.clone(),
                    namespace: a.namespace.clone(),
                    service_account: a.service_account.clone(),
                };
                ("import", import::run(&opts, &args).await.map(|r| printer.import(&r)))
            }
            Command::Completions { .. } => unreachable!("handled above"),
        }
    });
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            printer.error(&e, name);
            if opts.output == options::Format::Human {
                printer.stats_after_error();
            }
            exit::EXIT_ERROR
        }
    };
    // Do not wait for lingering SDK connections.
    rt.shutdown_background();
    std::process::exit(code);
}
