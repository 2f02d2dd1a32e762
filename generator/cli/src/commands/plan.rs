//! `hetgen plan` and `hetgen compare`.

use std::process::ExitCode;

use hetgen_deploy::pricing;
use hetgen_plan::{Choice, Demand, HostCheck, Plan, PriceSource, Prices, Run, SwapKind};
use hetgen_spec::Catalog;
use hetgen_spec::model::Role;

use crate::cli::{self, CompareArgs, Format, PlanArgs};
use crate::exit::Failure;
use crate::output::print_json;

pub fn plan(args: &PlanArgs) -> Result<ExitCode, Failure> {
    let (job, _) = super::load(&args.spec)?;
    let profiled = args
        .profile
        .as_deref()
        .map(super::read_profile)
        .transpose()?;
    let (cpu_per_gpu, rate) = match &profiled {
        Some(p) => (Some(p.vcpus_per_gpu), Some(p.samples_per_s_per_vcpu)),
        None => (args.cpu_per_gpu, None),
    };
    let catalog = Catalog::builtin();
    let prices = match args.prices {
        cli::Prices::Catalog => Prices::catalog(catalog),
        cli::Prices::Aws => aws_prices(args, &job, catalog),
    };
    let mut plan = hetgen_plan::plan(&job, catalog, &prices, cpu_per_gpu, rate, args.options)?;
    if let Some(needs) = profiled.as_ref().and_then(|p| p.dataset.as_ref()) {
        plan = plan.with_data_hosts(catalog, needs);
    }
    match args.format {
        Format::Json => print_json(&plan),
        Format::Human => print!("{}", plan_table(&plan)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Current prices from the AWS Price List API for the job's region ([`pricing::current`]),
/// else hetgen's catalog; each fallback said on stderr with its reason.
fn aws_prices(args: &PlanArgs, job: &hetgen_spec::Job, catalog: &Catalog) -> Prices {
    let connection = args.connection();
    let spec_region = job.sagemaker.as_ref().map(|s| s.region.as_str());
    let region = pricing::price_region(&connection, spec_region, &catalog.prices.region);
    let cache = hetgen_env::cache_dir().map(|dir| pricing::cache_file(&dir, &region));
    let current = super::block_on(pricing::current(&connection, &region, cache.as_deref()));
    if let Some((path, e)) = &current.not_cached {
        eprintln!(
            "warning: could not cache the prices in `{}`: {e}",
            path.display()
        );
    }
    if let Some(unread) = &current.unread {
        let using = match &current.prices {
            Some(p) => format!("those cached on {}", p.fetched),
            None => "hetgen's catalog".to_owned(),
        };
        eprintln!(
            "warning: could not read current AWS prices ({}); using {using}",
            unread.why
        );
        if let Some(help) = &unread.help {
            // `plan --profile` names a `hetgen profile` file; the AWS profile is `--aws-profile`.
            eprintln!("  help: {}", help.replace("`--profile`", "`--aws-profile`"));
        }
    }
    match current.prices {
        Some(p) => Prices::price_list(&p.region, &p.fetched, current.cached, p.prices),
        None => Prices::catalog(catalog),
    }
}

fn money(p: Option<f64>) -> String {
    p.map_or_else(|| "unpriced".to_owned(), |p| format!("${p:.3}"))
}

fn count(n: Option<u32>) -> String {
    n.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
}

/// Where the prices came from, in one line.
fn prices_line(plan: &Plan) -> String {
    let dates = plan.price_dates.join(", ");
    match &plan.prices {
        PriceSource::Catalog { region } => format!(
            "prices: hetgen's catalog ({region}, on-demand{}); `--prices aws` reads current ones",
            if dates.is_empty() {
                String::new()
            } else {
                format!(", recorded {dates}")
            }
        ),
        PriceSource::PriceList {
            region,
            fetched,
            cached,
        } => format!(
            "prices: AWS Price List API ({region}, on-demand, read {fetched}{})",
            if *cached { ", cached" } else { "" }
        ),
    }
}

/// What an option changes, in a few words.
fn label(choice: &Choice) -> String {
    let trainer = choice.change.trainer.as_ref().map(|s| match s.kind {
        SwapKind::ScaleUp => format!(
            "trainer on {} (bigger {})",
            s.to,
            hetgen_spec::catalog::family(&s.to)
        ),
        SwapKind::SameGpu => format!("trainer on {} (same GPUs, other family)", s.to),
    });
    let data = choice
        .change
        .data
        .as_ref()
        .map(|d| format!("{} × {} as a data group", d.count, d.instance_type));
    match (trainer, data) {
        (None, None) => "as written".to_owned(),
        (Some(t), None) => t,
        (None, Some(d)) => format!("+ {d}"),
        (Some(t), Some(d)) => format!("{t} + {d}"),
    }
}

fn options_table(d: &Demand) -> String {
    let width = d
        .options
        .iter()
        .map(|c| label(c).chars().count())
        .max()
        .unwrap_or(0)
        .max("option".len());
    let row = |i: usize, c: &Choice| {
        let data = match (&c.change.data, c.needs_data_group) {
            (_, false) => "not needed",
            (Some(_), true) => "added",
            (None, true) => "as written",
        };
        let price = match (c.cluster_price_per_hour, c.cost_per_busy_gpu_hour) {
            (Some(p), Some(b)) => format!("{:>12} {:>14}", format!("${p:.3}"), format!("${b:.3}")),
            _ => format!("  unpriced: {}", c.unpriced.join(", ")),
        };
        format!(
            "{:>3}  {:<width$} {:<11} {:>8} {price}{}\n",
            i + 1,
            label(c),
            data,
            format!("{:.0}%", c.gpu_cap * 100.0),
            fit_note(&c.data_hosts)
        )
    };
    let header = format!(
        "{:>3}  {:<width$} {:<11} {:>8} {:>12} {:>14}\n",
        "#", "option", "data group", "GPU util", "cluster $/h", "$/busy GPU-h"
    );
    let (priced, unpriced): (Vec<_>, Vec<_>) = d
        .options
        .iter()
        .enumerate()
        .partition(|(_, c)| c.cost_per_busy_gpu_hour.is_some());
    let mut out = String::new();
    for (title, options) in [
        ("ways to run it, cheapest per busy GPU-hour first", priced),
        (
            "unpriced (a type has no known price; not summed), highest GPU utilisation first",
            unpriced,
        ),
    ] {
        if !options.is_empty() {
            out += &format!("\n{title}:\n{header}");
            for (i, c) in options {
                out += &row(i, c);
            }
        }
    }
    out
}

/// The one line that says which option is cheapest and which is simplest, and why.
fn decision_line(d: &Demand) -> String {
    let name = |i: usize| format!("#{} {}", i + 1, label(&d.options[i]));
    let why = |i: usize| {
        let c = &d.options[i];
        if !c.needs_data_group {
            "it lifts the cap to 100% with no data group to run".to_owned()
        } else if d.decision.bigger_types == 0 {
            "no type with the trainer's GPUs has more vCPUs per GPU, so only a data group lifts the cap; this one has the fewest instances".to_owned()
        } else {
            "no bigger trainer type alone lifts the cap to 100%; this one adds the fewest instances"
                .to_owned()
        }
    };
    let cost = |i: usize| {
        d.options[i]
            .cost_per_busy_gpu_hour
            .map_or_else(String::new, |b| format!(" (${b:.3} per busy GPU-hour)"))
    };
    match (d.decision.cheapest, d.decision.simplest) {
        (Some(c), Some(s)) if c == s => format!(
            "cheapest per busy GPU-hour and simplest: {}{} — {}\n",
            name(c),
            cost(c),
            why(s)
        ),
        (Some(c), Some(s)) => format!(
            "cheapest per busy GPU-hour: {}{}; simplest: {} — {}\n",
            name(c),
            cost(c),
            name(s),
            why(s)
        ),
        (Some(c), None) => format!(
            "cheapest per busy GPU-hour: {}{}; no option lifts the cap to 100%\n",
            name(c),
            cost(c)
        ),
        (None, Some(s)) => format!(
            "no option is priced, so none is cheapest (`--prices aws` reads current prices); simplest: {} — {}\n",
            name(s),
            why(s)
        ),
        (None, None) => "no option is priced and none lifts the cap to 100%\n".to_owned(),
    }
}

/// After an option's row: what its data hosts cannot carry, when a dataset's needs are known.
fn fit_note(hosts: &[HostCheck]) -> String {
    let mut short = Vec::new();
    if hosts.iter().any(|h| h.network_fits() == Some(false)) {
        short.push("network");
    }
    if hosts.iter().any(|h| h.memory_fits() == Some(false)) {
        short.push("memory");
    }
    if short.is_empty() {
        String::new()
    } else {
        format!("  (a data host is short of {})", short.join(" and "))
    }
}

/// Each data group's hosts against what the Python dataset needs of them.
fn data_hosts_table(hosts: &[HostCheck]) -> String {
    if hosts.is_empty() {
        return String::new();
    }
    let have = |x: Option<f64>| x.map_or_else(|| "unknown".to_owned(), |x| format!("{x:.2}"));
    let mut out = format!(
        "\n{:<16} {:<18} {:>9} {:>13} {:>10} {:>13} {:>10}\n",
        "data host", "instance type", "samples/s", "network Gb/s", "has", "workers' GiB", "has"
    );
    for h in hosts {
        out += &format!(
            "{:<16} {:<18} {:>9.0} {:>13.3} {:>10} {:>13.2} {:>10}\n",
            h.group,
            h.instance_type,
            h.samples_per_s,
            h.network_gbps,
            have(h.network_gbps_available),
            h.memory_gib,
            have(h.memory_gib_available)
        );
    }
    for h in hosts {
        if let (Some(false), Some(has)) = (h.network_fits(), h.network_gbps_available) {
            out += &format!(
                "warning: a `{}` host must send {:.2} Gbit/s, more than its {has:.2} Gbit/s baseline: its network, not its vCPUs, limits what it carries\n",
                h.instance_type, h.network_gbps
            );
        }
        if let (Some(false), Some(has)) = (h.memory_fits(), h.memory_gib_available) {
            out += &format!(
                "warning: a `{}` host's {} workers need {:.1} GiB, more than its {has:.0} GiB: choose a type with more memory per vCPU, or make the dataset smaller per worker\n",
                h.instance_type, h.vcpus, h.memory_gib
            );
        }
    }
    out
}

fn plan_table(plan: &Plan) -> String {
    let mut out = groups_table(plan);
    out.push('\n');
    out += &sides_table(plan);
    out += &data_hosts_table(&plan.data_hosts);
    if let Some(r) = plan.vcpu_per_gpu {
        out += &format!("\nvCPU:GPU ratio {r:.1}\n");
    }
    if let Some(d) = &plan.demand {
        out += &demand_lines(d);
    }
    out += &prices_line(plan);
    out.push('\n');
    out
}

/// The cluster as written: one row per group, their total, and the groups the total leaves out.
fn groups_table(plan: &Plan) -> String {
    let mut out = format!(
        "{:<16} {:<8} {:<18} {:>5} {:>7} {:>7} {:>10}\n",
        "group", "role", "instance type", "count", "vCPUs", "GPUs", "$/h"
    );
    for g in &plan.groups {
        let role = format!("{:?}", g.role).to_lowercase();
        out += &format!(
            "{:<16} {:<8} {:<18} {:>5} {:>7} {:>7} {:>10}\n",
            g.name,
            role,
            g.instance_type,
            g.count,
            count(g.vcpus),
            count(g.gpus),
            money(g.price_per_hour)
        );
    }
    out += &format!(
        "{:<16} {:<8} {:<18} {:>5} {:>7} {:>7} {:>10}\n",
        "total",
        "",
        "",
        "",
        plan.vcpus,
        plan.gpus,
        money(plan.price_per_hour)
    );
    if !plan.unpriced.is_empty() {
        out += &format!(
            "no price is known for group(s) {}: the total leaves them out, so there is none\n",
            quoted(&plan.unpriced)
        );
    }
    if !plan.unknown.is_empty() {
        out += &format!(
            "hetgen's catalog does not know the type of group(s) {}: their vCPUs and GPUs are not counted\n",
            quoted(&plan.unknown)
        );
    }
    out
}

/// `a`, `b`: group names as the messages quote them.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|g| format!("`{g}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the pipeline runs: the trainer side, the data side or both, with their vCPUs and rates.
fn sides_table(plan: &Plan) -> String {
    let mut out = format!(
        "{:<16} {:>5} {:>14} {:>18}\n",
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
    out
}

/// What the pipeline needs against what the cluster has, the GPU cap, and when the cap is under
/// 100 %, the ways to lift it and which to take.
fn demand_lines(d: &Demand) -> String {
    let mut out = format!(
        "the pipeline needs {:.0} vCPUs ({:.1} per GPU); the cluster has {:.0} for it\n",
        d.needed_vcpus, d.cpu_per_gpu, d.available_vcpus
    );
    out += &format!("predicted GPU utilisation cap: {:.0}%", d.gpu_cap * 100.0);
    if let Some(c) = d.cost_per_busy_gpu_hour {
        out += &format!(", ${c:.3} per busy GPU-hour");
    }
    out.push('\n');
    if d.gpu_cap < 1.0 {
        out += &options_table(d);
        if d.unpriced_cpu_types > 0 {
            out += &format!(
                "({} CPU types without a known price were not tried as data groups)\n",
                d.unpriced_cpu_types
            );
        }
        out.push('\n');
        out += &decision_line(d);
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
        Format::Json => print_json(&result),
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
