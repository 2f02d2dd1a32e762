//! JPEG and PNG in and out.
//!
//! JPEGs decode with zune-jpeg (SIMD IDCT and colour conversion), the fastest pure-Rust decoder
//! we measured, PNGs with the png crate.

use std::io::Cursor;

use crate::image::Image;

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

/// `(width, height)` of a JPEG from its headers alone.
pub fn jpeg_dimensions(bytes: &[u8]) -> Result<(u32, u32), String> {
    let mut decoder = zune_jpeg::JpegDecoder::new(zune_core::bytestream::ZCursor::new(bytes));
    decoder
        .decode_headers()
        .map_err(|e| format!("JPEG: {e:?}"))?;
    let (w, h) = decoder.dimensions().ok_or("JPEG: no frame header")?;
    Ok((w as u32, h as u32))
}

fn decode_jpeg(bytes: &[u8], channels: u32) -> Result<Image, String> {
    use zune_core::colorspace::ColorSpace;
    let space = if channels == 1 {
        ColorSpace::Luma
    } else {
        ColorSpace::RGB
    };
    let options = zune_core::options::DecoderOptions::default()
        .jpeg_set_out_colorspace(space)
        .set_strict_mode(false);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(
        zune_core::bytestream::ZCursor::new(bytes),
        options,
    );
    let data = decoder.decode().map_err(|e| format!("JPEG: {e:?}"))?;
    let (w, h) = decoder.dimensions().ok_or("JPEG: no frame header")?;
    let got = decoder
        .output_colorspace()
        .map_or(channels as usize, |c| c.num_components());
    convert(
        Image {
            height: h as u32,
            width: w as u32,
            channels: got as u32,
            data,
        },
        channels,
    )
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

/// ITU-R 601 luma, as PIL's `convert("L")`.
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 299 + u32::from(g) * 587 + u32::from(b) * 114 + 500) / 1000) as u8
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

#[cfg(test)]
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
        assert_eq!(jpeg_dimensions(&bytes).unwrap(), (96, 64));
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

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"hello", 3).is_err());
        assert!(decode(&[0xff, 0xd8, 0xff, 0x00, 0x01], 3).is_err());
        assert!(decode(b"\x89PNG\r\n\x1a\n\0\0", 3).is_err());
    }
}
