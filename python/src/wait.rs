//! Waiting without holding the GIL, and without ignoring Ctrl-C.
//!
//! Rust blocks (a channel receive, a connect with retries) cannot be interrupted by Python's
//! signal handler. So every long wait sleeps on a channel in slices of [`SLICE`] with the GIL
//! released, and between slices asks Python whether a signal arrived: Ctrl-C raises
//! `KeyboardInterrupt` within a tenth of a second, and nothing spins.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use pyo3::prelude::*;

/// Longest a wait goes without checking for signals.
pub const SLICE: Duration = Duration::from_millis(100);

/// The next message of `rx`, `None` when its sender is gone; raises on a pending signal. (A
/// `Receiver` is not `Sync`; the uncontended mutex lets the wait leave the GIL behind.)
pub fn recv<T: Send>(py: Python<'_>, rx: &Mutex<Receiver<T>>) -> PyResult<Option<T>> {
    loop {
        let next = py.detach(|| {
            rx.lock()
                .unwrap_or_else(|e| e.into_inner())
                .recv_timeout(SLICE)
        });
        match next {
            Ok(item) => return Ok(Some(item)),
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
        }
    }
}

/// Run `work` on its own thread and wait for its result. On Ctrl-C the thread is left to
/// finish on its own (its result is dropped) and `KeyboardInterrupt` is raised at once.
pub fn run<T, F>(py: Python<'_>, name: &str, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| {
            crate::errors::HetgenError::new_err(format!("cannot start a thread for {name}: {e}"))
        })?;
    match recv(py, &Mutex::new(rx))? {
        Some(result) => Ok(result),
        None => Err(crate::errors::HetgenError::new_err(format!(
            "{name} ended without a result (it panicked; this is a bug in hetgen)"
        ))),
    }
}
