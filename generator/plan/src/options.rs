//! The ways to lift a GPU utilisation cap, each priced per busy GPU-hour.
//!
//! The decision AWS's guidance on heterogeneous clusters asks users to make: when a job is
//! CPU-bound, first a bigger instance with the same GPUs and more vCPUs per GPU (within the
//! family, and — labelled as such — other families with the same GPU kind and count); where
//! none exists, CPU data groups; or both. Every option is the cluster as written with that
//! change, counted by the same rule as the cluster itself ([`Job::trainer_threads`] for the
//! trainer hosts' own pipeline, hybrid input included), and ranked by $ per busy GPU-hour.

use hetgen_spec::model::{Group, Role};
use hetgen_spec::{Catalog, InstanceType, Job, catalog};
use serde::Serialize;

use crate::{GroupPlan, PlanError, Prices, busy_cost, cap, group_plans, sides, total};

/// SageMaker's limit on instance groups per job: an option may not need a sixth.
const MAX_GROUPS: usize = 5;

/// A share of time at or above this counts as 100% (sums of vCPUs are exact; this absorbs the
/// division's rounding only).
const FULL: f64 = 1.0 - 1e-12;

/// One way to run the job: the cluster as written, or with a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// What differs from the spec.
    pub change: Change,
    /// The resulting cluster, spec order, an added data group last: each group counted and
    /// priced as the plan counts the spec's own.
    pub groups: Vec<GroupPlan>,
    /// Instances of every group together.
    pub instances: u32,
    /// Whether the cluster has a data group (of the spec's or an added one).
    pub needs_data_group: bool,
    /// vCPUs that run the pipeline, trainer hosts' own share included.
    pub pipeline_vcpus: u32,
    /// Predicted GPU utilisation cap, 0–1.
    pub gpu_cap: f64,
    /// $/h of the whole cluster; `None` when a type has no known price.
    pub cluster_price_per_hour: Option<f64>,
    /// $/h per fully busy GPU-hour at `gpu_cap`; `None` without a price.
    pub cost_per_busy_gpu_hour: Option<f64>,
    /// The cluster's instance types that have no known price.
    pub unpriced: Vec<String>,
    /// Its data groups' hosts checked against a Python dataset's needs; empty until
    /// [`Plan::with_data_hosts`](crate::Plan::with_data_hosts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_hosts: Vec<crate::HostCheck>,
}

/// What a [`Choice`] changes: nothing (the cluster as written), the trainer's type, an added
/// data group, or both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The trainer group on another type.
    pub trainer: Option<Swap>,
    /// A data group added beside the spec's groups.
    pub data: Option<AddedData>,
}

impl Change {
    /// The cluster as written.
    pub fn is_none(&self) -> bool {
        self.trainer.is_none() && self.data.is_none()
    }
}

/// The trainer group moved to a type with the same GPUs and more vCPUs per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Swap {
    pub from: String,
    pub to: String,
    pub kind: SwapKind,
}

/// How the trainer's new type relates to its old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwapKind {
    /// A bigger instance of the same family (`ml.g5.8xlarge` → `ml.g5.16xlarge`).
    ScaleUp,
    /// Another family with the same GPU kind and count per instance.
    SameGpu,
}

/// A data group of `count` × `instance_type` added to the cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddedData {
    pub instance_type: String,
    pub count: u32,
    /// All of its vCPUs.
    pub vcpus: u32,
}

/// Which option to take, by two measures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The option with the lowest $ per busy GPU-hour (an index into the options).
    pub cheapest: Option<usize>,
    /// Of the options that lift the cap to 100%, the one with the least to run: no data group
    /// over one, then the fewest groups and instances, then the cheapest.
    pub simplest: Option<usize>,
    /// Types with the trainer's GPU kind and count and more vCPUs per GPU, in the catalog.
    pub bigger_types: usize,
}

impl Decision {
    pub(crate) fn of(choices: &[Choice], bigger_types: usize) -> Decision {
        let cheapest = choices
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.cost_per_busy_gpu_hour?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i);
        let simplest = choices
            .iter()
            .enumerate()
            .filter(|(_, c)| c.gpu_cap >= FULL)
            .min_by(|(_, a), (_, b)| {
                a.needs_data_group
                    .cmp(&b.needs_data_group)
                    .then(a.groups.len().cmp(&b.groups.len()))
                    .then(a.instances.cmp(&b.instances))
                    .then(cost_key(a).total_cmp(&cost_key(b)))
            })
            .map(|(i, _)| i);
        Decision {
            cheapest,
            simplest,
            bigger_types,
        }
    }
}

fn cost_key(c: &Choice) -> f64 {
    c.cost_per_busy_gpu_hour.unwrap_or(f64::INFINITY)
}

/// Whether a data group may be made of `instance`: a CPU type that can hold a pipeline's steady
/// load (not a burstable one, whose vCPUs slow to a fraction once its credits run out).
fn is_data_type(instance: &InstanceType) -> bool {
    instance.gpus == 0 && !catalog::is_burstable(&instance.name)
}

/// Every way to run `job` that `needed` vCPUs call for, ranked; and how many CPU types were
/// left out for want of a price. `keep` bounds the data groups tried with the trainer as
/// written (one, the cheapest, with each bigger trainer type).
pub(crate) fn choices(
    job: &Job,
    catalog: &Catalog,
    prices: &Prices,
    needed: f64,
    keep: usize,
) -> Result<(Vec<Choice>, usize, usize), PlanError> {
    let unpriced_cpu_types = catalog
        .instances
        .iter()
        .filter(|i| is_data_type(i) && prices.get(&i.name).is_none())
        .count();
    let as_written = evaluate(job, prices, needed, no_change())?;
    let trainer = job.trainer_group();
    let bigger = bigger_types(catalog, &trainer.instance_type);
    if as_written.gpu_cap >= FULL {
        return Ok((vec![as_written], unpriced_cpu_types, bigger.len()));
    }

    let mut out = Vec::new();
    let mut trainers: Vec<(Job, Option<Swap>)> = vec![(job.clone(), None)];
    for to in &bigger {
        let swap = Swap {
            from: trainer.instance_type.clone(),
            to: to.name.clone(),
            kind: if to.family() == hetgen_spec::catalog::family(&trainer.instance_type) {
                SwapKind::ScaleUp
            } else {
                SwapKind::SameGpu
            },
        };
        trainers.push((swapped(job, to), Some(swap)));
    }
    for (variant, swap) in trainers {
        let base = match &swap {
            None => as_written.clone(),
            Some(s) => evaluate(
                &variant,
                prices,
                needed,
                Change {
                    trainer: Some(s.clone()),
                    data: None,
                },
            )?,
        };
        // A bigger trainer whose extra vCPUs the runtime would not use (`threads` or
        // `trainer_threads` fixed, or a trainer that does not read the data) lifts nothing.
        if swap.is_some() && base.pipeline_vcpus <= as_written.pipeline_vcpus {
            continue;
        }
        let short = base.gpu_cap < FULL;
        out.push(base);
        if short && variant.groups.len() < MAX_GROUPS {
            let keep = if swap.is_none() { keep } else { keep.min(1) };
            for data in data_groups(&variant, catalog, prices, needed, keep)? {
                let change = Change {
                    trainer: swap.clone(),
                    data: Some(data.clone()),
                };
                out.push(evaluate(
                    &with_data(&variant, catalog, &data),
                    prices,
                    needed,
                    change,
                )?);
            }
        }
    }
    rank(&mut out);
    Ok((out, unpriced_cpu_types, bigger.len()))
}

fn no_change() -> Change {
    Change {
        trainer: None,
        data: None,
    }
}

/// Priced options by $ per busy GPU-hour (no data group first among equals, then fewer
/// instances); then unpriced ones, highest utilisation first.
fn rank(choices: &mut [Choice]) {
    choices.sort_by(|a, b| {
        let priced = |c: &Choice| c.cost_per_busy_gpu_hour.is_none();
        priced(a)
            .cmp(&priced(b))
            .then(cost_key(a).total_cmp(&cost_key(b)))
            .then(b.gpu_cap.total_cmp(&a.gpu_cap))
            .then(a.needs_data_group.cmp(&b.needs_data_group))
            .then(a.instances.cmp(&b.instances))
    });
}

/// Catalog types with the GPU kind and count of `trainer` and more vCPUs: each lifts the
/// trainer hosts' own pipeline without a second group. Fewest vCPUs first.
fn bigger_types<'a>(catalog: &'a Catalog, trainer: &str) -> Vec<&'a InstanceType> {
    let Some(t) = catalog.get(trainer) else {
        return Vec::new();
    };
    let mut out: Vec<&InstanceType> = catalog
        .instances
        .iter()
        .filter(|i| t.gpus > 0 && i.gpus == t.gpus && i.gpu_kind == t.gpu_kind && i.vcpus > t.vcpus)
        .collect();
    out.sort_by(|a, b| a.vcpus.cmp(&b.vcpus).then(a.name.cmp(&b.name)));
    out
}

/// `job` with its trainer group on `to` (priced from the price source, not the spec).
fn swapped(job: &Job, to: &InstanceType) -> Job {
    let mut variant = job.clone();
    for g in variant
        .groups
        .iter_mut()
        .filter(|g| g.role == Role::Trainer)
    {
        g.instance_type = to.name.clone();
        g.vcpus = Some(to.vcpus);
        g.gpus = Some(to.gpus);
        g.price_per_hour = None;
    }
    variant
}

/// `job` with `data` added as one more data group.
fn with_data(job: &Job, catalog: &Catalog, data: &AddedData) -> Job {
    let mut variant = job.clone();
    let taken = |name: &str| variant.groups.iter().any(|g| g.name == name);
    let mut name = "data_group".to_owned();
    let mut n = 2;
    while taken(&name) {
        name = format!("data_group_{n}");
        n += 1;
    }
    let vcpus = catalog.get(&data.instance_type).map(|i| i.vcpus);
    variant.groups.push(Group {
        name,
        instance_type: data.instance_type.clone(),
        count: data.count,
        role: Role::Data,
        distribution: None,
        vcpus,
        gpus: Some(0),
        price_per_hour: None,
    });
    variant
}

/// The cheapest data groups (up to `keep`, and the cheapest single-type group with the fewest
/// instances) that, beside `job`'s own, cover what `needed` asks for: one CPU type each, the
/// fewest instances of it.
fn data_groups(
    job: &Job,
    catalog: &Catalog,
    prices: &Prices,
    needed: f64,
    keep: usize,
) -> Result<Vec<AddedData>, PlanError> {
    let Some(probe_type) = catalog.instances.iter().find(|i| i.gpus == 0) else {
        return Ok(Vec::new());
    };
    // With a data group the trainer's own share is the hybrid one (or none): count it as the
    // runtime will, on a cluster that has one.
    let probe = with_data(
        job,
        catalog,
        &AddedData {
            instance_type: probe_type.name.clone(),
            count: 1,
            vcpus: probe_type.vcpus,
        },
    );
    let groups = group_plans(&probe, prices)?;
    let trainer_share = sides(&probe, &groups, None)?[0].vcpus;
    let existing = total(
        groups[..groups.len() - 1]
            .iter()
            .filter(|g| g.role == Role::Data)
            .filter_map(|g| g.vcpus),
        "vCPUs",
    )?;
    let deficit = needed - f64::from(trainer_share) - f64::from(existing);

    let mut out: Vec<(f64, AddedData)> = catalog
        .instances
        .iter()
        .filter(|i| is_data_type(i))
        .filter_map(|i| {
            let price = prices.get(&i.name)?.usd_per_hour;
            // Options too large to count are not options.
            let count = (deficit / f64::from(i.vcpus)).ceil().max(1.0);
            let count = (count <= f64::from(u32::MAX)).then_some(count as u32)?;
            let vcpus = i.vcpus.checked_mul(count)?;
            let data = AddedData {
                instance_type: i.name.clone(),
                count,
                vcpus,
            };
            Some((price * f64::from(count), data))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.count.cmp(&b.1.count)));
    // The cheapest `keep`, and the cheapest of those with the fewest instances (the simplest
    // data group) when they leave it out.
    let fewest = out.iter().map(|(_, d)| d.count).min();
    let mut kept: Vec<AddedData> = out.iter().take(keep).map(|(_, d)| d.clone()).collect();
    if keep > 0
        && let Some(fewest) = fewest
        && !kept.iter().any(|d| d.count == fewest)
        && let Some((_, d)) = out.iter().find(|(_, d)| d.count == fewest)
    {
        kept.push(d.clone());
    }
    Ok(kept)
}

/// `job` counted, priced and capped as a [`Choice`].
fn evaluate(job: &Job, prices: &Prices, needed: f64, change: Change) -> Result<Choice, PlanError> {
    let groups = group_plans(job, prices)?;
    let pipeline_vcpus = total(sides(job, &groups, None)?.iter().map(|s| s.vcpus), "vCPUs")?;
    let gpus = total(groups.iter().filter_map(|g| g.gpus), "GPUs")?;
    let gpu_cap = cap(f64::from(pipeline_vcpus), needed);
    let price = groups.iter().map(|g| g.price_per_hour).sum::<Option<f64>>();
    let mut unpriced: Vec<String> = groups
        .iter()
        .filter(|g| g.price_per_hour.is_none())
        .map(|g| g.instance_type.clone())
        .collect();
    unpriced.sort();
    unpriced.dedup();
    Ok(Choice {
        change,
        instances: total(groups.iter().map(|g| g.count), "instances")?,
        needs_data_group: groups.iter().any(|g| g.role == Role::Data),
        pipeline_vcpus,
        gpu_cap,
        cluster_price_per_hour: price,
        cost_per_busy_gpu_hour: busy_cost(price, gpus, gpu_cap),
        unpriced,
        groups,
        data_hosts: Vec::new(),
    })
}
