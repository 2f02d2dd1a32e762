//! Arrays and objects: items, list types, properties, required and unknown fields.

use serde_json::Value;

use super::*;

impl Walker<'_> {
    pub(super) fn array(&mut self, schema: &Value, items: &[Value], path: &str) {
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

    pub(super) fn object(&mut self, schema: &Value, value: &Value, path: &str, root: Option<bool>) {
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
}
