//! `hetgen render [SPEC] [--out DIR] [--check]`

use std::process::ExitCode;

use super::{ensure_fresh, render_spec};
use crate::cli::RenderArgs;
use crate::exit::Failure;

pub fn run(args: &RenderArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    let dir = args.out.join(&rendered.dir);
    if args.check {
        ensure_fresh(&rendered, &args.out)?;
        eprintln!("up to date: {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let written = hetgen_render::write(&rendered, &args.out)?;
    for path in &written {
        println!("{}", path.display());
    }
    eprintln!(
        "rendered `{}` into {} ({} files)",
        job.name,
        dir.display(),
        written.len()
    );
    Ok(ExitCode::SUCCESS)
}
