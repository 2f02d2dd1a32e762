//! `hetgen deploy [SPEC]`: send what `hetgen render` wrote to SageMaker.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use hetgen_deploy::request::Request;
use hetgen_deploy::{Transition, jobs, unique_name};
use hetgen_env::TOKEN_VAR;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{ensure_fresh, render_spec, write_bundle};
use crate::cli::DeployArgs;
use crate::exit::Failure;

/// `hetgen deploy` to SageMaker; `main` sends `--local` to [`super::local`].
pub fn run(args: &DeployArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    let Some(sm) = &job.sagemaker else {
        return Err(Failure::NoSageMaker {
            spec: args.spec.clone(),
        });
    };
    // Deploy sends exactly the rendered request, so it must match the spec.
    ensure_fresh(&rendered, &args.out)?;
    let path = args
        .out
        .join(&rendered.dir)
        .join("create-training-job.json");
    let text = std::fs::read_to_string(&path).map_err(|source| Failure::Read {
        path: path.clone(),
        hint: "run `hetgen render` first".to_owned(),
        source,
    })?;
    let request = Request::parse(&text)?;

    let name = match &args.name {
        Some(name) if hetgen_spec::model::is_job_name(name) => name.clone(),
        Some(name) => return Err(Failure::BadJobName { name: name.clone() }),
        None if job.fixed_name => request.name().to_owned(),
        None => unique_name(request.name(), SystemTime::now()),
    };
    // A fresh token per submission, only in the request: never in a rendered file.
    let token = hetgen_deploy::job_token();
    let request = request.renamed(&name).with_environment(TOKEN_VAR, &token);
    // On AWS's PyTorch image the code travels as a source bundle, uploaded before the job
    // that downloads it is submitted.
    let bundle = match request.submit_directory() {
        Some(uri) => {
            let wheel = super::wheel_path(&args.wheel);
            super::note_debug_wheel(&wheel);
            Some((write_bundle(&job, &args.spec, &args.out, &wheel)?, uri))
        }
        None => None,
    };
    if args.dry_run {
        println!("{}", request.as_json());
        if let Some((bundle, uri)) = &bundle {
            eprintln!("would upload {} to {uri}", bundle.archive.display());
        }
        return Ok(ExitCode::SUCCESS);
    }

    super::block_on(async {
        let conn = args.aws.connection();
        let client = match &bundle {
            Some((bundle, uri)) => {
                let (client, s3) = hetgen_deploy::connect_with_s3(&conn, Some(&sm.region)).await?;
                hetgen_deploy::upload::upload(&s3, &bundle.archive, uri).await?;
                eprintln!(
                    "uploaded the source bundle ({:.1} MiB) to {uri}",
                    bundle.bytes as f64 / (1024.0 * 1024.0)
                );
                client
            }
            None => hetgen_deploy::connect(&conn, Some(&sm.region)).await?,
        };
        let arn = jobs::submit(&client, &request).await?;
        println!("{arn}");
        eprintln!("submitted training job `{name}`");
        if !args.wait {
            return Ok(ExitCode::SUCCESS);
        }
        let progress = Progress::new(&name);
        let interval = args.poll_interval;
        let end = jobs::wait(&client, &name, interval, |t| {
            progress.suspend(|| print_transition(t))
        })
        .await;
        progress.finish();
        let end = end?;
        if end.status == "Completed" {
            eprintln!("training job `{name}` completed");
            Ok(ExitCode::SUCCESS)
        } else {
            Err(Failure::JobFailed {
                name,
                status: end.status,
                reason: end.failure_reason,
            })
        }
    })
}

/// A spinner on stderr while waiting, when stderr is a terminal.
pub struct Progress(ProgressBar);

impl Progress {
    pub fn new(name: &str) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .expect("the template is valid"),
        );
        bar.set_message(format!("waiting for `{name}`"));
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress(bar)
    }

    pub fn suspend(&self, f: impl FnOnce()) {
        self.0.suspend(f);
    }

    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// `  +0:05:12  InProgress · Training`
pub fn print_transition(t: &Transition) {
    let s = t.after.as_secs();
    let secondary = t
        .secondary_status
        .as_deref()
        .map(|s| format!(" · {s}"))
        .unwrap_or_default();
    eprintln!(
        "  +{}:{:02}:{:02}  {}{secondary}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.status
    );
}
