//! `hetgen completions SHELL`: the shell's completion script for every command and flag, on
//! stdout, generated from the same definitions the parser uses.

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::exit::Failure;

pub fn run(args: &CompletionsArgs) -> Result<ExitCode, Failure> {
    let mut command = Cli::command();
    let name = command.get_name().to_owned();
    clap_complete::generate(args.shell, &mut command, name, &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
