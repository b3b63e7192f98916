//! karpctl: the AWS pieces Karpenter needs around an EKS cluster, without Terraform.

#[cfg(test)]
mod architecture;
mod arns;
mod aws;
mod caller_policy;
mod catalog;
mod checks;
mod cli;
mod ctx;
mod desired;
mod doctor;
mod egress;
mod engine;
mod error;
mod events;
mod executor;
mod exit;
mod facts;
mod fleet;
mod gather;
mod identity_switch;
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
mod policy;
mod prepare;
mod report;
mod resources;
mod running;
mod scope;
mod settings;
mod spec;
mod suggest;
mod tags;
mod upgrade;

use cli::Command;

fn init_tracing(verbose: u8, quiet: bool, log_filter: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let base = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "warn,karpctl=debug",
        (false, _) => "info,karpctl=trace,aws_smithy_runtime=debug,aws_config=debug",
    };
    // Signing and credential internals can carry secrets (session tokens in canonical
    // requests): they are never logged, whatever RUST_LOG says.
    let filter = format!("{},aws_sigv4=off,aws_credential_types=off,aws_runtime::auth=off", log_filter.unwrap_or(base));
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

/// The engine's options from the parsed flags: the global ones, and the command's output
/// format and many-cluster flags (the engine never sees the clap structs).
fn options(g: &cli::Global, command: &Command, settings: std::sync::Arc<settings::Settings>) -> options::Options {
    use options::Format;
    let plain = |o: cli::Output| match o {
        cli::Output::Human => Format::Human,
        cli::Output::Json => Format::Json,
    };
    let output = match command {
        Command::Up(a) => plain(a.output),
        Command::Down(a) => plain(a.output),
        Command::Doctor(a) => plain(a.output),
        Command::Import(a) => plain(a.output),
        Command::Diff(a) => match a.output {
            cli::DiffOutput::Human => Format::Human,
            cli::DiffOutput::Json => Format::Json,
            cli::DiffOutput::Markdown => Format::Markdown,
        },
        // `output --format json` prints JSON, errors included; the other formats are text.
        Command::Output(a) if a.format == cli::OutputFormat::Json => Format::Json,
        Command::Output(_) | Command::Completions { .. } => Format::Human,
    };
    let many = command.many();
    // `--trail-window` replaces KARPCTL_TRAIL_WINDOW for this run.
    let window = match command {
        Command::Up(a) => a.trail_window,
        Command::Diff(a) => a.trail_window,
        Command::Doctor(a) => a.trail_window,
        Command::Import(a) => a.trail_window,
        _ => None,
    };
    let settings = match window {
        Some(w) => std::sync::Arc::new(settings::Settings { trail_window: w, ..(*settings).clone() }),
        None => settings,
    };
    let finish_identity_switch = match command {
        Command::Up(a) => a.finish_identity_switch,
        Command::Diff(a) => a.finish_identity_switch,
        _ => false,
    };
    options::Options {
        cluster: g.cluster.clone(),
        config: g.config.clone().or_else(|| g.plan.clone()),
        plan_flag: g.plan.is_some(),
        region: g.region.clone(),
        profile: g.profile.clone(),
        endpoint_url: g.endpoint_url.clone(),
        concurrency: g.concurrency,
        output,
        stats: g.stats,
        quiet: g.quiet,
        all: many.all,
        clusters: many.clusters,
        parallel_clusters: many.parallel_clusters,
        account_concurrency: many.account_concurrency,
        scope: None,
        settings,
        finish_identity_switch,
    }
}

fn main() {
    // Usage errors exit 1 (not clap's 2, which means "diff found changes" here).
    let cli = match cli::parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { exit::EXIT_ERROR } else { exit::EXIT_OK });
        }
    };
    // The environment, read once: everything below takes it from here.
    let settings = std::sync::Arc::new(settings::Settings::from_env());
    init_tracing(cli.global.verbose, cli.global.quiet, settings.log_filter.as_deref());
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut cli::command(), "karpctl", &mut std::io::stdout());
        return;
    }
    let opts = options(&cli.global, &cli.command, settings);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let printer = report::Printer::new(&opts);
    report::set_run(
        fleet_name(&cli.command),
        &match (&opts.cluster, &opts.clusters) {
            (_, Some(c)) => format!("--clusters {}", c.join(",")),
            _ if opts.all => "--all".to_string(),
            (Some(c), _) => format!("--cluster {c}"),
            (None, None) => {
                opts.settings.cluster.as_ref().map(|c| format!("--cluster {c}")).unwrap_or_else(|| "--cluster <cluster>".into())
            }
        },
    );
    let (name, result) = rt.block_on(async {
        interrupt::install_interrupt_handler(report::interrupt_notice);
        if (opts.all || opts.clusters.is_some()) && (opts.cluster.is_some() || opts.config.is_some()) {
            // clap checks this when both follow the command; a global flag given before it is not.
            let e = error::UserError::new("--all and --clusters name the clusters themselves: not with --cluster or --config")
                .hint("drop --cluster/--config, or run one cluster without --all/--clusters");
            return ("karpctl", Err(e.into()));
        }
        if let Command::Output(a) = &cli.command
            && a.format != cli::OutputFormat::CallerPolicy
            && !a.for_commands.is_empty()
        {
            let e = error::UserError::new("--for names the commands of `--format caller-policy` only")
                .hint("add --format caller-policy, or drop --for");
            return ("output", Err(e.into()));
        }
        if let Command::Output(a) = &cli.command
            && a.format == cli::OutputFormat::CallerPolicy
        {
            return (
                "output",
                fleet::caller_policy(&opts, &a.for_commands).await.map(|v| printer.values(&v)).map(|_| exit::EXIT_OK),
            );
        }
        if let Some(r) = fleet::dispatch(&opts, &cli.command).await {
            return (fleet_name(&cli.command), r.map(|f| printer.fleet(&f)));
        }
        let plan = |r: anyhow::Result<report::PlanReport>| r.map(|r| printer.plan(&r));
        match &cli.command {
            Command::Up(a) => match &a.plan_file {
                Some(f) => ("up", plan(engine::up_saved(&opts, f).await)),
                None => ("up", plan(engine::up(&opts, a.adopt, a.yes).await)),
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
            // An error after Ctrl-C (a write before the plan's steps, stopped) is the interrupt's.
            if interrupt::stopping() { exit::EXIT_INTERRUPTED } else { exit::EXIT_ERROR }
        }
    };
    // Do not wait for lingering SDK connections.
    rt.shutdown_background();
    std::process::exit(code);
}
