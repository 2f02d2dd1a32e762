//! A batch handed to Python without copying its pixels.
//!
//! A batch's images arrive as `bytes::Bytes`: a slice of the gRPC message the client received,
//! or the buffer the engine wrote. When this process holds the only reference to that memory
//! (the usual case), it becomes a [`BatchMemory`] and the numpy array is a view of it with the
//! `BatchMemory` as the array's base, so the memory lives exactly as long as the array and
//! whatever views (e.g. `torch.from_numpy`) Python takes of it. Only if the memory is still shared
//! is it copied once, and `BatchMemory.copied` says so.
//!
//! Labels and sample ids are `Vec`s, which numpy adopts as they are.

use bytes::{Bytes, BytesMut};
use hetgen_pipeline::Batch;
use numpy::ndarray::ArrayView4;
use numpy::{PyArray1, PyArray4};
use pyo3::prelude::*;

/// The memory of one batch's images, kept alive by the numpy array that views it.
#[pyclass(module = "hetgen._native", frozen)]
pub struct BatchMemory {
    /// Uniquely owned, so a writable view of it is sound; never resized after construction.
    buffer: BytesMut,
    copied: bool,
}

#[pymethods]
impl BatchMemory {
    /// Whether the pixels had to be copied to reach Python (they are not, unless another owner
    /// still held the received buffer).
    #[getter]
    fn copied(&self) -> bool {
        self.copied
    }

    /// Bytes of pixel data.
    fn __len__(&self) -> usize {
        self.buffer.len()
    }
}

impl BatchMemory {
    fn new(images: Bytes) -> Self {
        match images.try_into_mut() {
            Ok(buffer) => Self {
                buffer,
                copied: false,
            },
            Err(shared) => Self {
                buffer: BytesMut::from(&shared[..]),
                copied: true,
            },
        }
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
    let memory = Bound::new(py, BatchMemory::new(batch.images))?;
    let view = ArrayView4::from_shape((n, h, w, c), &memory.get().buffer[..]).map_err(|e| {
        crate::errors::DataError::new_err(format!(
            "a batch of {n} samples of shape [{h}, {w}, {c}] holds {} bytes: {e}",
            memory.get().buffer.len()
        ))
    })?;
    // SAFETY: `memory` becomes the array's base object, so the buffer outlives the array; the
    // buffer is uniquely owned by `memory` and never reallocated (it is frozen after `new`).
    let images = unsafe { PyArray4::borrow_from_array(&view, memory.clone().into_any()) };
    let labels = PyArray1::from_vec(py, batch.labels);
    let ids = PyArray1::from_vec(py, batch.sample_ids);
    Ok((images, labels, ids))
}
