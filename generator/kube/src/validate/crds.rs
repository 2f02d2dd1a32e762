//! The CustomResourceDefinitions objects are checked against, vendored at pinned releases in
//! `crds/` (see its README), read once per process.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use serde_json::Value;

use super::cel::Rules;
use super::yaml;

/// The vendored CRDs, by file name: Kubeflow Trainer's three and the JobSet one they embed.
pub(crate) const FILES: [(&str, &str); 4] = [
    (
        "trainer.kubeflow.org_trainjobs.yaml",
        include_str!("../../crds/trainer.kubeflow.org_trainjobs.yaml"),
    ),
    (
        "trainer.kubeflow.org_trainingruntimes.yaml",
        include_str!("../../crds/trainer.kubeflow.org_trainingruntimes.yaml"),
    ),
    (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        include_str!("../../crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"),
    ),
    (
        "jobset.x-k8s.io_jobsets.yaml",
        include_str!("../../crds/jobset.x-k8s.io_jobsets.yaml"),
    ),
];

/// One served version of one kind.
#[derive(Debug)]
pub(crate) struct Kind {
    /// The version's `openAPIV3Schema`.
    pub schema: Value,
    /// Whether objects of the kind live in a namespace.
    pub namespaced: bool,
}

/// Every kind the vendored CRDs define, and their CEL rules compiled.
pub(crate) struct Crds {
    /// By (`apiVersion`, `kind`), e.g. (`trainer.kubeflow.org/v1alpha1`, `TrainJob`).
    kinds: HashMap<(String, String), Kind>,
    pub rules: Rules,
}

impl Crds {
    pub fn get(&self, api_version: &str, kind: &str) -> Option<&Kind> {
        self.kinds.get(&(api_version.to_string(), kind.to_string()))
    }

    /// Every `apiVersion` `kind` pair known, for hints.
    pub fn known(&self) -> BTreeSet<(&str, &str)> {
        self.kinds
            .keys()
            .map(|(a, k)| (a.as_str(), k.as_str()))
            .collect()
    }
}

/// The vendored CRDs, parsed on first use.
pub(crate) fn crds() -> &'static Crds {
    static CRDS: OnceLock<Crds> = OnceLock::new();
    CRDS.get_or_init(load)
}

fn load() -> Crds {
    let mut kinds = HashMap::new();
    for (name, text) in FILES {
        // The files are fixed at build time and a test parses them, so a failure here is a
        // broken vendoring, not a user's problem.
        let docs = yaml::parse(text, false)
            .unwrap_or_else(|e| panic!("vendored CRD {name} does not parse: {e:?}"));
        for doc in docs {
            let spec = &doc.value["spec"];
            let (Some(group), Some(kind)) =
                (spec["group"].as_str(), spec["names"]["kind"].as_str())
            else {
                panic!("vendored CRD {name} has no spec.group or spec.names.kind");
            };
            let namespaced = spec["scope"].as_str() != Some("Cluster");
            for version in spec["versions"].as_array().into_iter().flatten() {
                // A version that is not served is refused by the API server, so it is left out
                // and reported as an unknown apiVersion.
                if version["served"] != Value::Bool(true) {
                    continue;
                }
                let Some(v) = version["name"].as_str() else {
                    continue;
                };
                kinds.insert(
                    (format!("{group}/{v}"), kind.to_string()),
                    Kind {
                        schema: version["schema"]["openAPIV3Schema"].clone(),
                        namespaced,
                    },
                );
            }
        }
    }
    let rules = Rules::compile(kinds.values().map(|k| &k.schema));
    Crds { kinds, rules }
}

#[cfg(test)]
mod tests {
    use super::super::cel::{Outcome, Rule};
    use super::*;
    use serde_json::{Map, json};

    /// A value of `schema`'s shape with every property filled in, `depth` levels down: what a
    /// rule attached there may read.
    fn example(schema: &Value, depth: usize) -> Value {
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return json!(1);
        }
        if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
            return first.clone();
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("object") if depth > 0 => {
                let mut m = Map::new();
                for (k, s) in schema["properties"].as_object().into_iter().flatten() {
                    m.insert(k.clone(), example(s, depth - 1));
                }
                if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                    m.insert("key".into(), example(extra, depth - 1));
                }
                // The root's metadata is `type: object` alone; the server fills in its name.
                if m.contains_key("apiVersion") && m.contains_key("metadata") {
                    m.insert("metadata".into(), json!({"name": "a"}));
                }
                Value::Object(m)
            }
            Some("object") => json!({}),
            Some("array") if depth > 0 => json!([example(&schema["items"], depth - 1)]),
            Some("array") => json!([]),
            Some("string") => json!("a"),
            Some("integer") => json!(1),
            Some("number") => json!(1.5),
            Some("boolean") => json!(false),
            _ => json!({}),
        }
    }

    /// Every rule of every vendored CRD compiles, and evaluates to true or false (never to an
    /// error, which a function missing from the environment would give) on a value of its
    /// node's shape.
    #[test]
    fn every_vendored_rule_compiles_and_evaluates() {
        let c = crds();
        let broken: Vec<_> = c.rules.all().filter(|(_, r)| r.is_err()).collect();
        assert!(broken.is_empty(), "rules that do not compile: {broken:#?}");
        let mut evaluated = 0;
        let mut stack: Vec<&Value> = c.kinds.values().map(|k| &k.schema).collect();
        while let Some(node) = stack.pop() {
            match node {
                Value::Object(m) => {
                    for rule in Rule::of(node).iter().filter(|r| !r.is_transition()) {
                        let value = example(node, 8);
                        let out = c.rules.eval(rule, &value);
                        assert!(!matches!(out, Outcome::Error(_)), "{out:?} on {value}");
                        evaluated += 1;
                    }
                    stack.extend(m.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        // 4 kinds, each with rules that are not transition rules: a count far below this
        // means the walk missed them.
        assert!(evaluated >= 15, "only {evaluated} rules evaluated");
    }

    #[test]
    fn the_vendored_crds_define_the_four_kinds() {
        let known = crds().known();
        for kind in ["TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"] {
            assert!(
                known.contains(&("trainer.kubeflow.org/v1alpha1", kind)),
                "{known:?}"
            );
        }
        assert!(
            known.contains(&("jobset.x-k8s.io/v1alpha2", "JobSet")),
            "{known:?}"
        );
        let c = crds();
        assert!(
            c.get("trainer.kubeflow.org/v1alpha1", "TrainJob")
                .unwrap()
                .namespaced
        );
        assert!(
            !c.get("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
                .unwrap()
                .namespaced
        );
    }
}
