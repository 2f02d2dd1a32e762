//! `hetgen completions`'s arguments.

use clap::Args;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
