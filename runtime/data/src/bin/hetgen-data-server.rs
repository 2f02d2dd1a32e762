//! The data role alone, with the built-in stages: what a data instance runs when the job has no
//! custom stages, and what the tests start as real processes. It reads the same environment as
//! the job's launcher (`SAGEMAKER_BASE_DIR`, `HETGEN_JOB_FILE`, `HETGEN_JOB_TOKEN`, …).

use std::process::ExitCode;

use hetgen_data::role::{init_logging, run_data_role};

fn main() -> ExitCode {
    init_logging();
    hetgen_data::tune_allocator();
    let run = || -> Result<String, Box<dyn std::error::Error>> {
        let env = hetgen_env::Env::load()?;
        let (_, file) = hetgen_env::load_job(None)?;
        let stages = hetgen_pipeline::StageRegistry::builtin();
        Ok(run_data_role(&file.job, &env, &stages)?.to_string())
    };
    match run() {
        Ok(reason) => {
            eprintln!("hetgen-data-server: stopped: {reason}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hetgen-data-server: error: {e}");
            if let Ok(env) = hetgen_env::Env::load() {
                hetgen_env::write_failure(&env.paths, &format!("data server: {e}"));
            }
            ExitCode::FAILURE
        }
    }
}
