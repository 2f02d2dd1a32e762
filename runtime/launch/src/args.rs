//! The launcher's command line: `launcher train [--input local|remote] [--device auto|cuda|cpu]
//! [--input-only] [--job FILE] [-- SCRIPT ARGS…]`. SageMaker passes only `train` to an image of
//! hetgen's; on AWS's PyTorch image the bundle's entry point passes the job's hyperparameters
//! after `--`. The flags are for A/B runs, benchmarks and debugging.

use std::ffi::OsStr;
use std::path::PathBuf;

use hetgen_data::input::Mode;
use hetgen_spec::model::Device;
use lexopt::Arg::{Long, Short, Value};

pub(crate) const USAGE: &str = "\
usage: launcher train [--input local|remote] [--device auto|cuda|cpu] [--input-only] [--job FILE]
                      [-- SCRIPT ARGS...]

Runs this instance's role of the hetgen job (SageMaker runs `IMAGE train`). The trainer
flags steer the built-in trainer; a script-mode trainer refuses them.
  --input local|remote   trainer: preprocess on its own cores, or stream from the data hosts
                         (default: remote when the job has data groups)
  --device auto|cuda|cpu trainer: override the spec's device
  --input-only           trainer: take the batches and drop them, no model (the input's
                         ceiling, as `hetgen bench --input-only` measures it)
  --job FILE             job.json to read (default: $HETGEN_JOB_FILE, else /opt/hetgen/job.json)
  -- SCRIPT ARGS...      script mode: more arguments for the script, after the spec's `args`
                         (on AWS's image, the job's hyperparameters); data hosts ignore them
";

/// Parsed command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    /// `--input`.
    pub input: Option<Mode>,
    /// `--device`.
    pub device: Option<Device>,
    /// `--input-only`.
    pub input_only: bool,
    /// `--job`.
    pub job_file: Option<PathBuf>,
    /// Everything after `--`: more arguments for a training script.
    pub script_args: Vec<String>,
}

impl Args {
    /// `Ok(None)` for `help`/`--help`.
    pub fn parse(args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
        let mut parser = lexopt::Parser::from_args(args);
        // The command, a plain word, as typed: nothing is pending before the first argument.
        let command = parser.try_raw_args().and_then(|mut raw| raw.next());
        match command.as_deref().map(OsStr::to_string_lossy).as_deref() {
            Some("train") => {}
            Some("help" | "--help" | "-h") | None => return Ok(None),
            Some(other) => {
                return Err(format!(
                    "unknown command `{other}`: the only command is `train`"
                ));
            }
        }
        let mut parsed = Args::default();
        loop {
            // Everything after `--` is the script's, as typed (a later `--` included).
            if let Some(mut raw) = parser.try_raw_args()
                && raw.peek() == Some(OsStr::new("--"))
            {
                raw.next();
                parsed.script_args = raw.map(|a| a.to_string_lossy().into_owned()).collect();
                break;
            }
            let Some(arg) = parser.next().map_err(message)? else {
                break;
            };
            match arg {
                Long("input") => {
                    parsed.input = Some(match value(&mut parser)?.as_str() {
                        "local" => Mode::Local,
                        "remote" => Mode::Remote,
                        v => return Err(format!("--input {v}: expected `local` or `remote`")),
                    })
                }
                Long("device") => {
                    parsed.device = Some(match value(&mut parser)?.as_str() {
                        "auto" => Device::Auto,
                        "cuda" => Device::Cuda,
                        "cpu" => Device::Cpu,
                        v => return Err(format!("--device {v}: expected `auto`, `cuda` or `cpu`")),
                    })
                }
                Long("input-only") => parsed.input_only = true,
                Long("job") => parsed.job_file = Some(PathBuf::from(value(&mut parser)?)),
                Long(other) => return Err(format!("unknown option `--{other}`")),
                Short(other) => return Err(format!("unknown option `-{other}`")),
                Value(other) => {
                    return Err(format!("unknown option `{}`", other.to_string_lossy()));
                }
            }
        }
        Ok(Some(parsed))
    }

    /// The flags given that steer the built-in trainer, as typed.
    pub fn builtin_trainer_flags(&self) -> Vec<&'static str> {
        [
            (self.input.is_some(), "--input"),
            (self.device.is_some(), "--device"),
            (self.input_only, "--input-only"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }
}

/// The value of the option just read, even one that looks like an option (`--job --x`).
fn value(parser: &mut lexopt::Parser) -> Result<String, String> {
    let value = parser.value().map_err(message)?;
    Ok(value.to_string_lossy().into_owned())
}

/// A parse error in the launcher's words, naming the flag.
fn message(error: lexopt::Error) -> String {
    match error {
        lexopt::Error::MissingValue {
            option: Some(option),
        } => format!("{option} needs a value"),
        lexopt::Error::UnexpectedValue { option, value } => {
            format!(
                "{option} takes no value (given `{}`)",
                value.to_string_lossy()
            )
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        Args::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_what_sagemaker_and_users_pass() {
        assert_eq!(parse(&["train"]), Ok(Some(Args::default())));
        let args = parse(&[
            "train",
            "--input",
            "local",
            "--device",
            "cpu",
            "--input-only",
            "--job",
            "j.json",
        ])
        .unwrap()
        .unwrap();
        assert!(args.input_only);
        assert!(!parse(&["train"]).unwrap().unwrap().input_only);
        assert_eq!(args.input, Some(Mode::Local));
        assert_eq!(args.device, Some(Device::Cpu));
        assert_eq!(args.job_file, Some(PathBuf::from("j.json")));
        assert_eq!(parse(&["--help"]), Ok(None));
        let passed = parse(&["train", "--job", "j.json", "--", "--epochs", "3", "--", "x"])
            .unwrap()
            .unwrap();
        assert_eq!(passed.script_args, ["--epochs", "3", "--", "x"]);
        assert_eq!(passed.job_file, Some(PathBuf::from("j.json")));
        assert!(
            parse(&["train", "--"])
                .unwrap()
                .unwrap()
                .script_args
                .is_empty()
        );
        assert!(parse(&["serve"]).unwrap_err().contains("only command"));
        assert!(
            parse(&["train", "--input", "gpu"])
                .unwrap_err()
                .contains("local")
        );
        assert!(
            parse(&["train", "--input"])
                .unwrap_err()
                .contains("needs a value")
        );
    }

    #[test]
    fn errors_name_the_flag() {
        let err = |args: &[&str]| parse(args).unwrap_err();
        assert_eq!(err(&["train", "--input"]), "--input needs a value");
        assert_eq!(err(&["train", "--job"]), "--job needs a value");
        assert_eq!(
            err(&["train", "--device", "tpu"]),
            "--device tpu: expected `auto`, `cuda` or `cpu`"
        );
        assert_eq!(
            err(&["train", "--epochs", "3"]),
            "unknown option `--epochs`"
        );
        assert_eq!(err(&["train", "-x"]), "unknown option `-x`");
        assert_eq!(err(&["train", "train.py"]), "unknown option `train.py`");
        assert_eq!(
            err(&["train", "--input-only=yes"]),
            "--input-only takes no value (given `yes`)"
        );
        assert_eq!(
            err(&["--input", "local"]),
            "unknown command `--input`: the only command is `train`"
        );
        assert_eq!(parse(&["help"]), Ok(None));
        assert_eq!(parse(&["-h"]), Ok(None));
        assert_eq!(parse(&[]), Ok(None));
        // A value is taken as given, even one that looks like a flag or `--`.
        let args = parse(&["train", "--input=remote", "--job", "--"])
            .unwrap()
            .unwrap();
        assert_eq!(args.input, Some(Mode::Remote));
        assert_eq!(args.job_file, Some(PathBuf::from("--")));
        assert!(args.script_args.is_empty());
    }

    #[test]
    fn the_built_in_trainers_flags_are_named_as_typed() {
        let flags = |a: &[&str]| parse(a).unwrap().unwrap().builtin_trainer_flags();
        assert!(flags(&["train", "--job", "j.json"]).is_empty());
        assert_eq!(flags(&["train", "--input-only"]), ["--input-only"]);
        assert_eq!(
            flags(&["train", "--device", "cpu", "--input", "remote"]),
            ["--input", "--device"]
        );
    }
}
