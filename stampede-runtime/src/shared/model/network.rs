//! The network between a fleet's replicas and one model server, on simulated time, with
//! the faults a real one has, drawn from a seed.
//!
//! A replica reaches the server as it reaches Redis: through a multiplexed command
//! connection ([`Link`], what `Connection::Model` holds) and a subscription connection
//! ([`Subscription`], what the notice listener holds). Both keep the order of a TCP
//! connection: requests arrive, and replies and messages leave, in the order they were
//! sent. What can go wrong is what goes wrong with Redis:
//! - latency, each way, drawn per request;
//! - a connection dropped before the server read a request, or after it ran it and before
//!   the reply left (the caller sees a connection error either way, and cannot tell);
//! - the server paused (requests and messages wait: a black hole), killed (connections
//!   refused), restarted with or without its data (a new run id, an empty script cache);
//! - a key evicted without a word;
//! - the subscription connection dropped (its messages in between are lost, as Redis
//!   pub/sub loses them), then reconnected by the next command on it, which subscribes
//!   again to what it had (as the `redis` client's automatic resubscription does).
//!
//! Everything is decided under one lock by one seeded random generator, on a
//! current-thread runtime whose clock is paused: the same seed and the same program give
//! the same run.
use super::orphans::{self, Orphans};
use super::server::Server;
use redis::{PushInfo, PushKind, RedisError, RedisResult, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

/// How the network and the server misbehave: each a probability per event, or a range.
#[derive(Debug, Clone)]
pub struct Faults {
    /// One way, drawn uniformly per request, reply and message.
    pub latency: (Duration, Duration),
    /// A request's connection drops before the server reads it.
    pub lost_before: f64,
    /// A request's connection drops after the server ran it, before the reply left.
    pub lost_after: f64,
    /// Establishing a connection again after a drop.
    pub reconnect: Duration,
}

impl Faults {
    /// A healthy network: latency only.
    pub fn none(latency: (Duration, Duration)) -> Self {
        Faults {
            latency,
            lost_before: 0.0,
            lost_after: 0.0,
            reconnect: latency.1,
        }
    }
}

/// One simulated Redis and the connections to it.
pub(crate) struct World {
    state: Mutex<State>,
    /// Woken when a paused server resumes or a killed one restarts.
    resumed: Notify,
}

struct State {
    server: Server,
    up: bool,
    paused: bool,
    restarts: u64,
    rng: fastrand::Rng,
    faults: Faults,
    /// The server clock at the simulation's start, and that start.
    epoch_us: u64,
    start: Instant,
    /// How far the server's clock is ahead of the simulation's (a skewed or replaced server).
    skew_us: i64,
    next_id: u64,
    links: BTreeMap<u64, Line>,
    subscriptions: BTreeMap<u64, Listening>,
    /// What happened to each replica's process, by its label.
    replicas: BTreeMap<String, Process>,
    /// Commands run, for a trace.
    commands: u64,
    /// Leases granted by requests whose reply was lost.
    orphans: Orphans,
}

/// One connection's state: its generation (a drop starts a new one), and when its next
/// request may arrive and its next reply leave (so both stay in order).
#[derive(Default)]
struct Line {
    /// The replica it belongs to.
    replica: String,
    generation: u64,
    arrives: Option<Instant>,
    leaves: Option<Instant>,
}

/// A replica's process as the network sees it.
#[derive(Default, Clone, Copy)]
struct Process {
    /// Killed: its connections are gone for good.
    severed: bool,
    /// Frozen (not scheduled) until then: nothing it sends or receives moves.
    frozen_until: Option<Instant>,
}

struct Listening {
    line: Line,
    connected: bool,
    channels: BTreeSet<Vec<u8>>,
    pushes: mpsc::UnboundedSender<PushInfo>,
    /// When its next message may be delivered.
    delivers: Option<Instant>,
    /// Dropped by the server without a word (see [`World::drop_subscriptions_silently`]):
    /// requests on it go unanswered until the client hears of the loss.
    silent: bool,
}

fn dropped() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

fn refused() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

thread_local! {
    /// The worlds a simulation made on this thread, by name, for `model://<name>` URLs.
    static WORLDS: std::cell::RefCell<BTreeMap<String, Arc<World>>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

impl World {
    /// Makes `world` what `model://<name>` reaches on this thread.
    pub(crate) fn name(world: &Arc<World>, name: &str) {
        WORLDS.with(|worlds| worlds.borrow_mut().insert(name.to_owned(), world.clone()));
    }

    /// Forgets `model://<name>` (the world lives on while runtimes hold it).
    pub(crate) fn forget(name: &str) {
        WORLDS.with(|worlds| worlds.borrow_mut().remove(name));
    }

    /// The world `model://<name>` reaches on this thread.
    pub(crate) fn named(name: &str) -> Option<Arc<World>> {
        WORLDS.with(|worlds| worlds.borrow().get(name).cloned())
    }

    /// A world whose server starts empty, its clock at `epoch_us`, its faults drawn from
    /// `seed`. Must be made on the simulation's runtime (its clock is read now).
    pub(crate) fn new(seed: u64, faults: Faults, epoch_us: u64) -> Arc<Self> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let run_id = run_id(&mut rng);
        Arc::new(World {
            state: Mutex::new(State {
                server: Server::new(run_id),
                up: true,
                paused: false,
                restarts: 0,
                rng,
                faults,
                epoch_us,
                start: Instant::now(),
                skew_us: 0,
                next_id: 0,
                links: BTreeMap::new(),
                subscriptions: BTreeMap::new(),
                replicas: BTreeMap::new(),
                commands: 0,
                orphans: Orphans::default(),
            }),
            resumed: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new command connection of `replica`.
    pub(crate) fn link(self: &Arc<Self>, replica: &str) -> Link {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        let line = Line {
            replica: replica.to_owned(),
            ..Line::default()
        };
        state.links.insert(id, line);
        Link {
            world: self.clone(),
            id,
        }
    }

    /// A new subscription connection of `replica` that pushes what it hears to `pushes`.
    pub(crate) fn subscription(
        self: &Arc<Self>,
        replica: &str,
        pushes: mpsc::UnboundedSender<PushInfo>,
    ) -> Subscription {
        let mut state = self.state();
        state.next_id += 1;
        let id = state.next_id;
        state.subscriptions.insert(
            id,
            Listening {
                line: Line {
                    replica: replica.to_owned(),
                    ..Line::default()
                },
                connected: false,
                channels: BTreeSet::new(),
                pushes,
                delivers: None,
                silent: false,
            },
        );
        Subscription {
            world: self.clone(),
            id,
        }
    }

    /// The server's clock now, in microseconds.
    fn now_us(state: &State) -> u64 {
        let elapsed = Instant::now().duration_since(state.start).as_micros() as i64;
        (state.epoch_us as i64 + elapsed + state.skew_us).max(0) as u64
    }

    /// Runs `command` on the server as one request of connection `id`.
    async fn call(self: &Arc<Self>, id: u64, command: Vec<Vec<u8>>) -> RedisResult<Value> {
        let replica = self.replica_of_link(id);
        self.wait_while_frozen(&replica).await;
        let (generation, arrives, lost_before, lost_after) = {
            let mut state = self.state();
            if state.replicas.get(&replica).is_some_and(|p| p.severed) {
                return Err(refused());
            }
            let State {
                links, rng, faults, ..
            } = &mut *state;
            let Some(line) = links.get_mut(&id) else {
                return Err(refused());
            };
            let latency = draw(rng, faults.latency);
            let arrives = later(Instant::now() + latency, line.arrives);
            line.arrives = Some(arrives);
            let (before, after) = (faults.lost_before, faults.lost_after);
            (
                line.generation,
                arrives,
                rng.f64() < before,
                rng.f64() < after,
            )
        };
        tokio::time::sleep_until(arrives).await;
        self.wait_while_paused().await;
        let leaves = {
            let mut state = self.state();
            if !state.up {
                return Err(refused());
            }
            let line = state.links.entry(id).or_default();
            if line.generation != generation {
                return Err(dropped());
            }
            if lost_before {
                line.generation += 1;
                return Err(dropped());
            }
            let now_us = Self::now_us(&state);
            state.commands += 1;
            let before = orphans::token_before(&state.server, now_us, &command);
            let executed = state.server.execute(now_us, &command);
            let grant = orphans::granted(&state.server, now_us, &command, before.as_deref());
            state.orphans.sent(&replica, &command, Instant::now());
            if let Some(grant) = &grant {
                state.orphans.granted(&replica, grant);
            }
            self.deliver(&mut state, executed.published);
            if lost_after {
                state.links.entry(id).or_default().generation += 1;
                if let Some(grant) = &grant {
                    state.orphans.lost(grant, Instant::now());
                }
                return Err(dropped());
            }
            let State {
                links, rng, faults, ..
            } = &mut *state;
            let line = links.entry(id).or_default();
            let leaves = later(Instant::now() + draw(rng, faults.latency), line.leaves);
            line.leaves = Some(leaves);
            (leaves, executed.reply, grant)
        };
        let (leaves, reply, grant) = leaves;
        tokio::time::sleep_until(leaves).await;
        self.wait_while_frozen(&replica).await;
        let mut state = self.state();
        let delivered = (state.links.get(&id)).is_some_and(|line| line.generation == generation);
        match (delivered, grant) {
            (true, grant) => {
                state
                    .orphans
                    .answered(&replica, grant.as_ref(), Instant::now());
                Ok(reply)
            }
            (false, Some(grant)) => {
                state.orphans.lost(&grant, Instant::now());
                Err(dropped())
            }
            (false, None) => Err(dropped()),
        }
    }

    fn replica_of_link(&self, id: u64) -> String {
        let state = self.state();
        state
            .links
            .get(&id)
            .map(|line| line.replica.clone())
            .unwrap_or_default()
    }

    fn replica_of_subscription(&self, id: u64) -> String {
        let state = self.state();
        let listening = state.subscriptions.get(&id);
        listening
            .map(|l| l.line.replica.clone())
            .unwrap_or_default()
    }

    /// Waits while `replica` is frozen.
    async fn wait_while_frozen(&self, replica: &str) {
        loop {
            let until = self
                .state()
                .replicas
                .get(replica)
                .and_then(|p| p.frozen_until);
            match until {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Waits while the server is paused.
    async fn wait_while_paused(&self) {
        loop {
            let resumed = self.resumed.notified();
            if !self.state().paused {
                return;
            }
            resumed.await;
        }
    }

    /// Schedules `published` to every connected subscription to its channel, each after
    /// its latency, in order per subscription.
    fn deliver(self: &Arc<Self>, state: &mut State, published: Vec<(Vec<u8>, Vec<u8>)>) {
        let State {
            subscriptions,
            rng,
            faults,
            ..
        } = state;
        for (channel, message) in published {
            for (&id, listening) in subscriptions.iter_mut() {
                if !listening.connected || !listening.channels.contains(&channel) {
                    continue;
                }
                let at = later(
                    Instant::now() + draw(rng, faults.latency),
                    listening.delivers,
                );
                listening.delivers = Some(at);
                let data = vec![
                    Value::BulkString(channel.clone()),
                    Value::BulkString(message.clone()),
                ];
                self.push_at(id, listening.line.generation, at, PushKind::Message, data);
            }
        }
    }

    /// Pushes `data` to subscription `id` at `at`, unless its connection (this
    /// `generation` of it) was lost by then: a message in flight is lost with it.
    fn push_at(
        self: &Arc<Self>,
        id: u64,
        generation: u64,
        at: Instant,
        kind: PushKind,
        data: Vec<Value>,
    ) {
        let world = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            world.wait_while_paused().await;
            world
                .wait_while_frozen(&world.replica_of_subscription(id))
                .await;
            let state = world.state();
            if !state.up {
                return;
            }
            if let Some(listening) = state.subscriptions.get(&id)
                && listening.connected
                && listening.line.generation == generation
            {
                let _ = listening.pushes.send(PushInfo { kind, data });
            }
        });
    }
}

/// A 40-hex-digit run id from `rng`, as Redis makes them.
fn run_id(rng: &mut fastrand::Rng) -> String {
    (0..5).map(|_| format!("{:08x}", rng.u32(..))).collect()
}

/// Uniform in `range`.
fn draw(rng: &mut fastrand::Rng, (low, high): (Duration, Duration)) -> Duration {
    if high <= low {
        return low;
    }
    let span = (high - low).as_nanos() as u64;
    low + Duration::from_nanos(rng.u64(..=span))
}

/// `at`, but not before `previous` (a connection keeps its order).
fn later(at: Instant, previous: Option<Instant>) -> Instant {
    previous.map_or(at, |previous| at.max(previous))
}

/// One replica's command connection: what `Connection::Model` holds. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    world: Arc<World>,
    id: u64,
}

impl Link {
    /// Runs one command, its arguments as Redis receives them.
    pub(crate) async fn call(&self, command: Vec<Vec<u8>>) -> RedisResult<Value> {
        self.world.call(self.id, command).await
    }
}

/// One replica's subscription connection: what its notice listener holds.
#[derive(Clone)]
pub(crate) struct Subscription {
    world: Arc<World>,
    id: u64,
}

/// What a subscription connection is asked to do.
enum Ask {
    Subscribe(Vec<Vec<u8>>),
    Unsubscribe(Vec<Vec<u8>>),
    Ping,
}

impl Subscription {
    /// `SUBSCRIBE` to `channels`: confirmed (a `Subscribe` push each, then the reply) a
    /// round trip later.
    pub(crate) async fn subscribe(&self, channels: Vec<Vec<u8>>) -> RedisResult<()> {
        self.world.ask(self.id, Ask::Subscribe(channels)).await
    }

    /// `UNSUBSCRIBE` from `channels`.
    pub(crate) async fn unsubscribe(&self, channels: Vec<Vec<u8>>) -> RedisResult<()> {
        self.world.ask(self.id, Ask::Unsubscribe(channels)).await
    }

    /// `PING` on the subscription's connection.
    pub(crate) async fn ping(&self) -> RedisResult<()> {
        self.world.ask(self.id, Ask::Ping).await
    }
}

impl World {
    /// One request on subscription `id`'s connection. A connection lost since its last
    /// request is made again first, and subscribes again to what it had (each confirmed
    /// by a push), as the `redis` client's automatic resubscription does.
    async fn ask(self: &Arc<Self>, id: u64, ask: Ask) -> RedisResult<()> {
        let replica = self.replica_of_subscription(id);
        self.wait_while_frozen(&replica).await;
        let silent = self
            .state()
            .subscriptions
            .get(&id)
            .is_some_and(|l| l.silent);
        if silent {
            // Nothing comes back: the client's own deadline ends the request.
            std::future::pending::<()>().await;
        }
        let (generation, arrives) = {
            let mut state = self.state();
            let severed = state.replicas.get(&replica).is_some_and(|p| p.severed);
            if !state.up || severed {
                return Err(refused());
            }
            let State {
                subscriptions,
                rng,
                faults,
                ..
            } = &mut *state;
            let Some(listening) = subscriptions.get_mut(&id) else {
                return Err(refused());
            };
            let mut at = Instant::now();
            if !listening.connected {
                listening.connected = true;
                listening.line = Line {
                    generation: listening.line.generation + 1,
                    ..Line::default()
                };
                listening.delivers = None;
                at += faults.reconnect;
                let channels: Vec<_> = listening.channels.iter().cloned().collect();
                let generation = listening.line.generation;
                for channel in channels {
                    at += draw(rng, faults.latency);
                    let data = vec![Value::BulkString(channel), Value::Int(1)];
                    self.push_at(id, generation, at, PushKind::Subscribe, data);
                }
            }
            let arrives = later(at + draw(rng, faults.latency), listening.line.arrives);
            listening.line.arrives = Some(arrives);
            (listening.line.generation, arrives)
        };
        tokio::time::sleep_until(arrives).await;
        self.wait_while_paused().await;
        let leaves = {
            let mut state = self.state();
            if !state.up {
                return Err(refused());
            }
            let State {
                subscriptions,
                rng,
                faults,
                ..
            } = &mut *state;
            let Some(listening) = subscriptions.get_mut(&id) else {
                return Err(refused());
            };
            if listening.line.generation != generation || !listening.connected {
                return Err(dropped());
            }
            let leaves = later(
                Instant::now() + draw(rng, faults.latency),
                listening.line.leaves,
            );
            listening.line.leaves = Some(leaves);
            // Confirmations leave with the reply: after every message sent before them.
            let leaves = later(leaves, listening.delivers);
            listening.delivers = Some(leaves);
            let confirmed = match ask {
                Ask::Subscribe(channels) => {
                    listening.channels.extend(channels.iter().cloned());
                    Some((PushKind::Subscribe, channels))
                }
                Ask::Unsubscribe(channels) => {
                    for channel in &channels {
                        listening.channels.remove(channel);
                    }
                    Some((PushKind::Unsubscribe, channels))
                }
                Ask::Ping => None,
            };
            if let Some((kind, channels)) = confirmed {
                for channel in channels {
                    let data = vec![Value::BulkString(channel), Value::Int(1)];
                    self.push_at(id, generation, leaves, kind.clone(), data);
                }
            }
            leaves
        };
        tokio::time::sleep_until(leaves).await;
        self.wait_while_frozen(&replica).await;
        let state = self.state();
        match state.subscriptions.get(&id) {
            Some(listening) if listening.line.generation == generation && state.up => Ok(()),
            _ => Err(dropped()),
        }
    }

    /// Drops subscription connections, each with probability `share` (drawn in order):
    /// their messages in flight are lost, and each client hears of it at once.
    pub(crate) fn drop_subscriptions(self: &Arc<Self>, share: f64) {
        let mut state = self.state();
        let State {
            subscriptions, rng, ..
        } = &mut *state;
        for listening in subscriptions.values_mut() {
            if listening.connected && rng.f64() < share {
                disconnect(listening);
            }
        }
    }

    /// Drops subscription connections without a word, each with probability `share`: the
    /// server forgets them (what is published from now on is not sent, and requests on
    /// them go unanswered), and the client hears of the loss only `unheard` later (a peer
    /// gone without closing, a connection killed over its output buffer whose close is
    /// late). Meanwhile only its hearing lease tells it anything is wrong.
    pub(crate) fn drop_subscriptions_silently(self: &Arc<Self>, share: f64, unheard: Duration) {
        let mut state = self.state();
        let State {
            subscriptions, rng, ..
        } = &mut *state;
        for (&id, listening) in subscriptions.iter_mut() {
            if !listening.connected || rng.f64() >= share {
                continue;
            }
            listening.connected = false;
            listening.silent = true;
            listening.line.generation += 1;
            listening.delivers = None;
            let world = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(unheard).await;
                let mut state = world.state();
                if let Some(listening) = state.subscriptions.get_mut(&id)
                    && listening.silent
                {
                    listening.silent = false;
                    disconnect(listening);
                }
            });
        }
    }

    /// Drops command connections, each with probability `share`: requests in flight fail.
    pub(crate) fn drop_links(&self, share: f64) {
        let mut state = self.state();
        let State { links, rng, .. } = &mut *state;
        for line in links.values_mut() {
            if rng.f64() < share {
                line.generation += 1;
            }
        }
    }

    /// Stops the server reading and answering (a black hole) until [`World::resume`].
    pub(crate) fn pause(&self) {
        let mut state = self.state();
        state.paused = true;
        state.orphans.outage();
    }

    /// The server reads and answers again. Replies already on their way when it paused
    /// still arrive during the pause: one of those and one after it do not show the server
    /// answered in between either (seed 70259145: a reply that left as the pause began
    /// counted 2.8 s of pause as time the replica was answered).
    pub(crate) fn resume(&self) {
        let mut state = self.state();
        state.paused = false;
        state.orphans.outage();
        drop(state);
        self.resumed.notify_waiters();
    }

    /// Kills the server: connections refused, every connection lost, until
    /// [`World::restart`].
    pub(crate) fn kill(&self) {
        let mut state = self.state();
        state.up = false;
        state.orphans.outage();
        for line in state.links.values_mut() {
            line.generation += 1;
        }
        for listening in state.subscriptions.values_mut() {
            if listening.connected {
                disconnect(listening);
            }
        }
    }

    /// Starts the server again (after a kill, or restarting it now): a new run id, an
    /// empty script cache, the keyspace kept or not (a snapshot, or nothing).
    pub(crate) fn restart(&self, keep_data: bool) {
        self.kill();
        let mut state = self.state();
        state.restarts += 1;
        let run_id = run_id(&mut state.rng);
        state.server.restart(run_id, keep_data);
        state.up = true;
        state.paused = false;
        drop(state);
        self.resumed.notify_waiters();
    }

    /// Evicts one live key, drawn at random, as `allkeys-lru` might; the key evicted.
    pub(crate) fn evict_one(&self) -> Option<Vec<u8>> {
        let mut state = self.state();
        let now_us = Self::now_us(&state);
        let keys = state.server.keys(now_us);
        if keys.is_empty() {
            return None;
        }
        let key = keys[state.rng.usize(..keys.len())].clone();
        state.server.evict(&key);
        Some(key)
    }

    /// The server's clock runs `skew` ahead (negative: behind) of simulated time.
    pub(crate) fn set_skew(&self, skew_us: i64) {
        self.state().skew_us = skew_us;
    }

    pub(crate) fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    pub(crate) fn set_memory_full(&self, full: bool) {
        self.state().server.set_memory_full(full);
    }

    pub(crate) fn set_info_refused(&self, refused: bool) {
        self.state().server.set_info_refused(refused);
    }

    /// Cuts `replica`'s connections for good: a killed process.
    pub(crate) fn sever(&self, replica: &str) {
        let mut state = self.state();
        state
            .replicas
            .entry(replica.to_owned())
            .or_default()
            .severed = true;
        state.orphans.excuse(replica);
        for line in state
            .links
            .values_mut()
            .filter(|line| line.replica == replica)
        {
            line.generation += 1;
        }
        let subscriptions = state.subscriptions.values_mut();
        for listening in subscriptions.filter(|l| l.line.replica == replica && l.connected) {
            disconnect(listening);
        }
    }

    /// Holds everything `replica` sends and receives for `duration`: a frozen process.
    pub(crate) fn freeze(&self, replica: &str, duration: Duration) {
        let until = Instant::now() + duration;
        let mut state = self.state();
        let process = state.replicas.entry(replica.to_owned()).or_default();
        process.frozen_until = Some(process.frozen_until.map_or(until, |u| u.max(until)));
        state.orphans.excuse(replica);
    }

    /// How many live keys end with `suffix`.
    pub(crate) fn keys_ending(&self, suffix: &[u8]) -> usize {
        let state = self.state();
        let now_us = Self::now_us(&state);
        state
            .server
            .keys(now_us)
            .iter()
            .filter(|key| key.ends_with(suffix))
            .count()
    }

    /// Each lease granted by a request whose reply was lost that its replica did not
    /// release within `bound` of its next answer, said in a line (see `orphans.rs`).
    pub(crate) fn orphans_unreleased(&self, bound: Duration) -> Vec<String> {
        let state = self.state();
        (state.orphans).unreleased(bound, state.start)
    }

    /// Commands the server ran so far.
    pub(crate) fn commands(&self) -> u64 {
        self.state().commands
    }
}

/// Loses `listening`'s connection and tells its client.
fn disconnect(listening: &mut Listening) {
    listening.connected = false;
    listening.line.generation += 1;
    listening.delivers = None;
    let _ = listening.pushes.send(PushInfo {
        kind: PushKind::Disconnection,
        data: Vec::new(),
    });
}

/// A command's arguments as Redis receives them.
pub(crate) fn arguments(command: &redis::Cmd) -> Vec<Vec<u8>> {
    command
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
            // A cursor stands for a number the client fills in: stampede sends none.
            _ => None,
        })
        .collect()
}
