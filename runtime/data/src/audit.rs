//! `HETGEN_AUDIT_FILE`: a record of every sample the trainer consumed, one `epoch sample_id`
//! line each, so tests (and users auditing a run) can prove exactly-once delivery from outside.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use hetgen_pipeline::{Batch, BatchStream, BoxError, Position};

/// The variable naming the audit file.
pub use hetgen_env::AUDIT_FILE_VAR;

/// An open audit file: front ends that hand batches on themselves (the Python package) record
/// each batch when they yield it.
pub struct AuditFile {
    out: BufWriter<File>,
}

impl AuditFile {
    /// Append to `path` (created if needed; several processes may share it, each line is
    /// written whole).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            out: BufWriter::new(file),
        })
    }

    /// The file named by `HETGEN_AUDIT_FILE`, when set.
    pub fn from_env() -> std::io::Result<Option<Self>> {
        std::env::var_os(AUDIT_FILE_VAR)
            .map(|path| Self::open(Path::new(&path)))
            .transpose()
    }

    /// Append one `epoch sample_id` line per sample of `batch`.
    pub fn record(&mut self, batch: &Batch) -> std::io::Result<()> {
        let mut lines = String::with_capacity(batch.len() * 12);
        for id in &batch.sample_ids {
            lines.push_str(&format!("{} {id}\n", batch.epoch));
        }
        // One write per batch, flushed at once: a killed trainer leaves whole lines only.
        self.out
            .write_all(lines.as_bytes())
            .and_then(|()| self.out.flush())
    }
}

/// A [`BatchStream`] that appends every yielded sample to an audit file.
pub struct Audited<S> {
    inner: S,
    file: AuditFile,
}

/// Wrap `stream` when `HETGEN_AUDIT_FILE` is set.
pub fn audit_from_env(stream: Box<dyn BatchStream>) -> std::io::Result<Box<dyn BatchStream>> {
    Ok(match AuditFile::from_env()? {
        Some(file) => Box::new(Audited {
            inner: stream,
            file,
        }),
        None => stream,
    })
}

impl<S: BatchStream> BatchStream for Audited<S> {
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>> {
        let next = self.inner.next_batch();
        if let Some(Ok(batch)) = &next
            && let Err(e) = self.file.record(batch)
        {
            return Some(Err(format!("cannot append to the audit file: {e}").into()));
        }
        next
    }

    fn position(&self) -> Position {
        self.inner.position()
    }
}
