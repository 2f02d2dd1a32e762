//! What a node's schema says beyond its shape: `anyOf`, `allOf`, `oneOf` and `not`, and the
//! CEL rules (`x-kubernetes-validations`) with `self` bound to the node.

use serde_json::Value;

use super::*;

impl Walker<'_> {
    /// `anyOf`, `allOf`, `oneOf` and `not`, which structural schemas may use only to add value
    /// checks (quantities are `anyOf` integer or string).
    pub(super) fn alternatives(&mut self, schema: &Value, value: &Value, path: &str) {
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
    pub(super) fn cel(&mut self, schema: &Value, value: &Value, path: &str) {
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
