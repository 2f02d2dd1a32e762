//! The package's exceptions, named for what the user can do about them, raised with the Rust
//! error's message intact.

use hetgen_data::auth::TokenError;
use hetgen_data::client::ClientError;
use hetgen_data::failure::SampleFailure;
use hetgen_env::VariableError;
use hetgen_pipeline::{BoxError, PipelineError};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    hetgen,
    HetgenError,
    PyException,
    "Base class of every error hetgen raises."
);
create_exception!(
    hetgen,
    SpecError,
    HetgenError,
    "The spec or job.json is invalid; the message names the file, line and column."
);
create_exception!(
    hetgen,
    ConfigurationError,
    HetgenError,
    "The job's environment or the loader's arguments are unusable (no token, no data hosts, \
     a bad variable)."
);
create_exception!(
    hetgen,
    ConnectError,
    HetgenError,
    "A data host could not be reached within the connect timeout."
);
create_exception!(
    hetgen,
    HandshakeError,
    HetgenError,
    "A data server refused this client (wrong token, another job, another protocol version)."
);
create_exception!(
    hetgen,
    DataError,
    HetgenError,
    "Batches could not be made: a sample failed in the pipeline, or every data server failed. \
     When a sample failed, `sample` is its id, `stage` where it failed (`__getitem__`, \
     `collate`, a stage), `traceback` the user's frames, and `host` the data host (None when \
     this host's own pipeline made it); each is None otherwise."
);

/// The attributes every `DataError` has, None unless a sample failed.
const DATA_ERROR_FIELDS: [&str; 4] = ["sample", "stage", "traceback", "host"];

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("HetgenError", py.get_type::<HetgenError>())?;
    m.add("SpecError", py.get_type::<SpecError>())?;
    m.add("ConfigurationError", py.get_type::<ConfigurationError>())?;
    m.add("ConnectError", py.get_type::<ConnectError>())?;
    m.add("HandshakeError", py.get_type::<HandshakeError>())?;
    let data_error = py.get_type::<DataError>();
    for field in DATA_ERROR_FIELDS {
        data_error.setattr(field, py.None())?;
    }
    m.add("DataError", data_error)?;
    Ok(())
}

/// A `DataError` carrying what is known of the failed sample.
fn data_error(message: String, host: Option<&str>, sample: Option<&SampleFailure>) -> PyErr {
    let err = DataError::new_err(message);
    let Some(failure) = sample else {
        return err;
    };
    Python::attach(|py| {
        let value = err.value(py);
        // Setting an attribute on a fresh exception instance cannot fail.
        let _ = value.setattr("sample", failure.sample);
        let _ = value.setattr("stage", failure.stage.as_str());
        let _ = value.setattr("traceback", failure.why.as_str());
        let _ = value.setattr("host", host);
    });
    err
}

/// The exception for an error of the client, the engine or the environment.
pub(crate) fn to_py(error: &(dyn std::error::Error + 'static)) -> PyErr {
    let message = error.to_string();
    if let Some(e) = error.downcast_ref::<ClientError>() {
        return match e {
            ClientError::Unreachable { .. } | ClientError::StillBuilding { .. } => {
                ConnectError::new_err(message)
            }
            ClientError::Handshake { .. } | ClientError::Mismatch { .. } => {
                HandshakeError::new_err(message)
            }
            ClientError::Token(_) | ClientError::NoHosts | ClientError::Runtime(_) => {
                ConfigurationError::new_err(message)
            }
            ClientError::Data { host, sample, .. } => {
                data_error(message, Some(host), sample.as_ref())
            }
            ClientError::Local { sample, .. } => data_error(message, None, sample.as_ref()),
            ClientError::AllServersFailed(_) => DataError::new_err(message),
        };
    }
    if error.is::<TokenError>() || error.is::<VariableError>() {
        return ConfigurationError::new_err(message);
    }
    if let Some(e) = error.downcast_ref::<hetgen_env::EnvError>() {
        return match e {
            hetgen_env::EnvError::Malformed { .. } => SpecError::new_err(message),
            _ => ConfigurationError::new_err(message),
        };
    }
    if let Some(e) = error.downcast_ref::<PipelineError>() {
        return data_error(message, None, SampleFailure::of(e).as_ref());
    }
    HetgenError::new_err(message)
}

/// [`to_py`] for a boxed error; a Python exception that was boxed on its way through Rust
/// (a `KeyboardInterrupt` while connecting, say) comes back as it was raised.
pub(crate) fn boxed(error: BoxError) -> PyErr {
    match error.downcast::<PyErr>() {
        Ok(raised) => *raised,
        Err(error) => to_py(&*error),
    }
}
