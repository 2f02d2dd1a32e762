//! `--engine kubeflow`: `hetgen deploy`, `stop` and `logs` for a job on Kubernetes, as the
//! Kubeflow Trainer objects `hetgen render` wrote. Lines are shown as for SageMaker and local
//! runs (`[host group] …`), the host being the pod's DNS name and the group its replicatedJob's.

use std::process::ExitCode;

use hetgen_kube_deploy::{
    Cluster, DeployOptions, Follow, Groups, JobPods, Outcome, Phase, PodLine, PodState, Rendered,
    TrainJobState, Warning, Watcher,
};
use hetgen_local::joblog::LogLine;

use super::{ensure_fresh, render_spec};
use crate::cli::{DeployArgs, Format, LogsArgs, StatusArgs, StopArgs};
use crate::exit::Failure;
use crate::follow::transition;
use crate::view::{Filter, LogView, Target};

/// `hetgen deploy --engine kubeflow`.
pub fn deploy(args: &DeployArgs) -> Result<ExitCode, Failure> {
    // The job's name is rendered into both objects and the pods' Secret reference: a deploy
    // cannot rename it, nor continue another job's checkpoints.
    if args.name.is_some() {
        return Err(Failure::NotForKubeflow {
            flag: "--name",
            hint: "the TrainJob is named by the spec's `[job] name`; change it there and render again",
        });
    }
    if args.resume_from.is_some() {
        return Err(Failure::NotForKubeflow {
            flag: "--resume-from",
            hint: "deploy without it",
        });
    }
    let (_job, rendered) = render_spec(&args.spec)?;
    // Deploy sends exactly the rendered objects, so they must match the spec.
    ensure_fresh(&rendered, &args.out)?;
    let objects = Rendered::read(&args.out.join(&rendered.dir))?;
    if args.dry_run {
        for object in [objects.runtime(), objects.train_job()] {
            println!("{object:#}");
        }
        eprintln!(
            "would apply these and the Secret `{}` with a fresh token",
            hetgen_spec::kube::token_secret(objects.name())
        );
        return Ok(ExitCode::SUCCESS);
    }
    // A fresh token per deploy, only in the Secret: never in a rendered file.
    let token = hetgen_env::job_token().map_err(|source| Failure::Token { source })?;
    super::block_on(async {
        let cluster = Cluster::connect(&args.kube.connection()).await?;
        let deployed =
            hetgen_kube_deploy::deploy(&cluster, &objects, &DeployOptions { token }).await?;
        println!("{}/{}", deployed.namespace, deployed.name);
        eprintln!(
            "deployed TrainJob `{}` to namespace `{}`",
            deployed.name, deployed.namespace
        );
        if !args.wait {
            return Ok(ExitCode::SUCCESS);
        }
        // The job's namespace from here on, whatever the context's is.
        let cluster = Cluster::connect(&hetgen_kube_deploy::Connection {
            namespace: Some(deployed.namespace.clone()),
            ..args.kube.connection()
        })
        .await?;
        let follow = Follow {
            cluster: &cluster,
            name: &deployed.name,
            groups: objects.groups(),
            interval: args.poll_interval,
            logs: !args.no_logs,
        };
        let mut view = View::new(
            LogView::new(
                Format::Human,
                Target::Stderr,
                Filter::default(),
                width(objects.name(), &follow.groups),
            ),
            true,
        );
        wait(&follow, &mut view).await
    })
}

/// Follows until the TrainJob ends: exit 0 when it completes, a failure with its reason when
/// it fails, 130 when the user stops following.
async fn wait(follow: &Follow<'_>, view: &mut View) -> Result<ExitCode, Failure> {
    let outcome = tokio::select! {
        outcome = follow.run(view) => outcome,
        _ = tokio::signal::ctrl_c() => {
            view.log.finish();
            eprintln!("{}", interrupted_note(follow.name));
            return Ok(ExitCode::from(130));
        }
    };
    view.log.end();
    match outcome? {
        Outcome::Complete { .. } => {
            eprintln!("TrainJob `{}` completed", follow.name);
            Ok(ExitCode::SUCCESS)
        }
        failed @ (Outcome::Failed { .. } | Outcome::Refused(_)) => Err(Failure::TrainJobFailed {
            name: follow.name.to_owned(),
            reason: failed.failure(),
        }),
    }
}

/// `hetgen stop --engine kubeflow JOB`.
pub fn stop(args: &StopArgs) -> Result<ExitCode, Failure> {
    let stopped = super::block_on(async {
        let cluster = Cluster::connect(&args.kube.connection()).await?;
        hetgen_kube_deploy::stop(&cluster, &args.job).await
    })?;
    if stopped.train_job {
        eprintln!(
            "deleting TrainJob `{}`: its pods get SIGTERM and their grace period, then it is gone",
            args.job
        );
    } else {
        eprintln!(
            "no TrainJob `{}`; deleted its leftover token Secret",
            args.job
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `hetgen status --engine kubeflow JOB`: the TrainJob's phase, each pod's, and the Warning
/// events on it and its JobSet (a refusal among them says why it never runs).
pub fn status(args: &StatusArgs) -> Result<ExitCode, Failure> {
    let status = super::block_on(async {
        let cluster = Cluster::connect(&args.kube.connection()).await?;
        hetgen_kube_deploy::status(&cluster, &args.job).await
    })?;
    let phase = &status.state.phase;
    match args.format {
        Format::Json => crate::output::print_json(&serde_json::json!({
            "name": args.job,
            "phase": phase.name(),
            "reason": match phase {
                Phase::Failed { reason, .. } | Phase::Suspended { reason } => Some(reason),
                _ => None,
            },
            "message": match phase {
                Phase::Failed { message, .. } | Phase::Complete { message } => Some(message),
                _ => None,
            },
            "pods": status.pods.iter().map(|p| serde_json::json!({
                "pod": p.pod, "host": p.host, "group": p.group, "phase": p.phase, "ended": p.ended,
            })).collect::<Vec<_>>(),
            "warnings": status.warnings.iter().map(|w| serde_json::json!({
                "kind": w.kind, "reason": w.reason, "message": w.message, "count": w.count,
                "refusal": w.is_refusal(),
            })).collect::<Vec<_>>(),
        })),
        Format::Human => {
            println!(
                "{}: {} ({})",
                args.job,
                phase.name(),
                describe(phase, &status.pods)
            );
            match phase {
                Phase::Failed { reason, message } => println!("  failure: {reason}: {message}"),
                Phase::Complete { message } if !message.is_empty() => println!("  {message}"),
                _ => {}
            }
            for pod in &status.pods {
                let group = pod
                    .group
                    .as_deref()
                    .map(|g| format!(" {g}"))
                    .unwrap_or_default();
                let ended = pod
                    .ended
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default();
                println!(
                    "  [{}{group}] pod `{}`: {}{ended}",
                    pod.host, pod.pod, pod.phase
                );
            }
            for warning in &status.warnings {
                let times = if warning.count > 1 {
                    format!(" (×{})", warning.count)
                } else {
                    String::new()
                };
                println!(
                    "  warning: {} {}{times}: {}",
                    warning.kind, warning.reason, warning.message
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `hetgen logs --engine kubeflow JOB`: every pod's lines; with `--follow`, until the job ends.
pub fn logs(args: &LogsArgs) -> Result<ExitCode, Failure> {
    let filter = Filter {
        hosts: args.host.iter().cloned().collect(),
        groups: args.group.iter().cloned().collect(),
    };
    super::block_on(async {
        let cluster = Cluster::connect(&args.kube.connection()).await?;
        // Also the check that the job exists: an unknown name is an error, not empty output.
        let state = hetgen_kube_deploy::state(&cluster, &args.job).await?;
        let groups = hetgen_kube_deploy::groups(&cluster, &state).await;
        let log = LogView::new(
            args.format,
            Target::Stdout,
            filter,
            width(&args.job, &groups),
        );
        let mut view = View::new(log, false);
        if args.follow && !state.phase.is_terminal() {
            let follow = Follow {
                cluster: &cluster,
                name: &args.job,
                groups,
                interval: args.poll_interval,
                logs: true,
            };
            // `logs` reports the lines, not the job: a failed job's lines were shown.
            return match wait(&follow, &mut view).await {
                Err(Failure::TrainJobFailed { .. }) => Ok(ExitCode::SUCCESS),
                other => other,
            };
        }
        let mut pods = JobPods::new(&cluster, &args.job, groups, args.since);
        let poll = pods.poll(true).await?;
        for line in &poll.lines {
            view.line(line);
        }
        if poll.pods.is_empty() {
            eprintln!("no pods yet for `{}` ({})", args.job, state.phase.name());
        }
        view.log.end();
        Ok(ExitCode::SUCCESS)
    })
}

/// The label width that lines up every pod of the job: `<job>-<replicatedJob>-0-<index>`
/// hosts (two digits of index assumed) and the longest group.
fn width(job: &str, groups: &Groups) -> usize {
    let host = groups
        .iter()
        .map(|(replicated_job, _)| job.len() + replicated_job.len() + "--0-00".len())
        .max()
        .unwrap_or(job.len());
    let group = groups.iter().map(|(_, g)| g.len()).max().unwrap_or(0);
    host + group + 3
}

/// The command line's [`Watcher`]: lines into the [`LogView`], state changes as notes.
struct View {
    log: LogView,
    transitions: bool,
    start: std::time::Instant,
    last: Option<String>,
}

impl View {
    fn new(log: LogView, transitions: bool) -> View {
        View {
            log,
            transitions,
            start: std::time::Instant::now(),
            last: None,
        }
    }
}

impl Watcher for View {
    fn state(&mut self, state: &TrainJobState, pods: &[PodState]) {
        let now = describe(&state.phase, pods);
        if self.last.as_ref() != Some(&now) {
            let text = transition(self.start.elapsed(), state.phase.name(), Some(&now));
            if self.transitions {
                self.log.note(&text);
            }
            self.log.set_status(text.trim());
            self.last = Some(now);
        }
        self.log.flush();
    }

    fn line(&mut self, line: &PodLine) {
        self.log.line(&LogLine::at_ms(
            line.time_ms,
            &line.host,
            line.group.as_deref(),
            &line.message,
        ));
    }

    fn warning(&mut self, warning: &Warning) {
        self.log.note(&format!("warning: {}", warning.describe()));
    }
}

/// `4 pods: 2 Running, 2 Pending` (or the suspension's reason).
fn describe(phase: &Phase, pods: &[PodState]) -> String {
    if let Phase::Suspended { reason } = phase {
        return reason.clone();
    }
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for pod in pods {
        *counts.entry(pod.phase.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(p, n)| format!("{n} {p}")).collect();
    match pods.len() {
        0 => "no pods yet".to_owned(),
        1 => format!("1 pod: {}", counts.join(", ")),
        n => format!("{n} pods: {}", counts.join(", ")),
    }
}

/// What to do after Ctrl-C: the job was not touched.
fn interrupted_note(name: &str) -> String {
    format!(
        "stopped following `{name}`; the job goes on running.\n  follow it: hetgen logs --engine kubeflow {name} --follow\n  stop it:   hetgen stop --engine kubeflow {name}"
    )
}
