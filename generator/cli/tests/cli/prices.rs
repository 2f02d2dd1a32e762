//! `hetgen plan --prices aws` against a local Price List endpoint. moto does not emulate the
//! Price List API, so this one serves GetProducts itself: two pages of products in the API's
//! own format (the figures are this test's, not AWS's), one of them without an on-demand term.

use std::io::BufReader;
use std::net::TcpStream;
use std::process::Output;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tempfile::TempDir;

use super::aws::aws_command;
use super::http::{Request, listen, read_request, write_reply};
use super::{assert_contains, code, stderr, stdout};

/// A Price List product in GetProducts' format: a JSON document inside a string.
fn product(usage: &str, terms: Value) -> String {
    json!({
        "product": {
            "productFamily": "ML Instance",
            "attributes": {"usagetype": usage, "regionCode": "eu-west-1", "servicecode": "AmazonSageMaker"},
            "sku": "SKU"
        },
        "serviceCode": "AmazonSageMaker",
        "terms": terms,
        "version": "20261201000000",
        "publicationDate": "2026-12-01T00:00:00Z"
    })
    .to_string()
}

fn on_demand(usd: &str) -> Value {
    json!({"OnDemand": {"SKU.JRTCKXETXF": {
        "offerTermCode": "JRTCKXETXF",
        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "beginRange": "0", "endRange": "Inf", "pricePerUnit": {"USD": usd}
        }}
    }}})
}

/// GetProducts, two pages: the second is asked for with the first's NextToken.
fn pages() -> (Value, Value) {
    let first = json!({
        "FormatVersion": "aws_v1",
        "PriceList": [
            product("EUW1-Train:ml.g5.8xlarge", on_demand("3.0000000000")),
            // A product without an on-demand term: skipped, never a price of 0.
            product("EUW1-Train:ml.p5.48xlarge", json!({"Reserved": {}})),
            // Hosting, not training.
            product("EUW1-Host:ml.g5.16xlarge", on_demand("9.9900000000")),
        ],
        "NextToken": "page-2"
    });
    let second = json!({
        "FormatVersion": "aws_v1",
        "PriceList": [
            product("EUW1-Train:ml.g5.16xlarge", on_demand("4.0000000000")),
            product("EUW1-Train:ml.c5.xlarge", on_demand("0.2040000000")),
        ]
    });
    (first, second)
}

/// The endpoint: answers GetProducts and records each request's body.
struct PriceList {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl PriceList {
    fn start() -> PriceList {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let url = listen(move |stream| serve(stream, &recorded));
        PriceList { url, requests }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, requests: &Mutex<Vec<Value>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let (first, second) = pages();
    while let Some(Request { target, body, .. }) = read_request(&mut reader) {
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        requests.lock().unwrap().push(request.clone());
        let (status, reply) = if target != "AWSPriceListService.GetProducts" {
            (
                "400 Bad Request",
                json!({"__type": "InvalidParameterException", "message": target}),
            )
        } else if request["NextToken"] == "page-2" {
            ("200 OK", second.clone())
        } else {
            ("200 OK", first.clone())
        };
        if write_reply(&mut writer, status, &reply).is_err() {
            return;
        }
    }
}

/// A one-group ml.g5.8xlarge job in eu-west-1.
const SPEC: &str = r#"version = 1
[job]
name = "g5-one-group"
[[instance_group]]
name = "dnn_group"
instance_type = "ml.g5.8xlarge"
role = "trainer"
[pipeline]
source = { format = "synthetic", shape = [224, 224, 3], encoding = "jpeg" }
batch_size = 256
stage = [{ op = "decode" }, { op = "random_resized_crop", size = [224, 224] }]
[trainer]
model = "resnet50"
steps = 100
[sagemaker]
region = "eu-west-1"
role_arn = "arn:aws:iam::123456789012:role/SageMakerRole"
image_uri = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/hetgen:latest"
output_path = "s3://bucket/output/"
"#;

/// The spec in a folder of its own, an empty cache folder and the endpoint: where `plan` runs.
struct Setup {
    endpoint: PriceList,
    dir: TempDir,
    cache: TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hetgen.toml"), SPEC).unwrap();
        Setup {
            endpoint: PriceList::start(),
            dir,
            cache: tempfile::tempdir().unwrap(),
        }
    }

    /// `hetgen plan --prices aws` against the endpoint, with or without credentials, as JSON
    /// or for people; it must succeed.
    #[track_caller]
    fn plan(&self, credentials: bool, json: bool) -> Output {
        let mut args = vec![
            "plan",
            "--cpu-per-gpu",
            "50",
            "--prices",
            "aws",
            "--endpoint-url",
            &self.endpoint.url,
        ];
        if json {
            args.extend(["--format", "json"]);
        }
        let out = aws_command(&args, self.dir.path(), credentials)
            .env("XDG_CACHE_HOME", self.cache.path())
            .env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        out
    }
}

#[test]
fn plan_prices_the_decision_from_the_price_list_every_page_and_caches_it() {
    let setup = Setup::new();
    let out = setup.plan(true, true);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Both pages were read, each asking for SageMaker in the spec's region.
    let requests = setup.endpoint.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for r in &requests {
        assert_eq!(r["ServiceCode"], "AmazonSageMaker");
        assert_eq!(
            r["Filters"],
            json!([{"Type": "TERM_MATCH", "Field": "regionCode", "Value": "eu-west-1"}])
        );
    }
    assert_eq!(requests[1]["NextToken"], "page-2");

    assert_eq!(plan["prices"]["kind"], "price_list");
    assert_eq!(plan["prices"]["region"], "eu-west-1");
    assert_eq!(plan["prices"]["cached"], false);
    let today = plan["prices"]["fetched"].as_str().unwrap().to_owned();
    assert_eq!(plan["price_per_hour"], 3.0);

    // The first page's g5.8xlarge and the second page's g5.16xlarge price the scale-up, which
    // ranks first: no data group, 100%, $4 per busy GPU-hour against $3 / 0.6 as written.
    let options = plan["demand"]["options"].as_array().unwrap();
    let first = &options[0];
    assert_eq!(first["change"]["trainer"]["to"], "ml.g5.16xlarge");
    assert_eq!(first["change"]["trainer"]["kind"], "scale_up");
    assert_eq!(first["needs_data_group"], false);
    assert_eq!(first["gpu_cap"], 1.0);
    assert_eq!(first["cost_per_busy_gpu_hour"], 4.0);
    assert_eq!(plan["demand"]["decision"]["cheapest"], 0);
    assert_eq!(plan["demand"]["decision"]["simplest"], 0);
    // The only CPU type priced is the second page's ml.c5.xlarge.
    let data: Vec<&Value> = options
        .iter()
        .filter_map(|o| o["change"]["data"].as_object().map(|d| &d["instance_type"]))
        .collect();
    assert!(
        !data.is_empty() && data.iter().all(|t| *t == "ml.c5.xlarge"),
        "{data:?}"
    );

    // The cache holds what was read, with its date; the product without an on-demand term
    // and the hosting price are not in it.
    let cached = setup
        .cache
        .path()
        .join("hetgen/prices/sagemaker-eu-west-1.json");
    let cached: Value = serde_json::from_str(&std::fs::read_to_string(cached).unwrap()).unwrap();
    assert_eq!(cached["fetched"], today.as_str());
    assert_eq!(
        cached["prices"],
        json!({"ml.c5.xlarge": 0.204, "ml.g5.16xlarge": 4.0, "ml.g5.8xlarge": 3.0})
    );

    // The same day, the cache answers without a call, and the output says so.
    let out = setup.plan(true, false);
    assert_eq!(setup.endpoint.requests().len(), 2);
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "prices: AWS Price List API (eu-west-1, on-demand, read {today}, cached)"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "cheapest per busy GPU-hour and simplest: #1 trainer on ml.g5.16xlarge (bigger g5) ($4.000 per busy GPU-hour) — it lifts the cap to 100% with no data group to run"
        ),
        "{text}"
    );
}

#[test]
fn without_credentials_plan_says_it_uses_the_catalog() {
    let setup = Setup::new();
    let out = setup.plan(false, false);
    assert!(setup.endpoint.requests().is_empty());
    assert_contains(
        &stderr(&out),
        "could not read current AWS prices (no AWS credentials found",
    );
    let text = stdout(&out);
    assert!(
        text.contains("prices: hetgen's catalog (us-east-1"),
        "{text}"
    );
    // The catalog's own price for the g5, not the Price List's $3, and no `?` for a guess.
    assert_contains(&text, "$3.060");
    assert!(!text.contains('?'), "{text}");
}
