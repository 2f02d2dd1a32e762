//! The CRDs' transition rules (`x-kubernetes-validations` that read `oldSelf`), evaluated as
//! the API server evaluates them when an object is updated: on each node of the new object
//! that has a counterpart in the live one, with `self` the new node and `oldSelf` the old.
//!
//! Counterparts are found as the API server correlates them
//! (`k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`): an object's field
//! by its name, a map's value by its key, a list's item only in a list of `x-kubernetes-list-type:
//! map`, by its `x-kubernetes-list-map-keys`. Items of other lists, and nodes new in this
//! update, have none, and their transition rules do not run.
//!
//! A create never runs these (the offline [`check`](super::check) skips them); an update of a
//! TrainingRuntime does, and Trainer's make most of its JobSet template immutable
//! (`dependsOn`, `network`, the success, failure and startup policies): a deploy asks this
//! before applying over a live runtime.

use serde_json::Value;

use super::cel::{Outcome, Rule, Rules};
use super::crds::crds;
use super::yaml::{child, item};

/// A change the API server would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The field path, e.g. `spec.template.spec.replicatedJobs[1].dependsOn`.
    pub path: String,
    /// The rule's message (`Value is immutable`), or why it could not be evaluated.
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What the API server's transition rules refuse in updating `old` (the live object) to `new`
/// (both of `new`'s `apiVersion` and `kind`); none for a kind no vendored CRD defines.
pub fn refused_update(new: &Value, old: &Value) -> Vec<Refused> {
    let crds = crds();
    let (Some(api_version), Some(kind)) = (
        new.get("apiVersion").and_then(Value::as_str),
        new.get("kind").and_then(Value::as_str),
    ) else {
        return Vec::new();
    };
    let Some(kind) = crds.get(api_version, kind) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk(&crds.rules, &kind.schema, new, old, "", &mut out);
    out
}

/// Evaluates the transition rules of `schema` on `new` against `old`, then goes down into
/// every part of `new` that has a counterpart in `old`.
fn walk(
    rules: &Rules,
    schema: &Value,
    new: &Value,
    old: &Value,
    path: &str,
    out: &mut Vec<Refused>,
) {
    for rule in Rule::of(schema).into_iter().filter(Rule::is_transition) {
        let message = match rules.eval_update(&rule, new, old) {
            Outcome::Pass => continue,
            Outcome::Fail(message) => message,
            Outcome::Error(e) => e,
        };
        out.push(Refused {
            path: path.to_owned(),
            message,
        });
    }
    match (new, old) {
        (Value::Object(members), Value::Object(old_members)) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|s| s.is_object());
            for (key, value) in members {
                let sub = properties.and_then(|p| p.get(key)).or(additional);
                if let (Some(sub), Some(was)) = (sub, old_members.get(key)) {
                    walk(rules, sub, value, was, &child(path, key), out);
                }
            }
        }
        (Value::Array(items), Value::Array(old_items)) => {
            let Some(sub) = schema.get("items") else {
                return;
            };
            if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
                return;
            }
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let key_of = |v: &Value| keys.iter().map(|k| v.get(*k).cloned()).collect::<Vec<_>>();
            for (i, value) in items.iter().enumerate() {
                let key = key_of(value);
                if let Some(was) = old_items.iter().find(|o| key_of(o) == key) {
                    walk(rules, sub, value, was, &item(path, i), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A TrainingRuntime whose `node` job depends on `data`.
    fn runtime(depends_on: &[&str], parallelism: u32) -> Value {
        let depends: Vec<Value> = depends_on
            .iter()
            .map(|n| json!({"name": n, "status": "Ready"}))
            .collect();
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {"name": "digits", "namespace": "default"},
            "spec": {"template": {"spec": {"replicatedJobs": [
                {"name": "data", "replicas": 1, "template": {"spec": {"parallelism": parallelism}}},
                {"name": "node", "replicas": 1, "dependsOn": depends, "template": {"spec": {}}}
            ]}}}
        })
    }

    #[test]
    fn a_changed_depends_on_is_refused_at_its_path() {
        let refused = refused_update(&runtime(&["data", "more"], 1), &runtime(&["data"], 1));
        assert_eq!(
            refused,
            [Refused {
                path: "spec.template.spec.replicatedJobs[1].dependsOn".into(),
                message: "Value is immutable".into(),
            }]
        );
    }

    #[test]
    fn mutable_fields_and_new_items_change_freely() {
        assert_eq!(
            refused_update(&runtime(&["data"], 2), &runtime(&["data"], 1)),
            []
        );
        // A `node` job new in this update has no counterpart: its rules do not run.
        let mut old = runtime(&["data"], 1);
        old["spec"]["template"]["spec"]["replicatedJobs"][1]["name"] = json!("trainer");
        assert_eq!(refused_update(&runtime(&["data", "more"], 1), &old), []);
    }

    #[test]
    fn a_kind_without_a_vendored_crd_has_no_rules() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret"});
        assert_eq!(refused_update(&secret, &json!({})), []);
    }
}
