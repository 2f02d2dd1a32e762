//! JPEG decoding with libjpeg-turbo, whole or just the region a crop needs.
//!
//! The C side (`csrc/jpeg_region.c`) drives libjpeg and catches its errors; this side checks
//! every size before calling it, so the C code only ever writes inside the buffer it is given.

use std::ffi::{CStr, c_char};

use crate::image::Image;

/// Largest width or height accepted, as a guard against allocation bombs in headers.
pub const MAX_SIDE: u32 = 1 << 14;

unsafe extern "C" {
    fn hetgen_jpeg_header(
        data: *const u8,
        len: usize,
        width: *mut u32,
        height: *mut u32,
        message: *mut c_char,
        message_len: usize,
    ) -> i32;
    fn hetgen_jpeg_decode(
        data: *const u8,
        len: usize,
        channels: u32,
        scale_num: u32,
        top: u32,
        rows: u32,
        left: u32,
        cols: u32,
        out: *mut u8,
        out_len: usize,
        out_left: *mut u32,
        out_cols: *mut u32,
        message: *mut c_char,
        message_len: usize,
    ) -> i32;
}

fn failure(message: &[c_char]) -> String {
    // SAFETY: the C side always NUL-terminates `message` (snprintf, or the empty string).
    let text = unsafe { CStr::from_ptr(message.as_ptr()) };
    format!("JPEG: {}", text.to_string_lossy().trim_end())
}

/// `(width, height)` from the headers alone.
pub fn dimensions(bytes: &[u8]) -> Result<(u32, u32), String> {
    let mut message = [0 as c_char; 256];
    let (mut width, mut height) = (0, 0);
    // SAFETY: `bytes` and `message` are valid for the lengths passed; the outputs are plain u32s.
    let rc = unsafe {
        hetgen_jpeg_header(
            bytes.as_ptr(),
            bytes.len(),
            &mut width,
            &mut height,
            message.as_mut_ptr(),
            message.len(),
        )
    };
    if rc != 0 {
        return Err(failure(&message));
    }
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(format!(
            "JPEG: {width}×{height} is outside 1..={MAX_SIDE} pixels a side"
        ));
    }
    Ok((width, height))
}

/// The size of a `side`-pixel dimension decoded at `num / 8`, rounded up as libjpeg does.
pub fn scaled(side: u32, num: u32) -> u32 {
    (u64::from(side) * u64::from(num)).div_ceil(8) as u32
}

/// A window of a JPEG to decode, in pixels of the image scaled by `scale / 8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The DCT scale numerator, 1..=8 (8 is full size).
    pub scale: u32,
    /// First row.
    pub top: u32,
    /// First column.
    pub left: u32,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
}

/// Decode `window` of a JPEG whose headers say it is `size` = (width, height). Returns the
/// pixels and the first column actually decoded: libjpeg widens the columns to whole blocks,
/// so the image may start left of `window.left` and be wider than `window.width`.
pub fn decode_window(
    bytes: &[u8],
    size: (u32, u32),
    channels: u32,
    window: Window,
) -> Result<(Image, u32), String> {
    if !(1..=8).contains(&window.scale) || !(channels == 1 || channels == 3) {
        return Err(format!(
            "JPEG: cannot decode at scale {}/8 to {channels} channels",
            window.scale
        ));
    }
    let full_width = scaled(size.0, window.scale);
    let full_height = scaled(size.1, window.scale);
    if window.height == 0
        || window.width == 0
        || window.top + window.height > full_height
        || window.left + window.width > full_width
    {
        return Err(format!(
            "JPEG: window {window:?} is outside the {full_width}×{full_height} image"
        ));
    }
    // Room for whole rows: the widened column range never exceeds the scaled width. Not
    // zeroed: the C side writes every byte of the rows it reports before we keep them.
    let capacity = window.height as usize * full_width as usize * channels as usize;
    let mut data: Vec<u8> = Vec::with_capacity(capacity);
    let mut message = [0 as c_char; 256];
    let (mut left, mut cols) = (0, 0);
    // SAFETY: every pointer is valid for the length passed beside it; the C side writes at most
    // `window.height` rows of at most `full_width * channels` bytes, which `data` has room for.
    let rc = unsafe {
        hetgen_jpeg_decode(
            bytes.as_ptr(),
            bytes.len(),
            channels,
            window.scale,
            window.top,
            window.height,
            window.left,
            window.width,
            data.as_mut_ptr(),
            capacity,
            &mut left,
            &mut cols,
            message.as_mut_ptr(),
            message.len(),
        )
    };
    if rc != 0 {
        return Err(failure(&message));
    }
    let written = window.height as usize * cols as usize * channels as usize;
    if written > capacity {
        // The C side checked this before writing; never trust a length it did not.
        return Err(format!(
            "JPEG: decoder reported {cols} columns, past the image"
        ));
    }
    // SAFETY: on success the C side has written `window.height` packed rows of
    // `cols * channels` bytes, all within the capacity (checked just above).
    unsafe { data.set_len(written) };
    let image = Image {
        height: window.height,
        width: cols,
        channels,
        data,
    };
    Ok((image, left))
}

/// Decode the whole image at full size.
pub fn decode(bytes: &[u8], channels: u32) -> Result<Image, String> {
    let size = dimensions(bytes)?;
    let window = Window {
        scale: 8,
        top: 0,
        left: 0,
        height: size.1,
        width: size.0,
    };
    decode_window(bytes, size, channels, window).map(|(image, _)| image)
}
