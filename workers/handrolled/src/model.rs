//! The two models of the Python workers (workers/ddptop_worker/models.py), built with tch:
//! the book's d2l `resnet18(10, 1)` and the `tiny` CNN for CPU runs.

use tch::nn::{self, ModuleT};

pub const IMAGE_SIZE: i64 = 64;
pub const IN_CHANNELS: i64 = 1;
pub const NUM_CLASSES: i64 = 10;
pub const RESNET18_PARAMS: i64 = 11_175_818;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Resnet18,
    Tiny,
}

impl ModelKind {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "resnet18" => Ok(Self::Resnet18),
            "tiny" => Ok(Self::Tiny),
            _ => Err(format!("unknown model {s:?} (choices: resnet18, tiny)")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resnet18 => "resnet18",
            Self::Tiny => "tiny",
        }
    }
}

/// PyTorch's default `Conv2d` init (kaiming-uniform weights, uniform bias in ±1/sqrt(fan_in));
/// tch's default bias is zero, which would make the first steps differ from the Python workers'.
fn conv(vs: nn::Path, cin: i64, cout: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    let bound = 1.0 / ((cin * k * k) as f64).sqrt();
    let cfg = nn::ConvConfig {
        stride,
        padding,
        bs_init: nn::Init::Uniform {
            lo: -bound,
            up: bound,
        },
        ..Default::default()
    };
    nn::conv2d(vs, cin, cout, k, cfg)
}

fn linear(vs: nn::Path, cin: i64, cout: i64) -> nn::Linear {
    let bound = 1.0 / (cin as f64).sqrt();
    let cfg = nn::LinearConfig {
        bs_init: Some(nn::Init::Uniform {
            lo: -bound,
            up: bound,
        }),
        ..Default::default()
    };
    nn::linear(vs, cin, cout, cfg)
}

/// d2l's `Residual`: two 3x3 convs with BN, an optional 1x1 conv shortcut (no BN on it).
#[derive(Debug)]
struct Residual {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    conv3: Option<nn::Conv2D>,
    bn1: nn::BatchNorm,
    bn2: nn::BatchNorm,
}

impl Residual {
    fn new(vs: nn::Path, cin: i64, c: i64, use_1x1: bool, stride: i64) -> Self {
        Residual {
            conv1: conv(&vs / "conv1", cin, c, 3, stride, 1),
            conv2: conv(&vs / "conv2", c, c, 3, 1, 1),
            conv3: use_1x1.then(|| conv(&vs / "conv3", cin, c, 1, stride, 0)),
            bn1: nn::batch_norm2d(&vs / "bn1", c, Default::default()),
            bn2: nn::batch_norm2d(&vs / "bn2", c, Default::default()),
        }
    }
}

impl ModuleT for Residual {
    fn forward_t(&self, x: &tch::Tensor, train: bool) -> tch::Tensor {
        let y = x.apply(&self.conv1).apply_t(&self.bn1, train).relu();
        let y = y.apply(&self.conv2).apply_t(&self.bn2, train);
        let shortcut = match &self.conv3 {
            Some(c) => x.apply(c),
            None => x.shallow_clone(),
        };
        (y + shortcut).relu()
    }
}

fn resnet_block(
    vs: nn::Path,
    cin: i64,
    c: i64,
    residuals: i64,
    first_block: bool,
) -> nn::SequentialT {
    let mut blk = nn::seq_t();
    for i in 0..residuals {
        let name = i.to_string();
        blk = if i == 0 && !first_block {
            blk.add(Residual::new(&vs / name, cin, c, true, 2))
        } else {
            let cin = if i == 0 { cin } else { c };
            blk.add(Residual::new(&vs / name, cin, c, false, 1))
        };
    }
    blk
}

/// d2l.resnet18: 3x3 stride-1 stem with BN+ReLU, no max-pool, 4 stages of 2 residual blocks
/// (64/128/256/512), global average pool, linear.
fn resnet18(vs: &nn::Path) -> nn::SequentialT {
    nn::seq_t()
        .add(conv(vs / "stem_conv", IN_CHANNELS, 64, 3, 1, 1))
        .add(nn::batch_norm2d(vs / "stem_bn", 64, Default::default()))
        .add_fn(|x| x.relu())
        .add(resnet_block(vs / "resnet_block1", 64, 64, 2, true))
        .add(resnet_block(vs / "resnet_block2", 64, 128, 2, false))
        .add(resnet_block(vs / "resnet_block3", 128, 256, 2, false))
        .add(resnet_block(vs / "resnet_block4", 256, 512, 2, false))
        .add_fn(|x| x.adaptive_avg_pool2d([1, 1]).flatten(1, -1))
        .add(linear(vs / "fc", 512, NUM_CLASSES))
}

/// The Python `tiny` model: five conv-BN-ReLU blocks (16..256 channels, strided), pool, linear.
fn tiny(vs: &nn::Path) -> nn::SequentialT {
    let mut net = nn::seq_t();
    let widths = [
        (IN_CHANNELS, 16, 1),
        (16, 32, 2),
        (32, 64, 2),
        (64, 128, 2),
        (128, 256, 2),
    ];
    for (i, (cin, cout, stride)) in widths.into_iter().enumerate() {
        net = net
            .add(conv(vs / format!("conv{i}"), cin, cout, 3, stride, 1))
            .add(nn::batch_norm2d(
                vs / format!("bn{i}"),
                cout,
                Default::default(),
            ))
            .add_fn(|x| x.relu());
    }
    net.add_fn(|x| x.adaptive_avg_pool2d([1, 1]).flatten(1, -1))
        .add(linear(vs / "fc", 256, NUM_CLASSES))
}

pub fn build(kind: ModelKind, vs: &nn::Path) -> nn::SequentialT {
    match kind {
        ModelKind::Resnet18 => resnet18(vs),
        ModelKind::Tiny => tiny(vs),
    }
}

/// Trainable parameter count (BN running statistics are buffers, not parameters).
pub fn count_params(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables()
        .iter()
        .map(|t| t.numel() as i64)
        .sum()
}
