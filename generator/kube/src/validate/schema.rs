//! An object checked against its CRD's structural schema, as the API server checks a create with
//! field validation `Strict` (`kubectl apply --validate=strict`): types, enums, patterns, bounds,
//! required fields, unknown fields, then the CEL rules of each node.
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

    fn string(&mut self, schema: &Value, s: &str, path: &str) {
        // Lengths count characters, as Kubernetes' OpenAPI validation does.
        let len = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            self.out.push(Finding::value(
                path,
                code!("length"),
                format!("{} is {len} characters long, more than {max}", named(path)),
            ));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            self.out.push(Finding::value(
                path,
                code!("length"),
                format!("{} is {len} characters long, fewer than {min}", named(path)),
            ));
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
            match pattern(p) {
                Ok(re) if re.is_match(s) => {}
                Ok(_) => {
                    let hint = if p.contains("[KMGTPE]i") {
                        "a quantity is a number with an optional suffix, e.g. `3`, `500m`, `4Gi`"
                            .to_string()
                    } else {
                        format!("it must match `{p}`")
                    };
                    self.out.push(
                        Finding::value(
                            path,
                            code!("pattern"),
                            format!(
                                "{} {} does not match the pattern the schema requires",
                                named(path),
                                quoted(&Value::String(s.into()))
                            ),
                        )
                        .hint(&hint),
                    );
                }
                Err(e) => self.out.push(
                    Finding::value(
                        path,
                        code!("schema"),
                        format!(
                            "the schema's pattern for {} cannot be compiled: {e}",
                            named(path)
                        ),
                    )
                    .hint("this is hetgen's bug: please report it"),
                ),
            }
        }
        if schema.get("format").and_then(Value::as_str) == Some("date-time")
            && !DATE_TIME.is_match(s)
        {
            self.out.push(
                Finding::value(
                    path,
                    code!("format"),
                    format!("{} is not an RFC 3339 date-time", named(path)),
                )
                .hint("write e.g. `2025-01-31T12:00:00Z`"),
            );
        }
    }

    fn number(&mut self, schema: &Value, value: &Value, path: &str) {
        let Some(n) = value.as_f64() else { return };
        let range = match schema.get("format").and_then(Value::as_str) {
            Some("int32") => Some((i32::MIN as f64, i32::MAX as f64)),
            Some("int64") => Some((i64::MIN as f64, i64::MAX as f64)),
            _ => None,
        };
        if let Some((lo, hi)) = range
            && (n < lo || n > hi || value.as_i64().is_none())
        {
            self.out.push(Finding::value(
                path,
                code!("range"),
                format!(
                    "{} is {value}, out of the range of a {}",
                    named(path),
                    schema["format"].as_str().unwrap_or("")
                ),
            ));
        }
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let exclusive = flag(schema, "exclusiveMinimum");
            if n < min || (exclusive && n == min) {
                let bound = if exclusive { "more than" } else { "at least" };
                self.out.push(Finding::value(
                    path,
                    code!("range"),
                    format!("{} is {value}; it must be {bound} {min}", named(path)),
                ));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let exclusive = flag(schema, "exclusiveMaximum");
            if n > max || (exclusive && n == max) {
                let bound = if exclusive { "less than" } else { "at most" };
                self.out.push(Finding::value(
                    path,
                    code!("range"),
                    format!("{} is {value}; it must be {bound} {max}", named(path)),
                ));
            }
        }
    }

    fn array(&mut self, schema: &Value, items: &[Value], path: &str) {
        let n = items.len() as u64;
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && n > max
        {
            self.out.push(Finding::value(
                path,
                code!("items"),
                format!("{} has {n} items, more than {max}", named(path)),
            ));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && n < min
        {
            self.out.push(Finding::value(
                path,
                code!("items"),
                format!("{} has {n} items, fewer than {min}", named(path)),
            ));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, it) in items.iter().enumerate() {
                self.node(item_schema, it, &item(path, i), None);
            }
        }
        // `x-kubernetes-list-type`: a `set` holds each value once, a `map` each key once.
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                let mut seen = HashSet::new();
                for (i, it) in items.iter().enumerate() {
                    if !seen.insert(it.to_string()) {
                        self.out.push(Finding::value(
                            &item(path, i),
                            code!("duplicate"),
                            format!("{} repeats {}", named(path), quoted(it)),
                        ));
                    }
                }
            }
            Some("map") => {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut seen = HashSet::new();
                for (i, it) in items.iter().enumerate() {
                    let key: Vec<String> = keys.iter().map(|k| it[*k].to_string()).collect();
                    if !seen.insert(key.clone()) {
                        self.out.push(
                            Finding::value(
                                &item(path, i),
                                code!("duplicate"),
                                format!(
                                    "{} has two items with {} {}",
                                    named(path),
                                    keys.join(", "),
                                    key.join(", ")
                                ),
                            )
                            .hint("each item's key must be unique"),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn object(&mut self, schema: &Value, value: &Value, path: &str, root: Option<bool>) {
        let Some(members) = value.as_object() else {
            return;
        };
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
        let embedded = flag(schema, "x-kubernetes-embedded-resource");
        for (key, v) in members {
            let at = child(path, key);
            if let Some(namespaced) = root
                && key == "metadata"
            {
                meta::check(Some(v), namespaced, self.out);
                continue;
            }
            if let Some(s) = properties.and_then(|p| p.get(key)) {
                self.node(s, v, &at, None);
                continue;
            }
            match additional {
                Some(Value::Object(_)) => {
                    self.node(additional.unwrap_or(&Value::Null), v, &at, None);
                    continue;
                }
                Some(Value::Bool(true)) => continue,
                _ => {}
            }
            // An embedded resource may carry its own type and metadata.
            if preserve || (embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
            {
                continue;
            }
            self.unknown(key, &at, path, properties);
        }
        if root.is_some() && !members.contains_key("metadata") {
            meta::check(None, root.unwrap_or(true), self.out);
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if members.get(required).is_none_or(Value::is_null) {
                self.out.push(
                    Finding::key(
                        path,
                        code!("missing-field"),
                        format!("{} is missing the required field `{required}`", named(path)),
                    )
                    .hint(&format!("add `{required}:`")),
                );
            }
        }
        let n = members.len() as u64;
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
            && n > max
        {
            self.out.push(Finding::key(
                path,
                code!("items"),
                format!("{} has {n} fields, more than {max}", named(path)),
            ));
        }
        if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
            && n < min
        {
            self.out.push(Finding::key(
                path,
                code!("items"),
                format!("{} has {n} fields, fewer than {min}", named(path)),
            ));
        }
    }

    fn unknown(
        &mut self,
        key: &str,
        at: &str,
        path: &str,
        properties: Option<&serde_json::Map<String, Value>>,
    ) {
        let names: Vec<&str> = properties
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let hint = match hetgen_spec::did_you_mean(key, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None if names.is_empty() => format!("{} takes no fields", named(path)),
            None if names.len() <= 12 => format!(
                "{} takes {}",
                named(path),
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "remove it, or check the spelling against the CRD".into(),
        };
        self.out.push(
            Finding::key(
                at,
                code!("unknown-field"),
                format!("unknown field `{key}` in {}", named(path)),
            )
            .hint(&hint),
        );
    }

    /// `anyOf`, `allOf`, `oneOf` and `not`, which structural schemas may use only to add value
    /// checks (quantities are `anyOf` integer or string).
    fn alternatives(&mut self, schema: &Value, value: &Value, path: &str) {
        let passes = |walker: &Walker, s: &Value| {
            let mut found = Vec::new();
            Walker {
                rules: walker.rules,
                out: &mut found,
            }
            .node(s, value, path, None);
            found.is_empty()
        };
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
            && !any.iter().any(|s| passes(self, s))
        {
            self.out.push(Finding::value(
                path,
                code!("type"),
                format!(
                    "{} is {}, which none of the schema's allowed forms accepts",
                    named(path),
                    quoted(value)
                ),
            ));
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array)
            && one.iter().filter(|s| passes(self, s)).count() != 1
        {
            self.out.push(Finding::value(
                path,
                code!("type"),
                format!(
                    "{} must match exactly one of the schema's forms",
                    named(path)
                ),
            ));
        }
        for s in schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.node(s, value, path, None);
        }
        if let Some(not) = schema.get("not")
            && passes(self, not)
        {
            self.out.push(Finding::value(
                path,
                code!("type"),
                format!("{} has a form the schema forbids", named(path)),
            ));
        }
    }

    /// The node's `x-kubernetes-validations`, with `self` bound to its value.
    fn cel(&mut self, schema: &Value, value: &Value, path: &str) {
        let rules = Rule::of(schema);
        if rules.is_empty() {
            return;
        }
        let generated;
        let value = match generated_name(value, path) {
            Some(v) => {
                generated = v;
                &generated
            }
            None => value,
        };
        for rule in rules {
            if rule.is_transition() {
                continue;
            }
            let at = pointed(&rule.rule, value)
                .map(|sub| sub.iter().fold(path.to_string(), |p, k| child(&p, k)))
                .unwrap_or_else(|| path.to_string());
            match self.rules.eval(&rule, value) {
                Outcome::Pass => {}
                Outcome::Fail(message) => self.out.push(
                    Finding::value(&at, code!("rule"), format!("{}: {message}", named(path)))
                        .hint(&format!("the CRD's rule is `{}`", rule.rule)),
                ),
                Outcome::Error(e) => self.out.push(
                    Finding::value(&at, code!("rule-error"), format!("{}: {e}", named(path)))
                        .hint("the API server would refuse the object too; this is hetgen's bug if the rule is valid CEL"),
                ),
            }
        }
    }
}

/// The root object as the server validates it when it has a `generateName` and no `name`: by
/// then the server has made the name, the prefix and 5 random characters, and rules read it.
fn generated_name(value: &Value, path: &str) -> Option<Value> {
    let meta = value.get("metadata")?;
    if !path.is_empty() || meta.get("name").is_some() {
        return None;
    }
    let prefix = meta.get("generateName")?.as_str()?;
    let mut value = value.clone();
    value["metadata"]["name"] = Value::String(format!("{prefix}x7k2q"));
    Some(value)
}

/// The field a failed rule is most likely about: of the `self.a.b` chains the rule reads, the
/// longest the object has (`self.metadata.name.matches(…)` is about `metadata.name`). `None`
/// when the rule reads only `self`, or nothing it reads is there.
fn pointed(rule: &str, value: &Value) -> Option<Vec<String>> {
    static CHAIN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\bself((?:\.[A-Za-z_][A-Za-z0-9_]*)+)(\s*\()?").expect("a valid regex")
    });
    let mut best: Option<Vec<String>> = None;
    for caps in CHAIN.captures_iter(rule) {
        let mut segments: Vec<String> = caps[1].split('.').skip(1).map(str::to_string).collect();
        // `self.name.matches(` calls a method: the last segment is not a field.
        if caps.get(2).is_some() {
            segments.pop();
        }
        // Keep the longest prefix the object actually has.
        let mut node = value;
        let mut present = Vec::new();
        for s in segments {
            match node.get(&s) {
                Some(next) => {
                    node = next;
                    present.push(s);
                }
                None => break,
            }
        }
        if !present.is_empty() && best.as_ref().is_none_or(|b| present.len() > b.len()) {
            best = Some(present);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rule_points_at_the_field_it_reads() {
        let v = json!({"metadata": {"name": "X"}, "startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": []});
        assert_eq!(
            pointed("self.metadata.name.matches('^a$')", &v),
            Some(vec!["metadata".into(), "name".into()])
        );
        assert_eq!(
            pointed(
                "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))",
                &v
            ),
            Some(vec!["startupPolicy".into(), "startupPolicyOrder".into()])
        );
        assert_eq!(pointed("self >= 1", &json!(0)), None);
        assert_eq!(pointed("size(self.nothing) > 0", &v), None);
    }
}
