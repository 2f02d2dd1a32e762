//! Why a local run could not start. A job that starts and then fails is not an error here: it
//! ends with a [`crate::JobRecord`] whose status says so.

use std::path::PathBuf;

/// A local run that could not be set up.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LocalError {
    /// More hosts than a loopback block holds.
    #[error(
        "the job has {hosts} hosts; a local run holds at most {}",
        crate::layout::MAX_HOSTS
    )]
    #[diagnostic(
        code("hetgen::local::too-many-hosts"),
        help("lower the groups' `count` for the local run")
    )]
    TooManyHosts { hosts: usize },
    /// A channel has no folder on this machine.
    #[error("channel `{channel}` is only in `{uri}`, which a local run cannot read")]
    #[diagnostic(
        code("hetgen::local::remote-channel"),
        help("give the channel a `local_path` with a copy of the data, then `hetgen render`")
    )]
    RemoteChannel { channel: String, uri: String },
    /// A channel in Pipe mode: SageMaker streams it through a FIFO per epoch, which a local
    /// run does not make.
    #[error("channel `{channel}` is in Pipe mode, which a local run cannot deliver")]
    #[diagnostic(
        code("hetgen::local::pipe-channel"),
        help(
            "use `input_mode = \"FastFile\"` (read on demand, as files) or `\"File\"` for the \
             channel, then `hetgen render`"
        )
    )]
    PipeChannel { channel: String },
    /// A channel's local folder is missing or unreadable.
    #[error("cannot read channel `{channel}`'s folder `{}`", path.display())]
    #[diagnostic(
        code("hetgen::local::channel-folder"),
        help(
            "create the folder, or fix the channel's `local_path` (relative to the spec's folder)"
        )
    )]
    ChannelFolder {
        channel: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing the job folder failed.
    #[error("cannot write `{}`", path.display())]
    #[diagnostic(
        code("hetgen::local::write"),
        help("check that the folder is writable and not in use")
    )]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A job folder's `log.jsonl` that cannot be read.
    #[error("cannot read the job log {path}: {message}")]
    #[diagnostic(
        code("hetgen::local::log"),
        help(
            "the file is written by `hetgen deploy --local`; each host's raw output is in `hosts/<host>/output/log.txt`"
        )
    )]
    BadLog { path: PathBuf, message: String },
    /// `--env` without `=`.
    #[error("`{flag}` is not `KEY=VALUE`")]
    #[diagnostic(code("hetgen::local::env"), help("write `--env NAME=value`"))]
    BadEnvFlag { flag: String },
    /// The operating system's random generator failed.
    #[error("cannot make a job token: {message}")]
    #[diagnostic(code("hetgen::local::random"))]
    Random { message: String },
    /// CPU sets cannot be given as asked.
    #[error("{message}")]
    #[diagnostic(
        code("hetgen::local::cpus"),
        help("use fewer CPUs per host, or leave out `--cpus-per-host` and `--cpus-from-catalog`")
    )]
    Cpus { message: String },
    /// Cargo is not there.
    #[error("cannot run `{}` to build the launcher", cargo.display())]
    #[diagnostic(
        code("hetgen::local::no-cargo"),
        help(
            "install Rust (https://rustup.rs), set `CARGO`, or pass a built launcher with `--launcher PATH`"
        )
    )]
    NoCargo {
        cargo: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A job with hetgen's built-in trainer, run by a hetgen with no source tree (the wheel's).
    #[error(
        "a job with hetgen's built-in trainer runs a launcher built from hetgen's Rust source, and this hetgen (from the Python wheel) has none"
    )]
    #[diagnostic(
        code("hetgen::local::no-source-tree"),
        help(
            "a job whose trainer is your own script on AWS's PyTorch image (no `image_uri`, as `hetgen new --example pytorch` makes) runs from the wheel alone; for the built-in trainer, clone hetgen, run `make build` and use its `hetgen`, or set `HETGEN_RUNTIME_PATH` to a checkout's `runtime/launch` (with Rust installed), or pass a built launcher with `--launcher PATH`"
        )
    )]
    NoSourceTree,
    /// The hetgen runtime source the launcher builds against is missing.
    #[error("the hetgen runtime source is not at `{}`", path.display())]
    #[diagnostic(
        code("hetgen::local::runtime-source"),
        help(
            "set `HETGEN_RUNTIME_PATH` to the `runtime/launch` folder of a hetgen checkout, or pass `--launcher PATH`"
        )
    )]
    RuntimeSource { path: PathBuf },
    /// Cargo failed to build the launcher; its output was shown.
    #[error("building the launcher in `{}` failed ({status})", dir.display())]
    #[diagnostic(
        code("hetgen::local::build"),
        help(
            "the compiler's messages are above; a custom stage in `launcher/src/main.rs` is the usual cause, and a missing libtorch the other (install it with `scripts/torch-env.sh` from the hetgen repository, or set LIBTORCH)"
        )
    )]
    Build { dir: PathBuf, status: String },
    /// `--launcher` names nothing runnable.
    #[error("the launcher `{}` is not an executable file", path.display())]
    #[diagnostic(
        code("hetgen::local::launcher"),
        help(
            "pass a built launcher binary (`cargo build` in the rendered `launcher/` folder), or leave out `--launcher`"
        )
    )]
    Launcher { path: PathBuf },
    /// A script-mode job needs `torchrun` on this machine.
    #[error("the job's trainer runs `{script}` under `torchrun`, which is not on PATH")]
    #[diagnostic(
        code("hetgen::local::no-torchrun"),
        help(
            "run from an environment with PyTorch and the hetgen wheel installed (`pip install torch dist/hetgen-*.whl`), or point HETGEN_TORCH_VENV at one"
        )
    )]
    NoTorchrun { script: String },
    /// torchrun's Python cannot import hetgen, which the script's `hetgen.Loader` needs.
    #[error("the job's script runs under `{}`, whose Python cannot import hetgen ({detail})", torchrun.display())]
    #[diagnostic(
        code("hetgen::local::no-hetgen"),
        help(
            "install the hetgen wheel into that environment: `make wheel` in a hetgen checkout (it installs into the project's torch venv), or `{} -m pip install hetgen-*.whl`",
            python.display()
        )
    )]
    NoHetgen {
        torchrun: PathBuf,
        python: PathBuf,
        detail: String,
    },
    /// A job on AWS's PyTorch image needs that image's start-up code here.
    #[error(
        "the job runs on AWS's PyTorch image, whose hosts start through AWS's training toolkit, but {}lacks {}",
        environment.as_ref().map(|e| format!("the Python environment `{}` ", e.display())).unwrap_or_else(|| "this machine ".to_owned()),
        missing.join(", ")
    )]
    #[diagnostic(code("hetgen::local::no-toolkit"))]
    NoToolkit {
        /// The environment looked at (`None`: none found).
        environment: Option<PathBuf>,
        /// What it lacks.
        missing: Vec<String>,
        /// The command that installs it.
        #[help]
        fix: String,
    },
    /// The Kubernetes objects cannot be run as pods here.
    #[error("{message}")]
    #[diagnostic(
        code("hetgen::local::kube"),
        help("run `hetgen render` again, or fix the rendered objects under build/<job>/kubeflow/")
    )]
    Kube { message: String },
    /// The script's source folder is missing.
    #[error("the trainer's `source_dir` `{}` is not a folder", path.display())]
    #[diagnostic(code("hetgen::local::source-dir"))]
    SourceDir { path: PathBuf },
    /// `--resume-from` names no run of the job.
    #[error("`{}` is not a local run to continue", path.display())]
    #[diagnostic(
        code("hetgen::local::resume-from"),
        help("name an earlier run's folder (build/<job>/local/<run>) or just the run's name")
    )]
    NotARun {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A host process could not be started.
    #[error("cannot start host `{host}` (`{}`)", program.display())]
    #[diagnostic(code("hetgen::local::spawn"))]
    Spawn {
        host: String,
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl LocalError {
    /// Whether the machine, not the spec or the job, is what is missing something.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            LocalError::NoCargo { .. }
                | LocalError::RuntimeSource { .. }
                | LocalError::Launcher { .. }
                | LocalError::NoTorchrun { .. }
                | LocalError::NoHetgen { .. }
                | LocalError::NoToolkit { .. }
        )
    }
}
