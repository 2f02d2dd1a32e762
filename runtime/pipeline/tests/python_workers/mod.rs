//! Real Python workers for the tests: a module of the test's own in a fresh code and data
//! folder, `python3` on `PATH` (with numpy, as `make test` puts the torch venv first).

use std::collections::BTreeMap;

use hetgen_pipeline::python::{PythonSetup, Workers};
use hetgen_pipeline::{Batch, Batches, PipelineError, ShardWork};
use hetgen_spec::model::PythonRef;

/// Workers over `source` (saved as `file`), built with its `factory` and `collate`, in a fresh
/// code and data folder.
pub fn workers(
    file: &str,
    source: &str,
    factory: &str,
    collate: Option<&str>,
    threads: usize,
) -> (tempfile::TempDir, Result<Workers, PipelineError>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(file), source).unwrap();
    let setup = PythonSetup {
        python: "python3".into(),
        code_dir: dir.path().to_owned(),
        hyperparameters: BTreeMap::new(),
    };
    let reference = |name: &str| PythonRef {
        file: file.into(),
        name: name.into(),
    };
    let started = Workers::start(
        &setup,
        &reference(factory),
        collate.map(reference).as_ref(),
        dir.path(),
        5,
        Some(threads),
    );
    (dir, started)
}

/// The batches of `ids` in epoch `epoch`, in batches of `batch_size`, until `emit` says stop.
pub fn shard(
    workers: &dyn Batches,
    epoch: u32,
    ids: &[u64],
    batch_size: u32,
    emit: &mut dyn FnMut(Batch) -> bool,
) -> Result<(), PipelineError> {
    workers.run_shard(
        ShardWork {
            epoch,
            shard: 0,
            ids,
            batch_size,
        },
        emit,
    )
}

/// Every batch of [`shard`].
pub fn all(
    workers: &dyn Batches,
    epoch: u32,
    ids: &[u64],
    batch_size: u32,
) -> Result<Vec<Batch>, PipelineError> {
    let mut out = Vec::new();
    shard(workers, epoch, ids, batch_size, &mut |b| {
        out.push(b);
        true
    })?;
    Ok(out)
}
