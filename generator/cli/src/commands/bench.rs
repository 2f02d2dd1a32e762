//! `hetgen bench [SPEC]`: the job run locally three times with the same step count and the
//! trainer host on the same cores (homogeneous, remote-only and hybrid, as
//! [`hetgen_local::bench`] runs them), then priced per step.
//!
//! Hybrid's samples/s against the sum of the other two (`hybrid_ratio`) says how much of both
//! sides' work it combines. Writes `bench.json` and `bench.svg` (step time, samples/s and stall
//! per configuration).
//!
//! `--input-only` runs the trainer without its model (the launcher's `--input-only`): each
//! configuration then measures its input's ceiling. On a CPU-only machine that is the fair
//! comparison of where preprocessing runs, because a real model step would share the trainer
//! host's cores with its own pipeline, which a GPU host's model does not.

use std::path::Path;
use std::process::ExitCode;

use hetgen_local::bench::{BenchError, Configuration, Measurement, Runs, Setup};
use hetgen_local::{Observer, StopRequests};
use serde::Serialize;

use super::{build_launcher, ensure_fresh, render_spec};
use crate::cli::{BenchArgs, Format};
use crate::exit::Failure;

/// One configuration's result: its measurement, priced.
#[derive(Debug, Serialize)]
pub struct Config {
    #[serde(flatten)]
    pub measured: Measurement,
    pub price_per_hour: f64,
    pub cost_per_step: f64,
}

/// `bench.json`.
#[derive(Debug, Serialize)]
pub struct Bench {
    pub spec: String,
    pub job: String,
    pub steps: u64,
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
    fn priced(measured: Measurement, price_per_hour: f64) -> Config {
        Config {
            cost_per_step: hetgen_plan::cost_per_step(price_per_hour, measured.mean_step_ms),
            price_per_hour,
            measured,
        }
    }
}

impl Bench {
    fn new(args: &BenchArgs, job: &str, setup: &Setup, configs: [Config; 3]) -> Bench {
        let [homogeneous, heterogeneous, hybrid] = configs;
        Bench {
            spec: args.spec.display().to_string(),
            job: job.to_owned(),
            steps: setup.steps,
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
    let job_root = args.out.join(&rendered.dir);
    let launcher = match &args.launcher {
        Some(path) => hetgen_local::launcher::check_executable(path)?,
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

    let run_one = |configuration: &Configuration| -> Result<Config, Failure> {
        let local = setup.prepare(configuration, &runs).map_err(failure)?;
        eprintln!(
            "bench: {} run, {} steps ({} host(s))",
            configuration.name,
            setup.steps,
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
                if let BenchError::Incomplete(_) = e {
                    for line in &quiet.tail {
                        eprintln!("{line}");
                    }
                }
                failure(e)
            })?;
        let price = hetgen_plan::cluster_price(&configuration.job, None)?;
        Ok(Config::priced(measured, price))
    };
    let [homogeneous, remote_only, hybrid] = &setup.configurations;
    let configs = [
        run_one(homogeneous)?,
        run_one(remote_only)?,
        run_one(hybrid)?,
    ];
    let bench = Bench::new(args, &job.name, &setup, configs);
    write(&runs.results, &bench, args)
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
    let mut out = format!(
        "{:<14} {:>9} {:>9} {:>14} {:>10} {:>16} {:>12} {:>7}\n",
        "configuration",
        "instances",
        "$/h",
        "mean step ms",
        "samples/s",
        "cost per step $",
        "improvement",
        "stall"
    );
    for (c, improvement) in [
        (&b.homogeneous, 0.0),
        (&b.heterogeneous, b.improvement),
        (&b.hybrid, b.hybrid_improvement),
    ] {
        out += &format!(
            "{:<14} {:>9} {:>9.3} {:>14.2} {:>10.0} {:>16.3e} {:>11.1}% {:>6.1}%\n",
            c.measured.configuration,
            c.measured.instances,
            c.price_per_hour,
            c.measured.mean_step_ms,
            c.measured.samples_per_s,
            c.cost_per_step,
            improvement * 100.0,
            c.measured.stall_fraction * 100.0
        );
    }
    out + &format!(
        "speed-up {:.2}× remote-only, {:.2}× hybrid; hybrid makes {:.2}× the samples/s of \
         homogeneous and remote-only together; {} steps each{}\n",
        b.speedup,
        b.hybrid_speedup,
        b.hybrid_ratio,
        b.steps,
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
