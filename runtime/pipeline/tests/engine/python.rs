//! A user's Python dataset made by real worker processes (`python3` on `PATH` with numpy, as
//! `make test` puts the torch venv first): tensors and structure, the randomness rule, and every
//! way the user's code or a worker can fail.

use hetgen_pipeline::python::{SEGMENTS, Workers};
use hetgen_pipeline::{Batch, Batches, Contents, DType, PipelineError, Tensor};

use crate::python_workers::{self, all, shard};

/// Fields of three dtypes and shapes, from the sample id alone, plus one drawn from numpy's
/// global generator (seeded by the worker per sample).
const FIELDS: &str = r#"
import os, signal
import numpy as np

class Fields:
    def __init__(self, path):
        self.path = path
    def __len__(self):
        return 40
    def __getitem__(self, i):
        marker = os.path.join(self.path, f"die-{i}")
        if os.path.exists(os.path.join(self.path, f"always-{i}")) or (
            os.path.exists(marker) and not os.path.exists(marker + ".done")
        ):
            open(marker + ".done", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if i == 13 and os.path.exists(os.path.join(self.path, "raise")):
            raise ValueError(f"cannot read sample {i}")
        image = np.full((2, 3), i, dtype=np.uint8)
        boxes = np.arange(4, dtype=np.float32) + i / 4
        return {"image": image, "target": (boxes, i), "noise": np.random.rand(2)}

def make(path, hyperparameters):
    return Fields(path)

def ragged(path, hyperparameters):
    class Ragged(Fields):
        def __getitem__(self, i):
            return np.zeros(i % 3 + 1, dtype=np.float32)
    return Ragged(path)

def sum_collate(samples):
    return np.stack([s["image"] for s in samples]).sum(axis=0, dtype=np.int64)
"#;

/// Workers over `FIELDS` (its `factory`), with `collate`, in a fresh code and data folder.
fn workers(
    factory: &str,
    collate: Option<&str>,
    threads: usize,
) -> (tempfile::TempDir, Result<Workers, PipelineError>) {
    python_workers::workers("fields.py", FIELDS, factory, collate, threads)
}

/// The tensors of a Python dataset's batch, and how they nest.
fn tensors(batch: &Batch) -> (&[Tensor], &str) {
    match &batch.contents {
        Contents::Tensors { tensors, structure } => (tensors, structure),
        Contents::Images { .. } => panic!("a batch of images where tensors were due: {batch:?}"),
    }
}

/// The bytes of tensor `name` of `batch`.
fn field<'a>(batch: &'a Batch, name: &str) -> (&'a [u8], DType, Vec<u64>) {
    let tensors = tensors(batch).0;
    let t = tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor `{name}` in {tensors:?}"));
    let start = t.offset as usize;
    let end = start + t.bytes().unwrap() as usize;
    (&batch.data[start..end], t.dtype, t.shape.clone())
}

#[test]
fn a_dict_of_tensors_arrives_with_its_dtypes_shapes_and_structure() {
    let (_dir, workers) = workers("make", None, 2);
    let workers = workers.unwrap();
    assert_eq!(workers.samples_per_epoch(), 40);
    let batches = all(&workers, 0, &[3, 9, 27, 1, 0], 2).unwrap();
    assert_eq!(batches.len(), 3);
    let first = &batches[0];
    assert_eq!(first.sample_ids, [3, 9]);
    assert_eq!(
        tensors(first).1,
        r#"{"dict": [["image", 0], ["target", {"tuple": [1, 2]}], ["noise", 3]]}"#
    );
    let (image, dtype, shape) = field(first, "image");
    assert_eq!((dtype, shape), (DType::U8, vec![2, 2, 3]));
    assert_eq!(image, [[3u8; 6], [9u8; 6]].concat());
    let (boxes, dtype, shape) = field(first, "target.0");
    assert_eq!((dtype, shape), (DType::F32, vec![2, 4]));
    let want: Vec<u8> = [3.0f32, 9.0]
        .iter()
        .flat_map(|i| (0..4).map(move |k| k as f32 + i / 4.0))
        .flat_map(f32::to_le_bytes)
        .collect();
    assert_eq!(boxes, want);
    let (ids, dtype, shape) = field(first, "target.1");
    assert_eq!((dtype, shape), (DType::I64, vec![2]));
    assert_eq!(ids, [3i64.to_le_bytes(), 9i64.to_le_bytes()].concat());
    assert_eq!(field(first, "noise").1, DType::F64);
    // The last batch is short.
    assert_eq!(batches[2].sample_ids, [0]);
    assert_eq!(field(&batches[2], "image").2, vec![1, 2, 3]);
}

/// Shared-memory segments the worker `pid` keeps mapped: files of a pool's folder, unlinked.
fn segments_mapped(pid: u32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut files: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("/hetgen-") && l.ends_with("(deleted)"))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    files.dedup();
    files.len()
}

#[test]
fn a_worker_reuses_its_shared_memory_and_never_overwrites_a_held_batch() {
    let (_dir, workers) = workers("make", None, 1);
    let workers = workers.unwrap();
    let image = |batch: &Batch| field(batch, "image").0.to_vec();
    let want = |batch: &Batch| -> Vec<u8> {
        batch
            .sample_ids
            .iter()
            .flat_map(|&id| [id as u8; 6])
            .collect()
    };
    // Every batch of an epoch held at once: more than the worker has segments, so the rest go
    // to files of their own, and none is written over while it is held.
    let ids: Vec<u64> = (0..40).collect();
    let held = all(&workers, 0, &ids, 2).unwrap();
    assert_eq!(held.len(), 20);
    for batch in &held {
        assert_eq!(image(batch), want(batch));
    }
    let pid = workers.pids()[0];
    let mapped = segments_mapped(pid);
    assert!((1..=SEGMENTS).contains(&mapped), "{mapped} segments");
    drop(held);
    // Batches let go of as they come: the same segments again, grown for larger batches.
    for (epoch, batch_size) in [(1, 2), (2, 8), (3, 3)] {
        shard(&workers, epoch, &ids, batch_size, &mut |batch| {
            assert_eq!(image(&batch), want(&batch));
            true
        })
        .unwrap();
        let now = segments_mapped(pid);
        assert!(
            (1..=SEGMENTS).contains(&now),
            "{now} segments after epoch {epoch}"
        );
    }
}

#[test]
fn a_sample_is_the_same_whichever_worker_batch_or_process_makes_it() {
    let (_dir, one) = workers("make", None, 1);
    let (_dir2, two) = workers("make", None, 3);
    let (one, two) = (one.unwrap(), two.unwrap());
    let noise = |b: &Batch, k: usize| field(b, "noise").0[k * 16..(k + 1) * 16].to_vec();
    let alone = all(&one, 2, &[17], 1).unwrap();
    let among = all(&two, 2, &[4, 5, 17, 6, 7, 8], 2).unwrap();
    assert_eq!(noise(&alone[0], 0), noise(&among[1], 0));
    // Another epoch draws anew; other samples differ.
    let later = all(&one, 3, &[17], 1).unwrap();
    assert_ne!(noise(&alone[0], 0), noise(&later[0], 0));
    assert_ne!(noise(&among[1], 0), noise(&among[1], 1));
}

#[test]
fn the_datasets_exception_names_the_sample_and_carries_the_traceback() {
    let (dir, workers) = workers("make", None, 2);
    let workers = workers.unwrap();
    std::fs::write(dir.path().join("raise"), "").unwrap();
    let error = all(&workers, 0, &[12, 13, 14], 3).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::Sample { sample: 13, .. }),
        "{text}"
    );
    assert!(text.contains("ValueError: cannot read sample 13"), "{text}");
    assert!(text.contains("fields.py\", line"), "{text}");
    assert!(text.contains("in __getitem__"), "{text}");
    assert!(
        !text.contains("worker.py"),
        "hetgen's own frames are left out: {text}"
    );
}

#[test]
fn a_killed_worker_is_replaced_and_its_batch_made_again() {
    let (dir, workers) = workers("make", None, 2);
    let workers = workers.unwrap();
    std::fs::write(dir.path().join("die-21"), "").unwrap();
    let batches = all(&workers, 0, &[20, 21, 22, 23], 2).unwrap();
    let ids: Vec<u64> = batches.iter().flat_map(|b| b.sample_ids.clone()).collect();
    assert_eq!(ids, [20, 21, 22, 23]);
    assert!(dir.path().join("die-21.done").exists());
    // The pool goes on with the new worker.
    assert_eq!(all(&workers, 0, &[21, 30], 2).unwrap().len(), 1);
}

#[test]
fn a_batch_that_kills_every_worker_fails_after_a_bounded_number_of_deaths() {
    let (dir, workers) = workers("make", None, 1);
    let workers = workers.unwrap();
    std::fs::write(dir.path().join("always-7"), "").unwrap();
    let error = all(&workers, 0, &[6, 7], 2).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::WorkerDied { sample: 7, .. }),
        "{text}"
    );
    assert!(
        text.starts_with("sample 7 kills the Python worker"),
        "{text}"
    );
    assert!(text.contains("SIGKILL"), "{text}");
}

#[test]
fn a_module_that_does_not_import_fails_the_start_with_its_traceback() {
    let (_dir, started) = python_workers::workers(
        "fields.py",
        "import numpy\nraise ImportError('no module named cv9')\n",
        "make",
        None,
        2,
    );
    let error = started.err().expect("the start fails");
    let text = error.to_string();
    assert!(matches!(error, PipelineError::PythonSetup { .. }), "{text}");
    assert!(text.contains("fields.py:make"), "{text}");
    assert!(text.contains("ImportError: no module named cv9"), "{text}");
    assert!(text.contains("line 2"), "{text}");
}

#[test]
fn samples_that_do_not_stack_name_the_field_the_shapes_and_the_samples() {
    // Sample 0 (the start's probe) has one element; 1 has two.
    let (_dir, workers) = workers("ragged", None, 1);
    let error = all(&workers.unwrap(), 0, &[3, 4], 2)
        .unwrap_err()
        .to_string();
    assert!(error.contains("field `sample` does not stack"), "{error}");
    assert!(
        error.contains("sample 3 has shape [1] (float32), sample 4 has [2] (float32)"),
        "{error}"
    );
    assert!(error.contains("collate"), "{error}");
}

#[test]
fn a_collate_function_makes_the_batch() {
    let (_dir, workers) = workers("make", Some("sum_collate"), 1);
    let batches = all(&workers.unwrap(), 0, &[1, 2, 3], 3).unwrap();
    let (sum, dtype, shape) = field(&batches[0], "sample");
    assert_eq!((dtype, shape), (DType::I64, vec![2, 3]));
    assert_eq!(sum, [6i64.to_le_bytes(); 6].concat());
}
