//! Checkpoints: everything a killed run needs to continue as if it had never stopped.
//!
//! A checkpoint is a folder `step-<step>` in the checkpoint directory holding
//!
//! - [`WEIGHTS_FILE`]: every model variable (libtorch format: exact for every dtype);
//! - [`OPTIMIZER_FILE`]: the optimizer's state tensors and step counter;
//! - [`STATE_FILE`]: the run's counters, the input [`Position`] after the last trained batch, and
//!   the identity of the model and optimizer.
//!
//! It is written as `.tmp-step-<step>` and renamed into place, so a folder named `step-*` is
//! always complete; older ones are deleted afterwards (only the latest is kept; if the process
//! dies in between, the highest step wins). No RNG state is saved: torch is re-seeded from
//! (seed, step) before every step (see `device::step_seed`).

use std::path::{Path, PathBuf};

use hetgen_pipeline::Position;
use hetgen_spec::model::{BuiltinTrainer, Job, Model};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::TrainError;
use crate::models::model_name;
use crate::optim::Optimizer;
use crate::replicas::{LossScale, Replica};

/// Model variables in a checkpoint.
pub(crate) const WEIGHTS_FILE: &str = "weights.ot";
/// Optimizer state in a checkpoint.
pub(crate) const OPTIMIZER_FILE: &str = "optimizer.ot";
/// Counters and position in a checkpoint.
pub(crate) const STATE_FILE: &str = "state.json";

/// Version of [`State`]'s layout.
const FORMAT: u32 = 1;
/// Prefix of a complete checkpoint's folder.
const PREFIX: &str = "step-";
/// Prefix of a checkpoint being written.
const TMP_PREFIX: &str = ".tmp-step-";

/// What makes a checkpoint loadable into a run: the shapes of its tensors.
///
/// The learning rate, schedule and length may change between a run and its resume; the model,
/// its classes and input, and the optimizer's kind of state may not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub model: Model,
    pub num_classes: u32,
    pub input_shape: [u32; 3],
    /// `sgd`, `sgd+momentum`, `adam` or `adadelta`.
    pub optimizer: String,
}

impl Identity {
    /// The identity of a job's checkpoints.
    pub fn of_job(job: &Job, trainer: &BuiltinTrainer) -> Self {
        Self {
            model: trainer.model,
            num_classes: trainer.num_classes,
            input_shape: job.pipeline.output_shape,
            optimizer: Optimizer::state_kind(&trainer.optimizer).to_owned(),
        }
    }

    /// SHA-256 of the identity's JSON, hex.
    pub fn fingerprint(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        Sha256::digest(json.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What differs between `self` (the checkpoint's) and `other` (the job's), for a message.
    fn differences(&self, other: &Self) -> String {
        let mut out = Vec::new();
        if self.model != other.model {
            out.push(format!(
                "model `{}` (the job trains `{}`)",
                model_name(self.model),
                model_name(other.model)
            ));
        }
        if self.num_classes != other.num_classes {
            out.push(format!(
                "num_classes {} (the job has {})",
                self.num_classes, other.num_classes
            ));
        }
        if self.input_shape != other.input_shape {
            out.push(format!(
                "input shape {:?} (the job's is {:?})",
                self.input_shape, other.input_shape
            ));
        }
        if self.optimizer != other.optimizer {
            out.push(format!(
                "optimizer `{}` (the job uses `{}`)",
                self.optimizer, other.optimizer
            ));
        }
        if out.is_empty() {
            "its fingerprint differs".to_owned()
        } else {
            format!("it holds {}", out.join(", "))
        }
    }
}

/// How far a run got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// Steps taken.
    pub step: u64,
    /// Samples trained on.
    pub samples: u64,
    /// Epochs reached.
    pub epochs_started: u32,
    /// Steps epoch 0 took, once it is over (the cosine schedule's epoch length).
    pub epoch0_batches: Option<u64>,
    /// Loss of the last step.
    pub last_loss: f64,
    /// fp16's loss scale, when training in fp16.
    pub loss_scale: Option<LossScale>,
}

/// [`STATE_FILE`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct State {
    pub format: u32,
    pub fingerprint: String,
    pub identity: Identity,
    pub progress: Progress,
    /// The input position after the last trained batch.
    pub position: Position,
}

/// A checkpoint found on disk.
#[derive(Debug)]
pub(crate) struct Found {
    pub dir: PathBuf,
    pub state: State,
}

/// The latest checkpoint in `dir`, checked against `identity`; `None` when there is none.
pub(crate) fn find(dir: &Path, identity: &Identity) -> Result<Option<Found>, TrainError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io("list", dir)(e)),
    };
    let mut latest: Option<(u64, PathBuf)> = None;
    for entry in entries {
        let entry = entry.map_err(TrainError::io("list", dir))?;
        let name = entry.file_name();
        let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if latest.as_ref().is_none_or(|(best, _)| step > *best) {
            latest = Some((step, entry.path()));
        }
    }
    let Some((_, path)) = latest else {
        return Ok(None);
    };
    let corrupt = |why: String| TrainError::CorruptCheckpoint {
        path: path.clone(),
        why,
    };
    let text = std::fs::read_to_string(path.join(STATE_FILE))
        .map_err(|e| corrupt(format!("{STATE_FILE}: {e}")))?;
    let state: State =
        serde_json::from_str(&text).map_err(|e| corrupt(format!("{STATE_FILE}: {e}")))?;
    if state.format != FORMAT {
        return Err(corrupt(format!(
            "format {} (this trainer reads {FORMAT})",
            state.format
        )));
    }
    if state.fingerprint != identity.fingerprint() || state.identity != *identity {
        return Err(TrainError::ForeignCheckpoint {
            why: state.identity.differences(identity),
            path,
        });
    }
    Ok(Some(Found { dir: path, state }))
}

/// Writes a checkpoint of `replica` (replica 0), `optimizer` and `state` into `dir`, replacing
/// the previous one. Returns the checkpoint's folder.
pub(crate) fn write(
    dir: &Path,
    state: &State,
    replica: &Replica,
    optimizer: &Optimizer,
) -> Result<PathBuf, TrainError> {
    std::fs::create_dir_all(dir).map_err(TrainError::io("create", dir))?;
    let step = state.progress.step;
    let tmp = dir.join(format!("{TMP_PREFIX}{step:012}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(TrainError::io("remove", &tmp))?;
    }
    std::fs::create_dir(&tmp).map_err(TrainError::io("create", &tmp))?;
    replica.save(&tmp.join(WEIGHTS_FILE))?;
    tch::Tensor::save_multi(&optimizer.state()?, tmp.join(OPTIMIZER_FILE))?;
    let json = serde_json::to_string_pretty(state).map_err(|e| TrainError::Io {
        what: "serialize",
        path: tmp.join(STATE_FILE),
        source: std::io::Error::other(e),
    })?;
    let state_path = tmp.join(STATE_FILE);
    std::fs::write(&state_path, json + "\n").map_err(TrainError::io("write", &state_path))?;

    let done = dir.join(format!("{PREFIX}{step:012}"));
    if done.exists() {
        std::fs::remove_dir_all(&done).map_err(TrainError::io("remove", &done))?;
    }
    std::fs::rename(&tmp, &done).map_err(TrainError::io("rename into place", &done))?;
    for entry in std::fs::read_dir(dir).map_err(TrainError::io("list", dir))? {
        let entry = entry.map_err(TrainError::io("list", dir))?;
        let path = entry.path();
        let stale = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PREFIX) || n.starts_with(TMP_PREFIX));
        if stale
            && path != done
            && let Err(e) = std::fs::remove_dir_all(&path)
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove an old checkpoint");
        }
    }
    Ok(done)
}

/// A fresh [`State`] for `job`.
pub(crate) fn state(identity: &Identity, progress: &Progress, position: &Position) -> State {
    State {
        format: FORMAT,
        fingerprint: identity.fingerprint(),
        identity: identity.clone(),
        progress: progress.clone(),
        position: position.clone(),
    }
}
