//! A user's Python dataset that misbehaves, in real worker processes (`python3` on `PATH` with
//! numpy, as `make test` puts the torch venv first): each error names what, where and which
//! sample.

use std::path::Path;
use std::time::Duration;

use hetgen_pipeline::PipelineError;
use hetgen_pipeline::python::Workers;

mod python_workers;

use python_workers::{all, shard};

/// Samples of an image and a label; files in the data folder make one misbehave: `exit-<i>`
/// ends the worker making sample i with `os._exit(3)`, `segv-<i>` crashes it, `hang-<i>`
/// sleeps for ever, `str-<i>` makes its label a string, `collate-dies` kills the worker in the
/// collate, and `started-<i>` is written when sample i begins.
const FAULTS: &str = r#"
import ctypes, os, time
import numpy as np

class Faults:
    def __init__(self, path):
        self.path = path
    def __len__(self):
        return 40
    def _marked(self, name):
        return os.path.exists(os.path.join(self.path, name))
    def __getitem__(self, i):
        open(os.path.join(self.path, f"started-{i}"), "w").close()
        if self._marked(f"exit-{i}"):
            os._exit(3)
        if self._marked(f"segv-{i}"):
            ctypes.string_at(0)
        if self._marked(f"hang-{i}"):
            self.wait_for_ever()
        label = str(i) if self._marked(f"str-{i}") else i
        return {"image": np.full((2, 3), i, dtype=np.uint8), "label": label}
    def wait_for_ever(self):
        while True:
            time.sleep(60)

def make(path, hyperparameters):
    return Faults(path)

class Stream:
    def __init__(self, path):
        self.path = path
    def __iter__(self):
        yield from range(3)

def stream(path, hyperparameters):
    return Stream(path)

def ragged(path, hyperparameters):
    class Ragged(Faults):
        def __getitem__(self, i):
            return np.zeros(i % 3 + 1, dtype=np.float32)
    return Ragged(path)

def dying_collate(samples):
    if len(samples) > 1 and os.path.exists(os.path.join(samples[0]["path"], "collate-dies")):
        os._exit(4)
    return np.stack([s["image"] for s in samples])

def with_path(path, hyperparameters):
    class WithPath(Faults):
        def __getitem__(self, i):
            return {"image": super().__getitem__(i)["image"], "path": self.path}
    return WithPath(path)
"#;

/// Workers over `FAULTS` (its `factory`), with `collate`, in a fresh code and data folder.
fn workers(
    factory: &str,
    collate: Option<&str>,
    threads: usize,
) -> (tempfile::TempDir, Result<Workers, PipelineError>) {
    python_workers::workers("faults.py", FAULTS, factory, collate, threads)
}

fn mark(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), "").unwrap();
}

#[test]
fn a_sample_that_ends_every_worker_is_named_with_how_it_ended() {
    let (dir, workers) = workers("make", None, 1);
    let workers = workers.unwrap();
    mark(dir.path(), "exit-17");
    // A shuffled batch: the sample is named, not a range of ids.
    let error = all(&workers, 0, &[31, 4, 17, 9], 4).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            error,
            PipelineError::WorkerDied {
                sample: 17,
                deaths: 3,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.starts_with("sample 17 kills the Python worker"),
        "{text}"
    );
    assert!(text.contains("exit status 3"), "{text}");
    // The pool goes on with a new worker.
    assert_eq!(all(&workers, 0, &[4, 9], 2).unwrap().len(), 1);
}

#[test]
fn a_sample_that_crashes_native_code_is_named_with_the_signal() {
    let (dir, workers) = workers("make", None, 2);
    let workers = workers.unwrap();
    mark(dir.path(), "segv-22");
    let error = all(&workers, 0, &[20, 21, 22, 23, 24, 25], 3).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::WorkerDied { sample: 22, .. }),
        "{text}"
    );
    assert!(text.contains("SIGSEGV"), "{text}");
}

#[test]
fn a_batch_that_kills_its_worker_only_whole_is_named_as_a_batch() {
    let (dir, workers) = workers("with_path", Some("dying_collate"), 1);
    let workers = workers.unwrap();
    mark(dir.path(), "collate-dies");
    let error = all(&workers, 0, &[8, 2, 5], 3).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::BatchDied { deaths: 3, .. }),
        "{text}"
    );
    assert!(text.contains("batch of samples 8, 2, 5"), "{text}");
    assert!(text.contains("none of them alone kills it"), "{text}");
    assert!(text.contains("exit status 4"), "{text}");
}

#[test]
fn a_sample_that_hangs_is_stopped_at_the_deadline_naming_it_and_where_it_was() {
    let (dir, workers) = workers("make", None, 1);
    let workers = workers.unwrap();
    workers.set_sample_timeout(Duration::from_millis(1500));
    mark(dir.path(), "hang-13");
    let error = all(&workers, 0, &[12, 13, 14], 3).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::SampleTimeout { sample: 13, .. }),
        "{text}"
    );
    assert!(
        text.starts_with(
            "sample 13: `__getitem__` took longer than 1.5 s (`HETGEN_SAMPLE_TIMEOUT_S`)"
        ),
        "{text}"
    );
    assert!(text.contains("faults.py\", line"), "{text}");
    assert!(text.contains("in wait_for_ever"), "{text}");
    assert!(text.contains("in __getitem__"), "{text}");
    assert!(
        !text.contains("worker.py"),
        "hetgen's frames are left out: {text}"
    );
    // The pool goes on with a new worker.
    assert_eq!(all(&workers, 0, &[12, 14], 2).unwrap().len(), 1);
}

#[test]
fn a_field_of_another_type_on_one_sample_names_the_sample() {
    let (dir, workers) = workers("make", None, 1);
    let workers = workers.unwrap();
    mark(dir.path(), "str-6");
    let error = all(&workers, 0, &[5, 6, 7], 3).unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, PipelineError::Sample { sample: 6, .. }),
        "{text}"
    );
    assert!(
        text.contains("field `label` is a str (sample 5's is an int)"),
        "{text}"
    );
}

#[test]
fn a_factory_that_returns_no_map_style_dataset_fails_naming_it() {
    let (_dir, workers) = workers("stream", None, 1);
    let text = workers.err().expect("the start fails").to_string();
    assert!(
        text.contains(
            "a map-style dataset (`__len__` and `__getitem__`) or `hetgen.Shards` is required; `faults.py:stream` returned a Stream without `__len__`"
        ),
        "{text}"
    );
    assert!(
        text.contains("return `hetgen.Shards(shard_list, read)`"),
        "{text}"
    );
    assert!(!text.contains("Traceback"), "{text}");
}

#[test]
fn the_hint_for_samples_that_do_not_stack_is_toml_as_written() {
    let (_dir, workers) = workers("ragged", None, 1);
    let text = all(&workers.unwrap(), 0, &[3, 4], 2)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(r#"`[pipeline] source = { ..., collate = "data.py:collate" }`"#),
        "{text}"
    );
}

#[test]
fn the_pool_stops_a_worker_busy_in_a_long_sample_when_dropped() {
    let (dir, workers) = workers("make", None, 2);
    let workers = workers.unwrap();
    // A deadline that would not end the sample before the test is given up on.
    workers.set_sample_timeout(Duration::from_secs(3600));
    mark(dir.path(), "hang-3");
    // The first batch comes; the second's worker is in sample 3 for ever when the consumer
    // stops taking batches, and the pool is dropped.
    let mut taken = 0;
    shard(&workers, 0, &[1, 2, 3, 4], 2, &mut |_| {
        while !dir.path().join("started-3").exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        taken += 1;
        false
    })
    .unwrap();
    assert_eq!(taken, 1);
    // Returns without waiting for the sample, or for its deadline.
    drop(workers);
}
