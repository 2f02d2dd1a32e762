//! The catalog of SageMaker training instance types (`data/instances.toml`).

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
    /// Default source of the prices.
    pub source: String,
    /// When the prices were recorded (`YYYY-MM`).
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
    /// Where this entry's price came from, when not the catalog's default source.
    #[serde(default)]
    pub price_source: Option<String>,
}

/// The set of instance types hetgen knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// Where the prices came from.
    pub prices: PriceInfo,
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

    #[test]
    fn design_facts_are_in_the_catalog() {
        let c = Catalog::builtin();
        let p4d = c.get("ml.p4d.24xlarge").unwrap();
        assert_eq!(
            (p4d.vcpus, p4d.gpus, p4d.price_per_hour),
            (96, 8, Some(37.688))
        );
        let c5 = c.get("ml.c5.18xlarge").unwrap();
        assert_eq!((c5.vcpus, c5.gpus, c5.price_per_hour), (72, 0, Some(3.672)));
        assert_eq!(c.get("ml.g5.48xlarge").unwrap().vcpus, 192);
    }
}
