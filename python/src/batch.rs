//! A batch handed to Python without copying its pixels.
//!
//! A batch's images arrive as `bytes::Bytes`: a slice of the gRPC message the client received,
//! or the buffer the engine wrote. The `Bytes` becomes a [`BatchMemory`] and the numpy array is
//! a view of it with the `BatchMemory` as the array's base, so the memory lives exactly as long
//! as the array and whatever views (e.g. `torch.from_numpy`) Python takes of it.
//!
//! Labels and sample ids are `Vec`s, which numpy adopts as they are.

use bytes::Bytes;
use hetgen_pipeline::Batch;
use numpy::ndarray::ArrayView4;
use numpy::{PyArray1, PyArray4};
use pyo3::prelude::*;

/// The memory of one batch's images, kept alive by the numpy array that views it.
#[pyclass(module = "hetgen._native", frozen)]
pub struct BatchMemory {
    images: Bytes,
}

#[pymethods]
impl BatchMemory {
    /// Bytes of pixel data.
    fn __len__(&self) -> usize {
        self.images.len()
    }
}

/// `(images, labels, sample_ids)`: `uint8` `[n, h, w, c]`, `int64` `[n]`, `uint64` `[n]`.
pub type Arrays<'py> = (
    Bound<'py, PyArray4<u8>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<u64>>,
);

/// The batch as numpy arrays over its own memory.
pub fn to_arrays<'py>(py: Python<'py>, batch: Batch) -> PyResult<Arrays<'py>> {
    let [h, w, c] = batch.shape.map(|d| d as usize);
    let n = batch.sample_ids.len();
    let memory = Bound::new(
        py,
        BatchMemory {
            images: batch.images,
        },
    )?;
    let images = &memory.get().images;
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
    let labels = PyArray1::from_vec(py, batch.labels);
    let ids = PyArray1::from_vec(py, batch.sample_ids);
    Ok((array, labels, ids))
}
