//! `hetgen`: validate, render and scaffold heterogeneous SageMaker training jobs.

mod cli;
mod commands;
mod exit;
mod output;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Validate(args) => commands::validate::run(&args),
        cli::Command::Render(args) => commands::render::run(&args),
        cli::Command::New(args) => commands::new::run(&args),
        cli::Command::Schema => commands::schema::run(),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            output::print_failure(&failure);
            failure.exit_code()
        }
    }
}
