//! Where the trainer computes, in which precision, and how its random numbers are seeded.

use hetgen_spec::model::{Device, Precision};

use crate::TrainError;

/// The devices a run uses: every GPU of the instance (one replica each), or the CPU.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    /// One entry per replica; replica 0 holds the optimizer.
    pub devices: Vec<tch::Device>,
    /// The precision actually used (mixed precision needs CUDA).
    pub precision: Precision,
}

impl Placement {
    /// Resolves the requested device and precision against what libtorch sees.
    pub fn resolve(requested: Device, precision: Precision) -> Result<Self, TrainError> {
        let cuda = tch::Cuda::is_available();
        let devices = match (requested, cuda) {
            (Device::Cpu, _) | (Device::Auto, false) => vec![tch::Device::Cpu],
            (Device::Cuda, false) => return Err(TrainError::NoCuda),
            (Device::Cuda | Device::Auto, true) => {
                let count = usize::try_from(tch::Cuda::device_count())
                    .unwrap_or(0)
                    .max(1);
                (0..count).map(tch::Device::Cuda).collect()
            }
        };
        let on_cuda = devices[0].is_cuda();
        let precision = match precision {
            Precision::Fp32 => Precision::Fp32,
            _ if !on_cuda => {
                tracing::info!(
                    requested = ?precision,
                    "mixed precision needs CUDA; training in fp32 on the CPU"
                );
                Precision::Fp32
            }
            Precision::Bf16 => {
                if set_cuda_autocast_dtype(tch::Kind::BFloat16) {
                    Precision::Bf16
                } else {
                    tracing::warn!(
                        "this libtorch has no `at::autocast::set_autocast_dtype`; bf16 autocast \
                         is unavailable, training in fp32"
                    );
                    Precision::Fp32
                }
            }
            Precision::Fp16 => {
                // float16 is CUDA autocast's default; set it anyway in case something changed it.
                set_cuda_autocast_dtype(tch::Kind::Half);
                Precision::Fp16
            }
        };
        Ok(Self { devices, precision })
    }

    /// Whether the replicas are GPUs.
    pub fn is_cuda(&self) -> bool {
        self.devices[0].is_cuda()
    }

    /// `cpu` or `cuda`, for the summary.
    pub fn name(&self) -> &'static str {
        if self.is_cuda() { "cuda" } else { "cpu" }
    }

    /// Whether the forward pass runs under autocast.
    pub fn autocast(&self) -> bool {
        self.is_cuda() && self.precision != Precision::Fp32
    }
}

/// Sets the dtype CUDA autocast lowers to.
///
/// `tch::autocast` only toggles autocast, whose CUDA default is float16; bfloat16 needs
/// `at::autocast::set_autocast_dtype`, which neither tch nor torch-sys wraps. It is looked up at
/// run time (not linked) so that a libtorch without it degrades to fp32 instead of failing to
/// load. Returns whether the dtype was set.
fn set_cuda_autocast_dtype(kind: tch::Kind) -> bool {
    /// `void at::autocast::set_autocast_dtype(c10::DeviceType, c10::ScalarType)`.
    const SYMBOL: &std::ffi::CStr =
        c"_ZN2at8autocast18set_autocast_dtypeEN3c1010DeviceTypeENS1_10ScalarTypeE";
    /// `c10::DeviceType::CUDA`.
    const CUDA: i8 = 1;
    let scalar_type: i8 = match kind {
        tch::Kind::Half => 5,
        tch::Kind::BFloat16 => 15,
        _ => return false,
    };
    // SAFETY: `dlsym` only looks a name up among the loaded objects; libtorch is linked into
    // this process, so the default namespace holds it when it exports the function.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr()) };
    if address.is_null() {
        return false;
    }
    // SAFETY: the mangled name fixes the signature: both parameters are `enum class : int8_t`
    // passed by value and it returns nothing, which is `extern "C" fn(i8, i8)` on the C++ ABI
    // of every platform libtorch ships for.
    let set: unsafe extern "C" fn(i8, i8) = unsafe { std::mem::transmute(address) };
    // SAFETY: see above; the function only stores the dtype in a thread-local.
    unsafe { set(CUDA, scalar_type) };
    true
}

/// The torch seed of step `step` (0-based) of a job seeded with `seed`.
///
/// Every step re-seeds torch's generators (dropout is the only consumer) from (seed, step)
/// alone, so no RNG state needs checkpointing: an uninterrupted run and one resumed at any step
/// draw the same numbers. SplitMix64 keeps nearby steps' seeds unrelated.
pub(crate) fn step_seed(seed: u64, step: u64) -> i64 {
    let mut z = seed ^ step.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    i64::from_ne_bytes(z.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_seeds_differ_and_repeat() {
        assert_eq!(step_seed(7, 3), step_seed(7, 3));
        assert_ne!(step_seed(7, 3), step_seed(7, 4));
        assert_ne!(step_seed(7, 3), step_seed(8, 3));
    }

    #[test]
    fn cpu_placement_is_fp32() {
        let p = Placement::resolve(Device::Cpu, Precision::Bf16).expect("cpu always resolves");
        assert_eq!(p.devices, vec![tch::Device::Cpu]);
        assert_eq!(p.precision, Precision::Fp32);
        assert_eq!(p.name(), "cpu");
        assert!(!p.autocast());
    }
}
