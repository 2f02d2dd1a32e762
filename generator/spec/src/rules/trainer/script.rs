//! Script mode: the user's training script under `torchrun` on every trainer host, from its
//! `source_dir` with its `requirements`, built on `base_image`.

use crate::ctx::Ctx;
use crate::model::{DEFAULT_BASE_IMAGE, Group, Role, ScriptTrainer};
use crate::path;
use crate::raw::{PerGpu, ProcessesPerHost, RawTrainer};
use crate::rules::int_in;
use crate::spans::KeyPath;

pub(super) fn script(
    ctx: &mut Ctx<'_>,
    t: &RawTrainer,
    script: &str,
    groups: &[Group],
) -> Option<ScriptTrainer> {
    let source_dir = source_dir(t).to_owned();
    let mut ok = script_files(ctx, t, script, &source_dir);
    let processes_per_host = processes_per_host(ctx, t, groups);
    let base_image = t
        .base_image
        .clone()
        .unwrap_or_else(|| DEFAULT_BASE_IMAGE.to_owned());
    if base_image.is_empty()
        || base_image
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        ctx.error(
            "hetgen::spec::base-image",
            &path!["trainer", "base_image"],
            format!("`{base_image}` is not an image reference"),
            "not an image",
            format!("name a PyTorch image such as `{DEFAULT_BASE_IMAGE}`"),
        );
        ok = false;
    }

    ok.then_some(())?;
    Some(ScriptTrainer {
        script: script.to_owned(),
        source_dir,
        args: t.args.clone().unwrap_or_default(),
        requirements: t.requirements.clone(),
        processes_per_host: processes_per_host?,
        base_image,
        deterministic: t.deterministic.unwrap_or(false),
    })
}

/// The folder shipped with the script (its `source_dir`), relative to the spec's folder: the
/// spec's folder itself unless set.
pub(in crate::rules) fn source_dir(t: &RawTrainer) -> &str {
    t.source_dir.as_deref().unwrap_or(".")
}

/// The script, its `source_dir` and `requirements`: relative paths and, when the spec is a
/// file, there beside it.
fn script_files(ctx: &mut Ctx<'_>, t: &RawTrainer, script: &str, source_dir: &str) -> bool {
    let at = path!["trainer"];
    let mut ok = true;
    if t.source_dir.is_some() {
        ok &= relative_path(ctx, &at.at("source_dir"), source_dir, true);
    }
    ok &= relative_path(ctx, &at.at("script"), script, false);
    if let Some(r) = &t.requirements {
        ok &= relative_path(ctx, &at.at("requirements"), r, false);
    }
    if ok && let Some(dir) = ctx.dir {
        let base = dir.join(source_dir);
        if !base.is_dir() {
            ctx.error(
                "hetgen::spec::not-found",
                &at.at("source_dir"),
                format!("no folder `{source_dir}` next to the spec"),
                "not found",
                "`source_dir` is relative to the spec's folder",
            );
        } else {
            for (key, file) in [
                ("script", Some(script)),
                ("requirements", t.requirements.as_deref()),
            ] {
                if let Some(file) = file
                    && !base.join(file).is_file()
                {
                    ctx.error(
                        "hetgen::spec::not-found",
                        &at.at(key),
                        format!("no file `{file}` in `{source_dir}`"),
                        "not found",
                        format!(
                            "`{key}` is relative to `source_dir` (the spec's folder unless set)"
                        ),
                    );
                }
            }
        }
    }
    ok
}

/// `processes_per_host`: a count, or one per GPU of the trainer's instance type (one, with a
/// warning, where hetgen cannot count them).
fn processes_per_host(ctx: &mut Ctx<'_>, t: &RawTrainer, groups: &[Group]) -> Option<u32> {
    let trainer = groups.iter().find(|g| g.role == Role::Trainer);
    match t
        .processes_per_host
        .unwrap_or(ProcessesPerHost::Gpus(PerGpu::Gpu))
    {
        ProcessesPerHost::Count(n) => int_in(
            ctx,
            "hetgen::spec::processes-per-host",
            &path!["trainer", "processes_per_host"],
            n,
            (1, 1024),
        )
        .map(|n| n as u32),
        ProcessesPerHost::Gpus(PerGpu::Gpu) => match trainer.map(|g| (g, g.gpus)) {
            // Trainium's accelerators are counted as chips; a Neuron job runs one process per
            // NeuronCore, which hetgen does not count, so it asks rather than guess.
            Some((g, Some(_))) if crate::catalog::is_neuron(&g.instance_type) => {
                ctx.warn(
                    "hetgen::spec::processes-per-host",
                    &path!["trainer", "script"],
                    format!(
                        "`{}` runs one process per NeuronCore, which hetgen does not count; one process per host",
                        g.instance_type
                    ),
                    "one process per trainer host",
                    "set `processes_per_host` to the number of NeuronCores of the instance type",
                );
                Some(1)
            }
            Some((g, None)) => {
                ctx.warn(
                    "hetgen::spec::processes-per-host",
                    &path!["trainer", "script"],
                    format!(
                        "hetgen does not know how many GPUs `{}` has; one process per host",
                        g.instance_type
                    ),
                    "one process per trainer host",
                    "set `processes_per_host` to the number of GPUs of the instance type",
                );
                Some(1)
            }
            Some((_, Some(gpus))) => Some(gpus.max(1)),
            None => Some(1),
        },
    }
}

/// Checks a path the spec gives relative to a folder: relative, `/`-separated, and (unless
/// `may_leave`) inside that folder.
fn relative_path(ctx: &mut Ctx<'_>, at: &KeyPath, path: &str, may_leave: bool) -> bool {
    let problem = path_problem(path, may_leave);
    if let Some(problem) = problem {
        ctx.error(
            "hetgen::spec::script-path",
            at,
            format!("`{path}` is {problem}"),
            "not a relative path",
            "give a path relative to the folder, with `/` between folders, e.g. `\"src/train.py\"`",
        );
    }
    problem.is_none()
}

/// What is wrong with a path the spec gives relative to a folder, as "`path` is …" ends: not
/// relative, not `/`-separated, or (unless `may_leave`) leaving that folder.
pub(in crate::rules) fn path_problem(path: &str, may_leave: bool) -> Option<&'static str> {
    if path.is_empty() {
        Some("an empty path")
    } else if path.starts_with('/') {
        Some("an absolute path, which works on one machine only")
    } else if path.contains('\\') {
        Some("a path with `\\`")
    } else if !may_leave && path.split('/').any(|part| part == "..") {
        Some("a path that leaves its folder")
    } else {
        None
    }
}
