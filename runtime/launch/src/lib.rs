//! What runs inside every instance of a hetgen job.
//!
//! SageMaker starts the job's container as `docker run IMAGE train`; the image's entry point is
//! the job's launcher, whose `main` registers custom stages and calls [`launch`]. `launch`
//! reads `job.json` (`HETGEN_JOB_FILE`) and the SageMaker environment, finds the instance's
//! group, and runs its role:
//!
//! - **data**: [`hetgen_data::role::run_data_role`] — serve batches until the trainer says stop.
//! - **trainer**, built-in `model`: [`trainer::run`] — train on batches from every data host
//!   (heterogeneous) or from the same pipeline on its own cores (homogeneous), then shut the
//!   data hosts down. Needs the default feature `builtin-trainer` (libtorch).
//! - **trainer**, `script`: [`script::run`] — the user's script under `torchrun` on every host
//!   of the trainer group; the data servers stop once every trainer host has finished.
//!
//! A failure exits non-zero with its reason in `/opt/ml/output/failure`, where SageMaker
//! reports it as the job's FailureReason.

mod args;
pub mod script;
#[cfg(feature = "builtin-trainer")]
pub mod trainer;

use std::process::ExitCode;

pub use args::Args;
pub use hetgen_pipeline::{BoxError, Image, Params, SampleRng, Stage, StageRegistry};
use hetgen_spec::model::{BuiltinTrainer, Job, Role, Trainer};

/// Run the role of this instance; the launcher's `main` returns this.
pub fn launch(stages: StageRegistry) -> ExitCode {
    ExitCode::from(launch_with(std::env::args().skip(1), stages))
}

/// [`launch`] with the arguments given (without the program's name), returning the exit
/// status: what the `hetgen` Python package's launcher (`python -m hetgen train …`) runs.
pub fn launch_with(argv: impl IntoIterator<Item = String>, stages: StageRegistry) -> u8 {
    let args = match Args::parse(argv.into_iter()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{}", args::USAGE);
            return 0;
        }
        Err(message) => {
            eprintln!("launcher: {message}\n\n{}", args::USAGE);
            return 2;
        }
    };
    hetgen_data::role::init_logging();
    hetgen_data::tune_allocator();
    let env = match hetgen_env::Env::load() {
        Ok(env) => env,
        Err(e) => {
            // No tree means no failure file to write either.
            say(format_args!("launcher: {e}"));
            return 1;
        }
    };
    match run(&args, &env, &stages) {
        Ok(message) => {
            say(format_args!("launcher: {message}"));
            0
        }
        Err(e) => {
            let reason = format!("{} ({}): {e}", env.host(), env.group());
            say(format_args!("launcher: error: {reason}"));
            hetgen_env::write_failure(&env.paths, &reason);
            // A training script's own exit status is the host's.
            match e.downcast_ref::<script::ScriptFailed>() {
                Some(failed) => failed.code,
                None => 1,
            }
        }
    }
}

/// The launcher's last line, on stderr. Unlike `eprintln!`, which panics when stderr cannot be
/// written (its reader gone), a line nobody can read is dropped: the exit status and the
/// failure file still say how it ended. It goes out in one write, so that a reader taking
/// lines as they come (the training toolkit) never sees it in pieces.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn run(args: &Args, env: &hetgen_env::Env, stages: &StageRegistry) -> Result<String, BoxError> {
    let (path, file) = hetgen_env::load_job(args.job_file.as_deref())?;
    let job = &file.job;
    let role = role_of(job, env.group()).ok_or_else(|| {
        format!(
            "{} lists no instance group `{}` (this host's group in resourceconfig.json); groups: {}",
            path.display(),
            env.group(),
            job.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
        )
    })?;
    // `hetgen logs` learns the host's group from this line (`hetgen_env::starting_role_group`).
    tracing::info!(host = env.host(), group = env.group(), ?role, job = %job.name, "{}", hetgen_env::STARTING_ROLE);
    match role {
        Role::Data => {
            let reason = hetgen_data::role::run_data_role(job, env, stages)?;
            Ok(format!("data server stopped: {reason}"))
        }
        Role::Trainer => match &job.trainer {
            Trainer::Script(script) => {
                refuse_builtin_trainer_flags(args, &script.script)?;
                script::run(job, script, env, &args.script_args)
            }
            Trainer::Builtin(_) if !args.script_args.is_empty() => Err(format!(
                "the arguments after `--` ({}) are for a training script, but this job trains \
                 hetgen's built-in `model`, which takes none",
                args.script_args.join(" ")
            )
            .into()),
            Trainer::Builtin(trainer) => builtin(job, trainer, env, stages, args),
        },
    }
}

/// A script chooses its own input and device, so the built-in trainer's flags would be
/// silently ignored in script mode: refuse them instead.
fn refuse_builtin_trainer_flags(args: &Args, script: &str) -> Result<(), String> {
    let flags = args.builtin_trainer_flags();
    if flags.is_empty() {
        return Ok(());
    }
    let verb = if flags.len() == 1 { "steers" } else { "steer" };
    Err(format!(
        "{} {verb} the built-in trainer, but this job's trainer runs the script `{script}` under \
         torchrun, which chooses its own input (`hetgen.Loader(mode=...)`) and device; \
         run `train` without them",
        flags.join(", "),
    ))
}

/// Trains with the built-in trainer, when this launcher has it (a script-mode image's does not).
fn builtin(
    job: &Job,
    trainer: &BuiltinTrainer,
    env: &hetgen_env::Env,
    stages: &StageRegistry,
    args: &Args,
) -> Result<String, BoxError> {
    #[cfg(feature = "builtin-trainer")]
    {
        let summary = trainer::run(job, trainer, env, stages, args)?;
        Ok(format!(
            "training finished: {} steps, {:.1} samples/s, stall {:.1} %",
            summary.steps,
            summary.samples_per_s,
            summary.stall_fraction * 100.0
        ))
    }
    #[cfg(not(feature = "builtin-trainer"))]
    {
        let _ = (job, trainer, env, stages, args);
        Err(
            "this launcher was built without the built-in trainer (a script-mode image), but \
             the job trains a built-in `model`: render and build the image again"
                .into(),
        )
    }
}

/// The role of group `group`. A one-group job runs on SageMaker as `homogeneousCluster`
/// whatever the spec named its group.
pub fn role_of(job: &Job, group: &str) -> Option<Role> {
    if let Some(g) = job.groups.iter().find(|g| g.name == group) {
        return Some(g.role);
    }
    (group == hetgen_spec::model::HOMOGENEOUS_GROUP && job.groups.len() == 1)
        .then(|| job.groups[0].role)
}

#[cfg(test)]
mod tests {
    use hetgen_spec::model::Device;

    use super::*;

    #[test]
    fn script_mode_refuses_the_built_in_trainers_flags() {
        let script = "train.py";
        assert!(refuse_builtin_trainer_flags(&Args::default(), script).is_ok());
        let args = Args {
            device: Some(Device::Cpu),
            input_only: true,
            ..Args::default()
        };
        let err = refuse_builtin_trainer_flags(&args, script).unwrap_err();
        assert!(
            err.starts_with("--device, --input-only steer the built-in trainer")
                && err.contains("`train.py`"),
            "{err}"
        );
        let args = Args {
            input_only: true,
            ..Args::default()
        };
        let err = refuse_builtin_trainer_flags(&args, script).unwrap_err();
        assert!(
            err.starts_with("--input-only steers the built-in trainer"),
            "{err}"
        );
    }
}
