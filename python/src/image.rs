//! hetgen's image operations for a user's own `Dataset` (`hetgen.image` wraps these): the same
//! decoder and resampler as the built-in pipeline, the random-resized-crop decoded at reduced
//! scale where the crop allows, each call without the GIL.
//!
//! Images are numpy `uint8` arrays `[height, width, channels]` (or `[height, width]` for one
//! channel, as numpy and PIL have them); results are new arrays the caller owns. Random choices
//! are drawn from a [`SampleRng`] seeded with the `seed` the Python side draws from the
//! generator it is given (by default Python's `random`, which hetgen's workers seed per sample),
//! so a sample is the same whichever host, worker or thread makes it.
//!
//! Every failure is a `ValueError` naming what was wrong with the input: a worker's process never
//! crashes on bad bytes or sizes.

use std::path::PathBuf;

use hetgen_pipeline::codec::jpeg::MAX_SIDE;
use hetgen_pipeline::{Image, SampleRng, codec, ops};
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

/// `(scale, ratio)` of a random resized crop, as torchvision names them.
type Crop = ((f64, f64), (f64, f64));

/// Encoded bytes, from a buffer or read from a file without the GIL.
enum Encoded {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Encoded {
    fn from_python(source: &Bound<'_, PyAny>) -> PyResult<Encoded> {
        // One copy, under the GIL: the buffer protocol is not in the stable ABI the wheel
        // targets, and a copy of the encoded bytes costs a few microseconds beside the decode.
        if let Ok(bytes) = source.cast::<PyBytes>() {
            return Ok(Encoded::Bytes(bytes.as_bytes().to_vec()));
        }
        if let Ok(bytes) = source.cast::<PyByteArray>() {
            return Ok(Encoded::Bytes(bytes.to_vec()));
        }
        let is_bytes = source.hasattr("tobytes")?
            && (!source.hasattr("dtype")? || source.getattr("dtype")?.str()? == "uint8");
        if is_bytes {
            let bytes = source.call_method0("tobytes")?;
            return Ok(Encoded::Bytes(bytes.cast::<PyBytes>()?.as_bytes().to_vec()));
        }
        // A `str` or an `os.PathLike`, as `os.fspath` takes them.
        source.extract::<PathBuf>().map(Encoded::File).map_err(|_| {
            PyTypeError::new_err(format!(
                "expected encoded bytes (bytes, bytearray, memoryview or a uint8 numpy array) \
                 or a file path, not {}",
                type_name(source)
            ))
        })
    }

    /// The bytes; a file is read here, without the GIL.
    fn bytes(self) -> Result<Vec<u8>, String> {
        match self {
            Encoded::Bytes(bytes) => Ok(bytes),
            Encoded::File(path) => {
                std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            }
        }
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "an object".to_owned(), |n| n.to_string())
}

/// `image` as an [`Image`]: a `uint8` array `[h, w]` or `[h, w, c]`, any strides (copied);
/// and whether it was `[h, w]`, so that a result can keep that form.
fn image_of(image: &Bound<'_, PyAny>) -> PyResult<(Image, bool)> {
    let array = image.cast::<numpy::PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!("expected a numpy array, not {}", type_name(image)))
    })?;
    if !array.dtype().is_equiv_to(&numpy::dtype::<u8>(image.py())) {
        return Err(PyTypeError::new_err(format!(
            "expected a uint8 image, not {}",
            array.dtype()
        )));
    }
    let shape = array.shape().to_vec();
    let (h, w, c) = match shape[..] {
        [h, w] => (h, w, 1),
        [h, w, c] if (1..=4).contains(&c) => (h, w, c),
        _ => {
            return Err(PyValueError::new_err(format!(
                "expected an image [height, width] or [height, width, channels ≤ 4], not shape {shape:?}"
            )));
        }
    };
    if h == 0 || w == 0 {
        return Err(PyValueError::new_err(format!(
            "the image is empty (shape {shape:?})"
        )));
    }
    // Flattened in C order whatever its strides: one copy, which `Image` owns.
    let flat = image.call_method0("tobytes")?;
    let data: Vec<u8> = flat.extract::<&[u8]>()?.to_vec();
    let image = Image {
        height: h as u32,
        width: w as u32,
        channels: c as u32,
        data,
    };
    Ok((image, shape.len() == 2))
}

/// `image` as a numpy array `[h, w, c]` (`[h, w]` for one channel when `squeeze`).
fn to_numpy(py: Python<'_>, image: Image, squeeze: bool) -> PyResult<Bound<'_, PyAny>> {
    let [h, w, c] = image.shape().map(|d| d as usize);
    let flat = PyArray1::from_vec(py, image.data);
    if squeeze && c == 1 {
        Ok(flat.reshape([h, w])?.into_any())
    } else {
        Ok(flat.reshape([h, w, c])?.into_any())
    }
}

/// An output size `(height, width)`, refused when empty or beyond what a decoder accepts.
fn checked_size(size: (u32, u32)) -> PyResult<[u32; 2]> {
    let (h, w) = size;
    if h == 0 || w == 0 {
        return Err(PyValueError::new_err(format!(
            "size ({h}, {w}) is empty: both sides must be at least 1"
        )));
    }
    if h > MAX_SIDE || w > MAX_SIDE {
        return Err(PyValueError::new_err(format!(
            "size ({h}, {w}) is beyond {MAX_SIDE} pixels a side"
        )));
    }
    Ok([h, w])
}

fn checked_crop(crop: Crop) -> PyResult<([f64; 2], [f64; 2])> {
    let ((s0, s1), (r0, r1)) = crop;
    if !(s0 > 0.0 && s0 <= s1 && s1.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "scale ({s0}, {s1}) must be a range of areas with 0 < low <= high"
        )));
    }
    if !(r0 > 0.0 && r0 <= r1 && r1.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "ratio ({r0}, {r1}) must be a range of aspect ratios with 0 < low <= high"
        )));
    }
    Ok(([s0, s1], [r0, r1]))
}

fn channels_of(channels: u32) -> PyResult<u32> {
    match channels {
        1 | 3 => Ok(channels),
        _ => Err(PyValueError::new_err(format!(
            "{channels} channels: decode to 1 (GRAY) or 3 (RGB)"
        ))),
    }
}

/// JPEG or PNG bytes (or the file at a path) decoded whole to `channels` channels.
#[pyfunction]
pub fn decode<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    channels: u32,
) -> PyResult<Bound<'py, PyAny>> {
    let channels = channels_of(channels)?;
    let encoded = Encoded::from_python(source)?;
    let image = py
        .detach(|| codec::decode(&encoded.bytes()?, channels))
        .map_err(PyValueError::new_err)?;
    to_numpy(py, image, false)
}

/// JPEG or PNG bytes decoded and resized to `size`: the whole image, or a random crop of it
/// (`crop`: torchvision's `scale` and `ratio`) drawn with `seed`, decoding a JPEG at the
/// smallest scale that still covers the output.
#[pyfunction]
#[pyo3(signature = (source, channels, size, crop, seed))]
pub fn decode_resized<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    channels: u32,
    size: (u32, u32),
    crop: Option<Crop>,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let channels = channels_of(channels)?;
    let size = checked_size(size)?;
    let crop = crop.map(checked_crop).transpose()?;
    let encoded = Encoded::from_python(source)?;
    let image = py
        .detach(|| {
            let bytes = encoded.bytes()?;
            let mut rng = SampleRng::from_seed(seed);
            let choose = |h, w| match crop {
                Some((scale, ratio)) => ops::random_resized_crop_rect(h, w, scale, ratio, &mut rng),
                None => ops::Rect::full(h, w),
            };
            codec::decode_resized(&bytes, channels, choose, size)
        })
        .map_err(PyValueError::new_err)?;
    to_numpy(py, image, false)
}

/// An image resized to `size`: whole, or a random crop of it (`crop`) drawn with `seed`.
#[pyfunction]
#[pyo3(signature = (image, size, crop, seed))]
pub fn resized<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    size: (u32, u32),
    crop: Option<Crop>,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let size = checked_size(size)?;
    let crop = crop.map(checked_crop).transpose()?;
    let (pixels, squeeze) = image_of(image)?;
    let out = py
        .detach(|| {
            let (h, w) = (pixels.height, pixels.width);
            let rect = match crop {
                Some((scale, ratio)) => ops::random_resized_crop_rect(
                    h,
                    w,
                    scale,
                    ratio,
                    &mut SampleRng::from_seed(seed),
                ),
                None => ops::Rect::full(h, w),
            };
            ops::resize_region(&pixels, rect, size[0], size[1])
        })
        .map_err(PyValueError::new_err)?;
    to_numpy(py, out, squeeze)
}

/// An image mirrored left to right.
#[pyfunction]
pub fn horizontal_flip<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let (mut pixels, squeeze) = image_of(image)?;
    let pixels = py.detach(move || {
        ops::flip(&mut pixels);
        pixels
    });
    to_numpy(py, pixels, squeeze)
}

/// An image as `float32` `[channels, height, width]`, `(value / 255 - mean) / std` per channel:
/// torchvision's `ToDtype(float32, scale=True)` then `Normalize(mean, std)`.
#[pyfunction]
pub fn normalize<'py>(
    py: Python<'py>,
    image: &Bound<'py, PyAny>,
    mean: Vec<f64>,
    std: Vec<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let (pixels, _) = image_of(image)?;
    let c = pixels.channels as usize;
    for (name, values) in [("mean", &mean), ("std", &std)] {
        if values.len() != c && values.len() != 1 {
            return Err(PyValueError::new_err(format!(
                "{name} has {} values for an image of {c} channels (give one, or one per channel)",
                values.len()
            )));
        }
    }
    if let Some(zero) = std.iter().find(|s| !(s.is_finite() && **s != 0.0)) {
        return Err(PyValueError::new_err(format!(
            "std {zero} would divide by zero"
        )));
    }
    let [h, w] = [pixels.height as usize, pixels.width as usize];
    let values = py.detach(|| ops::normalize(&pixels, &mean, &std));
    Ok(PyArray1::from_vec(py, values)
        .reshape([c, h, w])?
        .into_any())
}

/// An image as `[channels, height, width]`, the layout torch's models take.
#[pyfunction]
pub fn to_chw<'py>(py: Python<'py>, image: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let (pixels, _) = image_of(image)?;
    let [h, w, c] = pixels.shape().map(|d| d as usize);
    let planar = py.detach(|| {
        let mut out = vec![0u8; pixels.data.len()];
        for (k, plane) in out.chunks_exact_mut(h * w).enumerate() {
            for (dst, px) in plane.iter_mut().zip(pixels.data.chunks_exact(c)) {
                *dst = px[k];
            }
        }
        out
    });
    Ok(PyArray1::from_vec(py, planar)
        .reshape([c, h, w])?
        .into_any())
}

/// Registers the functions as the submodule `_native.image`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let image = PyModule::new(py, "image")?;
    image.add_function(wrap_pyfunction!(decode, &image)?)?;
    image.add_function(wrap_pyfunction!(decode_resized, &image)?)?;
    image.add_function(wrap_pyfunction!(resized, &image)?)?;
    image.add_function(wrap_pyfunction!(horizontal_flip, &image)?)?;
    image.add_function(wrap_pyfunction!(normalize, &image)?)?;
    image.add_function(wrap_pyfunction!(to_chw, &image)?)?;
    image.add("MAX_SIDE", MAX_SIDE)?;
    m.add_submodule(&image)?;
    Ok(())
}
