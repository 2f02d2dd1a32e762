//! Where samples come from: a class-folder tree, WebDataset tar shards, or generated images.
//!
//! Sources index their files once at start-up (sorted, so every server numbers the samples the
//! same way) and then read sample `id` on demand from any thread.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use hetgen_spec::model::{ImageEncoding, Source as SourceSpec};

use crate::codec;
use crate::error::PipelineError;
use crate::image::{Image, Payload, Sample};
use crate::rng::SampleRng;

/// A random-access set of samples.
pub trait Source: Send + Sync {
    /// Samples per epoch.
    fn len(&self) -> u64;
    /// Whether the source holds no sample (sources refuse to open empty).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Read sample `id` (`id < len()`).
    fn read(&self, id: u64) -> Result<Sample, String>;
}

/// Open the spec's source, reading channel folders from `channels`.
pub fn open(
    spec: &SourceSpec,
    seed: u64,
    channels: &BTreeMap<String, PathBuf>,
) -> Result<Box<dyn Source>, PipelineError> {
    let folder = |name: &str| {
        channels
            .get(name)
            .cloned()
            .ok_or_else(|| PipelineError::NoChannel(name.to_owned()))
    };
    Ok(match spec {
        SourceSpec::ImageFolder { channel } => Box::new(ImageFolder::open(&folder(channel)?)?),
        SourceSpec::TarShards { channel } => Box::new(TarShards::open(&folder(channel)?)?),
        SourceSpec::Synthetic {
            shape,
            classes,
            samples,
            encoding,
        } => Box::new(Synthetic {
            seed,
            shape: *shape,
            classes: (*classes).max(1),
            samples: *samples,
            encoding: *encoding,
        }),
        SourceSpec::Python { dataset, .. } => {
            return Err(PipelineError::NotImages(dataset.to_string()));
        }
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PipelineError + '_ {
    move |source| PipelineError::Io {
        path: path.to_owned(),
        source,
    }
}

fn is_image(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("jpg" | "jpeg" | "png")
    )
}

/// `root/<class>/<image>`: the label is the class folder's index in sorted order.
pub struct ImageFolder {
    files: Vec<(PathBuf, i64)>,
}

impl ImageFolder {
    /// Index `root`.
    pub fn open(root: &Path) -> Result<Self, PipelineError> {
        let mut classes: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(io(root))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        classes.sort();
        let mut files = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let mut images: Vec<PathBuf> = std::fs::read_dir(class)
                .map_err(io(class))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && is_image(p))
                .collect();
            images.sort();
            files.extend(images.into_iter().map(|p| (p, label as i64)));
        }
        if files.is_empty() {
            return Err(PipelineError::EmptySource {
                path: root.to_owned(),
                why:
                    "no images found: expected class sub-folders holding .jpg, .jpeg or .png files"
                        .to_owned(),
            });
        }
        Ok(Self { files })
    }
}

impl Source for ImageFolder {
    fn len(&self) -> u64 {
        self.files.len() as u64
    }

    fn read(&self, id: u64) -> Result<Sample, String> {
        let (path, label) = &self.files[id as usize];
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Sample {
            label: *label,
            payload: Payload::Encoded(bytes),
        })
    }
}

/// WebDataset shards: `*.tar` files whose members `key.jpg|jpeg|png` and `key.cls` (the class
/// index as text) form one sample. Members are read in place with positioned reads.
pub struct TarShards {
    tars: Vec<(PathBuf, File)>,
    samples: Vec<TarSample>,
}

struct TarSample {
    tar: usize,
    offset: u64,
    len: u64,
    label: i64,
}

impl TarShards {
    /// Index every `*.tar` under `root` (sorted by name).
    pub fn open(root: &Path) -> Result<Self, PipelineError> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root)
            .map_err(io(root))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "tar"))
            .collect();
        paths.sort();
        let mut tars = Vec::new();
        let mut samples = Vec::new();
        for path in paths {
            let bad = |why: String| PipelineError::BadData {
                path: path.clone(),
                why,
            };
            let mut archive = tar::Archive::new(File::open(&path).map_err(io(&path))?);
            // key → (image offset, length) and key → label, in member order.
            let mut images: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            let mut labels: BTreeMap<String, i64> = BTreeMap::new();
            for entry in archive.entries().map_err(io(&path))? {
                let mut entry = entry.map_err(io(&path))?;
                let name = entry
                    .path()
                    .map_err(io(&path))?
                    .to_string_lossy()
                    .into_owned();
                let Some((key, ext)) = name.rsplit_once('.') else {
                    continue;
                };
                match ext.to_ascii_lowercase().as_str() {
                    "jpg" | "jpeg" | "png" => {
                        images.insert(key.to_owned(), (entry.raw_file_position(), entry.size()));
                    }
                    "cls" => {
                        let mut text = String::new();
                        std::io::Read::read_to_string(&mut entry, &mut text).map_err(io(&path))?;
                        let label = text.trim().parse().map_err(|_| {
                            bad(format!(
                                "`{name}` holds `{}`, not a class index",
                                text.trim()
                            ))
                        })?;
                        labels.insert(key.to_owned(), label);
                    }
                    _ => {}
                }
            }
            let tar = tars.len();
            for (key, (offset, len)) in images {
                let label = *labels
                    .get(&key)
                    .ok_or_else(|| bad(format!("`{key}` has an image but no `{key}.cls` label")))?;
                samples.push(TarSample {
                    tar,
                    offset,
                    len,
                    label,
                });
            }
            let file = File::open(&path).map_err(io(&path))?;
            tars.push((path, file));
        }
        if samples.is_empty() {
            return Err(PipelineError::EmptySource {
                path: root.to_owned(),
                why: "no samples found: expected .tar shards holding `key.jpg` (or .png) with `key.cls`".to_owned(),
            });
        }
        Ok(Self { tars, samples })
    }
}

impl Source for TarShards {
    fn len(&self) -> u64 {
        self.samples.len() as u64
    }

    fn read(&self, id: u64) -> Result<Sample, String> {
        use std::os::unix::fs::FileExt;
        let s = &self.samples[id as usize];
        let (path, file) = &self.tars[s.tar];
        let mut bytes = vec![0; s.len as usize];
        file.read_exact_at(&mut bytes, s.offset)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Sample {
            label: s.label,
            payload: Payload::Encoded(bytes),
        })
    }
}

/// The epoch under which synthetic content is drawn: content is the same every epoch, while
/// augmentations (drawn under the real epoch) differ.
const CONTENT_EPOCH: u32 = u32::MAX;

/// Generated images: a learnable class pattern (a bright square whose position and colour
/// depend on the class) over a gradient and noise. Labels cycle through the classes.
pub struct Synthetic {
    seed: u64,
    shape: [u32; 3],
    classes: u32,
    samples: u64,
    encoding: Option<ImageEncoding>,
}

impl Synthetic {
    /// The pixels of sample `id`.
    pub fn pixels(&self, id: u64) -> (Image, i64) {
        let [h, w, c] = self.shape;
        let label = (id % u64::from(self.classes)) as u32;
        let mut rng = SampleRng::new(self.seed, CONTENT_EPOCH, id);
        let grid = (f64::from(self.classes).sqrt().ceil() as u32).max(1);
        let (cell_h, cell_w) = ((h / grid).max(1), (w / grid).max(1));
        let (top, left) = ((label / grid) * cell_h, (label % grid) * cell_w);
        let mut image = Image::zeros(h, w, c);
        for y in 0..h {
            for x in 0..w {
                let inside = y >= top && y < top + cell_h && x >= left && x < left + cell_w;
                for k in 0..c {
                    let base = (x * 96 / w.max(1) + k * 16) as u64;
                    let noise = rng.below(48);
                    let v = if inside {
                        // Colour by class on RGB so colour alone carries signal too.
                        let tint = if c == 3 && (label + k).is_multiple_of(3) {
                            40
                        } else {
                            0
                        };
                        200 + tint.min(55) + noise.min(15)
                    } else {
                        base + noise
                    };
                    image.data[((y * w + x) * c + k) as usize] = v.min(255) as u8;
                }
            }
        }
        (image, i64::from(label))
    }
}

impl Source for Synthetic {
    fn len(&self) -> u64 {
        self.samples
    }

    fn read(&self, id: u64) -> Result<Sample, String> {
        let (image, label) = self.pixels(id);
        let payload = match self.encoding {
            None => Payload::Pixels(image),
            Some(ImageEncoding::Jpeg) => Payload::Encoded(codec::encode_jpeg(&image, 90)?),
            Some(ImageEncoding::Png) => Payload::Encoded(codec::encode_png(&image)?),
        };
        Ok(Sample { label, payload })
    }
}
