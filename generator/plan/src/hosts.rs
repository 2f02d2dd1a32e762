//! Whether a data host can carry its share: the network its batches need against the type's
//! bandwidth, and its dataset workers' memory against the type's memory.
//!
//! A data host runs one worker per vCPU and streams what it makes to the trainers. Given the
//! profile of a Python dataset (bytes per sample on the wire, each worker's memory) and the
//! rate per vCPU, each data host of a cluster carries the samples the GPUs consume, shared
//! among the pipeline's vCPUs as the scheduler shares shards (by how fast each source is): a
//! host of `v` vCPUs carries `v × rate × min(1, needed / available)` samples/s. Its network
//! need is that times the bytes per sample; the catalog's bandwidth is the type's *baseline*,
//! the figure a host streaming for hours can count on ("up to" bursts do not last).

use hetgen_spec::Catalog;
use hetgen_spec::model::Role;
use serde::Serialize;

use crate::{Choice, GroupPlan, Plan};

/// What a Python dataset's profile says a data host needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DatasetNeeds {
    /// Samples per second one vCPU makes (one worker per vCPU).
    pub samples_per_s_per_vcpu: f64,
    /// Bytes per sample of the batches sent.
    pub bytes_per_sample: f64,
    /// Memory of one worker, MiB (proportional: shared libraries divided among the workers).
    pub worker_memory_mib: f64,
}

/// One data group's hosts, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostCheck {
    pub group: String,
    pub instance_type: String,
    /// vCPUs of one host: its workers.
    pub vcpus: u32,
    /// Samples per second one host sends.
    pub samples_per_s: f64,
    /// Gbit/s one host sends.
    pub network_gbps: f64,
    /// The type's baseline bandwidth; `None` when hetgen's catalog does not know it.
    pub network_gbps_available: Option<f64>,
    /// GiB its workers take together.
    pub memory_gib: f64,
    /// The type's memory; `None` when hetgen's catalog does not know the type.
    pub memory_gib_available: Option<f64>,
}

impl HostCheck {
    /// `Some(false)` when the host cannot send its share; `None` when the bandwidth is unknown.
    pub fn network_fits(&self) -> Option<bool> {
        self.network_gbps_available
            .map(|have| self.network_gbps <= have)
    }

    /// `Some(false)` when its workers do not fit in its memory; `None` when it is unknown.
    pub fn memory_fits(&self) -> Option<bool> {
        self.memory_gib_available
            .map(|have| self.memory_gib <= have)
    }

    /// Both fit, as far as hetgen knows.
    pub fn fits(&self) -> bool {
        self.network_fits() != Some(false) && self.memory_fits() != Some(false)
    }
}

impl Plan {
    /// The plan with every data group's hosts checked against `needs`: the cluster as written
    /// and each option's. Without [`Plan::demand`] (no vCPUs per GPU) there is no share to
    /// carry, and the plan is returned as it is.
    pub fn with_data_hosts(mut self, catalog: &Catalog, needs: &DatasetNeeds) -> Plan {
        let Some(demand) = &mut self.demand else {
            return self;
        };
        let needed = demand.needed_vcpus;
        self.data_hosts = check(
            &self.groups,
            catalog,
            needs,
            share(needed, demand.available_vcpus),
        );
        for choice in &mut demand.options {
            let Choice {
                groups,
                pipeline_vcpus,
                ..
            } = choice;
            let carried = share(needed, f64::from(*pipeline_vcpus));
            choice.data_hosts = check(groups, catalog, needs, carried);
        }
        self
    }
}

/// The share of each pipeline vCPU's rate the GPUs consume: 1 when the pipeline is short.
fn share(needed: f64, available: f64) -> f64 {
    if available <= 0.0 {
        0.0
    } else {
        (needed / available).min(1.0)
    }
}

/// Every data group of `groups`, its hosts carrying `carried` of their vCPUs' rate.
fn check(
    groups: &[GroupPlan],
    catalog: &Catalog,
    needs: &DatasetNeeds,
    carried: f64,
) -> Vec<HostCheck> {
    groups
        .iter()
        .filter(|g| g.role == Role::Data)
        .map(|g| {
            let known = catalog.get(&g.instance_type);
            let vcpus = known.map_or(0, |t| t.vcpus);
            let samples_per_s = f64::from(vcpus) * needs.samples_per_s_per_vcpu * carried;
            HostCheck {
                group: g.name.clone(),
                instance_type: g.instance_type.clone(),
                vcpus,
                samples_per_s,
                network_gbps: samples_per_s * needs.bytes_per_sample * 8.0 / 1e9,
                network_gbps_available: known.and_then(|t| t.network_gbps),
                memory_gib: f64::from(vcpus) * needs.worker_memory_mib / 1024.0,
                memory_gib_available: known.map(|t| t.memory_gib),
            }
        })
        .collect()
}
