//! An object checked against its CRD's structural schema, as the API server checks a create with
//! field validation `Strict` (`kubectl apply --validate=strict`): types, enums, patterns, bounds,
//! required fields, unknown fields, then the CEL rules of each node.
//!
//! Its parts, by kind of node: `values` (strings and numbers), `containers` (arrays and
//! objects, unknown fields among them), `rules` (`anyOf`/`allOf`/`oneOf`/`not`, and the CEL
//! rules); this module walks the tree and checks types and enums.
//!
//! Nulls are treated as absent: the API server prunes a null in a field that is not `nullable`
//! before validating. `default`s are not applied: a defaulted field is one the user may leave out,
//! which is all this check needs to know.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::Value;

use super::cel::{Outcome, Rule, Rules};
use super::crds::Kind;
use super::yaml::{child, item};
use super::{Finding, code, meta};

mod containers;
mod rules;
mod values;

/// Checks `value`, an object of `kind`, appending what is wrong to `out`.
pub(crate) fn check(kind: &Kind, value: &Value, rules: &Rules, out: &mut Vec<Finding>) {
    let mut walker = Walker { rules, out };
    walker.node(&kind.schema, value, "", Some(kind.namespaced));
}

struct Walker<'a> {
    rules: &'a Rules,
    out: &'a mut Vec<Finding>,
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// What a value is, in the schema's words, for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// `path` as messages name it: the root is "the object".
fn named(path: &str) -> String {
    if path.is_empty() {
        "the object".into()
    } else {
        format!("`{path}`")
    }
}

/// A short quotation of a value for messages.
fn quoted(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("`{}…`", &text[..cut]),
        None => format!("`{text}`"),
    }
}

/// The CRDs' patterns, compiled once each. Go's RE2 syntax, which the regex crate shares for
/// everything these schemas use; a pattern it cannot compile is reported, not skipped.
fn pattern(source: &str) -> Result<Regex, String> {
    static CACHE: LazyLock<Mutex<HashMap<String, Result<Regex, String>>>> =
        LazyLock::new(Default::default);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache
        .entry(source.to_string())
        .or_insert_with(|| Regex::new(source).map_err(|e| e.to_string()))
        .clone()
}

static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
        .expect("a valid regex")
});

impl Walker<'_> {
    /// Checks `value` at `path` against `schema`. `root` is the kind's scope at the top-level
    /// object, whose `metadata` the server checks itself, and `None` below it.
    fn node(&mut self, schema: &Value, value: &Value, path: &str, root: Option<bool>) {
        if value.is_null() {
            // Allowed where `nullable`, pruned by the server elsewhere; either way nothing to
            // check here, and a required field left null is reported by its parent.
            return;
        }
        if !self.type_matches(schema, value, path) {
            // Nothing below a value of the wrong type can be checked meaningfully.
            return;
        }
        self.enumeration(schema, value, path);
        match value {
            Value::String(s) => self.string(schema, s, path),
            Value::Number(_) => self.number(schema, value, path),
            Value::Array(items) => self.array(schema, items, path),
            Value::Object(_) => self.object(schema, value, path, root),
            _ => {}
        }
        self.alternatives(schema, value, path);
        self.cel(schema, value, path);
    }

    /// `type` and `x-kubernetes-int-or-string`; false (and reported) when the value has another
    /// type.
    fn type_matches(&mut self, schema: &Value, value: &Value, path: &str) -> bool {
        if flag(schema, "x-kubernetes-int-or-string") {
            if value.is_string() || value.as_i64().is_some() || value.as_u64().is_some() {
                return true;
            }
            self.out.push(
                Finding::value(
                    path,
                    code!("type"),
                    format!(
                        "{} must be an integer or a string, not {}",
                        named(path),
                        type_name(value)
                    ),
                )
                .hint("write it as `3` or `\"3\"`"),
            );
            return false;
        }
        let Some(expected) = schema.get("type").and_then(Value::as_str) else {
            return true;
        };
        let ok = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if ok {
            return true;
        }
        let wanted = match expected {
            "object" => "a mapping",
            "array" => "a list",
            "string" => "a string",
            "integer" => "an integer",
            "number" => "a number",
            _ => "a boolean",
        };
        let hint = match (expected, value) {
            ("integer" | "number", Value::String(s)) if s.trim().parse::<f64>().is_ok() => {
                Some("remove the quotes".to_string())
            }
            ("integer", Value::String(_)) => Some("write a whole number, e.g. `2`".into()),
            ("integer", Value::Number(_)) => {
                Some("write a whole number, without a fraction".into())
            }
            ("string", Value::Number(_)) => Some(format!("quote it: `\"{value}\"`")),
            // go-yaml, as kubectl uses it, reads YAML 1.1: plain `yes`, `on`, `y` are booleans.
            ("string", Value::Bool(_)) => Some(
                "quote it: unquoted `true`, `false`, `yes`, `no`, `on`, `off`, `y` and `n` are booleans in YAML"
                    .into(),
            ),
            ("array", Value::String(_) | Value::Object(_)) => {
                Some("write a list, one `- ` item a line".into())
            }
            _ => None,
        };
        let mut f = Finding::value(
            path,
            code!("type"),
            format!(
                "{} must be {wanted}, not {} {}",
                named(path),
                type_name(value),
                quoted(value)
            ),
        );
        if let Some(h) = hint {
            f = f.hint(&h);
        }
        self.out.push(f);
        false
    }

    fn enumeration(&mut self, schema: &Value, value: &Value, path: &str) {
        let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
            return;
        };
        if allowed.contains(value) {
            return;
        }
        let names: Vec<String> = allowed.iter().map(quoted).collect();
        let mut f = Finding::value(
            path,
            code!("enum"),
            format!(
                "{} is {}, not one of {}",
                named(path),
                quoted(value),
                names.join(", ")
            ),
        );
        if let Some(given) = value.as_str()
            && let Some(s) =
                hetgen_spec::did_you_mean(given, allowed.iter().filter_map(Value::as_str))
        {
            f = f.hint(&format!("did you mean `{s}`?"));
        }
        self.out.push(f);
    }
}
