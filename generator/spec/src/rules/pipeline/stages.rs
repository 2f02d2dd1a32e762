//! `[[pipeline.stage]]`: each stage in order, checked against what a sample looks like when it
//! arrives (still encoded, pixels of a known or varying size, a tensor), one function per op.

use std::collections::BTreeMap;

use crate::ctx::Ctx;
use crate::model::{Source, Stage};
use crate::path;
use crate::raw::RawStage;
use crate::rules::{float_in, int_in};
use crate::spans::KeyPath;

use super::MAX_SIDE;

/// What a sample looks like between stages.
pub(super) struct Flow {
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
    pub(super) fn from_source(source: &Source) -> Self {
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
            // Files as stored: encoded, of any size. (A Python source has no stages to flow
            // through: `pipeline` never builds one for it.)
            Source::ImageFolder { .. } | Source::TarShards { .. } | Source::Python { .. } => Flow {
                encoded: true,
                tensor: false,
                size: None,
                channels: 3,
                broken: false,
            },
        }
    }

    pub(super) fn stage(&mut self, ctx: &mut Ctx<'_>, i: usize, stage: &RawStage) -> Option<Stage> {
        let at = path!["pipeline", "stage", i];
        let resolved = self.resolve(ctx, &at, stage);
        self.broken |= resolved.is_none();
        resolved
    }

    fn resolve(&mut self, ctx: &mut Ctx<'_>, at: &KeyPath, stage: &RawStage) -> Option<Stage> {
        if let RawStage::Decode { channels } = stage {
            return self.decode(ctx, at, *channels);
        }
        self.check_order(ctx, at, stage)?;
        match stage {
            RawStage::Decode { .. } => unreachable!("handled above"),
            RawStage::Resize { size } => Some(Stage::Resize {
                size: self.set_size(ctx, &at.at("size"), *size)?,
            }),
            RawStage::CenterCrop { size } => self.center_crop(ctx, at, *size),
            RawStage::RandomResizedCrop { size, scale, ratio } => {
                self.random_resized_crop(ctx, at, *size, *scale, *ratio)
            }
            RawStage::HorizontalFlip { p } => Some(Stage::HorizontalFlip {
                p: probability(ctx, &at.at("p"), p.unwrap_or(0.5))?,
            }),
            RawStage::ColorJitter {
                brightness,
                contrast,
                saturation,
            } => self.color_jitter(ctx, at, *brightness, *contrast, *saturation),
            RawStage::GaussianBlur { kernel, sigma } => gaussian_blur(ctx, at, *kernel, *sigma),
            RawStage::RandomErasing {
                p,
                scale,
                ratio,
                value,
            } => random_erasing(ctx, at, *p, *scale, *ratio, *value),
            RawStage::Normalize { mean, std } => self.normalize(ctx, at, mean, std),
            RawStage::ToTensor {} => {
                self.tensor = true;
                Some(Stage::ToTensor)
            }
            RawStage::Custom { name, params } => custom(ctx, at, name, params),
        }
    }

    fn decode(&mut self, ctx: &mut Ctx<'_>, at: &KeyPath, channels: Option<i64>) -> Option<Stage> {
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
        Some(Stage::Decode { channels: c as u32 })
    }

    /// Every op but `decode` needs decoded samples, and only `to_tensor`/`normalize` may follow
    /// a tensor.
    fn check_order(&self, ctx: &mut Ctx<'_>, at: &KeyPath, stage: &RawStage) -> Option<()> {
        let op = op_name(stage);
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
        Some(())
    }

    fn center_crop(&mut self, ctx: &mut Ctx<'_>, at: &KeyPath, size: [i64; 2]) -> Option<Stage> {
        let new = self.check_size(ctx, &at.at("size"), size)?;
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
        Some(Stage::CenterCrop { size: new })
    }

    fn random_resized_crop(
        &mut self,
        ctx: &mut Ctx<'_>,
        at: &KeyPath,
        size: [i64; 2],
        scale: Option<[f64; 2]>,
        ratio: Option<[f64; 2]>,
    ) -> Option<Stage> {
        let size = self.set_size(ctx, &at.at("size"), size)?;
        let scale = range(
            ctx,
            &at.at("scale"),
            scale.unwrap_or([0.08, 1.0]),
            (f64::MIN_POSITIVE, 1.0),
        )?;
        let ratio = range(
            ctx,
            &at.at("ratio"),
            ratio.unwrap_or([0.75, 4.0 / 3.0]),
            (f64::MIN_POSITIVE, 100.0),
        )?;
        Some(Stage::RandomResizedCrop { size, scale, ratio })
    }

    /// Reports every strength out of range before giving up, and saturation on grayscale.
    fn color_jitter(
        &self,
        ctx: &mut Ctx<'_>,
        at: &KeyPath,
        brightness: Option<f64>,
        contrast: Option<f64>,
        saturation: Option<f64>,
    ) -> Option<Stage> {
        let b = strength(ctx, &at.at("brightness"), brightness.unwrap_or(0.0));
        let c = strength(ctx, &at.at("contrast"), contrast.unwrap_or(0.0));
        let s = strength(ctx, &at.at("saturation"), saturation.unwrap_or(0.0));
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
        Some(Stage::ColorJitter {
            brightness: b?,
            contrast: c?,
            saturation: s?,
        })
    }

    /// One `mean` and one positive `std` per channel; the samples are a tensor from here on.
    fn normalize(
        &mut self,
        ctx: &mut Ctx<'_>,
        at: &KeyPath,
        mean: &[f64],
        std: &[f64],
    ) -> Option<Stage> {
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
        Some(Stage::Normalize {
            mean: mean.to_vec(),
            std: std.to_vec(),
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
    pub(super) fn finish(&self, ctx: &mut Ctx<'_>, stages: usize) -> Option<[u32; 3]> {
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

fn gaussian_blur(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    kernel: i64,
    sigma: Option<[f64; 2]>,
) -> Option<Stage> {
    if !(1..=255).contains(&kernel) || kernel % 2 == 0 {
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
    )?;
    Some(Stage::GaussianBlur {
        kernel: kernel as u32,
        sigma,
    })
}

/// Reports every field out of range before giving up.
fn random_erasing(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    p: Option<f64>,
    scale: Option<[f64; 2]>,
    ratio: Option<[f64; 2]>,
    value: Option<i64>,
) -> Option<Stage> {
    let p = probability(ctx, &at.at("p"), p.unwrap_or(0.5));
    let scale = range(
        ctx,
        &at.at("scale"),
        scale.unwrap_or([0.02, 0.33]),
        (f64::MIN_POSITIVE, 1.0),
    );
    let ratio = range(
        ctx,
        &at.at("ratio"),
        ratio.unwrap_or([0.3, 3.3]),
        (f64::MIN_POSITIVE, 100.0),
    );
    let value = int_in(
        ctx,
        "hetgen::spec::erase-value",
        &at.at("value"),
        value.unwrap_or(0),
        (0, 255),
    );
    Some(Stage::RandomErasing {
        p: p?,
        scale: scale?,
        ratio: ratio?,
        value: value? as u8,
    })
}

/// A custom stage's name is written into the rendered launcher's source (the list of stages to
/// register), so it is kept to a plain name.
fn custom(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    name: &str,
    params: &BTreeMap<String, serde_json::Value>,
) -> Option<Stage> {
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
    Some(Stage::Custom {
        name: name.to_owned(),
        params: params.clone(),
    })
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

fn strength(ctx: &mut Ctx<'_>, at: &KeyPath, x: f64) -> Option<f64> {
    float_in(
        ctx,
        "hetgen::spec::jitter-strength",
        at,
        x,
        (0.0, 1.0),
        &at.name(),
    )
    .then_some(x)
}

/// A `[min, max]` pair with `lo <= min <= max <= hi`.
fn range(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    [min, max]: [f64; 2],
    (lo, hi): (f64, f64),
) -> Option<[f64; 2]> {
    let what = at.name();
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
