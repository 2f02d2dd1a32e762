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
use hetgen_pipeline::{Batch, Contents, DType, Tensor};
use numpy::ndarray::{ArrayView1, ArrayView4};
use numpy::{PyArray1, PyArray4};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

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

/// A batch of hetgen's built-in images, as numpy arrays over their own memory: `images`
/// `uint8` `[n, h, w, c]`, `labels` `int64` `[n]`, `sample_ids` `uint64` `[n]`, and its place in
/// the epoch plan. `hetgen.Loader` hands it on as a `hetgen.Batch`.
#[pyclass(module = "hetgen._native", frozen, get_all)]
pub struct ImageBatch {
    images: Py<PyArray4<u8>>,
    labels: Py<PyArray1<i64>>,
    sample_ids: Py<PyArray1<u64>>,
    epoch: u32,
    shard: u32,
    index: u32,
}

/// A Python dataset's batch: each tensor a numpy array of its own dtype and shape over the
/// batch's one buffer (no copy), in the order the structure's leaves number them; `structure`
/// the JSON of how they nest (see the data service's .proto), which `hetgen.Loader` rebuilds.
/// `bfloat16`, which numpy lacks, arrives as the structured dtype `[("bfloat16", "<i2")]`
/// (its raw 16 bits), which `hetgen.torch` turns into `torch.bfloat16`.
#[pyclass(module = "hetgen._native", frozen, get_all)]
pub struct TensorBatch {
    arrays: Vec<Py<PyAny>>,
    names: Vec<String>,
    structure: String,
    sample_ids: Py<PyArray1<u64>>,
    epoch: u32,
    shard: u32,
    index: u32,
}

/// `batch` as Python gets it: an [`ImageBatch`] or a [`TensorBatch`], as its contents are.
pub fn to_python(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyAny>> {
    let Batch {
        epoch,
        shard,
        index,
        sample_ids,
        data,
        contents,
    } = batch;
    let n = sample_ids.len();
    let sample_ids = PyArray1::from_vec(py, sample_ids).unbind();
    match contents {
        Contents::Images { shape, labels } => {
            let batch = ImageBatch {
                images: images(py, data, n, shape)?.unbind(),
                labels: PyArray1::from_vec(py, labels).unbind(),
                sample_ids,
                epoch,
                shard,
                index,
            };
            Ok(Bound::new(py, batch)?.into_any())
        }
        Contents::Tensors { tensors, structure } => {
            let batch = TensorBatch {
                arrays: arrays(py, data, &tensors)?,
                names: tensors.into_iter().map(|t| t.name).collect(),
                structure,
                sample_ids,
                epoch,
                shard,
                index,
            };
            Ok(Bound::new(py, batch)?.into_any())
        }
    }
}

/// A numpy array of each tensor over `data`.
fn arrays(py: Python<'_>, data: Bytes, tensors: &[Tensor]) -> PyResult<Vec<Py<PyAny>>> {
    // torch's kernels expect elements at addresses aligned to their size; numpy views do not
    // care. A gRPC receive buffer puts the batch wherever the message happened to land, so a
    // batch whose tensors would be misaligned is moved once to an aligned buffer.
    let widest = tensors.iter().map(|t| t.dtype.size()).max().unwrap_or(1);
    let misaligned = tensors
        .iter()
        .any(|t| !(data.as_ptr() as usize + t.offset as usize).is_multiple_of(t.dtype.size()));
    let data = if misaligned {
        aligned_copy(&data, widest)
    } else {
        data
    };
    let memory = Bound::new(py, BatchMemory { data })?;
    let bytes = &memory.get().data;
    let view = ArrayView1::from(&bytes[..]);
    // SAFETY: as in `images` below: `memory` is the array's base and owns the range.
    let buffer = unsafe { PyArray1::borrow_from_array(&view, memory.clone().into_any()) };
    let numpy = Numpy::get(py)?;
    let ndarray = numpy.ndarray.bind(py);
    tensors
        .iter()
        .map(|t| {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("dtype", numpy.dtype(py, t.dtype))?;
            kwargs.set_item("buffer", &buffer)?;
            kwargs.set_item("offset", t.offset)?;
            // The tensors were checked to lie within the buffer when the batch was taken in.
            Ok(ndarray.call((t.shape.clone(),), Some(&kwargs))?.unbind())
        })
        .collect()
}

/// numpy's `ndarray`, and the numpy dtype each [`DType`] is viewed as, made once per process
/// rather than for every tensor of every batch.
struct Numpy {
    ndarray: Py<PyAny>,
    /// By [`DType::ALL`]'s order: [`DType::name`]'s, but `bfloat16`, which numpy lacks, as its
    /// raw 16 bits in a one-field structured dtype.
    dtypes: Vec<Py<PyAny>>,
}

impl Numpy {
    fn get(py: Python<'_>) -> PyResult<&'static Numpy> {
        static NUMPY: PyOnceLock<Numpy> = PyOnceLock::new();
        NUMPY.get_or_try_init(py, || {
            let numpy = py.import("numpy")?;
            let make = numpy.getattr("dtype")?;
            let dtypes = DType::ALL
                .iter()
                .map(|&dtype| {
                    let made = match dtype {
                        DType::Bf16 => make.call1((vec![(dtype.name(), "<i2")],)),
                        _ => make.call1((dtype.name(),)),
                    };
                    made.map(Bound::unbind)
                })
                .collect::<PyResult<_>>()?;
            Ok(Numpy {
                ndarray: numpy.getattr("ndarray")?.unbind(),
                dtypes,
            })
        })
    }

    fn dtype<'py>(&self, py: Python<'py>, dtype: DType) -> &Bound<'py, PyAny> {
        let i = DType::ALL
            .iter()
            .position(|d| *d == dtype)
            .expect("DType::ALL has every dtype");
        self.dtypes[i].bind(py)
    }
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

/// A built-in image batch's images, `uint8` `[n, h, w, c]`, over their own memory.
fn images<'py>(
    py: Python<'py>,
    data: Bytes,
    n: usize,
    shape: [u32; 3],
) -> PyResult<Bound<'py, PyArray4<u8>>> {
    let [h, w, c] = shape.map(|d| d as usize);
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
    Ok(unsafe { PyArray4::borrow_from_array(&view, memory.clone().into_any()) })
}
