//! A deterministic simulator of a stampede fleet.
//!
//! One run, from one seed: a shape (the cache every replica runs and the origin behind
//! it), a fleet of replicas (separate `Runtime`s) on a model Redis reached through a
//! simulated network, and a workload of callers, writers (a row written, then the cache
//! told: `invalidate`, `invalidate_at`, `invalidate_tag` or a write-through `insert`) and,
//! in runs with faults, faults of the server, the network and the replicas. Everything
//! runs on one current-thread Tokio runtime on a paused clock, `fastrand` seeded on that
//! thread: minutes of fleet time take milliseconds, and the same seed gives the same run.
//! The [`checker`] then reads the run's [`history`] and names every guarantee it broke.
pub mod checker;
mod conditions;
pub mod fleet;
pub mod history;
pub mod shape;

use conditions::{Condition, Conditions};
use fleet::{Database, Epoch, Origin, Replica, SimError};
use history::{Event, History, How, Outcome};
use shape::Shape;
use stampede_runtime::simulation::{self, Faults, World};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// What a run simulates beyond its seed.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many replicas: drawn per seed within this range (both ends included).
    pub replicas: (usize, usize),
    /// Calls, writes and faults in all.
    pub operations: usize,
    /// Whether faults are injected (each seed's shape draws which).
    pub faults: bool,
    /// Whether a quarter of the seeds set `load_timeout` (off: each seed runs as it did
    /// before the setting existed).
    pub load_timeouts: bool,
    /// Whether half the seeds with an admission on a shared store make it fleet-wide
    /// (off: each seed runs as it did before fleet-wide admission existed).
    pub fleet_admission: bool,
    /// Whether half the tiered seeds acknowledge their writes (off: each seed runs as it
    /// did before acknowledged writes existed, but for the hearing lease every tiered
    /// replica now keeps).
    pub acknowledged: bool,
    /// Whether half the tiered seeds draw a hearing lease other than the default (off:
    /// each seed runs as it did before the draw existed).
    pub hearing_leases: bool,
    /// Whether each fault lasts as long as it was drawn to, whatever overlaps it (off:
    /// the first of two overlapping pauses to end resumed the server, as each seed ran
    /// before; see `conditions`).
    pub faults_end_apart: bool,
    /// Whether half the seeds' writers tell the cache a while after they wrote the row
    /// (off: each seed runs as it did before the delay existed).
    pub tell_delays: bool,
    /// Whether half the seeds with a shared store let notice buckets go idle within the
    /// run (off: each seed runs as it did before the draw existed).
    pub short_lingers: bool,
    /// Whether a quarter of the seeds with a shared store spread their keys over one to
    /// four notice buckets (off: each seed runs as it did before the draw existed).
    pub few_buckets: bool,
    /// Whether a quarter of the seeds keep one to three entries in each replica's memory
    /// (off: each seed runs as it did before the draw existed).
    pub small_memories: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            replicas: (4, 4),
            operations: 200,
            faults: true,
            load_timeouts: true,
            fleet_admission: true,
            acknowledged: true,
            hearing_leases: true,
            faults_end_apart: true,
            tell_delays: true,
            short_lingers: true,
            few_buckets: true,
            small_memories: true,
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub replicas: usize,
    pub shape: Shape,
    /// Whether this run injected faults.
    pub faulty: bool,
    /// Each broken guarantee, said in a line.
    pub violations: Vec<String>,
    /// Every event, in order.
    pub events: Vec<Event>,
    pub calls: usize,
    pub origin_calls: usize,
    /// Simulated time the run took.
    pub simulated: Duration,
}

impl Report {
    /// The run's events, a line each, for a failing seed.
    pub fn trace(&self) -> String {
        let mut trace = format!(
            "seed {} ({:?}, faults: {})\n",
            self.seed, self.shape, self.faulty
        );
        for event in &self.events {
            trace.push_str(&format!("  {event}\n"));
        }
        trace
    }

    /// A digest of the run's events (a fixed-key hash of the trace): equal for two runs
    /// of one seed exactly when they replayed alike.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        for event in &self.events {
            event.to_string().hash(&mut hasher);
        }
        hasher.finish()
    }
}

/// The Unix time the simulated server's clock starts at (a fixed day, so runs agree).
const EPOCH_US: u64 = 1_800_000_000_000_000;
/// How long the workload is spread over.
const WORKLOAD: Duration = Duration::from_secs(20);
/// The longest any call may take before the harness calls it hung.
const HANG: Duration = Duration::from_secs(120);

/// Runs seed `seed` and checks it.
pub fn run(seed: u64, config: &Config) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    simulation::run_store_work_on(Some(runtime.handle().clone()));
    fastrand::seed(seed);
    // The runtime's own events, each stamped with simulated time, when asked for.
    let _logging = std::env::var("STAMPEDE_SIMULATION_LOG").ok().map(|level| {
        let level = level.parse().unwrap_or(tracing::Level::DEBUG);
        let start = runtime.block_on(async { Instant::now() });
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_timer(SimulatedTime(start))
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .finish();
        tracing::subscriber::set_default(subscriber)
    });
    let report = runtime.block_on(simulate(seed, config));
    simulation::run_store_work_on(None);
    simulation::set_bucket_linger(None);
    simulation::set_notice_buckets(None);
    drop(runtime);
    report
}

/// Simulated time since the run began, for log lines.
struct SimulatedTime(Instant);

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let elapsed = Instant::now().saturating_duration_since(self.0);
        write!(w, "{:.6}s", elapsed.as_secs_f64())
    }
}

/// One operation of the workload.
#[derive(Debug, Clone)]
enum Op {
    Call {
        replica: usize,
        key: u64,
    },
    /// A batch load of several keys (`load_many`): one origin call for the ones missing.
    Batch {
        replica: usize,
        keys: Vec<u64>,
    },
    /// A row written, then the cache told `tell_after` later.
    Write {
        replica: usize,
        key: u64,
        how: How,
        tell_after: Duration,
    },
    Fault(Fault),
}

#[derive(Debug, Clone)]
enum Fault {
    /// The server stops answering for a while.
    Pause(Duration),
    /// The server dies, and comes back after a while with its data or without.
    Kill { down: Duration, keep_data: bool },
    /// Keys evicted without a word.
    Evict(usize),
    /// Subscription connections dropped: each client hears of it at once, or (`unheard`)
    /// only that much later, the server having forgotten it meanwhile.
    DropSubscriptions { unheard: Option<Duration> },
    /// Command connections dropped (requests in flight fail, some after they ran).
    DropLinks,
    /// Connections drop around requests for a while.
    Lossy(Duration),
    /// The scripts may not run `INFO` (a least-privilege ACL user) for a while.
    NoInfo(Duration),
    /// Latency well past the response timeout for a while.
    Slow(Duration),
    /// A replica's process stops being scheduled for a while.
    Freeze { replica: usize, duration: Duration },
    /// A replica's process dies; a new one takes its place.
    Replace { replica: usize },
    /// The server's clock steps ahead or back for a while (an NTP step, a failover to a
    /// host whose clock differs).
    Skew { by_us: i64, duration: Duration },
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

impl Fault {
    fn draw(rng: &mut fastrand::Rng, replicas: usize) -> Self {
        match rng.u8(0..9) {
            0 => Fault::Pause(ms(rng.u64(50..3000))),
            1 => Fault::Kill {
                down: ms(rng.u64(50..3000)),
                keep_data: rng.bool(),
            },
            2 => Fault::Evict(rng.usize(1..4)),
            3 => Fault::DropSubscriptions {
                unheard: rng.bool().then(|| ms(rng.u64(100..2000))),
            },
            4 => Fault::DropLinks,
            5 => Fault::Lossy(ms(rng.u64(100..2000))),
            6 if rng.bool() => Fault::NoInfo(ms(rng.u64(100..5000))),
            6 => Fault::Slow(ms(rng.u64(100..2000))),
            7 if rng.u8(0..4) == 0 => Fault::Skew {
                by_us: rng.i64(-50_000..=50_000),
                duration: ms(rng.u64(100..3000)),
            },
            7 => Fault::Freeze {
                replica: rng.usize(0..replicas),
                duration: ms(rng.u64(50..2500)),
            },
            _ => Fault::Replace {
                replica: rng.usize(0..replicas),
            },
        }
    }
}

/// The healthy network: 50 to 500 µs each way.
fn healthy() -> Faults {
    conditions::network(false, false)
}

/// The fleet as the workload sees it: each replica slot's current process.
#[derive(Clone)]
struct Fleet {
    slots: Arc<Mutex<Vec<Replica>>>,
    world: String,
    shape: Arc<Shape>,
    /// Until when each replica is frozen (no call starts on it meanwhile).
    frozen: Arc<Mutex<Vec<Option<Instant>>>>,
    /// Replicas started in place of killed ones so far.
    replaced: Arc<AtomicUsize>,
}

impl Fleet {
    fn replica(&self, index: usize) -> Replica {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)[index].clone()
    }

    fn frozen_until(&self, index: usize) -> Option<Instant> {
        let frozen = self.frozen.lock().unwrap_or_else(PoisonError::into_inner);
        frozen[index].filter(|until| *until > Instant::now())
    }
}

/// A draw of part of a seed's shape, from the seed.
type Draw = fn(&mut Shape, u64);

async fn simulate(seed: u64, config: &Config) -> Report {
    let started = Instant::now();
    let epoch = Epoch(started);
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_5eed_5eed_5eed);
    let mut shape = Shape::draw(&mut rng);
    // Each drawn apart from the rest of the shape, from a generator of its own and in
    // this order, so a flag turned off runs every seed as it ran before its draw existed.
    let draws: [(bool, Draw); 8] = [
        (config.load_timeouts, Shape::draw_load_timeout),
        (config.fleet_admission, Shape::draw_fleet_admission),
        (config.acknowledged, Shape::draw_acknowledged),
        (config.hearing_leases, Shape::draw_hearing_lease),
        (config.tell_delays, Shape::draw_tell_delay),
        (config.short_lingers, Shape::draw_bucket_linger),
        (config.few_buckets, Shape::draw_notice_buckets),
        (config.small_memories, Shape::draw_capacity),
    ];
    for (on, draw) in draws {
        if on {
            draw(&mut shape, seed);
        }
    }
    simulation::set_bucket_linger(shape.bucket_linger);
    simulation::set_notice_buckets(shape.notice_buckets);
    let shape = Arc::new(shape);
    // Each write's delay, from a generator of its own, so the rest of the run is drawn
    // as before.
    let mut tells = fastrand::Rng::with_seed(seed ^ 0x7e11_0000_0000_de1a);
    let (fewest, most) = config.replicas;
    let replicas = rng.usize(fewest.max(1)..=most.max(fewest).max(1));
    let faulty = config.faults && shape.shared() && rng.bool();
    let name = format!("sim-{seed:x}");
    let world = World::new(&name, seed.rotate_left(17), healthy(), EPOCH_US);
    let conditions = Arc::new(Conditions::new(world.clone(), config.faults_end_apart));
    let history = History::default();
    let origin = Origin {
        database: Database::default(),
        rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(seed.rotate_left(31)))),
        history: history.clone(),
        epoch,
        shape: shape.clone(),
        batches: Arc::default(),
    };
    let fleet = Fleet {
        slots: Arc::new(Mutex::new(
            (0..replicas)
                .map(|i| Replica::start(i, format!("r{i}"), &name, &shape))
                .collect(),
        )),
        world: name.clone(),
        shape: shape.clone(),
        frozen: Arc::new(Mutex::new(vec![None; replicas])),
        replaced: Arc::default(),
    };
    let horizon = WORKLOAD.as_micros() as u64;
    let mut ops: Vec<(u64, Op)> = (0..config.operations)
        .map(|_| {
            let at = rng.u64(0..horizon);
            let replica = rng.usize(0..replicas);
            let key = rng.u64(0..shape.keys);
            let op = match rng.u8(0..20) {
                0..=2 => {
                    let mut hows = vec![How::Invalidate, How::Insert];
                    if shape.versions {
                        hows.push(How::InvalidateAt);
                    }
                    if shape.tags {
                        hows.push(How::Tag);
                    }
                    let how = hows[rng.usize(0..hows.len())];
                    let tell_after = shape.tell_delay.map_or(Duration::ZERO, |longest| {
                        Duration::from_micros(tells.u64(0..=longest.as_micros() as u64))
                    });
                    Op::Write {
                        replica,
                        key,
                        how,
                        tell_after,
                    }
                }
                3 if faulty => Op::Fault(Fault::draw(&mut rng, replicas)),
                4 if shape.batch => {
                    let keys = (0..shape.keys).filter(|_| rng.bool()).collect::<Vec<_>>();
                    Op::Batch { replica, keys }
                }
                _ => Op::Call { replica, key },
            };
            (at, op)
        })
        .collect();
    ops.sort_by_key(|(at, _)| *at);
    let tasks: Vec<_> = ops
        .into_iter()
        .map(|(at, op)| {
            let at = started + Duration::from_micros(at);
            let context = Context {
                fleet: fleet.clone(),
                world: world.clone(),
                conditions: conditions.clone(),
                origin: origin.clone(),
                history: history.clone(),
                epoch,
            };
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                context.run(op).await;
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    // A replica frozen past the workload's end replays what it owes only once it thaws
    // (seed 53107459: frozen until 1.4 s before the quiet period ended, it still owed).
    let thaws = (fleet.frozen.lock().unwrap_or_else(PoisonError::into_inner))
        .iter()
        .flatten()
        .max()
        .copied();
    if let Some(thaws) = thaws {
        tokio::time::sleep_until(thaws).await;
    }
    // Quiet: the server up and answering, then long enough for every lease, replay and
    // linger to run out.
    world.resume();
    world.set_faults(healthy());
    let quiet = shape.lease + Duration::from_secs(2);
    tokio::time::sleep(quiet).await;
    let mut quiescent = Vec::new();
    let processes = fleet
        .slots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for replica in &processes {
        let fleet = replica.runtime.fleet_admission("db");
        quiescent.push(checker::Quiescent {
            replica: replica.index,
            in_flight: replica.cache.stats().in_flight,
            queued: replica
                .runtime
                .backend_stats()
                .map_or(0, |stats| stats.invalidations_queued),
            permits_held: fleet.as_ref().map_or(0, |fleet| fleet.held),
            local_permits: fleet.as_ref().map_or(0, |fleet| fleet.local_total),
        });
    }
    let leases = if shape.shared() { world.leases() } else { 0 };
    let orphaned = world.orphaned_leases_unreleased(checker::ORPHAN_RELEASE);
    world.forget();
    let events = history.events();
    let violations = checker::check(&shape, faulty, &events, &quiescent, leases, &orphaned);
    let calls = events
        .iter()
        .filter(|e| matches!(e, Event::Call { .. }))
        .count();
    let origin_calls = events
        .iter()
        .filter(|e| matches!(e, Event::Origin { .. }))
        .count();
    drop(processes);
    drop(fleet);
    Report {
        seed,
        replicas,
        shape: (*shape).clone(),
        faulty,
        violations,
        events,
        calls,
        origin_calls,
        simulated: started.elapsed(),
    }
}

/// What an operation's task works with.
struct Context {
    fleet: Fleet,
    world: World,
    conditions: Arc<Conditions>,
    origin: Origin,
    history: History,
    epoch: Epoch,
}

impl Context {
    async fn run(self, op: Op) {
        match op {
            Op::Call { replica, key } => self.call(replica, key).await,
            Op::Batch { replica, keys } => self.batch(replica, keys).await,
            Op::Write {
                replica,
                key,
                how,
                tell_after,
            } => self.write(replica, key, how, tell_after).await,
            Op::Fault(fault) => self.fault(fault).await,
        }
    }

    async fn call(&self, slot: usize, key: u64) {
        // A frozen process takes no calls; this one arrives when it thaws.
        if let Some(until) = self.fleet.frozen_until(slot) {
            tokio::time::sleep_until(until).await;
        }
        let replica = self.fleet.replica(slot);
        let index = replica.index;
        let origin = self.origin.clone();
        let start = self.epoch.now();
        let load = replica.cache.load(key, move || origin.call(index, key));
        let outcome = match tokio::time::timeout(HANG, load).await {
            Ok(Ok(Some((_, version, read_at)))) => Outcome::Value { version, read_at },
            Ok(Ok(None)) => Outcome::Error("no value".into()),
            Ok(Err(SimError::Origin)) => Outcome::Error("origin".into()),
            Ok(Err(SimError::Cache(error))) => Outcome::Error(error.to_string()),
            Err(_) => Outcome::Hung,
        };
        self.history.record(Event::Call {
            replica: index,
            key,
            start,
            end: self.epoch.now(),
            outcome,
            batch: false,
        });
    }

    async fn batch(&self, slot: usize, keys: Vec<u64>) {
        if let Some(until) = self.fleet.frozen_until(slot) {
            tokio::time::sleep_until(until).await;
        }
        let replica = self.fleet.replica(slot);
        let index = replica.index;
        let origin = self.origin.clone();
        let start = self.epoch.now();
        let load = replica
            .cache
            .load_many(keys.clone(), move |keys| origin.clone().batch(index, keys));
        let answered = tokio::time::timeout(HANG, load).await;
        let end = self.epoch.now();
        for key in keys {
            let outcome = match &answered {
                Ok(Ok(found)) => match found.get(&key) {
                    Some(&(_, version, read_at)) => Outcome::Value { version, read_at },
                    None => Outcome::Error("not found".into()),
                },
                Ok(Err(SimError::Origin)) => Outcome::Error("origin".into()),
                Ok(Err(SimError::Cache(error))) => Outcome::Error(error.to_string()),
                Err(_) => Outcome::Hung,
            };
            self.history.record(Event::Call {
                replica: index,
                key,
                start,
                end,
                outcome,
                batch: true,
            });
        }
    }

    async fn write(&self, slot: usize, key: u64, how: How, tell_after: Duration) {
        if let Some(until) = self.fleet.frozen_until(slot) {
            tokio::time::sleep_until(until).await;
        }
        let replica = self.fleet.replica(slot);
        let index = replica.index;
        let start = self.epoch.now();
        let version = self.origin.database.write(key);
        // A write-through inserts what it wrote at once: inserted late, a row another
        // writer replaced meanwhile would be the application's lost update, which no cache
        // can tell from a newer value.
        if how != How::Insert && !tell_after.is_zero() {
            tokio::time::sleep(tell_after).await;
        }
        // An inserted value is as old as the insert: the runtime counts its age from there.
        let told = self.epoch.now();
        let answer = match how {
            How::Invalidate => replica.cache.invalidate(&key).await,
            How::InvalidateAt => replica.cache.invalidate_at(&key, version).await,
            How::Tag => replica.cache.invalidate_tag(&fleet::group(key)).await,
            How::Insert => replica.cache.insert(key, Some((key, version, told))).await,
        };
        self.history.record(Event::Write {
            replica: index,
            key,
            version,
            how,
            start,
            told,
            end: self.epoch.now(),
            ok: answer.is_ok(),
        });
    }

    /// `condition` for `duration`, whatever other faults begin and end meanwhile.
    async fn lasting(&self, condition: Condition, duration: Duration) {
        let window = self.conditions.begin(condition);
        tokio::time::sleep(duration).await;
        self.conditions.end(window);
    }

    async fn fault(&self, fault: Fault) {
        let at = self.epoch.now();
        self.history.record(Event::Fault {
            at,
            what: format!("{fault:?}"),
        });
        match fault {
            Fault::Pause(duration) => self.lasting(Condition::Paused, duration).await,
            Fault::Kill { down, keep_data } => {
                self.world.kill();
                tokio::time::sleep(down).await;
                self.world.restart(keep_data);
                self.conditions.restarted();
            }
            Fault::Evict(keys) => {
                for _ in 0..keys {
                    self.world.evict_one();
                }
            }
            Fault::DropSubscriptions { unheard: None } => self.world.drop_subscriptions(0.5),
            Fault::DropSubscriptions {
                unheard: Some(unheard),
            } => self.world.drop_subscriptions_silently(0.5, unheard),
            Fault::DropLinks => self.world.drop_links(0.5),
            Fault::Lossy(duration) => self.lasting(Condition::Lossy, duration).await,
            Fault::Skew { by_us, duration } => {
                self.lasting(Condition::Skewed(by_us), duration).await;
            }
            Fault::NoInfo(duration) => self.lasting(Condition::InfoRefused, duration).await,
            Fault::Slow(duration) => self.lasting(Condition::Slow, duration).await,
            Fault::Freeze {
                replica: slot,
                duration,
            } => {
                let replica = self.fleet.replica(slot);
                let until = Instant::now() + duration;
                self.fleet
                    .frozen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)[slot] = Some(until);
                self.world.freeze(&replica.label, duration);
                self.history.record(Event::Frozen {
                    replica: replica.index,
                    start: at,
                    end: at + duration.as_micros() as u64,
                });
            }
            Fault::Replace { replica: slot } => {
                let old = self.fleet.replica(slot);
                self.world.sever(&old.label);
                // A process of its own in the history: the old one's loads may still run.
                let mut slots = self
                    .fleet
                    .slots
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let index = slots.len() + self.fleet.replaced.fetch_add(1, Ordering::Relaxed);
                let label = format!("r{index}");
                slots[slot] = Replica::start(index, label, &self.fleet.world, &self.fleet.shape);
                self.history.record(Event::Fault {
                    at,
                    what: format!("r{} replaced by r{index}", old.index),
                });
            }
        }
    }
}
