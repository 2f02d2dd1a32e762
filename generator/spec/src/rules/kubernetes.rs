//! `[kubernetes]`: what Kubernetes, JobSet and Kubeflow Trainer would refuse of the objects the
//! job renders to, said about the spec line that causes it.
//!
//! The rendered objects are checked against the CRDs themselves as well (`hetgen-kube`); these
//! rules catch what the spec decides, where the user can fix it.

use crate::data_port::{DATA_PORT_VAR, PORT_EXPECTED, parse_port};
use crate::kube_names;
use std::collections::BTreeMap;

use crate::ctx::Ctx;
use crate::kube::{TRAINER_JOB, pod_host, replicated_job};
use crate::model::{Channel, Group, Kubernetes, Role};
use crate::path;
use crate::raw::{RawKubernetes, RawSpec};
use crate::suggest::did_you_mean;

/// Variables the rendered pods set themselves (or Trainer's torch plugin does, which refuses a
/// TrainJob that sets them): a spec must not set them too.
const RESERVED: &[&str] = &[
    crate::kube::GROUPS_VAR,
    crate::kube::GROUP_VAR,
    crate::kube::JOBSET_VAR,
    crate::kube::INDEX_VAR,
    crate::kube::PET_NNODES,
    crate::kube::PET_NPROC_PER_NODE,
    crate::kube::PET_NODE_RANK,
    crate::kube::PET_MASTER_ADDR,
    crate::kube::PET_MASTER_PORT,
    "HETGEN_JOB_TOKEN",
];

#[allow(
    clippy::too_many_lines,
    reason = "the `[kubernetes]` rules in the order docs/spec.md lists them"
)]
pub(super) fn kubernetes(
    ctx: &mut Ctx<'_>,
    k: &RawKubernetes,
    raw: &RawSpec,
    groups: &[Group],
    channels: &[Channel],
) -> Option<Kubernetes> {
    let at = path!["kubernetes"];
    let mut ok = names(ctx, &raw.job.name, groups);
    if k.image.trim().is_empty() || k.image.chars().any(char::is_whitespace) {
        ok = false;
        ctx.error(
            "hetgen::spec::kubernetes-image",
            &at.at("image"),
            format!("`{}` is not an image reference", k.image),
            "not an image",
            "name the image built from the rendered Dockerfile, e.g. `registry.example.com/digits:1`",
        );
    }
    let namespace = k.namespace.clone().unwrap_or_else(|| "default".to_owned());
    if kube_names::dns1123_label(&namespace).is_some() {
        ok = false;
        ctx.error(
            "hetgen::spec::kubernetes-namespace",
            &at.at("namespace"),
            format!("`{namespace}` is not a valid namespace"),
            "not a DNS label",
            "use at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit",
        );
    }
    let given = k.claims.clone().unwrap_or_default();
    let channel_names: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
    for (channel, claim) in &given {
        if !channel_names.contains(&channel.as_str()) {
            ok = false;
            let help = match did_you_mean(channel, channel_names.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => "name one of the job's channels".to_owned(),
            };
            ctx.error_at_key(
                "hetgen::spec::kubernetes-claim-channel",
                &at.at("claims").at(channel.as_str()),
                format!("no channel is named `{channel}`"),
                "not a channel",
                help,
            );
        } else if !is_dns_subdomain(claim) {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-claim",
                &at.at("claims").at(channel.as_str()),
                format!("`{claim}` is not a valid PersistentVolumeClaim name"),
                "not a DNS subdomain",
                "use lower-case letters, digits, `-` and `.`, at most 253 characters",
            );
        }
    }
    let claims: BTreeMap<String, String> = channels
        .iter()
        .map(|c| {
            let claim = given
                .get(&c.name)
                .cloned()
                .unwrap_or_else(|| format!("{}-{}", raw.job.name, c.name).replace('_', "-"));
            (c.name.clone(), claim)
        })
        .collect();
    let environment = k.environment.clone().unwrap_or_default();
    for key in environment.keys() {
        if RESERVED.contains(&key.as_str()) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::kubernetes-reserved-variable",
                &at.at("environment").at(key.as_str()),
                format!("`{key}` is set by hetgen or by Kubeflow Trainer in every pod"),
                "reserved",
                "leave it out: the rendered objects set it",
            );
        } else if !super::sagemaker::ENV_KEY.is_match(key) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::environment-key",
                &at.at("environment").at(key.as_str()),
                format!("`{key}` is not a valid environment variable name"),
                "invalid name",
                "use letters, digits and `_`, not starting with a digit",
            );
        } else if key == DATA_PORT_VAR && parse_port(&environment[key]).is_none() {
            // The servers would refuse it at start, after the pods were scheduled.
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-data-port",
                &at.at("environment").at(key.as_str()),
                format!("`{key}` is `{}`", environment[key]),
                "not a port",
                format!("use {PORT_EXPECTED}: the data servers listen on it, and the pods' `containerPort` and readiness probe follow it"),
            );
        }
    }
    let pods = super::kube_pods::pod_settings(ctx, k, groups);
    let pods = pods.filter(|_| ok)?;
    Some(Kubernetes {
        image: k.image.clone(),
        namespace,
        claims,
        environment,
        tolerations: pods.tolerations,
        reserve_millicpu: pods.reserve_millicpu,
        reserve_memory_mib: pods.reserve_memory_mib,
        pod_annotations: pods.pod_annotations,
        pod_labels: pods.pod_labels,
        output_claim: pods.output_claim,
    })
}

/// The TrainJob takes the job's name, and JobSet names each pod after it and its
/// replicatedJob: every one of those must be a DNS label.
fn names(ctx: &mut Ctx<'_>, job: &str, groups: &[Group]) -> bool {
    if !is_dns_label(job) {
        ctx.error(
            "hetgen::spec::kubernetes-job-name",
            &path!["job", "name"],
            format!("`{job}` cannot name a TrainJob"),
            "not a DNS label",
            "on Kubernetes the job's name must be lower-case letters, digits and `-`, starting with a letter",
        );
        return false;
    }
    let mut ok = true;
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for (i, group) in groups.iter().enumerate() {
        let at = path!["instance_group", i, "name"];
        let trainer = group.role == Role::Trainer;
        let rjob = replicated_job(&group.name, trainer);
        if !is_dns_label(&rjob) {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-group-name",
                &at,
                format!("group `{}` cannot name a replicatedJob (`{rjob}`)", group.name),
                "not a DNS label",
                "on Kubernetes a data group's name must be letters, digits, `-` and `_`, starting with a letter",
            );
            continue;
        }
        if let Some(other) = seen.insert(rjob.clone(), &group.name) {
            ok = false;
            let why = if rjob == TRAINER_JOB {
                format!("Kubeflow Trainer names the trainer group's job `{TRAINER_JOB}`")
            } else {
                format!("`{other}` becomes `{rjob}` too")
            };
            ctx.error(
                "hetgen::spec::kubernetes-group-name",
                &at,
                format!(
                    "group `{}` would run as replicatedJob `{rjob}`, which another group has",
                    group.name
                ),
                "taken",
                format!("rename the group: {why}"),
            );
            continue;
        }
        let last = pod_host(job, &rjob, group.count.saturating_sub(1));
        let pod = last.split('.').next().unwrap_or(&last);
        if pod.len() > MAX_POD_NAME {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-pod-name",
                &at,
                format!(
                    "pod `{pod}` of group `{}` has a {}-character name",
                    group.name,
                    pod.len()
                ),
                format!("more than {MAX_POD_NAME}"),
                format!("JobSet names pods `<job>-<group>-0-<index>-<5 random characters>`, and its webhook refuses the JobSet when that is over a DNS label's 63 characters, so the name before the suffix has at most {MAX_POD_NAME}: shorten the job's or the group's name"),
            );
        }
    }
    ok
}

/// The longest pod name JobSet accepts before the pod's random suffix: its webhook
/// (`pkg/webhooks/jobset_webhook.go`, JobSet v0.12.0) checks `<jobset>-<replicatedJob>-<job
/// index>-<pod index>` plus `-abcde` against a DNS-1035 label's 63 characters.
pub const MAX_POD_NAME: usize = 63 - "-abcde".len();

/// A DNS-1035 label, as Kubernetes requires of a TrainJob's name and a replicatedJob's.
pub(crate) fn is_dns_label(s: &str) -> bool {
    kube_names::dns1035_label(s).is_none()
}

/// A DNS-1123 subdomain, as Kubernetes requires of most object names.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    kube_names::dns1123_subdomain(s).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns_label("pytorch-digits"));
        assert!(!is_dns_label("Digits"));
        assert!(!is_dns_label("1digits"));
        assert!(!is_dns_label("digits-"));
        assert!(is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("a..b"));
    }
}
