//! Strings and numbers: formats, patterns, lengths and bounds.

use serde_json::Value;

use super::*;

impl Walker<'_> {
    pub(super) fn string(&mut self, schema: &Value, s: &str, path: &str) {
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

    pub(super) fn number(&mut self, schema: &Value, value: &Value, path: &str) {
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
}
