//! The trainer: either the built-in one (model against the pipeline's output, run length,
//! optimizer, precision) or the user's script (its files, processes per host, base image).

use crate::ctx::Ctx;
use crate::model::{
    BuiltinTrainer, Device, Group, Length, Model, Optimizer, OptimizerName, Pipeline, Precision,
    Role, Schedule, ScheduleName, Source, Trainer,
};
use crate::path;
use crate::raw::{RawSpec, RawTrainer};
use crate::rules::{float_in, int_in};

mod script;

pub(super) use script::{path_problem, source_dir};

pub(super) fn trainer(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    groups: &[Group],
    pipeline: Option<&Pipeline>,
) -> Option<Trainer> {
    let t = &raw.trainer;
    match (t.model, &t.script) {
        (Some(_), Some(_)) => {
            ctx.error_at_key(
                "hetgen::spec::model-and-script",
                &path!["trainer", "script"],
                "`[trainer]` sets both `model` and `script`",
                "second kind of trainer",
                "keep `model` for hetgen's built-in trainer, or `script` to run your own",
            );
            None
        }
        (None, None) => {
            ctx.error(
                "hetgen::spec::no-model-or-script",
                &path!["trainer"],
                "`[trainer]` sets neither `model` nor `script`",
                "what does the trainer group run?",
                "add `script = \"train.py\"` to run your own PyTorch script, or `model = \"mlp\"` \
                 for hetgen's built-in trainer",
            );
            None
        }
        (Some(model), None) => {
            foreign_keys(ctx, t, SCRIPT_KEYS, "hetgen::spec::script-key", "model");
            builtin(ctx, raw, model, groups, pipeline).map(Trainer::Builtin)
        }
        (None, Some(script)) => {
            foreign_keys(ctx, t, BUILTIN_KEYS, "hetgen::spec::builtin-key", "script");
            script::script(ctx, t, script, groups).map(Trainer::Script)
        }
    }
}

/// Keys only the built-in trainer reads.
const BUILTIN_KEYS: &[&str] = &[
    "steps",
    "epochs",
    "num_classes",
    "optimizer",
    "lr_schedule",
    "precision",
    "device",
    "checkpoint_every",
    "log_every",
];

/// Keys only script mode reads.
const SCRIPT_KEYS: &[&str] = &[
    "source_dir",
    "args",
    "requirements",
    "processes_per_host",
    "base_image",
];

/// Reports each key of `keys` that `t` sets: keys of the other kind of trainer than `kind`.
fn foreign_keys(ctx: &mut Ctx<'_>, t: &RawTrainer, keys: &[&str], code: &'static str, kind: &str) {
    let set = |key: &str| match key {
        "steps" => t.steps.is_some(),
        "epochs" => t.epochs.is_some(),
        "num_classes" => t.num_classes.is_some(),
        "optimizer" => t.optimizer.is_some(),
        "lr_schedule" => t.lr_schedule.is_some(),
        "precision" => t.precision.is_some(),
        "device" => t.device.is_some(),
        "checkpoint_every" => t.checkpoint_every.is_some(),
        "log_every" => t.log_every.is_some(),
        "source_dir" => t.source_dir.is_some(),
        "args" => t.args.is_some(),
        "requirements" => t.requirements.is_some(),
        "processes_per_host" => t.processes_per_host.is_some(),
        "base_image" => t.base_image.is_some(),
        _ => false,
    };
    for key in keys.iter().filter(|k| set(k)) {
        let (message, help) = if kind == "script" {
            (
                format!("`{key}` is a setting of the built-in trainer, not of a script"),
                format!(
                    "remove `{key}`: your script decides it (pass it in `args` if the script \
                     takes it), or use `model = …` instead of `script`"
                ),
            )
        } else {
            (
                format!("`{key}` is a script-mode setting, not one of the built-in trainer"),
                format!("remove `{key}`, or use `script = \"train.py\"` instead of `model`"),
            )
        };
        ctx.error_at_key(
            code,
            &path!["trainer"].at(*key),
            message,
            format!("not used with `{kind}`"),
            help,
        );
    }
}

fn builtin(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    model: Model,
    groups: &[Group],
    pipeline: Option<&Pipeline>,
) -> Option<BuiltinTrainer> {
    let t = &raw.trainer;
    let at = path!["trainer"];
    let length = length(ctx, t);
    let num_classes = num_classes(ctx, t, pipeline);
    // A Python source's samples are known only when its dataset runs (and it needs a script
    // anyway: the pipeline's rules say so).
    if let Some(shape) = pipeline.and_then(Pipeline::known_output_shape) {
        model_input(ctx, model, shape);
    }

    let optimizer = optimizer(ctx, raw);
    let lr = optimizer.as_ref().map_or(0.01, |o| o.lr);
    let schedule = schedule(ctx, raw, lr);

    let precision = t.precision.unwrap_or(Precision::Fp32);
    let device = t.device.unwrap_or(Device::Auto);
    check_device(ctx, precision, device, groups);

    let checkpoint_every = t.checkpoint_every.map(|c| {
        int_in(
            ctx,
            "hetgen::spec::checkpoint-every",
            &at.at("checkpoint_every"),
            c,
            (1, i64::MAX),
        )
    });
    let log_every = int_in(
        ctx,
        "hetgen::spec::log-every",
        &at.at("log_every"),
        t.log_every.unwrap_or(10),
        (1, i64::MAX),
    );

    Some(BuiltinTrainer {
        model,
        length: length?,
        num_classes: num_classes? as u32,
        optimizer: optimizer?,
        lr_schedule: schedule?,
        precision,
        device,
        checkpoint_every: match checkpoint_every {
            Some(c) => Some(c? as u64),
            None => None,
        },
        log_every: log_every? as u64,
        deterministic: t.deterministic.unwrap_or(false),
    })
}

/// `steps` or `epochs`, exactly one.
fn length(ctx: &mut Ctx<'_>, t: &RawTrainer) -> Option<Length> {
    let at = path!["trainer"];
    match (t.steps, t.epochs) {
        (Some(_), Some(_)) => {
            ctx.error_at_key(
                "hetgen::spec::steps-and-epochs",
                &at.at("epochs"),
                "both `steps` and `epochs` are set",
                "second length",
                "keep either `steps` or `epochs`",
            );
            None
        }
        (None, None) => {
            ctx.error(
                "hetgen::spec::no-length",
                &at,
                "the trainer has neither `steps` nor `epochs`",
                "how long to train?",
                "add `steps = 1000` or `epochs = 10` to `[trainer]`",
            );
            None
        }
        (Some(s), None) => int_in(
            ctx,
            "hetgen::spec::steps",
            &at.at("steps"),
            s,
            (1, i64::MAX),
        )
        .map(|s| Length::Steps(s as u64)),
        (None, Some(e)) => int_in(
            ctx,
            "hetgen::spec::epochs",
            &at.at("epochs"),
            e,
            (1, 1_000_000),
        )
        .map(|e| Length::Epochs(e as u32)),
    }
}

/// `num_classes`: by default the synthetic source's classes (else 10), and never fewer.
fn num_classes(ctx: &mut Ctx<'_>, t: &RawTrainer, pipeline: Option<&Pipeline>) -> Option<i64> {
    let at = path!["trainer", "num_classes"];
    let synthetic_classes = match pipeline.map(|p| &p.source) {
        Some(Source::Synthetic { classes, .. }) => Some(*classes),
        _ => None,
    };
    let num_classes = int_in(
        ctx,
        "hetgen::spec::num-classes",
        &at,
        t.num_classes
            .unwrap_or(synthetic_classes.map_or(10, i64::from)),
        (1, 1 << 20),
    );
    if let (Some(n), Some(classes)) = (num_classes, synthetic_classes)
        && (n as u32) < classes
    {
        ctx.error(
            "hetgen::spec::num-classes",
            &at,
            format!("the model predicts {n} classes but the source has {classes}"),
            "fewer classes than the data",
            format!("set `num_classes = {classes}` or more"),
        );
    }
    num_classes
}

/// Mixed precision needs CUDA, and CUDA a GPU on the trainer's instance type.
fn check_device(ctx: &mut Ctx<'_>, precision: Precision, device: Device, groups: &[Group]) {
    let at = path!["trainer"];
    let trainer_gpus = groups
        .iter()
        .find(|g| g.role == Role::Trainer)
        .and_then(|g| g.gpus);
    if precision != Precision::Fp32 && device == Device::Cpu {
        ctx.error(
            "hetgen::spec::precision-device",
            &at.at("precision"),
            format!(
                "`{}` autocast on `device = \"cpu\"`",
                precision_name(precision)
            ),
            "needs CUDA",
            "use `precision = \"fp32\"` on CPU, or a CUDA device",
        );
    }
    if device == Device::Cuda && trainer_gpus == Some(0) {
        ctx.error(
            "hetgen::spec::cuda-without-gpu",
            &at.at("device"),
            "`device = \"cuda\"` but the trainer's instance type has no GPU",
            "no GPU there",
            "use a GPU instance type for the trainer group, or `device = \"auto\"`",
        );
    }
}

/// The shapes each model takes: `mnist-cnn` is built for 28×28 grayscale, the ResNets for RGB
/// of at least 32×32 (five stride-2 stages), the MLP for anything.
fn model_input(ctx: &mut Ctx<'_>, model: Model, [h, w, c]: [u32; 3]) {
    let problem = match model {
        Model::Mlp => None,
        Model::MnistCnn if [h, w, c] != [28, 28, 1] => Some((
            "28×28×1 images",
            "end the pipeline with `resize` to `[28, 28]` and decode with `channels = 1`",
        )),
        Model::Resnet18 | Model::Resnet50 if c != 3 || h < 32 || w < 32 => Some((
            "RGB images of at least 32×32",
            "decode with `channels = 3` and crop or resize to at least `[32, 32]` (224 is usual)",
        )),
        _ => None,
    };
    if let Some((wants, help)) = problem {
        let name = match model {
            Model::Mlp => "mlp",
            Model::MnistCnn => "mnist-cnn",
            Model::Resnet18 => "resnet18",
            Model::Resnet50 => "resnet50",
        };
        ctx.error(
            "hetgen::spec::model-input",
            &path!["trainer", "model"],
            format!("`{name}` takes {wants} but the pipeline produces {h}×{w}×{c}"),
            "input shape mismatch",
            help,
        );
    }
}

fn optimizer(ctx: &mut Ctx<'_>, raw: &RawSpec) -> Option<Optimizer> {
    let Some(o) = &raw.trainer.optimizer else {
        return Some(Optimizer {
            name: OptimizerName::Sgd,
            lr: 0.01,
            momentum: 0.9,
            weight_decay: 0.0,
        });
    };
    let at = path!["trainer", "optimizer"];
    let mut ok = true;
    if !(o.lr.is_finite() && o.lr > 0.0 && o.lr <= 100.0) {
        ctx.error(
            "hetgen::spec::learning-rate",
            &at.at("lr"),
            format!("learning rate `{}`", o.lr),
            "must be positive",
            "use a positive learning rate such as 0.1 (SGD) or 0.001 (Adam)",
        );
        ok = false;
    }
    if let Some(m) = o.momentum {
        if o.name != OptimizerName::Sgd {
            ctx.error_at_key(
                "hetgen::spec::momentum",
                &at.at("momentum"),
                "`momentum` is an SGD setting",
                "not used by this optimizer",
                "remove `momentum`, or use `name = \"sgd\"`",
            );
            ok = false;
        } else if !(0.0..1.0).contains(&m) {
            ctx.error(
                "hetgen::spec::momentum",
                &at.at("momentum"),
                format!("momentum `{m}`"),
                "must be in [0, 1)",
                "use a momentum from 0 up to (not including) 1, e.g. 0.9",
            );
            ok = false;
        }
    }
    let wd = o.weight_decay.unwrap_or(0.0);
    ok &= float_in(
        ctx,
        "hetgen::spec::weight-decay",
        &at.at("weight_decay"),
        wd,
        (0.0, 1.0),
        "`weight_decay`",
    );
    ok.then(|| Optimizer {
        name: o.name,
        lr: o.lr,
        momentum: o.momentum.unwrap_or(0.0),
        weight_decay: wd,
    })
}

fn schedule(ctx: &mut Ctx<'_>, raw: &RawSpec, lr: f64) -> Option<Schedule> {
    let Some(s) = &raw.trainer.lr_schedule else {
        return Some(Schedule {
            name: ScheduleName::Constant,
            warmup_steps: 0,
            step_size: None,
            gamma: 0.1,
            min_lr: 0.0,
        });
    };
    let at = path!["trainer", "lr_schedule"];
    let warmup = int_in(
        ctx,
        "hetgen::spec::warmup",
        &at.at("warmup_steps"),
        s.warmup_steps.unwrap_or(0),
        (0, i64::MAX),
    );
    let step_size = match (s.name, s.step_size) {
        (ScheduleName::Step, None) => {
            ctx.error(
                "hetgen::spec::step-size",
                &at,
                "a `step` schedule needs `step_size`",
                "no `step_size`",
                "add `step_size = 1000` (steps between decays)",
            );
            None
        }
        (_, Some(n)) => int_in(
            ctx,
            "hetgen::spec::step-size",
            &at.at("step_size"),
            n,
            (1, i64::MAX),
        )
        .map(Some),
        (_, None) => Some(None),
    };
    let gamma = s.gamma.unwrap_or(0.1);
    let gamma_ok = gamma.is_finite() && gamma > 0.0 && gamma <= 1.0;
    if !gamma_ok {
        ctx.error(
            "hetgen::spec::gamma",
            &at.at("gamma"),
            format!("decay factor `gamma = {gamma}`"),
            "must be in (0, 1]",
            "use a factor such as 0.1",
        );
    }
    let min_lr = s.min_lr.unwrap_or(0.0);
    let min_ok = float_in(
        ctx,
        "hetgen::spec::min-lr",
        &at.at("min_lr"),
        min_lr,
        (0.0, lr),
        "`min_lr`",
    );
    Some(Schedule {
        name: s.name,
        warmup_steps: warmup? as u64,
        step_size: step_size?.map(|n| n as u64),
        gamma: gamma_ok.then_some(gamma)?,
        min_lr: min_ok.then_some(min_lr)?,
    })
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Bf16 => "bf16",
        Precision::Fp16 => "fp16",
    }
}
