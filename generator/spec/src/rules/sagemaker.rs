//! `[sagemaker]`: the limits the SageMaker service enforces but botocore does not check.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use crate::ctx::Ctx;
use crate::duration::parse_seconds;
use crate::framework;
use crate::model::{Group, InputMode, Metric, SageMaker, Vpc, builtin_metrics};
use crate::path;
use crate::raw::{HyperValue, RawSageMaker, RawSpec};
use crate::rules::int_in;
use crate::spans::KeyPath;

/// How many tags hetgen adds to every job ([`crate::model::HETGEN_TAGS`]).
const HETGEN_TAGS: usize = crate::model::HETGEN_TAGS.len();
const MAX_TAGS: usize = 50;
const MAX_ENVIRONMENT: usize = 100;
const MAX_HYPERPARAMETERS: usize = 100;
const MAX_METRICS: usize = 40;
const MAX_RUNTIME_S: u64 = 28 * 86_400;
const MAX_KEEP_ALIVE_S: u64 = 21_600;

static S3_URI: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(https|s3)://([^/]+)/?(.*)$").unwrap());
static ROLE_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$").unwrap()
});
static REGION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$").unwrap());
static TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$").unwrap());
pub(crate) static ENV_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_]*$").unwrap());
static VPC_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[-0-9a-zA-Z]+$").unwrap());

mod image;

/// Whether SageMaker can read `uri` (`s3://` or `https://` with a host).
pub(crate) fn is_remote_uri(uri: &str) -> bool {
    uri.len() <= 1024 && S3_URI.is_match(uri)
}

pub(super) fn sagemaker(
    ctx: &mut Ctx<'_>,
    sm: &RawSageMaker,
    groups: &[Group],
    raw: &RawSpec,
) -> Option<SageMaker> {
    let at = path!["sagemaker"];
    let script = raw.trainer.script.is_some();
    let mut ok = check_account(ctx, sm);
    let image = image::image(ctx, sm, groups, raw);
    ok &= check_uris(ctx, sm);
    let volume = int_in(
        ctx,
        "hetgen::spec::volume",
        &at.at("volume_gb"),
        sm.volume_gb.unwrap_or(30),
        (1, 16_384),
    );
    let max_runtime = duration(
        ctx,
        &at.at("max_runtime"),
        sm.max_runtime.as_deref().unwrap_or("1d"),
        MAX_RUNTIME_S,
        "max runtime",
    );
    let keep_alive = sm
        .keep_alive
        .as_deref()
        .map(|k| duration(ctx, &at.at("keep_alive"), k, MAX_KEEP_ALIVE_S, "keep-alive"));
    ok &= check_warm_pool(ctx, sm, groups);

    let tags = sm.tags.clone().unwrap_or_default();
    ok &= check_tags(ctx, &tags);
    let environment = sm.environment.clone().unwrap_or_default();
    let framework = image.as_ref().is_some_and(|(_, f)| f.is_some());
    // What hetgen adds to the job's Environment: the job token (`deploy`, the SDK files) and,
    // with a script in its own image, `SAGEMAKER_PROGRAM` unless the spec sets it.
    let added = 1 + usize::from(
        script && !framework && !environment.contains_key(crate::model::PROGRAM_VAR),
    );
    ok &= check_environment(ctx, &environment, added);
    let hyperparameters = hyperparameters(ctx, sm, groups, framework);
    let metrics = metrics(ctx, sm, script);
    let vpc = sm.vpc.as_ref().map(|v| vpc(ctx, v));

    let (image_uri, framework) = image?;
    Some(SageMaker {
        region: sm.region.clone(),
        role_arn: sm.role_arn.clone(),
        image_uri,
        framework,
        output_path: sm.output_path.clone(),
        input_mode: sm.input_mode.unwrap_or(InputMode::File),
        volume_gb: volume? as u32,
        max_runtime_s: max_runtime?,
        keep_alive_s: match keep_alive {
            Some(k) => Some(k?),
            None => None,
        },
        tags,
        environment,
        hyperparameters: hyperparameters?,
        vpc: match vpc {
            Some(v) => Some(v?),
            None => None,
        },
        inter_container_encryption: sm.inter_container_encryption.unwrap_or(false),
        checkpoint_uri: sm.checkpoint_uri.clone(),
        metrics: metrics?,
    })
    .filter(|_| ok)
}

/// The region and the execution role.
fn check_account(ctx: &mut Ctx<'_>, sm: &RawSageMaker) -> bool {
    let at = path!["sagemaker"];
    let mut ok = true;
    if !REGION.is_match(&sm.region) {
        ok = false;
        ctx.error(
            "hetgen::spec::region",
            &at.at("region"),
            format!("`{}` is not an AWS region", sm.region),
            "not a region",
            "use a region name such as `us-east-1`",
        );
    }
    if !(20..=2048).contains(&sm.role_arn.len()) || !ROLE_ARN.is_match(&sm.role_arn) {
        ok = false;
        ctx.error(
            "hetgen::spec::role-arn",
            &at.at("role_arn"),
            format!("`{}` is not an IAM role ARN", sm.role_arn),
            "not a role ARN",
            "use the execution role's ARN: `arn:aws:iam::<12-digit account>:role/<name>`",
        );
    }
    ok
}

/// `output_path` and `checkpoint_uri` are S3 uris.
fn check_uris(ctx: &mut Ctx<'_>, sm: &RawSageMaker) -> bool {
    let mut ok = true;
    for (key, value) in [
        ("output_path", Some(&sm.output_path)),
        ("checkpoint_uri", sm.checkpoint_uri.as_ref()),
    ] {
        if let Some(uri) = value
            && !is_remote_uri(uri)
        {
            ok = false;
            ctx.error(
                "hetgen::spec::s3-uri",
                &path!["sagemaker"].at(key),
                format!("`{key}` is `{uri}`, not an S3 uri"),
                "not `s3://bucket/prefix`",
                format!("set `{key}` to an `s3://bucket/prefix/` uri"),
            );
        }
    }
    ok
}

/// SageMaker keeps no heterogeneous cluster warm.
fn check_warm_pool(ctx: &mut Ctx<'_>, sm: &RawSageMaker, groups: &[Group]) -> bool {
    if sm.keep_alive.is_some() && groups.len() > 1 {
        ctx.error(
            "hetgen::spec::warm-pool-hetero",
            &path!["sagemaker", "keep_alive"],
            "warm pools (`keep_alive`) do not work with more than one instance group",
            "SageMaker rejects this",
            "remove `keep_alive`: SageMaker does not keep heterogeneous clusters warm",
        );
        return false;
    }
    true
}

/// The spec's hyperparameters as SageMaker is sent them, checked against its limits with the
/// ones hetgen adds.
fn hyperparameters(
    ctx: &mut Ctx<'_>,
    sm: &RawSageMaker,
    groups: &[Group],
    framework: bool,
) -> Option<BTreeMap<String, String>> {
    // On AWS's image the toolkit decodes every value as JSON, so they are sent JSON-encoded,
    // as SDK 2.x's framework estimators send them; an image of one's own gets them as written.
    let encode = if framework { hyper_json } else { hyper_string };
    let hyperparameters: BTreeMap<String, String> = sm
        .hyperparameters
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), encode(v)))
        .collect();
    // A distribution strategy adds the SDK's own hyperparameters, framework mode the script
    // mode ones (see hetgen-render).
    let strategy = groups.iter().any(|g| g.distribution.is_some());
    let mut ok = true;
    let reserved = if framework {
        ok &= check_reserved_hyperparameters(ctx, &hyperparameters);
        framework::HYPERPARAMETERS.len()
    } else if strategy {
        1 + usize::from(groups.len() > 1)
    } else {
        0
    };
    ok &= check_hyperparameters(ctx, &hyperparameters, reserved);
    ok.then_some(hyperparameters)
}

fn duration(ctx: &mut Ctx<'_>, at: &KeyPath, text: &str, max: u64, what: &str) -> Option<u64> {
    match parse_seconds(text) {
        Some(s) if (1..=max).contains(&s) => Some(s),
        Some(s) => {
            ctx.error(
                "hetgen::spec::duration-range",
                at,
                format!("{what} of {s} s is outside what SageMaker allows"),
                "out of range",
                format!("use from 1 s up to {max} s ({})", human(max)),
            );
            None
        }
        None => {
            ctx.error(
                "hetgen::spec::duration",
                at,
                format!("`{text}` is not a duration"),
                "not a duration",
                "write it as a number with units `d`, `h`, `m`, `s`, e.g. `\"2h\"` or `\"1h30m\"`",
            );
            None
        }
    }
}

fn human(seconds: u64) -> String {
    if seconds.is_multiple_of(86_400) {
        format!("{} days", seconds / 86_400)
    } else {
        format!("{} hours", seconds / 3_600)
    }
}

fn check_tags(ctx: &mut Ctx<'_>, tags: &BTreeMap<String, String>) -> bool {
    let at = path!["sagemaker", "tags"];
    let mut ok = true;
    if tags.len() + HETGEN_TAGS > MAX_TAGS {
        ok = false;
        ctx.error(
            "hetgen::spec::too-many-tags",
            &at,
            format!(
                "{} tags and hetgen's {HETGEN_TAGS}, SageMaker allows {MAX_TAGS}",
                tags.len()
            ),
            "too many tags",
            format!("keep at most {} tags", MAX_TAGS - HETGEN_TAGS),
        );
    }
    for (key, value) in tags {
        let key_ok = (1..=128).contains(&key.chars().count()) && TAG.is_match(key);
        let reserved = key.starts_with("aws:") || key.starts_with("hetgen:");
        if !key_ok || reserved {
            ok = false;
            let help = if reserved {
                "the `aws:` and `hetgen:` prefixes are reserved; choose another key"
            } else {
                "use 1 to 128 letters, digits, spaces and `_ . : / = + - @`"
            };
            ctx.error_at_key(
                "hetgen::spec::tag",
                &at.at(key.as_str()),
                format!("tag key `{key}` is not allowed"),
                "invalid tag key",
                help,
            );
        }
        if value.chars().count() > 256 || !TAG.is_match(value) {
            ok = false;
            ctx.error(
                "hetgen::spec::tag",
                &at.at(key.as_str()),
                format!("the value of tag `{key}` is not allowed"),
                "invalid tag value",
                "use at most 256 letters, digits, spaces and `_ . : / = + - @`",
            );
        }
    }
    ok
}

fn check_environment(ctx: &mut Ctx<'_>, env: &BTreeMap<String, String>, added: usize) -> bool {
    let at = path!["sagemaker", "environment"];
    let mut ok = true;
    let room = MAX_ENVIRONMENT - added;
    if env.len() > room {
        ok = false;
        ctx.error(
            "hetgen::spec::too-many-environment",
            &at,
            format!(
                "{} environment variables and hetgen's {added}, SageMaker allows {MAX_ENVIRONMENT}",
                env.len()
            ),
            "too many",
            format!("keep at most {room}; put the rest in a config file in the image"),
        );
    }
    for (key, value) in env {
        if key.len() > 512 || !ENV_KEY.is_match(key) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::environment-key",
                &at.at(key.as_str()),
                format!("`{key}` is not a valid environment variable name"),
                "invalid name",
                "use letters, digits and `_`, not starting with a digit",
            );
        }
        if value.len() > 512 {
            ok = false;
            ctx.error(
                "hetgen::spec::environment-value",
                &at.at(key.as_str()),
                format!(
                    "the value of `{key}` is {} bytes, SageMaker allows 512",
                    value.len()
                ),
                "too long",
                "shorten the value, or ship it as a file in the image",
            );
        }
    }
    ok
}

fn hyper_string(value: &HyperValue) -> String {
    match value {
        HyperValue::String(s) => s.clone(),
        HyperValue::Integer(i) => i.to_string(),
        HyperValue::Float(f) => f.to_string(),
        HyperValue::Bool(b) => b.to_string(),
    }
}

/// A hyperparameter value as JSON, the way SDK 2.x's framework estimators send it
/// (`json.dumps`): strings keep their quotes.
fn hyper_json(value: &HyperValue) -> String {
    serde_json::to_string(value).expect("hyperparameter values serialize")
}

/// Framework mode: hetgen sets the toolkit's own hyperparameters; the spec must not.
fn check_reserved_hyperparameters(ctx: &mut Ctx<'_>, hps: &BTreeMap<String, String>) -> bool {
    let mut ok = true;
    for key in hps
        .keys()
        .filter(|k| framework::HYPERPARAMETERS.contains(&k.as_str()))
    {
        ok = false;
        ctx.error_at_key(
            "hetgen::spec::reserved-hyperparameter",
            &path!["sagemaker", "hyperparameters"].at(key.as_str()),
            format!("`{key}` is set by hetgen for AWS's PyTorch image"),
            "reserved",
            "remove it: hetgen points the toolkit at its launcher and your source bundle",
        );
    }
    ok
}

fn check_hyperparameters(
    ctx: &mut Ctx<'_>,
    hps: &BTreeMap<String, String>,
    reserved: usize,
) -> bool {
    let at = path!["sagemaker", "hyperparameters"];
    let mut ok = true;
    if hps.len() + reserved > MAX_HYPERPARAMETERS {
        ok = false;
        let limit = MAX_HYPERPARAMETERS - reserved;
        ctx.error(
            "hetgen::spec::too-many-hyperparameters",
            &at,
            format!(
                "{} hyperparameters, SageMaker allows {limit} beside hetgen's {reserved}",
                hps.len()
            ),
            "too many",
            format!("keep at most {limit}; pass the rest in a channel or config file"),
        );
    }
    for (key, value) in hps {
        if key.chars().count() > 256 {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::hyperparameter",
                &at.at(key.as_str()),
                "hyperparameter name longer than 256 characters",
                "too long",
                "shorten the name",
            );
        }
        if value.chars().count() > 2500 {
            ok = false;
            ctx.error(
                "hetgen::spec::hyperparameter",
                &at.at(key.as_str()),
                format!(
                    "hyperparameter `{key}` is {} characters, SageMaker allows 2500",
                    value.chars().count()
                ),
                "too long",
                "pass large values in a channel or a file in the image",
            );
        }
    }
    ok
}

fn metrics(ctx: &mut Ctx<'_>, sm: &RawSageMaker, script: bool) -> Option<Vec<Metric>> {
    // The built-in trainer's `hetgen-step` lines; a user's script prints its own.
    let mut all = if script {
        Vec::new()
    } else {
        builtin_metrics()
    };
    let user = sm.metric.as_deref().unwrap_or_default();
    let mut ok = true;
    if all.len() + user.len() > MAX_METRICS {
        ok = false;
        ctx.error(
            "hetgen::spec::too-many-metrics",
            &path!["sagemaker", "metric", MAX_METRICS - all.len()],
            format!(
                "{} metrics and hetgen's {}, SageMaker allows {MAX_METRICS}",
                user.len(),
                all.len()
            ),
            "one metric too many",
            format!(
                "keep at most {} metric definitions",
                MAX_METRICS - all.len()
            ),
        );
    }
    for (i, m) in user.iter().enumerate() {
        let at = path!["sagemaker", "metric", i];
        if m.name.is_empty() || m.name.chars().count() > 255 || all.iter().any(|b| b.name == m.name)
        {
            ok = false;
            ctx.error(
                "hetgen::spec::metric-name",
                &at.at("name"),
                format!(
                    "metric name `{}` is empty, too long or already defined",
                    m.name
                ),
                "invalid metric name",
                "use a unique name of 1 to 255 characters; hetgen defines `train:*` itself",
            );
        }
        let compiled = Regex::new(&m.regex);
        let groups = compiled.as_ref().map_or(0, |r| r.captures_len() - 1);
        if m.regex.is_empty() || m.regex.chars().count() > 500 || groups == 0 {
            ok = false;
            ctx.error(
                "hetgen::spec::metric-regex",
                &at.at("regex"),
                "metric regex must compile, be 1 to 500 characters and have a capture group",
                "invalid metric regex",
                "SageMaker reads the metric's value from the regex's first group, e.g. `acc=([0-9.]+)`",
            );
        }
        all.push(Metric {
            name: m.name.clone(),
            regex: m.regex.clone(),
        });
    }
    ok.then_some(all)
}

fn vpc(ctx: &mut Ctx<'_>, v: &crate::raw::RawVpc) -> Option<Vpc> {
    let at = path!["sagemaker", "vpc"];
    let mut ok = true;
    for (key, ids, max) in [
        ("subnets", &v.subnets, 16),
        ("security_group_ids", &v.security_group_ids, 5),
    ] {
        if ids.is_empty() || ids.len() > max {
            ok = false;
            ctx.error(
                "hetgen::spec::vpc",
                &at.at(key),
                format!("{} `{key}`, SageMaker takes 1 to {max}", ids.len()),
                "wrong count",
                format!("list 1 to {max} ids"),
            );
        }
        for (i, id) in ids.iter().enumerate() {
            if id.len() > 32 || !VPC_ID.is_match(id) {
                ok = false;
                ctx.error(
                    "hetgen::spec::vpc",
                    &at.at(key).at(i),
                    format!("`{id}` is not a subnet or security group id"),
                    "invalid id",
                    "use ids such as `subnet-0abc1234` or `sg-0abc1234`",
                );
            }
        }
    }
    ok.then(|| Vpc {
        subnets: v.subnets.clone(),
        security_group_ids: v.security_group_ids.clone(),
    })
}
