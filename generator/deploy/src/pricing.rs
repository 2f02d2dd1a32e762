//! Current on-demand SageMaker training prices from the AWS Price List API, and a cache of them.
//!
//! GetProducts for `AmazonSageMaker`, filtered by the region's code, every page. A product is a
//! training instance when its usage type is `Train:<type>` (region-prefixed outside
//! us-east-1, as `USW2-Train:ml.g5.xlarge`); its price is the on-demand term's hourly USD
//! rate. Products without an on-demand term (savings plans, reserved capacity) are skipped.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use aws_sdk_pricing::types::{Filter, FilterType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Aws, DeployError};

/// The Price List API's service code for SageMaker.
pub const SERVICE_CODE: &str = "AmazonSageMaker";

/// On-demand $/h per training instance type in one region, on the day they were read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingPrices {
    /// The region the prices are for.
    pub region: String,
    /// When they were read from the Price List API (`YYYY-MM-DD`, UTC).
    pub fetched: String,
    /// USD per instance-hour, by type (`ml.g5.16xlarge`).
    pub prices: BTreeMap<String, f64>,
}

impl TrainingPrices {
    /// Reads a cache file written by [`TrainingPrices::save`]; `None` when there is none or it
    /// cannot be read as one.
    pub fn load(path: &Path) -> Option<TrainingPrices> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes the prices to `path` (its folder created), atomically.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self).expect("prices serialize");
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }
}

/// Today's date, UTC, as `YYYY-MM-DD`.
pub fn today() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()[..10].to_owned()
}

/// Reads every on-demand SageMaker training price for `region`, all pages.
pub async fn training_prices(aws: &Aws, region: &str) -> Result<TrainingPrices, DeployError> {
    let client = aws.pricing();
    let filter = Filter::builder()
        .r#type(FilterType::TermMatch)
        .field("regionCode")
        .value(region)
        .build()
        .expect("the filter has its three fields");
    let mut prices = BTreeMap::new();
    let mut token: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    loop {
        let page = client
            .get_products()
            .service_code(SERVICE_CODE)
            .filters(filter.clone())
            .format_version("aws_v1")
            .max_results(100)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| DeployError::from_service("pricing", "GetProducts", "", e))?;
        for item in page.price_list() {
            if let Some((name, usd)) = training_price(item) {
                prices.insert(name, usd);
            }
        }
        match page.next_token() {
            Some(next) if !next.is_empty() => {
                // A token seen before would page forever.
                if !seen.insert(next.to_owned()) {
                    return Err(DeployError::Call {
                        operation: "GetProducts".to_owned(),
                        message: format!("the Price List API returned page token `{next}` twice"),
                    });
                }
                token = Some(next.to_owned());
            }
            _ => break,
        }
    }
    Ok(TrainingPrices {
        region: region.to_owned(),
        fetched: today(),
        prices,
    })
}

/// The instance type and on-demand USD/h of one Price List product (a JSON document), when it
/// is a training instance with an on-demand hourly price.
pub fn training_price(product: &str) -> Option<(String, f64)> {
    let doc: Value = serde_json::from_str(product).ok()?;
    let attributes = &doc["product"]["attributes"];
    let usage = attributes["usagetype"].as_str()?;
    let name = usage.split_once("Train:").and_then(|(prefix, name)| {
        // `Train:ml.x` in us-east-1, `USW2-Train:ml.x` elsewhere; not `Train-Spot:` and kin.
        (prefix.is_empty() || prefix.ends_with('-')).then_some(name)
    })?;
    if !name.starts_with("ml.") {
        return None;
    }
    let on_demand = doc["terms"]["OnDemand"].as_object()?;
    on_demand.values().find_map(|term| {
        term["priceDimensions"]
            .as_object()?
            .values()
            .filter(|d| d["unit"].as_str().is_some_and(|u| u.starts_with("Hr")))
            .find_map(|d| {
                let usd: f64 = d["pricePerUnit"]["USD"].as_str()?.parse().ok()?;
                (usd.is_finite() && usd > 0.0).then(|| (name.to_owned(), usd))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn product(usage: &str, terms: Value) -> String {
        json!({
            "product": {
                "productFamily": "ML Instance",
                "attributes": {"usagetype": usage, "regionCode": "us-east-1"},
                "sku": "SKU1"
            },
            "serviceCode": "AmazonSageMaker",
            "terms": terms
        })
        .to_string()
    }

    fn on_demand(usd: &str) -> Value {
        json!({"OnDemand": {"SKU1.JRTCKXETXF": {"priceDimensions": {
            "SKU1.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}
        }}}})
    }

    #[test]
    fn training_products_give_their_hourly_on_demand_price() {
        assert_eq!(
            training_price(&product("Train:ml.g5.16xlarge", on_demand("4.0960000000"))),
            Some(("ml.g5.16xlarge".to_owned(), 4.096))
        );
        assert_eq!(
            training_price(&product("USW2-Train:ml.c5.xlarge", on_demand("0.2"))),
            Some(("ml.c5.xlarge".to_owned(), 0.2))
        );
    }

    #[test]
    fn other_products_and_terms_are_skipped() {
        // Hosting, spot training and storage are not training instance-hours.
        for usage in [
            "Host:ml.g5.xlarge",
            "Train-Spot:ml.g5.xlarge",
            "Train:VolumeUsage.gp2",
        ] {
            assert_eq!(
                training_price(&product(usage, on_demand("1.0"))),
                None,
                "{usage}"
            );
        }
        // A product with only a reserved (or no) term, a zero price, or no JSON at all.
        let reserved = json!({"Reserved": {"SKU1.X": {"priceDimensions": {}}}});
        assert_eq!(
            training_price(&product("Train:ml.p5.48xlarge", reserved)),
            None
        );
        assert_eq!(
            training_price(&product("Train:ml.p5.48xlarge", json!({}))),
            None
        );
        assert_eq!(
            training_price(&product("Train:ml.p5.48xlarge", on_demand("0.0000000000"))),
            None
        );
        assert_eq!(training_price("not json"), None);
    }

    #[test]
    fn a_cache_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices/sagemaker-us-east-1.json");
        assert_eq!(TrainingPrices::load(&path), None);
        let prices = TrainingPrices {
            region: "us-east-1".to_owned(),
            fetched: today(),
            prices: BTreeMap::from([("ml.c5.xlarge".to_owned(), 0.204)]),
        };
        prices.save(&path).unwrap();
        assert_eq!(TrainingPrices::load(&path), Some(prices));
    }
}
