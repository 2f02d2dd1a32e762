//! `hetgen validate`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::Format;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}
