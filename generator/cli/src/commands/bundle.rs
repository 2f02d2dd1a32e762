//! `hetgen bundle [SPEC] [--out DIR] [--wheel PATH]`: the source bundle of a job on AWS's
//! PyTorch image, for the SDK files (`sourcedir/`) or a look before `deploy` uploads it.

use std::process::ExitCode;

use super::{ensure_fresh, render_spec, write_bundle};
use crate::cli::BundleArgs;
use crate::exit::Failure;

pub fn run(args: &BundleArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    // A job without a bundle is told so, not that its rendered files are stale.
    hetgen_render::bundle::script(&job)?;
    // The bundle carries rendered files (the entry point, requirements, job.json): they must
    // be the spec's.
    ensure_fresh(&rendered, &args.out)?;
    let bundle = write_bundle(&job, &args.spec, &args.out, &args.wheel)?;
    println!("{}", bundle.archive.display());
    eprintln!(
        "bundled `{}`: {} files, {:.1} MiB, in {} (and {})",
        job.name,
        bundle.files.len(),
        bundle.bytes as f64 / (1024.0 * 1024.0),
        bundle.archive.display(),
        bundle.dir.display(),
    );
    Ok(ExitCode::SUCCESS)
}
