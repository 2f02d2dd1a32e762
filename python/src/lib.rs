//! `hetgen._native`: the Rust half of the `hetgen` Python package.
//!
//! The package's public names live in Python (`hetgen/__init__.py`); this module holds what must
//! be Rust: [`loader::NativeLoader`], which streams batches from the job's data servers (the same
//! client the built-in trainer uses) or runs the pipeline engine in-process, and hands each batch
//! to Python as numpy arrays over the batch's own memory ([`batch`]); it finds its job with
//! [`job`] and reaches the data servers with [`connect`]; its progress line is [`step`]'s. Errors become the package's exceptions
//! ([`errors`]); every wait releases the GIL and answers Ctrl-C ([`wait`]). [`image`] is the
//! pipeline's image operations as functions a user's own dataset calls (`hetgen.image`).
//! [`launch`] is hetgen's
//! role launcher itself, for the package's entry points.

mod batch;
mod connect;
mod errors;
mod image;
mod job;
mod launch;
mod loader;
mod step;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loader::NativeLoader>()?;
    m.add_class::<batch::BatchMemory>()?;
    m.add_class::<batch::ImageBatch>()?;
    m.add_class::<batch::TensorBatch>()?;
    m.add_function(wrap_pyfunction!(launch::launch, m)?)?;
    m.add_function(wrap_pyfunction!(step::step_line, m)?)?;
    errors::register(m)?;
    image::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PROTOCOL_VERSION", hetgen_data::PROTOCOL_VERSION)?;
    // Set by `hetgen profile --trainer`, read by `hetgen.Loader` (one spelling, hetgen_env's).
    m.add("REPLAY_VAR", hetgen_env::REPLAY_VAR)?;
    m.add("REPLAY_STEPS_VAR", hetgen_env::REPLAY_STEPS_VAR)?;
    Ok(())
}
