//! The data pipeline: its source, where the source's channel goes, and the stages in order (or
//! the user's own Python dataset, which has none).

use crate::ctx::Ctx;
use crate::model::{
    Channel, Group, InputMode, Pipeline, Role, S3Distribution, Source, Stage, TrainerCpus,
};
use crate::path;
use crate::raw::{RawPipeline, RawSource, RawSpec};
use crate::rules::cluster::ticked;
use crate::rules::int_in;
use crate::suggest::did_you_mean;

mod python;
mod stages;

use stages::Flow;

/// Largest image side hetgen accepts, in pixels.
const MAX_SIDE: i64 = 16_384;

pub(super) fn pipeline(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    groups: &[Group],
    channels: &[Channel],
) -> Option<Pipeline> {
    let p = &raw.pipeline;
    let source = source(ctx, raw, groups, channels);
    let batch = int_in(
        ctx,
        "hetgen::spec::batch-size",
        &path!["pipeline", "batch_size"],
        p.batch_size,
        (1, 1 << 20),
    );
    let shard = p.shard_size.map(|s| {
        int_in(
            ctx,
            "hetgen::spec::shard-size",
            &path!["pipeline", "shard_size"],
            s,
            (1, 1 << 24),
        )
    });
    let threads = p.threads.map(|t| {
        int_in(
            ctx,
            "hetgen::spec::threads",
            &path!["pipeline", "threads"],
            t,
            (1, 1024),
        )
    });
    let trainer_cpus = trainer_cpus(ctx, p);

    let (stages, output_shape) = match (&p.source, &source) {
        (RawSource::Python { .. }, _) => (
            python::no_stages(ctx, p).map(|()| Vec::new()),
            Some(Pipeline::UNKNOWN_SHAPE),
        ),
        (_, Some(source)) => stages(ctx, p, source),
        (_, None) => (None, None),
    };

    let batch = batch? as u32;
    Some(Pipeline {
        source: source?,
        batch_size: batch,
        shard_size: match shard {
            Some(s) => s? as u32,
            None => batch.saturating_mul(4),
        },
        threads: match threads {
            Some(t) => Some(t? as u32),
            None => None,
        },
        trainer_cpus: trainer_cpus?,
        stages: stages?,
        output_shape: output_shape?,
    })
}

/// hetgen's stages, each checked against what the samples look like when they reach it, and
/// the shape they leave with; `None` each where any stage is wrong.
fn stages(
    ctx: &mut Ctx<'_>,
    p: &RawPipeline,
    source: &Source,
) -> (Option<Vec<Stage>>, Option<[u32; 3]>) {
    let mut flow = Flow::from_source(source);
    let mut stages = Vec::new();
    for (i, stage) in p.stage.iter().enumerate() {
        if let Some(s) = flow.stage(ctx, i, stage) {
            stages.push(s);
        }
    }
    let output_shape = flow.finish(ctx, p.stage.len());
    (
        (stages.len() == p.stage.len()).then_some(stages),
        output_shape,
    )
}

/// `reserve_vcpus` or `trainer_threads`, not both.
fn trainer_cpus(ctx: &mut Ctx<'_>, p: &RawPipeline) -> Option<TrainerCpus> {
    let reserve = p.reserve_vcpus.map(|r| {
        int_in(
            ctx,
            "hetgen::spec::reserve-vcpus",
            &path!["pipeline", "reserve_vcpus"],
            r,
            (0, 100_000),
        )
    });
    let threads = p.trainer_threads.map(|t| {
        int_in(
            ctx,
            "hetgen::spec::threads",
            &path!["pipeline", "trainer_threads"],
            t,
            (0, 1024),
        )
    });
    match (reserve, threads) {
        (Some(_), Some(_)) => {
            ctx.error_at_key(
                "hetgen::spec::trainer-cpus",
                &path!["pipeline", "trainer_threads"],
                "`reserve_vcpus` and `trainer_threads` both say how many of the trainer's vCPUs \
                 preprocess",
                "set one of them",
                "keep `reserve_vcpus` (vCPUs the training loop keeps) or `trainer_threads` \
                 (pipeline threads outright), not both",
            );
            None
        }
        (Some(r), None) => Some(TrainerCpus::Reserve(r? as u32)),
        (None, Some(t)) => Some(TrainerCpus::Threads(t? as u32)),
        (None, None) => Some(TrainerCpus::Auto),
    }
}

fn source(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    groups: &[Group],
    channels: &[Channel],
) -> Option<Source> {
    let at = path!["pipeline", "source"];
    // Explicitly none of the trainer's vCPUs preprocess beside data groups.
    let trainer_off = raw.pipeline.trainer_threads == Some(0);
    let job_mode = raw.sagemaker.as_ref().and_then(|sm| sm.input_mode);
    let mut reads = |channel: &str| {
        source_channel(ctx, channel, groups, channels, trainer_off, job_mode);
    };
    match &raw.pipeline.source {
        RawSource::ImageFolder { channel } => {
            reads(channel);
            Some(Source::ImageFolder {
                channel: channel.clone(),
            })
        }
        RawSource::TarShards { channel } => {
            reads(channel);
            Some(Source::TarShards {
                channel: channel.clone(),
            })
        }
        RawSource::Python {
            dataset,
            collate,
            channel,
        } => {
            reads(channel);
            let (dataset, collate) = python::functions(ctx, raw, dataset, collate.as_deref())?;
            Some(Source::Python {
                dataset,
                collate,
                channel: channel.clone(),
            })
        }
        RawSource::Synthetic {
            shape,
            classes,
            samples,
            encoding,
        } => {
            let [h, w, c] = *shape;
            let sides_ok = [h, w].iter().all(|s| (1..=MAX_SIDE).contains(s));
            if !sides_ok || !(c == 1 || c == 3) {
                ctx.error(
                    "hetgen::spec::synthetic-shape",
                    &at.at("shape"),
                    format!("synthetic shape `[{h}, {w}, {c}]` is not an image shape"),
                    "`[height, width, channels]`",
                    format!(
                        "use sides from 1 to {MAX_SIDE} and 1 or 3 channels, e.g. `[28, 28, 1]`"
                    ),
                );
            }
            let classes = int_in(
                ctx,
                "hetgen::spec::synthetic-classes",
                &at.at("classes"),
                classes.unwrap_or(10),
                (1, 1 << 20),
            );
            let samples = int_in(
                ctx,
                "hetgen::spec::synthetic-samples",
                &at.at("samples"),
                samples.unwrap_or(1024),
                (1, 1 << 40),
            );
            Some(Source::Synthetic {
                shape: [
                    h.clamp(1, MAX_SIDE) as u32,
                    w.clamp(1, MAX_SIDE) as u32,
                    c.clamp(1, 3) as u32,
                ],
                classes: classes? as u32,
                samples: samples? as u64,
                encoding: *encoding,
            })
        }
    }
}

/// The source's channel must exist, reach every group that runs the pipeline, hold the whole
/// data set on each host that runs it, and be files a host can open.
fn source_channel(
    ctx: &mut Ctx<'_>,
    name: &str,
    groups: &[Group],
    channels: &[Channel],
    trainer_off: bool,
    job_mode: Option<InputMode>,
) {
    let at = path!["pipeline", "source", "channel"];
    let Some(index) = channels.iter().position(|c| c.name == name) else {
        let names: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
        let help = match did_you_mean(name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None if names.is_empty() => {
                format!("add a `[[channel]]` named `{name}` with the data's uri")
            }
            None => format!("use one of the job's channels: {}", ticked(&names)),
        };
        ctx.error(
            "hetgen::spec::unknown-channel",
            &at,
            format!("the pipeline reads unknown channel `{name}`"),
            "no such channel",
            help,
        );
        return;
    };
    let channel = &channels[index];
    if channel.distribution == S3Distribution::ShardedByS3Key {
        sharded_source(ctx, index, channel, groups, trainer_off);
    }
    if channel.input_mode.or(job_mode) == Some(InputMode::Pipe) {
        piped_source(ctx, index, channel);
    }
    if channel.instance_groups.is_empty() {
        return; // Without instance_groups SageMaker gives every channel to every host.
    }
    let has_data = groups.iter().any(|g| g.role == Role::Data);
    for g in groups {
        let runs_pipeline = g.role == Role::Data || !has_data;
        if runs_pipeline && !channel.instance_groups.contains(&g.name) {
            ctx.error(
                "hetgen::spec::channel-unreached",
                &path!["channel", index, "instance_groups"],
                format!(
                    "channel `{name}` does not reach group `{}`, which runs the pipeline",
                    g.name
                ),
                format!("`{}` missing", g.name),
                format!("add `\"{}\"` to this channel's `instance_groups`", g.name),
            );
        }
    }
}

/// In `Pipe` mode SageMaker hands the container a FIFO per epoch (`<channel>_<epoch>`) that
/// streams the channel's objects once, in order, to one reader, and no files. The pipeline's
/// hosts need files they can open at any point: the data service deals any shard of an epoch to
/// any host, a backup copy reads the same files again on another host, and a resumed epoch
/// starts mid-way. `FastFile` streams from S3 on demand as `Pipe` does, without the copy `File`
/// makes before training, and shows the objects as files.
fn piped_source(ctx: &mut Ctx<'_>, index: usize, channel: &Channel) {
    let at = if channel.input_mode.is_some() {
        path!["channel", index, "input_mode"]
    } else {
        path!["sagemaker", "input_mode"]
    };
    ctx.error(
        "hetgen::spec::piped-source",
        &at,
        format!(
            "the pipeline reads channel `{}`, which is in Pipe mode",
            channel.name
        ),
        "a pipe is read once, in order, by one reader",
        "use `input_mode = \"FastFile\"`: it streams from S3 on demand as Pipe does, and \
         shows the objects as files any host can open, which the data service's shards, \
         backup copies and resumed epochs need",
    );
}

/// `ShardedByS3Key` gives each receiving host a different part of the objects, but the data
/// service may give any shard of an epoch to any host that runs the pipeline (and a trainer's
/// ranks split the same epoch plan), so every such host needs the whole data set: sharding the
/// source is only sound when a single host runs the pipeline.
fn sharded_source(
    ctx: &mut Ctx<'_>,
    index: usize,
    channel: &Channel,
    groups: &[Group],
    trainer_off: bool,
) {
    let has_data = groups.iter().any(|g| g.role == Role::Data);
    let reached = |role: Role| -> u32 {
        groups
            .iter()
            .filter(|g| g.role == role)
            .filter(|g| channel.reaches(&g.name))
            .map(|g| g.count)
            .sum()
    };
    let data_hosts = reached(Role::Data);
    // Beside data groups the trainer's host preprocesses too (hybrid input) unless told not to.
    let trainer_hosts = if has_data && trainer_off {
        0
    } else {
        reached(Role::Trainer)
    };
    let hosts = data_hosts + trainer_hosts;
    if hosts > 1 {
        let mut help = "use `distribution = \"FullyReplicated\"`: any host that runs the \
                        pipeline may be given any shard of an epoch, so each needs the whole \
                        data set"
            .to_owned();
        if has_data && trainer_hosts > 0 && data_hosts <= 1 {
            help += ", or keep the trainer's own pipeline off it with `trainer_threads = 0`";
        }
        ctx.error(
            "hetgen::spec::sharded-source",
            &path!["channel", index, "distribution"],
            format!(
                "the pipeline reads channel `{}`, which is ShardedByS3Key, on {hosts} hosts",
                channel.name
            ),
            "each host would hold a different part",
            help,
        );
    }
}
