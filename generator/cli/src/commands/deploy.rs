//! `hetgen deploy [SPEC]`: send what `hetgen render` wrote to SageMaker.

use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use hetgen_deploy::logs::JobLogs;
use hetgen_deploy::request::Request;
use hetgen_deploy::{DeployError, JOB_TAG, jobs, unique_name};
use hetgen_env::TOKEN_VAR;
use hetgen_spec::Job;

use super::{ensure_fresh, render_spec, write_bundle};
use crate::cli::{DeployArgs, Format};
use crate::exit::Failure;
use crate::follow::{Ended, Follow, interrupted_note};
use crate::view::{Filter, LogView, Target, label_width};

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
    let request = read_request(&args.out.join(&rendered.dir))?;
    let name = job_name(args, &job, &request)?;
    // A fresh token per submission, only in the request: never in a rendered file.
    let token = hetgen_env::job_token().map_err(|source| Failure::Token { source })?;
    let request = request.renamed(&name).with_environment(TOKEN_VAR, &token);
    // Each job keeps its checkpoints under a location of its own, unless it continues one.
    let request = match (&args.resume_from, sm.checkpoint_uri_of(&name)) {
        (Some(earlier), _) => {
            let resumed = super::block_on(resumed(args, &job, &sm.region, earlier))?;
            eprintln!(
                "continuing `{earlier}` ({}): starting from its checkpoints in {}",
                resumed.status, resumed.uri
            );
            request.with_checkpoint_uri(&resumed.uri)
        }
        (None, Some(uri)) => request.with_checkpoint_uri(&uri),
        (None, None) => request,
    };
    // On AWS's PyTorch image the code travels as a source bundle, uploaded before the job
    // that downloads it is submitted.
    let bundle = match request.submit_directory() {
        Some(uri) => Some((write_bundle(&job, &args.spec, &args.out, &args.wheel)?, uri)),
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
        let aws = hetgen_deploy::Aws::connect(&args.aws.connection(), Some(&sm.region)).await?;
        let client = aws.sagemaker();
        if let Some((bundle, uri)) = &bundle {
            hetgen_deploy::upload::upload(&aws.s3(), &bundle.archive, uri).await?;
            eprintln!(
                "uploaded the source bundle ({:.1} MiB) to {uri}",
                bundle.bytes as f64 / (1024.0 * 1024.0)
            );
        }
        let arn = jobs::submit(&client, &request).await?;
        println!("{arn}");
        eprintln!("submitted training job `{name}`");
        if !args.wait {
            return Ok(ExitCode::SUCCESS);
        }
        wait(args, &aws, &client, &job, name).await
    })
}

/// The earlier job a `--resume-from` job continues: its checkpoint location and status.
struct Resumed {
    uri: String,
    status: String,
}

/// Looks up the earlier job `earlier` that `job` continues, and refuses one it must not: one
/// that does not exist or kept no checkpoints, one still running (two jobs would write one
/// location, each over the other's checkpoints), and one of another `[job] name`, whose
/// checkpoints are another model's.
async fn resumed(
    args: &DeployArgs,
    job: &Job,
    region: &str,
    earlier: &str,
) -> Result<Resumed, Failure> {
    let refuse = |why: String| Failure::NothingToResume {
        job: earlier.to_owned(),
        why,
    };
    let connection = args.aws.connection();
    let aws = hetgen_deploy::Aws::connect(&connection, Some(region)).await?;
    let client = aws.sagemaker();
    let status = match jobs::describe(&client, earlier).await {
        Ok(status) => status,
        Err(DeployError::NotFound { .. }) => {
            // `--region` wins over the spec's, as in the connection.
            let region = connection.region.as_deref().unwrap_or(region);
            return Err(refuse(format!(
                "there is no training job of that name in {region}"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    if !status.is_terminal() {
        return Err(refuse(format!(
            "it is still {}, and two jobs would write one checkpoint location; wait for it to \
             end or stop it (`hetgen stop {earlier}`)",
            status.status
        )));
    }
    let trained = jobs::tags(&client, earlier, &status.arn)
        .await?
        .remove(JOB_TAG);
    match trained {
        Some(trained) if trained == job.name => {}
        Some(trained) => {
            return Err(refuse(format!(
                "it trained `{trained}`, not this spec's `{}`: its checkpoints are another \
                 job's",
                job.name
            )));
        }
        None => {
            return Err(refuse(format!(
                "it has no `{JOB_TAG}` tag, so hetgen cannot tell which job it trained"
            )));
        }
    }
    let uri = status
        .checkpoint_uri
        .ok_or_else(|| refuse("it was submitted without a CheckpointConfig".to_owned()))?;
    Ok(Resumed {
        uri,
        status: status.status,
    })
}

/// The request `hetgen render` wrote to `job_root`.
fn read_request(job_root: &Path) -> Result<Request, Failure> {
    let path = job_root.join(hetgen_render::request::REQUEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| Failure::Read {
        path: path.clone(),
        hint: "run `hetgen render` first".to_owned(),
        source,
    })?;
    Ok(Request::parse(&text)?)
}

/// The TrainingJobName to submit: `--name` as given, the spec's fixed name, or the rendered name
/// with a unique suffix.
fn job_name(args: &DeployArgs, job: &Job, request: &Request) -> Result<String, Failure> {
    Ok(match &args.name {
        Some(name) if hetgen_spec::model::is_job_name(name) => name.clone(),
        Some(name) => return Err(Failure::BadJobName { name: name.clone() }),
        None if job.fixed_name => request.name().to_owned(),
        None => unique_name(request.name(), SystemTime::now()),
    })
}

/// `--wait`: follows the submitted job (and its hosts' logs unless `--no-logs`) until it ends;
/// exit 0 only if it completes, 130 when the user stops following.
async fn wait(
    args: &DeployArgs,
    aws: &hetgen_deploy::Aws,
    client: &hetgen_deploy::SageMakerClient,
    job: &Job,
    name: String,
) -> Result<ExitCode, Failure> {
    // Every host of the job, labelled as `deploy --local` labels them.
    let width = label_width(
        job.groups.iter().map(|g| g.count as usize).sum(),
        job.groups.iter().map(|g| g.name.as_str()),
    );
    let mut view = LogView::new(Format::Human, Target::Stderr, Filter::default(), width);
    let follow = Follow {
        sagemaker: client,
        logs: (!args.no_logs).then(|| JobLogs::new(aws.logs(), &name, None)),
        name: &name,
        interval: args.poll_interval,
        transitions: true,
    };
    let ended = follow.run(&mut view).await;
    view.end();
    let (end, first) = match ended? {
        Ended::Job(ended) => *ended,
        Ended::Interrupted => {
            eprintln!("{}", interrupted_note(&name));
            return Ok(ExitCode::from(130));
        }
    };
    if end.status == "Completed" {
        eprintln!("training job `{name}` completed");
        Ok(ExitCode::SUCCESS)
    } else {
        // The script that raised first is the cause, whichever host SageMaker's reason names.
        let reason = match (first.first(), end.failure_reason) {
            (Some((host, exception)), Some(sagemaker)) if !sagemaker.contains(exception) => {
                Some(format!(
                    "{exception} (the first script to raise, on {host}; SageMaker's reason, \
                     from the host that ended first: {sagemaker})"
                ))
            }
            (_, reason) => reason,
        };
        Err(Failure::JobFailed {
            name,
            status: end.status,
            reason,
        })
    }
}
