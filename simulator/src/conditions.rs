//! What the faults in force make of the server and the network.
//!
//! Faults are drawn at random times and overlap: a pause inside another, a slow network
//! inside a lossy one, one clock step inside another. Each fault is a window here, and
//! the world is set from every window open: the server is paused while any pause is, the
//! network slow while any slow window is and lossy while any lossy one is, `INFO` refused
//! while any window refuses it, the server's clock skewed by the latest step still in
//! force. So each fault lasts as long as it was drawn to, whatever ends around it.
//!
//! A killed server comes back unpaused (a paused process killed and started again runs):
//! its restart closes every pause open.
use stampede_runtime::simulation::{Faults, World};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One kind of fault that lasts a while.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Condition {
    Paused,
    Lossy,
    Slow,
    InfoRefused,
    /// The server's clock this far ahead of simulated time (negative: behind).
    Skewed(i64),
}

/// The part of the world a condition sets: the network is one setting, lossy or slow.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Setting {
    Server,
    Network,
    Info,
    Clock,
}

impl Condition {
    fn setting(self) -> Setting {
        match self {
            Condition::Paused => Setting::Server,
            Condition::Lossy | Condition::Slow => Setting::Network,
            Condition::InfoRefused => Setting::Info,
            Condition::Skewed(_) => Setting::Clock,
        }
    }
}

/// A window open, to close with [`Conditions::end`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window(u64, Condition);

pub(crate) struct Conditions {
    world: World,
    /// Whether a window's end ends only its own part (off: as the simulator once ran
    /// them, a fault set the world when it began and set it healthy when it ended, so
    /// the first to end of those touching one setting ended them all, and a slow
    /// network replaced a lossy one).
    apart: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    open: BTreeMap<u64, Condition>,
    /// What the world was last set to.
    applied: Applied,
}

#[derive(Default, Clone, Copy, PartialEq)]
struct Applied {
    paused: bool,
    lossy: bool,
    slow: bool,
    info_refused: bool,
    skew_us: i64,
}

impl Conditions {
    /// The world healthy: no window open.
    pub(crate) fn new(world: World, apart: bool) -> Self {
        Conditions {
            world,
            apart,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn begin(&self, condition: Condition) -> Window {
        let mut state = self.state();
        let number = state.next;
        state.next += 1;
        state.open.insert(number, condition);
        self.apply(&mut state);
        Window(number, condition)
    }

    pub(crate) fn end(&self, window: Window) {
        let mut state = self.state();
        state.open.remove(&window.0);
        if !self.apart {
            let setting = window.1.setting();
            state.open.retain(|_, other| other.setting() != setting);
        }
        self.apply(&mut state);
    }

    /// The server was started again: it runs, whatever pauses were open.
    pub(crate) fn restarted(&self) {
        let mut state = self.state();
        state
            .open
            .retain(|_, condition| *condition != Condition::Paused);
        // The restart itself resumed the server.
        state.applied.paused = false;
        self.apply(&mut state);
    }

    /// Sets the world from the windows open, touching only what changed.
    fn apply(&self, state: &mut State) {
        let open = || state.open.values();
        let latest_network = open().rfind(|c| c.setting() == Setting::Network).copied();
        let network_is = |condition| match self.apart {
            true => open().any(|c| *c == condition),
            false => latest_network == Some(condition),
        };
        let wanted = Applied {
            paused: open().any(|c| *c == Condition::Paused),
            lossy: network_is(Condition::Lossy),
            slow: network_is(Condition::Slow),
            info_refused: open().any(|c| *c == Condition::InfoRefused),
            skew_us: open()
                .filter_map(|c| match c {
                    Condition::Skewed(by_us) => Some(*by_us),
                    _ => None,
                })
                .next_back()
                .unwrap_or(0),
        };
        let set = state.applied;
        if wanted.paused != set.paused {
            if wanted.paused {
                self.world.pause();
            } else {
                self.world.resume();
            }
        }
        if (wanted.lossy, wanted.slow) != (set.lossy, set.slow) {
            self.world.set_faults(network(wanted.lossy, wanted.slow));
        }
        if wanted.info_refused != set.info_refused {
            self.world.set_info_refused(wanted.info_refused);
        }
        if wanted.skew_us != set.skew_us {
            self.world.set_skew(wanted.skew_us);
        }
        state.applied = wanted;
    }
}

/// The network with connections dropping around requests (`lossy`), latency well past the
/// response timeout (`slow`), both or neither.
pub(crate) fn network(lossy: bool, slow: bool) -> Faults {
    let mut faults = if slow {
        Faults::none((
            crate::fleet::RESPONSE_TIMEOUT / 2,
            crate::fleet::RESPONSE_TIMEOUT * 2,
        ))
    } else {
        Faults::none((Duration::from_micros(50), Duration::from_micros(500)))
    };
    if lossy {
        (faults.lost_before, faults.lost_after) = (0.05, 0.05);
    }
    faults
}
