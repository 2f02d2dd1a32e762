//! `hetgen._native.launch`: hetgen's role launcher, the same Rust code as the launcher binary of
//! hetgen's own images, for the `hetgen` package's entry points (`python -m hetgen train …`,
//! the `hetgen-launcher` script, and the `hetgen_launcher.py` that runs on AWS's PyTorch
//! image).

use pyo3::prelude::*;

/// Runs this instance's role with `argv` (without a program name, e.g. `["train", "--",
/// "--epochs", "3"]`) and returns its exit status. The role runs for the whole job, so the GIL
/// is released; SIGTERM and SIGINT are the role's own to handle with handlers of its own (a data
/// server drains and stops, a trainer host passes the first to torchrun), which is why the
/// Python side installs none: on AWS's image they arrive ignored (see the container's start,
/// `hetgen_spec::framework::CONTAINER_ENTRYPOINT`), and a Python handler would only run when
/// the role returns.
#[pyfunction]
pub fn launch(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| hetgen_runtime::launch_with(argv, hetgen_runtime::StageRegistry::builtin()))
}
