//! AWS's prebuilt PyTorch training images, as the SageMaker Python SDK 2.x names them.
//!
//! A script-mode job without `image_uri` runs on
//! `<registry>.dkr.ecr.<region>.amazonaws.com/pytorch-training:<version>-<gpu|cpu>-<py>`. The
//! versions, their Python versions and the per-region registries below are the SDK's own
//! (`sagemaker/image_uri_config/pytorch.json` of SDK 2.257, `training` scope), restricted to
//! the releases whose registry table is the one given here (2.4.0 onwards; older releases list
//! other regions). Regions outside the table have no such image.

/// `(version, Python version)` of every release hetgen knows, oldest first.
pub const VERSIONS: &[(&str, &str)] = &[
    ("2.4.0", "py311"),
    ("2.5.1", "py311"),
    ("2.6.0", "py312"),
    ("2.7.1", "py312"),
    ("2.8.0", "py312"),
];

/// The newest training release SDK 2.x knows: the default `framework_version`.
pub const DEFAULT_VERSION: &str = "2.8.0";

/// The entry point SageMaker runs on every host of a framework-mode job (`sagemaker_program`):
/// hetgen's role launcher from the wheel in the source bundle.
pub const PROGRAM: &str = "hetgen_launcher.py";

/// What every host of a job on AWS's PyTorch image runs first (the request's
/// `ContainerEntrypoint`, then [`CONTAINER_ARGUMENTS`]): the image's own start, with a stop
/// that reaches the script.
///
/// The image's `ENTRYPOINT` is `bash -m start_with_right_hostname.sh`, which runs the toolkit's
/// `train` as a child. That bash is process 1 of the container and has no SIGTERM handler, so
/// the kernel drops the SIGTERM SageMaker sends on a stop or a timeout, and 120 s later SIGKILL
/// ends every process: the script never learns it is being stopped. This `bash -c` runs the
/// same script (without `-m`, which changes nothing where there is no terminal) in a session of
/// its own and traps SIGTERM.
///
/// - The session starts with SIGTERM and SIGINT ignored. The image's script and the training
///   toolkit have nothing to do on a stop but pass on the output of what they started, and the
///   toolkit has no handler: were it to die at the stop, the launcher's, torchrun's and the
///   script's output would go into a pipe nobody reads. A checkpoint's `print` would then raise
///   `BrokenPipeError` in the middle of the script's SIGTERM handler. hetgen's launcher takes
///   the signal with handlers of its own and starts torchrun with the default action.
/// - On a stop it sends SIGTERM to the whole session every second until no process of it is
///   left (within the platform's grace period), so a process that starts after the stop (the
///   launcher, once the toolkit's `pip install` is done) gets it too. The launcher and the data
///   server take a repeated SIGTERM as one.
///
/// The exit status is the image script's. It fits the API's 256 characters per item.
pub const CONTAINER_ENTRYPOINT: [&str; 4] = [
    "/bin/bash",
    "-c",
    "trap t=1 TERM INT;\
     (trap '' TERM INT;exec setsid -w bash start_with_right_hostname.sh \"$@\")&p=$!;wait $p;\
     while [ $t ]&&kill -TERM -- -$p 2>/dev/null;do sleep 1;done;wait $p",
    "hetgen-entry",
];

/// The arguments of [`CONTAINER_ENTRYPOINT`]: what SageMaker passes the image by default.
pub const CONTAINER_ARGUMENTS: [&str; 1] = ["train"];

/// The job file inside the source bundle.
pub const JOB_FILE: &str = "hetgen-job.json";

/// The hyperparameter naming the entry point the toolkit runs ([`PROGRAM`]).
pub const PROGRAM_HP: &str = "sagemaker_program";
/// The hyperparameter naming where the toolkit downloads the source bundle from
/// ([`bundle_uri`]).
pub const SUBMIT_DIRECTORY_HP: &str = "sagemaker_submit_directory";
/// The hyperparameter with the toolkit's log level.
pub const LOG_LEVEL_HP: &str = "sagemaker_container_log_level";
/// The hyperparameter with the training job's name.
pub const JOB_NAME_HP: &str = "sagemaker_job_name";
/// The hyperparameter with the job's region.
pub const REGION_HP: &str = "sagemaker_region";

/// The hyperparameters a framework-mode job carries besides the user's, as SDK 2.x's `PyTorch`
/// estimator sets them (hetgen-render writes them; a spec may not).
pub const HYPERPARAMETERS: [&str; 5] = [
    PROGRAM_HP,
    SUBMIT_DIRECTORY_HP,
    LOG_LEVEL_HP,
    JOB_NAME_HP,
    REGION_HP,
];

/// The source bundle's file name: the archive `hetgen render`'s bundle step writes, and the
/// last part of its S3 key.
pub const BUNDLE_FILE: &str = "sourcedir.tar.gz";

/// Where the source bundle of job `job` goes, as the SageMaker Python SDK puts it:
/// `<code_location>/<job>/source/sourcedir.tar.gz` (`code_location` is `s3://bucket[/prefix]`
/// without a trailing `/`).
pub fn bundle_uri(code_location: &str, job: &str) -> String {
    format!("{code_location}/{job}/source/{BUNDLE_FILE}")
}

/// The `(code_location, job)` a [`bundle_uri`] was made of, `None` for another uri.
pub fn bundle_uri_parts(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_suffix(BUNDLE_FILE)?.strip_suffix("/source/")?;
    let (code_location, job) = rest.rsplit_once('/')?;
    (!code_location.is_empty() && !job.is_empty()).then_some((code_location, job))
}

/// The ECR repository of the training images.
pub const REPOSITORY: &str = "pytorch-training";

/// The account holding the images, per region (most regions share `763104351884`).
const REGISTRIES: &[(&str, &str)] = &[
    ("af-south-1", "626614931356"),
    ("ap-east-1", "871362719292"),
    ("ap-east-2", "975050140332"),
    ("ap-northeast-1", "763104351884"),
    ("ap-northeast-2", "763104351884"),
    ("ap-northeast-3", "364406365360"),
    ("ap-south-1", "763104351884"),
    ("ap-south-2", "772153158452"),
    ("ap-southeast-1", "763104351884"),
    ("ap-southeast-2", "763104351884"),
    ("ap-southeast-3", "907027046896"),
    ("ap-southeast-4", "457447274322"),
    ("ap-southeast-5", "550225433462"),
    ("ap-southeast-6", "633930458069"),
    ("ap-southeast-7", "590183813437"),
    ("ca-central-1", "763104351884"),
    ("ca-west-1", "204538143572"),
    ("cn-north-1", "727897471807"),
    ("cn-northwest-1", "727897471807"),
    ("eu-central-1", "763104351884"),
    ("eu-central-2", "380420809688"),
    ("eu-north-1", "763104351884"),
    ("eu-south-1", "692866216735"),
    ("eu-south-2", "503227376785"),
    ("eu-west-1", "763104351884"),
    ("eu-west-2", "763104351884"),
    ("eu-west-3", "763104351884"),
    ("il-central-1", "780543022126"),
    ("me-central-1", "914824155844"),
    ("me-south-1", "217643126080"),
    ("mx-central-1", "637423239942"),
    ("sa-east-1", "763104351884"),
    ("us-east-1", "763104351884"),
    ("us-east-2", "763104351884"),
    ("us-gov-east-1", "446045086412"),
    ("us-gov-west-1", "442386744353"),
    ("us-west-1", "763104351884"),
    ("us-west-2", "763104351884"),
];

/// The full release a version names: itself, or the release of a `major.minor` alias
/// (`"2.8"` → `"2.8.0"`), as the SDK resolves them.
pub fn release(version: &str) -> Option<&'static str> {
    VERSIONS.iter().map(|(v, _)| *v).find(|v| {
        *v == version
            || v.rsplit_once('.')
                .is_some_and(|(minor, _)| minor == version)
    })
}

/// The Python version of a release (`py312`).
pub fn python(release: &str) -> Option<&'static str> {
    VERSIONS
        .iter()
        .find(|(v, _)| *v == release)
        .map(|(_, p)| *p)
}

/// The registry account of `region`, when the images are published there.
pub fn registry(region: &str) -> Option<&'static str> {
    REGISTRIES
        .iter()
        .find(|(r, _)| *r == region)
        .map(|(_, account)| *account)
}

/// The regions with images, for hints.
pub fn regions() -> impl Iterator<Item = &'static str> {
    REGISTRIES.iter().map(|(r, _)| *r)
}

/// The processor the SDK picks for a job: `gpu` when any group's instance family starts with
/// `g` or `p` (the SDK then uses the GPU image on every group), else `cpu`.
pub fn processor<'a>(instance_types: impl IntoIterator<Item = &'a str>) -> &'static str {
    let gpu = instance_types
        .into_iter()
        .any(|t| family(t).is_some_and(|f| f.starts_with(['g', 'p'])));
    if gpu { "gpu" } else { "cpu" }
}

/// `ml.g5.xlarge` → `g5`.
pub fn family(instance_type: &str) -> Option<&str> {
    instance_type.strip_prefix("ml.")?.split('.').next()
}

/// The image of `release` for `processor` and `py_version` in `region`, when published there.
pub fn image_uri(region: &str, release: &str, processor: &str, py_version: &str) -> Option<String> {
    let account = registry(region)?;
    // The China partition's ECR endpoints end in `.com.cn`.
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    Some(format!(
        "{account}.dkr.ecr.{region}.{domain}/{REPOSITORY}:{release}-{processor}-{py_version}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_point_fits_the_api_s_limits() {
        // TrainingContainerEntrypoint / TrainingContainerArguments: 1 to 100 strings of at
        // most 256 characters.
        for item in CONTAINER_ENTRYPOINT.iter().chain(&CONTAINER_ARGUMENTS) {
            assert!(item.len() <= 256, "{} characters: {item}", item.len());
        }
    }

    #[test]
    fn versions_resolve_as_the_sdk_does() {
        assert_eq!(release("2.8.0"), Some("2.8.0"));
        assert_eq!(release("2.8"), Some("2.8.0"));
        assert_eq!(release("2.5"), Some("2.5.1"));
        assert_eq!(release("2.5.0"), None);
        assert_eq!(release("2"), None);
        assert_eq!(release("2.80"), None);
        assert_eq!(release(DEFAULT_VERSION), Some(DEFAULT_VERSION));
        assert_eq!(python("2.8.0"), Some("py312"));
        assert_eq!(python("2.4.0"), Some("py311"));
    }

    #[test]
    fn image_uris_follow_the_registry_table() {
        assert_eq!(
            image_uri("us-east-1", "2.8.0", "gpu", "py312").unwrap(),
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312"
        );
        assert_eq!(
            image_uri("af-south-1", "2.6.0", "cpu", "py312").unwrap(),
            "626614931356.dkr.ecr.af-south-1.amazonaws.com/pytorch-training:2.6.0-cpu-py312"
        );
        assert_eq!(
            image_uri("cn-north-1", "2.8.0", "gpu", "py312").unwrap(),
            "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.8.0-gpu-py312"
        );
        assert_eq!(image_uri("xx-nowhere-1", "2.8.0", "gpu", "py312"), None);
    }

    #[test]
    fn bundle_uris_come_apart_into_what_they_were_made_of() {
        let uri = bundle_uri("s3://b/code", "digits");
        assert_eq!(uri, "s3://b/code/digits/source/sourcedir.tar.gz");
        assert_eq!(bundle_uri_parts(&uri), Some(("s3://b/code", "digits")));
        assert_eq!(
            bundle_uri_parts(&bundle_uri("s3://b", "j")),
            Some(("s3://b", "j"))
        );
        assert_eq!(bundle_uri_parts("s3://b/j/sourcedir.tar.gz"), None);
        assert_eq!(bundle_uri_parts("s3://b/code/j/source/other.tar.gz"), None);
        assert_eq!(bundle_uri_parts("/source/sourcedir.tar.gz"), None);
    }

    #[test]
    fn one_gpu_group_makes_the_whole_job_gpu() {
        assert_eq!(processor(["ml.c5.xlarge", "ml.g5.xlarge"]), "gpu");
        assert_eq!(processor(["ml.p4d.24xlarge"]), "gpu");
        assert_eq!(processor(["ml.c5.xlarge", "ml.m5.large"]), "cpu");
    }
}
