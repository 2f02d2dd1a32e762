//! The top-level `metadata` of an object, checked as the API server's `ValidateObjectMeta` does:
//! the CRD schemas say only `type: object` there, and leave the rest to the server.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

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

const DNS1123_LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

static LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{DNS1123_LABEL}$")).expect("a valid regex"));
static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"^{DNS1123_LABEL}(\.{DNS1123_LABEL})*$")).expect("a valid regex")
});
static QUALIFIED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new("^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("a valid regex")
});

/// Why `s` is not a DNS-1123 label (at most 63 characters, lowercase alphanumerics and `-`,
/// starting and ending alphanumeric), or `None` if it is one.
pub(crate) fn dns1123_label(s: &str) -> Option<String> {
    if s.len() > 63 {
        Some(format!("is {} characters long, more than 63", s.len()))
    } else if !LABEL.is_match(s) {
        Some("must consist of lowercase letters, digits and `-`, and start and end with a letter or digit".into())
    } else {
        None
    }
}

/// Why `s` is not a DNS-1123 subdomain (at most 253 characters, dot-separated labels).
pub(crate) fn dns1123_subdomain(s: &str) -> Option<String> {
    if s.len() > 253 {
        Some(format!("is {} characters long, more than 253", s.len()))
    } else if !SUBDOMAIN.is_match(s) {
        Some("must consist of lowercase letters, digits, `-` and `.`, and start and end with a letter or digit".into())
    } else {
        None
    }
}

/// Why `key` is not a qualified name (`[prefix/]name`, the syntax of label and annotation keys).
fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("has an empty prefix before `/`".into());
        }
        if let Some(why) = dns1123_subdomain(p) {
            return Some(format!("has a prefix `{p}` that {why}"));
        }
    }
    if name.is_empty() {
        Some("has an empty name".into())
    } else if name.len() > 63 {
        Some(format!(
            "has a name part {} characters long, more than 63",
            name.len()
        ))
    } else if !QUALIFIED.is_match(name) {
        Some("must have a name part of letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit".into())
    } else {
        None
    }
}

/// Why `value` is not a label value (empty, or up to 63 characters like a qualified name).
fn label_value(value: &str) -> Option<String> {
    if value.len() > 63 {
        Some(format!("is {} characters long, more than 63", value.len()))
    } else if !value.is_empty() && !QUALIFIED.is_match(value) {
        Some("must be empty or letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit".into())
    } else {
        None
    }
}

/// Checks the `metadata` of an object of a kind that is `namespaced` or not.
#[allow(
    clippy::too_many_lines,
    reason = "one check per metadata field, in the API server's order; to be split by kind of field with the schema check"
)]
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

    let string = |field: &str, out: &mut Vec<Finding>| -> Option<String> {
        match fields.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                out.push(Finding::value(
                    &child(path, field),
                    "type",
                    format!("`metadata.{field}` must be a string"),
                ));
                None
            }
        }
    };
    match (string("name", out), string("generateName", out)) {
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
                path,
                code!("missing-field"),
                "missing `metadata.name`".into(),
            )
            .hint("add `name:` under `metadata`"),
        ),
    }
    match (string("namespace", out), namespaced) {
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
    check_map(fields.get("labels"), "labels", true, out);
    check_map(fields.get("annotations"), "annotations", false, out);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_dns_rules() {
        assert_eq!(dns1123_label("pytorch-digits"), None);
        assert!(dns1123_label("Pytorch").is_some());
        assert!(dns1123_label(&"a".repeat(64)).is_some());
        assert_eq!(dns1123_subdomain("a.b-c.d"), None);
        assert!(dns1123_subdomain("a..b").is_some());
        assert!(dns1123_subdomain("-a").is_some());
    }

    #[test]
    fn label_keys_and_values() {
        assert_eq!(
            qualified_name("trainer.kubeflow.org/trainjob-ancestor-step"),
            None
        );
        assert_eq!(qualified_name("app"), None);
        assert!(qualified_name("Bad_Prefix/x").is_some());
        assert!(qualified_name("a/b/c").is_some());
        assert!(qualified_name("x/").is_some());
        assert_eq!(label_value(""), None);
        assert_eq!(label_value("data_group"), None);
        assert!(label_value("two words").is_some());
    }
}
