//! Instance groups and channels: the shape of the cluster and where its data goes.

use std::collections::BTreeSet;

use crate::catalog::Catalog;
use crate::ctx::Ctx;
use crate::model::{Channel, Group, Role, S3Distribution};
use crate::path;
use crate::raw::{RawChannel, RawInstanceGroup, RawSpec};
use crate::rules::{int_in, is_remote_uri};
use crate::suggest::did_you_mean;

/// Most instance groups one job may have.
const MAX_GROUPS: usize = 5;
/// Most channels one job may have.
const MAX_CHANNELS: usize = 20;

pub(super) fn groups(ctx: &mut Ctx<'_>, raw: &RawSpec) -> Vec<Group> {
    let catalog = Catalog::builtin();
    if raw.instance_group.is_empty() {
        ctx.error(
            "hetgen::spec::no-groups",
            &path!["instance_group"],
            "the job has no instance groups",
            "no `[[instance_group]]`",
            "add an `[[instance_group]]` with `role = \"trainer\"`",
        );
    }
    if raw.instance_group.len() > MAX_GROUPS {
        ctx.error(
            "hetgen::spec::too-many-groups",
            &path!["instance_group", MAX_GROUPS],
            format!(
                "{} instance groups, SageMaker allows at most {MAX_GROUPS}",
                raw.instance_group.len()
            ),
            "one group too many",
            "merge groups of the same instance type and role",
        );
    }

    let mut seen = BTreeSet::new();
    let groups = (raw.instance_group.iter().enumerate())
        .map(|(i, g)| group(ctx, catalog, i, g, &mut seen))
        .collect();
    trainer_groups(ctx, raw);
    groups
}

/// One `[[instance_group]]`, with what the catalog knows of its type; `seen` holds the names
/// of the groups before it.
fn group<'a>(
    ctx: &mut Ctx<'_>,
    catalog: &Catalog,
    i: usize,
    g: &'a RawInstanceGroup,
    seen: &mut BTreeSet<&'a str>,
) -> Group {
    let at = path!["instance_group", i];
    group_name(ctx, i, g, seen);
    let count = g.count.unwrap_or(1);
    int_in(
        ctx,
        "hetgen::spec::instance-count",
        &at.at("count"),
        count,
        (1, 10_000),
    );

    let entry = catalog.get(&g.instance_type);
    if entry.is_none() {
        unknown_instance_type(
            ctx,
            catalog,
            i,
            &g.instance_type,
            g.allow_unknown_instance_type,
        );
    }
    if let Some(price) = g.price_per_hour
        && !(price.is_finite() && price >= 0.0)
    {
        ctx.error(
            "hetgen::spec::price",
            &at.at("price_per_hour"),
            format!("`price_per_hour` is `{price}`"),
            "not a price",
            "give the on-demand price in USD per instance-hour, 0 or more",
        );
    }
    if g.distribution.is_some() && g.role != Role::Trainer {
        ctx.error(
            "hetgen::spec::distribution-group",
            &at.at("distribution"),
            format!("data group `{}` has a distribution strategy", g.name),
            "only the trainer group may have one",
            "remove `distribution` here; SageMaker applies a strategy to one group only",
        );
    }
    let gpus = entry.map(|e| e.gpus);
    gpu_warnings(ctx, i, g, gpus);
    Group {
        name: g.name.clone(),
        instance_type: g.instance_type.clone(),
        count: count.clamp(1, 10_000) as u32,
        role: g.role,
        distribution: g.distribution,
        vcpus: entry.map(|e| e.vcpus),
        gpus,
        price_per_hour: g.price_per_hour,
    }
}

/// A group's name: printable, 1 to 64 characters, and its own.
fn group_name<'a>(
    ctx: &mut Ctx<'_>,
    i: usize,
    g: &'a RawInstanceGroup,
    seen: &mut BTreeSet<&'a str>,
) {
    let at = path!["instance_group", i, "name"];
    let name_ok = !g.name.is_empty() && g.name.chars().count() <= 64;
    if !name_ok || g.name.chars().any(char::is_control) {
        ctx.error(
            "hetgen::spec::group-name",
            &at,
            format!("`{}` is not a valid instance group name", g.name),
            "1 to 64 printable characters",
            "name the group with 1 to 64 printable characters, e.g. `data_group`",
        );
    }
    if !seen.insert(g.name.as_str()) {
        ctx.error(
            "hetgen::spec::duplicate-group",
            &at,
            format!("instance group `{}` is defined twice", g.name),
            "second definition",
            "give every instance group its own name",
        );
    }
}

/// GPUs a data group would leave idle, or a trainer without any: allowed, but likely a slip.
fn gpu_warnings(ctx: &mut Ctx<'_>, i: usize, g: &RawInstanceGroup, gpus: Option<u32>) {
    let at = path!["instance_group", i, "instance_type"];
    match (g.role, gpus) {
        (Role::Data, Some(n)) if n > 0 => ctx.warn(
            "hetgen::spec::data-group-gpus",
            &at,
            format!(
                "data group `{}` runs on `{}`, which has {n} GPU(s)",
                g.name, g.instance_type
            ),
            "the data role uses only CPUs",
            "pick a CPU instance type (e.g. `ml.c5.9xlarge`) for preprocessing; GPUs here sit idle",
        ),
        (Role::Trainer, Some(0)) => ctx.warn(
            "hetgen::spec::trainer-without-gpus",
            &at,
            format!(
                "trainer group `{}` runs on `{}`, which has no GPU",
                g.name, g.instance_type
            ),
            "trains on CPU",
            "use a GPU instance type (e.g. `ml.p3.2xlarge`) unless CPU training is intended",
        ),
        _ => {}
    }
}

fn unknown_instance_type(
    ctx: &mut Ctx<'_>,
    catalog: &Catalog,
    index: usize,
    given: &str,
    allowed: Option<bool>,
) {
    let at = path!["instance_group", index, "instance_type"];
    if allowed == Some(true) {
        if !given.starts_with("ml.") {
            ctx.error(
                "hetgen::spec::instance-type",
                &at,
                format!("`{given}` is not a SageMaker instance type"),
                "SageMaker types start with `ml.`",
                "write the type as SageMaker names it, e.g. `ml.c5.9xlarge`",
            );
        }
        return;
    }
    let help = match did_you_mean(given, catalog.names()) {
        Some(s) => format!(
            "did you mean `{s}`? (a type newer than hetgen's catalog needs `allow_unknown_instance_type = true`)"
        ),
        None => "use a type from hetgen's catalog, or set `allow_unknown_instance_type = true` for a type newer than it".to_owned(),
    };
    ctx.error(
        "hetgen::spec::instance-type",
        &at,
        format!("unknown instance type `{given}`"),
        "not in hetgen's catalog",
        help,
    );
}

fn trainer_groups(ctx: &mut Ctx<'_>, raw: &RawSpec) {
    let trainers: Vec<usize> = raw
        .instance_group
        .iter()
        .enumerate()
        .filter(|(_, g)| g.role == Role::Trainer)
        .map(|(i, _)| i)
        .collect();
    match trainers.as_slice() {
        [] if !raw.instance_group.is_empty() => ctx.error(
            "hetgen::spec::no-trainer",
            &path!["instance_group", 0, "role"],
            "no instance group has `role = \"trainer\"`",
            "every group here is a data group",
            "set `role = \"trainer\"` on the group with the GPUs",
        ),
        [] => {}
        [only] => {
            let count = raw.instance_group[*only].count.unwrap_or(1);
            // Script mode runs the user's script under torchrun on every host of the group;
            // the built-in trainer trains on one.
            if count > 1 && raw.trainer.script.is_none() {
                ctx.error(
                    "hetgen::spec::multi-host-trainer",
                    &path!["instance_group", *only, "count"],
                    format!(
                        "the trainer group has {count} instances; the built-in trainer trains on one host"
                    ),
                    "more than one trainer host",
                    "use `count = 1` with a larger GPU instance (every GPU of the host is used), \
                     or train on several hosts with your own script: `[trainer] script = \"train.py\"`",
                );
            }
        }
        [_, second, ..] => ctx.error(
            "hetgen::spec::two-trainers",
            &path!["instance_group", *second, "role"],
            "more than one instance group has `role = \"trainer\"`",
            "second trainer group",
            "keep one trainer group; make the others `role = \"data\"`",
        ),
    }
}

pub(super) fn channels(ctx: &mut Ctx<'_>, raw: &RawSpec, groups: &[Group]) -> Vec<Channel> {
    if raw.channel.len() > MAX_CHANNELS {
        ctx.error(
            "hetgen::spec::too-many-channels",
            &path!["channel", MAX_CHANNELS],
            format!(
                "{} channels, SageMaker allows at most {MAX_CHANNELS}",
                raw.channel.len()
            ),
            "one channel too many",
            "put related data under one S3 prefix",
        );
    }
    let named = raw
        .channel
        .iter()
        .filter(|c| c.instance_groups.is_some())
        .count();
    let group_names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut channels = Vec::new();
    for (i, c) in raw.channel.iter().enumerate() {
        let at = path!["channel", i];
        let valid_name = !c.name.is_empty()
            && c.name.len() <= 64
            && c.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !valid_name {
            ctx.error(
                "hetgen::spec::channel-name",
                &at.at("name"),
                format!("`{}` is not a valid channel name", c.name),
                "not a valid channel name",
                "use 1 to 64 letters, digits, `.`, `-` or `_`",
            );
        }
        if !seen.insert(c.name.as_str()) {
            ctx.error(
                "hetgen::spec::duplicate-channel",
                &at.at("name"),
                format!("channel `{}` is defined twice", c.name),
                "second definition",
                "give every channel its own name",
            );
        }
        channel_uri(ctx, raw, i);
        channel_groups(ctx, i, c, &group_names, named > 0);

        let local_path = c
            .local_path
            .clone()
            .or_else(|| (!is_remote_uri(&c.uri)).then(|| c.uri.clone()));
        channels.push(Channel {
            name: c.name.clone(),
            uri: c.uri.clone(),
            local_path,
            instance_groups: c.instance_groups.clone().unwrap_or_default(),
            distribution: c.distribution.unwrap_or(S3Distribution::FullyReplicated),
            input_mode: c.input_mode,
            content_type: c.content_type.clone(),
        });
    }
    channels
}

/// A channel's `instance_groups`: the job's groups, each once; on every channel or on none
/// (`others_name_groups`: another channel has the key).
fn channel_groups(
    ctx: &mut Ctx<'_>,
    i: usize,
    c: &RawChannel,
    group_names: &[&str],
    others_name_groups: bool,
) {
    let at = path!["channel", i];
    let Some(list) = &c.instance_groups else {
        if others_name_groups {
            ctx.error(
                "hetgen::spec::channel-groups-partial",
                &at.at("name"),
                format!(
                    "channel `{}` names no instance groups, but other channels do",
                    c.name
                ),
                "no `instance_groups`",
                "SageMaker needs `instance_groups` on every channel once one has it; add it here",
            );
        }
        return;
    };
    if list.is_empty() {
        ctx.error(
            "hetgen::spec::channel-groups-empty",
            &at.at("instance_groups"),
            format!("channel `{}` names no instance groups", c.name),
            "empty list",
            "name the groups that read this channel, or leave `instance_groups` out",
        );
    }
    let mut listed = BTreeSet::new();
    for (j, name) in list.iter().enumerate() {
        let item = at.at("instance_groups").at(j);
        if !group_names.contains(&name.as_str()) {
            let help = match did_you_mean(name, group_names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("name one of the job's groups: {}", ticked(group_names)),
            };
            ctx.error(
                "hetgen::spec::unknown-group",
                &item,
                format!("channel `{}` names unknown instance group `{name}`", c.name),
                "no such group",
                help,
            );
        } else if !listed.insert(name.as_str()) {
            ctx.error(
                "hetgen::spec::duplicate-channel-group",
                &item,
                format!("group `{name}` is listed twice"),
                "listed twice",
                "list each group once",
            );
        }
    }
}

fn channel_uri(ctx: &mut Ctx<'_>, raw: &RawSpec, index: usize) {
    let c = &raw.channel[index];
    let at = path!["channel", index, "uri"];
    if raw.sagemaker.is_some() && !is_remote_uri(&c.uri) {
        ctx.error(
            "hetgen::spec::channel-uri",
            &at,
            format!("channel `{}` reads `{}`, which SageMaker cannot reach", c.name, c.uri),
            "not an `s3://` or `https://` uri",
            "use an `s3://bucket/prefix/` uri, and put a local copy in `local_path` for `deploy --local`",
        );
    } else if c.uri.is_empty() || c.uri.len() > 1024 {
        ctx.error(
            "hetgen::spec::channel-uri",
            &at,
            format!(
                "channel `{}` has a uri of {} characters",
                c.name,
                c.uri.len()
            ),
            "1 to 1024 characters",
            "give the channel's location in 1 to 1024 characters",
        );
    }
    if let Some(local) = &c.local_path
        && local.is_empty()
    {
        ctx.error(
            "hetgen::spec::channel-uri",
            &path!["channel", index, "local_path"],
            "`local_path` is empty",
            "empty",
            "give a local folder, or leave `local_path` out",
        );
    }
}

pub(crate) fn ticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
