//! JPEG decoding with libjpeg-turbo, whole or just the region a crop needs.
//!
//! The C side (`csrc/jpeg_region.c`) drives libjpeg and catches its errors; this side checks
//! every size before calling it, so the C code only ever writes inside the buffer it is given.

use std::ffi::{CStr, c_char};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::image::Image;

/// Largest width or height accepted, as a guard against allocation bombs in headers.
pub const MAX_SIDE: u32 = 1 << 14;

/// libjpeg's decompressor for one file, owned by the C side (`struct hetgen_jpeg`).
#[repr(C)]
struct RawDecoder {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn hetgen_jpeg_open(
        data: *const u8,
        len: usize,
        width: *mut u32,
        height: *mut u32,
        message: *mut c_char,
        message_len: usize,
    ) -> *mut RawDecoder;
    fn hetgen_jpeg_decode(
        jpeg: *mut RawDecoder,
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
    fn hetgen_jpeg_close(jpeg: *mut RawDecoder);
}

fn failure(message: &[c_char]) -> String {
    // SAFETY: the C side always NUL-terminates `message` (snprintf, or the empty string).
    let text = unsafe { CStr::from_ptr(message.as_ptr()) };
    format!("JPEG: {}", text.to_string_lossy().trim_end())
}

/// A JPEG whose headers have been read, ready to decode once: the headers are parsed a single
/// time, and the caller picks the region to decode from [`Decoder::dimensions`] in between.
pub struct Decoder<'a> {
    raw: NonNull<RawDecoder>,
    width: u32,
    height: u32,
    /// libjpeg reads the file in place until the decoder is closed.
    _bytes: PhantomData<&'a [u8]>,
}

impl<'a> Decoder<'a> {
    /// Read the headers of `bytes`; sizes outside `1..=MAX_SIDE` are refused here.
    pub fn open(bytes: &'a [u8]) -> Result<Self, String> {
        let mut message = [0 as c_char; 256];
        let (mut width, mut height) = (0, 0);
        // SAFETY: `bytes` and `message` are valid for the lengths passed; the outputs are plain
        // u32s. The decoder reads `bytes` until it is closed, which `_bytes` ties to `'a`.
        let raw = unsafe {
            hetgen_jpeg_open(
                bytes.as_ptr(),
                bytes.len(),
                &mut width,
                &mut height,
                message.as_mut_ptr(),
                message.len(),
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| failure(&message))?;
        let decoder = Self {
            raw,
            width,
            height,
            _bytes: PhantomData,
        };
        if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
            return Err(format!(
                "JPEG: {width}×{height} is outside 1..={MAX_SIDE} pixels a side"
            ));
        }
        Ok(decoder)
    }

    /// `(width, height)` at full size.
    pub fn dimensions(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Decode `window` to `channels` (1 or 3). Returns the pixels and the first column actually
    /// decoded: libjpeg widens the columns to whole blocks, so the image may start left of
    /// `window.left` and be wider than `window.width`.
    pub fn decode_window(self, channels: u32, window: Window) -> Result<(Image, u32), String> {
        if !(1..=8).contains(&window.scale) || !(channels == 1 || channels == 3) {
            return Err(format!(
                "JPEG: cannot decode at scale {}/8 to {channels} channels",
                window.scale
            ));
        }
        let full_width = scaled(self.width, window.scale);
        let full_height = scaled(self.height, window.scale);
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
        // SAFETY: the decoder is open and decodes once (this consumes it); every pointer is
        // valid for the length passed beside it; the C side writes at most `window.height` rows
        // of at most `full_width * channels` bytes, which `data` has room for.
        let rc = unsafe {
            hetgen_jpeg_decode(
                self.raw.as_ptr(),
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
    pub fn decode(self, channels: u32) -> Result<Image, String> {
        let window = Window {
            scale: 8,
            top: 0,
            left: 0,
            height: self.height,
            width: self.width,
        };
        self.decode_window(channels, window).map(|(image, _)| image)
    }
}

impl Drop for Decoder<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `hetgen_jpeg_open` and is closed only here, once.
        unsafe { hetgen_jpeg_close(self.raw.as_ptr()) }
    }
}

// SAFETY: the decoder holds no thread-affine state; libjpeg objects may move between threads.
unsafe impl Send for Decoder<'_> {}

/// `(width, height)` from the headers alone.
pub fn dimensions(bytes: &[u8]) -> Result<(u32, u32), String> {
    Decoder::open(bytes).map(|d| d.dimensions())
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

/// Decode `window` of a JPEG (see [`Decoder::decode_window`]).
pub fn decode_window(bytes: &[u8], channels: u32, window: Window) -> Result<(Image, u32), String> {
    Decoder::open(bytes)?.decode_window(channels, window)
}

/// Decode the whole image at full size.
pub fn decode(bytes: &[u8], channels: u32) -> Result<Image, String> {
    Decoder::open(bytes)?.decode(channels)
}
