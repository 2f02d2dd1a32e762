//! `hetgen status JOB`, `hetgen stop JOB`, `hetgen list`.

use std::process::ExitCode;

use hetgen_deploy::jobs;

use crate::cli::{Format, ListArgs, StatusArgs, StopArgs};
use crate::exit::Failure;

pub fn status(args: &StatusArgs) -> Result<ExitCode, Failure> {
    let status = super::block_on(async {
        let client = hetgen_deploy::Aws::connect(&args.aws.connection(), None)
            .await?
            .sagemaker();
        jobs::describe(&client, &args.job).await
    })?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&status).expect("JSON serializes")
        ),
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
    super::block_on(async {
        let client = hetgen_deploy::Aws::connect(&args.aws.connection(), None)
            .await?
            .sagemaker();
        jobs::stop(&client, &args.job).await
    })?;
    eprintln!(
        "stopping training job `{}`: every instance gets SIGTERM and 120 s to exit",
        args.job
    );
    Ok(ExitCode::SUCCESS)
}

pub fn list(args: &ListArgs) -> Result<ExitCode, Failure> {
    let jobs = super::block_on(async {
        let client = hetgen_deploy::Aws::connect(&args.aws.connection(), None)
            .await?
            .sagemaker();
        jobs::list(&client, args.max).await
    })?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&jobs).expect("JSON serializes")
        ),
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
