//! The on-demand prices a plan uses, and where they came from.

use std::collections::BTreeMap;

use hetgen_spec::Catalog;
use serde::Serialize;

/// Where a set of prices came from: hetgen's committed catalog, or the AWS Price List API.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PriceSource {
    /// `instances.toml`, as committed: each price with its own source and month.
    Catalog {
        /// Region the prices are for.
        region: String,
    },
    /// The AWS Price List API (GetProducts for Amazon SageMaker), on the day it was read.
    PriceList {
        /// Region the prices are for.
        region: String,
        /// When the prices were read (`YYYY-MM-DD`).
        fetched: String,
        /// Whether they came from hetgen's cache of an earlier read.
        cached: bool,
    },
}

/// One type's on-demand price.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Price {
    /// USD per instance-hour.
    pub usd_per_hour: f64,
    /// Where it came from.
    pub source: String,
    /// When it was recorded (`YYYY-MM` or `YYYY-MM-DD`).
    pub recorded: String,
}

/// On-demand prices by instance type, from one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    source: PriceSource,
    by_type: BTreeMap<String, Price>,
}

impl Prices {
    /// The prices of hetgen's catalog: a type it has no price for stays unpriced.
    pub fn catalog(catalog: &Catalog) -> Prices {
        let by_type = catalog
            .instances
            .iter()
            .filter_map(|i| {
                let usd_per_hour = i.price_per_hour?;
                let from = catalog.provenance(i)?;
                Some((
                    i.name.clone(),
                    Price {
                        usd_per_hour,
                        source: from.source.to_owned(),
                        recorded: from.recorded.to_owned(),
                    },
                ))
            })
            .collect();
        Prices {
            source: PriceSource::Catalog {
                region: catalog.prices.region.clone(),
            },
            by_type,
        }
    }

    /// Prices read from the AWS Price List API for `region` on `fetched` (`YYYY-MM-DD`).
    pub fn price_list(
        region: &str,
        fetched: &str,
        cached: bool,
        prices: impl IntoIterator<Item = (String, f64)>,
    ) -> Prices {
        let source = format!("AWS Price List API, AmazonSageMaker, {region}");
        Prices {
            source: PriceSource::PriceList {
                region: region.to_owned(),
                fetched: fetched.to_owned(),
                cached,
            },
            by_type: prices
                .into_iter()
                .map(|(name, usd_per_hour)| {
                    let price = Price {
                        usd_per_hour,
                        source: source.clone(),
                        recorded: fetched.to_owned(),
                    };
                    (name, price)
                })
                .collect(),
        }
    }

    /// Where these prices came from.
    pub fn source(&self) -> &PriceSource {
        &self.source
    }

    /// The price of `instance_type`, when known.
    pub fn get(&self, instance_type: &str) -> Option<&Price> {
        self.by_type.get(instance_type)
    }
}
