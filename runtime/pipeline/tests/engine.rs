//! The engine over real files and generated data: shapes, labels, determinism, errors, and a
//! golden output on a fixture image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetgen_pipeline::codec::{encode_jpeg, encode_png};
use hetgen_pipeline::{
    Batch, BatchStream, Contents, Engine, Image, InputConfig, LocalInput, PipelineError, ShardWork,
    StageRegistry,
};
use hetgen_spec::model::Job;
use proptest::prelude::*;

#[path = "engine/python.rs"]
mod python;
mod python_workers;

/// The shape and labels of a batch of built-in images.
fn images(batch: &Batch) -> ([u32; 3], &[i64]) {
    match &batch.contents {
        Contents::Images { shape, labels } => (*shape, labels),
        Contents::Tensors { .. } => panic!("a batch of tensors where images were due: {batch:?}"),
    }
}

/// The `pipeline-test` fixture job reading `source` in batches of `batch`, through `stages`
/// (a TOML array of stage tables, one a line as a spec writes them; `[]` for none).
fn job(source: &str, batch: u32, stages: &str) -> Job {
    hetgen_fixtures::spec("pipeline-test")
        .set_toml("pipeline.source", source)
        .set("pipeline.batch_size", batch)
        .set_toml("pipeline.stage", stages)
        .job()
}

fn engine(job: &Job, channels: &BTreeMap<String, PathBuf>, threads: usize) -> Engine {
    Engine::new(job, &StageRegistry::builtin(), channels, Some(threads)).unwrap()
}

/// An engine over `format` files (`image-folder`, `tar-shards`) in `dir`, the job's channel
/// `train`.
fn files_engine(format: &str, dir: &Path, batch: u32, stages: &str, threads: usize) -> Engine {
    let channels = BTreeMap::from([("train".to_owned(), dir.to_owned())]);
    let source = format!(r#"{{ format = "{format}", channel = "train" }}"#);
    engine(&job(&source, batch, stages), &channels, threads)
}

fn shard(engine: &Engine, epoch: u32, ids: &[u64], batch: u32) -> Vec<Batch> {
    let mut out = Vec::new();
    engine
        .run_shard(
            ShardWork {
                epoch,
                shard: 0,
                ids,
                batch_size: batch,
            },
            &mut |b| {
                out.push(b);
                true
            },
        )
        .unwrap();
    out
}

fn gradient(h: u32, w: u32, c: u32, tint: u32) -> Image {
    let data = (0..h * w * c)
        .map(|i| ((i / c % w) * 7 + (i / c / w) * 3 + (i % c) * 50 + tint) as u8)
        .collect();
    Image {
        height: h,
        width: w,
        channels: c,
        data,
    }
}

/// `root/<class>/<n>.png|jpg`, classes `a`, `b`, `c`.
fn image_folder(root: &Path) {
    for (k, class) in ["a", "b", "c"].iter().enumerate() {
        let dir = root.join(class);
        std::fs::create_dir_all(&dir).unwrap();
        for n in 0..4u32 {
            let image = gradient(20 + n, 30, 3, k as u32 * 40);
            let (name, bytes) = if n % 2 == 0 {
                (format!("{n}.png"), encode_png(&image).unwrap())
            } else {
                (format!("{n}.jpg"), encode_jpeg(&image, 90).unwrap())
            };
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "not an image").unwrap();
    }
}

const DECODE_RESIZE: &str = r#"[
    { op = "decode" },
    { op = "resize", size = [8, 8] },
    { op = "normalize", mean = [0.5, 0.5, 0.5], std = [0.5, 0.5, 0.5] },
]"#;

#[test]
fn image_folder_labels_are_sorted_class_indices() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path());
    let engine = files_engine("image-folder", dir.path(), 5, DECODE_RESIZE, 2);
    assert_eq!(engine.samples_per_epoch(), 12);
    let ids: Vec<u64> = (0..12).collect();
    let batches = shard(&engine, 0, &ids, 5);
    assert_eq!(
        batches.iter().map(Batch::len).collect::<Vec<_>>(),
        vec![5, 5, 2]
    );
    let labels: Vec<i64> = batches.iter().flat_map(|b| images(b).1.to_vec()).collect();
    assert_eq!(labels, vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    assert!(
        batches
            .iter()
            .all(|b| b.data.len() == b.len() * 8 * 8 * 3 && images(b).0 == [8, 8, 3])
    );
    // normalize is left to the trainer's device: the stage list compiles without it, and the
    // decode fuses with the resize after it.
    let names: Vec<String> = engine.stage_times().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["source", "decode+resize"]);
}

#[test]
fn tar_shards_pair_images_with_their_cls_members() {
    let dir = tempfile::tempdir().unwrap();
    let mut builder =
        tar::Builder::new(std::fs::File::create(dir.path().join("shard-000.tar")).unwrap());
    for (key, label) in [("s0", 2), ("s1", 0), ("s2", 1)] {
        let png = encode_png(&gradient(9, 9, 3, label * 10)).unwrap();
        for (name, bytes) in [
            (format!("{key}.png"), png),
            (format!("{key}.cls"), format!("{label}\n").into_bytes()),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, &bytes[..]).unwrap();
        }
    }
    builder.finish().unwrap();
    drop(builder);
    let engine = files_engine("tar-shards", dir.path(), 3, DECODE_RESIZE, 1);
    assert_eq!(engine.samples_per_epoch(), 3);
    let batches = shard(&engine, 0, &[0, 1, 2], 3);
    assert_eq!(images(&batches[0]).1, [2, 0, 1]);
}

#[test]
fn a_corrupt_file_fails_naming_the_sample_and_stage() {
    let dir = tempfile::tempdir().unwrap();
    image_folder(dir.path());
    std::fs::write(dir.path().join("a/0.png"), b"\x89PNG\r\n\x1a\nbroken").unwrap();
    let engine = files_engine("image-folder", dir.path(), 4, DECODE_RESIZE, 1);
    let err = engine
        .run_shard(
            ShardWork {
                epoch: 0,
                shard: 0,
                ids: &[1, 0],
                batch_size: 4,
            },
            &mut |_| true,
        )
        .unwrap_err();
    assert!(
        matches!(&err, PipelineError::Sample { sample: 0, stage, .. } if stage == "decode+resize"),
        "{err}"
    );
    assert!(err.to_string().contains("PNG"), "{err}");
}

#[test]
fn missing_channels_and_unknown_custom_stages_are_clear_errors() {
    let job1 = job(
        r#"{ format = "image-folder", channel = "train" }"#,
        4,
        DECODE_RESIZE,
    );
    let err = Engine::new(&job1, &StageRegistry::builtin(), &BTreeMap::new(), Some(1))
        .err()
        .unwrap();
    assert!(err.to_string().contains("channel `train`"), "{err}");
    let custom = r#"[{ op = "custom", name = "sharpen" }]"#;
    let job2 = job(
        r#"{ format = "synthetic", shape = [8, 8, 3], classes = 2, samples = 10 }"#,
        4,
        custom,
    );
    let err = Engine::new(&job2, &StageRegistry::builtin(), &BTreeMap::new(), Some(1))
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("`sharpen` is not registered (known: invert)"),
        "{err}"
    );
}

#[test]
fn custom_stages_run_from_the_registry() {
    let custom = r#"[{ op = "custom", name = "invert" }]"#;
    let plain = job(
        r#"{ format = "synthetic", shape = [6, 6, 3], classes = 2, samples = 10 }"#,
        4,
        "[]",
    );
    let inverted = job(
        r#"{ format = "synthetic", shape = [6, 6, 3], classes = 2, samples = 10 }"#,
        4,
        custom,
    );
    let none = BTreeMap::new();
    let a = shard(&engine(&plain, &none, 1), 0, &[3], 1);
    let b = shard(&engine(&inverted, &none, 1), 0, &[3], 1);
    assert!(
        a[0].data
            .iter()
            .zip(&b[0].data)
            .all(|(x, y)| *x == 255 - *y)
    );
}

const AUGMENT: &str = r#"[
    { op = "decode" },
    { op = "random_resized_crop", size = [12, 12] },
    { op = "horizontal_flip" },
    { op = "color_jitter", brightness = 0.3, contrast = 0.3, saturation = 0.3 },
    { op = "random_erasing", p = 0.5 },
]"#;

#[test]
fn a_sample_does_not_depend_on_thread_count_batch_or_position() {
    let job = job(
        r#"{ format = "synthetic", shape = [20, 24, 3], classes = 3, samples = 40, encoding = "jpeg" }"#,
        4,
        AUGMENT,
    );
    let none = BTreeMap::new();
    let one = engine(&job, &none, 1);
    let two = engine(&job, &none, 2);
    let by_id = |batches: Vec<Batch>| -> BTreeMap<u64, Vec<u8>> {
        let mut out = BTreeMap::new();
        for b in batches {
            for (i, id) in b.sample_ids.iter().enumerate() {
                out.insert(*id, b.data[i * 12 * 12 * 3..(i + 1) * 12 * 12 * 3].to_vec());
            }
        }
        out
    };
    let a = by_id(shard(&one, 1, &[5, 9, 2, 30, 7], 2));
    let b = by_id(shard(&two, 1, &[30, 7, 5, 2, 9], 5));
    assert_eq!(a, b);
    // Another epoch draws other augmentations.
    let c = by_id(shard(&one, 2, &[5, 9, 2, 30, 7], 5));
    assert_ne!(a, c);
}

#[test]
fn local_input_resumes_exactly_after_a_position() {
    let job = job(
        r#"{ format = "synthetic", shape = [4, 4, 1], classes = 2, samples = 55 }"#,
        4,
        "[]",
    );
    let engine = Arc::new(engine(&job, &BTreeMap::new(), 1));
    let config = InputConfig {
        seed: 5,
        samples_per_epoch: 55,
        shards: None,
        shard_size: 10,
        batch_size: 4,
        epochs: Some(2),
        rank: 0,
        world: 1,
        deterministic: true,
    };
    let all: Vec<Batch> = {
        let mut input = LocalInput::new(engine.clone(), config.clone(), None);
        std::iter::from_fn(|| input.next_batch())
            .map(Result::unwrap)
            .collect()
    };
    // 6 shards per epoch: 5 of 10 samples (3 batches) and one of 5 (2 batches).
    assert_eq!(all.len(), 2 * (5 * 3 + 2));
    for cut in [1, 7, 17, 20] {
        let mut first = LocalInput::new(engine.clone(), config.clone(), None);
        for _ in 0..cut {
            first.next_batch().unwrap().unwrap();
        }
        let position = first.position();
        drop(first);
        let mut rest = LocalInput::new(engine.clone(), config.clone(), Some(position));
        let tail: Vec<Batch> = std::iter::from_fn(|| rest.next_batch())
            .map(Result::unwrap)
            .collect();
        assert_eq!(tail, all[cut..], "resumed after {cut} batches");
    }
}

/// decode → center_crop → horizontal_flip (always) → resize 6×6 → gaussian_blur on a PNG
/// fixture, compared byte for byte with `tests/golden/fixture-6x6.hex`. Regenerate with
/// `HETGEN_UPDATE_GOLDEN=1` after an intended change, and say why in the commit.
#[test]
fn golden_output_on_a_fixture_image() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("only");
    std::fs::create_dir_all(&class).unwrap();
    std::fs::write(
        class.join("fixture.png"),
        encode_png(&gradient(17, 23, 3, 9)).unwrap(),
    )
    .unwrap();
    let stages = r#"[
        { op = "decode" },
        { op = "center_crop", size = [15, 15] },
        { op = "horizontal_flip", p = 1.0 },
        { op = "resize", size = [6, 6] },
        { op = "gaussian_blur", kernel = 3, sigma = [0.8, 0.8] },
    ]"#;
    let engine = files_engine("image-folder", dir.path(), 1, stages, 1);
    let batch = shard(&engine, 0, &[0], 1).remove(0);
    let hex: String = batch
        .data
        .chunks(18)
        .map(|row| row.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
        .collect();
    let golden = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/golden/fixture-6x6.hex");
    if std::env::var_os("HETGEN_UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &hex).unwrap();
    }
    assert_eq!(
        hex,
        std::fs::read_to_string(&golden).expect("golden file; run with HETGEN_UPDATE_GOLDEN=1")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_crop_gives_the_output_shape_deterministically(
        h in 6u32..48, w in 6u32..48, c in prop::sample::select(vec![1u32, 3]),
        out_h in 2u32..24, out_w in 2u32..24, lo in 0.05f64..0.9, id in 0u64..1000,
        encoding in prop::sample::select(vec!["png", "jpeg"]),
    ) {
        let stages = format!(r#"[
            {{ op = "decode", channels = {c} }},
            {{ op = "random_resized_crop", size = [{out_h}, {out_w}], scale = [{lo}, 1.0] }},
            {{ op = "horizontal_flip" }},
        ]"#);
        let job = job(&format!(r#"{{ format = "synthetic", shape = [{h}, {w}, 3], classes = 4, samples = 1000, encoding = "{encoding}" }}"#), 1, &stages);
        let engine = engine(&job, &BTreeMap::new(), 1);
        let (image, label) = engine.sample(3, id).unwrap();
        prop_assert_eq!(image.shape(), [out_h, out_w, c]);
        prop_assert_eq!(image.data.len(), (out_h * out_w * c) as usize);
        prop_assert_eq!(label, (id % 4) as i64);
        prop_assert_eq!(engine.sample(3, id).unwrap().0, image);
    }

    /// Data servers decode whatever the dataset holds: a damaged JPEG is an error or an image
    /// of the asked-for shape, never a crash, whatever region is asked for.
    #[test]
    fn damaged_jpegs_fail_cleanly_in_the_region_decoder(
        cut in 0usize..3000, flips in prop::collection::vec((0usize..3000, any::<u8>()), 0..6),
        top in 0.0f64..40.0, left in 0.0f64..50.0, side in 1.0f64..40.0, size in 1u32..30,
    ) {
        let mut bytes = encode_jpeg(&gradient(40, 52, 3, 5), 85).unwrap();
        for (at, value) in flips {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        bytes.truncate(cut.max(2).min(bytes.len()));
        let choose = |h: u32, w: u32| hetgen_pipeline::ops::Rect {
            top: top.min(f64::from(h) - 1.0),
            left: left.min(f64::from(w) - 1.0),
            height: side.min(f64::from(h) - top.min(f64::from(h) - 1.0)),
            width: side.min(f64::from(w) - left.min(f64::from(w) - 1.0)),
        };
        if let Ok(image) = hetgen_pipeline::codec::decode_resized(&bytes, 3, choose, [size, size]) {
            prop_assert_eq!(image.shape(), [size, size, 3]);
        }
        let _ = hetgen_pipeline::codec::decode(&bytes, 1);
    }
}
