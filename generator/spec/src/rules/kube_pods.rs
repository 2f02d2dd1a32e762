//! `[kubernetes]`'s settings of the pods themselves, for clusters as they are run: tolerations
//! for tainted node groups, the resources each node keeps for itself, annotations and labels
//! (a service mesh's opt-out, say), and a claim that keeps the trainers' outputs.
//!
//! Each is checked as the API server would check the pod template it ends up in
//! (`k8s.io/apimachinery` `IsQualifiedName`, `IsValidLabelValue`; the core API's toleration
//! rules), and against the instance types, so a pod is never rendered that no node could hold.

use std::collections::BTreeMap;

use crate::catalog::Catalog;
use crate::ctx::Ctx;
use crate::kube::{CONTROLLER_PREFIXES, Toleration, TolerationOperator};
use crate::model::Group;
use crate::path;
use crate::raw::RawKubernetes;

use super::kubernetes::is_dns_subdomain;

/// The pods' settings, checked.
pub(super) struct PodSettings {
    pub tolerations: Vec<Toleration>,
    pub reserve_millicpu: u32,
    pub reserve_memory_mib: Option<u64>,
    pub pod_annotations: BTreeMap<String, String>,
    pub pod_labels: BTreeMap<String, String>,
    pub output_claim: Option<String>,
}

/// A node keeps one vCPU by default: the kubelet and the system daemons need some, and a node's
/// allocatable CPU is less than its vCPUs, so a request for all of them is never scheduled.
const DEFAULT_RESERVE_MILLICPU: u32 = 1000;

pub(super) fn pod_settings(
    ctx: &mut Ctx<'_>,
    k: &RawKubernetes,
    groups: &[Group],
) -> Option<PodSettings> {
    let mut ok = tolerations(ctx, k.tolerations.as_deref().unwrap_or_default());
    let (reserve_millicpu, reserve_memory_mib) = reserve(ctx, k, groups, &mut ok);
    let pod_annotations = k.pod_annotations.clone().unwrap_or_default();
    let pod_labels = k.pod_labels.clone().unwrap_or_default();
    ok &= metadata(ctx, "pod_annotations", &pod_annotations, false);
    ok &= metadata(ctx, "pod_labels", &pod_labels, true);
    if let Some(claim) = &k.output_claim
        && !is_dns_subdomain(claim)
    {
        ok = false;
        ctx.error(
            "hetgen::spec::kubernetes-claim",
            &path!["kubernetes", "output_claim"],
            format!("`{claim}` is not a valid PersistentVolumeClaim name"),
            "not a DNS subdomain",
            "use lower-case letters, digits, `-` and `.`, at most 253 characters",
        );
    }
    ok.then(|| PodSettings {
        tolerations: k.tolerations.clone().unwrap_or_default(),
        reserve_millicpu,
        reserve_memory_mib,
        pod_annotations,
        pod_labels,
        output_claim: k.output_claim.clone(),
    })
}

/// The core API's rules for a pod's tolerations.
fn tolerations(ctx: &mut Ctx<'_>, list: &[Toleration]) -> bool {
    let mut ok = true;
    for (i, t) in list.iter().enumerate() {
        let at = path!["kubernetes", "tolerations", i];
        let problem = match (&t.key, t.operator, &t.value) {
            (Some(key), _, _) if !is_qualified_name(key) => Some((
                format!("`{key}` is not a taint key"),
                "a qualified name: an optional DNS-subdomain prefix and `/`, then at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit",
            )),
            (None, TolerationOperator::Equal, _) => Some((
                "a toleration without a `key` must have `operator = \"Exists\"`".to_owned(),
                "name the taint's `key`, or tolerate every taint with `operator = \"Exists\"`",
            )),
            (_, TolerationOperator::Exists, Some(_)) => Some((
                "a toleration with `operator = \"Exists\"` has no `value`".to_owned(),
                "leave `value` out (any value is tolerated), or use `operator = \"Equal\"`",
            )),
            (_, TolerationOperator::Equal, Some(value)) if !is_label_value(value) => Some((
                format!("`{value}` is not a taint value"),
                "at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit",
            )),
            _ => None,
        };
        if let Some((message, help)) = problem {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-toleration",
                &at,
                message,
                "not a toleration the API server takes",
                help,
            );
        }
    }
    ok
}

/// `reserve`: what every node keeps, which must leave each group's pods something to request.
fn reserve(
    ctx: &mut Ctx<'_>,
    k: &RawKubernetes,
    groups: &[Group],
    ok: &mut bool,
) -> (u32, Option<u64>) {
    let Some(r) = &k.reserve else {
        return (DEFAULT_RESERVE_MILLICPU, None);
    };
    let catalog = Catalog::builtin();
    let mut check = |key: &str,
                     amount: Option<f64>,
                     per_group: &dyn Fn(&Group) -> Option<f64>,
                     unit: &str| {
        let amount = amount?;
        let at = path!["kubernetes", "reserve", key];
        if !amount.is_finite() || amount < 0.0 {
            *ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-reserve",
                &at,
                format!("a reserve of {amount} {unit}"),
                "not an amount",
                format!("give the {unit} each node keeps for itself, 0 or more"),
            );
            return None;
        }
        for g in groups {
            if let Some(has) = per_group(g)
                && amount >= has
            {
                *ok = false;
                ctx.error(
                    "hetgen::spec::kubernetes-reserve",
                    &at,
                    format!(
                        "group `{}`'s {} has {has} {unit}: a reserve of {amount} leaves its pods nothing to request",
                        g.name, g.instance_type
                    ),
                    "as much as a node has",
                    format!("reserve less than the smallest instance type's {unit}"),
                );
                return None;
            }
        }
        Some(amount)
    };
    let cpu = check("cpu", r.cpu, &|g| g.vcpus.map(f64::from), "vCPUs");
    let memory = check(
        "memory_gib",
        r.memory_gib,
        &|g| catalog.get(&g.instance_type).map(|t| t.memory_gib),
        "GiB",
    );
    (
        cpu.map_or(DEFAULT_RESERVE_MILLICPU, |c| (c * 1000.0).round() as u32),
        memory.map(|m| (m * 1024.0).round() as u64),
    )
}

/// Annotation or label keys and values as the API server checks them on a pod template.
fn metadata(
    ctx: &mut Ctx<'_>,
    key: &'static str,
    entries: &BTreeMap<String, String>,
    labels: bool,
) -> bool {
    let mut ok = true;
    for (name, value) in entries {
        let at = path!["kubernetes", key, name.as_str()];
        if !is_qualified_name(name) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::kubernetes-metadata",
                &at,
                format!("`{name}` is not a valid key"),
                "not a qualified name",
                "an optional DNS-subdomain prefix and `/`, then at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit",
            );
        } else if let Some(prefix) = CONTROLLER_PREFIXES.iter().find(|p| name.starts_with(**p)) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::kubernetes-metadata",
                &at,
                format!("`{name}` is under `{prefix}`, which hetgen, JobSet, the Job controller or Kubeflow Trainer set"),
                "reserved",
                "use a key of your own",
            );
        } else if labels && !is_label_value(value) {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-metadata",
                &at,
                format!("`{value}` is not a valid label value"),
                "not a label value",
                "at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (or empty)",
            );
        }
    }
    ok
}

/// `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63
/// characters of `[-A-Za-z0-9_.]`, starting and ending with a letter or digit.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p))
        && !name.is_empty()
        && is_label_value(name)
}

/// `IsValidLabelValue`: empty, or at most 63 characters of `[-A-Za-z0-9_.]` starting and ending
/// with a letter or digit.
fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_and_label_values() {
        assert!(is_qualified_name("sidecar.istio.io/inject"));
        assert!(is_qualified_name("team"));
        assert!(!is_qualified_name("/inject"));
        assert!(!is_qualified_name("Bad_Prefix/x"));
        assert!(!is_qualified_name("-x"));
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_x"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
