//! JPEG and PNG in and out.
//!
//! JPEGs decode with libjpeg-turbo (its SIMD IDCT and colour conversion, through the C shim in
//! `jpeg`), which also decodes just the region a crop needs; PNGs with the png crate.
//!
//! libjpeg-turbo is the crate's one system library, behind the `jpeg` feature (on by default).
//! The wheel's `hetgen` command is built without it, so that one file installs with no system
//! library: it profiles Python datasets and PNG pipelines, and a JPEG there is an error that
//! says so ([`NO_JPEG`]).

use std::io::Cursor;

use crate::image::{Image, luma};
use crate::ops::{self, Rect};

#[cfg(feature = "jpeg")]
pub mod jpeg;

/// Why a build without the `jpeg` feature cannot decode a JPEG.
pub const NO_JPEG: &str = "this build of hetgen has no JPEG decoder (libjpeg-turbo): the `hetgen` command of the wheel leaves it out; run it from a hetgen checkout (`make build`)";

/// Encoded formats the `decode` stage understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG (baseline or progressive).
    Jpeg,
    /// PNG (any bit depth; 16-bit is stripped to 8).
    Png,
}

/// The format, from the leading magic bytes.
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(&[0xff, 0xd8]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else {
        None
    }
}

/// Decode JPEG or PNG bytes to `channels` (1 or 3) channels.
pub fn decode(bytes: &[u8], channels: u32) -> Result<Image, String> {
    match sniff(bytes) {
        Some(Format::Jpeg) => decode_jpeg(bytes, channels),
        Some(Format::Png) => decode_png(bytes, channels),
        None => Err("neither JPEG nor PNG (unknown magic bytes)".to_owned()),
    }
}

/// Decode `bytes` and resize the region `choose(height, width)` picks to `size` (`[h, w]`),
/// decoding no more of a JPEG than that needs.
///
/// `choose` sees the image's full-size dimensions, so a random crop draws exactly what it
/// would after a full decode. For a JPEG the decoder then skips the rows above the region,
/// stops after its last row, reconstructs only its columns (widened to whole blocks), and
/// uses DCT-domain scaling by 1/8 to 4/8 when the region, scaled, still covers `size`:
/// the resize only ever shrinks, as it would from the full image. PNGs decode whole.
pub fn decode_resized(
    bytes: &[u8],
    channels: u32,
    choose: impl FnOnce(u32, u32) -> Rect,
    size: [u32; 2],
) -> Result<Image, String> {
    if sniff(bytes) != Some(Format::Jpeg) {
        let image = decode(bytes, channels)?;
        let rect = choose(image.height, image.width);
        return ops::resize_region(&image, rect, size[0], size[1]);
    }
    decode_jpeg_resized(bytes, channels, choose, size)
}

#[cfg(feature = "jpeg")]
fn decode_jpeg(bytes: &[u8], channels: u32) -> Result<Image, String> {
    jpeg::decode(bytes, channels)
}

#[cfg(not(feature = "jpeg"))]
fn decode_jpeg(_: &[u8], _: u32) -> Result<Image, String> {
    Err(NO_JPEG.to_owned())
}

#[cfg(not(feature = "jpeg"))]
fn decode_jpeg_resized(
    _: &[u8],
    _: u32,
    _: impl FnOnce(u32, u32) -> Rect,
    _: [u32; 2],
) -> Result<Image, String> {
    Err(NO_JPEG.to_owned())
}

/// [`decode_resized`] of a JPEG: only the region, at reduced scale where the resize allows.
#[cfg(feature = "jpeg")]
fn decode_jpeg_resized(
    bytes: &[u8],
    channels: u32,
    choose: impl FnOnce(u32, u32) -> Rect,
    size: [u32; 2],
) -> Result<Image, String> {
    let decoder = jpeg::Decoder::open(bytes)?;
    let (width, height) = decoder.dimensions();
    let rect = choose(height, width);
    let fits = |n: u32| {
        let s = f64::from(n) / 8.0;
        rect.height * s >= f64::from(size[0]) && rect.width * s >= f64::from(size[1])
    };
    // Up to 4/8: libjpeg-turbo's 7/8 and 6/8 inverse DCTs are plain C and slower than its SIMD
    // full-size one, and 5/8 gains nothing (BENCHMARKS.md), so they would cost, not save.
    let scale = (1..=4).find(|n| fits(*n)).unwrap_or(8);
    let (scaled_h, scaled_w) = (jpeg::scaled(height, scale), jpeg::scaled(width, scale));
    let rect = rect.scaled(8.0 / f64::from(scale));
    // The resize filter reads past the region's edges (as far as the shrink factor, plus one):
    // decode that margin too, so the result equals resizing the fully decoded image.
    let margin_y = (rect.height / f64::from(size[0])).ceil() + 1.0;
    let margin_x = (rect.width / f64::from(size[1])).ceil() + 1.0;
    let top = ((rect.top - margin_y).max(0.0) as u32).min(scaled_h - 1);
    let left = ((rect.left - margin_x).max(0.0) as u32).min(scaled_w - 1);
    let bottom = ((rect.top + rect.height + margin_y).ceil() as u32).clamp(top + 1, scaled_h);
    let right = ((rect.left + rect.width + margin_x).ceil() as u32).clamp(left + 1, scaled_w);
    let window = jpeg::Window {
        scale,
        top,
        left,
        height: bottom - top,
        width: right - left,
    };
    let (image, first_column) = decoder.decode_window(channels, window)?;
    // The region inside the decoded window, kept within it against rounding at the edges.
    let top = rect.top - f64::from(top);
    let left = rect.left - f64::from(first_column);
    let inside = Rect {
        top,
        left,
        height: rect.height.min(f64::from(image.height) - top),
        width: rect.width.min(f64::from(image.width) - left),
    };
    ops::resize_region(&image, inside, size[0], size[1])
}

fn decode_png(bytes: &[u8], channels: u32) -> Result<Image, String> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| format!("PNG: {e}"))?;
    let size = reader.output_buffer_size().ok_or("PNG: image too large")?;
    let mut data = vec![0; size];
    let info = reader
        .next_frame(&mut data)
        .map_err(|e| format!("PNG: {e}"))?;
    data.truncate(info.buffer_size());
    let got = match info.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err("PNG: palette not expanded".to_owned()),
    };
    convert(
        Image {
            height: info.height,
            width: info.width,
            channels: got,
            data,
        },
        channels,
    )
}

/// Convert between gray, gray+alpha, RGB and RGBA (alpha is dropped, not composited).
fn convert(image: Image, channels: u32) -> Result<Image, String> {
    if image.channels == channels {
        return Ok(image);
    }
    let pixels = (image.width * image.height) as usize;
    let from = image.channels as usize;
    if image.data.len() != pixels * from {
        return Err(format!(
            "decoder returned {} bytes for {pixels} pixels",
            image.data.len()
        ));
    }
    let mut data = Vec::with_capacity(pixels * channels as usize);
    for px in image.data.chunks_exact(from) {
        match (from, channels) {
            (1 | 2, 3) => data.extend_from_slice(&[px[0], px[0], px[0]]),
            (3 | 4, 1) => data.push(luma(px[0], px[1], px[2])),
            (2, 1) => data.push(px[0]),
            (4, 3) => data.extend_from_slice(&px[..3]),
            _ => return Err(format!("cannot convert {from} channels to {channels}")),
        }
    }
    Ok(Image {
        channels,
        data,
        ..image
    })
}

/// Encode as JPEG at `quality` (1–100).
pub fn encode_jpeg(image: &Image, quality: u8) -> Result<Vec<u8>, String> {
    let color = match image.channels {
        1 => jpeg_encoder::ColorType::Luma,
        3 => jpeg_encoder::ColorType::Rgb,
        c => return Err(format!("cannot encode {c} channels as JPEG")),
    };
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, quality)
        .encode(&image.data, image.width as u16, image.height as u16, color)
        .map_err(|e| format!("JPEG encode: {e}"))?;
    Ok(out)
}

/// Encode as PNG.
pub fn encode_png(image: &Image) -> Result<Vec<u8>, String> {
    let color = match image.channels {
        1 => png::ColorType::Grayscale,
        3 => png::ColorType::Rgb,
        c => return Err(format!("cannot encode {c} channels as PNG")),
    };
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, image.width, image.height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| format!("PNG encode: {e}"))?;
        writer
            .write_image_data(&image.data)
            .map_err(|e| format!("PNG encode: {e}"))?;
    }
    Ok(out)
}

#[cfg(all(test, feature = "jpeg"))]
mod tests {
    use super::*;

    fn gradient(h: u32, w: u32) -> Image {
        let mut image = Image::zeros(h, w, 3);
        for y in 0..h {
            for x in 0..w {
                let i = ((y * w + x) * 3) as usize;
                image.data[i] = (x * 255 / w) as u8;
                image.data[i + 1] = (y * 255 / h) as u8;
                image.data[i + 2] = 128;
            }
        }
        image
    }

    #[test]
    fn png_round_trips_exactly() {
        let image = gradient(13, 17);
        let bytes = encode_png(&image).unwrap();
        assert_eq!(sniff(&bytes), Some(Format::Png));
        assert_eq!(decode(&bytes, 3).unwrap(), image);
        assert_eq!(decode(&bytes, 1).unwrap().shape(), [13, 17, 1]);
    }

    #[test]
    fn jpeg_round_trips_closely() {
        let image = gradient(64, 96);
        let bytes = encode_jpeg(&image, 95).unwrap();
        assert_eq!(jpeg::dimensions(&bytes).unwrap(), (96, 64));
        let back = decode(&bytes, 3).unwrap();
        assert_eq!(back.shape(), [64, 96, 3]);
        let worst = back
            .data
            .iter()
            .zip(&image.data)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(worst < 24, "max error {worst}");
    }

    /// A photo-like test image: smooth fields, an edge and noise, so every DCT block differs.
    fn photo(h: u32, w: u32, channels: u32) -> Image {
        let mut image = Image::zeros(h, w, channels);
        let mut state = 12345u32;
        for (i, v) in image.data.iter_mut().enumerate() {
            let (y, x) = ((i as u32 / channels) / w, (i as u32 / channels) % w);
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let noise = (state >> 16) % 24;
            let edge = if x > w / 3 { 60 } else { 0 };
            *v = ((x * 3 + y * 2 + (i as u32 % channels) * 40) % 160 + edge + noise) as u8;
        }
        image
    }

    #[test]
    fn a_jpeg_window_is_the_same_pixels_as_the_full_decode() {
        for channels in [3, 1] {
            let bytes = encode_jpeg(&photo(53, 70, channels), 90).unwrap();
            let full = decode(&bytes, channels).unwrap();
            assert_eq!(full.shape(), [53, 70, channels]);
            for (top, left, h, w) in [
                (0, 0, 53, 70),
                (5, 17, 20, 9),
                (40, 50, 13, 20),
                (52, 69, 1, 1),
            ] {
                let window = jpeg::Window {
                    scale: 8,
                    top,
                    left,
                    height: h,
                    width: w,
                };
                let (got, first) = jpeg::decode_window(&bytes, channels, window).unwrap();
                assert!(
                    first <= left && first + got.width >= left + w,
                    "{first} {}",
                    got.width
                );
                assert_eq!(
                    got,
                    full.crop(top, first, h, got.width),
                    "window {window:?}"
                );
            }
        }
    }

    #[test]
    fn decode_resized_equals_resizing_the_full_decode() {
        let bytes = encode_jpeg(&photo(120, 160, 3), 90).unwrap();
        let full = decode(&bytes, 3).unwrap();
        // A crop within 8/7 of the output: no DCT scaling, only the window decoded.
        let rect = Rect {
            top: 31.0,
            left: 45.0,
            height: 50.0,
            width: 61.0,
        };
        let got = decode_resized(
            &bytes,
            3,
            |h, w| {
                assert_eq!((h, w), (120, 160));
                rect
            },
            [48, 48],
        )
        .unwrap();
        let want = ops::resize_region(&full, rect, 48, 48).unwrap();
        let differ = got
            .data
            .iter()
            .zip(&want.data)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(differ, 0, "{differ} of {} bytes differ", got.data.len());
    }

    #[test]
    fn decode_resized_scales_in_the_dct_domain_when_the_crop_is_large() {
        let bytes = encode_jpeg(&photo(240, 320, 3), 90).unwrap();
        let full = decode(&bytes, 3).unwrap();
        // 240×320 into 48×48: decoded at 1/4 (60×80), then shrunk.
        let got = decode_resized(&bytes, 3, Rect::full, [48, 48]).unwrap();
        let want = ops::resize(&full, [48, 48]).unwrap();
        assert_eq!(got.shape(), want.shape());
        let mean = got
            .data
            .iter()
            .zip(&want.data)
            .map(|(a, b)| f64::from(a.abs_diff(*b)))
            .sum::<f64>()
            / got.data.len() as f64;
        assert!(mean < 3.0, "mean difference {mean}");
        assert_ne!(got, want, "expected the scaled path, not a full decode");
    }

    #[test]
    fn cmyk_jpegs_decode_to_rgb() {
        // A CMYK file of one colour: no cyan, full magenta, half yellow, no black.
        let (h, w) = (16u16, 16u16);
        let ink = [0u8, 255, 128, 0];
        let pixels: Vec<u8> = ink
            .iter()
            .copied()
            .cycle()
            .take(h as usize * w as usize * 4)
            .collect();
        let mut bytes = Vec::new();
        jpeg_encoder::Encoder::new(&mut bytes, 95)
            .encode(&pixels, w, h, jpeg_encoder::ColorType::Cmyk)
            .unwrap();
        let rgb = decode(&bytes, 3).unwrap();
        let px = &rgb.data[..3];
        assert!(
            px[0] > 235 && px[1] < 20 && (100..156).contains(&px[2]),
            "{px:?}"
        );
    }

    #[test]
    fn truncated_and_oversized_jpegs_are_errors() {
        let bytes = encode_jpeg(&photo(64, 64, 3), 90).unwrap();
        let err = decode(&bytes[..bytes.len() / 2], 3).unwrap_err();
        assert!(err.contains("JPEG"), "{err}");
        // A frame header claiming 60000×60000 is refused before any pixel buffer exists.
        let mut huge = bytes.clone();
        let sof = huge.windows(2).position(|m| m == [0xff, 0xc0]).unwrap();
        huge[sof + 5..sof + 9].copy_from_slice(&[0xea, 0x60, 0xea, 0x60]);
        let err = decode(&huge, 3).unwrap_err();
        assert!(err.contains("outside"), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"hello", 3).is_err());
        assert!(decode(&[0xff, 0xd8, 0xff, 0x00, 0x01], 3).is_err());
        assert!(decode(b"\x89PNG\r\n\x1a\n\0\0", 3).is_err());
    }
}
