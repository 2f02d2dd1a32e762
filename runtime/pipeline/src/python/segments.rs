//! A worker's ring of shared-memory segments, written batch after batch.
//!
//! A batch written into a fresh file costs a page fault per 4 KiB on both sides of the mapping
//! (the worker's writes, then this process's first read), and the kernel zeroes every page
//! first: for a light dataset that is a tenth of a core. So each worker keeps a few segments
//! that both processes map once and reuse: a segment is lent to the worker for one batch while
//! nothing holds its previous batch, and becomes free again when the last `Bytes` of that batch
//! is dropped (sent on the network, or let go of by Python).
//!
//! The worker creates a segment when it is lent one it does not have yet, or one too small for
//! the batch (then larger, with room to spare); this process maps the file and unlinks it at
//! once, so the memory belongs to the two mappings alone and returns to the system when both
//! are gone, however either process ends. When every segment still holds a batch, the batch
//! goes to a one-off file as before, which costs its page faults and nothing else.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Segments per worker, at most; they are made as batches need them, so a worker has as many as
/// its batches in flight at their peak (the one being made, the ones queued ahead of the
/// consumer, the one the consumer holds): nine in local mode's one-worker loader, fewer per
/// worker on a data server, whose streams spread over its workers. A batch past the cap goes to
/// a one-off file.
pub const SEGMENTS: usize = 12;

/// What the worker is lent for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(super) struct Lent {
    /// Which segment.
    pub index: u32,
    /// Its size as this process mapped it; 0: the worker has not made it yet.
    pub capacity: u64,
}

/// Where the worker put a batch, as it says in its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Placed {
    /// In the one-off file named in the request (nothing was lent, or the batch is empty).
    File,
    /// In the segment it was lent.
    Segment,
    /// In a segment it made for it (the one it was lent, new or larger), in the file named in
    /// the request, of `capacity` bytes.
    NewSegment { capacity: u64 },
}

/// One segment, mapped.
struct Segment {
    map: Arc<memmap2::MmapMut>,
    /// Whether a batch in it is still held (or the worker is writing one).
    busy: Arc<AtomicBool>,
}

/// A worker's segments, as this process sees them.
pub(super) struct Ring {
    segments: Vec<Option<Segment>>,
    /// What the current request was lent, until its reply is taken.
    lent: Option<Lent>,
}

impl Ring {
    pub(super) fn new() -> Ring {
        Ring {
            segments: (0..SEGMENTS).map(|_| None).collect(),
            lent: None,
        }
    }

    /// A free segment to lend for the next batch (an existing one first), or `None` when every
    /// segment still holds a batch.
    pub(super) fn lend(&mut self) -> Option<Lent> {
        let free =
            |s: &Option<Segment>| s.as_ref().is_some_and(|s| !s.busy.load(Ordering::Acquire));
        let lent = if let Some(index) = self.segments.iter().position(free) {
            let segment = self.segments[index].as_ref().expect("found above");
            segment.busy.store(true, Ordering::Release);
            Lent {
                index: index as u32,
                capacity: segment.map.len() as u64,
            }
        } else {
            let index = self.segments.iter().position(Option::is_none)?;
            Lent {
                index: index as u32,
                capacity: 0,
            }
        };
        self.lent = Some(lent);
        Some(lent)
    }

    /// The request's batch of `bytes` bytes, placed as the worker says: `file` is the request's
    /// file in `dir` (a one-off file, or a new segment).
    pub(super) fn take(
        &mut self,
        placed: Placed,
        dir: &Path,
        file: &str,
        bytes: usize,
    ) -> Result<Bytes, String> {
        let lent = self.lent.take();
        match (placed, lent) {
            (Placed::File, _) => {
                self.give_back(lent);
                one_off(&dir.join(file), bytes)
            }
            (Placed::Segment, Some(lent)) if lent.capacity > 0 => {
                let segment = self.segments[lent.index as usize]
                    .as_ref()
                    .expect("a segment with a capacity is mapped");
                view(segment, bytes)
            }
            (Placed::NewSegment { capacity }, Some(lent)) => {
                // The segment it replaces (if any) held no batch: it was lent.
                self.segments[lent.index as usize] = None;
                let path = dir.join(file);
                let map = map_unlinked(&path, capacity as usize, Mapping::Shared)?;
                let segment = Segment {
                    map: Arc::new(map),
                    busy: Arc::new(AtomicBool::new(true)),
                };
                let bytes = view(&segment, bytes);
                self.segments[lent.index as usize] = Some(segment);
                bytes
            }
            (placed, lent) => {
                self.give_back(lent);
                Err(format!(
                    "it placed a batch {placed:?} where it was lent {lent:?}"
                ))
            }
        }
    }

    /// The current request's segment is free again: the request failed, or did not use it.
    pub(super) fn give_back(&mut self, lent: Option<Lent>) {
        if let Some(segment) = lent
            .or(self.lent.take())
            .and_then(|l| self.segments[l.index as usize].as_ref())
        {
            segment.busy.store(false, Ordering::Release);
        }
    }
}

/// The first `bytes` bytes of `segment` as a batch's bytes, which free the segment when the
/// last of them is dropped (at once when there is no batch to hold).
fn view(segment: &Segment, bytes: usize) -> Result<Bytes, String> {
    if bytes > segment.map.len() {
        segment.busy.store(false, Ordering::Release);
        return Err(format!(
            "it wrote a {bytes}-byte batch into a {}-byte segment",
            segment.map.len()
        ));
    }
    if bytes == 0 {
        segment.busy.store(false, Ordering::Release);
        return Ok(Bytes::new());
    }
    Ok(Bytes::from_owner(View {
        map: segment.map.clone(),
        len: bytes,
        busy: segment.busy.clone(),
    }))
}

/// A batch's bytes in a segment; dropping the last `Bytes` of it frees the segment.
struct View {
    map: Arc<memmap2::MmapMut>,
    len: usize,
    busy: Arc<AtomicBool>,
}

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Release);
    }
}

/// How a file of the worker's is mapped.
#[derive(Clone, Copy)]
enum Mapping {
    /// A segment: shared, since the worker writes each of its batches there and this process
    /// must see them.
    Shared,
    /// A one-off batch: private, so a consumer that writes into the batch (numpy arrays over it
    /// are writable, as `torch.from_numpy` expects) gets its own copy of that page.
    Private,
}

/// The worker's file at `path`, which must hold `len` bytes, mapped and unlinked at once: its
/// pages belong to the mappings alone from here, and return to the system when they are gone.
fn map_unlinked(path: &Path, len: usize, mapping: Mapping) -> Result<memmap2::MmapMut, String> {
    let shared = matches!(mapping, Mapping::Shared);
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(shared)
        .open(path);
    let _ = std::fs::remove_file(path);
    let opened = opened.map_err(|e| format!("{}: {e}", path.display()))?;
    let options = memmap2::MmapOptions::new();
    // SAFETY: the file is this worker's and already unlinked, so nothing else can open it, and
    // it is never truncated. A one-off file was written in full before the worker answered and
    // is not written again; a segment is written only while it is lent, that is while no
    // `Bytes` of it is alive.
    let map = unsafe {
        if shared {
            options.map_mut(&opened)
        } else {
            options.map_copy(&opened)
        }
    }
    .map_err(|e| format!("cannot map {}: {e}", path.display()))?;
    if map.len() != len {
        return Err(format!(
            "{} holds {} bytes, not {len}",
            path.display(),
            map.len()
        ));
    }
    Ok(map)
}

/// A batch the worker wrote to the one-off file `path`: its pages are the batch's bytes from
/// here to the socket.
fn one_off(path: &Path, bytes: usize) -> Result<Bytes, String> {
    if bytes == 0 {
        return Ok(Bytes::new());
    }
    map_unlinked(path, bytes, Mapping::Private).map(Bytes::from_owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment file of `capacity` bytes filled with `byte`, as the worker makes one.
    fn write_segment(dir: &Path, file: &str, capacity: usize, byte: u8) {
        std::fs::write(dir.join(file), vec![byte; capacity]).unwrap();
    }

    #[test]
    fn a_segment_is_lent_again_only_once_its_batch_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::new();
        let first = ring.lend().unwrap();
        assert_eq!(
            first,
            Lent {
                index: 0,
                capacity: 0
            }
        );
        write_segment(dir.path(), "a", 4096, 7);
        let batch = ring
            .take(Placed::NewSegment { capacity: 4096 }, dir.path(), "a", 100)
            .unwrap();
        assert_eq!(&batch[..], &[7u8; 100][..]);
        // Unlinked at once: nothing is left if either process dies.
        assert!(!dir.path().join("a").exists());
        // Segment 0 holds the batch: the next is lent a new one.
        let second = ring.lend().unwrap();
        assert_eq!(second.index, 1);
        ring.give_back(None);
        let slice = batch.slice(10..20);
        drop(batch);
        assert_eq!(
            ring.lend().unwrap().index,
            1,
            "a slice still holds segment 0"
        );
        ring.give_back(None);
        drop(slice);
        assert_eq!(
            ring.lend().unwrap(),
            Lent {
                index: 0,
                capacity: 4096
            }
        );
        let again = ring.take(Placed::Segment, dir.path(), "b", 4096).unwrap();
        assert_eq!(again.len(), 4096);
    }

    #[test]
    fn with_every_segment_held_batches_go_to_one_off_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::new();
        let held: Vec<Bytes> = (0..SEGMENTS)
            .map(|i| {
                let file = format!("s{i}");
                let lent = ring.lend().unwrap();
                assert_eq!(lent.index as usize, i);
                write_segment(dir.path(), &file, 64, i as u8);
                ring.take(Placed::NewSegment { capacity: 64 }, dir.path(), &file, 64)
                    .unwrap()
            })
            .collect();
        assert_eq!(ring.lend(), None);
        std::fs::write(dir.path().join("x"), [9u8; 10]).unwrap();
        let file = ring.take(Placed::File, dir.path(), "x", 10).unwrap();
        assert_eq!(&file[..], &[9u8; 10][..]);
        assert!(!dir.path().join("x").exists());
        for (i, batch) in held.iter().enumerate() {
            assert!(batch.iter().all(|b| *b == i as u8));
        }
    }

    #[test]
    fn a_reply_that_does_not_match_the_loan_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::new();
        ring.lend().unwrap();
        // The worker cannot write into a segment it has not made.
        assert!(ring.take(Placed::Segment, dir.path(), "a", 8).is_err());
        // Nor claim more than the segment holds.
        ring.lend().unwrap();
        write_segment(dir.path(), "b", 64, 0);
        assert!(
            ring.take(Placed::NewSegment { capacity: 64 }, dir.path(), "b", 65)
                .is_err()
        );
        // A failed loan frees its segment.
        let lent = ring.lend().unwrap();
        assert_eq!(lent.index, 0);
    }
}
