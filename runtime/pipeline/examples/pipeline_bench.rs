//! Images per second per core for every op and for the training pipeline
//! decode → random_resized_crop 224 → horizontal_flip → normalize, on ImageNet-sized JPEGs.
//!
//! `cargo run --release -p hetgen-pipeline --example pipeline_bench -- FIXTURES [SECONDS] [pipeline]`
//! writes the fixtures (64 deterministic 500×375 JPEGs, quality 90) into FIXTURES if they are
//! missing, so `bench/torchvision_pipeline.py` can time the same files; `bench/pipeline.sh`
//! runs both. Everything runs on one thread: the numbers are per core. The pipeline rows run
//! the engine itself (the ops a spec compiles to, the fused region decode included), then
//! `ops::normalize`, which the engine leaves to the trainer's device but torchvision's pipeline
//! does on the CPU. The allocator is tuned as in the processes that run the pipeline
//! (`HETGEN_DEFAULT_MALLOC=1` leaves glibc's defaults).

use std::f64::consts::{PI, TAU};
use std::path::Path;
use std::time::{Duration, Instant};

use hetgen_pipeline::image::{Image, Payload, Sample};
use hetgen_pipeline::source::Source;
use hetgen_pipeline::{Engine, SampleRng, StageRegistry, codec, ops};

const FILES: usize = 64;
const MEAN: [f64; 3] = [0.485, 0.456, 0.406];
const STD: [f64; 3] = [0.229, 0.224, 0.225];

/// A photo-like image: smooth colour fields, a few edges, mild noise (photos compress to
/// 40-150 kB at this size; pure noise would not be representative).
fn fixture(n: u64) -> Image {
    let (h, w) = (375u32, 500u32);
    let mut rng = SampleRng::new(2024, 0, n);
    let f: Vec<f64> = (0..9).map(|_| rng.uniform(0.5, 6.0)).collect();
    let mut image = Image::zeros(h, w, 3);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (f64::from(x) / f64::from(w), f64::from(y) / f64::from(h));
            for k in 0..3usize {
                let wave = (u * f[k] * TAU + v * f[k + 3] * PI).sin() * (v * f[k + 6] * TAU).cos();
                let edge = if (u - 0.3 * f[k] / 6.0).abs() < 0.1 {
                    60.0
                } else {
                    0.0
                };
                let value = 128.0 + 90.0 * wave + edge + rng.uniform(-6.0, 6.0);
                image.data[((y * w + x) * 3) as usize + k] = value.clamp(0.0, 255.0) as u8;
            }
        }
    }
    image
}

fn load(dir: &Path) -> Vec<Vec<u8>> {
    std::fs::create_dir_all(dir).expect("fixture folder");
    (0..FILES)
        .map(|n| {
            let path = dir.join(format!("{n:03}.jpg"));
            if !path.exists() {
                let bytes = codec::encode_jpeg(&fixture(n as u64), 90).expect("encode");
                std::fs::write(&path, bytes).expect("write fixture");
            }
            std::fs::read(&path).expect("read fixture")
        })
        .collect()
}

/// The fixtures as a source, read from memory so the rows time the pipeline, not the disk.
struct Files(Vec<Vec<u8>>);

impl Source for Files {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, id: u64) -> Result<Sample, String> {
        Ok(Sample {
            label: 0,
            payload: Payload::Encoded(self.0[id as usize].clone()),
        })
    }
}

/// The training pipeline of the comparison as a job: the `pipeline-bench` fixture spec (the one
/// `bench/pipeline.sh` profiles) at `size`×`size`, reading `source`.
fn job(size: u32, source: &str, batch_size: u32) -> hetgen_spec::Job {
    hetgen_fixtures::spec("pipeline-bench")
        .set_toml("pipeline.source", source)
        .set("pipeline.batch_size", batch_size)
        .set("pipeline.stage.1.size", [size, size])
        .job()
}

/// The training pipeline of the comparison over the fixtures in memory, at `size`×`size`.
fn engine(files: &[Vec<u8>], size: u32) -> Engine {
    let synthetic = format!(
        r#"{{ format = "synthetic", shape = [{size}, {size}, 3], classes = 10, samples = 64, encoding = "jpeg" }}"#
    );
    let source = Box::new(Files(files.to_vec()));
    let job = job(size, &synthetic, 1);
    Engine::with_source(&job, source, &StageRegistry::builtin(), Some(1)).expect("engine")
}

/// What `hetgen profile --threads 1` measures on the same pipeline: the engine reading the
/// fixtures as an image folder (ten class folders) in batches of 128, normalize left to the
/// trainer. Images per second.
fn profile(dir: &Path, budget: Duration) -> f64 {
    let folder = dir.join("image-folder");
    if !folder.exists() {
        for n in 0..FILES {
            let class = folder.join(format!("c{}", n % 10));
            std::fs::create_dir_all(&class).expect("image folder");
            std::fs::copy(
                dir.join(format!("{n:03}.jpg")),
                class.join(format!("{n:03}.jpg")),
            )
            .expect("copy fixture");
        }
    }
    let job = hetgen_fixtures::spec("pipeline-bench").job();
    let channels = [("train".to_owned(), folder)].into();
    let engine = Engine::new(&job, &StageRegistry::builtin(), &channels, Some(1)).expect("engine");
    let measured = hetgen_pipeline::profile::measure(
        &engine,
        job.seed,
        job.pipeline.shard_size,
        job.pipeline.batch_size,
        budget,
    )
    .expect("profile");
    measured.samples_per_s
}

/// One image through the engine, then normalised as torchvision's pipeline does.
fn through(engine: &Engine) -> impl FnMut(&u64, &mut SampleRng) + '_ {
    move |id, _| {
        let (image, _) = engine.sample(0, *id).unwrap();
        ops::normalize(&image, &MEAN, &STD);
    }
}

/// Runs `f` over the inputs round-robin for `budget`; images per second.
fn rate<T>(inputs: &[T], budget: Duration, mut f: impl FnMut(&T, &mut SampleRng)) -> f64 {
    let mut n = 0u64;
    for (i, input) in inputs.iter().enumerate().take(4) {
        f(input, &mut SampleRng::new(0, 0, i as u64));
    }
    // HETGEN_BENCH_IMAGES=N: exactly N images whatever the time, so that an instruction-counting
    // profiler (valgrind --tool=callgrind) sees the same work in every build.
    let count: Option<u64> = std::env::var("HETGEN_BENCH_IMAGES")
        .ok()
        .and_then(|n| n.parse().ok());
    let start = Instant::now();
    while count.map_or(start.elapsed() < budget, |count| n < count) {
        let mut rng = SampleRng::new(1, 0, n);
        f(&inputs[n as usize % inputs.len()], &mut rng);
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .unwrap_or_else(|| "target/bench-fixtures".to_owned());
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let budget = Duration::from_secs_f64(seconds);
    // As in the data server and the launcher, which run this pipeline;
    // HETGEN_DEFAULT_MALLOC=1 measures glibc's defaults instead.
    if std::env::var_os("HETGEN_DEFAULT_MALLOC").is_none() {
        hetgen_pipeline::tune_allocator();
    }
    let dir = Path::new(&dir);
    let files = load(dir);
    if let Some(line) = args
        .next()
        .and_then(|mode| one_rate(&mode, &files, dir, budget))
    {
        println!("{line}");
        return;
    }
    let kb = files.iter().map(Vec::len).sum::<usize>() as f64 / files.len() as f64 / 1024.0;
    let images: Vec<Image> = files
        .iter()
        .map(|b| codec::decode(b, 3).expect("decode"))
        .collect();
    let mut rows = decode_rows(&files, budget);
    rows.extend(op_rows(&images, budget));
    let (pipeline, split) = pipeline_rows(&files, dir, budget, &mut rows);

    println!(
        "fixtures: {} JPEGs 500×375, mean {kb:.0} kB, in {}",
        files.len(),
        dir.display()
    );
    println!("| op (one core) | images/s |");
    println!("|---|---:|");
    for (name, r) in &rows {
        println!("| {name} | {r:.0} |");
    }
    println!(
        "engine CPU time per image at 224 (normalize not included): {}",
        split.join(", ")
    );
    println!("hetgen-pipeline-rate {pipeline:.1}");
}

/// The one rate a `mode` argument asks for, as the line `bench/pipeline.sh`'s alternating
/// rounds read; `None` for the whole table.
fn one_rate(mode: &str, files: &[Vec<u8>], dir: &Path, budget: Duration) -> Option<String> {
    let ids: Vec<u64> = (0..files.len() as u64).collect();
    match mode {
        // Only the 224 pipeline's rate.
        "pipeline" => {
            let rate = rate(&ids, budget, through(&engine(files, 224)));
            Some(format!("hetgen-pipeline-rate {rate:.1}"))
        }
        // The decode + random_resized_crop op alone, to set beside `profile` in rounds.
        "fused" => {
            let (scale, ratio) = ([0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0]);
            let rate = rate(files, budget, |b, rng| {
                let choose = |h, w| ops::random_resized_crop_rect(h, w, scale, ratio, rng);
                codec::decode_resized(b, 3, choose, [224, 224]).unwrap();
            });
            Some(format!("hetgen-fused-rate {rate:.1}"))
        }
        // What `hetgen profile --threads 1` reports, for the same rounds.
        "profile" => Some(format!("hetgen-profile-rate {:.1}", profile(dir, budget))),
        _ => None,
    }
}

/// Decoding the JPEGs: whole, at every DCT scale, the entropy decode alone, and the fused
/// region decode of `random_resized_crop`.
fn decode_rows(files: &[Vec<u8>], budget: Duration) -> Vec<(String, f64)> {
    let (scale, ratio) = ([0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0]);
    let mut rows: Vec<(String, f64)> = Vec::new();
    rows.push((
        "decode (full, libjpeg-turbo)".to_owned(),
        rate(files, budget, |b, _| {
            codec::decode(b, 3).unwrap();
        }),
    ));
    // Every DCT scale libjpeg-turbo offers, on the whole image: which are worth using.
    for scale in (1..=8).rev() {
        let (h, w) = (
            codec::jpeg::scaled(375, scale),
            codec::jpeg::scaled(500, scale),
        );
        let window = codec::jpeg::Window {
            scale,
            top: 0,
            left: 0,
            height: h,
            width: w,
        };
        let name = format!("decode at {scale}/8 scale ({w}×{h})");
        let r = rate(files, budget, |b, _| {
            codec::jpeg::decode_window(b, 3, window).unwrap();
        });
        rows.push((name, r));
    }
    // Only the last row: libjpeg entropy-decodes everything above it and reconstructs one row,
    // the floor for any crop that reaches the bottom.
    let last_row = codec::jpeg::Window {
        scale: 8,
        top: 374,
        left: 0,
        height: 1,
        width: 500,
    };
    rows.push((
        "entropy decode only (the last row)".to_owned(),
        rate(files, budget, |b, _| {
            codec::jpeg::decode_window(b, 3, last_row).unwrap();
        }),
    ));
    rows.push((
        "decode + random_resized_crop 224 (region decode)".to_owned(),
        rate(files, budget, |b, rng| {
            let choose = |h, w| ops::random_resized_crop_rect(h, w, scale, ratio, rng);
            codec::decode_resized(b, 3, choose, [224, 224]).unwrap();
        }),
    ));
    rows
}

/// Every pixel op on decoded images: the resizing ones on the full images, the rest at 224.
fn op_rows(images: &[Image], budget: Duration) -> Vec<(String, f64)> {
    let (scale, ratio) = ([0.08, 1.0], [3.0 / 4.0, 4.0 / 3.0]);
    let mut rows: Vec<(String, f64)> = Vec::new();
    rows.push((
        "resize 224×224".to_owned(),
        rate(images, budget, |im, _| {
            ops::resize(im, [224, 224]).unwrap();
        }),
    ));
    rows.push((
        "center_crop 224".to_owned(),
        rate(images, budget, |im, _| {
            ops::center_crop(im, [224, 224]);
        }),
    ));
    rows.push((
        "random_resized_crop 224".to_owned(),
        rate(images, budget, |im, rng| {
            let r = ops::random_resized_crop_rect(im.height, im.width, scale, ratio, rng);
            ops::resize_region(im, r, 224, 224).unwrap();
        }),
    ));
    let small: Vec<Image> = images
        .iter()
        .map(|im| ops::resize(im, [224, 224]).unwrap())
        .collect();
    rows.push((
        "horizontal_flip (224)".to_owned(),
        rate(&small, budget, |im, _| {
            let mut im = im.clone();
            ops::flip(&mut im);
        }),
    ));
    rows.push((
        "color_jitter 0.4 (224)".to_owned(),
        rate(&small, budget, |im, rng| {
            let mut im = im.clone();
            ops::color_jitter(&mut im, 0.4, 0.4, 0.4, rng);
        }),
    ));
    rows.push((
        "gaussian_blur k=5 (224)".to_owned(),
        rate(&small, budget, |im, rng| {
            ops::gaussian_blur(im, 5, [0.1, 2.0], rng);
        }),
    ));
    rows.push((
        "random_erasing p=1 (224)".to_owned(),
        rate(&small, budget, |im, rng| {
            let mut im = im.clone();
            ops::random_erasing(&mut im, 1.0, [0.02, 0.33], [0.3, 3.3], 0, rng);
        }),
    ));
    rows.push((
        "normalize to f32 CHW (224)".to_owned(),
        rate(&small, budget, |im, _| {
            ops::normalize(im, &MEAN, &STD);
        }),
    ));
    rows
}

/// The whole pipeline: at 224 through the engine, as `hetgen profile` runs it, and at 96.
/// Adds its rows to `rows`; returns the 224 rate and the engine's time per image by stage.
fn pipeline_rows(
    files: &[Vec<u8>],
    dir: &Path,
    budget: Duration,
    rows: &mut Vec<(String, f64)>,
) -> (f64, Vec<String>) {
    let ids: Vec<u64> = (0..files.len() as u64).collect();
    let at_224 = engine(files, 224);
    let pipeline = rate(&ids, budget, through(&at_224));
    let per_image = |d: Duration| d.as_secs_f64() * 1e3 / at_224.samples_done() as f64;
    let split: Vec<String> = at_224
        .stage_times()
        .into_iter()
        .map(|(stage, time)| format!("{stage} {:.3} ms", per_image(time)))
        .collect();
    rows.push((
        "pipeline: decode, random_resized_crop 224, flip, normalize".to_owned(),
        pipeline,
    ));
    rows.push((
        "the same as `hetgen profile --threads 1` runs it: image folder, batches of 128, no normalize"
            .to_owned(),
        profile(dir, budget),
    ));
    rows.push((
        "the same at 96×96".to_owned(),
        rate(&ids, budget, through(&engine(files, 96))),
    ));
    (pipeline, split)
}
