//! Input data as the Python workers build it (workers/ddptop_worker/data.py, `device` path):
//! FashionMNIST-shaped 28x28 uint8 images, synthetic (deterministic from the seed) or the real raw
//! files (never downloaded), resized once to 1x64x64 float in [0,1] and kept resident on each
//! replica's device. Replica r holds the r-th 1/k of the samples, like DDP rank r, and each epoch
//! walks a permutation seeded exactly as the Python worker seeds rank r's.

use anyhow::{Context, bail};
use std::io::Read;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

use crate::model::IMAGE_SIZE;

const RAW_SIZE: i64 = 28;
const IMAGES_FILE: &str = "train-images-idx3-ubyte";
const LABELS_FILE: &str = "train-labels-idx1-ubyte";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Synthetic,
    Real,
    Auto,
}

impl DataKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "synthetic" => Ok(Self::Synthetic),
            "real" => Ok(Self::Real),
            "auto" => Ok(Self::Auto),
            _ => Err(format!("unknown data {s:?} (synthetic, real, auto)")),
        }
    }
}

/// The same bytes as `synthetic_fashion_mnist(n, seed)` in data.py: torch's CPU generator seeded
/// with `seed`, labels drawn first, then the noise (so the two workers train on identical data).
pub fn synthetic(n: i64, seed: i64) -> (Tensor, Tensor) {
    tch::manual_seed(seed);
    let labels = Tensor::randint_low(0, 10, [n], (Kind::Int64, Device::Cpu));
    let noise = Tensor::randint_low(0, 200, [n, RAW_SIZE, RAW_SIZE], (Kind::Int16, Device::Cpu));
    let images = (noise + labels.view([n, 1, 1]).to_kind(Kind::Int16) * 5)
        .clamp(0, 255)
        .to_kind(Kind::Uint8);
    (images, labels)
}

fn read_maybe_gz(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path.exists() {
        return std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    }
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    let f = std::fs::File::open(&gz).with_context(|| format!("opening {}", gz.display()))?;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(f)
        .read_to_end(&mut out)
        .with_context(|| format!("decompressing {}", gz.display()))?;
    Ok(out)
}

/// The folder under `dir` holding FashionMNIST's raw training files, if any.
pub fn find_raw_dir(dir: Option<&Path>) -> Option<PathBuf> {
    let dir = dir?;
    ["", "FashionMNIST/raw", "raw", "FashionMNIST"]
        .iter()
        .map(|sub| dir.join(sub))
        .find(|d| {
            [IMAGES_FILE, LABELS_FILE]
                .iter()
                .all(|n| d.join(n).exists() || d.join(format!("{n}.gz")).exists())
        })
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse the idx files: (N,28,28) uint8 images and (N,) int64 labels.
pub fn load_fashion_mnist(raw_dir: &Path) -> anyhow::Result<(Tensor, Tensor)> {
    let img = read_maybe_gz(&raw_dir.join(IMAGES_FILE))?;
    let lab = read_maybe_gz(&raw_dir.join(LABELS_FILE))?;
    if img.len() < 16 || be_u32(&img, 0) != 2051 || be_u32(&img, 8) != 28 || be_u32(&img, 12) != 28
    {
        bail!(
            "{}/{IMAGES_FILE}: not an idx3 28x28 image file",
            raw_dir.display()
        );
    }
    let n = be_u32(&img, 4) as usize;
    if lab.len() < 8 || be_u32(&lab, 0) != 2049 || be_u32(&lab, 4) as usize != n {
        bail!(
            "{}/{LABELS_FILE}: not an idx1 label file matching the images",
            raw_dir.display()
        );
    }
    if img.len() < 16 + n * 784 || lab.len() < 8 + n {
        bail!("{}: the idx files are truncated", raw_dir.display());
    }
    let images = Tensor::from_slice(&img[16..16 + n * 784]).view([n as i64, RAW_SIZE, RAW_SIZE]);
    let labels = Tensor::from_slice(&lab[8..8 + n]).to_kind(Kind::Int64);
    Ok((images, labels))
}

/// (images, labels, description) for `samples` samples.
pub fn source(
    kind: DataKind,
    data_dir: Option<&Path>,
    samples: i64,
    seed: i64,
) -> anyhow::Result<(Tensor, Tensor, String)> {
    let raw = find_raw_dir(data_dir);
    if kind == DataKind::Real && raw.is_none() {
        bail!(
            "--data real: no FashionMNIST raw files ({IMAGES_FILE}[.gz], {LABELS_FILE}[.gz]) under \
             --data-dir {:?}; nothing is downloaded, use --data synthetic",
            data_dir
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        );
    }
    if let (DataKind::Real | DataKind::Auto, Some(dir)) = (kind, raw) {
        let (images, labels) = load_fashion_mnist(&dir)?;
        let have = images.size()[0];
        if samples > have {
            bail!("--samples {samples} > {have} images in {}", dir.display());
        }
        return Ok((
            images.narrow(0, 0, samples),
            labels.narrow(0, 0, samples),
            format!("FashionMNIST from {}", dir.display()),
        ));
    }
    let (images, labels) = synthetic(samples, seed);
    Ok((
        images,
        labels,
        format!("synthetic FashionMNIST-shaped (seed {seed})"),
    ))
}

/// (n,28,28) uint8 -> (n,1,64,64) float in [0,1], bilinear like `F.interpolate` in data.py.
pub fn resize(images_u8: &Tensor) -> Tensor {
    (images_u8.unsqueeze(1).to_kind(Kind::Float) / 255.0).upsample_bilinear2d(
        [IMAGE_SIZE, IMAGE_SIZE],
        false,
        None,
        None,
    )
}

/// One replica's resident share of the data.
pub struct Shard {
    pub rank: i64,
    pub x: Tensor,
    pub y: Tensor,
    pub device: Device,
}

/// Every replica's shard plus the epoch layout shared by all.
pub struct Data {
    pub shards: Vec<Shard>,
    pub batch: i64,
    pub per_rank: i64,
    pub steps_per_epoch: i64,
    pub seed: i64,
    pub description: String,
}

impl Data {
    pub fn build(
        images: &Tensor,
        labels: &Tensor,
        description: String,
        devices: &[Device],
        batch: i64,
        seed: i64,
    ) -> anyhow::Result<Data> {
        let k = devices.len() as i64;
        let n = images.size()[0];
        let per_rank = n / k;
        let steps_per_epoch = per_rank / batch.max(1);
        if batch < 1 || steps_per_epoch < 1 {
            bail!(
                "--samples {n} over {k} replica(s) gives {per_rank} samples per replica: fewer \
                 than one batch of {batch}"
            );
        }
        let shards = devices
            .iter()
            .enumerate()
            .map(|(r, &device)| {
                let lo = r as i64 * per_rank;
                let mine = images.narrow(0, lo, per_rank);
                // Resized on the device in chunks of 4096, as data.py does.
                let chunks: Vec<Tensor> = (0..per_rank)
                    .step_by(4096)
                    .map(|i| resize(&mine.narrow(0, i, 4096.min(per_rank - i)).to_device(device)))
                    .collect();
                Shard {
                    rank: r as i64,
                    x: Tensor::cat(&chunks, 0),
                    y: labels.narrow(0, lo, per_rank).to_device(device),
                    device,
                }
            })
            .collect();
        Ok(Data {
            shards,
            batch,
            per_rank,
            steps_per_epoch,
            seed,
            description,
        })
    }

    /// Each replica's permutation of its samples for epoch `e` (data.py's per-rank seed).
    pub fn permutations(&self, e: i64) -> Vec<Tensor> {
        self.shards
            .iter()
            .map(|s| {
                tch::manual_seed(self.seed * 1_000_003 + e * 101 + s.rank);
                Tensor::randperm(self.per_rank, (Kind::Int64, Device::Cpu)).to_device(s.device)
            })
            .collect()
    }

    /// Batch `i` of replica `r` under permutation `perm`.
    pub fn batch(&self, r: usize, perm: &Tensor, i: i64) -> (Tensor, Tensor) {
        let idx = perm.narrow(0, i * self.batch, self.batch);
        let s = &self.shards[r];
        (s.x.index_select(0, &idx), s.y.index_select(0, &idx))
    }

    pub fn samples_per_epoch(&self) -> i64 {
        self.steps_per_epoch * self.batch
    }
}
