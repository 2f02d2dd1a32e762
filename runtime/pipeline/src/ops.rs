//! The built-in image ops, each a function of (image, sample RNG).
//!
//! Every random draw comes from the sample's [`SampleRng`] in a fixed order, so an op's output
//! depends only on its input, its parameters and (seed, epoch, sample id). Parameters follow
//! torchvision's defaults and algorithms so a spec means what a PyTorch user expects; where we
//! differ (colour-jitter order is fixed: brightness, contrast, saturation) the doc says so.

use std::cell::RefCell;

use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer, images};

use crate::SampleRng;
use crate::image::{Image, luma};

thread_local! {
    // A resizer keeps scratch buffers between calls; one per pool thread avoids reallocating.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// A region of an image: `top`, `left`, `height`, `width`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    /// First row.
    pub top: f64,
    /// First column.
    pub left: f64,
    /// Rows.
    pub height: f64,
    /// Columns.
    pub width: f64,
}

impl Rect {
    /// The whole of an `h × w` image.
    pub fn full(h: u32, w: u32) -> Self {
        Rect {
            top: 0.0,
            left: 0.0,
            height: f64::from(h),
            width: f64::from(w),
        }
    }

    /// The same region in an image scaled down by `d`.
    pub fn scaled(self, d: f64) -> Self {
        Rect {
            top: self.top / d,
            left: self.left / d,
            height: self.height / d,
            width: self.width / d,
        }
    }
}

/// Resize the `rect` of `image` to `h × w` with an antialiased bilinear filter (PIL's
/// `BILINEAR` with `reducing_gap=None`, which torchvision's `Resize` uses on PIL images).
pub fn resize_region(image: &Image, rect: Rect, h: u32, w: u32) -> Result<Image, String> {
    let pixel = match image.channels {
        1 => PixelType::U8,
        3 => PixelType::U8x3,
        c => return Err(format!("cannot resize a {c}-channel image")),
    };
    if rect == Rect::full(image.height, image.width) && image.height == h && image.width == w {
        return Ok(image.clone());
    }
    let src = images::ImageRef::new(image.width, image.height, &image.data, pixel)
        .map_err(|e| e.to_string())?;
    let mut dst = images::Image::new(w, h, pixel);
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
        .crop(rect.left, rect.top, rect.width, rect.height);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &options))
        .map_err(|e| e.to_string())?;
    Ok(Image {
        height: h,
        width: w,
        channels: image.channels,
        data: dst.into_vec(),
    })
}

/// torchvision's `Resize([h, w])`.
pub fn resize(image: &Image, size: [u32; 2]) -> Result<Image, String> {
    resize_region(
        image,
        Rect::full(image.height, image.width),
        size[0],
        size[1],
    )
}

/// The central `size` window (torchvision's `CenterCrop`, with its rounding), zero-padded
/// when the image is smaller.
pub fn center_crop_rect(h: u32, w: u32, size: [u32; 2]) -> (i64, i64) {
    let top = ((f64::from(h) - f64::from(size[0])) / 2.0).round() as i64;
    let left = ((f64::from(w) - f64::from(size[1])) / 2.0).round() as i64;
    (top, left)
}

/// torchvision's `CenterCrop(size)`.
pub fn center_crop(image: &Image, size: [u32; 2]) -> Image {
    let (top, left) = center_crop_rect(image.height, image.width, size);
    if top >= 0 && left >= 0 {
        return image.crop(top as u32, left as u32, size[0], size[1]);
    }
    // Smaller than the crop: pad with zeros around the image, as torchvision does.
    let c = image.channels as usize;
    let mut out = Image::zeros(size[0], size[1], image.channels);
    for y in 0..size[0] as i64 {
        let sy = y + top;
        if sy < 0 || sy >= i64::from(image.height) {
            continue;
        }
        for x in 0..size[1] as i64 {
            let sx = x + left;
            if sx < 0 || sx >= i64::from(image.width) {
                continue;
            }
            let s = (sy as usize * image.width as usize + sx as usize) * c;
            let d = (y as usize * size[1] as usize + x as usize) * c;
            out.data[d..d + c].copy_from_slice(&image.data[s..s + c]);
        }
    }
    out
}

/// torchvision's `RandomResizedCrop.get_params`: ten tries at a random area and aspect ratio,
/// then the central crop with the ratio clamped.
pub fn random_resized_crop_rect(
    h: u32,
    w: u32,
    scale: [f64; 2],
    ratio: [f64; 2],
    rng: &mut SampleRng,
) -> Rect {
    let (hf, wf) = (f64::from(h), f64::from(w));
    let area = hf * wf;
    let (log_lo, log_hi) = (ratio[0].ln(), ratio[1].ln());
    for _ in 0..10 {
        let target = area * rng.uniform(scale[0], scale[1]);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let cw = (target * aspect).sqrt().round();
        let ch = (target / aspect).sqrt().round();
        if cw > 0.0 && ch > 0.0 && cw <= wf && ch <= hf {
            let top = rng.below((hf - ch) as u64 + 1) as f64;
            let left = rng.below((wf - cw) as u64 + 1) as f64;
            return Rect {
                top,
                left,
                height: ch,
                width: cw,
            };
        }
    }
    let in_ratio = wf / hf;
    let (cw, ch) = if in_ratio < ratio[0] {
        (wf, (wf / ratio[0]).round())
    } else if in_ratio > ratio[1] {
        ((hf * ratio[1]).round(), hf)
    } else {
        (wf, hf)
    };
    Rect {
        top: ((hf - ch) / 2.0).floor(),
        left: ((wf - cw) / 2.0).floor(),
        height: ch,
        width: cw,
    }
}

/// Mirror left-right in place.
pub fn flip(image: &mut Image) {
    let stride = image.stride().max(1);
    for row in image.data.chunks_exact_mut(stride) {
        // Whole pixels as arrays, so the reversal moves 3 bytes at a time (it was the slowest
        // part of the training pipeline after the decode when swapped byte by byte).
        match image.channels {
            1 => row.reverse(),
            3 => row.as_chunks_mut::<3>().0.reverse(),
            c => {
                let c = c as usize;
                let n = row.len() / c;
                for i in 0..n / 2 {
                    for k in 0..c {
                        row.swap(i * c + k, (n - 1 - i) * c + k);
                    }
                }
            }
        }
    }
}

/// Round half away from zero into `0..=255`. Adding one half and truncating is that rounding
/// for the non-negative values left after the clamp, without `f32::round`, which baseline
/// x86-64 (no SSE4.1) turns into a libm call per value.
fn clamp_u8(v: f32) -> u8 {
    (v.clamp(0.0, 255.0) + 0.5) as u8
}

/// torchvision's `ColorJitter(brightness, contrast, saturation)`, in that fixed order.
/// Each factor is uniform in `[max(0, 1 - s), 1 + s]`; a strength of 0 draws nothing.
pub fn color_jitter(
    image: &mut Image,
    brightness: f64,
    contrast: f64,
    saturation: f64,
    rng: &mut SampleRng,
) {
    let mut factor = |s: f64| (s > 0.0).then(|| rng.uniform((1.0 - s).max(0.0), 1.0 + s) as f32);
    let (b, c, s) = (factor(brightness), factor(contrast), factor(saturation));
    if let Some(b) = b {
        // Blend with black.
        let lut: Vec<u8> = (0..=255).map(|v| clamp_u8(v as f32 * b)).collect();
        image.data.iter_mut().for_each(|v| *v = lut[*v as usize]);
    }
    if let Some(c) = c {
        // Blend with the mean gray level of the image.
        let mean = mean_gray(image);
        let lut: Vec<u8> = (0..=255)
            .map(|v| clamp_u8(c * v as f32 + (1.0 - c) * mean))
            .collect();
        image.data.iter_mut().for_each(|v| *v = lut[*v as usize]);
    }
    if let (Some(s), 3) = (s, image.channels) {
        // Blend every pixel with its own gray value.
        for px in image.data.chunks_exact_mut(3) {
            let g = f32::from(luma(px[0], px[1], px[2]));
            for v in px.iter_mut() {
                *v = clamp_u8(s * f32::from(*v) + (1.0 - s) * g);
            }
        }
    }
}

fn mean_gray(image: &Image) -> f32 {
    let pixels = (image.width * image.height).max(1) as f64;
    let sum: u64 = if image.channels == 3 {
        image
            .data
            .chunks_exact(3)
            .map(|p| u64::from(luma(p[0], p[1], p[2])))
            .sum()
    } else {
        image.data.iter().map(|v| u64::from(*v)).sum()
    };
    (sum as f64 / pixels) as f32
}

/// torchvision's `GaussianBlur(kernel, sigma)`: sigma uniform in the range, a separable
/// kernel, reflect padding at the borders.
///
/// Both passes run over whole rows of interleaved values with the tap loop outside, so the
/// inner loops are plain multiply-adds over contiguous `f32`s that the compiler vectorises
/// (7× the per-pixel version this replaced, BENCHMARKS.md).
pub fn gaussian_blur(image: &Image, kernel: u32, sigma: [f64; 2], rng: &mut SampleRng) -> Image {
    let sigma = rng.uniform(sigma[0], sigma[1]).max(1e-3) as f32;
    let radius = (kernel / 2) as usize;
    let mut weights: Vec<f32> = (-(radius as i64)..=radius as i64)
        .map(|x| (-(x * x) as f32 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f32 = weights.iter().sum();
    weights.iter_mut().for_each(|w| *w /= total);
    let (h, w, c) = (
        image.height as usize,
        image.width as usize,
        image.channels as usize,
    );
    let reflect = |i: i64, n: usize| -> usize {
        let n = n as i64;
        if n == 1 {
            return 0;
        }
        let period = 2 * (n - 1);
        let m = i.rem_euclid(period);
        (if m < n { m } else { period - m }) as usize
    };
    let stride = w * c;
    // Horizontal: each row, reflect-padded by `radius` pixels, into `tmp`.
    let mut tmp = vec![0f32; h * stride];
    let mut padded = vec![0f32; (w + 2 * radius) * c];
    for (row, out) in image
        .data
        .chunks_exact(stride.max(1))
        .zip(tmp.chunks_exact_mut(stride.max(1)))
    {
        for (x, px) in padded.chunks_exact_mut(c).enumerate() {
            let sx = reflect(x as i64 - radius as i64, w);
            for (v, s) in px.iter_mut().zip(&row[sx * c..sx * c + c]) {
                *v = f32::from(*s);
            }
        }
        for (j, wt) in weights.iter().enumerate() {
            for (o, v) in out.iter_mut().zip(&padded[j * c..j * c + stride]) {
                *o += wt * v;
            }
        }
    }
    // Vertical: each output row is the weighted sum of `kernel` rows of `tmp`.
    let mut out = Image::zeros(image.height, image.width, image.channels);
    let mut acc = vec![0f32; stride];
    for (y, dst) in out.data.chunks_exact_mut(stride.max(1)).enumerate() {
        acc.iter_mut().for_each(|a| *a = 0.0);
        for (j, wt) in weights.iter().enumerate() {
            let sy = reflect(y as i64 + j as i64 - radius as i64, h);
            for (a, v) in acc.iter_mut().zip(&tmp[sy * stride..(sy + 1) * stride]) {
                *a += wt * v;
            }
        }
        for (d, a) in dst.iter_mut().zip(&acc) {
            *d = clamp_u8(*a);
        }
    }
    out
}

/// torchvision's `RandomErasing(p, scale, ratio, value)` on the `u8` image: with probability
/// `p`, up to ten tries at a rectangle of random area and aspect that fits, filled with `value`.
pub fn random_erasing(
    image: &mut Image,
    p: f64,
    scale: [f64; 2],
    ratio: [f64; 2],
    value: u8,
    rng: &mut SampleRng,
) {
    if !rng.chance(p) {
        return;
    }
    let (h, w) = (f64::from(image.height), f64::from(image.width));
    let (log_lo, log_hi) = (ratio[0].ln(), ratio[1].ln());
    for _ in 0..10 {
        let target = h * w * rng.uniform(scale[0], scale[1]);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let eh = (target * aspect).sqrt().round();
        let ew = (target / aspect).sqrt().round();
        if !(eh < h && ew < w && eh > 0.0 && ew > 0.0) {
            continue;
        }
        let top = rng.below((h - eh) as u64 + 1) as usize;
        let left = rng.below((w - ew) as u64 + 1) as usize;
        let c = image.channels as usize;
        let stride = image.stride();
        for row in top..top + eh as usize {
            let start = row * stride + left * c;
            image.data[start..start + ew as usize * c].fill(value);
        }
        return;
    }
}

/// torchvision's `ToTensor` + `Normalize` on the CPU: CHW `f32`, `(v / 255 - mean) / std`.
///
/// The engine never runs this (the trainer does it on its device); it exists so benchmarks and
/// `hetgen profile` can price the whole torchvision-equivalent pipeline on a CPU.
pub fn normalize(image: &Image, mean: &[f64], std: &[f64]) -> Vec<f32> {
    let (hw, c) = (
        (image.height * image.width) as usize,
        image.channels as usize,
    );
    let len = hw * c;
    if image.data.len() != len || c == 0 {
        return vec![0.0; len];
    }
    // Not zeroed first: every value is written exactly once below.
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    for k in 0..c {
        // 256 possible inputs: look each up instead of multiplying per pixel.
        let scale = 1.0 / (255.0 * std[k % std.len()]);
        let shift = mean[k % mean.len()] / std[k % std.len()];
        let table: [f32; 256] = std::array::from_fn(|v| (v as f64 * scale - shift) as f32);
        let plane = &mut spare[k * hw..(k + 1) * hw];
        for (dst, px) in plane.iter_mut().zip(image.data.chunks_exact(c)) {
            dst.write(table[usize::from(px[k])]);
        }
    }
    // SAFETY: each of the `c` planes of `hw` values was written in full: `data` holds exactly
    // `hw` pixels of `c` bytes (checked above), one per value of the plane.
    unsafe { out.set_len(len) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `h`×`w`×`c` image of `data`.
    fn image_of(h: u32, w: u32, c: u32, data: Vec<u8>) -> Image {
        assert_eq!(data.len(), (h * w * c) as usize, "a test image's size");
        Image {
            height: h,
            width: w,
            channels: c,
            data,
        }
    }

    fn numbered(h: u32, w: u32, c: u32) -> Image {
        image_of(h, w, c, (0..h * w * c).map(|i| (i % 251) as u8).collect())
    }

    #[test]
    fn normalize_is_chw_and_matches_the_formula() {
        let image = image_of(1, 2, 3, vec![0, 51, 255, 255, 102, 0]);
        let out = normalize(&image, &[0.5, 0.5, 0.5], &[0.5, 0.25, 0.5]);
        let want = [-1.0, 1.0, (0.2 - 0.5) / 0.25, (0.4 - 0.5) / 0.25, 1.0, -1.0];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{out:?}");
        }
    }

    #[test]
    fn flip_mirrors_rows() {
        let mut image = image_of(2, 3, 1, vec![1, 2, 3, 4, 5, 6]);
        flip(&mut image);
        assert_eq!(image.data, vec![3, 2, 1, 6, 5, 4]);
        let mut rgb = image_of(1, 2, 3, vec![1, 2, 3, 4, 5, 6]);
        flip(&mut rgb);
        assert_eq!(rgb.data, vec![4, 5, 6, 1, 2, 3]);
    }

    #[test]
    fn center_crop_matches_torchvision_rounding_and_pads() {
        let image = numbered(5, 6, 1);
        let crop = center_crop(&image, [3, 3]);
        // top = round(1.0) = 1, left = round(1.5) = 2 (half away from zero)
        assert_eq!(crop.data, vec![8, 9, 10, 14, 15, 16, 20, 21, 22]);
        let padded = center_crop(&image_of(1, 1, 1, vec![7]), [3, 3]);
        assert_eq!(padded.data, vec![0, 0, 0, 0, 7, 0, 0, 0, 0]);
    }

    #[test]
    fn resize_of_a_constant_image_is_constant() {
        let image = image_of(10, 20, 3, vec![77; 600]);
        let small = resize(&image, [4, 7]).unwrap();
        assert_eq!(small.shape(), [4, 7, 3]);
        assert!(small.data.iter().all(|v| *v == 77));
    }

    #[test]
    fn random_resized_crop_stays_inside_and_respects_the_ranges() {
        for id in 0..200 {
            let mut rng = SampleRng::new(1, 0, id);
            let r = random_resized_crop_rect(375, 500, [0.08, 1.0], [0.75, 4.0 / 3.0], &mut rng);
            assert!(
                r.top >= 0.0
                    && r.left >= 0.0
                    && r.top + r.height <= 375.0
                    && r.left + r.width <= 500.0,
                "{r:?}"
            );
            let area = r.height * r.width / (375.0 * 500.0);
            assert!((0.07..=1.0).contains(&area), "{area}");
        }
    }

    #[test]
    fn jitter_and_erasing_are_deterministic_per_sample() {
        let base = numbered(8, 8, 3);
        let run = |id| {
            let mut image = base.clone();
            let mut rng = SampleRng::new(5, 1, id);
            color_jitter(&mut image, 0.4, 0.4, 0.4, &mut rng);
            random_erasing(&mut image, 1.0, [0.1, 0.3], [0.5, 2.0], 0, &mut rng);
            image
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn blur_matches_the_per_pixel_definition() {
        // The textbook form: every output value is the 2-D separable sum, reflect-padded.
        fn reference(image: &Image, weights: &[f32]) -> Image {
            let (h, w, c) = (
                image.height as i64,
                image.width as i64,
                image.channels as i64,
            );
            let r = weights.len() as i64 / 2;
            let reflect = |i: i64, n: i64| {
                let m = i.rem_euclid(2 * (n - 1));
                if m < n { m } else { 2 * (n - 1) - m }
            };
            let at = |y: i64, x: i64, k: i64| f32::from(image.data[((y * w + x) * c + k) as usize]);
            let mut out = image.clone();
            for y in 0..h {
                for x in 0..w {
                    for k in 0..c {
                        let mut acc = 0.0;
                        for (j, wy) in weights.iter().enumerate() {
                            let sy = reflect(y + j as i64 - r, h);
                            let mut row = 0.0;
                            for (i, wx) in weights.iter().enumerate() {
                                row += wx * at(sy, reflect(x + i as i64 - r, w), k);
                            }
                            acc += wy * row;
                        }
                        out.data[((y * w + x) * c + k) as usize] = clamp_u8(acc);
                    }
                }
            }
            out
        }
        let image = numbered(13, 11, 3);
        for kernel in [3, 5, 7] {
            let sigma = 1.3f32;
            let r = kernel as i64 / 2;
            let mut weights: Vec<f32> = (-r..=r)
                .map(|x| (-(x * x) as f32 / (2.0 * sigma * sigma)).exp())
                .collect();
            let total: f32 = weights.iter().sum();
            weights.iter_mut().for_each(|w| *w /= total);
            let mut rng = SampleRng::new(0, 0, 0);
            let got = gaussian_blur(&image, kernel, [1.3, 1.3], &mut rng);
            let want = reference(&image, &weights);
            // The sums run in another order: at most one level apart where a value sits on a
            // rounding edge.
            let worst = got
                .data
                .iter()
                .zip(&want.data)
                .map(|(a, b)| a.abs_diff(*b))
                .max();
            assert!(
                worst <= Some(1),
                "kernel {kernel}: worst difference {worst:?}"
            );
        }
    }

    #[test]
    fn blur_keeps_a_constant_image_and_smooths_an_impulse() {
        let flat = image_of(6, 6, 1, vec![90; 36]);
        let mut rng = SampleRng::new(0, 0, 0);
        assert_eq!(gaussian_blur(&flat, 5, [1.0, 1.0], &mut rng), flat);
        let mut impulse = Image::zeros(5, 5, 1);
        impulse.data[12] = 255;
        let blurred = gaussian_blur(&impulse, 3, [1.0, 1.0], &mut rng);
        assert!(
            blurred.data[12] < 255 && blurred.data[12] > blurred.data[11] && blurred.data[11] > 0
        );
    }
}
