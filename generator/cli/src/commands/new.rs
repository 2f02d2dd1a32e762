//! `hetgen new NAME [--example E]`: a project folder with a commented spec.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::{Example, NewArgs};
use crate::exit::Failure;

/// Where a new project keeps the schema its `#:schema` line points at, so editors complete
/// keys offline.
const SCHEMA_PATH: &str = ".hetgen/hetgen.schema.json";

/// The example's spec text and the job name it uses.
fn example(example: Example) -> (&'static str, &'static str) {
    match example {
        Example::TinyLocal => (
            include_str!("../../../../examples/tiny-local.toml"),
            "tiny-local",
        ),
        Example::MnistHetero => (
            include_str!("../../../../examples/mnist-hetero.toml"),
            "mnist-hetero",
        ),
        Example::MnistHomogeneous => (
            include_str!("../../../../examples/mnist-homogeneous.toml"),
            "mnist-homogeneous",
        ),
        Example::Resnet50P4d => (
            include_str!("../../../../examples/resnet50-p4d.toml"),
            "resnet50-p4d",
        ),
    }
}

/// The example's spec, renamed to `name`, with its `#:schema` line pointing into the project.
pub fn spec_text(which: Example, name: &str) -> String {
    let (text, example_name) = example(which);
    let renamed = text.replacen(
        &format!("\nname = \"{example_name}\"\n"),
        &format!("\nname = \"{name}\"\n"),
        1,
    );
    renamed.replacen(
        "#:schema ../schema/hetgen.schema.json",
        &format!("#:schema {SCHEMA_PATH}"),
        1,
    )
}

pub fn run(args: &NewArgs) -> Result<ExitCode, Failure> {
    let name = args.name.trim_end_matches('/');
    let job_name = Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !valid_name(job_name) {
        return Err(Failure::BadName {
            name: job_name.to_owned(),
        });
    }
    let root = PathBuf::from(name);
    if root.exists() {
        return Err(Failure::Exists { path: root });
    }
    let files = [
        ("hetgen.toml", spec_text(args.example, job_name)),
        (".gitignore", "/build/\n".to_owned()),
        (SCHEMA_PATH, hetgen_spec::schema()),
    ];
    // Stage everything in a sibling folder and rename it into place, so a failure never
    // leaves a half-made project behind.
    let staging = root.with_file_name(format!(".{job_name}.hetgen-new"));
    let create = |path: &Path, source| Failure::Create {
        path: path.to_owned(),
        source,
    };
    let result = (|| {
        for (rel, contents) in &files {
            let path = staging.join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| create(&path, e))?;
            }
            fs::write(&path, contents).map_err(|e| create(&path, e))?;
        }
        fs::rename(&staging, &root).map_err(|e| create(&root, e))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result?;
    eprintln!(
        "created `{}` from the `{}` example",
        root.display(),
        example(args.example).1
    );
    eprintln!(
        "next: cd {} && hetgen validate && hetgen render",
        root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A job name that leaves room for deploy's unique suffix.
fn valid_name(name: &str) -> bool {
    let limit = 63 - hetgen_spec::model::NAME_SUFFIX_LEN;
    !name.is_empty()
        && name.len() <= limit
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}
