//! `hetgen render`'s arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Output folder; the job's files go to OUT/<job name>/
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Write nothing; fail with a diff when the files on disk are stale
    #[arg(long)]
    pub check: bool,
}
