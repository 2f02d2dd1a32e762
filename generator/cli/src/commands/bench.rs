//! `hetgen bench [SPEC]`: the job run locally three times with the same step count —
//! homogeneous (the trainer host alone, preprocessing on its own cores), remote-only (the same
//! trainer host streaming from the data hosts on the machine's other cores, its own pipeline
//! off) and hybrid (both: the trainer host's pipeline, with as many threads as it had alone,
//! takes shards beside the data hosts) — then priced per step.
//!
//! Every run uses the rendered launcher and the real runtime, so what differs is only where the
//! pipeline runs. The trainer host gets the same cores in all three; the data hosts share the
//! rest, so the sides never share a core. Hybrid's samples/s against the sum of the other two
//! (`hybrid_ratio`) says how much of both sides' work it combines. Writes `bench.json` and
//! `bench.svg` (step time, samples/s and stall per configuration).
//!
//! `--input-only` runs the trainer without its model (the launcher's `--input-only`): each
//! configuration then measures its input's ceiling. On a CPU-only machine that is the fair
//! comparison of where preprocessing runs, because a real model step would share the trainer
//! host's cores with its own pipeline, which a GPU host's model does not.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hetgen_env::JobFile;
use hetgen_local::supervise::Status;
use hetgen_local::{CpuPolicy, Limits, Observer, RunOptions, StopRequests};
use hetgen_spec::Job;
use hetgen_spec::model::{Length, Role, Trainer, TrainerCpus};
use serde::Serialize;

use super::{build_launcher, ensure_fresh, render_spec};
use crate::cli::{BenchArgs, Format};
use crate::exit::Failure;

/// One configuration's result.
#[derive(Debug, Serialize)]
pub struct Config {
    pub configuration: String,
    pub instances: u32,
    pub price_per_hour: f64,
    pub mean_step_ms: f64,
    pub cost_per_step: f64,
    pub stall_fraction: f64,
    pub samples_per_s: f64,
    pub steps: u64,
    pub trainer_cores: Vec<usize>,
    pub data_cores: Vec<usize>,
    pub job_dir: PathBuf,
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

pub fn run(args: &BenchArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    ensure_fresh(&rendered, &args.out)?;
    let bad = |why: &str, hint: &str| Failure::Bench {
        spec: args.spec.clone(),
        why: why.to_owned(),
        hint: hint.to_owned(),
    };
    if !job.groups.iter().any(|g| g.role == Role::Data) {
        return Err(bad(
            "the job has no data group",
            "bench compares a job with data hosts against its trainer alone",
        ));
    }
    let Some(trainer) = job.trainer.builtin() else {
        return Err(bad(
            "the job's trainer is a script",
            "bench times the built-in trainer; time a script-mode job with `hetgen deploy --local`",
        ));
    };
    let job_root = args.out.join(&rendered.dir);
    let steps = args.steps.unwrap_or(match trainer.length {
        Length::Steps(n) => n.min(200),
        Length::Epochs(_) => 100,
    });
    let mut base = job.clone();
    if let Trainer::Builtin(trainer) = &mut base.trainer {
        trainer.length = Length::Steps(steps.max(1));
        trainer.checkpoint_every = None;
    }
    // Remote-only: the trainer's own pipeline off, whatever the spec says.
    let mut hetero = base.clone();
    hetero.pipeline.trainer_cpus = TrainerCpus::Threads(0);
    // Homogeneous: the trainer alone, its pipeline sized as the spec sizes it there.
    let mut homo = base.clone();
    homo.groups.retain(|g| g.role == Role::Trainer);
    // The trainer host preprocesses alone now, so it needs every channel, including those the
    // spec delivers only to data groups.
    for channel in &mut homo.channels {
        channel.instance_groups.clear();
    }

    let cores = hetgen_local::cpus::available();
    if cores.len() < 2 {
        return Err(bad(
            "this machine lets hetgen use one core",
            "bench needs at least two: one for the trainer, one for data",
        ));
    }
    let k = args
        .trainer_cores
        .unwrap_or(cores.len() / 2)
        .clamp(1, cores.len() - 1);
    let (trainer_cores, data_cores) = (cores[..k].to_vec(), cores[k..].to_vec());
    // Hybrid: the trainer host's pipeline with the threads it has alone on the same cores.
    let mut hybrid = base;
    let alone = homo.trainer_threads(u32::try_from(k).unwrap_or(u32::MAX));
    hybrid.pipeline.trainer_cpus = TrainerCpus::Threads(alone);
    let launcher = match &args.launcher {
        Some(path) => hetgen_local::launcher::check_executable(path)?,
        None => build_launcher(&job_root, args.release)?,
    };
    let results = args
        .results
        .clone()
        .unwrap_or_else(|| job_root.join("bench"));
    let spec_dir = super::spec_dir(&args.spec).to_owned();

    let run_one = |name: &str, job: &Job| -> Result<Config, Failure> {
        let dir = results.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| {
            bad(
                &format!("cannot create {}: {e}", dir.display()),
                "choose a writable `--results` folder",
            )
        })?;
        let job_file = dir.join("job.json");
        let file = JobFile {
            generated_by: format!("hetgen {} bench", env!("CARGO_PKG_VERSION")),
            spec: args.spec.display().to_string(),
            spec_sha256: String::new(),
            job: job.clone(),
        };
        std::fs::write(&job_file, file.to_json()).map_err(|e| {
            bad(
                &format!("cannot write {}: {e}", job_file.display()),
                "choose a writable `--results` folder",
            )
        })?;
        let options = RunOptions {
            job_dir: dir.join("run"),
            launcher: launcher.clone(),
            job_file,
            spec_dir: spec_dir.clone(),
            caller_env: std::env::vars().collect(),
            env: vec![],
            cpus: CpuPolicy::Shared,
            limits: Limits {
                max_runtime: hetgen_local::spec_max_runtime(job),
                grace: Duration::from_secs(10),
            },
            seed: Some(1),
            framework: None,
        };
        let mut local = hetgen_local::prepare(job, options)?;
        for command in &mut local.commands {
            if command.host.role == Role::Trainer {
                command.cpus = Some(trainer_cores.clone());
                if args.input_only {
                    command.args.push("--input-only".to_owned());
                }
            } else {
                command.cpus = Some(data_cores.clone());
            }
        }
        eprintln!(
            "bench: {name} run, {steps} steps ({} host(s))",
            local.commands.len()
        );
        let mut quiet = Quiet::default();
        let record = local.run(&StopRequests::from_signals(), &mut quiet)?;
        if record.status != Status::Completed {
            for line in quiet.tail {
                eprintln!("{line}");
            }
            return Err(Failure::LocalJobFailed {
                name: record.job_name.clone(),
                status: format!("{:?}", record.status),
                reason: record.failure_reason.clone(),
                dir: record.job_dir.clone(),
            });
        }
        let summary = record.summary.as_ref().ok_or_else(|| {
            bad(
                "the trainer wrote no summary",
                "see the trainer's log in the run folder",
            )
        })?;
        let mean_step_ms = summary.mean_step_ms;
        let price = hetgen_plan::cluster_price(job, None)?;
        Ok(Config {
            configuration: name.to_owned(),
            instances: job.groups.iter().map(|g| g.count).sum(),
            price_per_hour: price,
            mean_step_ms,
            cost_per_step: hetgen_plan::cost_per_step(price, mean_step_ms),
            stall_fraction: summary.stall_fraction,
            samples_per_s: summary.samples_per_s,
            steps,
            trainer_cores: trainer_cores.clone(),
            data_cores: if job.groups.len() > 1 {
                data_cores.clone()
            } else {
                vec![]
            },
            job_dir: record.job_dir.clone(),
        })
    };
    let homogeneous = run_one("homogeneous", &homo)?;
    let heterogeneous = run_one("remote-only", &hetero)?;
    let hybrid = run_one("hybrid", &hybrid)?;
    let bench = Bench {
        spec: args.spec.display().to_string(),
        job: job.name.clone(),
        steps,
        input_only: args.input_only,
        improvement: 1.0 - heterogeneous.cost_per_step / homogeneous.cost_per_step,
        speedup: homogeneous.mean_step_ms / heterogeneous.mean_step_ms,
        hybrid_improvement: 1.0 - hybrid.cost_per_step / homogeneous.cost_per_step,
        hybrid_speedup: homogeneous.mean_step_ms / hybrid.mean_step_ms,
        hybrid_ratio: hybrid.samples_per_s
            / (homogeneous.samples_per_s + heterogeneous.samples_per_s),
        homogeneous,
        heterogeneous,
        hybrid,
    };
    let json = serde_json::to_string_pretty(&bench).expect("JSON serializes");
    std::fs::write(results.join("bench.json"), &json).map_err(|e| {
        bad(
            &format!("cannot write bench.json: {e}"),
            "choose a writable `--results` folder",
        )
    })?;
    std::fs::write(results.join("bench.svg"), chart(&bench)).map_err(|e| {
        bad(
            &format!("cannot write bench.svg: {e}"),
            "choose a writable `--results` folder",
        )
    })?;
    match args.format {
        Format::Json => println!("{json}"),
        Format::Human => print!("{}", table(&bench)),
    }
    eprintln!(
        "wrote {} and bench.svg",
        results.join("bench.json").display()
    );
    Ok(ExitCode::SUCCESS)
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
            c.configuration,
            c.instances,
            c.price_per_hour,
            c.mean_step_ms,
            c.samples_per_s,
            c.cost_per_step,
            improvement * 100.0,
            c.stall_fraction * 100.0
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
                configs.iter().map(|c| c.mean_step_ms).collect(),
            ),
            (
                "samples/s",
                configs.iter().map(|c| c.samples_per_s).collect(),
            ),
            (
                "stall (% of step time)",
                configs.iter().map(|c| c.stall_fraction * 100.0).collect(),
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
