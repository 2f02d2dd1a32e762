//! Sizing and cost arithmetic on the figures DESIGN.md quotes.

use hetgen_plan::{
    Comparison, Demand, Plan, PlanError, Prices, Run, SwapKind, cap, compare, cost_per_step,
};
use hetgen_spec::model::Role;
use hetgen_spec::{Catalog, Job};

/// `hetgen_plan::plan` on the built-in catalog with its own prices.
fn plan(
    job: &Job,
    cpu_per_gpu: Option<f64>,
    rate: Option<f64>,
    options: usize,
) -> Result<Plan, PlanError> {
    let prices = Prices::catalog(Catalog::builtin());
    hetgen_plan::plan(job, Catalog::builtin(), &prices, cpu_per_gpu, rate, options)
}

/// The p4d's price when DESIGN.md's figures were published (2022); the catalog has today's.
const P4D_2022: f64 = 37.688;

/// The prices DESIGN.md's figures were computed at: the p4d at [`P4D_2022`] and the c5 sizes
/// the published example chose from, and no others.
fn published_prices() -> Prices {
    price_list(
        "2022-10-27",
        &[
            ("ml.c5.xlarge", 0.204),
            ("ml.c5.2xlarge", 0.408),
            ("ml.c5.4xlarge", 0.816),
            ("ml.c5.9xlarge", 1.836),
            ("ml.c5.18xlarge", 3.672),
            ("ml.p4d.24xlarge", P4D_2022),
        ],
    )
}

/// Prices as a Price List answer for us-east-1 read on `fetched` would give them.
fn price_list(fetched: &str, prices: &[(&str, f64)]) -> Prices {
    let prices = prices.iter().map(|(name, usd)| (name.to_string(), *usd));
    Prices::price_list("us-east-1", fetched, false, prices)
}

/// The demand side of [`plan`] for a job that must size: `cpu_per_gpu` given, no rate.
fn demand(job: &Job, cpu_per_gpu: f64, options: usize) -> Demand {
    plan(job, Some(cpu_per_gpu), None, options)
        .unwrap()
        .demand
        .unwrap()
}

/// Every option of `d` is priced, and they come cheapest per busy GPU-hour first.
fn assert_priced_cheapest_first(d: &Demand) {
    let costs: Vec<f64> = d
        .options
        .iter()
        .map(|o| o.cost_per_busy_gpu_hour.unwrap())
        .collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "{costs:?}");
}

fn job(groups: &str) -> Job {
    job_with(groups, "")
}

/// A job whose `[pipeline]` also has `pipeline` (e.g. `reserve_vcpus = 0`).
fn job_with(groups: &str, pipeline: &str) -> Job {
    let text = format!(
        r#"
version = 1
[job]
name = "sizing"
{groups}
[pipeline]
source = {{ format = "synthetic", shape = [224, 224, 3], encoding = "jpeg" }}
batch_size = 256
{pipeline}
stage = [{{ op = "decode" }}, {{ op = "random_resized_crop", size = [224, 224] }}]
[trainer]
model = "resnet50"
steps = 100
"#
    );
    let checked = hetgen_spec::check("sizing.toml", &text);
    checked
        .job
        .unwrap_or_else(|| panic!("{:#?}", checked.report.problems))
}

/// The catalog's ml.p4d.24xlarge price (us-east-1, 2026).
const P4D_PRICE: f64 = 25.2512883;

const P4D: &str = r#"
[[instance_group]]
name = "dnn_group"
instance_type = "ml.p4d.24xlarge"
role = "trainer"
"#;

const TWO_C5: &str = r#"
[[instance_group]]
name = "data_group"
instance_type = "ml.c5.18xlarge"
count = 2
role = "data"
"#;

#[test]
fn an_8_gpu_96_vcpu_host_needing_20_per_gpu_is_capped_at_60_percent() {
    let p = plan(&job_with(P4D, "reserve_vcpus = 0"), Some(20.0), None, 3).unwrap();
    assert_eq!((p.vcpus, p.gpus), (96, 8));
    assert_eq!(p.vcpu_per_gpu, Some(12.0));
    let d = p.demand.unwrap();
    assert_eq!(d.needed_vcpus, 160.0);
    assert!((d.gpu_cap - 0.6).abs() < 1e-12);
    assert!((d.cost_per_busy_gpu_hour.unwrap() - P4D_PRICE / (8.0 * 0.6)).abs() < 1e-9);
    // 64 missing vCPUs: one ml.c6i.16xlarge ($3.264) is the cheapest, fewest-instance way (four
    // ml.c5.4xlarge cost the same, in four instances).
    let best = &d.options[0];
    let data = best.change.data.as_ref().unwrap();
    assert_eq!(
        (data.instance_type.as_str(), data.count, data.vcpus),
        ("ml.c6i.16xlarge", 1, 64)
    );
    assert!((best.cluster_price_per_hour.unwrap() - (P4D_PRICE + 3.264)).abs() < 1e-9);
    assert_eq!(best.gpu_cap, 1.0);
    assert_priced_cheapest_first(&d);
}

#[test]
fn reserved_trainer_vcpus_lower_the_cap() {
    let d = demand(&job_with(P4D, "reserve_vcpus = 16"), 20.0, 3);
    assert!((d.gpu_cap - 80.0 / 160.0).abs() < 1e-12);
    assert_eq!(d.options[0].change.data.as_ref().unwrap().vcpus, 80);
}

#[test]
fn two_c5_18xlarge_lift_the_cap_to_100_percent() {
    let p = plan(&job(&format!("{TWO_C5}{P4D}")), Some(20.0), None, 3).unwrap();
    assert_eq!(p.vcpus, 96 + 144);
    assert!((p.price_per_hour.unwrap() - (P4D_PRICE + 2.0 * 3.672)).abs() < 1e-9);
    let d = p.demand.unwrap();
    assert_eq!(d.gpu_cap, 1.0);
    // Hybrid input: the trainer keeps one vCPU per GPU and one more, the rest preprocess.
    assert_eq!(d.available_vcpus, (96 - 9 + 144) as f64);
}

#[test]
fn each_side_counts_what_its_hosts_preprocess_and_predicts_samples_per_s() {
    let groups = format!("{TWO_C5}{P4D}");
    let p = plan(&job(&groups), None, Some(100.0), 3).unwrap();
    let sides: Vec<_> = p
        .sides
        .iter()
        .map(|s| (s.side, s.hosts, s.vcpus, s.samples_per_s))
        .collect();
    assert_eq!(
        sides,
        [
            (Role::Trainer, 1, 87, Some(8700.0)),
            (Role::Data, 2, 144, Some(14400.0))
        ]
    );
    // `trainer_threads = 0` turns hybrid input off: the data hosts alone, as the runtime does.
    let off = plan(
        &job_with(&groups, "trainer_threads = 0"),
        Some(20.0),
        None,
        3,
    )
    .unwrap();
    assert_eq!(off.sides[0].vcpus, 0);
    assert!((off.demand.unwrap().gpu_cap - 144.0 / 160.0).abs() < 1e-12);
    // Homogeneous: the trainer is the only pipeline.
    let alone = plan(&job(P4D), None, None, 3).unwrap();
    assert_eq!(alone.sides.len(), 1);
    assert_eq!(alone.sides[0].vcpus, 87);
}

/// The launcher sizes the trainer host's pipeline with `Job::trainer_threads` of the cores it
/// may use; plan counts the same function of the catalog's vCPUs, so for the same spec on the
/// same type they are one number.
#[test]
fn plan_counts_what_the_launcher_gives_the_local_pipeline() {
    let groups = format!("{TWO_C5}{P4D}");
    for extra in [
        "",
        "reserve_vcpus = 0",
        "reserve_vcpus = 40",
        "trainer_threads = 12",
        "trainer_threads = 0",
        "threads = 3",
    ] {
        for spec in [job_with(&groups, extra), job_with(P4D, extra)] {
            let p = plan(&spec, None, None, 3).unwrap();
            let launcher = spec.trainer_threads(96);
            assert_eq!(p.sides[0].vcpus, launcher, "{extra}");
        }
    }
}

#[test]
fn cap_is_bounded() {
    assert_eq!(cap(200.0, 100.0), 1.0);
    assert_eq!(cap(0.0, 100.0), 0.0);
    assert_eq!(cap(5.0, 0.0), 1.0);
}

/// `compare` of two jobs, each with its step time, at the catalog's prices.
fn compare_steps(baseline: (&Job, f64), candidate: (&Job, f64)) -> Comparison {
    compare_priced(
        (baseline.0, baseline.1, None),
        (candidate.0, candidate.1, None),
    )
}

/// `compare` of two jobs, each with its step time and, where given, its cluster's $/h.
fn compare_priced(
    (a, a_ms, a_usd): (&Job, f64, Option<f64>),
    (b, b_ms, b_usd): (&Job, f64, Option<f64>),
) -> Comparison {
    fn run<'a>(label: &'a str, job: &'a Job, step_ms: f64, price: Option<f64>) -> Run<'a> {
        Run {
            label,
            job,
            step_ms,
            price,
        }
    }
    let (baseline, candidate) = (
        run("baseline", a, a_ms, a_usd),
        run("candidate", b, b_ms, b_usd),
    );
    compare(&baseline, &candidate).unwrap()
}

/// DESIGN.md's first figure (step time 192 ms → 86 ms with 2 × ml.c5.18xlarge beside the
/// p4d): −46% cost per step at the prices of its day, −42% at the catalog's.
#[test]
fn design_example_cuts_cost_per_step_by_46_percent() {
    let (homo, hetero) = (job(P4D), job(&format!("{TWO_C5}{P4D}")));
    let published = P4D_2022 + 2.0 * 3.672;
    let c = compare_priced(
        (&homo, 192.0, Some(P4D_2022)),
        (&hetero, 86.0, Some(published)),
    );
    assert!((c.baseline.cost_per_step - cost_per_step(P4D_2022, 192.0)).abs() < 1e-15);
    assert!((c.speedup - 192.0 / 86.0).abs() < 1e-12);
    let expected = 1.0 - (45.032 * 86.0) / (37.688 * 192.0);
    assert!((c.improvement - expected).abs() < 1e-12);
    assert_eq!((c.improvement * 100.0).round(), 46.0);
    assert_eq!(c.candidate.instances, 3);

    let today = compare_steps((&homo, 192.0), (&hetero, 86.0));
    let expected = 1.0 - ((P4D_PRICE + 2.0 * 3.672) * 86.0) / (P4D_PRICE * 192.0);
    assert!((today.improvement - expected).abs() < 1e-12);
    assert_eq!((today.improvement * 100.0).round(), 42.0);
}

/// DESIGN.md's second figure, a single-GPU job with one CPU instance added, is AWS's PyTorch
/// heterogeneous-cluster example (amazon-sagemaker-examples, notebook
/// training/heterogeneous-clusters/pt.grpc.sagemaker/hetero-pytorch-mnist.ipynb, section E):
/// an ml.p3.2xlarge alone averaged 1.19 s a step; with an ml.c5.9xlarge preprocessing beside
/// it, 0.18 s. At the catalog's prices ($3.825 and $1.836 an hour) cost per step falls 77.6%,
/// which DESIGN.md states as −77%.
#[test]
fn design_example_one_gpu_and_one_cpu_instance_cuts_cost_per_step_by_77_percent() {
    let alone = job(&one_group("ml.p3.2xlarge"));
    let with_data = job(&format!(
        "{}[[instance_group]]\nname = \"data_group\"\ninstance_type = \"ml.c5.9xlarge\"\nrole = \"data\"\n",
        one_group("ml.p3.2xlarge")
    ));
    let c = compare_steps((&alone, 1190.0), (&with_data, 180.0));
    assert!((c.baseline.cost_per_step - cost_per_step(3.825, 1190.0)).abs() < 1e-15);
    let expected = 1.0 - ((3.825 + 1.836) * 180.0) / (3.825 * 1190.0);
    assert!((c.improvement - expected).abs() < 1e-12);
    assert_eq!((c.improvement * 1000.0).round(), 776.0);
    assert_eq!(c.candidate.instances, 2);
}

#[test]
fn price_overrides_and_missing_prices() {
    let homo = job(P4D);
    let c = compare(
        &Run {
            label: "a",
            job: &homo,
            step_ms: 100.0,
            price: Some(10.0),
        },
        &Run {
            label: "b",
            job: &homo,
            step_ms: 50.0,
            price: Some(10.0),
        },
    )
    .unwrap();
    assert!((c.improvement - 0.5).abs() < 1e-12);
    let unpriced = job(
        "[[instance_group]]\nname = \"t\"\ninstance_type = \"ml.p5e.48xlarge\"\nrole = \"trainer\"\n",
    );
    let err = compare(
        &Run {
            label: "a",
            job: &unpriced,
            step_ms: 100.0,
            price: None,
        },
        &Run {
            label: "b",
            job: &homo,
            step_ms: 50.0,
            price: None,
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("no price is known for `ml.p5e.48xlarge`")
    );
    assert!(
        compare(
            &Run {
                label: "a",
                job: &homo,
                step_ms: 0.0,
                price: None
            },
            &Run {
                label: "b",
                job: &homo,
                step_ms: 50.0,
                price: None
            },
        )
        .is_err()
    );
}

#[test]
fn vcpus_per_gpu_that_are_not_a_finite_non_negative_number_are_refused() {
    let p4d = job(P4D);
    for bad in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -5.0] {
        let err = plan(&p4d, Some(bad), None, 3).unwrap_err();
        assert!(matches!(err, PlanError::CpuPerGpu(_)), "{bad}: {err}");
    }
}

#[test]
fn huge_demands_and_counts_do_not_overflow() {
    // Far more vCPUs than any cluster has: the cap is tiny, no option's count wraps around.
    let d = demand(&job(P4D), 1e300, 3);
    assert!(d.gpu_cap > 0.0 && d.gpu_cap < 1e-290, "{}", d.gpu_cap);
    assert!(
        d.options.iter().all(|o| o.change.is_none()),
        "{:?}",
        d.options
    );

    // A job built by hand (not through validation) with more vCPUs than a u32 holds.
    let mut big = job(&format!("{TWO_C5}{P4D}"));
    big.groups[0].count = u32::MAX;
    let err = plan(&big, None, None, 3).unwrap_err();
    assert!(matches!(err, PlanError::Overflow { .. }), "{err}");
}

#[test]
fn prices_that_are_not_positive_are_refused() {
    let homo = job(P4D);
    for bad in [f64::NAN, f64::INFINITY, -5.0, 0.0] {
        let run = |price| Run {
            label: "a",
            job: &homo,
            step_ms: 100.0,
            price,
        };
        let err = compare(&run(Some(bad)), &run(None)).unwrap_err();
        assert!(matches!(err, PlanError::Price(_)), "{bad}: {err}");
        let err = compare(&run(None), &run(Some(bad))).unwrap_err();
        assert!(matches!(err, PlanError::Price(_)), "{bad}: {err}");
    }
}

/// One trainer group of `instance_type`, nothing else.
fn one_group(instance_type: &str) -> String {
    format!(
        "[[instance_group]]\nname = \"dnn_group\"\ninstance_type = \"{instance_type}\"\nrole = \"trainer\"\n"
    )
}

/// The guidance's first step: a one-GPU ml.g5.8xlarge (32 vCPUs, $3.06) short of vCPUs moves
/// to an ml.g5.16xlarge (64 vCPUs, the same one GPU, $5.12), which needs no data group. At the
/// catalog's prices five ml.c5.xlarge beside the g5.8xlarge are cheaper per busy GPU-hour, so
/// plan names both: that one as the cheapest, the scale-up as the simplest.
#[test]
fn a_g5_8xlarge_short_of_vcpus_scales_up_to_a_g5_16xlarge_with_no_data_group() {
    let d = demand(&job(&one_group("ml.g5.8xlarge")), 50.0, 5);
    // 32 vCPUs less the two the trainer keeps (one for its GPU, one for the data client).
    assert!((d.gpu_cap - 30.0 / 50.0).abs() < 1e-12);

    let (i, up) = d
        .options
        .iter()
        .enumerate()
        .find(|(_, o)| {
            o.change
                .trainer
                .as_ref()
                .is_some_and(|s| s.to == "ml.g5.16xlarge")
        })
        .expect("the scale-up is an option");
    let swap = up.change.trainer.as_ref().unwrap();
    assert_eq!(swap.kind, SwapKind::ScaleUp);
    assert!(up.change.data.is_none() && !up.needs_data_group);
    assert_eq!((up.gpu_cap, up.pipeline_vcpus), (1.0, 62));
    assert_eq!(up.cluster_price_per_hour, Some(5.12));
    assert_eq!(up.cost_per_busy_gpu_hour, Some(5.12));
    // Every option is priced and they come cheapest per busy GPU-hour first.
    assert_priced_cheapest_first(&d);
    assert_eq!(
        (d.decision.cheapest, d.decision.simplest),
        (Some(0), Some(i))
    );
    let cheapest = &d.options[0];
    let data = cheapest.change.data.as_ref().unwrap();
    assert_eq!(
        (data.instance_type.as_str(), data.count),
        ("ml.c5.xlarge", 5)
    );
    assert!(cheapest.change.trainer.is_none() && cheapest.needs_data_group);
    assert!((cheapest.cluster_price_per_hour.unwrap() - (3.06 + 5.0 * 0.204)).abs() < 1e-12);
    assert_eq!(cheapest.gpu_cap, 1.0);
    // The cluster as written: $3.06 at 60%, dearer per busy GPU-hour than the data group and
    // cheaper than the scale-up.
    let written = d.options.iter().position(|o| o.change.is_none()).unwrap();
    assert!((d.options[written].cost_per_busy_gpu_hour.unwrap() - 3.06 / 0.6).abs() < 1e-12);
    assert!(written < i);
}

/// The four-GPU size scales up the same way: ml.g5.12xlarge (48 vCPUs) → ml.g5.24xlarge (96).
#[test]
fn a_g5_12xlarge_scales_up_to_a_g5_24xlarge() {
    let d = demand(&job(&one_group("ml.g5.12xlarge")), 20.0, 5);
    let up: Vec<&str> = d
        .options
        .iter()
        .filter_map(|o| o.change.trainer.as_ref())
        .filter(|s| s.kind == SwapKind::ScaleUp && !d.options.is_empty())
        .map(|s| s.to.as_str())
        .collect();
    assert!(up.contains(&"ml.g5.24xlarge"), "{up:?}");
    assert!(
        !up.contains(&"ml.g5.48xlarge"),
        "eight GPUs are not the same GPUs: {up:?}"
    );
}

/// Where the price source has no price for the g5 types (here a Price List answer with CPU
/// types only) the scale-up is still listed, as unpriced, and is the simplest; no total is
/// made up.
#[test]
fn unpriced_options_are_listed_apart_and_never_summed() {
    let prices = price_list(
        "2026-12-04",
        &[("ml.c5.xlarge", 0.204), ("ml.c5.4xlarge", 0.816)],
    );
    let job = job(&one_group("ml.g5.8xlarge"));
    let p = hetgen_plan::plan(&job, Catalog::builtin(), &prices, Some(50.0), None, 5).unwrap();
    assert_eq!(p.price_per_hour, None);
    assert_eq!(p.unpriced, ["dnn_group"]);
    let d = p.demand.unwrap();
    assert!(d.options.iter().all(|o| o.cluster_price_per_hour.is_none()
        && o.cost_per_busy_gpu_hour.is_none()
        && !o.unpriced.is_empty()));
    assert_eq!(d.decision.cheapest, None);
    let simplest = &d.options[d.decision.simplest.unwrap()];
    assert_eq!(
        simplest.change.trainer.as_ref().unwrap().to,
        "ml.g5.16xlarge"
    );
    assert_eq!(simplest.unpriced, ["ml.g5.16xlarge"]);
    // Unpriced options are ranked by utilisation: every 100% option before the 60% as written.
    let caps: Vec<f64> = d.options.iter().map(|o| o.gpu_cap).collect();
    assert!(caps.windows(2).all(|w| w[0] >= w[1]), "{caps:?}");
}

/// The guidance's second step: no type with eight A100s has more vCPUs than the p4d's 96, so
/// data groups rank first, with DESIGN.md's published figures.
#[test]
fn a_p4d_has_no_bigger_type_so_data_groups_rank_first_with_the_published_figures() {
    let p = plan(&job_with(P4D, "reserve_vcpus = 0"), Some(20.0), None, 5).unwrap();
    let d = p.demand.unwrap();
    assert_eq!(d.decision.bigger_types, 0);
    assert!(d.options.iter().all(|o| o.change.trainer.is_none()));
    assert!(d.options[0].needs_data_group && d.options[0].change.data.is_some());
    assert_eq!(d.decision.cheapest, Some(0));
    // The cluster as written: 60% busy, the p4d's price / (8 × 0.6) per busy GPU-hour; last.
    let written = d.options.last().unwrap();
    assert!(written.change.is_none());
    assert!((written.cost_per_busy_gpu_hour.unwrap() - P4D_PRICE / (8.0 * 0.6)).abs() < 1e-12);
    // The simplest: the one data instance that covers the 64 missing vCPUs exactly.
    let simplest = &d.options[d.decision.simplest.unwrap()];
    let data = simplest.change.data.as_ref().unwrap();
    assert_eq!(
        (data.instance_type.as_str(), data.count),
        ("ml.c6i.16xlarge", 1)
    );

    // The published cluster (2 × ml.c5.18xlarge beside it) is the option for a pipeline that
    // misses 113 vCPUs (25 per GPU, the trainer keeping its default 9): at the prices of its
    // day $45.032 an hour, and with the published step times (192 ms → 86 ms) cost per step
    // falls 46%.
    let p = hetgen_plan::plan(
        &job(P4D),
        Catalog::builtin(),
        &published_prices(),
        Some(25.0),
        None,
        20,
    )
    .unwrap();
    let d = p.demand.unwrap();
    let published = d
        .options
        .iter()
        .find(|o| {
            o.change
                .data
                .as_ref()
                .is_some_and(|x| (x.instance_type.as_str(), x.count) == ("ml.c5.18xlarge", 2))
        })
        .expect("2 × ml.c5.18xlarge is an option");
    assert_eq!(published.gpu_cap, 1.0);
    let price = published.cluster_price_per_hour.unwrap();
    assert!((price - 45.032).abs() < 1e-9, "{price}");
    let improvement = 1.0 - cost_per_step(price, 86.0) / cost_per_step(P4D_2022, 192.0);
    assert_eq!((improvement * 100.0).round(), 46.0);
}

/// An ml.p3.2xlarge (8 vCPUs, one V100) is the only one-V100 type: nothing to scale up to, so
/// data groups rank first. The simplest is one instance beside it: an ml.c6i.8xlarge (32
/// vCPUs, $1.632), where the published example paired an ml.c5.9xlarge (36, $1.836).
#[test]
fn a_p3_2xlarge_has_no_bigger_type_so_data_groups_rank_first() {
    let d = demand(&job(&one_group("ml.p3.2xlarge")), 30.0, 5);
    assert!((d.gpu_cap - 6.0 / 30.0).abs() < 1e-12);
    assert_eq!(d.decision.bigger_types, 0);
    assert!(d.options.iter().all(|o| o.change.trainer.is_none()));
    assert!(d.options[0].change.data.is_some());
    let simplest = &d.options[d.decision.simplest.unwrap()];
    let data = simplest.change.data.as_ref().unwrap();
    assert_eq!(
        (data.instance_type.as_str(), data.count),
        ("ml.c6i.8xlarge", 1)
    );
    assert!((simplest.cluster_price_per_hour.unwrap() - (3.825 + 1.632)).abs() < 1e-12);
    assert_eq!(simplest.gpu_cap, 1.0);
}

/// Burstable types are priced but never a data group: at $0.025 a vCPU an hour an ml.t3.medium
/// would undercut every c5, and then slow to a fraction of its vCPUs once its credits ran out.
#[test]
fn burstable_types_are_never_data_groups() {
    let t3 = Catalog::builtin().get("ml.t3.medium").unwrap();
    assert_eq!(t3.price_per_hour, Some(0.05));
    let d = demand(&job(&one_group("ml.g5.8xlarge")), 50.0, 50);
    let data: Vec<&str> = d
        .options
        .iter()
        .filter_map(|o| o.change.data.as_ref())
        .map(|x| x.instance_type.as_str())
        .collect();
    assert!(data.len() > 10, "{data:?}");
    assert!(data.iter().all(|t| !t.starts_with("ml.t")), "{data:?}");
}

/// Another family with the same GPUs counts, labelled as such: ml.p3.16xlarge (64 vCPUs, eight
/// V100s) → ml.p3dn.24xlarge (96 vCPUs, eight V100s); short of 100%, it also gets a data group.
#[test]
fn the_same_gpus_in_another_family_are_an_option_labelled_as_such() {
    let d = demand(&job(&one_group("ml.p3.16xlarge")), 12.0, 5);
    let same: Vec<_> = d
        .options
        .iter()
        .filter(|o| {
            o.change
                .trainer
                .as_ref()
                .is_some_and(|s| s.to == "ml.p3dn.24xlarge")
        })
        .collect();
    assert_eq!(
        same[0].change.trainer.as_ref().unwrap().kind,
        SwapKind::SameGpu
    );
    // 96 vCPUs less 9 kept: 87 of the 96 needed.
    let alone = same.iter().find(|o| o.change.data.is_none()).unwrap();
    assert!((alone.gpu_cap - 87.0 / 96.0).abs() < 1e-12);
    let topped = same.iter().find(|o| o.change.data.is_some()).unwrap();
    assert_eq!(topped.gpu_cap, 1.0);
}

/// Hybrid input is counted on every option as the runtime runs it: `trainer_threads = 0`
/// turns it off, so a data group must cover every vCPU and a bigger trainer lifts nothing.
#[test]
fn options_count_the_trainer_share_as_the_runtime_runs_it() {
    let on = demand(&job(&one_group("ml.p3.2xlarge")), 30.0, 5);
    let off = demand(
        &job_with(&one_group("ml.p3.2xlarge"), "trainer_threads = 0"),
        30.0,
        5,
    );
    let best = |d: &hetgen_plan::Demand| d.options[0].change.data.clone().unwrap().vcpus;
    // With hybrid input the p3.2xlarge's own 6 cover part of the 30; without it, none.
    assert!(best(&on) >= 24 && best(&on) < 30, "{}", best(&on));
    assert!(best(&off) >= 30, "{}", best(&off));
}

/// A type hetgen's catalog does not know (the spec allows it) has no price: the plan reports
/// it and makes no total; sizing it is refused with the reason.
#[test]
fn an_unknown_unpriced_type_is_reported_not_summed() {
    let groups = format!(
        "{P4D}[[instance_group]]\nname = \"data_group\"\ninstance_type = \"ml.c7a.16xlarge\"\nrole = \"data\"\nallow_unknown_instance_type = true\n"
    );
    let p = plan(&job(&groups), None, None, 5).unwrap();
    assert_eq!(p.price_per_hour, None);
    assert_eq!(p.unpriced, ["data_group"]);
    assert_eq!(p.unknown, ["data_group"]);
    assert_eq!((p.vcpus, p.gpus), (96, 8));
    let group = p.groups.iter().find(|g| g.name == "data_group").unwrap();
    assert_eq!((group.vcpus, group.price_per_hour), (None, None));
    let err = plan(&job(&groups), Some(20.0), None, 5).unwrap_err();
    assert!(matches!(err, PlanError::UnknownType { .. }), "{err}");

    // With the spec's own price it is summed (and still not sized).
    let priced = groups.replace(
        "allow_unknown_instance_type = true\n",
        "allow_unknown_instance_type = true\nprice_per_hour = 2.5\n",
    );
    let p = plan(&job(&priced), None, None, 5).unwrap();
    assert!((p.price_per_hour.unwrap() - (P4D_PRICE + 2.5)).abs() < 1e-12);
    assert!(p.unpriced.is_empty());
}

/// A group's own `price_per_hour` wins over any price source; other types take the source's.
#[test]
fn a_spec_price_wins_over_the_price_source() {
    let spec = one_group("ml.p3.2xlarge") + "price_per_hour = 2.0\n";
    let prices = price_list(
        "2026-12-04",
        &[("ml.p3.2xlarge", 9.0), ("ml.c5.9xlarge", 1.0)],
    );
    let p = hetgen_plan::plan(
        &job(&spec),
        Catalog::builtin(),
        &prices,
        Some(30.0),
        None,
        5,
    )
    .unwrap();
    assert_eq!(p.price_per_hour, Some(2.0));
    let d = p.demand.unwrap();
    assert_eq!(d.options[0].cluster_price_per_hour, Some(3.0));
    assert_eq!(p.price_dates, ["2026-12-04"]);

    // Even when the spec's price is the catalog's own figure.
    let spec = one_group("ml.p3.2xlarge") + "price_per_hour = 3.825\n";
    let p = hetgen_plan::plan(&job(&spec), Catalog::builtin(), &prices, None, None, 5).unwrap();
    assert_eq!(p.price_per_hour, Some(3.825));
}

/// A bigger trainer lifts nothing when the runtime would not use its vCPUs: with `threads = 3`
/// a one-group job's pipeline has 3 threads on any type, so no bigger type is an option.
#[test]
fn a_bigger_trainer_whose_vcpus_the_runtime_would_not_use_is_no_option() {
    let d = demand(
        &job_with(&one_group("ml.g5.8xlarge"), "threads = 3"),
        10.0,
        5,
    );
    assert!((d.gpu_cap - 0.3).abs() < 1e-12);
    assert!(d.decision.bigger_types > 0);
    assert!(
        d.options
            .iter()
            .all(|o| o.change.trainer.is_none() && o.gpu_cap <= 1.0),
        "{:?}",
        d.options
    );
    // A data group still lifts it: with one, the trainer's share is the hybrid one (30).
    assert!(d.options.iter().any(|o| o.gpu_cap == 1.0));
}

/// A Python dataset's needs: `rate` samples/s per vCPU, `bytes` per sample, `mib` per worker.
fn needs(rate: f64, bytes: f64, mib: f64) -> hetgen_plan::DatasetNeeds {
    hetgen_plan::DatasetNeeds {
        samples_per_s_per_vcpu: rate,
        bytes_per_sample: bytes,
        worker_memory_mib: mib,
    }
}

#[test]
fn a_data_host_carries_its_share_of_what_the_gpus_consume_on_its_network_and_memory() {
    // 8 GPUs × 20 vCPUs = 160 needed; 87 trainer + 144 data vCPUs available: the GPUs consume
    // 160 / 231 of what the pipeline could make, and each c5.18xlarge (72 vCPUs) that share of
    // its 72 × 100 samples/s.
    let p = plan(&job(&format!("{TWO_C5}{P4D}")), Some(20.0), Some(100.0), 3)
        .unwrap()
        .with_data_hosts(Catalog::builtin(), &needs(100.0, 150_528.0, 400.0));
    let [host] = &p.data_hosts[..] else {
        panic!("{:?}", p.data_hosts)
    };
    let samples = 72.0 * 100.0 * 160.0 / 231.0;
    assert!((host.samples_per_s - samples).abs() < 1e-6, "{host:?}");
    assert!((host.network_gbps - samples * 150_528.0 * 8.0 / 1e9).abs() < 1e-9);
    assert_eq!(host.network_gbps_available, Some(25.0));
    assert!((host.memory_gib - 72.0 * 400.0 / 1024.0).abs() < 1e-9);
    assert_eq!(host.memory_gib_available, Some(144.0));
    assert!(host.fits());
}

#[test]
fn a_data_host_whose_batches_outgrow_its_network_is_short_of_it() {
    // Uncompressed 224² float32 images (602 112 bytes) at 2000 samples/s per vCPU: a data host
    // of the cheapest option cannot send its share over its baseline bandwidth.
    let p = plan(&job(P4D), Some(20.0), Some(2000.0), 3)
        .unwrap()
        .with_data_hosts(Catalog::builtin(), &needs(2000.0, 602_112.0, 100.0));
    assert!(
        p.data_hosts.is_empty(),
        "the cluster as written has no data group"
    );
    let d = p.demand.unwrap();
    let added: Vec<_> = d
        .options
        .iter()
        .filter(|o| o.change.data.is_some())
        .collect();
    assert!(!added.is_empty());
    for option in added {
        let [host] = &option.data_hosts[..] else {
            panic!("{option:?}")
        };
        assert_eq!(host.network_fits(), Some(false), "{host:?}");
        assert!(!host.fits());
    }
}

#[test]
fn memory_beyond_the_type_is_short_and_unknown_bandwidth_is_not_a_fault() {
    let p = plan(&job(&format!("{TWO_C5}{P4D}")), Some(20.0), Some(1.0), 3)
        .unwrap()
        .with_data_hosts(Catalog::builtin(), &needs(1.0, 10.0, 4096.0));
    let host = &p.data_hosts[0];
    // 72 workers of 4 GiB on a 144 GiB host.
    assert_eq!(host.memory_fits(), Some(false));
    assert_eq!(host.network_fits(), Some(true));
    // Without a demand (no vCPUs per GPU) there is no share to check.
    let bare = plan(&job(&format!("{TWO_C5}{P4D}")), None, Some(1.0), 3)
        .unwrap()
        .with_data_hosts(Catalog::builtin(), &needs(1.0, 10.0, 4096.0));
    assert!(bare.data_hosts.is_empty());
}
