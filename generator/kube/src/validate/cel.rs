//! The CEL rules of the CRDs (`x-kubernetes-validations`), compiled once and evaluated as the
//! API server evaluates them: `self` is the node the rule is attached to.
//!
//! The environment is the `cel` crate's standard library plus the extensions Kubernetes also
//! enables (cel-go's strings, lists and math), and the Kubernetes regex library's `find` and
//! `findAll`, which the crate lacks. A rule this environment cannot compile is kept as an error,
//! never dropped: [`Rules::eval`] reports it, and a test compiles every vendored rule.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Env, ExecutionError, Program};
use serde_json::Value;

/// One rule as a CRD writes it.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
}

impl Rule {
    /// The rules attached to a schema node.
    pub fn of(schema: &Value) -> Vec<Rule> {
        let Some(list) = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|r| {
                Some(Rule {
                    rule: r.get("rule")?.as_str()?.to_string(),
                    message: r.get("message").and_then(Value::as_str).map(str::to_string),
                    message_expression: r
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                })
            })
            .collect()
    }

    /// Whether the rule compares with the object's previous state (`oldSelf`). Such transition
    /// rules are only evaluated by the API server on update; an offline check sees a create, so
    /// it skips them as the API server does.
    pub fn is_transition(&self) -> bool {
        mentions_old_self(&self.rule)
    }
}

/// Whether `expr` names the identifier `oldSelf` (not as part of a longer name).
fn mentions_old_self(expr: &str) -> bool {
    expr.match_indices("oldSelf").any(|(i, _)| {
        let before = expr[..i].chars().next_back();
        let after = expr[i + "oldSelf".len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// What evaluating a rule gave.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    Pass,
    /// The rule is false; the message to show (the rule's `message`, its `messageExpression`'s
    /// value, or the rule text).
    Fail(String),
    /// The rule could not be compiled or evaluated: an error, never a pass.
    Error(String),
}

/// Every rule of a set of schemas, compiled.
pub(crate) struct Rules {
    env: Arc<Env>,
    programs: HashMap<String, Result<Program, String>>,
}

impl Rules {
    /// Compiles the rules and message expressions found anywhere in `schemas`.
    pub fn compile<'a>(schemas: impl IntoIterator<Item = &'a Value>) -> Rules {
        let env = Arc::new(environment());
        let mut programs = HashMap::new();
        let mut stack: Vec<&Value> = schemas.into_iter().collect();
        while let Some(node) = stack.pop() {
            match node {
                Value::Object(map) => {
                    for rule in Rule::of(node) {
                        for text in std::iter::once(rule.rule).chain(rule.message_expression) {
                            programs
                                .entry(text)
                                .or_insert_with_key(|t| env.compile(t).map_err(|e| e.to_string()));
                        }
                    }
                    stack.extend(map.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        Rules { env, programs }
    }

    /// Every compiled rule text, with its compile error if any.
    #[cfg(test)]
    pub fn all(&self) -> impl Iterator<Item = (&str, Result<(), &str>)> {
        self.programs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_ref().map(|_| ()).map_err(String::as_str)))
    }

    /// Evaluates `rule` with `self` bound to `value`.
    pub fn eval(&self, rule: &Rule, value: &Value) -> Outcome {
        self.eval_with(rule, value, None)
    }

    /// Evaluates a transition rule with `self` bound to `value` and `oldSelf` to `old`.
    pub fn eval_update(&self, rule: &Rule, value: &Value, old: &Value) -> Outcome {
        self.eval_with(rule, value, Some(old))
    }

    fn eval_with(&self, rule: &Rule, value: &Value, old: Option<&Value>) -> Outcome {
        match self.run(&rule.rule, value, old) {
            Ok(cel::Value::Bool(true)) => Outcome::Pass,
            Ok(cel::Value::Bool(false)) => Outcome::Fail(self.message(rule, value)),
            Ok(other) => Outcome::Error(format!(
                "rule `{}` gave {other:?}, not a boolean",
                rule.rule
            )),
            Err(e) => Outcome::Error(format!("rule `{}` could not be evaluated: {e}", rule.rule)),
        }
    }

    /// The message of a failed rule, as the API server picks it: a `messageExpression` that
    /// evaluates to a non-empty string, else `message`, else the rule itself.
    fn message(&self, rule: &Rule, value: &Value) -> String {
        if let Some(expr) = &rule.message_expression
            && let Ok(cel::Value::String(s)) = self.run(expr, value, None)
            && !s.trim().is_empty()
        {
            return s.to_string();
        }
        match &rule.message {
            Some(m) => m.clone(),
            None => format!("failed rule: {}", rule.rule),
        }
    }

    fn run(&self, expr: &str, value: &Value, old: Option<&Value>) -> Result<cel::Value, String> {
        let program = match self.programs.get(expr) {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(format!("does not compile: {e}")),
            // A rule outside the vendored schemas (tests pass their own): compile it now.
            None => {
                return match self.env.compile(expr) {
                    Ok(p) => self.execute(&p, value, old),
                    Err(e) => Err(format!("does not compile: {e}")),
                };
            }
        };
        self.execute(program, value, old)
    }

    fn execute(
        &self,
        program: &Program,
        value: &Value,
        old: Option<&Value>,
    ) -> Result<cel::Value, String> {
        let mut context = Context::with_env(self.env.clone());
        context.add_variable_from_value("self", to_cel(value));
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", to_cel(old));
        }
        add_kubernetes_functions(&mut context);
        program.execute(&context).map_err(|e| e.to_string())
    }
}

/// The standard library and the cel-go extensions Kubernetes enables.
fn environment() -> Env {
    let mut env = Env::stdlib();
    // Each extension declares distinct names; failing to add one would be a version clash in
    // the crate, and rules using its functions then fail to compile (and a test says so).
    for ext in [
        cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        let _ = env.add_extension(ext);
    }
    env
}

/// Kubernetes' regex library (`k8s.io/apiserver/pkg/cel/library/regex.go`): `find` returns the
/// first match or `""`, `findAll` every match (at most `n` with a second argument).
fn add_kubernetes_functions(context: &mut Context) {
    // Names the environment does not declare: adding them cannot conflict.
    let _ = context.add_function(
        "find",
        |cel::extractors::This(s): cel::extractors::This<Arc<String>>,
         re: Arc<String>|
         -> Result<Arc<String>, ExecutionError> {
            let re =
                regex::Regex::new(&re).map_err(|e| ExecutionError::function_error("find", e))?;
            Ok(Arc::new(
                re.find(&s)
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_default(),
            ))
        },
    );
    let _ = context.add_function(
        "findAll",
        |cel::extractors::This(s): cel::extractors::This<Arc<String>>,
         cel::extractors::Arguments(args): cel::extractors::Arguments|
         -> Result<cel::Value, ExecutionError> {
            let (re, limit) = match args.as_slice() {
                [cel::Value::String(re)] => (re.clone(), -1),
                [cel::Value::String(re), cel::Value::Int(n)] => (re.clone(), *n),
                _ => {
                    return Err(ExecutionError::function_error(
                        "findAll",
                        "expects a regex and an optional limit",
                    ));
                }
            };
            let re =
                regex::Regex::new(&re).map_err(|e| ExecutionError::function_error("findAll", e))?;
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let found: Vec<cel::Value> = re
                .find_iter(&s)
                .take(limit)
                .map(|m| cel::Value::String(Arc::new(m.as_str().to_string())))
                .collect();
            Ok(cel::Value::List(Arc::new(found)))
        },
    );
}

/// A JSON value as CEL sees it: objects are maps with string keys, integers `int` (or `uint`
/// past `i64`), other numbers `double`.
pub(crate) fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(members) => {
            let map: HashMap<Key, cel::Value> = members
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(text: &str) -> Rule {
        Rule {
            rule: text.into(),
            message: Some("nope".into()),
            message_expression: None,
        }
    }

    fn eval(text: &str, value: Value) -> Outcome {
        Rules::compile([]).eval(&rule(text), &value)
    }

    #[test]
    fn the_macros_and_functions_the_crds_use_work() {
        let v = json!({"a": [1, 2, 3], "s": "abc", "m": {"k": "v"}});
        for ok in [
            "has(self.a) && !has(self.b)",
            "size(self.a) == 3 && self.a.size() == 3 && size(self.s) == 3",
            "self.s.matches('^a[b-c]+$')",
            "self.a.all(x, x > 0) && self.a.exists(x, x == 2) && !self.a.exists(x, x == 9)",
            "self.a.filter(x, x > 1).size() == 2",
            "2 in self.a && 'k' in self.m && self.s in ['abc', 'd']",
            "[has(self.a), has(self.z)].filter(x, x).size() <= 1",
            "self.s.find('b.') == 'bc' && self.s.findAll('[a-c]').size() == 3",
            "self.s.lowerAscii() == 'abc' && self.s.startsWith('a')",
        ] {
            assert_eq!(eval(ok, v.clone()), Outcome::Pass, "{ok}");
        }
        assert_eq!(
            eval("self.s.matches('^z')", v.clone()),
            Outcome::Fail("nope".into())
        );
        assert!(matches!(
            eval("self.nope == 1", v.clone()),
            Outcome::Error(_)
        ));
        assert!(matches!(eval("self.a ==", v), Outcome::Error(_)));
    }

    #[test]
    fn message_expressions_are_used_when_they_give_a_string() {
        let r = Rule {
            rule: "self.n < 2".into(),
            message: Some("static".into()),
            message_expression: Some("'n is ' + string(self.n)".into()),
        };
        let out = Rules::compile([]).eval(&r, &json!({"n": 5}));
        assert_eq!(out, Outcome::Fail("n is 5".into()));
    }

    #[test]
    fn transition_rules_are_recognised() {
        assert!(rule("self == oldSelf").is_transition());
        assert!(!rule("self.oldSelfish == 1").is_transition());
    }
}
