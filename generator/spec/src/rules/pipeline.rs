//! The data pipeline: its source, where the source's channel goes, and the stages in order.

use crate::check::Ctx;
use crate::model::{Channel, Group, Pipeline, Role, S3Distribution, Source, Stage, TrainerCpus};
use crate::path;
use crate::raw::{RawSource, RawSpec, RawStage};
use crate::rules::cluster::ticked;
use crate::rules::{float_in, int_in};
use crate::spans::KeyPath;
use crate::suggest::did_you_mean;

/// Largest image side hetgen accepts, in pixels.
const MAX_SIDE: i64 = 16_384;

pub(super) fn pipeline(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    groups: &[Group],
    channels: &[Channel],
) -> Option<Pipeline> {
    let p = &raw.pipeline;
    let source = source(ctx, raw, groups, channels)?;
    let batch = int_in(
        ctx,
        "hetgen::spec::batch-size",
        &path!["pipeline", "batch_size"],
        p.batch_size,
        (1, 1 << 20),
        "`batch_size`",
    );
    let shard = p.shard_size.map(|s| {
        int_in(
            ctx,
            "hetgen::spec::shard-size",
            &path!["pipeline", "shard_size"],
            s,
            (1, 1 << 24),
            "`shard_size`",
        )
    });
    let threads = p.threads.map(|t| {
        int_in(
            ctx,
            "hetgen::spec::threads",
            &path!["pipeline", "threads"],
            t,
            (1, 1024),
            "`threads`",
        )
    });
    let trainer_cpus = trainer_cpus(ctx, p);

    let mut flow = Flow::from_source(&source);
    let mut stages = Vec::new();
    for (i, stage) in p.stage.iter().enumerate() {
        if let Some(s) = flow.stage(ctx, i, stage) {
            stages.push(s);
        }
    }
    let output_shape = flow.finish(ctx, p.stage.len());

    let batch = batch? as u32;
    Some(Pipeline {
        source,
        batch_size: batch,
        shard_size: match shard {
            Some(s) => s? as u32,
            None => batch.saturating_mul(4),
        },
        threads: match threads {
            Some(t) => Some(t? as u32),
            None => None,
        },
        trainer_cpus: trainer_cpus?,
        stages: (stages.len() == p.stage.len()).then_some(stages)?,
        output_shape: output_shape?,
    })
}

/// `reserve_vcpus` or `trainer_threads`, not both.
fn trainer_cpus(ctx: &mut Ctx<'_>, p: &crate::raw::RawPipeline) -> Option<TrainerCpus> {
    let reserve = p.reserve_vcpus.map(|r| {
        int_in(
            ctx,
            "hetgen::spec::reserve-vcpus",
            &path!["pipeline", "reserve_vcpus"],
            r,
            (0, 100_000),
            "`reserve_vcpus`",
        )
    });
    let threads = p.trainer_threads.map(|t| {
        int_in(
            ctx,
            "hetgen::spec::threads",
            &path!["pipeline", "trainer_threads"],
            t,
            (0, 1024),
            "`trainer_threads`",
        )
    });
    match (reserve, threads) {
        (Some(_), Some(_)) => {
            ctx.error_at_key(
                "hetgen::spec::trainer-cpus",
                &path!["pipeline", "trainer_threads"],
                "`reserve_vcpus` and `trainer_threads` both say how many of the trainer's vCPUs \
                 preprocess",
                "set one of them",
                "keep `reserve_vcpus` (vCPUs the training loop keeps) or `trainer_threads` \
                 (pipeline threads outright), not both",
            );
            None
        }
        (Some(r), None) => Some(TrainerCpus::Reserve(r? as u32)),
        (None, Some(t)) => Some(TrainerCpus::Threads(t? as u32)),
        (None, None) => Some(TrainerCpus::Auto),
    }
}

fn source(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    groups: &[Group],
    channels: &[Channel],
) -> Option<Source> {
    let at = path!["pipeline", "source"];
    match &raw.pipeline.source {
        RawSource::ImageFolder { channel } | RawSource::TarShards { channel } => {
            // Explicitly none of the trainer's vCPUs preprocess beside data groups.
            let trainer_off = raw.pipeline.trainer_threads == Some(0);
            source_channel(ctx, channel, groups, channels, trainer_off);
            Some(match &raw.pipeline.source {
                RawSource::ImageFolder { .. } => Source::ImageFolder {
                    channel: channel.clone(),
                },
                _ => Source::TarShards {
                    channel: channel.clone(),
                },
            })
        }
        RawSource::Synthetic {
            shape,
            classes,
            samples,
            encoding,
        } => {
            let [h, w, c] = *shape;
            let sides_ok = [h, w].iter().all(|s| (1..=MAX_SIDE).contains(s));
            if !sides_ok || !(c == 1 || c == 3) {
                ctx.error(
                    "hetgen::spec::synthetic-shape",
                    &at.at("shape"),
                    format!("synthetic shape `[{h}, {w}, {c}]` is not an image shape"),
                    "`[height, width, channels]`",
                    format!(
                        "use sides from 1 to {MAX_SIDE} and 1 or 3 channels, e.g. `[28, 28, 1]`"
                    ),
                );
            }
            let classes = int_in(
                ctx,
                "hetgen::spec::synthetic-classes",
                &at.at("classes"),
                classes.unwrap_or(10),
                (1, 1 << 20),
                "`classes`",
            );
            let samples = int_in(
                ctx,
                "hetgen::spec::synthetic-samples",
                &at.at("samples"),
                samples.unwrap_or(1024),
                (1, 1 << 40),
                "`samples`",
            );
            Some(Source::Synthetic {
                shape: [
                    h.clamp(1, MAX_SIDE) as u32,
                    w.clamp(1, MAX_SIDE) as u32,
                    c.clamp(1, 3) as u32,
                ],
                classes: classes? as u32,
                samples: samples? as u64,
                encoding: *encoding,
            })
        }
    }
}

/// The source's channel must exist, reach every group that runs the pipeline, and hold the
/// whole data set on each host that runs it.
fn source_channel(
    ctx: &mut Ctx<'_>,
    name: &str,
    groups: &[Group],
    channels: &[Channel],
    trainer_off: bool,
) {
    let at = path!["pipeline", "source", "channel"];
    let Some(index) = channels.iter().position(|c| c.name == name) else {
        let names: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
        let help = match did_you_mean(name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None if names.is_empty() => {
                format!("add a `[[channel]]` named `{name}` with the data's uri")
            }
            None => format!("use one of the job's channels: {}", ticked(&names)),
        };
        ctx.error(
            "hetgen::spec::unknown-channel",
            &at,
            format!("the pipeline reads unknown channel `{name}`"),
            "no such channel",
            help,
        );
        return;
    };
    let channel = &channels[index];
    if channel.distribution == S3Distribution::ShardedByS3Key {
        sharded_source(ctx, index, channel, groups, trainer_off);
    }
    if channel.instance_groups.is_empty() {
        return; // Without instance_groups SageMaker gives every channel to every host.
    }
    let has_data = groups.iter().any(|g| g.role == Role::Data);
    for g in groups {
        let runs_pipeline = g.role == Role::Data || !has_data;
        if runs_pipeline && !channel.instance_groups.contains(&g.name) {
            ctx.error(
                "hetgen::spec::channel-unreached",
                &path!["channel", index, "instance_groups"],
                format!(
                    "channel `{name}` does not reach group `{}`, which runs the pipeline",
                    g.name
                ),
                format!("`{}` missing", g.name),
                format!("add `\"{}\"` to this channel's `instance_groups`", g.name),
            );
        }
    }
}

/// `ShardedByS3Key` gives each receiving host a different part of the objects, but the data
/// service may give any shard of an epoch to any host that runs the pipeline (and a trainer's
/// ranks split the same epoch plan), so every such host needs the whole data set: sharding the
/// source is only sound when a single host runs the pipeline.
fn sharded_source(
    ctx: &mut Ctx<'_>,
    index: usize,
    channel: &Channel,
    groups: &[Group],
    trainer_off: bool,
) {
    let has_data = groups.iter().any(|g| g.role == Role::Data);
    let reached = |role: Role| -> u32 {
        groups
            .iter()
            .filter(|g| g.role == role)
            .filter(|g| {
                channel.instance_groups.is_empty() || channel.instance_groups.contains(&g.name)
            })
            .map(|g| g.count)
            .sum()
    };
    let data_hosts = reached(Role::Data);
    // Beside data groups the trainer's host preprocesses too (hybrid input) unless told not to.
    let trainer_hosts = if has_data && trainer_off {
        0
    } else {
        reached(Role::Trainer)
    };
    let hosts = data_hosts + trainer_hosts;
    if hosts > 1 {
        let mut help = "use `distribution = \"FullyReplicated\"`: any host that runs the \
                        pipeline may be given any shard of an epoch, so each needs the whole \
                        data set"
            .to_owned();
        if has_data && trainer_hosts > 0 && data_hosts <= 1 {
            help += ", or keep the trainer's own pipeline off it with `trainer_threads = 0`";
        }
        ctx.error(
            "hetgen::spec::sharded-source",
            &path!["channel", index, "distribution"],
            format!(
                "the pipeline reads channel `{}`, which is ShardedByS3Key, on {hosts} hosts",
                channel.name
            ),
            "each host would hold a different part",
            help,
        );
    }
}

/// What a sample looks like between stages.
struct Flow {
    /// Still encoded bytes (JPEG/PNG): only `decode` may come next.
    encoded: bool,
    /// Already a tensor (after `to_tensor`/`normalize`): no pixel op may follow.
    tensor: bool,
    /// Known `[height, width]`, `None` while images may differ in size.
    size: Option<[u32; 2]>,
    channels: u32,
    /// Whether a stage failed, so no follow-on shape error is reported at the end.
    broken: bool,
}

impl Flow {
    fn from_source(source: &Source) -> Self {
        match source {
            Source::Synthetic {
                shape, encoding, ..
            } => Flow {
                encoded: encoding.is_some(),
                tensor: false,
                size: Some([shape[0], shape[1]]),
                channels: shape[2],
                broken: false,
            },
            _ => Flow {
                encoded: true,
                tensor: false,
                size: None,
                channels: 3,
                broken: false,
            },
        }
    }

    fn stage(&mut self, ctx: &mut Ctx<'_>, i: usize, stage: &RawStage) -> Option<Stage> {
        let at = path!["pipeline", "stage", i];
        let resolved = self.resolve(ctx, &at, stage);
        self.broken |= resolved.is_none();
        resolved
    }

    fn resolve(&mut self, ctx: &mut Ctx<'_>, at: &KeyPath, stage: &RawStage) -> Option<Stage> {
        let op = op_name(stage);
        if let RawStage::Decode { channels } = stage {
            if !self.encoded {
                ctx.error(
                    "hetgen::spec::stage-order",
                    &at.at("op"),
                    "`decode` where samples are already pixels",
                    "nothing to decode",
                    "remove this `decode`: the source (or an earlier `decode`) already yields pixels",
                );
                return None;
            }
            // Mark the samples decoded even when this stage is wrong, so later stages are
            // judged on their own.
            self.encoded = false;
            let c = channels.unwrap_or(3);
            if c != 1 && c != 3 {
                ctx.error(
                    "hetgen::spec::decode-channels",
                    &at.at("channels"),
                    format!("`decode` to {c} channels"),
                    "1 or 3",
                    "use `channels = 3` for RGB or `channels = 1` for grayscale",
                );
                return None;
            }
            self.channels = c as u32;
            // Decoded images keep their own size until a resize or crop fixes it.
            return Some(Stage::Decode { channels: c as u32 });
        }

        let tensor_op = matches!(stage, RawStage::Normalize { .. } | RawStage::ToTensor {});
        if self.encoded {
            ctx.error(
                "hetgen::spec::stage-order",
                &at.at("op"),
                format!("`{op}` before `decode`"),
                "samples are still encoded bytes here",
                "add a stage with `op = \"decode\"` before this one",
            );
            return None;
        }
        if self.tensor && !tensor_op {
            ctx.error(
                "hetgen::spec::stage-order",
                &at.at("op"),
                format!("`{op}` after `to_tensor`/`normalize`"),
                "pixel op on a tensor",
                "move `to_tensor` and `normalize` to the end of the pipeline",
            );
            return None;
        }

        Some(match stage {
            RawStage::Decode { .. } => unreachable!("handled above"),
            RawStage::Resize { size } => Stage::Resize {
                size: self.set_size(ctx, &at.at("size"), *size)?,
            },
            RawStage::CenterCrop { size } => {
                let new = self.check_size(ctx, &at.at("size"), *size)?;
                if let Some([h, w]) = self.size
                    && (new[0] > h || new[1] > w)
                {
                    ctx.error(
                        "hetgen::spec::crop-too-large",
                        &at.at("size"),
                        format!("`center_crop` of {}×{} from {h}×{w} images", new[0], new[1]),
                        "larger than the image",
                        "crop at most the image's size, or `resize` first",
                    );
                    return None;
                }
                self.size = Some(new);
                Stage::CenterCrop { size: new }
            }
            RawStage::RandomResizedCrop { size, scale, ratio } => {
                let size = self.set_size(ctx, &at.at("size"), *size)?;
                let scale = range(
                    ctx,
                    &at.at("scale"),
                    scale.unwrap_or([0.08, 1.0]),
                    (f64::MIN_POSITIVE, 1.0),
                    "`scale`",
                )?;
                let ratio = range(
                    ctx,
                    &at.at("ratio"),
                    ratio.unwrap_or([0.75, 4.0 / 3.0]),
                    (f64::MIN_POSITIVE, 100.0),
                    "`ratio`",
                )?;
                Stage::RandomResizedCrop { size, scale, ratio }
            }
            RawStage::HorizontalFlip { p } => Stage::HorizontalFlip {
                p: probability(ctx, &at.at("p"), p.unwrap_or(0.5))?,
            },
            RawStage::ColorJitter {
                brightness,
                contrast,
                saturation,
            } => {
                let b = strength(
                    ctx,
                    &at.at("brightness"),
                    brightness.unwrap_or(0.0),
                    "`brightness`",
                );
                let c = strength(
                    ctx,
                    &at.at("contrast"),
                    contrast.unwrap_or(0.0),
                    "`contrast`",
                );
                let s = strength(
                    ctx,
                    &at.at("saturation"),
                    saturation.unwrap_or(0.0),
                    "`saturation`",
                );
                if saturation.is_some_and(|s| s > 0.0) && self.channels == 1 {
                    ctx.error(
                        "hetgen::spec::saturation-gray",
                        &at.at("saturation"),
                        "`saturation` on grayscale images",
                        "grayscale has no saturation",
                        "remove `saturation`, or decode with `channels = 3`",
                    );
                    return None;
                }
                Stage::ColorJitter {
                    brightness: b?,
                    contrast: c?,
                    saturation: s?,
                }
            }
            RawStage::GaussianBlur { kernel, sigma } => {
                if *kernel < 1 || kernel % 2 == 0 || *kernel > 255 {
                    ctx.error(
                        "hetgen::spec::blur-kernel",
                        &at.at("kernel"),
                        format!("blur kernel `{kernel}`"),
                        "must be odd and from 1 to 255",
                        "use an odd kernel size such as 3, 5 or 23",
                    );
                    return None;
                }
                let sigma = range(
                    ctx,
                    &at.at("sigma"),
                    sigma.unwrap_or([0.1, 2.0]),
                    (f64::MIN_POSITIVE, 1000.0),
                    "`sigma`",
                )?;
                Stage::GaussianBlur {
                    kernel: *kernel as u32,
                    sigma,
                }
            }
            RawStage::RandomErasing {
                p,
                scale,
                ratio,
                value,
            } => {
                let p = probability(ctx, &at.at("p"), p.unwrap_or(0.5));
                let scale = range(
                    ctx,
                    &at.at("scale"),
                    scale.unwrap_or([0.02, 0.33]),
                    (f64::MIN_POSITIVE, 1.0),
                    "`scale`",
                );
                let ratio = range(
                    ctx,
                    &at.at("ratio"),
                    ratio.unwrap_or([0.3, 3.3]),
                    (f64::MIN_POSITIVE, 100.0),
                    "`ratio`",
                );
                let value = int_in(
                    ctx,
                    "hetgen::spec::erase-value",
                    &at.at("value"),
                    value.unwrap_or(0),
                    (0, 255),
                    "`value`",
                );
                Stage::RandomErasing {
                    p: p?,
                    scale: scale?,
                    ratio: ratio?,
                    value: value? as u8,
                }
            }
            RawStage::Normalize { mean, std } => {
                let n = self.channels as usize;
                if mean.len() != n || std.len() != n {
                    ctx.error(
                        "hetgen::spec::normalize-channels",
                        &at.at(if mean.len() != n { "mean" } else { "std" }),
                        format!(
                            "`normalize` has {} means and {} stds for {n}-channel images",
                            mean.len(),
                            std.len()
                        ),
                        format!("needs {n} values"),
                        format!("give one `mean` and one `std` per channel ({n})"),
                    );
                    return None;
                }
                if let Some(j) = std.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
                    ctx.error(
                        "hetgen::spec::normalize-std",
                        &at.at("std").at(j),
                        format!("`std` value `{}` is not positive", std[j]),
                        "must be > 0",
                        "a standard deviation must be a positive number",
                    );
                    return None;
                }
                if let Some(j) = mean.iter().position(|m| !m.is_finite()) {
                    ctx.error(
                        "hetgen::spec::normalize-mean",
                        &at.at("mean").at(j),
                        format!("`mean` value `{}` is not a number", mean[j]),
                        "not finite",
                        "give means on the 0–1 scale, e.g. 0.485",
                    );
                    return None;
                }
                self.tensor = true;
                Stage::Normalize {
                    mean: mean.clone(),
                    std: std.clone(),
                }
            }
            RawStage::ToTensor {} => {
                self.tensor = true;
                Stage::ToTensor
            }
            RawStage::Custom { name, params } => {
                let ok = !name.is_empty()
                    && name.len() <= 64
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !ok {
                    ctx.error(
                        "hetgen::spec::custom-stage-name",
                        &at.at("name"),
                        format!("`{name}` is not a valid custom stage name"),
                        "letters, digits, `_` and `-`",
                        "name the stage as it is registered in the launcher, e.g. `my_filter`",
                    );
                    return None;
                }
                Stage::Custom {
                    name: name.clone(),
                    params: params.clone(),
                }
            }
        })
    }

    fn check_size(&self, ctx: &mut Ctx<'_>, at: &KeyPath, [h, w]: [i64; 2]) -> Option<[u32; 2]> {
        if [h, w].iter().all(|s| (1..=MAX_SIDE).contains(s)) {
            return Some([h as u32, w as u32]);
        }
        ctx.error(
            "hetgen::spec::stage-size",
            at,
            format!("size `[{h}, {w}]`"),
            "not a positive size",
            format!("give `[height, width]` in pixels, each from 1 to {MAX_SIDE}"),
        );
        None
    }

    fn set_size(&mut self, ctx: &mut Ctx<'_>, at: &KeyPath, size: [i64; 2]) -> Option<[u32; 2]> {
        let size = self.check_size(ctx, at, size)?;
        self.size = Some(size);
        Some(size)
    }

    /// The emitted shape; reports a pipeline that never decodes or whose size varies.
    fn finish(&self, ctx: &mut Ctx<'_>, stages: usize) -> Option<[u32; 3]> {
        if self.broken {
            return None;
        }
        let at = if stages == 0 {
            path!["pipeline", "source"]
        } else {
            path!["pipeline", "stage", stages - 1]
        };
        if self.encoded {
            ctx.error(
                "hetgen::spec::no-decode",
                &at,
                "the pipeline never decodes its images",
                "samples are still encoded bytes here",
                "add a stage with `op = \"decode\"`",
            );
            return None;
        }
        let Some([h, w]) = self.size else {
            ctx.error(
                "hetgen::spec::variable-size",
                &at,
                "the pipeline's images have no fixed size, so they cannot be batched",
                "size still varies here",
                "add a `resize`, `center_crop` or `random_resized_crop` stage after `decode`",
            );
            return None;
        };
        Some([h, w, self.channels])
    }
}

fn op_name(stage: &RawStage) -> &'static str {
    match stage {
        RawStage::Decode { .. } => "decode",
        RawStage::Resize { .. } => "resize",
        RawStage::CenterCrop { .. } => "center_crop",
        RawStage::RandomResizedCrop { .. } => "random_resized_crop",
        RawStage::HorizontalFlip { .. } => "horizontal_flip",
        RawStage::ColorJitter { .. } => "color_jitter",
        RawStage::GaussianBlur { .. } => "gaussian_blur",
        RawStage::RandomErasing { .. } => "random_erasing",
        RawStage::Normalize { .. } => "normalize",
        RawStage::ToTensor {} => "to_tensor",
        RawStage::Custom { .. } => "custom",
    }
}

fn probability(ctx: &mut Ctx<'_>, at: &KeyPath, p: f64) -> Option<f64> {
    float_in(
        ctx,
        "hetgen::spec::probability",
        at,
        p,
        (0.0, 1.0),
        "probability",
    )
    .then_some(p)
}

fn strength(ctx: &mut Ctx<'_>, at: &KeyPath, x: f64, what: &str) -> Option<f64> {
    float_in(
        ctx,
        "hetgen::spec::jitter-strength",
        at,
        x,
        (0.0, 1.0),
        what,
    )
    .then_some(x)
}

/// A `[min, max]` pair with `lo <= min <= max <= hi`.
fn range(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    [min, max]: [f64; 2],
    (lo, hi): (f64, f64),
    what: &str,
) -> Option<[f64; 2]> {
    if !(lo..=hi).contains(&min) || !(lo..=hi).contains(&max) {
        ctx.error(
            "hetgen::spec::stage-range",
            at,
            format!("{what} `[{min}, {max}]` is out of range"),
            "out of range",
            format!("give {what} as `[min, max]` with both in (0, {hi}]"),
        );
        return None;
    }
    if min > max {
        ctx.error(
            "hetgen::spec::range-order",
            at,
            format!("{what} `[{min}, {max}]` has min above max"),
            "min > max",
            format!("write {what} as `[{max}, {min}]`"),
        );
        return None;
    }
    Some([min, max])
}
