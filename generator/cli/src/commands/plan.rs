//! `hetgen plan` and `hetgen compare`.

use std::process::ExitCode;

use hetgen_plan::{Plan, Run};
use hetgen_spec::Catalog;
use hetgen_spec::model::Role;

use crate::cli::{CompareArgs, Format, PlanArgs};
use crate::exit::Failure;

pub fn plan(args: &PlanArgs) -> Result<ExitCode, Failure> {
    let (job, _) = super::load(&args.spec)?;
    let (cpu_per_gpu, rate) = match &args.profile {
        Some(path) => {
            let (per_gpu, rate) = super::vcpus_per_gpu(path)?;
            (Some(per_gpu), Some(rate))
        }
        None => (args.cpu_per_gpu, None),
    };
    let plan = hetgen_plan::plan(&job, Catalog::builtin(), cpu_per_gpu, rate, args.options)?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&plan).expect("JSON serializes")
        ),
        Format::Human => print!("{}", plan_table(&plan)),
    }
    Ok(ExitCode::SUCCESS)
}

fn money(p: Option<f64>) -> String {
    p.map_or_else(|| "?".to_owned(), |p| format!("${p:.3}"))
}

fn plan_table(plan: &Plan) -> String {
    let mut out = format!(
        "{:<16} {:<8} {:<18} {:>5} {:>6} {:>5} {:>10}\n",
        "group", "role", "instance type", "count", "vCPUs", "GPUs", "$/h"
    );
    for g in &plan.groups {
        let role = format!("{:?}", g.role).to_lowercase();
        out += &format!(
            "{:<16} {:<8} {:<18} {:>5} {:>6} {:>5} {:>10}\n",
            g.name,
            role,
            g.instance_type,
            g.count,
            g.vcpus,
            g.gpus,
            money(g.price_per_hour)
        );
    }
    out += &format!(
        "{:<16} {:<8} {:<18} {:>5} {:>6} {:>5} {:>10}\n",
        "total",
        "",
        "",
        "",
        plan.vcpus,
        plan.gpus,
        money(plan.price_per_hour)
    );
    out += &format!(
        "\n{:<16} {:>5} {:>14} {:>18}\n",
        "pipeline side", "hosts", "pipeline vCPUs", "predicted samples/s"
    );
    for s in &plan.sides {
        let side = match (s.side, plan.sides.len()) {
            (Role::Trainer, 1) => "trainer",
            (Role::Trainer, _) => "trainer (hybrid)",
            (Role::Data, _) => "data",
        };
        let rate = s
            .samples_per_s
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.0}"));
        out += &format!("{side:<16} {:>5} {:>14} {rate:>18}\n", s.hosts, s.vcpus);
    }
    if let Some(r) = plan.vcpu_per_gpu {
        out += &format!("\nvCPU:GPU ratio {r:.1}\n");
    }
    if let Some(d) = &plan.demand {
        out += &format!(
            "the pipeline needs {:.0} vCPUs ({} per GPU); the cluster has {:.0} for it\n",
            d.needed_vcpus, d.cpu_per_gpu, d.available_vcpus
        );
        out += &format!("predicted GPU utilisation cap: {:.0}%", d.gpu_cap * 100.0);
        if let Some(c) = d.cost_per_busy_gpu_hour {
            out += &format!(", ${c:.3} per busy GPU-hour");
        }
        out.push('\n');
        if !d.options.is_empty() {
            out += "\ncheapest data groups that lift the trainer alone to 100%:\n";
            out += &format!(
                "{:<18} {:>5} {:>6} {:>12} {:>18}\n",
                "instance type", "count", "vCPUs", "cluster $/h", "$/busy GPU-hour"
            );
            for o in &d.options {
                out += &format!(
                    "{:<18} {:>5} {:>6} {:>12} {:>18}\n",
                    o.instance_type,
                    o.count,
                    o.vcpus,
                    format!("${:.3}", o.cluster_price_per_hour),
                    format!("${:.3}", o.cost_per_busy_gpu_hour)
                );
            }
        }
    }
    out
}

pub fn compare(args: &CompareArgs) -> Result<ExitCode, Failure> {
    let (baseline, _) = super::load(&args.baseline)?;
    let (candidate, _) = super::load(&args.candidate)?;
    let (b_label, c_label) = (
        args.baseline.display().to_string(),
        args.candidate.display().to_string(),
    );
    let result = hetgen_plan::compare(
        &Run {
            label: &b_label,
            job: &baseline,
            step_ms: args.baseline_step_ms,
            price: args.baseline_price,
        },
        &Run {
            label: &c_label,
            job: &candidate,
            step_ms: args.candidate_step_ms,
            price: args.candidate_price,
        },
    )?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&result).expect("JSON serializes")
        ),
        Format::Human => {
            println!(
                "{:<10} {:<40} {:>9} {:>10} {:>10} {:>14}",
                "", "spec", "instances", "$/h", "step ms", "$/step"
            );
            for (name, s) in [
                ("baseline", &result.baseline),
                ("candidate", &result.candidate),
            ] {
                println!(
                    "{name:<10} {:<40} {:>9} {:>10} {:>10.1} {:>14}",
                    s.spec,
                    s.instances,
                    format!("${:.3}", s.price_per_hour),
                    s.step_ms,
                    format!("${:.7}", s.cost_per_step)
                );
            }
            println!(
                "\nspeed-up {:.2}×, price-performance improvement {:.1}% (cost per step {})",
                result.speedup,
                result.improvement * 100.0,
                if result.improvement >= 0.0 {
                    "down"
                } else {
                    "up"
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
