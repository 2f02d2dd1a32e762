//! How the commands that talk to SageMaker reach AWS.

use clap::Args;

/// How to reach AWS. Unset options fall back to the standard AWS environment and config files.
#[derive(Debug, Args)]
pub struct AwsArgs {
    /// A named profile from the AWS config files
    #[arg(long)]
    pub profile: Option<String>,
    /// The AWS region (default: the spec's `[sagemaker] region`, else `AWS_REGION`)
    #[arg(long)]
    pub region: Option<String>,
    /// Send requests here instead of SageMaker (emulators, VPC endpoints); `AWS_ENDPOINT_URL`
    /// works too
    #[arg(long)]
    pub endpoint_url: Option<String>,
}

impl AwsArgs {
    pub fn connection(&self) -> hetgen_deploy::Connection {
        hetgen_deploy::Connection {
            profile: self.profile.clone(),
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}
