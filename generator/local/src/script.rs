//! What a script-mode trainer host needs on this machine: its code (the spec's `source_dir`)
//! with `torchrun` and the hetgen wheel on PATH, and a rendezvous port of its own.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use crate::layout::absolute;
use crate::{LocalError, launcher};

/// The code of a script-mode trainer host on hetgen's own image: the spec's `source_dir`,
/// standing in for the image's `/opt/ml/code`, with `torchrun` (and the hetgen wheel beside it)
/// on PATH.
pub(crate) fn script_code(
    script: &hetgen_spec::model::ScriptTrainer,
    spec_dir: &Path,
    inherited: &mut BTreeMap<String, String>,
) -> Result<PathBuf, LocalError> {
    let code = absolute(&spec_dir.join(&script.source_dir));
    if !code.is_dir() {
        return Err(LocalError::SourceDir { path: code });
    }
    let path = inherited.get("PATH").cloned().unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let no_torchrun = || LocalError::NoTorchrun {
        script: script.script.clone(),
    };
    let torchrun = match dirs
        .iter()
        .map(|d| d.join("torchrun"))
        .find(|t| t.is_file())
    {
        Some(torchrun) => torchrun,
        None => {
            // The project's PyTorch venv (`scripts/torch-env.sh`) stands in for the image.
            let bin = launcher::torch_venv_dir()
                .map(|v| v.join("bin"))
                .filter(|b| b.join("torchrun").is_file())
                .ok_or_else(no_torchrun)?;
            dirs.insert(0, bin.clone());
            bin.join("torchrun")
        }
    };
    let path = std::env::join_paths(&dirs).map_err(|_| no_torchrun())?;
    inherited.insert("PATH".to_owned(), path.to_string_lossy().into_owned());
    check_hetgen(&torchrun, inherited)?;
    Ok(code)
}

/// Before any host starts: the Python that `torchrun` runs scripts with (its `#!` line) can
/// import hetgen, or the script would fail on every trainer host at `import hetgen`.
fn check_hetgen(torchrun: &Path, env: &BTreeMap<String, String>) -> Result<(), LocalError> {
    let shebang = std::fs::read(torchrun)
        .ok()
        .and_then(|bytes| {
            let first = bytes.split(|b| *b == b'\n').next()?.to_vec();
            let line = String::from_utf8(first).ok()?;
            let interpreter = line
                .strip_prefix("#!")?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(PathBuf::from(interpreter))
        })
        .filter(|p| p.is_absolute());
    let python = shebang.unwrap_or_else(|| torchrun.with_file_name("python3"));
    let fail = |detail: String| LocalError::NoHetgen {
        torchrun: torchrun.to_owned(),
        python: python.clone(),
        detail,
    };
    let out = std::process::Command::new(&python)
        .args(["-c", "import hetgen"])
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run `{}`: {e}", python.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(fail(last.trim().to_owned()))
}

/// What a script-mode trainer host needs on this machine besides its code (`code`, on hetgen's
/// own image): a free rendezvous port, since simulated hosts share the machine's ports. Gloo
/// and NCCL find the loopback interface every simulated host's address is on in
/// `resourceconfig.json` ([`layout::NETWORK_INTERFACE`]).
pub(crate) fn script_environment(code: Option<PathBuf>, variables: &mut Vec<(String, String)>) {
    let rendezvous = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(hetgen_env::DEFAULT_RENDEZVOUS_PORT);
    // The caller's and the spec's settings win: they come later.
    let mut ours = vec![(
        hetgen_env::RENDEZVOUS_PORT_VAR.to_owned(),
        rendezvous.to_string(),
    )];
    if let Some(code) = code {
        ours.push((
            hetgen_env::CODE_DIR_VAR.to_owned(),
            code.display().to_string(),
        ));
    }
    ours.append(variables);
    *variables = ours;
}
