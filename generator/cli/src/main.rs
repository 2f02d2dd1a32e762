//! `hetgen`: validate, render, deploy and run heterogeneous training jobs, on Amazon SageMaker
//! or on Kubernetes as Kubeflow Trainer jobs.

mod cli;
mod commands;
mod exit;
mod first_raise;
mod follow;
mod output;
mod view;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Validate(args) => commands::validate::run(&args),
        cli::Command::Render(args) => commands::render::run(&args),
        cli::Command::New(args) => commands::new::run(&args),
        cli::Command::Schema => commands::schema::run(),
        cli::Command::Deploy(args) if args.local.local => commands::local::run(&args),
        cli::Command::Deploy(args) if args.engine == cli::Engine::Kubeflow => {
            commands::kubeflow::deploy(&args)
        }
        cli::Command::Deploy(args) => commands::deploy::run(&args),
        cli::Command::Bundle(args) => commands::bundle::run(&args),
        cli::Command::Status(args) if args.engine == cli::Engine::Kubeflow => {
            commands::kubeflow::status(&args)
        }
        cli::Command::Status(args) => commands::jobs::status(&args),
        cli::Command::Stop(args) if args.engine == cli::Engine::Kubeflow => {
            commands::kubeflow::stop(&args)
        }
        cli::Command::Stop(args) => commands::jobs::stop(&args),
        cli::Command::List(args) => commands::jobs::list(&args),
        cli::Command::Logs(args) => commands::logs::run(&args),
        cli::Command::Plan(args) => commands::plan::plan(&args),
        cli::Command::Compare(args) => commands::plan::compare(&args),
        cli::Command::Profile(args) => commands::profile::run(&args),
        cli::Command::Bench(args) => commands::bench::run(&args),
        cli::Command::Completions(args) => commands::completions::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            output::print_failure(&failure);
            failure.exit_code()
        }
    }
}
