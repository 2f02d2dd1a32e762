//! # hetgen-plan
//!
//! The arithmetic behind "how do I keep my GPUs busy?" and "what did the change buy?".
//!
//! - [`plan`]: per group and in total, vCPUs, GPUs, $/h and the vCPU:GPU ratio; given the vCPUs
//!   the pipeline needs per GPU, the cluster's GPU utilisation cap and every way to lift it,
//!   ranked by $ per busy GPU-hour ([`Choice`], [`Decision`]).
//! - [`Prices`]: the on-demand prices a plan uses, from hetgen's catalog or the AWS Price List,
//!   each with where it came from and when.
//! - [`compare`]: two clusters' cost per step from measured step times.
//! - [`Plan::with_data_hosts`]: for a Python dataset, whether each data host's network and
//!   memory can carry its share ([`HostCheck`]).
//!
//! The model: a GPU is busy at most `available vCPUs / needed vCPUs` of the time, where
//! `needed = cpu_per_gpu × GPUs` and `available` counts every data instance's vCPUs plus what
//! each trainer host's own pipeline gets: [`Job::trainer_threads`], the function the launcher
//! sizes that pipeline with (the host's vCPUs less `reserve_vcpus`; with data groups this is
//! the hybrid input). An 8-GPU, 96-vCPU host that keeps none and whose pipeline needs 20 vCPUs
//! per GPU is capped at 96 / 160 = 60%. Per side ([`SidePlan`]) the plan counts those vCPUs and,
//! given a measured rate per vCPU (`hetgen profile`), predicts the samples/s each side makes.
//!
//! The ways to lift a cap follow the decision AWS's guidance on heterogeneous clusters asks for:
//! first a bigger type with the same GPUs and more vCPUs per GPU (`ml.g5.8xlarge` →
//! `ml.g5.16xlarge`), which needs nothing else to run; where none exists (`ml.p4d.24xlarge`,
//! `ml.p3.2xlarge`), CPU data groups. Every option is counted with the same
//! [`Job::trainer_threads`] rule, so hybrid input is counted as the runtime runs it.

mod hosts;
mod options;
mod prices;

pub use hosts::{DatasetNeeds, HostCheck};
pub use options::{AddedData, Change, Choice, Decision, Swap, SwapKind};
pub use prices::{Price, PriceSource, Prices};

use hetgen_spec::model::Role;
use hetgen_spec::{Catalog, Job};
use serde::Serialize;

/// A number hetgen cannot compute because a fact is missing.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum PlanError {
    /// An instance type without a known price.
    #[error("no price is known for `{instance_type}` (group `{group}`)")]
    #[diagnostic(
        code("hetgen::plan::no-price"),
        help("set `price_per_hour` on the group, or pass the cluster's price on the command line")
    )]
    NoPrice {
        group: String,
        instance_type: String,
    },
    /// An instance type without known vCPUs or GPUs, where sizing needs them.
    #[error(
        "hetgen's catalog does not know `{instance_type}` (group `{group}`), so it cannot size the cluster"
    )]
    #[diagnostic(
        code("hetgen::plan::unknown-type"),
        help(
            "sizing needs the type's vCPUs and GPUs; use a type from the catalog, or run `hetgen plan` without `--cpu-per-gpu`/`--profile` for the groups and prices alone"
        )
    )]
    UnknownType {
        group: String,
        instance_type: String,
    },
    /// A step time that is not a positive number.
    #[error("step time `{0}` ms is not positive")]
    #[diagnostic(
        code("hetgen::plan::step-time"),
        help("give the measured mean step time in milliseconds")
    )]
    StepTime(f64),
    /// vCPUs per GPU that are not a finite, non-negative number (from a profile file, say).
    #[error("`{0}` vCPUs per GPU is not a number hetgen can size with")]
    #[diagnostic(
        code("hetgen::plan::cpu-per-gpu"),
        help("give a finite number of vCPUs from 0 up, as `hetgen profile` measures it")
    )]
    CpuPerGpu(f64),
    /// A price that is not a finite, positive number.
    #[error("price `{0}` $/h is not positive")]
    #[diagnostic(
        code("hetgen::plan::price"),
        help("give the cluster's price in US dollars per hour")
    )]
    Price(f64),
    /// A total too large to count.
    #[error("the cluster's {what} overflow hetgen's arithmetic")]
    #[diagnostic(
        code("hetgen::plan::overflow"),
        help("check the instance counts and the vCPUs per GPU")
    )]
    Overflow { what: &'static str },
}

/// `a × b`, or an overflow error naming `what`.
fn mul(a: u32, b: u32, what: &'static str) -> Result<u32, PlanError> {
    a.checked_mul(b).ok_or(PlanError::Overflow { what })
}

/// The sum of `items`, or an overflow error naming `what`.
fn total(items: impl IntoIterator<Item = u32>, what: &'static str) -> Result<u32, PlanError> {
    items
        .into_iter()
        .try_fold(0u32, |sum, n| sum.checked_add(n))
        .ok_or(PlanError::Overflow { what })
}

/// One group's share of the cluster: of the spec's, or of an option's ([`Choice::groups`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPlan {
    pub name: String,
    pub role: Role,
    pub instance_type: String,
    pub count: u32,
    /// All instances of the group; `None` when hetgen's catalog does not know the type.
    pub vcpus: Option<u32>,
    /// All instances of the group; `None` when hetgen's catalog does not know the type.
    pub gpus: Option<u32>,
    /// For all instances of the group; `None` when the price is unknown.
    pub price_per_hour: Option<f64>,
}

/// What one side of the cluster gives the pipeline: the trainer hosts' own cores (alone in a
/// homogeneous job, beside the data hosts in a hybrid one) or the data hosts'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SidePlan {
    /// `trainer` or `data`.
    pub side: Role,
    /// Hosts on that side.
    pub hosts: u32,
    /// vCPUs that run the pipeline there, all hosts together.
    pub vcpus: u32,
    /// Predicted samples/s of those vCPUs, from a measured rate per vCPU.
    pub samples_per_s: Option<f64>,
}

/// The cluster's sizing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub groups: Vec<GroupPlan>,
    /// The pipeline's vCPUs per side, trainer first.
    pub sides: Vec<SidePlan>,
    /// vCPUs of the groups whose type hetgen knows.
    pub vcpus: u32,
    /// GPUs of the groups whose type hetgen knows.
    pub gpus: u32,
    /// The cluster's $/h; `None` when a group has no known price (see `unpriced`).
    pub price_per_hour: Option<f64>,
    /// Groups whose type has no known price: reported, never summed.
    pub unpriced: Vec<String>,
    /// Groups whose type hetgen's catalog does not know (`allow_unknown_instance_type`).
    pub unknown: Vec<String>,
    /// Where the prices came from.
    pub prices: PriceSource,
    /// When the prices this plan uses were recorded, oldest first.
    pub price_dates: Vec<String>,
    /// All vCPUs per GPU; `None` without GPUs.
    pub vcpu_per_gpu: Option<f64>,
    /// Present with `cpu_per_gpu`.
    pub demand: Option<Demand>,
    /// The data groups' hosts checked against a Python dataset's needs (network, memory);
    /// empty until [`Plan::with_data_hosts`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_hosts: Vec<HostCheck>,
}

/// What the pipeline needs against what the cluster has, and the ways to close the gap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Demand {
    pub cpu_per_gpu: f64,
    pub needed_vcpus: f64,
    pub available_vcpus: f64,
    /// Predicted GPU utilisation cap, 0–1.
    pub gpu_cap: f64,
    /// $/h per fully busy GPU-hour (`price / (GPUs × cap)`).
    pub cost_per_busy_gpu_hour: Option<f64>,
    /// Every way to lift the cap, the cluster as written among them: priced ones cheapest per
    /// busy GPU-hour first, then those with a type of unknown price, highest utilisation
    /// first. Just the cluster as written when nothing caps it.
    pub options: Vec<Choice>,
    /// Which option is cheapest and which is simplest.
    pub decision: Decision,
    /// CPU types left out of the data-group options because their price is unknown.
    pub unpriced_cpu_types: usize,
}

/// Sizes `job` with `catalog`'s vCPUs and GPUs and prices it with `prices` (a group's own
/// `price_per_hour` first). With `cpu_per_gpu`, also the GPU cap and every way to lift it, with
/// up to `options` data groups per trainer type as written; with `samples_per_s_per_vcpu` (a
/// profile's rate over its threads), each side's predicted samples/s.
pub fn plan(
    job: &Job,
    catalog: &Catalog,
    prices: &Prices,
    cpu_per_gpu: Option<f64>,
    samples_per_s_per_vcpu: Option<f64>,
    options: usize,
) -> Result<Plan, PlanError> {
    if let Some(per_gpu) = cpu_per_gpu
        && !(per_gpu.is_finite() && per_gpu >= 0.0)
    {
        return Err(PlanError::CpuPerGpu(per_gpu));
    }
    let groups = group_plans(job, prices)?;
    let unknown: Vec<String> = groups
        .iter()
        .filter(|g| g.vcpus.is_none() || g.gpus.is_none())
        .map(|g| g.name.clone())
        .collect();
    if cpu_per_gpu.is_some()
        && let Some(g) = groups
            .iter()
            .find(|g| g.vcpus.is_none() || g.gpus.is_none())
    {
        return Err(PlanError::UnknownType {
            group: g.name.clone(),
            instance_type: g.instance_type.clone(),
        });
    }
    let vcpus = total(groups.iter().filter_map(|g| g.vcpus), "vCPUs")?;
    let gpus = total(groups.iter().filter_map(|g| g.gpus), "GPUs")?;
    let price_per_hour = groups.iter().map(|g| g.price_per_hour).sum::<Option<f64>>();
    let unpriced = groups
        .iter()
        .filter(|g| g.price_per_hour.is_none())
        .map(|g| g.name.clone())
        .collect();
    let vcpu_per_gpu = (gpus > 0).then(|| f64::from(vcpus) / f64::from(gpus));
    let sides = sides(job, &groups, samples_per_s_per_vcpu)?;

    let demand = match cpu_per_gpu {
        Some(per_gpu) if gpus > 0 => {
            let needed = per_gpu * f64::from(gpus);
            let available = f64::from(total(sides.iter().map(|s| s.vcpus), "vCPUs")?);
            let gpu_cap = cap(available, needed);
            let (choices, unpriced_cpu_types, bigger_types) =
                options::choices(job, catalog, prices, needed, options)?;
            let decision = Decision::of(&choices, bigger_types);
            Some(Demand {
                cpu_per_gpu: per_gpu,
                needed_vcpus: needed,
                available_vcpus: available,
                gpu_cap,
                cost_per_busy_gpu_hour: busy_cost(price_per_hour, gpus, gpu_cap),
                options: choices,
                decision,
                unpriced_cpu_types,
            })
        }
        _ => None,
    };
    let price_dates = price_dates(prices, &groups, demand.as_ref());
    Ok(Plan {
        groups,
        sides,
        vcpus,
        gpus,
        price_per_hour,
        unpriced,
        unknown,
        prices: prices.source().clone(),
        price_dates,
        vcpu_per_gpu,
        demand,
        data_hosts: Vec::new(),
    })
}

/// $/h per busy GPU-hour of a cluster costing `price` whose `gpus` are busy `cap` of the time;
/// `None` without a price or when the GPUs are never busy.
fn busy_cost(price: Option<f64>, gpus: u32, cap: f64) -> Option<f64> {
    let cost = price? / (f64::from(gpus) * cap);
    cost.is_finite().then_some(cost)
}

/// The distinct dates of the prices the plan shows, oldest first.
fn price_dates(prices: &Prices, groups: &[GroupPlan], demand: Option<&Demand>) -> Vec<String> {
    let mut types: Vec<&str> = groups.iter().map(|g| g.instance_type.as_str()).collect();
    for choice in demand.map_or(&[][..], |d| &d.options) {
        types.extend(choice.groups.iter().map(|g| g.instance_type.as_str()));
    }
    let mut dates: Vec<String> = types
        .into_iter()
        .filter_map(|t| prices.get(t).map(|p| p.recorded.clone()))
        .collect();
    dates.sort();
    dates.dedup();
    dates
}

/// A group's price per instance-hour: its own `price_per_hour` from the spec, else `prices`'.
fn unit_price(group: &hetgen_spec::model::Group, prices: &Prices) -> Option<f64> {
    group
        .price_per_hour
        .or_else(|| prices.get(&group.instance_type).map(|p| p.usd_per_hour))
}

/// Every group of `job`, counted and priced.
fn group_plans(job: &Job, prices: &Prices) -> Result<Vec<GroupPlan>, PlanError> {
    job.groups
        .iter()
        .map(|g| {
            Ok(GroupPlan {
                name: g.name.clone(),
                role: g.role,
                instance_type: g.instance_type.clone(),
                count: g.count,
                vcpus: g.vcpus.map(|v| mul(v, g.count, "vCPUs")).transpose()?,
                gpus: g.gpus.map(|n| mul(n, g.count, "GPUs")).transpose()?,
                price_per_hour: unit_price(g, prices).map(|p| p * f64::from(g.count)),
            })
        })
        .collect()
}

/// The trainer side (always) and the data side (when the job has data groups).
fn sides(job: &Job, groups: &[GroupPlan], rate: Option<f64>) -> Result<Vec<SidePlan>, PlanError> {
    let predict = |vcpus: u32| rate.map(|r| r * f64::from(vcpus));
    let mut trainer = (0, 0);
    for (group, g) in job.groups.iter().zip(groups) {
        if g.role == Role::Trainer {
            // Per host, exactly what the launcher gives the local pipeline on that type.
            let per_host = job.trainer_threads(group.vcpus.unwrap_or(0));
            trainer.0 = total([trainer.0, g.count], "hosts")?;
            trainer.1 = total([trainer.1, mul(per_host, g.count, "vCPUs")?], "vCPUs")?;
        }
    }
    let mut out = vec![SidePlan {
        side: Role::Trainer,
        hosts: trainer.0,
        vcpus: trainer.1,
        samples_per_s: predict(trainer.1),
    }];
    if !job.is_homogeneous() {
        let data: Vec<&GroupPlan> = groups.iter().filter(|g| g.role == Role::Data).collect();
        let vcpus = total(data.iter().filter_map(|g| g.vcpus), "vCPUs")?;
        out.push(SidePlan {
            side: Role::Data,
            hosts: total(data.iter().map(|g| g.count), "hosts")?,
            vcpus,
            samples_per_s: predict(vcpus),
        });
    }
    Ok(out)
}

/// The share of time the GPUs can be busy: 1 when the vCPUs suffice.
pub fn cap(available: f64, needed: f64) -> f64 {
    if needed <= 0.0 {
        1.0
    } else {
        (available / needed).clamp(0.0, 1.0)
    }
}

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    pub spec: String,
    pub instances: u32,
    pub price_per_hour: f64,
    pub step_ms: f64,
    pub cost_per_step: f64,
}

/// Candidate against baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub baseline: Side,
    pub candidate: Side,
    /// Baseline step time / candidate step time.
    pub speedup: f64,
    /// `1 − candidate cost per step / baseline cost per step`: 0.46 means 46% cheaper per step.
    pub improvement: f64,
}

/// The cluster price of `job`: `price` when given, else the sum over its groups, each at the
/// spec's own price or the catalog's.
pub fn cluster_price(job: &Job, price: Option<f64>) -> Result<f64, PlanError> {
    if let Some(p) = price {
        return if p.is_finite() && p > 0.0 {
            Ok(p)
        } else {
            Err(PlanError::Price(p))
        };
    }
    let prices = Prices::catalog(Catalog::builtin());
    job.groups
        .iter()
        .map(|g| {
            unit_price(g, &prices)
                .map(|p| p * f64::from(g.count))
                .ok_or_else(|| PlanError::NoPrice {
                    group: g.name.clone(),
                    instance_type: g.instance_type.clone(),
                })
        })
        .sum()
}

/// USD per step of a cluster costing `price_per_hour` that takes `step_ms` per step.
pub fn cost_per_step(price_per_hour: f64, step_ms: f64) -> f64 {
    price_per_hour * step_ms / 3_600_000.0
}

/// One side of [`compare`]: a spec's label, job, step time and optional price override.
pub struct Run<'a> {
    pub label: &'a str,
    pub job: &'a Job,
    pub step_ms: f64,
    pub price: Option<f64>,
}

/// Compares two clusters by cost per step.
pub fn compare(baseline: &Run<'_>, candidate: &Run<'_>) -> Result<Comparison, PlanError> {
    let side = |run: &Run<'_>| -> Result<Side, PlanError> {
        if !(run.step_ms.is_finite() && run.step_ms > 0.0) {
            return Err(PlanError::StepTime(run.step_ms));
        }
        let price = cluster_price(run.job, run.price)?;
        Ok(Side {
            spec: run.label.to_owned(),
            instances: total(run.job.groups.iter().map(|g| g.count), "instances")?,
            price_per_hour: price,
            step_ms: run.step_ms,
            cost_per_step: cost_per_step(price, run.step_ms),
        })
    };
    let (b, c) = (side(baseline)?, side(candidate)?);
    Ok(Comparison {
        speedup: b.step_ms / c.step_ms,
        improvement: 1.0 - c.cost_per_step / b.cost_per_step,
        baseline: b,
        candidate: c,
    })
}
