//! `hetgen render [SPEC] [--out DIR] [--check]`

use std::path::Path;
use std::process::ExitCode;

use hetgen_render::SpecOrigin;

use crate::cli::RenderArgs;
use crate::exit::Failure;

pub fn run(args: &RenderArgs) -> Result<ExitCode, Failure> {
    let (job, report) = super::load(&args.spec)?;
    let origin = SpecOrigin {
        file_name: file_name(&args.spec),
        text: report.source.text(),
    };
    let rendered = hetgen_render::render(&job, origin)?;
    let dir = args.out.join(&rendered.dir);
    if args.check {
        let stale = hetgen_render::check(&rendered, &args.out);
        for s in &stale {
            match &s.diff {
                Some(diff) => eprint!("{diff}"),
                None => eprintln!("missing: {}", s.path.display()),
            }
        }
        if !stale.is_empty() {
            return Err(Failure::Stale {
                dir,
                count: stale.len(),
            });
        }
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
