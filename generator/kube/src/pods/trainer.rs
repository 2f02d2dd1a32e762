//! Kubeflow Trainer's part of the `node` pods: what it takes from the TrainJob's
//! `spec.trainer`, and what its torch plugin injects (Trainer v2.3.0,
//! `pkg/runtime/framework/plugins/torch`).

use hetgen_spec::kube::{
    COMPLETION_INDEX_ANNOTATION, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NNODES, PET_NODE_RANK,
    PET_NPROC_PER_NODE, TRAINER_JOB, TRAINER_PORT,
};
use serde_json::Value;

use super::{Container, EnvSource, EnvVar, PodsError, parse_env, strings};

/// What Trainer takes from the TrainJob's `spec.trainer` into the `node` container.
pub(super) fn apply_trainer(container: &mut Container, trainer: &Value) -> Result<(), PodsError> {
    if let Some(image) = trainer.get("image").and_then(Value::as_str) {
        container.image = image.to_owned();
    }
    if let Some(command) = trainer.get("command") {
        container.command = strings(command, "TrainJob spec.trainer.command")?;
    }
    if let Some(args) = trainer.get("args") {
        container.args = strings(args, "TrainJob spec.trainer.args")?;
    }
    if let Some(env) = trainer.get("env") {
        for var in parse_env(env, "TrainJob spec.trainer.env")? {
            upsert(&mut container.env, var);
        }
    }
    Ok(())
}

/// Trainer's torch plugin (`EnforceMLPolicy`).
pub(super) fn inject_torch(
    container: &mut Container,
    job: &str,
    nodes: u32,
    trainer: Option<&Value>,
) {
    let per_node = trainer
        .and_then(|t| t.get("numProcPerNode"))
        .and_then(Value::as_u64)
        .map(|n| n.to_string());
    let resources = trainer.and_then(|t| t.get("resourcesPerNode"));
    let gpus = resources
        .and_then(|r| r.pointer("/limits/nvidia.com~1gpu"))
        .and_then(quantity_units)
        .unwrap_or(0);
    let per_node = per_node.unwrap_or_else(|| {
        if gpus > 0 {
            "auto".to_owned()
        } else {
            let cpus = resources
                .and_then(|r| {
                    r.pointer("/requests/cpu")
                        .or_else(|| r.pointer("/limits/cpu"))
                })
                .and_then(quantity_units)
                .unwrap_or(0);
            cpus.max(1).to_string()
        }
    });
    let value = |v: String| EnvSource::Value(v);
    for (name, source) in [
        (PET_NNODES, value(nodes.to_string())),
        (PET_NPROC_PER_NODE, value(per_node)),
        (
            PET_NODE_RANK,
            EnvSource::Field(format!(
                "metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
            )),
        ),
        (
            PET_MASTER_ADDR,
            value(format!("{job}-{TRAINER_JOB}-0-0.{job}")),
        ),
        (PET_MASTER_PORT, value(TRAINER_PORT.to_string())),
    ] {
        upsert(
            &mut container.env,
            EnvVar {
                name: name.to_owned(),
                source,
            },
        );
    }
}

/// A whole-unit count from a quantity (`2`, `"2"`, `"1500m"` → 1), as `Quantity.Value()`
/// rounds up.
fn quantity_units(q: &Value) -> Option<u64> {
    match q {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => match s.strip_suffix('m') {
            Some(milli) => milli.parse::<u64>().ok().map(|m| m.div_ceil(1000)),
            None => s.parse::<f64>().ok().map(|v| v.ceil() as u64),
        },
        _ => None,
    }
}

fn upsert(env: &mut Vec<EnvVar>, var: EnvVar) {
    match env.iter_mut().find(|e| e.name == var.name) {
        Some(existing) => *existing = var,
        None => env.push(var),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_up() {
        assert_eq!(quantity_units(&Value::from("1500m")), Some(2));
        assert_eq!(quantity_units(&Value::from("3")), Some(3));
        assert_eq!(quantity_units(&Value::from(2)), Some(2));
    }
}
