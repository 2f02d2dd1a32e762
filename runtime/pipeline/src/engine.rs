//! The engine: a shard's sample ids in, batches out, on a pool sized to this process's cores.
//!
//! The spec's stages are compiled once into [`Op`]s; custom stages are built from their params
//! then, so bad params fail before any data moves. `normalize` and `to_tensor` are skipped: the
//! trainer applies them on its device, so batches travel as `u8`, a quarter of the bytes of
//! `f32`. Crops never copy: `random_resized_crop` resizes straight from the decoded image's
//! region.
//!
//! A `decode` directly followed by `random_resized_crop` or `resize` compiles into one op that
//! decodes only what the resize reads ([`codec::decode_resized`]): the crop is drawn from the
//! JPEG's header dimensions with the same random draws, then only its rows and columns are
//! reconstructed, at a DCT-domain scale when the crop is much larger than the output. It shows
//! in stage timings as `decode+random_resized_crop`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hetgen_spec::model::{Job, Stage as StageSpec};
use rayon::prelude::*;

use crate::codec;
use crate::error::PipelineError;
use crate::image::{Image, Payload};
use crate::ops;
use crate::source::{self, Source};
use crate::stage::{Stage, StageRegistry};
use crate::{Batch, Contents, SampleRng};

/// What [`Engine::run_shard`] is asked to make: the samples of one shard (or of its tail, when
/// a consumer resumes mid-shard) and how to cut them into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardWork<'a> {
    /// Epoch the samples belong to: it seeds their augmentation.
    pub epoch: u32,
    /// Shard number the batches are labelled with.
    pub shard: u32,
    /// Sample ids, in the order their batches are cut.
    pub ids: &'a [u64],
    /// Samples per batch; the last batch may be short.
    pub batch_size: u32,
}

/// A compiled stage: a built-in as the spec states it, or a custom stage built from its params.
enum Op {
    Builtin(StageSpec),
    /// `decode` fused with the resizing stage that follows it.
    DecodeResized {
        channels: u32,
        then: StageSpec,
    },
    Custom(Box<dyn Stage>),
}

/// The pipeline of one job, ready to run.
pub struct Engine {
    source: Box<dyn Source>,
    ops: Vec<(String, Op)>,
    /// Nanoseconds spent per op, `source` first; summed over threads (CPU time).
    nanos: Vec<AtomicU64>,
    samples_done: AtomicU64,
    seed: u64,
    shape: [u32; 3],
    pool: rayon::ThreadPool,
    threads: usize,
    busy: AtomicUsize,
}

/// How much nicer than the training threads [`Engine::run_in_background`] makes the pipeline:
/// at +10 Linux's scheduler weighs a pipeline thread at about a tenth of a training thread.
pub const BACKGROUND_NICE: i32 = 10;

/// Adds `by` to the calling thread's nice value (Linux keeps one per thread), up to 19.
fn lower_this_thread(by: i32) -> std::io::Result<()> {
    lower_priority(this_thread(), by)
}

/// The calling thread's id. Through the system call, not glibc's `gettid` wrapper (new in
/// glibc 2.30): the wheel's `hetgen` command links against glibc 2.17, which has none.
fn this_thread() -> u32 {
    // SAFETY: a plain system call about the calling thread; it cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Adds `by` to the nice value of thread or process `id` (this process's own thread, or a
/// child of it), up to 19.
pub(crate) fn lower_priority(id: u32, by: i32) -> std::io::Result<()> {
    let id = id as libc::id_t;
    // SAFETY: plain system calls; `getpriority` may return -1 legitimately, so errno tells
    // success from failure.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, id);
        if now == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::setpriority(libc::PRIO_PROCESS, id, (now + by).min(19)) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The cores this process may use: std reads the affinity mask and the cgroup CPU quota.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

impl Engine {
    /// Build the job's pipeline. Channel folders come from `channels` (name → folder);
    /// `threads` defaults to [`available_cores`].
    pub fn new(
        job: &Job,
        registry: &StageRegistry,
        channels: &BTreeMap<String, PathBuf>,
        threads: Option<usize>,
    ) -> Result<Self, PipelineError> {
        let source = source::open(&job.pipeline.source, job.seed, channels)?;
        Self::with_source(job, source, registry, threads)
    }

    /// The job's stages over a source of the caller's (benchmarks, custom data formats).
    pub fn with_source(
        job: &Job,
        source: Box<dyn Source>,
        registry: &StageRegistry,
        threads: Option<usize>,
    ) -> Result<Self, PipelineError> {
        let ops = compile(&job.pipeline.stages, registry)?;
        let threads = threads.unwrap_or_else(available_cores).max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("hetgen-pipeline-{i}"))
            .build()
            .map_err(|e| PipelineError::Pool(e.to_string()))?;
        let nanos = (0..=ops.len()).map(|_| AtomicU64::new(0)).collect();
        Ok(Self {
            source,
            ops,
            nanos,
            samples_done: AtomicU64::new(0),
            seed: job.seed,
            shape: job.pipeline.output_shape,
            pool,
            threads,
            busy: AtomicUsize::new(0),
        })
    }

    /// Lowers this engine's worker threads to [`BACKGROUND_NICE`] more niceness than they had,
    /// so that on a core they share, the threads that train (and drive GPUs) run first and the
    /// pipeline takes the cycles they leave: hybrid input's pipeline lives on the trainer
    /// host's *spare* CPU. Without it the two split a shared core evenly and a trainer that
    /// could be fed by the data servers alone is slowed by its own pipeline (BENCHMARKS.md,
    /// hybrid input). Raising niceness needs no privilege.
    pub fn run_in_background(&self) -> std::io::Result<()> {
        self.pool
            .broadcast(|_| lower_this_thread(BACKGROUND_NICE))
            .into_iter()
            .collect()
    }

    /// Samples per epoch of the source.
    pub fn samples_per_epoch(&self) -> u64 {
        self.source.len()
    }

    /// `[height, width, channels]` of every sample.
    pub fn output_shape(&self) -> [u32; 3] {
        self.shape
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Threads processing a sample right now.
    pub fn busy_threads(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Samples finished since start.
    pub fn samples_done(&self) -> u64 {
        self.samples_done.load(Ordering::Relaxed)
    }

    /// CPU time spent per stage since start (`source` first, then the compiled ops in order).
    pub fn stage_times(&self) -> Vec<(String, Duration)> {
        std::iter::once("source".to_owned())
            .chain(self.ops.iter().map(|(name, _)| name.clone()))
            .zip(&self.nanos)
            .map(|(name, n)| (name, Duration::from_nanos(n.load(Ordering::Relaxed))))
            .collect()
    }

    /// Run sample `id` of `epoch` through every stage.
    pub fn sample(&self, epoch: u32, id: u64) -> Result<(Image, i64), PipelineError> {
        let samples = self.source.len();
        if id >= samples {
            return Err(PipelineError::UnknownSample {
                sample: id,
                samples,
            });
        }
        self.busy.fetch_add(1, Ordering::Relaxed);
        let result = self.sample_inner(epoch, id);
        self.busy.fetch_sub(1, Ordering::Relaxed);
        if result.is_ok() {
            self.samples_done.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn sample_inner(&self, epoch: u32, id: u64) -> Result<(Image, i64), PipelineError> {
        let fail = |stage: &str, why: String| PipelineError::Sample {
            sample: id,
            stage: stage.to_owned(),
            why,
        };
        let mut clock = Instant::now();
        let mut lap = |slot: usize| {
            let now = Instant::now();
            self.nanos[slot].fetch_add((now - clock).as_nanos() as u64, Ordering::Relaxed);
            clock = now;
        };
        let sample = self.source.read(id).map_err(|why| fail("source", why))?;
        lap(0);
        let mut rng = SampleRng::new(self.seed, epoch, id);
        let mut payload = sample.payload;
        for (i, (name, op)) in self.ops.iter().enumerate() {
            payload = Payload::Pixels(apply(op, payload, &mut rng).map_err(|why| fail(name, why))?);
            lap(i + 1);
        }
        match payload {
            Payload::Pixels(image) if image.shape() == self.shape => Ok((image, sample.label)),
            Payload::Pixels(image) => Err(PipelineError::Shape {
                sample: id,
                got: image.shape(),
                want: self.shape,
            }),
            Payload::Encoded(_) => Err(fail(
                "source",
                "the sample is encoded but the pipeline has no decode stage".to_owned(),
            )),
        }
    }

    /// Turn the work's `ids` (a shard's samples, in order) into batches of its `batch_size`,
    /// calling `emit` with each in order; stops early when `emit` returns `false`. Batch indices
    /// count from 0.
    pub fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), PipelineError> {
        let ShardWork {
            epoch,
            shard,
            ids,
            batch_size,
        } = work;
        let sample_bytes = self.shape.iter().map(|d| *d as usize).product::<usize>();
        for (index, chunk) in ids.chunks(batch_size.max(1) as usize).enumerate() {
            // Each sample's bytes are written once, by the thread that made it: the buffer is
            // not zeroed first (a serial pass over tens of MB per batch).
            let total = chunk.len() * sample_bytes;
            let mut images: Vec<u8> = Vec::with_capacity(total);
            let mut labels = vec![0i64; chunk.len()];
            self.pool.install(|| {
                images.spare_capacity_mut()[..total]
                    .par_chunks_mut(sample_bytes.max(1))
                    .zip(labels.par_iter_mut())
                    .zip(chunk.par_iter())
                    .try_for_each(|((pixels, label), id)| {
                        let (image, l) = self.sample(epoch, *id)?;
                        // A custom stage may hand back an image whose bytes disagree with
                        // its shape; every byte of `pixels` must be written.
                        if image.data.len() != pixels.len() {
                            return Err(PipelineError::Sample {
                                sample: *id,
                                stage: "output".to_owned(),
                                why: format!(
                                    "the image holds {} bytes where its shape {:?} needs {}",
                                    image.data.len(),
                                    image.shape(),
                                    pixels.len()
                                ),
                            });
                        }
                        for (dst, src) in pixels.iter_mut().zip(&image.data) {
                            dst.write(*src);
                        }
                        *label = l;
                        Ok::<(), PipelineError>(())
                    })
            })?;
            // SAFETY: every chunk of the first `total` bytes was written in full above (a
            // sample of any other length is an error, which returns before this line).
            unsafe { images.set_len(total) };
            let batch = Batch {
                epoch,
                shard,
                index: index as u32,
                sample_ids: chunk.to_vec(),
                data: images.into(),
                contents: Contents::Images {
                    shape: self.shape,
                    labels,
                },
            };
            if !emit(batch) {
                break;
            }
        }
        Ok(())
    }
}

fn compile(
    stages: &[StageSpec],
    registry: &StageRegistry,
) -> Result<Vec<(String, Op)>, PipelineError> {
    let mut ops = Vec::new();
    let mut stages = stages.iter().peekable();
    while let Some(stage) = stages.next() {
        if let StageSpec::Decode { channels } = stage
            && let Some(then) = stages.peek()
            && resizing(then).is_some()
        {
            let name = format!("{}+{}", op_name(stage), op_name(then));
            let then = (*then).clone();
            stages.next();
            ops.push((
                name,
                Op::DecodeResized {
                    channels: *channels,
                    then,
                },
            ));
        } else if let Some(op) = single(stage, registry)? {
            ops.push(op);
        }
    }
    Ok(ops)
}

fn single(
    stage: &StageSpec,
    registry: &StageRegistry,
) -> Result<Option<(String, Op)>, PipelineError> {
    match stage {
        // On the trainer's device.
        StageSpec::Normalize { .. } | StageSpec::ToTensor => Ok(None),
        StageSpec::Custom { name, params } => match registry.build(name, params) {
            Some(Ok(stage)) => Ok(Some((name.clone(), Op::Custom(stage)))),
            Some(Err(source)) => Err(PipelineError::StageParams {
                name: name.clone(),
                source,
            }),
            None => Err(PipelineError::UnknownStage {
                name: name.clone(),
                known: registry.names().join(", "),
            }),
        },
        builtin => Ok(Some((op_name(builtin), Op::Builtin(builtin.clone())))),
    }
}

/// The stage's `op` as the spec writes it (`random_resized_crop`, …): its serde tag.
fn op_name(stage: &StageSpec) -> String {
    serde_json::to_value(stage)
        .ok()
        .and_then(|v| v.get("op")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "stage".to_owned())
}

fn pixels(payload: Payload, what: &str) -> Result<Image, String> {
    match payload {
        Payload::Pixels(image) => Ok(image),
        Payload::Encoded(_) => Err(format!("{what} needs pixels: put a decode stage first")),
    }
}

fn apply(op: &Op, payload: Payload, rng: &mut SampleRng) -> Result<Image, String> {
    match (op, payload) {
        (Op::Custom(stage), payload) => stage
            .apply(pixels(payload, "a custom stage")?, rng)
            .map_err(|e| e.to_string()),
        (Op::Builtin(stage), payload) => builtin(stage, payload, rng),
        (Op::DecodeResized { channels, then }, Payload::Encoded(bytes)) => match resizing(then) {
            Some((size, crop)) => {
                let choose = |h, w| match crop {
                    Some((scale, ratio)) => ops::random_resized_crop_rect(h, w, scale, ratio, rng),
                    None => ops::Rect::full(h, w),
                };
                codec::decode_resized(&bytes, *channels, choose, size)
            }
            // `compile` fuses only resizing stages; unfused is still correct.
            None => builtin(
                then,
                Payload::Pixels(codec::decode(&bytes, *channels)?),
                rng,
            ),
        },
        // Synthetic pixels: nothing to decode.
        (Op::DecodeResized { then, .. }, pixels) => builtin(then, pixels, rng),
    }
}

/// The `scale` and `ratio` a random crop draws from.
type CropDraw = ([f64; 2], [f64; 2]);

/// A stage that resizes a region of its input to a size: the size, and the random crop's
/// `scale` and `ratio` (none: the whole image). Such a stage fuses with the `decode` before it.
fn resizing(stage: &StageSpec) -> Option<([u32; 2], Option<CropDraw>)> {
    match stage {
        StageSpec::RandomResizedCrop { size, scale, ratio } => {
            Some((*size, Some((*scale, *ratio))))
        }
        StageSpec::Resize { size } => Some((*size, None)),
        _ => None,
    }
}

fn builtin(stage: &StageSpec, payload: Payload, rng: &mut SampleRng) -> Result<Image, String> {
    Ok(match stage {
        StageSpec::Decode { channels } => match payload {
            Payload::Encoded(bytes) => codec::decode(&bytes, *channels)?,
            // Synthetic pixels: nothing to decode.
            Payload::Pixels(image) => image,
        },
        StageSpec::Resize { size } => ops::resize(&pixels(payload, "resize")?, *size)?,
        StageSpec::CenterCrop { size } => ops::center_crop(&pixels(payload, "center_crop")?, *size),
        StageSpec::RandomResizedCrop { size, scale, ratio } => {
            let image = pixels(payload, "random_resized_crop")?;
            let rect =
                ops::random_resized_crop_rect(image.height, image.width, *scale, *ratio, rng);
            ops::resize_region(&image, rect, size[0], size[1])?
        }
        StageSpec::HorizontalFlip { p } => {
            let mut image = pixels(payload, "horizontal_flip")?;
            if rng.chance(*p) {
                ops::flip(&mut image);
            }
            image
        }
        StageSpec::ColorJitter {
            brightness,
            contrast,
            saturation,
        } => {
            let mut image = pixels(payload, "color_jitter")?;
            ops::color_jitter(&mut image, *brightness, *contrast, *saturation, rng);
            image
        }
        StageSpec::GaussianBlur { kernel, sigma } => {
            ops::gaussian_blur(&pixels(payload, "gaussian_blur")?, *kernel, *sigma, rng)
        }
        StageSpec::RandomErasing {
            p,
            scale,
            ratio,
            value,
        } => {
            let mut image = pixels(payload, "random_erasing")?;
            ops::random_erasing(&mut image, *p, *scale, *ratio, *value, rng);
            image
        }
        // `compile` never makes these built-ins: normalisation is the trainer's, custom
        // stages are `Op::Custom`.
        StageSpec::Normalize { .. } | StageSpec::ToTensor | StageSpec::Custom { .. } => {
            pixels(payload, "a device stage")?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice() -> i32 {
        // SAFETY: a plain system call about the calling thread.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, this_thread() as libc::id_t) }
    }

    #[test]
    fn background_engines_run_nicer_than_their_caller() {
        let spec = r#"
version = 1
[job]
name = "nice"
[[instance_group]]
name = "dnn_group"
instance_type = "ml.m5.xlarge"
count = 1
role = "trainer"
[pipeline]
source = { format = "synthetic", shape = [8, 8, 3], classes = 2, samples = 8 }
batch_size = 2
[trainer]
model = "mlp"
steps = 1
"#;
        let job = hetgen_spec::check("nice.toml", spec)
            .job
            .expect("valid spec");
        let engine = Engine::new(&job, &StageRegistry::builtin(), &BTreeMap::new(), Some(3))
            .expect("engine");
        let caller = nice();
        let before = engine.pool.broadcast(|_| nice());
        assert_eq!(before, vec![caller; 3]);
        engine
            .run_in_background()
            .expect("raising niceness needs no privilege");
        let after = engine.pool.broadcast(|_| nice());
        assert_eq!(after, vec![(caller + BACKGROUND_NICE).min(19); 3]);
        assert_eq!(nice(), caller, "the caller's own thread keeps its priority");
    }
}
