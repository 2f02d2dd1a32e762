//! One module per subcommand, and the steps several of them share (here, so that no command
//! module reaches into another).

pub mod bench;
pub mod bundle;
pub mod completions;
pub mod deploy;
pub mod jobs;
pub mod kubeflow;
pub mod local;
pub mod logs;
pub mod new;
pub mod plan;
pub mod profile;
pub mod render;
pub mod schema;
pub mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use hetgen_local::LauncherBuild;
use hetgen_render::SpecOrigin;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;

use hetgen_spec::{Checked, Job, Report};

use crate::exit::Failure;

/// The folder a spec's relative paths (channels' `local_path`) start from.
pub fn spec_dir(spec: &Path) -> &Path {
    spec.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Reads and checks the spec at `path`.
pub fn check(path: &Path) -> Result<Checked, Failure> {
    // Bytes, not a string: a spec that is not UTF-8 is an invalid spec (exit 65) with the
    // place of its first bad byte, not a file that cannot be read.
    let bytes = std::fs::read(path).map_err(|source| Failure::Read {
        path: path.to_owned(),
        hint: if source.kind() == std::io::ErrorKind::NotFound {
            "give the spec's path, or create one with `hetgen new NAME`".to_owned()
        } else {
            "check that the file is readable".to_owned()
        },
        source,
    })?;
    // The spec's path, not only its name: a script-mode spec names files next to it.
    Ok(hetgen_spec::check_file(path, &bytes))
}

/// Reads and checks the spec; prints its problems; fails when it has errors.
pub fn load(path: &Path) -> Result<(Job, Report), Failure> {
    let checked = check(path)?;
    if !checked.report.problems.is_empty() {
        eprint!("{}", crate::output::render_report(&checked.report));
    }
    match checked.job {
        Some(job) => Ok((job, checked.report)),
        None => Err(Failure::InvalidSpec(Box::new(checked.report))),
    }
}

/// Runs an AWS call on a small runtime of its own: only the AWS commands need async.
pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a single-threaded tokio runtime starts")
        .block_on(future)
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
    let (job, report) = load(spec)?;
    let origin = SpecOrigin {
        file_name: file_name(spec),
        text: report.source.text(),
    };
    let rendered = hetgen_render::render(&job, origin)?;
    Ok((job, rendered))
}

/// The hetgen wheel a source bundle of `job` ships, by [`hetgen_render::wheel::choose`]'s rule:
/// `--wheel`, else `HETGEN_WHEEL`, else this installation packed as its wheel again, else the
/// one built beside this hetgen (release before debug; a debug build is said to be one).
fn wheel_path(given: &crate::cli::WheelArgs, job: &Job, out: &Path) -> Result<PathBuf, Failure> {
    let named = given.wheel.clone().or_else(|| {
        std::env::var_os("HETGEN_WHEEL")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    });
    let exe = std::env::current_exe().unwrap_or_default();
    let into = out.join(&job.name).join("wheel");
    let chosen = hetgen_render::wheel::choose(named.as_deref(), &exe, &into)?;
    if let hetgen_render::wheel::Chosen::Debug(wheel) = &chosen {
        eprintln!(
            "note: {} is the debug build of the hetgen wheel (`make wheel`), whose pipeline runs \
             many times slower than the release build's; `scripts/wheel.sh --release VENV` in the \
             hetgen checkout builds that, and then it is the one shipped",
            wheel.display()
        );
    }
    Ok(chosen.path().to_owned())
}

/// Writes the source bundle of `job` (rendered under `out`, from the spec at `spec`), shipping
/// the wheel [`wheel_path`] picks.
pub fn write_bundle(
    job: &Job,
    spec: &Path,
    out: &Path,
    wheel: &crate::cli::WheelArgs,
) -> Result<hetgen_render::bundle::Bundle, Failure> {
    let wheel = wheel_path(wheel, job, out)?;
    let inputs = hetgen_render::bundle::Inputs {
        job,
        spec_dir: spec_dir(spec),
        out_dir: out,
        wheel: &wheel,
    };
    Ok(hetgen_render::bundle::bundle(
        &inputs,
        &out.join(&job.name),
    )?)
}

/// Build the rendered launcher crate, showing cargo's progress on one line.
pub fn build_launcher(job_root: &Path, release: bool) -> Result<PathBuf, Failure> {
    let build = LauncherBuild::new(job_root.join("launcher"), release);
    let bar = spinner();
    bar.set_prefix("building the launcher");
    let mut last = Vec::new();
    let result = build.build(&job_root.join("local/bin/launcher"), &mut |line| {
        bar.set_message(line.trim().to_owned());
        last.push(line.to_owned());
        if last.len() > 40 {
            last.remove(0);
        }
    });
    bar.finish_and_clear();
    if result.is_err() {
        // Cargo's own words say what went wrong; show its last lines before our summary.
        for line in &last {
            eprintln!("{line}");
        }
    }
    Ok(result?)
}

/// A one-line spinner on stderr (`{prefix}: {message}`).
pub fn spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix}: {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// The profile file at `path` (`hetgen profile` writes it) read as `T`: the part a command
/// uses, or where and why it is not one.
pub fn read_profile_as<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Failure> {
    let bad = |why: String, hint: &str| Failure::Profile {
        path: path.to_owned(),
        why,
        hint: hint.to_owned(),
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(e.to_string(), "write one with `hetgen profile`"))?;
    serde_json::from_str(&text).map_err(|e| {
        let why = hetgen_env::json_error_message(&e);
        let why = format!("line {}, column {}: {why}", e.line(), e.column());
        bad(why, "write it again with `hetgen profile`")
    })
}

/// What `hetgen plan --profile` reads of a profile file; `hetgen profile` writes the whole.
#[derive(Debug, Deserialize)]
struct ProfileRates {
    /// Throughput measured, on `threads` threads.
    samples_per_s: f64,
    threads: usize,
    /// vCPUs needed to keep one GPU busy, when the GPU's rate was given.
    vcpus_per_gpu: Option<f64>,
    /// A Python dataset's needs beyond the rate.
    dataset: Option<DatasetRates>,
}

/// What `hetgen plan --profile` reads of a Python dataset's profile.
#[derive(Debug, Deserialize)]
struct DatasetRates {
    bytes_per_sample: f64,
    worker_memory_mib: f64,
}

/// What sizing takes from a profile file.
pub struct Profiled {
    /// vCPUs one GPU needs.
    pub vcpus_per_gpu: f64,
    /// Samples per second one vCPU makes.
    pub samples_per_s_per_vcpu: f64,
    /// A Python dataset's needs per data host.
    pub dataset: Option<hetgen_plan::DatasetNeeds>,
}

/// What `hetgen plan --profile` sizes with: `vcpus_per_gpu` of a profile file, its measured
/// samples/s per thread and, for a Python dataset, what a data host needs per sample.
pub fn read_profile(path: &Path) -> Result<Profiled, Failure> {
    let bad = |why: String, hint: &str| Failure::Profile {
        path: path.to_owned(),
        why,
        hint: hint.to_owned(),
    };
    let profile: ProfileRates = read_profile_as(path)?;
    let vcpus_per_gpu = profile.vcpus_per_gpu.ok_or_else(|| {
        bad(
            "it has no `vcpus_per_gpu`".to_owned(),
            "give the rate one GPU trains at: `--gpu-samples-per-s N`, or `--trainer` to time the job's script here (`hetgen profile`)",
        )
    })?;
    let rate = profile.samples_per_s / profile.threads.max(1) as f64;
    Ok(Profiled {
        vcpus_per_gpu,
        samples_per_s_per_vcpu: rate,
        dataset: profile.dataset.map(|d| hetgen_plan::DatasetNeeds {
            samples_per_s_per_vcpu: rate,
            bytes_per_sample: d.bytes_per_sample,
            worker_memory_mib: d.worker_memory_mib,
        }),
    })
}
