//! The validation rules, one module per part of the spec. Each checks its part of the raw spec,
//! reports every problem it finds, and returns the resolved part; [`resolve`] assembles the
//! [`Job`] when all parts resolved.

mod cluster;
mod kube_pods;
mod kubernetes;
mod pipeline;
mod sagemaker;
mod trainer;

use crate::ctx::Ctx;
use crate::model::{Job, NAME_SUFFIX_LEN, is_job_name};
use crate::path;
use crate::raw::RawSpec;
use crate::spans::KeyPath;

pub use kubernetes::MAX_POD_NAME;
pub(crate) use sagemaker::is_remote_uri;

/// Checks every rule on `raw`; `None` when any part could not be resolved.
pub(crate) fn resolve(ctx: &mut Ctx<'_>, raw: &RawSpec) -> Option<Job> {
    if raw.version != 1 {
        ctx.error(
            "hetgen::spec::version",
            &path!["version"],
            format!("unsupported spec version `{}`", raw.version),
            "this hetgen reads version 1",
            "set `version = 1`",
        );
    }
    let fixed_name = raw.job.fixed_name.unwrap_or(false);
    job_name(ctx, &raw.job.name, fixed_name);
    let seed = raw.job.seed.unwrap_or(0);
    if seed < 0 {
        ctx.error(
            "hetgen::spec::seed",
            &path!["job", "seed"],
            "`seed` must not be negative",
            "negative",
            "use a seed of 0 or more",
        );
    }

    let groups = cluster::groups(ctx, raw);
    let channels = cluster::channels(ctx, raw, &groups);
    let pipeline = pipeline::pipeline(ctx, raw, &groups, &channels);
    let trainer = trainer::trainer(ctx, raw, &groups, pipeline.as_ref());
    let sagemaker = raw
        .sagemaker
        .as_ref()
        .map(|sm| sagemaker::sagemaker(ctx, sm, &groups, raw));
    let kubernetes = raw
        .kubernetes
        .as_ref()
        .map(|k| kubernetes::kubernetes(ctx, k, raw, &groups, &channels));

    Some(Job {
        name: raw.job.name.clone(),
        fixed_name,
        seed: seed.max(0) as u64,
        groups,
        channels,
        pipeline: pipeline?,
        trainer: trainer?,
        sagemaker: match sagemaker {
            Some(sm) => Some(sm?),
            None => None,
        },
        kubernetes: match kubernetes {
            Some(k) => Some(k?),
            None => None,
        },
    })
}

fn job_name(ctx: &mut Ctx<'_>, name: &str, fixed: bool) {
    let limit = if fixed { 63 } else { 63 - NAME_SUFFIX_LEN };
    let at = path!["job", "name"];
    if !is_job_name(name) {
        ctx.error(
            "hetgen::spec::job-name",
            &at,
            format!("`{name}` is not a valid SageMaker training job name"),
            "not a valid job name",
            "use letters, digits and hyphens, starting and ending with a letter or digit",
        );
    } else if name.len() > limit {
        let why = if fixed {
            "SageMaker allows 63 characters".to_owned()
        } else {
            format!(
                "`hetgen deploy` appends a {NAME_SUFFIX_LEN}-character unique suffix and SageMaker allows 63"
            )
        };
        ctx.error(
            "hetgen::spec::job-name-length",
            &at,
            format!("job name is {} characters, at most {limit} fit", name.len()),
            "too long",
            format!("shorten it: {why}"),
        );
    }
}

/// Checks `min <= value <= max` for an integer the user wrote at `at` (messages name it by its
/// key); reports and returns `None` otherwise.
pub(crate) fn int_in(
    ctx: &mut Ctx<'_>,
    code: &'static str,
    at: &KeyPath,
    value: i64,
    (min, max): (i64, i64),
) -> Option<i64> {
    if (min..=max).contains(&value) {
        return Some(value);
    }
    let what = at.name();
    let (label, help) = if value < min {
        ("too small", format!("{what} must be at least {min}"))
    } else {
        ("too large", format!("{what} must be at most {max}"))
    };
    ctx.error(code, at, format!("{what} is `{value}`"), label, help);
    None
}

/// Checks `min <= value <= max` for a float (NaN fails); reports and returns `false` otherwise.
pub(crate) fn float_in(
    ctx: &mut Ctx<'_>,
    code: &'static str,
    at: &KeyPath,
    value: f64,
    (min, max): (f64, f64),
    what: &str,
) -> bool {
    if (min..=max).contains(&value) {
        return true;
    }
    ctx.error(
        code,
        at,
        format!("{what} is `{value}`, outside [{min}, {max}]"),
        "out of range",
        format!("use a value from {min} to {max}"),
    );
    false
}
