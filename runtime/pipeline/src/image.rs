//! The pixels that flow between stages.

/// An 8-bit image, `height × width × channels`, row-major and interleaved (HWC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
    /// 1 (grayscale) or 3 (RGB).
    pub channels: u32,
    /// `height * width * channels` bytes.
    pub data: Vec<u8>,
}

impl Image {
    /// A black image.
    pub fn zeros(height: u32, width: u32, channels: u32) -> Self {
        Self {
            height,
            width,
            channels,
            data: vec![0; (height * width * channels) as usize],
        }
    }

    /// `[height, width, channels]`.
    pub fn shape(&self) -> [u32; 3] {
        [self.height, self.width, self.channels]
    }

    /// Bytes per row.
    pub fn stride(&self) -> usize {
        (self.width * self.channels) as usize
    }

    /// The `h × w` window at (`top`, `left`), copied.
    pub fn crop(&self, top: u32, left: u32, h: u32, w: u32) -> Image {
        let c = self.channels as usize;
        let mut data = Vec::with_capacity((h * w) as usize * c);
        for row in top..top + h {
            let start = row as usize * self.stride() + left as usize * c;
            data.extend_from_slice(&self.data[start..start + w as usize * c]);
        }
        Image {
            height: h,
            width: w,
            channels: self.channels,
            data,
        }
    }
}

/// ITU-R 601 luma, as PIL's `convert("L")`.
///
/// The one gray level of a pixel: decoding to one channel and colour jitter's blends with gray
/// both use it, so they agree.
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 299 + u32::from(g) * 587 + u32::from(b) * 114 + 500) / 1000) as u8
}

/// What a source yields for one sample: encoded bytes (decoded by the `decode` stage) or pixels.
#[derive(Debug, Clone)]
pub enum Payload {
    /// JPEG or PNG bytes.
    Encoded(Vec<u8>),
    /// Ready pixels (synthetic data without an encoding).
    Pixels(Image),
}

/// One sample as read from a source.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Class index.
    pub label: i64,
    /// The content.
    pub payload: Payload,
}
