//! `hetgen profile [SPEC]`: run the spec's pipeline flat out on this machine and report what
//! sizing needs: samples/s here, CPU-seconds per sample, and, given the GPU's training rate,
//! the vCPUs one GPU needs. The profile file feeds `hetgen plan --profile`.
//!
//! - A built-in image pipeline runs in hetgen's engine on a thread pool; the report has the
//!   CPU time per stage.
//! - A Python dataset (`format = "python"`) runs in hetgen's own worker processes, as a data
//!   host runs it (the same seeding, collate and shared-memory batches), first on one worker,
//!   then on every core it may use; the report adds the bytes per sample on the wire, each
//!   worker's memory, the dataset's start-up time and how the rate scales.
//! - `--trainer` times the job's own script too (`hetgen_local::trainer_rate`): the GPU's rate
//!   measured rather than typed in with `--gpu-samples-per-s`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hetgen_local::trainer_rate::{self, TrainerRate, TrainerRun};
use hetgen_pipeline::profile::{Measurement, Progress, Shape, WorkersRun};
use hetgen_pipeline::python::{PythonSetup, Workers};
use hetgen_pipeline::{Batches, Engine, PipelineError, StageRegistry};
use hetgen_spec::Job;
use hetgen_spec::model::{PythonRef, Source};
use indicatif::{ProgressBar, ProgressStyle};
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
    /// `[height, width, channels]` of the pipeline's output (zeros for a Python dataset).
    output_shape: [u32; 3],
    /// What ran and how fast: for a Python dataset, the run on every worker.
    #[serde(flatten)]
    measurement: Measurement,
    /// A Python dataset's measure beyond the rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    dataset: Option<DatasetProfile>,
    /// `--trainer`'s measure of the script.
    #[serde(skip_serializing_if = "Option::is_none")]
    trainer: Option<TrainerProfile>,
    /// Samples per second one GPU trains at: `--gpu-samples-per-s`, or `--trainer`'s.
    gpu_samples_per_s: Option<f64>,
    /// vCPUs of this machine's kind needed to keep one GPU busy.
    vcpus_per_gpu: Option<f64>,
}

/// A Python dataset, run by hetgen's workers.
#[derive(Debug, Serialize)]
struct DatasetProfile {
    /// `file.py:factory`.
    dataset: String,
    /// The interpreter that ran the workers.
    python: PathBuf,
    /// Seconds until every worker had built the dataset (the run on every worker).
    startup_s: f64,
    /// Bytes per sample of the batches the data host sends.
    bytes_per_sample: f64,
    /// The largest worker's proportional memory (shared libraries divided among the workers):
    /// a data host runs one worker per vCPU.
    worker_memory_mib: f64,
    /// The largest worker's resident memory.
    worker_rss_mib: f64,
    /// One worker, then every core.
    runs: Vec<WorkersRun>,
    /// The last run's samples/s per worker against the first's: 1 when the rate grows with
    /// the workers.
    scaling: f64,
}

/// The script's rate, and what it ran.
#[derive(Debug, Serialize)]
struct TrainerProfile {
    /// The script, relative to its `source_dir`.
    script: String,
    #[serde(flatten)]
    rate: TrainerRate,
}

const MIB: f64 = 1024.0 * 1024.0;

pub fn run(args: &ProfileArgs) -> Result<ExitCode, Failure> {
    // The allocator as the data server and the launcher tune it: they run this pipeline, and
    // the rate measured here should be theirs (BENCHMARKS.md).
    hetgen_pipeline::tune_allocator();
    let (job, _) = super::load(&args.spec)?;
    let channels = local_channels(&job, &args.spec)?;
    let mut profile = match &job.pipeline.source {
        Source::Python {
            dataset,
            collate,
            channel,
        } => {
            let path = channels.get(channel).cloned().unwrap_or_default();
            let python = python_setup(args, &job);
            profile_dataset(args, &job, &python, (dataset, collate.as_ref()), &path)?
        }
        _ => profile_engine(args, &job, &channels)?,
    };
    if args.trainer {
        let rate = profile_trainer(args, &job, &channels)?;
        profile.gpu_samples_per_s = Some(rate.rate.samples_per_s);
        profile.trainer = Some(rate);
    }
    profile.vcpus_per_gpu = profile
        .gpu_samples_per_s
        .map(|g| vcpus_per_gpu(&profile, g));
    let json = serde_json::to_string_pretty(&profile).expect("JSON serializes");
    write_atomically(&args.out, &json)?;
    match args.format {
        Format::Json => println!("{json}"),
        Format::Human => print!("{}", table(&profile)),
    }
    eprintln!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// vCPUs one GPU training `gpu` samples/s needs. The built-in pipeline's threads are busy
/// only while they compute, so its CPU time counts; a Python worker holds its vCPU for the
/// whole of `__getitem__` (waiting on a file included), so its wall time per sample counts.
fn vcpus_per_gpu(profile: &Profile, gpu: f64) -> f64 {
    let m = &profile.measurement;
    match &profile.dataset {
        Some(_) => gpu * m.threads as f64 / m.samples_per_s.max(1e-9),
        None => gpu * m.cpu_seconds_per_sample,
    }
}

/// The pipeline's failure, with the hint every profile gives.
fn pipeline_failure(spec: &Path) -> impl Fn(PipelineError) -> Failure + '_ {
    move |source| {
        Failure::Pipeline {
        spec: spec.to_owned(),
        hint: "the channel's local_path must hold the data the pipeline reads (a sample of it is enough)".to_owned(),
        source,
    }
    }
}

/// The built-in image pipeline on hetgen's engine.
fn profile_engine(
    args: &ProfileArgs,
    job: &Job,
    channels: &BTreeMap<String, PathBuf>,
) -> Result<Profile, Failure> {
    let failure = pipeline_failure(&args.spec);
    let engine =
        Engine::new(job, &StageRegistry::builtin(), channels, args.threads).map_err(&failure)?;
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
    .map_err(failure)?;
    Ok(Profile {
        spec: args.spec.display().to_string(),
        job: job.name.clone(),
        output_shape: job.pipeline.output_shape,
        measurement,
        dataset: None,
        trainer: None,
        gpu_samples_per_s: args.gpu_samples_per_s,
        vcpus_per_gpu: None,
    })
}

/// The folder the job's Python files are relative to: the script's `source_dir`, else the
/// spec's folder.
fn code_dir(args: &ProfileArgs, job: &Job) -> PathBuf {
    let base = super::spec_dir(&args.spec);
    let dir = match job.trainer.script() {
        Some(script) => base.join(&script.source_dir),
        None => base.to_owned(),
    };
    std::path::absolute(&dir).unwrap_or(dir)
}

/// `--python`, else `HETGEN_PYTHON`, else the `python3` beside this executable (a venv's
/// `bin`, where pip installed both), else `python3` on `PATH`.
fn python(args: &ProfileArgs) -> PathBuf {
    if let Some(python) = &args.python {
        return python.clone();
    }
    if let Some(python) = std::env::var_os(hetgen_env::PYTHON_VAR).filter(|v| !v.is_empty()) {
        return python.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("python3")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// How the workers run Python here: as a data host does, with the job's hyperparameters.
fn python_setup(args: &ProfileArgs, job: &Job) -> PythonSetup {
    PythonSetup {
        python: python(args),
        code_dir: code_dir(args, job),
        hyperparameters: job
            .sagemaker
            .as_ref()
            .map(|sm| sm.hyperparameters.clone())
            .unwrap_or_default(),
    }
}

/// A Python dataset on one worker, then on `--threads` (default: every core this process may
/// use), each timed for `--seconds`.
fn profile_dataset(
    args: &ProfileArgs,
    job: &Job,
    python: &PythonSetup,
    (dataset, collate): (&PythonRef, Option<&PythonRef>),
    path: &Path,
) -> Result<Profile, Failure> {
    let failure = pipeline_failure(&args.spec);
    let all = args
        .threads
        .unwrap_or_else(hetgen_pipeline::available_cores)
        .max(1);
    let shape = Shape {
        seed: job.seed,
        shard_size: job.pipeline.shard_size,
        batch_size: job.pipeline.batch_size,
    };
    let counts: Vec<usize> = if all == 1 { vec![1] } else { vec![1, all] };
    let mut runs = Vec::new();
    for workers in counts {
        let bar = spinner(format!("{workers} worker(s)"));
        bar.set_message(format!("starting: each builds `{dataset}`"));
        let started = Instant::now();
        let pool = Workers::start(python, dataset, collate, path, job.seed, Some(workers))
            .map_err(&failure)?;
        let startup = started.elapsed();
        let budget = args.seconds;
        let run =
            hetgen_pipeline::profile::measure_dataset(&pool, startup, &shape, budget, &mut |p| {
                show(&bar, p, budget)
            })
            .map_err(&failure)?;
        bar.finish_and_clear();
        let of = match pool.shards() {
            Some(shards) => format!("of {shards} shards"),
            None => format!("of {} per epoch", pool.samples_per_epoch()),
        };
        eprintln!(
            "{workers} worker(s): {:.1} samples/s ({} samples {of} in {:.1} s)",
            run.samples_per_s, run.samples, run.seconds
        );
        runs.push(run);
    }
    let last = runs.last().expect("at least one run").clone();
    let first = &runs[0];
    let per_worker = |r: &WorkersRun| r.samples_per_s / r.workers.max(1) as f64;
    let largest = |f: fn(&hetgen_pipeline::python::usage::Memory) -> u64| {
        last.memory.iter().map(f).max().unwrap_or(0) as f64 / MIB
    };
    let dataset = DatasetProfile {
        dataset: dataset.to_string(),
        python: python.python.clone(),
        startup_s: last.startup_s,
        bytes_per_sample: last.bytes_per_sample,
        worker_memory_mib: largest(|m| m.pss_bytes),
        worker_rss_mib: largest(|m| m.rss_bytes),
        scaling: per_worker(&last) / per_worker(first).max(1e-9),
        runs,
    };
    Ok(Profile {
        spec: args.spec.display().to_string(),
        job: job.name.clone(),
        output_shape: job.pipeline.output_shape,
        measurement: Measurement {
            samples: last.samples,
            seconds: last.seconds,
            threads: last.workers,
            samples_per_s: last.samples_per_s,
            cpu_seconds_per_sample: last.cpu_seconds_per_sample,
            stages: Vec::new(),
        },
        dataset: Some(dataset),
        trainer: None,
        gpu_samples_per_s: args.gpu_samples_per_s,
        vcpus_per_gpu: None,
    })
}

/// A spinner that shows `prefix` and a message.
fn spinner(prefix: String) -> ProgressBar {
    let bar = super::spinner();
    bar.set_prefix(prefix);
    bar
}

/// The measure's progress on `bar`: the warm-up, then a bar over the time budget.
fn show(bar: &ProgressBar, progress: Progress, budget: Duration) {
    match progress {
        Progress::WarmingUp => bar.set_message("warming up (not timed)"),
        Progress::Timed { seconds, samples } => {
            if bar.length().is_none() {
                bar.set_length(1000);
                bar.set_style(
                    ProgressStyle::with_template("{prefix}: [{bar:30}] {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
            }
            let done = (seconds / budget.as_secs_f64()).clamp(0.0, 1.0);
            bar.set_position((done * 1000.0) as u64);
            bar.set_message(format!("{samples} samples, {seconds:.1} s"));
        }
    }
}

/// `--trainer`: the job's script timed with input replayed from memory.
fn profile_trainer(
    args: &ProfileArgs,
    job: &Job,
    channels: &BTreeMap<String, PathBuf>,
) -> Result<TrainerProfile, Failure> {
    let Some(script) = job.trainer.script() else {
        return Err(Failure::Profile {
            path: args.spec.clone(),
            why: "`--trainer` times the job's own script, and this job's trainer is hetgen's built-in one".to_owned(),
            hint: "give the built-in trainer's rate with `--gpu-samples-per-s` (`hetgen bench --input-only` and a GPU run's step lines measure it)".to_owned(),
        });
    };
    let scratch = tempfile::Builder::new()
        .prefix("hetgen-profile-")
        .tempdir()
        .map_err(|e| Failure::Profile {
            path: args.spec.clone(),
            why: format!("cannot make a scratch folder: {e}"),
            hint: "check that the temporary folder (TMPDIR) is writable".to_owned(),
        })?;
    let spec = std::path::absolute(&args.spec).unwrap_or_else(|_| args.spec.clone());
    let run = TrainerRun {
        python: python(args),
        spec,
        code_dir: code_dir(args, job),
        script: script.script.clone(),
        args: script_args(job),
        channels: channels
            .iter()
            .map(|(name, dir)| {
                (
                    name.clone(),
                    std::path::absolute(dir).unwrap_or(dir.clone()),
                )
            })
            .collect(),
        batch_size: job.pipeline.batch_size,
        steps: args.trainer_steps,
        timeout: args.trainer_timeout,
        scratch: scratch.path().to_owned(),
    };
    let bar = spinner(script.script.clone());
    bar.set_message("starting under torchrun; the Loader makes a few batches to replay");
    let rate = trainer_rate::measure(&run, &mut |line| {
        if let Some(step) = hetgen_spec::step::StepLine::parse(line) {
            bar.set_message(format!(
                "step {} ({:.1} ms per step)",
                step.step, step.step_ms
            ));
        }
    });
    bar.finish_and_clear();
    Ok(TrainerProfile {
        script: script.script.clone(),
        rate: rate?,
    })
}

/// The script's arguments as the job passes them on AWS's image: the spec's `args`, then each
/// hyperparameter as `--key value`, a JSON string's quotes removed (sagemaker-training's
/// `mapping.to_cmd_args`).
fn script_args(job: &Job) -> Vec<String> {
    let mut args = job
        .trainer
        .script()
        .map(|s| s.args.clone())
        .unwrap_or_default();
    if let Some(sm) = &job.sagemaker {
        for (key, value) in &sm.hyperparameters {
            let value = match serde_json::from_str::<serde_json::Value>(value) {
                Ok(serde_json::Value::String(s)) => s,
                _ => value.clone(),
            };
            args.extend([format!("--{key}"), value]);
        }
    }
    args
}

fn table(p: &Profile) -> String {
    let mut out = match &p.dataset {
        Some(d) => dataset_table(p, d),
        None => engine_table(p),
    };
    if let Some(t) = &p.trainer {
        let device = match (&t.rate.device_name, t.rate.device.as_str()) {
            (Some(name), _) => name.clone(),
            (None, "cpu") => "this machine's CPU (no accelerator torch can use: a GPU trains faster, so the vCPUs per GPU below are a lower bound)".to_owned(),
            (None, device) => device.to_owned(),
        };
        out += &format!(
            "\n`{}` on {device}: {} steps timed, {:.2} ms per step ({:.2} ms of it waiting), {:.0} samples/s per GPU\n",
            t.script, t.rate.steps, t.rate.step_ms, t.rate.wait_ms, t.rate.samples_per_s
        );
    }
    if let (Some(g), Some(v)) = (p.gpu_samples_per_s, p.vcpus_per_gpu) {
        out += &format!(
            "\na GPU training {g:.0} samples/s needs {v:.1} vCPUs of this machine's kind for its input\n"
        );
        if p.dataset.is_some() {
            out += &format!(
                "and {:.1} Mbit/s of network from the data hosts\n",
                g * p.dataset.as_ref().map_or(0.0, |d| d.bytes_per_sample) * 8.0 / 1e6
            );
        }
        out += "`hetgen plan --profile` sizes and prices the cluster from this file\n";
    }
    out
}

fn engine_table(p: &Profile) -> String {
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
    out
}

fn dataset_table(p: &Profile, d: &DatasetProfile) -> String {
    let mut out = format!(
        "`{}` in hetgen's Python workers ({}), as a data host runs it\n\n",
        d.dataset,
        d.python.display()
    );
    out += &format!(
        "{:>7} {:>11} {:>17} {:>14} {:>10}\n",
        "workers", "samples/s", "samples/s/worker", "ms CPU/sample", "start-up"
    );
    for r in &d.runs {
        out += &format!(
            "{:>7} {:>11.1} {:>17.1} {:>14.3} {:>9.1}s\n",
            r.workers,
            r.samples_per_s,
            r.samples_per_s / r.workers.max(1) as f64,
            r.cpu_seconds_per_sample * 1e3,
            r.startup_s
        );
    }
    if d.runs.len() > 1 {
        out += &format!(
            "scaling: {:.0}% of one worker's rate per worker on {} workers\n",
            d.scaling * 100.0,
            p.measurement.threads
        );
    }
    out += &format!(
        "on the wire: {:.0} bytes per sample; per worker: {:.0} MiB of memory ({:.0} MiB resident, shared libraries included)\n",
        d.bytes_per_sample, d.worker_memory_mib, d.worker_rss_mib
    );
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
