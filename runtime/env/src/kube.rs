//! A pod of a job rendered for Kubeflow Trainer: its environment from the variables the
//! rendered objects set, instead of SageMaker's `resourceconfig.json`.
//!
//! There is no `resourceconfig.json` on Kubernetes. Every pod gets the job's groups
//! ([`GROUPS_VAR`], the same JSON in every pod), its own group ([`GROUP_VAR`]), the JobSet's
//! name ([`JOBSET_VAR`]) and its index in its group ([`INDEX_VAR`]), the last two through the
//! downward API. From them every pod computes the same cluster: each group's hosts are its
//! pods' stable DNS names ([`pod_host`]), this host is pod `index` of its own group, and the
//! result is the [`ResourceConfig`] SageMaker would have written, so everything downstream (the
//! roles, the data client, the launcher's ranks) runs unchanged.
//!
//! Channels are volumes mounted where SageMaker puts them (`<base>/input/data/<channel>`),
//! always whole files: File mode, every pod seeing all of it. A pod has no hyperparameters.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use hetgen_spec::kube::{GROUP_VAR, GROUPS_VAR, INDEX_VAR, JOBSET_VAR, KubeGroup, pod_host};
use hetgen_spec::model::{InputMode, S3Distribution};

use crate::{
    ChannelConfig, Env, EnvError, InstanceGroup, Paths, ResourceConfig, VariableError, host_order,
};

/// Whether the environment describes a pod of a Kubernetes job: [`GROUPS_VAR`] is set. The
/// other variables are then required, and an error when missing, rather than a sign that this
/// is no Kubernetes pod after all.
pub(crate) fn is_pod(var: &impl Fn(&str) -> Option<String>) -> bool {
    var(GROUPS_VAR).is_some()
}

/// The environment of this pod, rooted at `paths`, with `var` standing for the process
/// environment.
pub(crate) fn load(paths: Paths, var: &impl Fn(&str) -> Option<String>) -> Result<Env, EnvError> {
    let groups = groups(var)?;
    let own = own_group(var, &groups)?;
    let jobset = jobset(var)?;
    let index = index(var, own)?;

    let instance_groups: Vec<InstanceGroup> = groups
        .iter()
        .map(|g| InstanceGroup {
            hosts: (0..g.count)
                .map(|i| pod_host(&jobset, &g.replicated_job, i))
                .collect(),
            instance_group_name: g.name.clone(),
            instance_type: g.instance_type.clone(),
        })
        .collect();
    let mut hosts: Vec<String> = instance_groups
        .iter()
        .flat_map(|g| g.hosts.iter().cloned())
        .collect();
    hosts.sort_by_key(|h| host_order(h));
    let resources = ResourceConfig {
        current_group_name: own.name.clone(),
        current_host: pod_host(&jobset, &own.replicated_job, index),
        current_instance_type: own.instance_type.clone(),
        hosts,
        instance_groups,
        // No interface is promised in a pod (the network plugin names it): left empty, gloo
        // and NCCL choose their own, as they do where SageMaker names none.
        network_interface_name: String::new(),
    };

    let channels: BTreeMap<String, ChannelConfig> = own
        .channels
        .iter()
        .map(|name| {
            // A volume: every pod sees all of it, as files.
            let config =
                ChannelConfig::files(None, S3Distribution::FullyReplicated, InputMode::File);
            (name.clone(), config)
        })
        .collect();
    let channel_dirs = crate::channel_dirs(&channels, &paths, var);
    Ok(Env {
        paths,
        resources,
        hyperparameters: BTreeMap::new(),
        channels,
        channel_dirs,
        kubernetes: true,
    })
}

/// [`GROUPS_VAR`]: the job's groups, each with at least one pod, names and replicatedJobs
/// unique (two groups with one replicatedJob would be one set of pods).
fn groups(var: &impl Fn(&str) -> Option<String>) -> Result<Vec<KubeGroup>, EnvError> {
    let value = var(GROUPS_VAR).ok_or(EnvError::Unset {
        var: GROUPS_VAR,
        expected: GROUPS_EXPECTED.into(),
    })?;
    let invalid = |why: String| VariableError {
        var: GROUPS_VAR,
        value: value.clone(),
        expected: format!("{GROUPS_EXPECTED} ({why})").into(),
    };
    let groups: Vec<KubeGroup> =
        serde_json::from_str(&value).map_err(|e| invalid(crate::json_error_message(&e)))?;
    if groups.is_empty() {
        return Err(invalid("it lists none".to_owned()).into());
    }
    let (mut names, mut jobs) = (BTreeSet::new(), BTreeSet::new());
    for group in &groups {
        if !names.insert(&group.name) {
            return Err(invalid(format!("group `{}` is listed twice", group.name)).into());
        }
        if !jobs.insert(&group.replicated_job) {
            return Err(invalid(format!(
                "two groups have the replicatedJob `{}`",
                group.replicated_job
            ))
            .into());
        }
        if !is_dns_label(&group.replicated_job) {
            return Err(invalid(format!(
                "group `{}`'s replicatedJob `{}` is not a DNS label",
                group.name, group.replicated_job
            ))
            .into());
        }
        if group.count == 0 {
            return Err(invalid(format!("group `{}` has no pods", group.name)).into());
        }
    }
    Ok(groups)
}

const GROUPS_EXPECTED: &str = "the job's groups as a JSON list of \
    {\"name\", \"replicated_job\", \"count\", \"instance_type\", \"channels\"}, \
    as `hetgen render` writes it into every pod";

/// [`GROUP_VAR`]: this pod's group, one of [`GROUPS_VAR`]'s.
fn own_group<'a>(
    var: &impl Fn(&str) -> Option<String>,
    groups: &'a [KubeGroup],
) -> Result<&'a KubeGroup, EnvError> {
    let names = groups
        .iter()
        .map(|g| format!("`{}`", g.name))
        .collect::<Vec<_>>()
        .join(", ");
    let expected = || format!("this pod's group: one of {GROUPS_VAR}'s, {names}");
    let value = var(GROUP_VAR).ok_or_else(|| EnvError::Unset {
        var: GROUP_VAR,
        expected: expected().into(),
    })?;
    groups.iter().find(|g| g.name == value).ok_or_else(|| {
        VariableError {
            var: GROUP_VAR,
            value,
            expected: expected().into(),
        }
        .into()
    })
}

/// [`JOBSET_VAR`]: the JobSet's name, the first part of every pod's name and its subdomain.
fn jobset(var: &impl Fn(&str) -> Option<String>) -> Result<String, EnvError> {
    const EXPECTED: &str = "the JobSet's name (a DNS label), which the pod's template sets from \
        its `jobset.sigs.k8s.io/jobset-name` label through the downward API";
    let value = var(JOBSET_VAR).ok_or(EnvError::Unset {
        var: JOBSET_VAR,
        expected: EXPECTED.into(),
    })?;
    if is_dns_label(&value) {
        Ok(value)
    } else {
        Err(VariableError {
            var: JOBSET_VAR,
            value,
            expected: EXPECTED.into(),
        }
        .into())
    }
}

/// [`INDEX_VAR`]: this pod's index in its group, below the group's count.
fn index(var: &impl Fn(&str) -> Option<String>, own: &KubeGroup) -> Result<u32, EnvError> {
    let expected = || -> Cow<'static, str> {
        format!(
            "this pod's index in its group `{}`, from 0 to {} (the pod template sets it from \
             its `batch.kubernetes.io/job-completion-index` annotation through the downward \
             API)",
            own.name,
            own.count - 1
        )
        .into()
    };
    let value = var(INDEX_VAR).ok_or_else(|| EnvError::Unset {
        var: INDEX_VAR,
        expected: expected(),
    })?;
    match value.trim().parse::<u32>() {
        Ok(index) if index < own.count => Ok(index),
        _ => Err(VariableError {
            var: INDEX_VAR,
            value,
            expected: expected(),
        }
        .into()),
    }
}

/// A DNS-1123 label, as Kubernetes names a JobSet and its pods.
fn is_dns_label(name: &str) -> bool {
    hetgen_spec::kube_names::dns1123_label(name).is_none()
}

#[cfg(test)]
mod tests;
