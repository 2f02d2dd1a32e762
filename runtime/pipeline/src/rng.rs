//! Per-sample randomness keyed by (seed, epoch, sample id).
//!
//! A data server must produce the same augmented sample as any other server would, so no RNG
//! state is shared between samples: each sample's stream is seeded by mixing the three keys with
//! SplitMix64's finaliser, and draws continue with SplitMix64 (small, fast, and statistically
//! fine for augmentation parameters).

/// A deterministic random stream for one sample (or any other keyed purpose).
#[derive(Debug, Clone)]
pub struct SampleRng {
    state: u64,
}

/// SplitMix64's output function: a bijective 64-bit mixer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl SampleRng {
    /// The stream of sample `id` of `epoch` in a job seeded with `seed`.
    pub fn new(seed: u64, epoch: u32, id: u64) -> Self {
        let state = mix(mix(mix(seed ^ GOLDEN).wrapping_add(u64::from(epoch))).wrapping_add(id));
        Self { state }
    }

    /// A stream seeded with one number (a Python dataset's image operations are handed a seed
    /// drawn from the generator the worker seeded for the sample).
    pub fn from_seed(seed: u64) -> Self {
        Self {
            state: mix(seed ^ GOLDEN),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }

    /// A float uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A float uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// An integer uniform in `0..n` (`n > 0`), without modulo bias worth measuring.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// The seed of one sample of a Python dataset: what its worker seeds Python's `random`,
/// numpy's and torch's global generators with before `__getitem__`. The first draw of the
/// sample's own stream, so a built-in pipeline and a Python dataset key their randomness the
/// same way, and computed here only: the worker is handed it with the sample's id.
pub fn python_seed(seed: u64, epoch: u32, id: u64) -> u64 {
    SampleRng::new(seed, epoch, id).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_keys_same_stream_other_keys_other_stream() {
        let a: Vec<u64> = (0..4).map(|_| SampleRng::new(1, 2, 3).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = SampleRng::new(1, 2, 3);
        let mut y = SampleRng::new(1, 2, 4);
        let mut z = SampleRng::new(1, 3, 3);
        let (x, y, z) = (x.next_u64(), y.next_u64(), z.next_u64());
        assert!(x != y && x != z && y != z);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = SampleRng::new(7, 0, 0);
        for _ in 0..10_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            assert!(r.below(10) < 10);
            let v = r.uniform(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&v));
        }
    }
}
