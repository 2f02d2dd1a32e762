//! The top-level `metadata` of an object, checked as the API server's `ValidateObjectMeta` does:
//! the CRD schemas say only `type: object` there, and leave the rest to the server.

use hetgen_spec::kube_names::{dns1123_label, dns1123_subdomain, label_value, qualified_name};
use serde_json::{Map, Value};

use super::yaml::child;
use super::{Finding, code};

/// ObjectMeta's fields (`k8s.io/apimachinery/pkg/apis/meta/v1`), for the unknown-field check.
const FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The most bytes all annotations of one object may take, keys and values together.
const MAX_ANNOTATIONS: usize = 256 * 1024;

/// Checks the `metadata` of an object of a kind that is `namespaced` or not.
pub(crate) fn check(meta: Option<&Value>, namespaced: bool, out: &mut Vec<Finding>) {
    let path = "metadata";
    let Some(meta) = meta else {
        out.push(
            Finding::value(path, code!("missing-field"), "missing `metadata`".into())
                .hint("add `metadata:` with a `name`"),
        );
        return;
    };
    let Some(fields) = meta.as_object() else {
        out.push(Finding::value(
            path,
            code!("type"),
            "`metadata` must be a mapping".into(),
        ));
        return;
    };
    for key in fields.keys() {
        if !FIELDS.contains(&key.as_str()) {
            let mut f = Finding::key(
                &child(path, key),
                "unknown-field",
                format!("unknown field `{key}` in `metadata`"),
            );
            if let Some(s) = hetgen_spec::did_you_mean(key, FIELDS) {
                f = f.hint(&format!("did you mean `{s}`?"));
            }
            out.push(f);
        }
    }
    check_name(fields, out);
    check_namespace(fields, namespaced, out);
    check_map(fields.get("labels"), "labels", true, out);
    check_map(fields.get("annotations"), "annotations", false, out);
}

/// `metadata.<field>` as a string, when set; a value of another type is reported.
fn string_field(
    fields: &Map<String, Value>,
    field: &str,
    out: &mut Vec<Finding>,
) -> Option<String> {
    match fields.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            out.push(Finding::value(
                &child("metadata", field),
                "type",
                format!("`metadata.{field}` must be a string"),
            ));
            None
        }
    }
}

/// `name`, else `generateName` (whose names the server makes with 5 random characters).
fn check_name(fields: &Map<String, Value>, out: &mut Vec<Finding>) {
    let name = string_field(fields, "name", out);
    let prefix = string_field(fields, "generateName", out);
    match (name, prefix) {
        (Some(name), _) => {
            if let Some(why) = dns1123_subdomain(&name) {
                out.push(
                    Finding::value(
                        "metadata.name",
                        code!("name"),
                        format!("`metadata.name` `{name}` {why}"),
                    )
                    .hint("use a DNS-1123 subdomain, e.g. `my-job`"),
                );
            }
        }
        (None, Some(prefix)) => {
            // The server appends 5 random characters; the prefix must leave a valid name.
            let probe = format!("{prefix}abcde");
            if let Some(why) = dns1123_subdomain(&probe) {
                out.push(Finding::value(
                    "metadata.generateName",
                    code!("name"),
                    format!("`metadata.generateName` `{prefix}` makes names that {why}"),
                ));
            }
        }
        (None, None) => out.push(
            Finding::key(
                "metadata",
                code!("missing-field"),
                "missing `metadata.name`".into(),
            )
            .hint("add `name:` under `metadata`"),
        ),
    }
}

/// `namespace`: a DNS-1123 label on a namespaced kind, absent on a cluster-scoped one.
fn check_namespace(fields: &Map<String, Value>, namespaced: bool, out: &mut Vec<Finding>) {
    match (string_field(fields, "namespace", out), namespaced) {
        (Some(ns), true) => {
            if let Some(why) = dns1123_label(&ns) {
                out.push(Finding::value(
                    "metadata.namespace",
                    code!("name"),
                    format!("`metadata.namespace` `{ns}` {why}"),
                ));
            }
        }
        (Some(ns), false) if !ns.is_empty() => out.push(
            Finding::key(
                "metadata.namespace",
                code!("namespace"),
                "this kind is cluster-scoped: it has no namespace".into(),
            )
            .hint("remove `namespace`"),
        ),
        _ => {}
    }
}

/// Checks `labels` or `annotations` under the metadata at `path`: a map of qualified-name keys
/// to strings (label values with the label value syntax).
fn check_map(map: Option<&Value>, field: &str, labels: bool, out: &mut Vec<Finding>) {
    let path = child("metadata", field);
    let Some(map) = map else { return };
    let Some(map) = map.as_object() else {
        if !map.is_null() {
            out.push(Finding::value(
                &path,
                code!("type"),
                format!("`{path}` must be a mapping of strings"),
            ));
        }
        return;
    };
    let mut size = 0;
    for (key, value) in map {
        let at = child(&path, key);
        if let Some(why) = qualified_name(key) {
            out.push(
                Finding::key(&at, code!("label"), format!("{field} key `{key}` {why}"))
                    .hint("keys are `name` or `prefix/name`, e.g. `app.kubernetes.io/name`"),
            );
        }
        let Some(value) = value.as_str() else {
            out.push(
                Finding::value(
                    &at,
                    code!("type"),
                    format!("the value of {field} key `{key}` must be a string"),
                )
                .hint("quote it: numbers and booleans are not strings in YAML"),
            );
            continue;
        };
        size += key.len() + value.len();
        if labels && let Some(why) = label_value(value) {
            out.push(Finding::value(
                &at,
                code!("label"),
                format!("label value `{value}` {why}"),
            ));
        }
    }
    if !labels && size > MAX_ANNOTATIONS {
        out.push(Finding::key(
            &path,
            code!("annotations-too-large"),
            format!("annotations take {size} bytes, more than {MAX_ANNOTATIONS}"),
        ));
    }
}
