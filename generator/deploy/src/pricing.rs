//! Current on-demand SageMaker training prices from the AWS Price List API, and a cache of them.
//!
//! GetProducts for `AmazonSageMaker`, filtered by the region's code, every page. A product is a
//! training instance when its usage type is `Train:<type>` (region-prefixed outside
//! us-east-1, as `USW2-Train:ml.g5.xlarge`); its price is the on-demand term's hourly USD
//! rate. Products without an on-demand term (savings plans, reserved capacity) are skipped.
//!
//! [`current`] is where `hetgen plan --prices aws` takes prices from: the API is read at most
//! once a day per region, and a failed read falls back to an older cache, then to none (the
//! caller's catalog), saying why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use aws_sdk_pricing::types::{Filter, FilterType};
use miette::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Aws, Connection, DeployError};

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

/// The region to price: the connection's own (`--region`), else the spec's, else the
/// environment's (`AWS_REGION`, `AWS_DEFAULT_REGION`), else `fallback` (the catalog's).
pub fn price_region(connection: &Connection, spec_region: Option<&str>, fallback: &str) -> String {
    connection
        .region
        .clone()
        .or(spec_region.map(str::to_owned))
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| fallback.to_owned())
}

/// Where `region`'s prices are cached under hetgen's cache folder `cache_dir`.
pub fn cache_file(cache_dir: &Path, region: &str) -> PathBuf {
    cache_dir
        .join("prices")
        .join(format!("sagemaker-{region}.json"))
}

/// The prices [`current`] found, and what the caller should say about them.
#[derive(Debug)]
pub struct Current {
    /// The prices to use; `None` when neither the Price List API nor the cache had any for the
    /// region, and the caller's own (hetgen's catalog) stand in.
    pub prices: Option<TrainingPrices>,
    /// Whether `prices` came from the cache rather than from a read just now.
    pub cached: bool,
    /// Why today's prices could not be read, when they could not.
    pub unread: Option<Unread>,
    /// The cache file that could not be written, and why (the prices read are used all the
    /// same).
    pub not_cached: Option<(PathBuf, std::io::Error)>,
}

/// Why the Price List API gave no prices.
#[derive(Debug, Clone, PartialEq)]
pub struct Unread {
    /// What went wrong.
    pub why: String,
    /// What would fix it, when something would.
    pub help: Option<String>,
}

/// Current on-demand training prices for `region`, the first of: today's prices from `cache`
/// (a file, [`cache_file`]), a fresh read of the Price List API (then cached), an older
/// cache, none.
pub async fn current(connection: &Connection, region: &str, cache: Option<&Path>) -> Current {
    let mut cached = cache
        .and_then(TrainingPrices::load)
        .filter(|p| p.region == region);
    if let Some(prices) = cached.take_if(|p| p.fetched == today()) {
        return Current {
            prices: Some(prices),
            cached: true,
            unread: None,
            not_cached: None,
        };
    }
    let read = async {
        let aws = Aws::connect(connection, Some(region)).await?;
        training_prices(&aws, region).await
    };
    settle(read.await, cached, cache, region)
}

/// What a read of the Price List API leaves to use: its prices (cached in `cache`), else the
/// older `cached` ones, else none, with why the read gave none.
fn settle(
    read: Result<TrainingPrices, DeployError>,
    cached: Option<TrainingPrices>,
    cache: Option<&Path>,
    region: &str,
) -> Current {
    let unread = match read {
        Ok(prices) if !prices.prices.is_empty() => {
            let not_cached =
                cache.and_then(|path| prices.save(path).err().map(|e| (path.to_owned(), e)));
            return Current {
                prices: Some(prices),
                cached: false,
                unread: None,
                not_cached,
            };
        }
        Ok(_) => Unread {
            why: format!("the Price List API returned no SageMaker training prices for `{region}`"),
            help: Some("check `--region` (prices are per region) and `--endpoint-url`".to_owned()),
        },
        Err(e) => Unread {
            why: e.to_string(),
            help: e.help().map(|h| h.to_string()),
        },
    };
    Current {
        cached: cached.is_some(),
        prices: cached,
        unread: Some(unread),
        not_cached: None,
    }
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

    fn prices(region: &str, fetched: &str) -> TrainingPrices {
        TrainingPrices {
            region: region.to_owned(),
            fetched: fetched.to_owned(),
            prices: BTreeMap::from([("ml.c5.xlarge".to_owned(), 0.204)]),
        }
    }

    #[test]
    fn a_fresh_read_is_used_and_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = cache_file(dir.path(), "us-east-1");
        let read = prices("us-east-1", &today());
        let current = settle(Ok(read.clone()), None, Some(&path), "us-east-1");
        assert_eq!(current.prices.as_ref(), Some(&read));
        assert!(!current.cached);
        assert_eq!(current.unread, None);
        assert!(current.not_cached.is_none());
        assert_eq!(TrainingPrices::load(&path), Some(read.clone()));

        // A cache that cannot be written is said, and the prices are used all the same.
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let current = settle(Ok(read.clone()), None, Some(&blocked.join("p.json")), "r");
        assert_eq!(current.prices, Some(read));
        assert_eq!(current.not_cached.unwrap().0, blocked.join("p.json"));
    }

    #[test]
    fn a_failed_read_falls_back_to_an_older_cache_then_to_none() {
        let older = prices("eu-west-1", "2026-01-02");
        let failed = || {
            Err(DeployError::Call {
                operation: "GetProducts".to_owned(),
                message: "throttled".to_owned(),
            })
        };
        let current = settle(failed(), Some(older.clone()), None, "eu-west-1");
        assert_eq!(current.prices, Some(older));
        assert!(current.cached);
        assert!(current.unread.unwrap().why.contains("throttled"));

        let current = settle(failed(), None, None, "eu-west-1");
        assert_eq!(current.prices, None);
        assert!(!current.cached);
        assert!(current.unread.is_some());

        // An answer without a single training price is no better than none.
        let empty = TrainingPrices {
            prices: BTreeMap::new(),
            ..prices("eu-west-1", &today())
        };
        let current = settle(Ok(empty), None, None, "eu-west-1");
        assert_eq!(current.prices, None);
        let unread = current.unread.unwrap();
        assert!(unread.why.contains("`eu-west-1`"), "{unread:?}");
        assert!(unread.help.is_some());
    }

    #[tokio::test]
    async fn today_s_cache_is_used_without_asking_aws() {
        let dir = tempfile::tempdir().unwrap();
        let path = cache_file(dir.path(), "us-east-1");
        let today_s = prices("us-east-1", &today());
        today_s.save(&path).unwrap();
        // An endpoint where nothing listens: a call would fail.
        let nowhere = Connection {
            endpoint_url: Some("http://127.0.0.1:9".to_owned()),
            ..Connection::default()
        };
        let current = current(&nowhere, "us-east-1", Some(&path)).await;
        assert_eq!(current.prices, Some(today_s));
        assert!(current.cached);
        assert_eq!(current.unread, None);
    }

    #[test]
    fn the_region_priced_is_the_flag_s_then_the_spec_s() {
        let flag = Connection {
            region: Some("eu-west-1".to_owned()),
            ..Connection::default()
        };
        assert_eq!(
            price_region(&flag, Some("us-west-2"), "us-east-1"),
            "eu-west-1"
        );
        assert_eq!(
            price_region(&Connection::default(), Some("us-west-2"), "us-east-1"),
            "us-west-2"
        );
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
