//! The worker protocol: every message between the pipeline and one Python worker, as types.
//!
//! They travel over the worker's Unix socket, each a JSON object after its length (`u32`,
//! little-endian); `worker.py` reads and writes exactly these shapes (its docstring shows
//! them). A reply of any other shape is the worker breaking the protocol, which the pipeline
//! treats as its death, never as a guess. What both sides must agree on is decided here, once:
//! the per-sample seeds (computed in Rust, [`crate::rng::python_seed`], and handed over with
//! the ids) and the element types a field may travel as, with their sizes ([`DType`], sent in
//! the setup so that the worker spells none of them itself).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::segments::{Lent, Placed};
use crate::plan::stream_sample_id;
use crate::rng::python_seed;
use crate::tensor::{DType, Tensor};
use hetgen_spec::model::PythonRef;

/// What a worker needs to build the dataset, sent once after it connects.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Setup {
    /// The job's code folder: the dataset's file is relative to it, and it goes first on
    /// `sys.path`.
    pub code_dir: PathBuf,
    /// The factory and the collate, as the worker imports them (`file`, `name`).
    pub dataset: PythonRef,
    pub collate: Option<PythonRef>,
    /// The channel's folder, the factory's first argument.
    pub path: PathBuf,
    /// As SageMaker delivers them (strings; JSON ones the worker decodes).
    pub hyperparameters: BTreeMap<String, String>,
    /// Where the worker writes batch files.
    pub shm_dir: PathBuf,
    /// Bytes per element of every type a field may travel as, by the name numpy gives it.
    pub dtypes: BTreeMap<&'static str, usize>,
    /// The job's seed; not sent: the worker gets each sample's seed with its id.
    #[serde(skip)]
    pub seed: u64,
}

impl Setup {
    /// The types a field may travel as: [`DType`]'s table.
    pub(super) fn dtypes() -> BTreeMap<&'static str, usize> {
        DType::ALL.iter().map(|d| (d.name(), d.size())).collect()
    }
}

/// A message to the worker.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Request<'a> {
    /// Build the dataset; answered by [`Reply::Ready`].
    Setup(&'a Setup),
    /// Make these samples, collate them and write the batch into the segment lent (see
    /// [`super::segments`]), else to `file` of the shared-memory folder; answered by
    /// [`Reply::Made`]. A segment the worker must make (new, or larger) is made as `file`.
    Batch {
        ids: &'a [u64],
        /// Each sample's seed, in the order of `ids`.
        seeds: Vec<u64>,
        file: &'a str,
        segment: Option<Lent>,
    },
    /// Make these samples one after another and drop them, not collated (is one of them what
    /// kills the worker?); answered by [`Reply::Probed`].
    Probe { ids: &'a [u64], seeds: Vec<u64> },
    /// A dataset of shards: the samples of `shard` from position `from`, one per seed but the
    /// last, which is the seed of the sample after them, read ahead to learn whether the shard
    /// ends there; collated and written as a batch is; answered by [`Reply::Streamed`].
    Next {
        shard: u32,
        from: u32,
        seeds: Vec<u64>,
        file: &'a str,
        segment: Option<Lent>,
    },
}

impl<'a> Request<'a> {
    /// Samples `ids` of `epoch` in a job seeded with `seed`, written into `segment` or `file`.
    pub(super) fn batch(
        seed: u64,
        epoch: u32,
        ids: &'a [u64],
        file: &'a str,
        segment: Option<Lent>,
    ) -> Self {
        Request::Batch {
            ids,
            seeds: seeds(seed, epoch, ids),
            file,
            segment,
        }
    }

    /// The next `count` samples of `shard` of `epoch` from `from`, written into `segment` or
    /// `file`.
    pub(super) fn next(
        seed: u64,
        epoch: u32,
        (shard, from, count): (u32, u32, u32),
        file: &'a str,
        segment: Option<Lent>,
    ) -> Self {
        let positions = u64::from(from)..=u64::from(from) + u64::from(count);
        let ids: Vec<u64> = positions
            .map(|p| stream_sample_id(shard, u32::try_from(p).unwrap_or(u32::MAX)))
            .collect();
        Request::Next {
            shard,
            from,
            seeds: seeds(seed, epoch, &ids),
            file,
            segment,
        }
    }

    /// Samples `ids` of `epoch`, probed.
    pub(super) fn probe(seed: u64, epoch: u32, ids: &'a [u64]) -> Self {
        Request::Probe {
            ids,
            seeds: seeds(seed, epoch, ids),
        }
    }
}

fn seeds(seed: u64, epoch: u32, ids: &[u64]) -> Vec<u64> {
    ids.iter().map(|&id| python_seed(seed, epoch, id)).collect()
}

/// A message from the worker.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Reply {
    /// The dataset is built.
    Ready(Built),
    /// The batch is in its file.
    Made(MadeBatch),
    /// The next samples of a shard: how many, whether the shard ended with them, and their
    /// batch (none when the shard had no sample left).
    Streamed(Streamed),
    /// The probed samples came through; how many.
    Probed(u64),
    /// What was asked failed.
    Error(WorkerError),
}

/// What a worker built, as its ready message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Built {
    /// A map-style dataset: `len()` of it.
    Len(u64),
    /// `hetgen.Shards`: how many shards.
    Shards(u32),
}

/// The next samples of a shard, as the worker wrote them.
#[derive(Debug, Deserialize)]
pub(super) struct Streamed {
    pub samples: u32,
    pub end: bool,
    pub made: Option<MadeBatch>,
}

/// A batch the worker wrote.
#[derive(Debug, Deserialize)]
pub(super) struct MadeBatch {
    /// Where.
    pub placed: Placed,
    /// The batch's size.
    pub bytes: u64,
    /// Its tensors, at their offsets.
    pub tensors: Vec<Tensor>,
    /// How they nest, as JSON (see the data service's .proto).
    pub structure: String,
}

/// Why the worker could not do what it was asked.
#[derive(Debug, Deserialize)]
pub(super) struct WorkerError {
    pub kind: ErrorKind,
    /// The traceback from the user's frames, or hetgen's own explanation.
    pub message: String,
    /// The sample to blame, when one is.
    #[serde(default)]
    pub sample: Option<u64>,
}

/// Where the worker failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ErrorKind {
    /// Importing the file, calling the factory, or what it returned.
    Setup,
    /// The dataset's `__getitem__` raised.
    Getitem,
    /// The spec's `collate` raised.
    Collate,
    /// The default collate: a sample lacks a field, or a field does not stack.
    Stack,
    /// A field of a type or dtype no batch carries.
    Type,
    /// Writing the batch to shared memory.
    Write,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_have_the_shapes_worker_py_reads_and_writes() {
        let ids = [3, 9];
        let lent = Lent {
            index: 2,
            capacity: 4096,
        };
        let batch = serde_json::to_value(Request::batch(7, 1, &ids, "w0-1", Some(lent))).unwrap();
        assert_eq!(batch["batch"]["ids"], serde_json::json!([3, 9]));
        assert_eq!(batch["batch"]["file"], "w0-1");
        assert_eq!(
            batch["batch"]["segment"],
            serde_json::json!({"index": 2, "capacity": 4096})
        );
        let none = serde_json::to_value(Request::batch(7, 1, &ids, "w0-1", None)).unwrap();
        assert!(none["batch"]["segment"].is_null());
        // The epoch is in the seeds; the worker needs no other use of it.
        assert!(batch["batch"].get("epoch").is_none());
        assert_eq!(
            batch["batch"]["seeds"],
            serde_json::json!([python_seed(7, 1, 3), python_seed(7, 1, 9)])
        );
        let made: Reply = serde_json::from_str(
            r#"{"made": {"placed": {"new_segment": {"capacity": 4096}}, "bytes": 8, "tensors": [{"name": "x", "dtype": "bfloat16", "shape": [4], "offset": 0}], "structure": "0"}}"#,
        )
        .unwrap();
        let Reply::Made(made) = made else {
            panic!("{made:?}")
        };
        assert_eq!(made.tensors[0].dtype, DType::Bf16);
        assert_eq!(made.placed, Placed::NewSegment { capacity: 4096 });
        for (placed, want) in [
            (r#""file""#, Placed::File),
            (r#""segment""#, Placed::Segment),
        ] {
            let made: Reply = serde_json::from_str(&format!(
                r#"{{"made": {{"placed": {placed}, "bytes": 0, "tensors": [], "structure": "0"}}}}"#
            ))
            .unwrap();
            assert!(matches!(made, Reply::Made(m) if m.placed == want));
        }
        let error: Reply = serde_json::from_str(
            r#"{"error": {"kind": "getitem", "message": "KeyError", "sample": 5}}"#,
        )
        .unwrap();
        assert!(matches!(
            error,
            Reply::Error(WorkerError {
                kind: ErrorKind::Getitem,
                sample: Some(5),
                ..
            })
        ));
        let next = serde_json::to_value(Request::next(7, 1, (4, 10, 2), "w0-2", None)).unwrap();
        assert_eq!(next["next"]["shard"], 4);
        assert_eq!(next["next"]["from"], 10);
        // One seed per sample asked for, and one for the sample read ahead.
        let seeds: Vec<u64> = (10..13)
            .map(|p| python_seed(7, 1, stream_sample_id(4, p)))
            .collect();
        assert_eq!(next["next"]["seeds"], serde_json::json!(seeds));
        let ready: Reply = serde_json::from_str(r#"{"ready": {"shards": 12}}"#).unwrap();
        assert!(matches!(ready, Reply::Ready(Built::Shards(12))));
        let ready: Reply = serde_json::from_str(r#"{"ready": {"len": 5}}"#).unwrap();
        assert!(matches!(ready, Reply::Ready(Built::Len(5))));
        let streamed: Reply =
            serde_json::from_str(r#"{"streamed": {"samples": 0, "end": true, "made": null}}"#)
                .unwrap();
        assert!(matches!(
            streamed,
            Reply::Streamed(Streamed {
                samples: 0,
                end: true,
                made: None
            })
        ));
        // A reply of another shape is no reply.
        assert!(serde_json::from_str::<Reply>(r#"{"made": {"bytes": 8}}"#).is_err());
        assert!(
            serde_json::from_str::<Reply>(r#"{"error": {"kind": "oops", "message": ""}}"#).is_err()
        );
    }

    #[test]
    fn the_setup_carries_every_dtype_and_not_the_seed() {
        let setup = Setup {
            code_dir: "/code".into(),
            dataset: PythonRef {
                file: "data.py".into(),
                name: "make".into(),
            },
            collate: None,
            path: "/data".into(),
            hyperparameters: BTreeMap::new(),
            shm_dir: "/dev/shm/x".into(),
            dtypes: Setup::dtypes(),
            seed: 42,
        };
        let sent = serde_json::to_value(Request::Setup(&setup)).unwrap();
        assert_eq!(sent["setup"]["dtypes"]["bfloat16"], 2);
        assert_eq!(
            sent["setup"]["dtypes"].as_object().unwrap().len(),
            DType::ALL.len()
        );
        assert!(sent["setup"].get("seed").is_none());
    }
}
