//! The catalog of SageMaker training instance types (`data/instances.toml`).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

const CATALOG_TOML: &str = include_str!("../data/instances.toml");

static BUILTIN: LazyLock<Catalog> = LazyLock::new(|| {
    // The file ships inside the binary and a unit test parses it, so a failure here is a
    // build-time bug, not a user error.
    toml::from_str(CATALOG_TOML).expect("the built-in instance catalog is valid TOML")
});

/// Where the catalog's prices came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceInfo {
    /// Region the prices are for.
    pub region: String,
    /// Currency of every price.
    pub currency: String,
    /// Where prices came from, by the name an entry's `price_from` gives.
    pub sources: BTreeMap<String, SourceEntry>,
}

/// Where the catalog's network figures came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkInfo {
    /// Where network figures came from, by the name an entry's `network_from` gives.
    pub sources: BTreeMap<String, SourceEntry>,
}

/// One source of figures (prices or network bandwidths).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    /// A URL with a few words on what it is.
    pub source: String,
    /// When its figures were read (`YYYY-MM`).
    pub recorded: String,
}

/// One instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    /// E.g. `ml.c5.9xlarge`.
    #[serde(rename = "type")]
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in GiB.
    pub memory_gib: f64,
    /// GPUs (0 for CPU instances).
    #[serde(default)]
    pub gpus: u32,
    /// GPU model, e.g. `A100`.
    #[serde(default)]
    pub gpu_kind: Option<String>,
    /// Memory per GPU in GiB.
    #[serde(default)]
    pub gpu_memory_gib: Option<f64>,
    /// On-demand USD per instance-hour, when known.
    #[serde(default)]
    pub price_per_hour: Option<f64>,
    /// Where the price came from: the name of one of `[prices.sources]`.
    #[serde(default)]
    pub price_from: Option<String>,
    /// The sustained (baseline) network bandwidth in Gbit/s of the EC2 type behind this ml.
    /// type: what a data host streaming batches for hours can count on. For types EC2 sells as
    /// "up to N Gigabit" (c5.xlarge: baseline 1.25, burst 10) it is the baseline, not the burst,
    /// which lasts only while the instance's network I/O credits do. On types with several
    /// network cards (p4d, p5, trn1, …) it is the sum over all of them, mostly EFA. `None`
    /// where EC2 documents no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_gbps: Option<f64>,
    /// Where `network_gbps` came from: the name of one of `[network.sources]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_from: Option<String>,
    /// The Elastic Fabric Adapter NCCL uses across hosts of this type, as AWS's training
    /// toolkit knows it; `None` where it knows none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<Efa>,
}

/// An instance type's Elastic Fabric Adapter, as AWS's training toolkit (`sagemaker-training`
/// 5.1) sorts the types it sets EFA's variables for when it starts torchrun: `FI_PROVIDER=efa`
/// for both kinds, and for those whose EFA does RDMA, `FI_EFA_USE_DEVICE_RDMA=1` and
/// `RDMAV_FORK_SAFE=1`. hetgen's launcher starts torchrun itself and sets the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Efa {
    /// EFA that also does RDMA (`efa = "rdma"`).
    Rdma,
    /// EFA without RDMA (`efa = "no-rdma"`).
    NoRdma,
}

impl SourceEntry {
    fn provenance(&self) -> Provenance<'_> {
        Provenance {
            source: &self.source,
            recorded: &self.recorded,
        }
    }
}

impl InstanceType {
    /// The family: `g5` for `ml.g5.16xlarge`, `p6-b200` for `ml.p6-b200.48xlarge`.
    pub fn family(&self) -> &str {
        family(&self.name)
    }
}

/// The family of an instance type name: what lies between `ml.` and the size.
pub fn family(name: &str) -> &str {
    let name = name.strip_prefix("ml.").unwrap_or(name);
    name.rsplit_once('.').map_or(name, |(family, _)| family)
}

/// Whether `name` is a burstable type (`t2`, `t3`, …): its vCPUs run at full speed only while
/// CPU credits last, then at a fraction of it, so it cannot keep up a pipeline's steady load.
pub fn is_burstable(name: &str) -> bool {
    family(name).starts_with('t') && !is_neuron(name)
}

/// Whether `name` is an AWS Trainium type (`trn1`, `trn1n`, `trn2`): its accelerators are
/// Neuron devices, not GPUs.
pub fn is_neuron(name: &str) -> bool {
    family(name).starts_with("trn")
}

/// Where one figure (a price, a network bandwidth) came from and when.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance<'a> {
    /// The source, a URL with a few words.
    pub source: &'a str,
    /// `YYYY-MM` (or a date).
    pub recorded: &'a str,
}

/// The set of instance types hetgen knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Where the prices came from.
    pub prices: PriceInfo,
    /// Where the network figures came from.
    pub network: NetworkInfo,
    /// Every known type.
    #[serde(rename = "instance")]
    pub instances: Vec<InstanceType>,
}

impl Catalog {
    /// The catalog shipped with hetgen.
    pub fn builtin() -> &'static Catalog {
        &BUILTIN
    }

    /// The entry for `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instances.iter().find(|i| i.name == name)
    }

    /// Where the price of `instance` came from and when. `None` when it has no price (or,
    /// which a test rules out for the built-in catalog, names no known source).
    pub fn provenance<'a>(&'a self, instance: &'a InstanceType) -> Option<Provenance<'a>> {
        instance.price_per_hour?;
        let from = self.prices.sources.get(instance.price_from.as_deref()?)?;
        Some(from.provenance())
    }

    /// Where the `network_gbps` of `instance` came from and when. `None` when it has no figure
    /// (or, which a test rules out for the built-in catalog, names no known source).
    pub fn network_provenance<'a>(&'a self, instance: &'a InstanceType) -> Option<Provenance<'a>> {
        instance.network_gbps?;
        let from = self
            .network
            .sources
            .get(instance.network_from.as_deref()?)?;
        Some(from.provenance())
    }

    /// Every type name, in catalog order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.instances.iter().map(|i| i.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_parses_and_is_consistent() {
        let catalog = Catalog::builtin();
        assert!(catalog.get("ml.p4d.24xlarge").is_some());
        let mut names: Vec<_> = catalog.names().collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(
            before,
            names.len(),
            "duplicate instance types in the catalog"
        );
        for i in &catalog.instances {
            assert!(i.vcpus > 0, "{} has no vCPUs", i.name);
            assert_eq!(
                i.gpus > 0,
                i.gpu_kind.is_some(),
                "{}: gpus vs gpu_kind",
                i.name
            );
        }
    }

    /// DESIGN.md's instance facts. Its p4d price ($37.688) is the one its 2022 figures were
    /// computed at; the catalog carries today's sourced price instead.
    #[test]
    fn design_facts_are_in_the_catalog() {
        let c = Catalog::builtin();
        let p4d = c.get("ml.p4d.24xlarge").unwrap();
        assert_eq!(
            (p4d.vcpus, p4d.gpus, p4d.price_per_hour),
            (96, 8, Some(25.2512883))
        );
        for (name, price) in [("ml.c5.9xlarge", 1.836), ("ml.p3.2xlarge", 3.825)] {
            assert_eq!(c.get(name).unwrap().price_per_hour, Some(price), "{name}");
        }
        let c5 = c.get("ml.c5.18xlarge").unwrap();
        assert_eq!((c5.vcpus, c5.gpus, c5.price_per_hour), (72, 0, Some(3.672)));
        assert_eq!(c.get("ml.g5.48xlarge").unwrap().vcpus, 192);
        for (name, vcpus, gpus) in [
            ("ml.g5.8xlarge", 32, 1),
            ("ml.g5.16xlarge", 64, 1),
            ("ml.g5.12xlarge", 48, 4),
            ("ml.g5.24xlarge", 96, 4),
            ("ml.p3.2xlarge", 8, 1),
        ] {
            let i = c.get(name).unwrap();
            assert_eq!((i.vcpus, i.gpus), (vcpus, gpus), "{name}");
        }
    }

    /// The toolkit's two lists (`sagemaker-training` 5.1), each type in the catalog with its kind.
    #[test]
    fn efa_types_are_the_training_toolkit_s() {
        let c = Catalog::builtin();
        let with = |kind| {
            let mut names: Vec<&str> = c
                .instances
                .iter()
                .filter(|i| i.efa == Some(kind))
                .map(|i| i.name.as_str())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            with(Efa::Rdma),
            [
                "ml.p4d.24xlarge",
                "ml.p4de.24xlarge",
                "ml.p5.48xlarge",
                "ml.p5e.48xlarge",
                "ml.p6e-gb200.36xlarge",
                "ml.trn1.32xlarge",
            ]
        );
        assert_eq!(
            with(Efa::NoRdma),
            [
                "ml.g4dn.12xlarge",
                "ml.g4dn.8xlarge",
                "ml.g5.48xlarge",
                "ml.p3dn.24xlarge",
            ]
        );
    }

    #[test]
    fn burstable_types_are_the_t_families() {
        for (name, burstable) in [
            ("ml.t3.medium", true),
            ("ml.t2.large", true),
            ("ml.trn1.32xlarge", false),
            ("ml.trn2.48xlarge", false),
            ("ml.c5.xlarge", false),
            ("ml.m7i.large", false),
        ] {
            assert_eq!(is_burstable(name), burstable, "{name}");
        }
    }

    /// Every price says where it came from and when, as a URL and a `YYYY-MM` month.
    #[test]
    fn every_price_has_a_source_and_a_date() {
        let c = Catalog::builtin();
        for name in c.prices.sources.keys() {
            assert!(
                c.instances
                    .iter()
                    .any(|i| i.price_from.as_deref() == Some(name)),
                "source {name} prices nothing"
            );
        }
        for i in &c.instances {
            assert_eq!(
                i.price_per_hour.is_some(),
                c.provenance(i).is_some(),
                "{}",
                i.name
            );
            assert!(
                i.price_per_hour.is_some() || i.price_from.is_none(),
                "{}: a source without a price",
                i.name
            );
            if let Some(p) = c.provenance(i) {
                assert_cited(&i.name, &p);
            }
        }
    }

    /// A source is a URL with a `YYYY-MM` month.
    fn assert_cited(name: &str, p: &Provenance) {
        assert!(p.source.starts_with("https://"), "{name}: {}", p.source);
        let month = p.recorded.as_bytes();
        assert!(
            month.len() == 7
                && month[4] == b'-'
                && month
                    .iter()
                    .enumerate()
                    .all(|(n, b)| n == 4 || b.is_ascii_digit()),
            "{name}: {}",
            p.recorded
        );
    }

    /// Every network figure says where it came from and when, as a price does.
    #[test]
    fn every_network_figure_has_a_source_and_a_date() {
        let c = Catalog::builtin();
        for name in c.network.sources.keys() {
            assert!(
                c.instances
                    .iter()
                    .any(|i| i.network_from.as_deref() == Some(name)),
                "source {name} gives no figure"
            );
        }
        for i in &c.instances {
            assert_eq!(
                i.network_gbps.is_some(),
                c.network_provenance(i).is_some(),
                "{}",
                i.name
            );
            assert!(
                i.network_gbps.is_some() || i.network_from.is_none(),
                "{}: a source without a figure",
                i.name
            );
            if let Some(gbps) = i.network_gbps {
                assert!(gbps.is_finite() && gbps > 0.0, "{}: {gbps}", i.name);
            }
            if let Some(p) = c.network_provenance(i) {
                assert_cited(&i.name, &p);
            }
        }
    }

    /// Baselines, not bursts, as EC2's "Network specifications" tables give them: c5.xlarge is
    /// "1.25 / 10.0", t3.medium "0.256 / 5.0".
    #[test]
    fn network_figures_are_ec2_baselines() {
        let c = Catalog::builtin();
        for (name, gbps) in [
            ("ml.c5.xlarge", 1.25),
            ("ml.c5.4xlarge", 5.0),
            ("ml.c5.18xlarge", 25.0),
            ("ml.t3.medium", 0.256),
            ("ml.m6i.large", 0.781),
            ("ml.c4.8xlarge", 10.0),
            ("ml.p3.2xlarge", 2.5),
            ("ml.g5.48xlarge", 100.0),
            ("ml.p4d.24xlarge", 400.0),
            ("ml.p5.48xlarge", 3200.0),
            ("ml.p2.16xlarge", 25.0),
        ] {
            assert_eq!(c.get(name).unwrap().network_gbps, Some(gbps), "{name}");
        }
        // EC2 documents only "High" for these.
        for name in ["ml.c4.xlarge", "ml.m4.4xlarge", "ml.p2.xlarge"] {
            assert_eq!(c.get(name).unwrap().network_gbps, None, "{name}");
        }
    }

    #[test]
    fn families_are_what_lies_between_ml_and_the_size() {
        assert_eq!(family("ml.g5.16xlarge"), "g5");
        assert_eq!(family("ml.p6-b200.48xlarge"), "p6-b200");
        assert_eq!(family("ml.c7i-flex.large"), "c7i-flex");
    }
}
