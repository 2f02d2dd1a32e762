//! `hetgen status JOB`, `hetgen stop JOB`, `hetgen list`.

use std::process::ExitCode;

use hetgen_deploy::{DeployError, SageMakerClient, jobs};

use crate::cli::{AwsArgs, Format, ListArgs, StatusArgs, StopArgs};
use crate::exit::Failure;
use crate::output::print_json;

/// A SageMaker client as the AWS flags say, its credentials resolved up front.
async fn sagemaker(aws: &AwsArgs) -> Result<SageMakerClient, DeployError> {
    Ok(hetgen_deploy::Aws::connect(&aws.connection(), None)
        .await?
        .sagemaker())
}

pub fn status(args: &StatusArgs) -> Result<ExitCode, Failure> {
    let status =
        super::block_on(async { jobs::describe(&sagemaker(&args.aws).await?, &args.job).await })?;
    match args.format {
        Format::Json => print_json(&status),
        Format::Human => {
            let secondary = status
                .secondary_status
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            println!("{}: {}{secondary}", status.name, status.status);
            for g in &status.instance_groups {
                println!("  group {}: {} × {}", g.name, g.count, g.instance_type);
            }
            for c in &status.channels {
                let to = if c.instance_groups.is_empty() {
                    "all groups".to_owned()
                } else {
                    c.instance_groups.join(", ")
                };
                println!("  channel {}: {} → {to}", c.name, c.uri);
            }
            if let Some(reason) = &status.failure_reason {
                println!("  failure: {reason}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stop(args: &StopArgs) -> Result<ExitCode, Failure> {
    super::block_on(async { jobs::stop(&sagemaker(&args.aws).await?, &args.job).await })?;
    eprintln!(
        "stopping training job `{}`: every instance gets SIGTERM and 120 s to exit",
        args.job
    );
    Ok(ExitCode::SUCCESS)
}

pub fn list(args: &ListArgs) -> Result<ExitCode, Failure> {
    let jobs = super::block_on(async { jobs::list(&sagemaker(&args.aws).await?, args.max).await })?;
    match args.format {
        Format::Json => print_json(&jobs),
        Format::Human => {
            for j in &jobs {
                println!(
                    "{:<63}  {:<10}  {}",
                    j.name,
                    j.status,
                    j.created.as_deref().unwrap_or("-")
                );
            }
            if jobs.is_empty() {
                eprintln!("no recent training jobs were started by hetgen");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
