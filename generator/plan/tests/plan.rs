//! Sizing and cost arithmetic on the figures DESIGN.md quotes.

use hetgen_plan::{Run, cap, compare, cost_per_step, plan};
use hetgen_spec::model::Role;
use hetgen_spec::{Catalog, Job};

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
    let p = plan(
        &job_with(P4D, "reserve_vcpus = 0"),
        Catalog::builtin(),
        Some(20.0),
        None,
        3,
    )
    .unwrap();
    assert_eq!((p.vcpus, p.gpus), (96, 8));
    assert_eq!(p.vcpu_per_gpu, Some(12.0));
    let d = p.demand.unwrap();
    assert_eq!(d.needed_vcpus, 160.0);
    assert!((d.gpu_cap - 0.6).abs() < 1e-12);
    assert!((d.cost_per_busy_gpu_hour.unwrap() - 37.688 / (8.0 * 0.6)).abs() < 1e-9);
    // 64 missing vCPUs: four ml.c5.4xlarge ($0.816 each) are the cheapest, fewest-instance way.
    let best = &d.options[0];
    assert_eq!(
        (best.instance_type.as_str(), best.count, best.vcpus),
        ("ml.c5.4xlarge", 4, 64)
    );
    assert!((best.cluster_price_per_hour - (37.688 + 4.0 * 0.816)).abs() < 1e-9);
    assert!(
        d.options
            .windows(2)
            .all(|w| w[0].cluster_price_per_hour <= w[1].cluster_price_per_hour)
    );
}

#[test]
fn reserved_trainer_vcpus_lower_the_cap() {
    let d = plan(
        &job_with(P4D, "reserve_vcpus = 16"),
        Catalog::builtin(),
        Some(20.0),
        None,
        3,
    )
    .unwrap()
    .demand
    .unwrap();
    assert!((d.gpu_cap - 80.0 / 160.0).abs() < 1e-12);
    assert_eq!(d.options[0].vcpus, 80);
}

#[test]
fn two_c5_18xlarge_lift_the_cap_to_100_percent() {
    let p = plan(
        &job(&format!("{TWO_C5}{P4D}")),
        Catalog::builtin(),
        Some(20.0),
        None,
        3,
    )
    .unwrap();
    assert_eq!(p.vcpus, 96 + 144);
    assert!((p.price_per_hour.unwrap() - (37.688 + 2.0 * 3.672)).abs() < 1e-9);
    let d = p.demand.unwrap();
    assert_eq!(d.gpu_cap, 1.0);
    // Hybrid input: the trainer keeps one vCPU per GPU and one more, the rest preprocess.
    assert_eq!(d.available_vcpus, (96 - 9 + 144) as f64);
}

#[test]
fn each_side_counts_what_its_hosts_preprocess_and_predicts_samples_per_s() {
    let groups = format!("{TWO_C5}{P4D}");
    let p = plan(&job(&groups), Catalog::builtin(), None, Some(100.0), 3).unwrap();
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
        Catalog::builtin(),
        Some(20.0),
        None,
        3,
    )
    .unwrap();
    assert_eq!(off.sides[0].vcpus, 0);
    assert!((off.demand.unwrap().gpu_cap - 144.0 / 160.0).abs() < 1e-12);
    // Homogeneous: the trainer is the only pipeline.
    let alone = plan(&job(P4D), Catalog::builtin(), None, None, 3).unwrap();
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
            let p = plan(&spec, Catalog::builtin(), None, None, 3).unwrap();
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

#[test]
fn design_example_cuts_cost_per_step_by_46_percent() {
    let (homo, hetero) = (job(P4D), job(&format!("{TWO_C5}{P4D}")));
    let c = compare(
        &Run {
            label: "homogeneous",
            job: &homo,
            step_ms: 192.0,
            price: None,
        },
        &Run {
            label: "hetero",
            job: &hetero,
            step_ms: 86.0,
            price: None,
        },
    )
    .unwrap();
    assert!((c.baseline.cost_per_step - cost_per_step(37.688, 192.0)).abs() < 1e-15);
    assert!((c.speedup - 192.0 / 86.0).abs() < 1e-12);
    let expected = 1.0 - (45.032 * 86.0) / (37.688 * 192.0);
    assert!((c.improvement - expected).abs() < 1e-12);
    assert_eq!((c.improvement * 100.0).round(), 46.0);
    assert_eq!(c.candidate.instances, 3);
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
        "[[instance_group]]\nname = \"t\"\ninstance_type = \"ml.g5.8xlarge\"\nrole = \"trainer\"\n",
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
            .contains("no price is known for `ml.g5.8xlarge`")
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
        let err = plan(&p4d, Catalog::builtin(), Some(bad), None, 3).unwrap_err();
        assert!(
            matches!(err, hetgen_plan::PlanError::CpuPerGpu(_)),
            "{bad}: {err}"
        );
    }
}

#[test]
fn huge_demands_and_counts_do_not_overflow() {
    // Far more vCPUs than any cluster has: the cap is tiny, no option's count wraps around.
    let p = plan(&job(P4D), Catalog::builtin(), Some(1e300), None, 3).unwrap();
    let d = p.demand.unwrap();
    assert!(d.gpu_cap > 0.0 && d.gpu_cap < 1e-290, "{}", d.gpu_cap);
    assert!(d.options.is_empty(), "{:?}", d.options);

    // A job built by hand (not through validation) with more vCPUs than a u32 holds.
    let mut big = job(&format!("{TWO_C5}{P4D}"));
    big.groups[0].count = u32::MAX;
    let err = plan(&big, Catalog::builtin(), None, None, 3).unwrap_err();
    assert!(
        matches!(err, hetgen_plan::PlanError::Overflow { .. }),
        "{err}"
    );
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
        assert!(
            matches!(err, hetgen_plan::PlanError::Price(_)),
            "{bad}: {err}"
        );
        let err = compare(&run(None), &run(Some(bad))).unwrap_err();
        assert!(
            matches!(err, hetgen_plan::PlanError::Price(_)),
            "{bad}: {err}"
        );
    }
}
