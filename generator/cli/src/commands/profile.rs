//! `hetgen profile [SPEC]`: run the spec's pipeline flat out on this machine and report what
//! sizing needs: samples/s here, CPU-seconds per sample (in total and per stage), and, given
//! the GPU's training rate, the vCPUs one GPU needs. The profile file feeds `hetgen plan`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hetgen_pipeline::profile::Measurement;
use hetgen_pipeline::{Engine, StageRegistry};
use hetgen_spec::Job;
use serde::Serialize;

use crate::cli::{Format, ProfileArgs};
use crate::exit::Failure;

/// The profile file (`hetgen plan --profile` reads its rates).
#[derive(Debug, Serialize)]
struct Profile {
    /// The spec measured.
    spec: String,
    /// The job's name.
    job: String,
    /// `[height, width, channels]` of the pipeline's output.
    output_shape: [u32; 3],
    /// What ran and how fast.
    #[serde(flatten)]
    measurement: Measurement,
    /// `--gpu-samples-per-s`, if given.
    gpu_samples_per_s: Option<f64>,
    /// vCPUs of this machine's kind needed to keep one GPU busy.
    vcpus_per_gpu: Option<f64>,
}

pub fn run(args: &ProfileArgs) -> Result<ExitCode, Failure> {
    // The allocator as the data server and the launcher tune it: they run this pipeline, and
    // the rate measured here should be theirs (BENCHMARKS.md).
    hetgen_pipeline::tune_allocator();
    let (job, _) = super::load(&args.spec)?;
    let channels = local_channels(&job, &args.spec)?;
    let pipeline_failure = |source| {
        Failure::Pipeline {
        spec: args.spec.clone(),
        hint: "the channel's local_path must hold the data the pipeline reads (a sample of it is enough)".to_owned(),
        source,
    }
    };
    let engine = Engine::new(&job, &StageRegistry::builtin(), &channels, args.threads)
        .map_err(pipeline_failure)?;
    eprintln!(
        "profiling `{}` on {} thread(s) for {:.0} s ({} samples per epoch)",
        job.name,
        engine.threads(),
        args.seconds.as_secs_f64(),
        engine.samples_per_epoch()
    );
    let measurement = hetgen_pipeline::profile::measure(
        &engine,
        job.seed,
        job.pipeline.shard_size,
        job.pipeline.batch_size,
        args.seconds,
    )
    .map_err(pipeline_failure)?;
    let vcpus_per_gpu = args
        .gpu_samples_per_s
        .map(|g| g * measurement.cpu_seconds_per_sample);
    let profile = Profile {
        spec: args.spec.display().to_string(),
        job: job.name.clone(),
        output_shape: job.pipeline.output_shape,
        measurement,
        gpu_samples_per_s: args.gpu_samples_per_s,
        vcpus_per_gpu,
    };
    let json = serde_json::to_string_pretty(&profile).expect("JSON serializes");
    write_atomically(&args.out, &json)?;
    match args.format {
        Format::Json => println!("{json}"),
        Format::Human => print!("{}", table(&profile)),
    }
    eprintln!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

fn table(p: &Profile) -> String {
    let m = &p.measurement;
    let mut out = format!(
        "{} samples in {:.1} s on {} thread(s): {:.1} samples/s, {:.2} ms CPU per sample\n\n",
        m.samples,
        m.seconds,
        m.threads,
        m.samples_per_s,
        m.cpu_seconds_per_sample * 1e3
    );
    out += &format!("{:<32} {:>14} {:>7}\n", "stage", "ms CPU/sample", "share");
    for s in &m.stages {
        out += &format!(
            "{:<32} {:>14.3} {:>6.1}%\n",
            s.name,
            s.cpu_seconds_per_sample * 1e3,
            s.share * 100.0
        );
    }
    if let (Some(g), Some(v)) = (p.gpu_samples_per_s, p.vcpus_per_gpu) {
        out += &format!(
            "\na GPU training {g:.0} samples/s needs {v:.1} vCPUs of this machine's kind\n"
        );
    }
    out
}

/// Channel name → its local folder (relative paths start at the spec's folder).
fn local_channels(job: &Job, spec: &Path) -> Result<BTreeMap<String, PathBuf>, Failure> {
    let base = super::spec_dir(spec);
    let mut out = BTreeMap::new();
    for channel in &job.channels {
        if let Some(path) = &channel.local_path {
            out.insert(channel.name.clone(), base.join(path));
        } else if job.pipeline.source.channel() == Some(channel.name.as_str()) {
            return Err(Failure::Profile {
                path: spec.to_owned(),
                why: format!(
                    "the source reads channel `{}`, which is only in `{}`",
                    channel.name, channel.uri
                ),
                hint: "give the channel a `local_path` holding a sample of the data to profile on"
                    .to_owned(),
            });
        }
    }
    Ok(out)
}

/// Write through a temporary file so a failed run never leaves half a profile.
fn write_atomically(path: &Path, text: &str) -> Result<(), Failure> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| Failure::Profile {
            path: path.to_owned(),
            why: format!("cannot write it: {e}"),
            hint: "choose a writable place with `--out`".to_owned(),
        })
}
