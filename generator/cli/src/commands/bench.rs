//! `hetgen bench [SPEC]`: the job run locally three times with the same length and the
//! trainer hosts on the same cores (homogeneous, remote-only and hybrid, as
//! [`hetgen_local::bench`] runs them), then priced per step.
//!
//! A job with the built-in trainer runs the same step count each time; one with a script
//! runs the script's own length, measured from the Loader's step lines. On AWS's PyTorch image
//! each configuration's hosts start through the toolkit from a source bundle of its own
//! (`bundles`), as `hetgen deploy --local` starts the job's.
//!
//! Hybrid's samples/s against the sum of the other two (`hybrid_ratio`) says how much of both
//! sides' work it combines. Writes `bench.json` and `bench.svg` (step time, samples/s and stall
//! per configuration). With `--profile` each configuration also gets the samples/s and stall
//! the profile's rates predict for it ([`predict`]), printed beside the measured ones.
//!
//! `--input-only` runs the trainer without its model (the launcher's `--input-only`): each
//! configuration then measures its input's ceiling. On a CPU-only machine that is the fair
//! comparison of where preprocessing runs, because a real model step would share the trainer
//! host's cores with its own pipeline, which a GPU host's model does not.

mod predict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hetgen_local::bench::{BenchError, Configuration, Measurement, Runs, Setup};
use hetgen_local::{FrameworkRun, Observer, StopRequests};
use serde::Serialize;

use super::{build_launcher, ensure_fresh, render_spec};
use crate::cli::{BenchArgs, Format};
use crate::exit::Failure;
use predict::{Predicted, Rates, Shape};

/// One configuration's result: its measurement, priced.
#[derive(Debug, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub measured: Measurement,
    pub price_per_hour: f64,
    pub cost_per_step: f64,
    /// What `--profile`'s rates predict for this configuration; `null` without one.
    pub predicted: Option<Predicted>,
}

/// `bench.json`.
#[derive(Debug, Serialize)]
pub struct Bench {
    pub spec: String,
    pub job: String,
    /// The script, when the trainer is one; `null` for the built-in trainer.
    pub script: Option<String>,
    /// Steps per run of the built-in trainer; `null` for a script, which runs its own length.
    pub steps: Option<u64>,
    /// `--profile`, when given.
    pub profile: Option<PathBuf>,
    /// The trainer ran no model (`--input-only`): samples/s are the input's ceiling.
    pub input_only: bool,
    pub homogeneous: Config,
    /// The data hosts alone feed the trainer (its own pipeline off).
    pub heterogeneous: Config,
    /// The data hosts and the trainer host's own pipeline together.
    pub hybrid: Config,
    /// `1 − heterogeneous cost per step / homogeneous cost per step`.
    pub improvement: f64,
    /// Homogeneous step time / heterogeneous step time.
    pub speedup: f64,
    /// `1 − hybrid cost per step / homogeneous cost per step`.
    pub hybrid_improvement: f64,
    /// Homogeneous step time / hybrid step time.
    pub hybrid_speedup: f64,
    /// Hybrid samples/s / (homogeneous + remote-only samples/s): 1 when hybrid adds up both.
    pub hybrid_ratio: f64,
}

impl Config {
    /// `measured` at the cluster's price per hour.
    fn priced(measured: Measurement, price_per_hour: f64, predicted: Option<Predicted>) -> Config {
        Config {
            cost_per_step: hetgen_plan::cost_per_step(price_per_hour, measured.mean_step_ms),
            price_per_hour,
            measured,
            predicted,
        }
    }
}

impl Bench {
    fn new(args: &BenchArgs, job: &str, setup: &Setup, configs: [Config; 3]) -> Bench {
        let [homogeneous, heterogeneous, hybrid] = configs;
        let script = setup.configurations[0].job.trainer.script();
        Bench {
            spec: args.spec.display().to_string(),
            job: job.to_owned(),
            script: script.map(|s| s.script.clone()),
            steps: setup.steps,
            profile: args.profile.clone(),
            input_only: setup.input_only,
            improvement: 1.0 - heterogeneous.cost_per_step / homogeneous.cost_per_step,
            speedup: homogeneous.measured.mean_step_ms / heterogeneous.measured.mean_step_ms,
            hybrid_improvement: 1.0 - hybrid.cost_per_step / homogeneous.cost_per_step,
            hybrid_speedup: homogeneous.measured.mean_step_ms / hybrid.measured.mean_step_ms,
            hybrid_ratio: hybrid.measured.samples_per_s
                / (homogeneous.measured.samples_per_s + heterogeneous.measured.samples_per_s),
            homogeneous,
            heterogeneous,
            hybrid,
        }
    }
}

pub fn run(args: &BenchArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    ensure_fresh(&rendered, &args.out)?;
    let failure = |e| failure(args, e);
    let setup =
        Setup::new(&job, args.steps, args.trainer_cores, args.input_only).map_err(failure)?;
    // Read before anything runs: a bad profile should not cost three runs.
    let rates = match &args.profile {
        Some(path) => Some(Rates::read(path, setup.input_only)?),
        None => None,
    };
    let job_root = args.out.join(&rendered.dir);
    let on_image = job
        .sagemaker
        .as_ref()
        .is_some_and(|sm| sm.framework.is_some());
    let launcher = match &args.launcher {
        Some(path) => hetgen_local::launcher::check_executable(path)?,
        // AWS's image runs the toolkit, which runs the bundle's wheel: nothing to build.
        None if on_image => PathBuf::new(),
        None => build_launcher(&job_root, args.release)?,
    };
    let runs = Runs {
        launcher,
        results: args
            .results
            .clone()
            .unwrap_or_else(|| job_root.join("bench")),
        spec: args.spec.clone(),
        spec_dir: super::spec_dir(&args.spec).to_owned(),
        caller_env: std::env::vars().collect(),
    };
    // Every bundle before any run, so that none can hold another configuration's run.
    let frameworks = match on_image {
        true => bundles(args, &setup, &job_root)?,
        false => vec![None; setup.configurations.len()],
    };

    let run_one = |configuration: &Configuration, framework| -> Result<Config, Failure> {
        let local = setup
            .prepare(configuration, &runs, framework)
            .map_err(failure)?;
        let length = match setup.steps {
            Some(steps) => format!("{steps} steps"),
            None => "the script's own length".to_owned(),
        };
        eprintln!(
            "bench: {} run, {length} ({} host(s))",
            configuration.name,
            local.commands.len()
        );
        let mut quiet = Quiet::default();
        let measured = setup
            .measure(
                configuration,
                &local,
                &StopRequests::from_signals(),
                &mut quiet,
            )
            .map_err(|e| {
                if let BenchError::Incomplete(_) | BenchError::FewStepLines { .. } = e {
                    for line in &quiet.tail {
                        eprintln!("{line}");
                    }
                }
                failure(e)
            })?;
        let price = hetgen_plan::cluster_price(&configuration.job, None)?;
        let predicted = rates.map(|r| predict::predict(&r, &shape(configuration, &measured)));
        Ok(Config::priced(measured, price, predicted))
    };
    let mut configs = Vec::new();
    for (configuration, framework) in setup.configurations.iter().zip(frameworks) {
        configs.push(run_one(configuration, framework)?);
    }
    let configs: [Config; 3] = configs.try_into().expect("three configurations");
    let bench = Bench::new(args, &job.name, &setup, configs);
    write(&runs.results, &bench, args)
}

/// `configuration` as [`predict`] sees it.
fn shape(configuration: &Configuration, measured: &Measurement) -> Shape {
    let cores = u32::try_from(measured.trainer_cores.len()).unwrap_or(u32::MAX);
    Shape {
        trainer_cores: measured.trainer_cores.len(),
        data_cores: measured.data_cores.len(),
        trainer_processes: measured.trainer_processes,
        trainer_pipeline: configuration.job.trainer_threads(cores) > 0,
    }
}

/// Each configuration's source bundle, for a job on AWS's PyTorch image: its job rendered as
/// `hetgen render` renders the spec's (the entry point, `requirements.txt`, `job.json`) into
/// `OUT/<job>/bench-bundles/<configuration>/` and bundled there as `hetgen deploy --local`
/// bundles the spec's job, so that each run's `hetgen-job.json` is its configuration's job
/// (the homogeneous one without data groups).
fn bundles(
    args: &BenchArgs,
    setup: &Setup,
    job_root: &Path,
) -> Result<Vec<Option<FrameworkRun>>, Failure> {
    let text = std::fs::read_to_string(&args.spec).map_err(|source| Failure::Read {
        path: args.spec.clone(),
        hint: "check that the file is readable".to_owned(),
        source,
    })?;
    let origin = hetgen_render::SpecOrigin {
        file_name: super::file_name(&args.spec),
        text: &text,
    };
    let wheel = super::wheel_path(&args.wheel, &setup.configurations[0].job, &args.out)?;
    let mut out = Vec::new();
    for configuration in &setup.configurations {
        let job = &configuration.job;
        let Some(sm) = &job.sagemaker else {
            out.push(None);
            continue;
        };
        let dir = job_root.join("bench-bundles").join(configuration.name);
        let rendered = hetgen_render::render(job, origin)?;
        for file in &rendered.files {
            if file.path == hetgen_env::JOB_FILE_NAME || file.path.starts_with("bundle/") {
                let path = dir.join(&file.path);
                let written = path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, &file.contents));
                written.map_err(|e| Failure::Bench {
                    spec: args.spec.clone(),
                    why: format!("cannot write {}: {e}", path.display()),
                    hint: format!("`{}` must be writable", args.out.display()),
                })?;
            }
        }
        let inputs = hetgen_render::bundle::Inputs {
            job,
            spec_dir: super::spec_dir(&args.spec),
            out_dir: &args.out,
            wheel: &wheel,
        };
        let bundle = hetgen_render::bundle::bundle(&inputs, &dir)?;
        out.push(Some(FrameworkRun {
            bundle: std::path::absolute(&bundle.archive).unwrap_or(bundle.archive),
            hyperparameters: hetgen_render::request::hyperparameters(job, sm),
        }));
    }
    Ok(out)
}

/// Writes `bench.json` and `bench.svg` into `results` and prints the results.
fn write(results: &Path, bench: &Bench, args: &BenchArgs) -> Result<ExitCode, Failure> {
    let unwritable = |file: &str, e: std::io::Error| Failure::Bench {
        spec: args.spec.clone(),
        why: format!("cannot write {file}: {e}"),
        hint: "choose a writable `--results` folder".to_owned(),
    };
    let json = serde_json::to_string_pretty(bench).expect("JSON serializes");
    std::fs::write(results.join("bench.json"), &json).map_err(|e| unwritable("bench.json", e))?;
    std::fs::write(results.join("bench.svg"), chart(bench))
        .map_err(|e| unwritable("bench.svg", e))?;
    match args.format {
        Format::Json => println!("{json}"),
        Format::Human => print!("{}", table(bench)),
    }
    eprintln!(
        "wrote {} and bench.svg",
        results.join("bench.json").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The command's failure for `e`: a job bench cannot compare (or whose run cannot be measured)
/// is a [`Failure::Bench`] with the same help; a run that failed is reported as a local run's.
fn failure(args: &BenchArgs, e: BenchError) -> Failure {
    use miette::Diagnostic;
    match e {
        BenchError::Local(e) => Failure::Local(e),
        BenchError::Incomplete(record) => Failure::local_job_failed(*record),
        e => Failure::Bench {
            spec: args.spec.clone(),
            why: e.to_string(),
            hint: e.help().map(|h| h.to_string()).unwrap_or_default(),
        },
    }
}

/// Keeps the last lines of output for a failure message; shows nothing while running.
#[derive(Default)]
struct Quiet {
    tail: Vec<String>,
}

impl Observer for Quiet {
    fn output(&mut self, host: &hetgen_local::Host, _stream: hetgen_local::Stream, line: &str) {
        self.tail
            .push(format!("[{} {}] {line}", host.name, host.group));
        if self.tail.len() > 30 {
            self.tail.remove(0);
        }
    }
}

fn table(b: &Bench) -> String {
    let predicted = b.profile.is_some();
    // With a profile, each measured figure has its prediction beside it.
    let beside = |measured: String, predicted_text: Option<String>| match predicted_text {
        Some(p) => format!("{measured} {p:>10}"),
        None => measured,
    };
    let header = |text: &str| predicted.then(|| text.to_owned());
    let mut out = format!(
        "{:<14} {:>9} {:>6} {:>9} {:>14} {} {} {:>16} {:>12}\n",
        "configuration",
        "instances",
        "cores",
        "$/h",
        "mean step ms",
        beside(format!("{:>10}", "samples/s"), header("predicted")),
        beside(format!("{:>7}", "stall"), header("predicted")),
        "cost per step $",
        "improvement",
    );
    for (c, improvement) in [
        (&b.homogeneous, 0.0),
        (&b.heterogeneous, b.improvement),
        (&b.hybrid, b.hybrid_improvement),
    ] {
        let m = &c.measured;
        let p = c.predicted.as_ref();
        out += &format!(
            "{:<14} {:>9} {:>6} {:>9.3} {:>14.2} {} {} {:>16.3e} {:>11.1}%\n",
            m.configuration,
            m.instances,
            format!("{}+{}", m.trainer_cores.len(), m.data_cores.len()),
            c.price_per_hour,
            m.mean_step_ms,
            beside(
                format!("{:>10.0}", m.samples_per_s),
                p.map(|p| format!("{:.0}", p.samples_per_s))
            ),
            beside(
                format!("{:>6.1}%", m.stall_fraction * 100.0),
                p.map(|p| format!("{:.1}%", p.stall_fraction * 100.0))
            ),
            c.cost_per_step,
            improvement * 100.0,
        );
    }
    let cores = |c: &[usize]| format!("{c:?}");
    out += &format!(
        "cores: trainer hosts' + data hosts' (trainer on {}, data on {})\n",
        cores(&b.hybrid.measured.trainer_cores),
        cores(&b.hybrid.measured.data_cores)
    );
    let length = match (&b.script, b.steps) {
        (Some(script), _) => format!(
            "`{script}` ran its own length; steps measured after the Loader's first step line: \
             {}, {}, {}",
            b.homogeneous.measured.steps, b.heterogeneous.measured.steps, b.hybrid.measured.steps
        ),
        (None, Some(steps)) => format!("{steps} steps each"),
        (None, None) => String::new(),
    };
    out + &format!(
        "speed-up {:.2}× remote-only, {:.2}× hybrid; hybrid makes {:.2}× the samples/s of \
         homogeneous and remote-only together; {length}{}\n",
        b.speedup,
        b.hybrid_speedup,
        b.hybrid_ratio,
        if b.input_only {
            " (input only: no model ran)"
        } else {
            ""
        }
    )
}

/// Three bar charts side by side: mean step time, samples/s and stall, per configuration.
fn chart(b: &Bench) -> String {
    use plotters::prelude::*;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1080, 360)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let panels = root.split_evenly((1, 3));
        let configs = [&b.homogeneous, &b.heterogeneous, &b.hybrid];
        let series: [(&str, Vec<f64>); 3] = [
            (
                "mean step time (ms)",
                configs.iter().map(|c| c.measured.mean_step_ms).collect(),
            ),
            (
                "samples/s",
                configs.iter().map(|c| c.measured.samples_per_s).collect(),
            ),
            (
                "stall (% of step time)",
                configs
                    .iter()
                    .map(|c| c.measured.stall_fraction * 100.0)
                    .collect(),
            ),
        ];
        for (panel, (title, values)) in panels.iter().zip(series) {
            let top = values.iter().cloned().fold(1e-9, f64::max) * 1.2;
            let Ok(mut chart) = ChartBuilder::on(panel)
                .caption(title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d((0..3).into_segmented(), 0.0..top)
            else {
                continue;
            };
            let _ = chart
                .configure_mesh()
                .disable_x_mesh()
                .x_label_formatter(&|x| match x {
                    SegmentValue::CenterOf(0) => "homogeneous".to_owned(),
                    SegmentValue::CenterOf(1) => "remote-only".to_owned(),
                    SegmentValue::CenterOf(2) => "hybrid".to_owned(),
                    _ => String::new(),
                })
                .draw();
            let colors = [
                RGBColor(120, 120, 120),
                RGBColor(30, 110, 200),
                RGBColor(40, 160, 90),
            ];
            let _ = chart.draw_series(values.iter().enumerate().map(|(i, v)| {
                let x0 = SegmentValue::Exact(i as i32);
                let x1 = SegmentValue::Exact(i as i32 + 1);
                let mut bar = Rectangle::new([(x0, 0.0), (x1, *v)], colors[i].filled());
                bar.set_margin(0, 0, 20, 20);
                bar
            }));
        }
        let _ = root.present();
    }
    svg
}
