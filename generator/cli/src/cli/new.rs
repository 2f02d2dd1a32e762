//! `hetgen new`'s arguments and the examples it starts from.

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Name of the project folder and of the job
    pub name: String,
    /// Start from this example instead of the tiny local job
    #[arg(long, value_enum, default_value_t = Example::TinyLocal)]
    pub example: Example,
}

/// The examples `hetgen new` can start from (the specs in the repository's `examples/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Example {
    /// CPU-only, synthetic data, runs locally in seconds
    TinyLocal,
    /// ml.p3.2xlarge trainer + ml.c5.9xlarge data instance, MNIST CNN
    MnistHetero,
    /// The homogeneous twin of mnist-hetero
    MnistHomogeneous,
    /// ml.p4d.24xlarge + 2 × ml.c5.18xlarge, ResNet-50
    Resnet50P4d,
    /// Your own PyTorch DDP script (train.py) on 2 GPU hosts fed by 2 CPU hosts, digits data
    /// included; runs locally
    Pytorch,
    /// The same with your own torch Dataset (data.py, torchvision augmentation) run by the 2 CPU
    /// hosts; runs locally
    PytorchDataset,
    /// The same data as WebDataset-style tar shards (make_shards.py) streamed by the 2 CPU hosts
    /// with your own reader (data.py, hetgen.Shards); runs locally
    PytorchShards,
}
