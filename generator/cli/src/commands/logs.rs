//! `hetgen logs JOB`: a job's output, every host's lines labelled, from a local run's folder or
//! from CloudWatch, the same way for both.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use hetgen_deploy::jobs;
use hetgen_deploy::logs::JobLogs;
use hetgen_local::RunDir;
use hetgen_local::joblog::LogReader;

use crate::cli::{Engine, LogsArgs};
use crate::exit::Failure;
use crate::follow::{Ended, Follow, interrupted_note, read_into, width_of};
use crate::view::{Filter, LogView, Target, label_width};

/// How often a running local job's log is read with `--follow`.
const LOCAL_POLL: Duration = Duration::from_millis(200);

pub fn run(args: &LogsArgs) -> Result<ExitCode, Failure> {
    let filter = Filter {
        hosts: args.host.iter().cloned().collect(),
        groups: args.group.iter().cloned().collect(),
    };
    // A local run's folder, or a run's name among the jobs rendered into `--out`; else a
    // SageMaker job.
    match RunDir::find(&args.job, &args.out) {
        Some(run) => local(args, &run, filter),
        None if args.engine == Engine::Kubeflow => super::kubeflow::logs(args),
        None => remote(args, filter),
    }
}

/// Prints a local run's lines; with `--follow`, until its job record appears.
fn local(args: &LogsArgs, run: &RunDir, filter: Filter) -> Result<ExitCode, Failure> {
    let mut view = LogView::new(args.format, Target::Stdout, filter, local_width(run));
    let since = args.since;
    let mut reader = LogReader::new(run.dir());
    let stop = hetgen_local::StopRequests::from_signals();
    loop {
        // The record is written after the last line: looked at first, one more read is whole.
        let ended = run.has_ended();
        for line in reader.read_new()? {
            if since.is_none_or(|s| line.system_time().is_some_and(|t| t >= s)) {
                view.line(&line);
            }
        }
        if ended || !args.follow {
            break;
        }
        if stop.count() > 0 {
            view.finish();
            eprintln!("stopped following {}", run.dir().display());
            return Ok(ExitCode::from(130));
        }
        std::thread::sleep(LOCAL_POLL);
    }
    view.end();
    Ok(ExitCode::SUCCESS)
}

/// The label width of a local run: its hosts and groups, from any host's resource config.
fn local_width(run: &RunDir) -> usize {
    match run.resource_config() {
        Some(c) => {
            let groups = c.groups();
            label_width(
                c.hosts.len(),
                groups.iter().map(|g| g.instance_group_name.as_str()),
            )
        }
        None => label_width(1, []),
    }
}

/// Prints a SageMaker job's lines from CloudWatch; with `--follow`, until the job ends.
fn remote(args: &LogsArgs, filter: Filter) -> Result<ExitCode, Failure> {
    let since_ms = args.since.map(|t| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    });
    super::block_on(async {
        let aws = hetgen_deploy::Aws::connect(&args.aws.connection(), None).await?;
        let sagemaker = aws.sagemaker();
        // Also the check that the job exists: an unknown name is an error, not empty output.
        let status = jobs::describe(&sagemaker, &args.job).await?;
        let mut view = LogView::new(args.format, Target::Stdout, filter, width_of(&status));
        let mut logs = JobLogs::new(aws.logs(), &args.job, since_ms);
        if args.follow && !status.is_terminal() {
            let follow = Follow {
                sagemaker: &sagemaker,
                logs: Some(logs),
                name: &args.job,
                interval: args.poll_interval,
                transitions: false,
            };
            if let Ended::Interrupted = follow.run(&mut view).await? {
                view.finish();
                eprintln!("{}", interrupted_note(&args.job));
                return Ok(ExitCode::from(130));
            }
        } else {
            // Everything there is now: read until a read brings nothing.
            let mut first = crate::first_raise::FirstRaise::default();
            while read_into(&mut logs, &mut view, &mut first).await? > 0 {}
            if !logs.has_streams() {
                eprintln!(
                    "no log lines yet for `{}` ({}{})",
                    args.job,
                    status.status,
                    status
                        .secondary_status
                        .as_deref()
                        .map(|s| format!(" · {s}"))
                        .unwrap_or_default()
                );
            }
        }
        view.end();
        Ok(ExitCode::SUCCESS)
    })
}
