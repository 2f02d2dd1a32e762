//! `hetgen bundle`'s arguments, and which wheel a source bundle ships (`deploy` bundles too).

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct BundleArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to; the bundle goes to OUT/<job>/sourcedir(.tar.gz)
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    #[command(flatten)]
    pub wheel: WheelArgs,
}

/// Which hetgen wheel a source bundle ships.
#[derive(Debug, Args)]
pub struct WheelArgs {
    /// The hetgen wheel to ship (default: `HETGEN_WHEEL`, else the one `make wheel` built
    /// beside this hetgen)
    #[arg(long, value_name = "PATH")]
    pub wheel: Option<PathBuf>,
}
