//! The clock of in-process freshness. Monotonic; read on every hit, so it must be cheap.
use std::ops::Add;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Where a cache reads the time.
///
/// [`Clock::system`] (the default) is a coarse monotonic clock: one process-wide thread,
/// `stampede-clock`, stores the time every millisecond and a hit reads it with one atomic
/// load (about 1 ns, against 25 ns for `std::time::Instant::now()` on a virtual machine).
/// Freshness deadlines are therefore kept to within about a millisecond while that thread
/// gets the processor; on a machine so starved that it runs late, a value can be served
/// as fresh for as long past its deadline as the thread is late. Recompute times (XFetch's
/// δ) are measured with the precise clock. Should the thread fail to start, every read
/// falls back to the precise clock.
///
/// [`Clock::tokio`] follows Tokio's clock, so tests that pause and advance Tokio time
/// control freshness exactly. Set it for one cache ([`CacheBuilder::clock`]), or for every
/// cache of a runtime, `#[cached]` functions included ([`RuntimeBuilder::clock`]).
///
/// [`CacheBuilder::clock`]: crate::CacheBuilder::clock
/// [`RuntimeBuilder::clock`]: crate::RuntimeBuilder::clock
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{Cache, Clock, Policy};
/// let policy = Policy::builder("t").fresh(Duration::from_secs(1)).build().unwrap();
/// let cache: Cache<u32, u32> = Cache::builder(policy).clock(Clock::tokio()).build();
/// ```
#[derive(Clone, Debug)]
pub struct Clock {
    source: Source,
}

#[derive(Clone, Debug)]
enum Source {
    System(&'static Ticker),
    Tokio { start: tokio::time::Instant },
}

/// The process-wide coarse clock.
#[derive(Debug)]
struct Ticker {
    start: std::time::Instant,
    /// Nanoseconds since `start`, as of the last tick.
    recent: AtomicU64,
    ticking: AtomicBool,
}

const TICK: Duration = Duration::from_millis(1);

impl Ticker {
    fn get() -> &'static Ticker {
        static TICKER: OnceLock<&'static Ticker> = OnceLock::new();
        TICKER.get_or_init(|| {
            let ticker: &'static Ticker = Box::leak(Box::new(Ticker {
                start: std::time::Instant::now(),
                recent: AtomicU64::new(0),
                ticking: AtomicBool::new(false),
            }));
            ticker.tick();
            let spawned = std::thread::Builder::new()
                .name("stampede-clock".into())
                .spawn(move || loop {
                    std::thread::sleep(TICK);
                    ticker.tick();
                });
            ticker.ticking.store(spawned.is_ok(), Ordering::Release);
            ticker
        })
    }

    fn precise(&self) -> Instant {
        Instant(self.start.elapsed().as_nanos() as u64)
    }

    fn tick(&self) {
        self.recent.store(self.precise().0, Ordering::Release);
    }

    #[inline]
    fn recent(&self) -> Instant {
        if self.ticking.load(Ordering::Relaxed) {
            Instant(self.recent.load(Ordering::Acquire))
        } else {
            self.precise()
        }
    }
}

impl Clock {
    /// The process-wide coarse monotonic clock (starts its thread on first use).
    pub fn system() -> Self {
        Clock {
            source: Source::System(Ticker::get()),
        }
    }

    /// Tokio's clock, which tests can pause and advance.
    pub fn tokio() -> Self {
        Clock {
            source: Source::Tokio {
                start: tokio::time::Instant::now(),
            },
        }
    }

    /// The time as the hit path sees it: coarse on the system clock. Inlined: a call
    /// here cost a hit more than the atomic load it wraps.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        match &self.source {
            Source::System(ticker) => ticker.recent(),
            Source::Tokio { start } => Instant(start.elapsed().as_nanos() as u64),
        }
    }

    /// Whether this clock follows real time: moka's own expiry, which frees dead entries,
    /// runs on real time and must not drop an entry a paused clock still serves.
    pub(crate) fn is_real_time(&self) -> bool {
        matches!(self.source, Source::System(_))
    }

    /// The precise time, for measuring how long a recompute took.
    pub(crate) fn precise(&self) -> Instant {
        match &self.source {
            Source::System(ticker) => ticker.precise(),
            Source::Tokio { .. } => self.now(),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

/// A moment on one cache's clock: nanoseconds since the clock was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(u64);

impl Instant {
    pub(crate) fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    #[cfg(test)]
    pub(crate) fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    fn add(self, duration: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(duration.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

/// The monotonic clock of the shared store's bookkeeping (breakers, notice buckets, the
/// server clock's age, tag records): the system's, except in a simulation of the fleet,
/// which runs on Tokio's paused clock and must see all of it move with simulated time.
/// (Tokio's everywhere would read a test's paused clock in its runtime and the real one
/// on the background threads, and compare the two.)
#[cfg(not(feature = "simulation"))]
pub(crate) use std::time::Instant as StoreInstant;
#[cfg(feature = "simulation")]
pub(crate) use tokio::time::Instant as StoreInstant;

/// A moment on the store's monotonic clock as nanoseconds from a fixed origin, so one
/// atomic can hold it (a hearing lease's end, `hearing.rs`).
#[cfg(not(feature = "simulation"))]
pub(crate) fn store_nanos(at: StoreInstant) -> u64 {
    let ticker = Ticker::get();
    at.saturating_duration_since(ticker.start).as_nanos() as u64
}

/// The store's clock now, as [`store_nanos`] counts: the coarse ticker's reading (one
/// atomic load), so a check on a hit costs no system call.
#[cfg(not(feature = "simulation"))]
pub(crate) fn store_nanos_now() -> u64 {
    Ticker::get().recent().0
}

#[cfg(test)]
mod tests;
