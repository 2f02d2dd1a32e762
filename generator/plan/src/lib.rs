//! # hetgen-plan
//!
//! The arithmetic behind "how many CPU instances should I add?" and "what did they buy?".
//!
//! - [`plan`]: per group and in total, vCPUs, GPUs, $/h and the vCPU:GPU ratio; given the vCPUs
//!   the pipeline needs per GPU, the cluster's GPU utilisation cap and the cheapest data groups
//!   from the catalog that lift it to 100%.
//! - [`compare`]: two clusters' cost per step from measured step times.
//!
//! The model: a GPU is busy at most `available vCPUs / needed vCPUs` of the time, where
//! `needed = cpu_per_gpu × GPUs` and `available` counts every data instance's vCPUs plus what
//! each trainer host's own pipeline gets: [`Job::trainer_threads`], the function the launcher
//! sizes that pipeline with (the host's vCPUs less `reserve_vcpus`; with data groups this is
//! the hybrid input). An 8-GPU, 96-vCPU host that keeps none and whose pipeline needs 20 vCPUs
//! per GPU is capped at 96 / 160 = 60%. Per side ([`SidePlan`]) the plan counts those vCPUs and,
//! given a measured rate per vCPU (`hetgen profile`), predicts the samples/s each side makes.

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
    /// An instance type without known vCPUs or GPUs.
    #[error("hetgen's catalog does not know `{instance_type}` (group `{group}`)")]
    #[diagnostic(
        code("hetgen::plan::unknown-type"),
        help("sizing needs the type's vCPUs and GPUs; use a type from the catalog")
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
        code(hetgen::plan::price),
        help("give the cluster's price in US dollars per hour")
    )]
    Price(f64),
    /// A total too large to count.
    #[error("the cluster's {what} overflow hetgen's arithmetic")]
    #[diagnostic(
        code(hetgen::plan::overflow),
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

/// One group's share of the cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPlan {
    pub name: String,
    pub role: Role,
    pub instance_type: String,
    pub count: u32,
    pub vcpus: u32,
    pub gpus: u32,
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
    pub vcpus: u32,
    pub gpus: u32,
    pub price_per_hour: Option<f64>,
    /// All vCPUs per GPU; `None` without GPUs.
    pub vcpu_per_gpu: Option<f64>,
    /// Present with `cpu_per_gpu`.
    pub demand: Option<Demand>,
}

/// What the pipeline needs against what the cluster has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Demand {
    pub cpu_per_gpu: f64,
    pub needed_vcpus: f64,
    pub available_vcpus: f64,
    /// Predicted GPU utilisation cap, 0–1.
    pub gpu_cap: f64,
    /// $/h per fully busy GPU-hour (`price / (GPUs × cap)`).
    pub cost_per_busy_gpu_hour: Option<f64>,
    /// The cheapest ways to add data instances to the trainer alone so the cap reaches 100%,
    /// cheapest first.
    pub options: Vec<DataOption>,
}

/// Adding `count` × `instance_type` as the data group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataOption {
    pub instance_type: String,
    pub count: u32,
    pub vcpus: u32,
    /// The trainer plus these data instances.
    pub cluster_price_per_hour: f64,
    /// $/h per busy GPU-hour at the new cap (100%).
    pub cost_per_busy_gpu_hour: f64,
}

/// Sizes `job`. With `cpu_per_gpu`, also the GPU cap and the cheapest data groups (up to
/// `options`) that remove it; with `samples_per_s_per_vcpu` (a profile's rate over its
/// threads), each side's predicted samples/s.
pub fn plan(
    job: &Job,
    catalog: &Catalog,
    cpu_per_gpu: Option<f64>,
    samples_per_s_per_vcpu: Option<f64>,
    options: usize,
) -> Result<Plan, PlanError> {
    if let Some(per_gpu) = cpu_per_gpu
        && !(per_gpu.is_finite() && per_gpu >= 0.0)
    {
        return Err(PlanError::CpuPerGpu(per_gpu));
    }
    let mut groups = Vec::new();
    for g in &job.groups {
        let (Some(vcpus), Some(gpus)) = (g.vcpus, g.gpus) else {
            return Err(PlanError::UnknownType {
                group: g.name.clone(),
                instance_type: g.instance_type.clone(),
            });
        };
        groups.push(GroupPlan {
            name: g.name.clone(),
            role: g.role,
            instance_type: g.instance_type.clone(),
            count: g.count,
            vcpus: mul(vcpus, g.count, "vCPUs")?,
            gpus: mul(gpus, g.count, "GPUs")?,
            price_per_hour: g.price_per_hour.map(|p| p * f64::from(g.count)),
        });
    }
    let vcpus = total(groups.iter().map(|g| g.vcpus), "vCPUs")?;
    let gpus = total(groups.iter().map(|g| g.gpus), "GPUs")?;
    let price_per_hour = groups.iter().map(|g| g.price_per_hour).sum::<Option<f64>>();
    let vcpu_per_gpu = (gpus > 0).then(|| f64::from(vcpus) / f64::from(gpus));
    let sides = sides(job, &groups, samples_per_s_per_vcpu)?;

    let demand = match cpu_per_gpu {
        Some(per_gpu) if gpus > 0 => {
            let trainer = groups
                .iter()
                .find(|g| g.role == Role::Trainer)
                .expect("a resolved job has a trainer group");
            let trainer_own = f64::from(sides[0].vcpus);
            let data = f64::from(sides.get(1).map_or(0, |s| s.vcpus));
            let needed = per_gpu * f64::from(gpus);
            let available = trainer_own + data;
            let gpu_cap = cap(available, needed);
            let busy_cost = price_per_hour.map(|p| p / (f64::from(gpus) * gpu_cap));
            let deficit = (needed - trainer_own).max(0.0);
            Some(Demand {
                cpu_per_gpu: per_gpu,
                needed_vcpus: needed,
                available_vcpus: available,
                gpu_cap,
                cost_per_busy_gpu_hour: busy_cost,
                options: data_options(catalog, trainer, deficit, gpus, options),
            })
        }
        _ => None,
    };
    Ok(Plan {
        groups,
        sides,
        vcpus,
        gpus,
        price_per_hour,
        vcpu_per_gpu,
        demand,
    })
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
        let vcpus = total(data.iter().map(|g| g.vcpus), "vCPUs")?;
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

/// For each priced CPU type in the catalog, the fewest instances that cover `deficit` vCPUs.
fn data_options(
    catalog: &Catalog,
    trainer: &GroupPlan,
    deficit: f64,
    gpus: u32,
    keep: usize,
) -> Vec<DataOption> {
    let Some(trainer_price) = trainer.price_per_hour else {
        return Vec::new();
    };
    if deficit <= 0.0 {
        return Vec::new();
    }
    let mut options: Vec<DataOption> = catalog
        .instances
        .iter()
        .filter(|i| i.gpus == 0)
        .filter_map(|i| {
            let price = i.price_per_hour?;
            // Options too large to count are not options.
            let count = (deficit / f64::from(i.vcpus)).ceil();
            let count = (count <= f64::from(u32::MAX)).then_some(count as u32)?;
            let vcpus = i.vcpus.checked_mul(count)?;
            let cluster = trainer_price + price * f64::from(count);
            Some(DataOption {
                instance_type: i.name.clone(),
                count,
                vcpus,
                cluster_price_per_hour: cluster,
                cost_per_busy_gpu_hour: cluster / f64::from(gpus),
            })
        })
        .collect();
    options.sort_by(|a, b| {
        a.cluster_price_per_hour
            .total_cmp(&b.cluster_price_per_hour)
            .then(a.count.cmp(&b.count))
    });
    options.truncate(keep);
    options
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

/// The cluster price of `job`: `price` when given, else the sum over its groups.
pub fn cluster_price(job: &Job, price: Option<f64>) -> Result<f64, PlanError> {
    if let Some(p) = price {
        return if p.is_finite() && p > 0.0 {
            Ok(p)
        } else {
            Err(PlanError::Price(p))
        };
    }
    job.groups
        .iter()
        .map(|g| {
            g.price_per_hour
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
