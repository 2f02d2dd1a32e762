//! `hetgen new NAME [--example E]`: a project folder with a commented spec (and, for the
//! `pytorch` examples, the training script, the dataset and the digits data).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::{Example, NewArgs};
use crate::exit::Failure;

/// Where a new project keeps the schema its `#:schema` line points at, so editors complete
/// keys offline.
const SCHEMA_PATH: &str = ".hetgen/hetgen.schema.json";

/// The example's spec text and the job name it uses.
fn example(example: Example) -> (&'static str, &'static str) {
    match example {
        Example::TinyLocal => (
            include_str!("../../../../examples/tiny-local.toml"),
            "tiny-local",
        ),
        Example::MnistHetero => (
            include_str!("../../../../examples/mnist-hetero.toml"),
            "mnist-hetero",
        ),
        Example::MnistHomogeneous => (
            include_str!("../../../../examples/mnist-homogeneous.toml"),
            "mnist-homogeneous",
        ),
        Example::Resnet50P4d => (
            include_str!("../../../../examples/resnet50-p4d.toml"),
            "resnet50-p4d",
        ),
        Example::Pytorch => (
            include_str!("../../../../examples/pytorch/hetgen.toml"),
            "pytorch-digits",
        ),
        Example::PytorchDataset => (
            include_str!("../../../../examples/pytorch-dataset/hetgen.toml"),
            "pytorch-dataset",
        ),
        Example::PytorchShards => (
            include_str!("../../../../examples/pytorch-shards/hetgen.toml"),
            "pytorch-shards",
        ),
    }
}

/// The `pytorch` example's script.
const PYTORCH_SCRIPT: &str = include_str!("../../../../examples/pytorch/train.py");
/// The `pytorch-dataset` example's script and its dataset.
const DATASET_SCRIPT: &str = include_str!("../../../../examples/pytorch-dataset/train.py");
const DATASET_MODULE: &str = include_str!("../../../../examples/pytorch-dataset/data.py");
/// Its training set written with `hetgen.image` instead of torchvision.
const DATASET_HETGEN_MODULE: &str =
    include_str!("../../../../examples/pytorch-dataset/data_hetgen.py");

/// The `pytorch-shards` example: its script, its reader and the script that writes its shards.
const SHARDS_FILES: [(&str, &str); 3] = [
    (
        "train.py",
        include_str!("../../../../examples/pytorch-shards/train.py"),
    ),
    (
        "data.py",
        include_str!("../../../../examples/pytorch-shards/data.py"),
    ),
    (
        "make_shards.py",
        include_str!("../../../../examples/pytorch-shards/make_shards.py"),
    ),
];

/// The digits data set: one CSV line per 8×8 image, 64 values from 0 to 16, then the label.
const DIGITS_CSV_GZ: &[u8] = include_bytes!("../../../../datasets/digits/digits.csv.gz");

/// The digits as `data/{train,test}/<label>/<n>.png`, every fifth image held out for `test`,
/// the values scaled by 16 to bytes.
fn digits() -> Vec<(String, Vec<u8>)> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
        .read_to_string(&mut text)
        .expect("the bundled digits data is gzipped UTF-8");
    let mut files = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let values: Vec<u32> = line
            .split(',')
            .map(|v| v.trim().parse().expect("the bundled digits are numbers"))
            .collect();
        let (pixels, label) = values.split_at(64);
        let split = if n % 5 == 0 { "test" } else { "train" };
        let gray: Vec<u8> = pixels.iter().map(|v| (v * 16).min(255) as u8).collect();
        let png = encode_gray_png(8, 8, &gray);
        files.push((format!("data/{split}/{}/{n:04}.png", label[0]), png));
    }
    files
}

/// An 8-bit grayscale PNG, as the built-in pipeline's decoder reads it.
fn encode_gray_png(width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .expect("writing to memory cannot fail");
    writer
        .write_image_data(pixels)
        .expect("the pixels fill the image");
    writer.finish().expect("writing to memory cannot fail");
    out
}

/// The example's spec, renamed to `name`, with its `#:schema` line pointing into the project.
pub fn spec_text(which: Example, name: &str) -> String {
    let (text, example_name) = example(which);
    let renamed = text.replacen(
        &format!("\nname = \"{example_name}\"\n"),
        &format!("\nname = \"{name}\"\n"),
        1,
    );
    match renamed.split_once('\n') {
        Some((first, rest)) if first.starts_with("#:schema ") => {
            format!("#:schema {SCHEMA_PATH}\n{rest}")
        }
        _ => renamed,
    }
}

pub fn run(args: &NewArgs) -> Result<ExitCode, Failure> {
    let name = args.name.trim_end_matches('/');
    let job_name = Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !valid_name(job_name) {
        return Err(Failure::BadName {
            name: job_name.to_owned(),
        });
    }
    let root = PathBuf::from(name);
    if root.exists() {
        return Err(Failure::Exists { path: root });
    }
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            "hetgen.toml".into(),
            spec_text(args.example, job_name).into(),
        ),
        (".gitignore".into(), "/build/\n".into()),
        (SCHEMA_PATH.into(), hetgen_spec::schema().into()),
    ];
    match args.example {
        Example::Pytorch => {
            files.push(("train.py".into(), PYTORCH_SCRIPT.into()));
            files.extend(digits());
        }
        Example::PytorchDataset => {
            files.push(("train.py".into(), DATASET_SCRIPT.into()));
            files.push(("data.py".into(), DATASET_MODULE.into()));
            files.push(("data_hetgen.py".into(), DATASET_HETGEN_MODULE.into()));
            files.extend(digits());
        }
        Example::PytorchShards => {
            files.extend(SHARDS_FILES.map(|(name, text)| (name.into(), text.into())));
            files.extend(digits());
        }
        _ => {}
    }
    // Stage everything in a sibling folder and rename it into place, so a failure never
    // leaves a half-made project behind.
    let staging = root.with_file_name(format!(".{job_name}.hetgen-new"));
    let create = |path: &Path, source| Failure::Create {
        path: path.to_owned(),
        source,
    };
    let result = (|| {
        for (rel, contents) in &files {
            let path = staging.join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| create(&path, e))?;
            }
            fs::write(&path, contents).map_err(|e| create(&path, e))?;
        }
        fs::rename(&staging, &root).map_err(|e| create(&root, e))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result?;
    eprintln!(
        "created `{}` from the `{}` example",
        root.display(),
        example(args.example).1
    );
    let first = match args.example {
        Example::PytorchShards => " && python make_shards.py",
        _ => "",
    };
    eprintln!(
        "next: cd {}{first} && hetgen validate && hetgen render",
        root.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A job name that leaves room for deploy's unique suffix.
fn valid_name(name: &str) -> bool {
    let limit = 63 - hetgen_spec::model::NAME_SUFFIX_LEN;
    !name.is_empty()
        && name.len() <= limit
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}
