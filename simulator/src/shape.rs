//! What one run simulates: the cache every replica runs (its backend and policy) and the
//! origin behind it, drawn from the run's seed.
use std::time::Duration;

/// Where the fleet's cache keeps its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Each replica's own memory.
    Memory,
    /// The shared store only.
    Redis,
    /// Memory in front of the shared store.
    Tiered,
}

/// The cache and origin of one run.
#[derive(Debug, Clone)]
pub struct Shape {
    pub kind: Kind,
    pub coalesce: bool,
    pub fresh: Duration,
    pub stale: Duration,
    pub stale_if_error: Option<Duration>,
    pub xfetch: Option<f64>,
    /// Entries tagged `group:<key mod 2>`.
    pub tags: bool,
    /// Values carry their source version (`invalidate_at`).
    pub versions: bool,
    /// Some calls are batch loads of several keys.
    pub batch: bool,
    pub lease: Duration,
    /// Origin calls at once per replica, or for the whole fleet with `fleet_admission`.
    pub admission: Option<usize>,
    /// The admission is fleet-wide (`scope = "fleet"`), drawn apart from the rest (see
    /// [`Shape::draw_fleet_admission`]).
    pub fleet_admission: bool,
    /// Writes are acknowledged (`Consistency::Acknowledged`; tiered only), drawn apart
    /// from the rest (see [`Shape::draw_acknowledged`]).
    pub acknowledged: bool,
    /// The tiered replicas' `hearing_lease` when not the default (500 ms), drawn apart
    /// from the rest (see [`Shape::draw_hearing_lease`]).
    pub hearing_lease: Option<Duration>,
    /// The longest a writer waits between writing a row and telling the cache, when it
    /// does (an application that commits, then goes on before it invalidates), drawn
    /// apart from the rest (see [`Shape::draw_tell_delay`]).
    pub tell_delay: Option<Duration>,
    /// How long a notice bucket stays subscribed after its last use, when not the
    /// production 60 s, drawn apart from the rest (see [`Shape::draw_bucket_linger`]).
    pub bucket_linger: Option<Duration>,
    /// How many notice buckets the keys are spread over, when not the production 4096,
    /// drawn apart from the rest (see [`Shape::draw_notice_buckets`]).
    pub notice_buckets: Option<u16>,
    /// How many entries each replica's memory holds, when fewer than the keys may need
    /// (else the default), drawn apart from the rest (see [`Shape::draw_capacity`]).
    pub capacity: Option<u64>,
    /// Each caller's deadline.
    pub timeout: Option<Duration>,
    /// The origin call's own deadline (`load_timeout`), drawn apart from the rest (see
    /// [`Shape::draw_load_timeout`]).
    pub load_timeout: Option<Duration>,
    /// How long an origin call takes, drawn uniformly per call.
    pub origin: (Duration, Duration),
    /// How often an origin call fails.
    pub origin_failures: f64,
    pub keys: u64,
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

impl Shape {
    /// A shape drawn from `rng`.
    pub fn draw(rng: &mut fastrand::Rng) -> Self {
        let kind = match rng.u8(0..10) {
            0..=1 => Kind::Memory,
            2..=5 => Kind::Redis,
            _ => Kind::Tiered,
        };
        let fresh = ms(rng.u64(100..3000));
        let stale = if rng.bool() {
            ms(rng.u64(100..3000))
        } else {
            Duration::ZERO
        };
        let origin_low = rng.u64(1..100);
        Shape {
            kind,
            coalesce: rng.u8(0..10) > 0,
            fresh,
            stale,
            stale_if_error: (rng.u8(0..4) == 0).then(|| ms(rng.u64(500..5000))),
            xfetch: (rng.u8(0..4) == 0).then_some(1.0),
            tags: rng.bool(),
            versions: rng.bool(),
            batch: rng.u8(0..4) == 0,
            lease: ms(rng.u64(1000..5000)),
            admission: (rng.u8(0..4) == 0).then(|| rng.usize(1..4)),
            timeout: (rng.u8(0..4) == 0).then(|| ms(rng.u64(100..2000))),
            load_timeout: None,
            fleet_admission: false,
            acknowledged: false,
            hearing_lease: None,
            tell_delay: None,
            bucket_linger: None,
            notice_buckets: None,
            capacity: None,
            origin: (ms(origin_low), ms(origin_low + rng.u64(0..300))),
            origin_failures: if rng.u8(0..4) == 0 { 0.1 } else { 0.0 },
            keys: rng.u64(1..6),
        }
    }

    /// A `load_timeout` for a quarter of the seeds, from a generator of its own: the rest
    /// of a seed's shape, and so its run without one, stays what it was before the
    /// setting existed. Not with batch loads: there it bounds each key's wait for the
    /// batch's one origin call, not the call, which runs on (a documented limit).
    pub fn draw_load_timeout(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x10ad_0000_7173_0000);
        let drawn = (rng.u8(0..4) == 0).then(|| ms(rng.u64(30..400)));
        self.load_timeout = drawn.filter(|_| !self.batch);
    }

    /// A fleet-wide admission for half the seeds with an admission on a shared store, from
    /// a generator of its own, so every other seed runs as before.
    pub fn draw_fleet_admission(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xf1ee_7000_0ad0_0000);
        self.fleet_admission = self.admission.is_some() && self.shared() && rng.bool();
    }

    /// Acknowledged writes for half the tiered seeds, from a generator of their own, so
    /// every other seed runs as before.
    pub fn draw_acknowledged(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xac4e_0000_1ed9_ed00);
        self.acknowledged = self.kind == Kind::Tiered && rng.bool();
    }

    /// A hearing lease other than the default for half the tiered seeds, from a
    /// generator of its own, so every other seed runs as before: a short one (lapsing
    /// under a slow network or a freeze, so copies often go unserved) or a long one (a
    /// replica cut off without a word serves copies for seconds, and a write waits that
    /// long for it).
    pub fn draw_hearing_lease(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x4ea2_0000_1ea5_e000);
        self.hearing_lease = match (self.kind, rng.u8(0..4)) {
            (Kind::Tiered, 0) => Some(ms(rng.u64(100..300))),
            (Kind::Tiered, 1) => Some(ms(rng.u64(1000..4000))),
            _ => None,
        };
    }

    /// For half the seeds, writers that invalidate up to 5 to 300 ms after they wrote
    /// the row (a write-through still inserts at once), from a generator of its own, so
    /// every other seed runs as before. Another replica may load the new row meanwhile,
    /// so the invalidation often arrives late for the value the store holds.
    pub fn draw_tell_delay(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x7e11_0000_de1a_7000);
        self.tell_delay = rng.bool().then(|| ms(rng.u64(5..300)));
    }

    /// For half the seeds with a shared store, notice buckets that linger 20 ms to 3 s
    /// after their last use instead of 60 s, from a generator of its own, so every other
    /// seed runs as before: buckets then go idle, are unsubscribed and subscribed again
    /// while copies, loads and notices of their keys come and go.
    pub fn draw_bucket_linger(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xb0c4_0000_11a9_e200);
        self.bucket_linger = (self.shared() && rng.bool()).then(|| ms(rng.u64(20..3000)));
    }

    /// For a quarter of the seeds with a shared store, one to four notice buckets
    /// instead of 4096, from a generator of its own, so every other seed runs as before:
    /// keys then share buckets, and one key's loads, copies and notices keep or let go of
    /// another's subscription.
    pub fn draw_notice_buckets(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xb0c4_0000_0fe3_b000);
        self.notice_buckets = (self.shared() && rng.u8(0..4) == 0).then(|| rng.u16(1..=4));
    }

    /// For a quarter of the seeds, a memory of one to three entries, from a generator of
    /// its own, so every other seed runs as before: with more keys than that, memory
    /// evicts values, copies and their bookkeeping as the workload goes on.
    pub fn draw_capacity(&mut self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0xca9a_0000_c17e_0000);
        self.capacity = (rng.u8(0..4) == 0).then(|| rng.u64(1..=3));
    }

    /// The permits a replica takes on its own while the store cannot be reached: the
    /// default, a quarter of the limit rounded up.
    pub fn local_limit(&self) -> usize {
        self.admission.map_or(0, |limit| limit.div_ceil(4))
    }

    /// Whether the replicas share a store.
    pub fn shared(&self) -> bool {
        self.kind != Kind::Memory
    }
}
