//! What a deterministic simulator of the fleet needs from the runtime (feature
//! `simulation`; not for production builds): a simulated Redis server and network
//! ([`World`]) that runtimes reach with `model://<world>/<replica>` URLs, and a way to run
//! the store's background work on the simulation's own runtime.
//!
//! A simulation runs every replica on one current-thread Tokio runtime whose clock is
//! paused, with `fastrand` seeded on that thread, so the same seed gives the same run.
use crate::shared::model::network;
use std::sync::Arc;
use std::time::Duration;

pub use network::Faults;

/// A simulated Redis server and the network to it.
#[derive(Clone)]
pub struct World(Arc<network::World>, Arc<str>);

impl World {
    /// A world whose server starts empty, its clock at `epoch_us` (Unix microseconds),
    /// its faults drawn from `seed`, reached as `model://<name>/<replica>` on this thread.
    /// Make it inside the simulation's runtime.
    pub fn new(name: &str, seed: u64, faults: Faults, epoch_us: u64) -> Self {
        let world = network::World::new(seed, faults, epoch_us);
        network::World::name(&world, name);
        World(world, name.into())
    }

    /// No new runtime reaches it any more by its name (those made still do).
    pub fn forget(&self) {
        network::World::forget(&self.1);
    }

    /// Stops answering (a black hole) until [`World::resume`].
    pub fn pause(&self) {
        self.0.pause();
    }

    pub fn resume(&self) {
        self.0.resume();
    }

    /// Kills the server: every connection lost and refused until [`World::restart`].
    pub fn kill(&self) {
        self.0.kill();
    }

    /// Starts the server again with a new run id, with its data (a snapshot) or without.
    pub fn restart(&self, keep_data: bool) {
        self.0.restart(keep_data);
    }

    /// Evicts one live key at random; the key.
    pub fn evict_one(&self) -> Option<Vec<u8>> {
        self.0.evict_one()
    }

    /// Drops each subscription connection with probability `share`.
    pub fn drop_subscriptions(&self, share: f64) {
        self.0.drop_subscriptions(share);
    }

    /// Drops each subscription connection with probability `share` without a word: the
    /// server forgets it, and its client hears of the loss `unheard` later.
    pub fn drop_subscriptions_silently(&self, share: f64, unheard: std::time::Duration) {
        self.0.drop_subscriptions_silently(share, unheard);
    }

    /// Drops each command connection with probability `share`.
    pub fn drop_links(&self, share: f64) {
        self.0.drop_links(share);
    }

    /// Cuts `replica`'s connections for good (a killed process), or holds them until
    /// `until` (a frozen one).
    pub fn sever(&self, replica: &str) {
        self.0.sever(replica);
    }

    /// Holds everything `replica` sends and receives for `duration` (a frozen process).
    pub fn freeze(&self, replica: &str, duration: Duration) {
        self.0.freeze(replica, duration);
    }

    pub fn set_faults(&self, faults: Faults) {
        self.0.set_faults(faults);
    }

    /// The server's clock runs `skew_us` ahead of simulated time (negative: behind).
    pub fn set_skew(&self, skew_us: i64) {
        self.0.set_skew(skew_us);
    }

    pub fn set_memory_full(&self, full: bool) {
        self.0.set_memory_full(full);
    }

    /// Refuses `INFO` to the scripts, as to an ACL user without `@dangerous`.
    pub fn set_info_refused(&self, refused: bool) {
        self.0.set_info_refused(refused);
    }

    /// Commands the server ran.
    pub fn commands(&self) -> u64 {
        self.0.commands()
    }

    /// Leases the server holds now (their keys alive).
    pub fn leases(&self) -> usize {
        self.0.keys_ending(b":lease")
    }

    /// Each lease granted by a read whose reply was lost that its replica did not release
    /// (send its token again) within `bound` of the server's next answer to it (frozen
    /// and killed replicas excused), said in a line: `docs/fleet.md` promises such a
    /// lease is released by its token as soon as Redis answers.
    pub fn orphaned_leases_unreleased(&self, bound: Duration) -> Vec<String> {
        self.0.orphans_unreleased(bound)
    }
}

/// Runs the store's background work (heartbeats, subscriptions, replays) spawned from
/// this thread on `runtime` (the simulation's), or on the background threads again
/// with `None`.
pub fn run_store_work_on(runtime: Option<tokio::runtime::Handle>) {
    crate::shared::background::simulate_on(runtime);
}

/// How long a notice bucket stays subscribed after its last use ends, for the replicas
/// of this thread's simulation (`None`: the production value, 60 s). A short one makes
/// buckets go idle and be subscribed again within a run.
pub fn set_bucket_linger(linger: Option<Duration>) {
    crate::shared::redis::simulate_linger(linger);
}

/// How many notice buckets the keys of this thread's simulation are spread over (`None`:
/// the production count, 4096). A few make keys share buckets, so one key's loads,
/// copies and notices keep or let go of another's subscription.
pub fn set_notice_buckets(buckets: Option<u16>) {
    crate::shared::redis::simulate_buckets(buckets);
}
