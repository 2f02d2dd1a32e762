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

use crate::kube_names;

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
        && kube_names::dns1123_subdomain(claim).is_some()
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
        let key_why = t.key.as_deref().and_then(kube_names::qualified_name);
        let value_why = t.value.as_deref().and_then(kube_names::label_value);
        let problem = match (&t.key, t.operator, &t.value) {
            (Some(key), _, _) if key_why.is_some() => Some((
                format!(
                    "`{key}` is not a taint key: it {}",
                    key_why.unwrap_or_default()
                ),
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
            (_, TolerationOperator::Equal, Some(value)) if value_why.is_some() => Some((
                format!(
                    "`{value}` is not a taint value: it {}",
                    value_why.unwrap_or_default()
                ),
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
        if let Some(why) = kube_names::qualified_name(name) {
            ok = false;
            ctx.error_at_key(
                "hetgen::spec::kubernetes-metadata",
                &at,
                format!("`{name}` is not a valid key: it {why}"),
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
        } else if let Some(why) = kube_names::label_value(value).filter(|_| labels) {
            ok = false;
            ctx.error(
                "hetgen::spec::kubernetes-metadata",
                &at,
                format!("`{value}` is not a valid label value: it {why}"),
                "not a label value",
                "at most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit (or empty)",
            );
        }
    }
    ok
}
