//! `hetgen render [SPEC] [--out DIR] [--check]`

use std::path::Path;
use std::process::ExitCode;

use hetgen_render::SpecOrigin;

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

fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("hetgen.toml")
}

/// Fails, after printing what differs, when the files under `out` are not what `rendered` is.
pub fn ensure_fresh(rendered: &hetgen_render::Rendered, out: &Path) -> Result<(), Failure> {
    let stale = hetgen_render::check(rendered, out);
    for s in &stale {
        match &s.diff {
            Some(diff) => eprint!("{diff}"),
            None => eprintln!("missing: {}", s.path.display()),
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(Failure::Stale {
            dir: out.join(&rendered.dir),
            count: stale.len(),
        })
    }
}

/// Renders the spec at `spec` in memory, for comparison with what is on disk.
pub fn render_spec(spec: &Path) -> Result<(hetgen_spec::Job, hetgen_render::Rendered), Failure> {
    let (job, report) = super::load(spec)?;
    let origin = SpecOrigin {
        file_name: file_name(spec),
        text: report.source.text(),
    };
    let rendered = hetgen_render::render(&job, origin)?;
    Ok((job, rendered))
}
