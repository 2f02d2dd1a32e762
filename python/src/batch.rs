//! A batch handed to Python without copying its bytes.
//!
//! A batch's bytes arrive as `bytes::Bytes`: a slice of the gRPC message the client received,
//! the buffer the engine wrote, or the shared memory a Python dataset's worker wrote. The
//! `Bytes` becomes a [`BatchMemory`] and the numpy arrays are views of it with the
//! `BatchMemory` as their base, so the memory lives exactly as long as the arrays and whatever
//! views (e.g. `torch.from_numpy`) Python takes of them.
//!
//! Labels and sample ids are `Vec`s, which numpy adopts as they are.

use bytes::Bytes;
use hetgen_pipeline::Batch;
use numpy::ndarray::{ArrayView1, ArrayView4};
use numpy::{PyArray1, PyArray4};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// The memory of one batch, kept alive by the numpy arrays that view it.
#[pyclass(module = "hetgen._native", frozen)]
pub struct BatchMemory {
    data: Bytes,
}

#[pymethods]
impl BatchMemory {
    /// Bytes of the batch.
    fn __len__(&self) -> usize {
        self.data.len()
    }
}

/// A batch handed to Python as three items: `(images, labels, sample_ids)`, `uint8`
/// `[n, h, w, c]`, `int64` `[n]` and `uint64` `[n]` for built-in images;
/// `((memory, tensors), structure, sample_ids)` for a Python dataset's batch, where `memory` is
/// a `uint8` array of the batch's bytes, `tensors` a list of `(name, dtype, shape, offset)` and
/// `structure` the JSON of how they nest (the Python side views and nests them; see
/// `hetgen/_loader.py`).
pub fn to_python<'py>(py: Python<'py>, mut batch: Batch) -> PyResult<[Bound<'py, PyAny>; 3]> {
    if batch.tensors.is_empty() {
        let (images, labels) = images(py, &mut batch)?;
        let ids = PyArray1::from_vec(py, batch.sample_ids);
        return Ok([images.into_any(), labels.into_any(), ids.into_any()]);
    }
    let ids = PyArray1::from_vec(py, std::mem::take(&mut batch.sample_ids)).into_any();
    // torch's kernels expect elements at addresses aligned to their size; numpy views do not
    // care. A gRPC receive buffer puts the batch wherever the message happened to land, so a
    // batch whose tensors would be misaligned is moved once to an aligned buffer.
    let widest = batch
        .tensors
        .iter()
        .map(|t| t.dtype.size())
        .max()
        .unwrap_or(1);
    let misaligned = batch.tensors.iter().any(|t| {
        !(batch.data.as_ptr() as usize + t.offset as usize).is_multiple_of(t.dtype.size())
    });
    let data = if misaligned {
        aligned_copy(&batch.data, widest)
    } else {
        batch.data
    };
    let memory = Bound::new(py, BatchMemory { data })?;
    let bytes = &memory.get().data;
    let view = ArrayView1::from(&bytes[..]);
    // SAFETY: as in `images` below: `memory` is the array's base and owns the range.
    let array = unsafe { PyArray1::borrow_from_array(&view, memory.clone().into_any()) };
    let tensors = batch
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dtype.name(), t.shape.clone(), t.offset).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    let described = PyTuple::new(
        py,
        [array.into_any(), tensors.into_pyobject(py)?.into_any()],
    )?;
    Ok([
        described.into_any(),
        batch.structure.into_pyobject(py)?.into_any(),
        ids,
    ])
}

/// A copy of `data` at an address that is a multiple of `align` (at most 8).
fn aligned_copy(data: &[u8], align: usize) -> Bytes {
    debug_assert!(align <= 8);
    /// `len` bytes in a `u64` allocation, which is 8-byte aligned.
    struct Aligned(Vec<u64>, usize);
    impl AsRef<[u8]> for Aligned {
        fn as_ref(&self) -> &[u8] {
            // SAFETY: the vector holds at least `self.1` initialised bytes, and `u8` has no
            // alignment or validity requirement.
            unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.1) }
        }
    }
    let mut words = vec![0u64; data.len().div_ceil(8)];
    // SAFETY: the vector has room for `data.len()` bytes; the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), words.as_mut_ptr().cast::<u8>(), data.len())
    };
    Bytes::from_owner(Aligned(words, data.len()))
}

/// `(images, labels)`: `uint8` `[n, h, w, c]`, `int64` `[n]`.
type Images<'py> = (Bound<'py, PyArray4<u8>>, Bound<'py, PyArray1<i64>>);

/// A built-in image batch's images and labels as numpy arrays over their own memory.
fn images<'py>(py: Python<'py>, batch: &mut Batch) -> PyResult<Images<'py>> {
    let [h, w, c] = batch.shape.map(|d| d as usize);
    let n = batch.sample_ids.len();
    let data = std::mem::take(&mut batch.data);
    let memory = Bound::new(py, BatchMemory { data })?;
    let images = &memory.get().data;
    let view = ArrayView4::from_shape((n, h, w, c), &images[..]).map_err(|e| {
        crate::errors::DataError::new_err(format!(
            "a batch of {n} samples of shape [{h}, {w}, {c}] holds {} bytes: {e}",
            images.len()
        ))
    })?;
    // SAFETY: `memory` becomes the array's base object, so the pixels outlive the array, and a
    // `Bytes` never moves or frees its range while it lives. The array is writable (as
    // `torch.from_numpy` expects), and writing is sound: the range was allocated mutable (a
    // `Vec` the engine filled, or the client's receive buffer), this `Bytes` is its only handle
    // (the client's decoder split it off its buffer, which never touches bytes before its own
    // start; neither the scheduler nor the engine keeps a clone), and no Rust reference to the
    // range is used after this call.
    let array = unsafe { PyArray4::borrow_from_array(&view, memory.clone().into_any()) };
    let labels = PyArray1::from_vec(py, std::mem::take(&mut batch.labels));
    Ok((array, labels))
}
