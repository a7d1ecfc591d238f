//! A skewed key stream, for tests of what a cache tells about its hottest keys.

/// Draws keys from `0..10_000`: key 0 with probability 0.3, the others by Zipf (s = 1),
/// from a seeded generator, so a test sees the same stream on every run.
pub struct Skewed {
    cumulative: Vec<f64>,
    rng: fastrand::Rng,
}

impl Skewed {
    /// The stream drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        let weights: Vec<f64> = (1..10_000).map(|rank| 1.0 / rank as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut sum = 0.3;
        let mut cumulative = vec![sum];
        for weight in weights {
            sum += 0.7 * weight / total;
            cumulative.push(sum);
        }
        Skewed {
            cumulative,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The next key.
    pub fn next_key(&mut self) -> u64 {
        let draw = self.rng.f64();
        self.cumulative.partition_point(|&c| c < draw).min(9_999) as u64
    }
}
