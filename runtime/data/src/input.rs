//! Where a trainer process's batches come from, decided once for every front end: the
//! launcher's built-in trainer and `hetgen.Loader` ask [`decide`], and `hetgen plan` counts the
//! trainer side with the same [`Job::trainer_threads`] that [`local_threads`] divides, so the
//! three cannot disagree. Both front ends then build the input the decision says with [`open`].
//!
//! The rule, from the low-level facts (the job, whether this process runs inside one, what the
//! caller asked for outright):
//!
//! - **Mode.** As asked; else remote when data servers were named outright or the job has
//!   data hosts, local otherwise. Remote with neither is an error.
//! - **Threads of this process's own pipeline.** As asked; else:
//!   - remote inside a job: the hybrid share of this host ([`local_threads`]: the spec's
//!     `trainer_threads` / `reserve_vcpus` over the cores this process may use, divided among
//!     the host's local ranks; 0 turns hybrid input off); remote outside a job: 0;
//!   - local, for a job without data groups: the same share (the trainer is the only pipeline,
//!     at least 1 thread);
//!   - local, for a job with data groups (an A/B run of its input, or a script on a laptop):
//!     the spec's `pipeline.threads`, else this machine's cores divided among its local ranks.

mod open;

use std::path::PathBuf;

use hetgen_env::Env;
use hetgen_pipeline::python::PythonSetup;
use hetgen_spec::model::Job;

use crate::job::{data_hosts, local_threads};

pub use open::{FewerSamplesThanRanks, Opened, Share, engine, open};

/// Remote (the data servers, perhaps with this host's pipeline beside them) or local (this
/// process's own pipeline alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The job's data servers.
    Remote,
    /// This process's own pipeline.
    Local,
}

/// What the caller asked for outright; `None` and `false` leave the choice to the rule.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// The mode.
    pub mode: Option<Mode>,
    /// Data servers were named outright (the Loader's `hosts=`), not found from the job.
    pub hosts_given: bool,
    /// Threads of this process's own pipeline.
    pub threads: Option<usize>,
    /// Trainer processes on this host sharing its cores (torchrun's `LOCAL_WORLD_SIZE`).
    pub local_ranks: u32,
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// Where batches come from.
    pub mode: Mode,
    /// Threads of this process's own pipeline: with [`Mode::Remote`], 0 means no hybrid
    /// input; with [`Mode::Local`], at least 1.
    pub threads: usize,
}

/// Remote input was asked for with no data server to stream from.
#[derive(Debug, thiserror::Error)]
#[error(
    "remote input: the job has no data hosts to stream from and no data servers were named (give `hosts`, or use local input)"
)]
pub struct NoDataHosts;

/// Decide this process's input for `job`; `env` is the instance's environment when it runs
/// inside a job.
pub fn decide(job: &Job, env: Option<&Env>, asked: &Asked) -> Result<Input, NoDataHosts> {
    let has_hosts = asked.hosts_given || env.is_some_and(|env| !data_hosts(job, env).is_empty());
    let mode = match asked.mode {
        Some(Mode::Remote) if !has_hosts => return Err(NoDataHosts),
        Some(mode) => mode,
        None if has_hosts => Mode::Remote,
        None => Mode::Local,
    };
    let ranks = asked.local_ranks.max(1);
    let threads = match (asked.threads, mode) {
        (Some(threads), _) => threads,
        (None, Mode::Remote) if env.is_some() => local_threads(job, ranks) as usize,
        (None, Mode::Remote) => 0,
        (None, Mode::Local) if job.is_homogeneous() => local_threads(job, ranks) as usize,
        (None, Mode::Local) => job
            .pipeline
            .threads
            .map(|t| t as usize)
            .unwrap_or_else(|| hetgen_pipeline::available_cores() / ranks as usize),
    };
    let threads = match mode {
        Mode::Local => threads.max(1),
        Mode::Remote => threads,
    };
    Ok(Input { mode, threads })
}

/// How this process runs a Python dataset's workers: the interpreter in `HETGEN_PYTHON` (the
/// `hetgen` package's launcher and Loader set it to their own), else `python3`; the code folder
/// in `HETGEN_CODE_DIR` (the source bundle's folder on AWS's image, the spec's `source_dir` on
/// a local run), else `/opt/ml/code`; the job's hyperparameters when inside a job.
pub fn python_setup(env: Option<&Env>) -> PythonSetup {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    PythonSetup {
        python: var(hetgen_env::PYTHON_VAR).map_or_else(|| PathBuf::from("python3"), PathBuf::from),
        code_dir: var(hetgen_env::CODE_DIR_VAR).map_or_else(
            || PathBuf::from(hetgen_env::DEFAULT_CODE_DIR),
            PathBuf::from,
        ),
        hyperparameters: env.map(|e| e.hyperparameters.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A job on one GPU host (4 vCPUs to its pipeline outright), with or without a data group.
    fn job(data_group: bool) -> Job {
        let data = if data_group {
            "[[instance_group]]\nname = \"data_group\"\ninstance_type = \"ml.c5.xlarge\"\ncount = 2\nrole = \"data\"\n"
        } else {
            ""
        };
        let text = format!(
            r#"version = 1
[job]
name = "input-test"
[[instance_group]]
name = "dnn_group"
instance_type = "ml.m5.xlarge"
count = 1
role = "trainer"
{data}[pipeline]
source = {{ format = "synthetic", shape = [12, 12, 3], classes = 4, samples = 600 }}
batch_size = 16
trainer_threads = 4
[trainer]
model = "mlp"
steps = 10
"#
        );
        hetgen_spec::check("input-test.toml", &text)
            .job
            .expect("the test spec is valid")
    }

    /// The trainer host's environment inside `job`.
    fn env(job: &Job) -> Env {
        let groups: Vec<serde_json::Value> = job
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                serde_json::json!({"instance_group_name": g.name, "instance_type": g.instance_type,
                    "hosts": if g.name == "dnn_group" { vec!["algo-1".to_owned()] } else { vec![format!("algo-{}", i + 2)] }})
            })
            .collect();
        let resources = serde_json::json!({
            "current_group_name": "dnn_group", "current_host": "algo-1",
            "current_instance_type": "ml.m5.xlarge", "hosts": ["algo-1", "algo-2", "algo-3"],
            "instance_groups": groups,
        });
        Env {
            paths: hetgen_env::Paths {
                base: "/nonexistent".into(),
            },
            resources: serde_json::from_value(resources).unwrap(),
            hyperparameters: BTreeMap::new(),
            channels: BTreeMap::new(),
            channel_dirs: BTreeMap::new(),
            kubernetes: false,
        }
    }

    fn asked(mode: Option<Mode>, local_ranks: u32) -> Asked {
        Asked {
            mode,
            local_ranks,
            ..Asked::default()
        }
    }

    #[test]
    fn inside_a_job_with_data_hosts_input_is_remote_with_the_hosts_hybrid_share_per_rank() {
        let job = job(true);
        let env = env(&job);
        let decided = decide(&job, Some(&env), &asked(None, 2)).unwrap();
        assert_eq!(decided.mode, Mode::Remote);
        // `trainer_threads = 4` for the host, halved for two ranks.
        assert_eq!(decided.threads, 2);
        // Outside a job nothing says the host's share: no hybrid input.
        let hosts_given = Asked {
            hosts_given: true,
            ..asked(None, 1)
        };
        assert_eq!(
            decide(&job, None, &hosts_given).unwrap(),
            Input {
                mode: Mode::Remote,
                threads: 0
            }
        );
    }

    #[test]
    fn the_launcher_and_the_loader_size_a_homogeneous_jobs_pipeline_the_same() {
        let job = job(false);
        for env in [None, Some(env(&job))] {
            // The launcher (one process) and the Loader (here two ranks) both take the spec's
            // share of the host, as `hetgen plan` counts it.
            let launcher = decide(&job, env.as_ref(), &asked(None, 1)).unwrap();
            assert_eq!(launcher.mode, Mode::Local);
            assert_eq!(launcher.threads, 4);
            let loader = decide(&job, env.as_ref(), &asked(None, 2)).unwrap();
            assert_eq!(loader.threads, 2);
        }
    }

    #[test]
    fn local_input_of_a_job_with_data_groups_takes_this_machines_cores_per_rank() {
        let job = job(true);
        let cores = hetgen_pipeline::available_cores();
        let local = decide(&job, None, &asked(Some(Mode::Local), 2)).unwrap();
        assert_eq!(local.threads, (cores / 2).max(1));
        let outright = Asked {
            threads: Some(3),
            ..asked(Some(Mode::Local), 2)
        };
        assert_eq!(decide(&job, None, &outright).unwrap().threads, 3);
    }

    #[test]
    fn remote_input_without_data_servers_is_refused() {
        let job = job(false);
        let env = env(&job);
        let err = decide(&job, Some(&env), &asked(Some(Mode::Remote), 1)).unwrap_err();
        assert!(err.to_string().contains("no data hosts"), "{err}");
        assert!(decide(&job, None, &asked(Some(Mode::Remote), 1)).is_err());
    }
}
