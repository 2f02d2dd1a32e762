//! `[sagemaker] image_uri`: the spec's own training image, or, for a script without one, AWS's
//! PyTorch training image and what framework mode needs around it.

use crate::ctx::Ctx;
use crate::framework;
use crate::model::{Framework, Group, Role};
use crate::path;
use crate::raw::{RawSageMaker, RawSpec, RawStage};

use super::{REGION, S3_URI};

/// The training image: the spec's own (`image_uri`), or, for a script without one, AWS's
/// PyTorch training image, with what framework mode needs.
pub(super) fn image(
    ctx: &mut Ctx<'_>,
    sm: &RawSageMaker,
    groups: &[Group],
    raw: &RawSpec,
) -> Option<(String, Option<Framework>)> {
    if let Some(uri) = &sm.image_uri {
        return own_image(ctx, sm, uri).then(|| (uri.clone(), None));
    }
    if raw.trainer.script.is_none() {
        ctx.error(
            "hetgen::spec::image-uri",
            &path!["sagemaker"],
            "`image_uri` is missing: the built-in trainer runs in hetgen's own image",
            "no `image_uri`",
            "build the image from the rendered Dockerfile, push it to ECR and set `image_uri` \
             to its uri (only a `script` trainer can run on AWS's PyTorch image)",
        );
        return None;
    }
    let framework = aws_image(ctx, sm, groups, raw)?;
    let uri = framework::image_uri(
        &sm.region,
        &framework.framework_version,
        &framework.processor,
        &framework.py_version,
    )?;
    Some((uri, Some(framework)))
}

/// Whether `uri` can name an image, and no key that only AWS's image reads is set beside it.
fn own_image(ctx: &mut Ctx<'_>, sm: &RawSageMaker, uri: &str) -> bool {
    let at = path!["sagemaker"];
    let mut ok = true;
    if uri.is_empty() || uri.len() > 255 || uri.contains(char::is_whitespace) {
        ok = false;
        ctx.error(
            "hetgen::spec::image-uri",
            &at.at("image_uri"),
            "`image_uri` must be 1 to 255 characters without spaces",
            "not an image uri",
            "give the ECR uri of the image built from the rendered Dockerfile",
        );
    }
    let framework_keys = [
        ("framework_version", sm.framework_version.is_some()),
        ("py_version", sm.py_version.is_some()),
        ("code_location", sm.code_location.is_some()),
    ];
    for (key, _) in framework_keys.iter().filter(|(_, set)| *set) {
        ok = false;
        ctx.error_at_key(
            "hetgen::spec::framework-key",
            &at.at(*key),
            format!("`{key}` is for AWS's PyTorch image, but `image_uri` names your own"),
            "not used with `image_uri`",
            format!(
                "remove `{key}`, or remove `image_uri` to run the script on AWS's PyTorch \
                 training image"
            ),
        );
    }
    ok
}

/// Framework mode: the release, Python and bundle location for AWS's PyTorch image, when the
/// job can run on it.
fn aws_image(
    ctx: &mut Ctx<'_>,
    sm: &RawSageMaker,
    groups: &[Group],
    raw: &RawSpec,
) -> Option<Framework> {
    let at = path!["sagemaker"];
    let mut ok = fits_aws_image(ctx, groups, raw);
    let version = sm
        .framework_version
        .as_deref()
        .unwrap_or(framework::DEFAULT_VERSION);
    let release = framework::release(version);
    if release.is_none() {
        ok = false;
        let known: Vec<&str> = framework::VERSIONS.iter().map(|(v, _)| *v).collect();
        ctx.error(
            "hetgen::spec::framework-version",
            &at.at("framework_version"),
            format!("hetgen knows no PyTorch training image `{version}`"),
            "unknown version",
            format!(
                "use one of {} (or a `major.minor` such as `2.8`), or build your own image \
                 and set `image_uri`",
                known.join(", ")
            ),
        );
    }
    let python = release.and_then(framework::python);
    let py_version = sm.py_version.clone().or(python.map(str::to_owned));
    if let (Some(release), Some(python), Some(py)) = (release, python, &py_version)
        && py != python
    {
        ok = false;
        ctx.error(
            "hetgen::spec::py-version",
            &at.at("py_version"),
            format!("PyTorch {release}'s training image is built for `{python}`, not `{py}`"),
            "no such image",
            format!("set `py_version = \"{python}\"` or remove it"),
        );
    }
    if REGION.is_match(&sm.region) && framework::registry(&sm.region).is_none() {
        ok = false;
        ctx.error(
            "hetgen::spec::framework-region",
            &at.at("region"),
            format!("AWS publishes no PyTorch training image in `{}`", sm.region),
            "no image here",
            "use a region with the images, such as `us-east-1`, or build your own image and \
             set `image_uri`",
        );
    }
    let code_location = code_location(ctx, sm);
    let processor = framework::processor(groups.iter().map(|g| g.instance_type.as_str()));
    let (release, py_version, code_location) = (release?, py_version?, code_location?);
    ok.then_some(())?;
    Some(Framework {
        framework_version: release.to_owned(),
        py_version,
        processor: processor.to_owned(),
        code_location,
    })
}

/// What AWS's image cannot run: a `base_image` (nothing is built), custom stages (the wheel's
/// launcher has the built-in ones only), Trainium and Inferentia hosts, and a distribution
/// strategy on the trainer group (hetgen starts `torchrun` itself).
fn fits_aws_image(ctx: &mut Ctx<'_>, groups: &[Group], raw: &RawSpec) -> bool {
    let mut ok = true;
    if raw.trainer.base_image.is_some() {
        ok = false;
        ctx.error_at_key(
            "hetgen::spec::base-image",
            &path!["trainer", "base_image"],
            "`base_image` is what your own image is built on, but this job runs on AWS's \
             PyTorch image (no `image_uri`)",
            "no image is built",
            "remove `base_image`, or build your own image and set `[sagemaker] image_uri`",
        );
    }
    for (i, stage) in raw.pipeline.stage.iter().enumerate() {
        if let RawStage::Custom { name, .. } = stage {
            ok = false;
            ctx.error(
                "hetgen::spec::framework-custom-stage",
                &path!["pipeline", "stage", i, "op"],
                format!(
                    "custom stage `{name}` needs a launcher built with it, and AWS's PyTorch \
                     image runs the hetgen wheel's, which has the built-in stages only"
                ),
                "not in the wheel",
                "build your own image from the rendered Dockerfile (its launcher crate \
                 registers the stage) and set `[sagemaker] image_uri`",
            );
        }
    }
    for (i, g) in groups.iter().enumerate() {
        let family = framework::family(&g.instance_type).unwrap_or_default();
        if family.starts_with("trn") || family.starts_with("inf") {
            ok = false;
            ctx.error(
                "hetgen::spec::framework-instance-type",
                &path!["instance_group", i, "instance_type"],
                format!(
                    "AWS's PyTorch training image does not run on `{}` (Trainium and \
                     Inferentia need a Neuron image)",
                    g.instance_type
                ),
                "no PyTorch training image for this type",
                "set `[sagemaker] image_uri` to a Neuron PyTorch image, or use a GPU type",
            );
        }
        if g.role == Role::Trainer && g.distribution.is_some() {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::distribution-framework",
                &path!["instance_group", i, "distribution"],
                "hetgen's launcher starts `torchrun` across the trainer group itself",
                "not needed",
                "remove `distribution`: on AWS's image, the toolkit would start a second \
                 `torchrun` that spans no data host",
            );
        }
    }
    ok
}

/// Where the source bundle goes: `code_location`, or as the SDK does, the bucket of
/// `output_path`.
fn code_location(ctx: &mut Ctx<'_>, sm: &RawSageMaker) -> Option<String> {
    let at = path!["sagemaker"];
    match &sm.code_location {
        Some(uri) => s3_prefix(uri).or_else(|| {
            ctx.error(
                "hetgen::spec::s3-uri",
                &at.at("code_location"),
                format!("`code_location` is `{uri}`, not an S3 uri"),
                "not `s3://bucket/prefix`",
                "set `code_location` to an `s3://bucket/prefix` uri",
            );
            None
        }),
        None => s3_prefix(&sm.output_path)
            .map(|p| p.splitn(4, '/').take(3).collect::<Vec<_>>().join("/"))
            .or_else(|| {
                ctx.error(
                    "hetgen::spec::code-location",
                    &at.at("output_path"),
                    "the source bundle goes to the bucket of `output_path`, which is not an \
                     `s3://` uri",
                    "no bucket for the source bundle",
                    "set `code_location = \"s3://bucket/prefix\"`",
                );
                None
            }),
    }
}

/// `s3://bucket/prefix/` → `s3://bucket/prefix`; `None` when it is not an `s3://` uri with a
/// bucket.
fn s3_prefix(uri: &str) -> Option<String> {
    let caps = S3_URI.captures(uri)?;
    (&caps[1] == "s3" && !caps[2].is_empty()).then(|| uri.trim_end_matches('/').to_owned())
}
