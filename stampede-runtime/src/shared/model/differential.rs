//! The differential test: the model of the server against a real `redis-server`, and
//! against each master of a local Redis Cluster.
//!
//! Seeded sequences of the commands stampede sends (each script's arguments built as
//! `ops.rs`, `tags.rs` and `permits.rs` build them, with fences, tokens and run ids taken
//! from earlier replies or stale on purpose, envelopes from `wire`, an operator's damage,
//! memory full, `INFO` refused, a restart, real sleeps so leases, values and permits
//! expire and the permits' fair split turns its remainder; a quarter of the sequences
//! mostly permits, over several turns) run on both, one command at a time. Each command goes to Redis in one pipeline with what observes it:
//!
//! ```text
//! TIME · the command · TIME · PUBLISH <marker> · TIME · TYPE/PEXPIRETIME/GET/HGETALL of every key · TIME
//! ```
//!
//! so the server's clock is known to within the command (the window), a subscriber on
//! every channel collects what the command published up to the marker, and the keyspace
//! after it is read. The model runs the same command at the window's start, and, if the
//! two disagree, at each later millisecond of the window (Redis reads its clock several
//! times in one command; the model once). A command agrees when its reply, its messages
//! and the keyspace after it agree (a hash's fields and values as a set: Redis lists a small
//! hash's in the order they were written, the model in order), where:
//! - values Redis derives from its clock may differ within the window: a TTL, an expiry,
//!   the `TIME` reply, a tag's version (microseconds), the lease's time left in `read`;
//!   everything else is exact, fences made from the clock included (the window's
//!   millisecond that gives Redis's `TIME` gives its fences too);
//! - a key that expires within the window may be there on one side only, and a command
//!   whose own keys expire within its window may go either way (Redis checks expiry at
//!   the script's start and reads `TIME` and `PTTL` later): such a command is counted as
//!   undecided, and the model takes Redis's keyspace.
//!
//! After every command the model takes Redis's keyspace (values and expiries), so a
//! difference the clock allows never grows into a false one over a sequence; the
//! keyspace was compared first, so nothing the model got wrong is carried over unseen.
//! At the end of each sequence, a full `SCAN` of each side must name the same keys.
//!
//! `STAMPEDE_DIFFERENTIAL_SEQUENCES=N` runs N sequences on each (a soak; on one server, in
//! four parts side by side);
//! `STAMPEDE_DIFFERENTIAL_SEED=S` starts the seeds at S. A failure names the seed and the
//! command's index; the commands it prints replay it, except for the server's clock.
use super::server::Server;
use crate::shared::keys::{admission_key, hearing_key, notice_channel, tag_key, EntryKey, LAYOUT};
use crate::shared::redis::{cluster, Scripts};
use crate::shared::wire::{version_digits, Header, Wire};
use redis::{ConnectionLike, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const SEQUENCES_VAR: &str = "STAMPEDE_DIFFERENTIAL_SEQUENCES";
const SEED_VAR: &str = "STAMPEDE_DIFFERENTIAL_SEED";
/// Sequences on the server and on the cluster unless the variable says otherwise: a few
/// seconds of `cargo test`.
const SERVER_SEQUENCES: u64 = 100;
const CLUSTER_SEQUENCES: u64 = 10;
const COMMANDS_PER_SEQUENCE: usize = 50;
const PREFIX: &str = "stampede";
/// The channel the test marks the end of a command's messages on.
const MARKER: &[u8] = b"differential:marker";
/// The largest envelope a publish notice carries, as `ops.rs` sends it.
const NOTICE_VALUE_MAX: usize = 2048;
/// A user that may not run `@dangerous` commands (`INFO`, `FLUSHALL`): `INFO` refused.
const LIMITED_USER: &str = "stampede-limited";
const LIMITED_PASSWORD: &str = "limited-password";
/// `permits.lua`'s `TURN_MS`: how long the remainder of a fair split stays with the same
/// replicas.
const TURN_MS: u64 = super::server::PERMITS_TURN_MS;
/// How long the test waits for a command's messages to reach its subscriber.
const MESSAGES_WITHIN: Duration = Duration::from_secs(5);

/// The one-server sequences run in this many parts side by side, each on a server of its
/// own: they wait on Redis and on real sleeps, not on the CPU (in one part they took
/// 13.6 s, longer than every other unit test of the runtime together on two cores).
const SERVER_PARTS: u64 = 4;

#[test]
fn the_model_answers_every_command_as_redis_does_1() {
    one_server(0);
}

#[test]
fn the_model_answers_every_command_as_redis_does_2() {
    one_server(1);
}

#[test]
fn the_model_answers_every_command_as_redis_does_3() {
    one_server(2);
}

#[test]
fn the_model_answers_every_command_as_redis_does_4() {
    one_server(3);
}

/// Part `part` of [`SERVER_PARTS`] of the one-server sequences.
fn one_server(part: u64) {
    let Some(server) = testkit::RedisServer::start() else {
        return;
    };
    let mut real = Single::connect(server);
    let totals = run_sequences(&mut real, SERVER_SEQUENCES, (part, SERVER_PARTS), true);
    eprintln!(
        "differential, one server, part {} of {SERVER_PARTS}: {totals}",
        part + 1
    );
}

#[test]
fn the_model_answers_as_each_master_of_a_redis_cluster_does() {
    let Some(cluster) = testkit::RedisCluster::start() else {
        return;
    };
    let mut real = Cluster::connect(cluster);
    let totals = run_sequences(&mut real, CLUSTER_SEQUENCES, (0, 1), false);
    eprintln!("differential, cluster: {totals}");
}

/// What the sequences ran, for the test's report.
#[derive(Default)]
struct Totals {
    sequences: u64,
    commands: u64,
    /// Commands the model matched only at a later millisecond of the window.
    later_millisecond: u64,
    /// Commands whose keys expired within their window, whichever way they went.
    undecided: u64,
    scans: u64,
    restarts: u64,
    started: Option<Instant>,
    /// How often each kind of answer came back from Redis (what the sequences reached).
    outcomes: BTreeMap<String, u64>,
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let elapsed = self.started.map_or(Duration::ZERO, |at| at.elapsed());
        write!(
            f,
            "{} sequences, {} commands ({} matched at a later millisecond of their window, {} undecided by an expiry within it), {} full scans, {} restarts, in {:.1} s",
            self.sequences,
            self.commands,
            self.later_millisecond,
            self.undecided,
            self.scans,
            self.restarts,
            elapsed.as_secs_f64()
        )?;
        for (outcome, count) in &self.outcomes {
            write!(f, "\n  {count:6} {outcome}")?;
        }
        Ok(())
    }
}

/// A short name for what a reply (or a message) says, for the coverage report.
fn outcome_of(command: &[Vec<u8>], reply: &Value, published: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    let name = match command.first() {
        Some(name)
            if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") =>
        {
            let script = command.get(1).map_or("?", |script| script_name(script));
            format!("{} {script}", String::from_utf8_lossy(name).to_uppercase())
        }
        Some(name) => String::from_utf8_lossy(name).to_uppercase(),
        None => "?".into(),
    };
    let said = match reply {
        Value::ServerError(error) => format!("error {}", error.code()),
        Value::Array(fields) if name.ends_with("read") && fields.len() == 10 => {
            let text = |value: &Value| text_of(value).unwrap_or_default();
            let lease = text(&fields[3]);
            let lease = lease.split(' ').next().unwrap_or_default().to_owned();
            let stored = if fields[1] == Value::Nil {
                "nothing"
            } else {
                "a value"
            };
            format!("{lease}, {stored}, repaired {:?}", text(&fields[8]))
        }
        Value::Array(fields) if name.ends_with("publish") => {
            text_of(&fields[0]).unwrap_or_default()
        }
        Value::Int(n) if name.ends_with("invalidate") => match n {
            -1 | -2 => n.to_string(),
            _ => "fence".into(),
        },
        Value::Int(n) if name.ends_with("release") || name.ends_with("beat") => n.to_string(),
        Value::BulkString(text) if name.ends_with("tag") => if text.starts_with(b"memory") {
            "memory"
        } else {
            "version"
        }
        .into(),
        Value::Array(refused) if name.ends_with("probe") => format!("{} refused", refused.len()),
        Value::Array(fields) if name.ends_with("permits") => {
            // `EVALSHA sha 1 key take replica limit ttl wait_ttl returned token…`
            let asked: BTreeSet<&Vec<u8>> = command.iter().skip(10).collect();
            let number = |value: Option<&Value>| value.and_then(int_of).unwrap_or(-1);
            let (share, held) = (number(fields.first()), number(fields.get(1)));
            let limit = command
                .get(6)
                .and_then(|limit| text_of(&Value::BulkString(limit.clone())));
            let granted = fields.len().saturating_sub(2);
            let which = match granted {
                0 if asked.is_empty() => "nothing asked",
                0 => "none granted",
                n if n == asked.len() => "all granted",
                _ => "some granted",
            };
            let bound = if Some(held.to_string()) == limit {
                ", at the limit"
            } else if granted == asked.len() {
                ""
            } else if share == 0 {
                ", no share"
            } else {
                ", by the share or memory"
            };
            format!("take, {which}{bound}")
        }
        Value::Array(listed) if name.ends_with("hearing") => {
            let young = match listed.get(1) {
                Some(Value::Int(-1)) => ", no start",
                _ => "",
            };
            format!("list, {} listed{young}", listed.len().saturating_sub(2) / 2)
        }
        Value::Int(n) if name.ends_with("hearing") => format!("renew {n}"),
        Value::Int(n) if name.ends_with("permits") => {
            let op = command
                .get(4)
                .map(|op| String::from_utf8_lossy(op).into_owned());
            format!("{} {n}", op.unwrap_or_default())
        }
        _ => "answered".into(),
    };
    let mut outcomes = vec![format!("{name}: {said}")];
    outcomes.extend(published.iter().map(|(_, payload)| {
        format!(
            "notice {}",
            String::from_utf8_lossy(&payload[..payload.len().min(1)])
        )
    }));
    outcomes
}

/// Which of stampede's scripts a hash or a text is.
fn script_name(script: &[u8]) -> &'static str {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    let scripts = SCRIPTS.get_or_init(Scripts::new);
    [
        ("read", &scripts.read),
        ("publish", &scripts.publish),
        ("invalidate", &scripts.invalidate),
        ("release", &scripts.release),
        ("beat", &scripts.beat),
        ("tag", &scripts.tag),
        ("probe", &scripts.probe),
        ("permits", &scripts.permits),
        ("hearing", &scripts.hearing),
    ]
    .into_iter()
    .find(|(_, lua)| lua.hash().as_bytes() == script || lua.code().as_bytes() == script)
    .map_or("?", |(name, _)| name)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
}

/// Runs part `part` of `parts` of the sequences (`default` in all, unless the variable
/// says otherwise): seeds split in consecutive ranges, the last part taking what is left.
fn run_sequences(
    real: &mut impl Real,
    default: u64,
    (part, parts): (u64, u64),
    whole_server: bool,
) -> Totals {
    let all = env_u64(SEQUENCES_VAR).unwrap_or(default);
    let each = all / parts;
    let count = if part + 1 == parts {
        all - each * part
    } else {
        each
    };
    let first = env_u64(SEED_VAR).unwrap_or(0) + each * part;
    let mut totals = Totals {
        started: Some(Instant::now()),
        ..Totals::default()
    };
    let scripts = Scripts::new();
    for seed in first..first + count {
        real.reset();
        let generator = Generator::new(seed, &scripts, real.now_ms(0), whole_server);
        let models = (0..real.nodes())
            .map(|node| Server::new(real.run_id(node)))
            .collect();
        let mut sequence = Sequence {
            real: &mut *real,
            models,
            generator,
            seed,
            memory_full: false,
            expiries: BTreeMap::new(),
            history: Vec::new(),
            remainder_turns: BTreeMap::new(),
            totals: &mut totals,
        };
        sequence.run();
        totals.sequences += 1;
    }
    totals
}

/// How a reply is compared: exactly, or with what Redis derives from its clock allowed
/// the window's spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Exact,
    /// `read.lua`: the lease's time left (its `PTTL`) within the window.
    Read,
    /// `tag.lua`: the version, microseconds of the clock, within the window.
    Tag,
    Pttl,
    Time,
    /// `INFO`: the run id it names.
    Info,
    /// `PUBLISH`: the number of receivers is the network's, not the server's.
    Publish,
    /// `hearing.lua`'s `list`: its entries as a set (Redis lists a small hash's fields in
    /// the order they were written).
    Hearing,
}

/// One step of a sequence.
enum Step {
    /// A command, on the node of its first key; `admin`: the operator's connection.
    Command {
        command: Vec<Vec<u8>>,
        shape: Shape,
        admin: bool,
        learn: Learn,
    },
    /// A script: EVALSHA, then EVAL if the server answers NOSCRIPT (as the store sends
    /// them); `by_text`: EVAL at once (the permission probe).
    Script {
        evalsha: Vec<Vec<u8>>,
        eval: Vec<Vec<u8>>,
        shape: Shape,
        learn: Learn,
        by_text: bool,
    },
    /// A whole `SCAN` with `MATCH pattern` on every node, `count` per call.
    Scan {
        pattern: Vec<u8>,
        count: u64,
    },
    Sleep(Duration),
    MemoryFull(bool),
    InfoRefused(bool),
    Restart,
}

/// What the generator takes from a reply for the commands after it.
#[derive(Clone, Copy)]
enum Learn {
    Nothing,
    /// A read of entry `n`: its fence, its lease's holder, the run id.
    Read(usize),
    /// An invalidation of entry `n`: the new fence.
    Invalidate(usize),
    /// A take of permits: the tokens it granted.
    Permits,
}

/// The real side: a server or a cluster.
trait Real {
    fn nodes(&self) -> usize;
    fn node_of(&self, key: &[u8]) -> usize;
    fn run_id(&mut self, node: usize) -> String;
    fn now_ms(&mut self, node: usize) -> u64;
    /// An empty keyspace and script cache, memory and ACL as configured by default.
    fn reset(&mut self);
    /// Runs `command` on `node` in the observing pipeline (see the module's doc).
    fn observe(
        &mut self,
        node: usize,
        command: &[Vec<u8>],
        admin: bool,
        keys: &[Vec<u8>],
    ) -> Observed;
    /// Every key `SCAN … MATCH pattern COUNT count` names on `node`, and the clock around it.
    fn scan(&mut self, node: usize, pattern: &[u8], count: u64) -> (Window, BTreeSet<Vec<u8>>);
    fn set_memory_full(&mut self, full: bool);
    /// Switches the store's connection to the user without `@dangerous`, or back.
    fn set_info_refused(&mut self, refused: bool);
    /// Restarts the server (empty, new run id); false where the test does not.
    fn restart(&mut self) -> bool;
}

/// A stretch of the server's clock, microseconds.
#[derive(Debug, Clone, Copy)]
struct Window {
    from: u64,
    to: u64,
}

impl Window {
    fn first_ms(self) -> u64 {
        self.from / 1000
    }

    fn last_ms(self) -> u64 {
        self.to / 1000
    }

    /// The most two readings of one millisecond clock within the window can differ by.
    fn spread_ms(self) -> u64 {
        self.last_ms() - self.first_ms()
    }

    /// The times the model tries, earliest first: the window's start, then each later
    /// millisecond in it.
    fn candidates(self) -> Vec<u64> {
        let mut times = vec![self.from];
        times.extend((self.first_ms() + 1..=self.last_ms()).map(|ms| ms * 1000));
        times
    }
}

/// One key as the test reads it: `TYPE`, `PEXPIRETIME`, `GET`, `HGETALL`.
#[derive(Debug, Clone, PartialEq)]
struct KeyState {
    kind: Value,
    expires: Value,
    value: Value,
    /// `HGETALL`'s fields and values, in order of field (see [`in_field_order`]).
    fields: Value,
}

impl KeyState {
    /// There all through the reading: a key that expires between its `TYPE` and its
    /// `GET` reads as there, then gone.
    fn present(&self) -> bool {
        let string = self.kind == Value::SimpleString("string".into());
        // A hash is never empty, and HGETALL of another type is an error: no fields, gone.
        self.kind != Value::SimpleString("none".into())
            && self.expires != Value::Int(-2)
            && !(string && self.value == Value::Nil)
            && self.fields != Value::Array(Vec::new())
    }

    fn from_replies(replies: &[Value]) -> Self {
        let [kind, expires, value, fields] = replies else {
            panic!("a key's state is {STATE_READS} replies, not {replies:?}");
        };
        KeyState {
            kind: kind.clone(),
            expires: expires.clone(),
            value: value.clone(),
            fields: in_field_order(fields.clone()),
        }
    }

    fn expires_at(&self) -> Option<u64> {
        match self.expires {
            Value::Int(at) if at >= 0 => Some(at as u64),
            _ => None,
        }
    }

    /// A hash's fields and values (`HSET key field value…` writes them again).
    fn hash_fields(&self) -> Vec<Vec<u8>> {
        match &self.fields {
            Value::Array(items) => items
                .iter()
                .filter_map(|item| match item {
                    Value::BulkString(bytes) => Some(bytes.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// An `HGETALL` reply with its pairs in order of field; anything else as it is.
fn in_field_order(reply: Value) -> Value {
    let Value::Array(items) = reply else {
        return reply;
    };
    let mut pairs: Vec<&[Value]> = items.chunks(2).collect();
    pairs.sort_by_key(|pair| match &pair[0] {
        Value::BulkString(field) => field.clone(),
        other => panic!("HGETALL named the field {other:?}"),
    });
    Value::Array(pairs.concat())
}

/// What Redis did with one command, and its keyspace after.
struct Observed {
    window: Window,
    reply: Value,
    published: Vec<(Vec<u8>, Vec<u8>)>,
    /// When the keys were read.
    read_at: Window,
    keys: Vec<KeyState>,
}

/// How many commands read one key's state.
const STATE_READS: usize = 4;

/// The commands that read a key's state, in `KeyState`'s order.
fn key_state_commands(key: &[u8]) -> [Vec<Vec<u8>>; STATE_READS] {
    [
        vec![b"TYPE".to_vec(), key.to_vec()],
        vec![b"PEXPIRETIME".to_vec(), key.to_vec()],
        vec![b"GET".to_vec(), key.to_vec()],
        vec![b"HGETALL".to_vec(), key.to_vec()],
    ]
}

fn command_of(args: &[Vec<u8>]) -> redis::Cmd {
    let mut command = redis::Cmd::new();
    for arg in args {
        command.arg(arg.as_slice());
    }
    command
}

fn time_of(value: &Value) -> u64 {
    let Value::Array(parts) = value else {
        panic!("TIME answered {value:?}");
    };
    let number = |part: &Value| match part {
        Value::BulkString(digits) => std::str::from_utf8(digits)
            .ok()
            .and_then(|digits| digits.parse::<u64>().ok())
            .expect("TIME's parts are numbers"),
        other => panic!("TIME answered {other:?}"),
    };
    number(&parts[0]) * 1_000_000 + number(&parts[1])
}

/// A reply the cluster client turned into an error, as the server's error reply again.
fn reply_of(result: redis::RedisResult<Value>) -> Value {
    match result {
        Ok(value) => value,
        Err(error) => {
            let code = error.code().expect("a server's error reply, with its code");
            let text = match error.detail() {
                Some(detail) => format!("-{code} {detail}\r\n"),
                None => format!("-{code}\r\n"),
            };
            redis::parse_redis_value(text.as_bytes()).expect("an error line")
        }
    }
}

fn connect(url: &str) -> redis::Connection {
    let connection = redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .expect("a connection to the test's Redis");
    connection
        .set_read_timeout(Some(MESSAGES_WITHIN))
        .expect("a read timeout");
    connection
}

fn query(connection: &mut impl ConnectionLike, args: &[&str]) -> Value {
    let command = command_of(
        &args
            .iter()
            .map(|arg| arg.as_bytes().to_vec())
            .collect::<Vec<_>>(),
    );
    reply_of(connection.req_command(&command))
}

/// A subscriber on every channel (`PSUBSCRIBE *`), read up to each command's marker.
struct Listener {
    connection: redis::Connection,
    marked: u64,
}

impl Listener {
    fn open(url: &str) -> Self {
        let mut connection = connect(url);
        let subscribe = redis::cmd("PSUBSCRIBE").arg("*").get_packed_command();
        connection
            .send_packed_command(&subscribe)
            .expect("PSUBSCRIBE");
        connection.recv_response().expect("PSUBSCRIBE confirmed");
        Self {
            connection,
            marked: 0,
        }
    }

    /// The next marker's payload, sent with the command on `node`'s connection.
    fn next_marker(&mut self) -> Vec<u8> {
        self.marked += 1;
        self.marked.to_string().into_bytes()
    }

    /// Every message before the marker `marker`, in order.
    fn until(&mut self, marker: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut messages = Vec::new();
        loop {
            let message = self
                .connection
                .recv_response()
                .expect("a published message within the bound");
            let Value::Array(parts) = message else {
                panic!("the subscriber received {message:?}");
            };
            let bulk = |value: &Value| match value {
                Value::BulkString(bytes) => bytes.clone(),
                other => panic!("a message's part is {other:?}"),
            };
            let (channel, payload) = (bulk(&parts[2]), bulk(&parts[3]));
            if channel == MARKER {
                if payload == marker {
                    return messages;
                }
                continue;
            }
            messages.push((channel, payload));
        }
    }
}

/// One `redis-server`: the store's connection (the default user, or the limited one),
/// the operator's, and the subscriber.
struct Single {
    server: testkit::RedisServer,
    admin: redis::Connection,
    limited: Option<redis::Connection>,
    listener: Listener,
    memory_full: bool,
}

impl Single {
    fn connect(server: testkit::RedisServer) -> Self {
        let url = server.direct_url();
        let mut single = Self {
            admin: connect(&url),
            limited: None,
            listener: Listener::open(&url),
            server,
            memory_full: false,
        };
        single.create_limited_user();
        single
    }

    fn create_limited_user(&mut self) {
        let password = format!(">{LIMITED_PASSWORD}");
        let created = query(
            &mut self.admin,
            &[
                "ACL",
                "SETUSER",
                LIMITED_USER,
                "on",
                &password,
                "~*",
                "&*",
                "+@all",
                "-@dangerous",
            ],
        );
        assert_eq!(created, Value::Okay);
    }

    fn apply_memory(&mut self) {
        let limit = if self.memory_full { "1" } else { "0" };
        let set = query(&mut self.admin, &["CONFIG", "SET", "maxmemory", limit]);
        assert_eq!(set, Value::Okay);
    }
}

impl Real for Single {
    fn nodes(&self) -> usize {
        1
    }

    fn node_of(&self, _: &[u8]) -> usize {
        0
    }

    fn run_id(&mut self, _: usize) -> String {
        let Value::BulkString(info) = query(&mut self.admin, &["INFO", "server"]) else {
            panic!("INFO answered something else than its text");
        };
        run_id_in(&info).expect("INFO names the run id")
    }

    fn now_ms(&mut self, _: usize) -> u64 {
        time_of(&query(&mut self.admin, &["TIME"])) / 1000
    }

    fn reset(&mut self) {
        for command in [&["FLUSHALL"][..], &["SCRIPT", "FLUSH"]] {
            assert_eq!(query(&mut self.admin, command), Value::Okay);
        }
        self.memory_full = false;
        self.apply_memory();
        self.limited = None;
    }

    fn observe(
        &mut self,
        _: usize,
        command: &[Vec<u8>],
        admin: bool,
        keys: &[Vec<u8>],
    ) -> Observed {
        let marker = self.listener.next_marker();
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        pipe.add_command(command_of(command));
        pipe.cmd("TIME");
        pipe.cmd("PUBLISH").arg(MARKER).arg(marker.as_slice());
        pipe.cmd("TIME");
        for key in keys {
            for read in key_state_commands(key) {
                pipe.add_command(command_of(&read));
            }
        }
        pipe.cmd("TIME");
        let connection = match (&mut self.limited, admin) {
            (Some(limited), false) => limited,
            _ => &mut self.admin,
        };
        let count = 6 + STATE_READS * keys.len();
        let replies = connection
            .req_packed_commands(&pipe.get_packed_pipeline(), 0, count)
            .expect("the pipeline's replies");
        let published = self.listener.until(&marker);
        observed(replies, published)
    }

    fn scan(&mut self, _: usize, pattern: &[u8], count: u64) -> (Window, BTreeSet<Vec<u8>>) {
        scan_with(&mut self.admin, pattern, count)
    }

    fn set_memory_full(&mut self, full: bool) {
        self.memory_full = full;
        self.apply_memory();
    }

    fn set_info_refused(&mut self, refused: bool) {
        self.limited = refused.then(|| {
            let url = format!(
                "redis://{LIMITED_USER}:{LIMITED_PASSWORD}@127.0.0.1:{}/",
                self.server.port()
            );
            connect(&url)
        });
    }

    fn restart(&mut self) -> bool {
        let refused = self.limited.is_some();
        self.server.restart();
        let url = self.server.direct_url();
        self.admin = connect(&url);
        self.listener = Listener::open(&url);
        self.create_limited_user();
        self.apply_memory();
        self.set_info_refused(refused);
        true
    }
}

/// The replies of the observing pipeline, taken apart.
fn observed(replies: Vec<Value>, published: Vec<(Vec<u8>, Vec<u8>)>) -> Observed {
    let mut replies = replies.into_iter();
    let mut next = || {
        replies
            .next()
            .expect("a reply for every command of the pipeline")
    };
    let from = time_of(&next());
    let reply = next();
    let to = time_of(&next());
    let _marker = next();
    let read_from = time_of(&next());
    let mut rest: Vec<Value> = std::iter::from_fn(|| replies.next()).collect();
    let read_to = time_of(&rest.pop().expect("the last TIME"));
    let keys = rest
        .chunks(STATE_READS)
        .map(KeyState::from_replies)
        .collect();
    Observed {
        window: Window { from, to },
        reply,
        published,
        read_at: Window {
            from: read_from,
            to: read_to,
        },
        keys,
    }
}

fn scan_with(
    connection: &mut redis::Connection,
    pattern: &[u8],
    count: u64,
) -> (Window, BTreeSet<Vec<u8>>) {
    let from = time_of(&query(connection, &["TIME"]));
    let mut cursor = b"0".to_vec();
    let mut keys = BTreeSet::new();
    loop {
        let scan = command_of(&[
            b"SCAN".to_vec(),
            cursor,
            b"MATCH".to_vec(),
            pattern.to_vec(),
            b"COUNT".to_vec(),
            count.to_string().into_bytes(),
        ]);
        let (next, found) = scan_page(&reply_of(connection.req_command(&scan)));
        keys.extend(found);
        if next == b"0" {
            break;
        }
        cursor = next;
    }
    let to = time_of(&query(connection, &["TIME"]));
    (Window { from, to }, keys)
}

/// One SCAN reply: the next cursor and the keys.
fn scan_page(reply: &Value) -> (Vec<u8>, Vec<Vec<u8>>) {
    let Value::Array(parts) = reply else {
        panic!("SCAN answered {reply:?}");
    };
    let (Value::BulkString(cursor), Value::Array(keys)) = (&parts[0], &parts[1]) else {
        panic!("SCAN answered {reply:?}");
    };
    let keys = keys
        .iter()
        .map(|key| match key {
            Value::BulkString(key) => key.clone(),
            other => panic!("SCAN named {other:?}"),
        })
        .collect();
    (cursor.clone(), keys)
}

/// A local three-master cluster: commands through the cluster client (routed by their
/// first key), the clock, the markers, the keyspace and SCAN through each master's own
/// connection.
struct Cluster {
    /// Kept for its drop, which stops the masters.
    _cluster: testkit::RedisCluster,
    client: redis::cluster::ClusterConnection,
    nodes: Vec<redis::Connection>,
    /// Each slot's master (an index into `nodes`).
    owners: Vec<usize>,
    listener: Listener,
}

impl Cluster {
    fn connect(cluster: testkit::RedisCluster) -> Self {
        let urls = cluster.node_urls();
        let client = redis::cluster::ClusterClient::new(urls.clone())
            .and_then(|client| client.get_connection())
            .expect("a cluster connection");
        let mut nodes: Vec<redis::Connection> = urls.iter().map(|url| connect(url)).collect();
        let ports: Vec<u16> = (0..urls.len()).map(|i| cluster.port(i)).collect();
        let mut owners = vec![usize::MAX; 16384];
        let Value::Array(ranges) = query(&mut nodes[0], &["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS answered something else than its ranges");
        };
        for range in ranges {
            let Value::Array(range) = range else {
                panic!("a slot range is {range:?}");
            };
            let (Value::Int(first), Value::Int(last), Value::Array(master)) =
                (&range[0], &range[1], &range[2])
            else {
                panic!("a slot range is {range:?}");
            };
            let Value::Int(port) = master[1] else {
                panic!("a master is {master:?}");
            };
            let node = ports
                .iter()
                .position(|&p| i64::from(p) == port)
                .expect("a master of the cluster");
            for slot in *first..=*last {
                owners[slot as usize] = node;
            }
        }
        let listener = Listener::open(&urls[0]);
        Self {
            _cluster: cluster,
            client,
            nodes,
            owners,
            listener,
        }
    }
}

impl Real for Cluster {
    fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn node_of(&self, key: &[u8]) -> usize {
        self.owners[usize::from(cluster::slot(key))]
    }

    fn run_id(&mut self, node: usize) -> String {
        let Value::BulkString(info) = query(&mut self.nodes[node], &["INFO", "server"]) else {
            panic!("INFO answered something else than its text");
        };
        run_id_in(&info).expect("INFO names the run id")
    }

    fn now_ms(&mut self, node: usize) -> u64 {
        time_of(&query(&mut self.nodes[node], &["TIME"])) / 1000
    }

    fn reset(&mut self) {
        for node in &mut self.nodes {
            for command in [
                &["FLUSHALL"][..],
                &["SCRIPT", "FLUSH"],
                &["CONFIG", "SET", "maxmemory", "0"],
            ] {
                assert_eq!(query(node, command), Value::Okay);
            }
        }
    }

    fn observe(&mut self, node: usize, command: &[Vec<u8>], _: bool, keys: &[Vec<u8>]) -> Observed {
        let marker = self.listener.next_marker();
        let before = time_of(&query(&mut self.nodes[node], &["TIME"]));
        let reply = reply_of(self.client.req_command(&command_of(command)));
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        // Published on the command's master after it: the cluster bus carries both to the
        // subscriber in order.
        pipe.cmd("PUBLISH").arg(MARKER).arg(marker.as_slice());
        pipe.cmd("TIME");
        for key in keys {
            for read in key_state_commands(key) {
                pipe.add_command(command_of(&read));
            }
        }
        pipe.cmd("TIME");
        let count = 4 + STATE_READS * keys.len();
        let mut replies = self.nodes[node]
            .req_packed_commands(&pipe.get_packed_pipeline(), 0, count)
            .expect("the pipeline's replies");
        replies.insert(0, reply);
        replies.insert(0, Value::Array(time_parts(before)));
        let published = self.listener.until(&marker);
        observed(replies, published)
    }

    fn scan(&mut self, node: usize, pattern: &[u8], count: u64) -> (Window, BTreeSet<Vec<u8>>) {
        scan_with(&mut self.nodes[node], pattern, count)
    }

    fn set_memory_full(&mut self, full: bool) {
        let limit = if full { "1" } else { "0" };
        for node in &mut self.nodes {
            assert_eq!(
                query(node, &["CONFIG", "SET", "maxmemory", limit]),
                Value::Okay
            );
        }
    }

    fn set_info_refused(&mut self, _: bool) {
        unreachable!("the cluster's sequences leave the ACL alone")
    }

    fn restart(&mut self) -> bool {
        // The cluster's masters keep running: the server's sequences restart one.
        false
    }
}

fn time_parts(us: u64) -> Vec<Value> {
    vec![
        Value::BulkString((us / 1_000_000).to_string().into_bytes()),
        Value::BulkString((us % 1_000_000).to_string().into_bytes()),
    ]
}

/// The run id an `INFO` text names.
fn run_id_in(info: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(info);
    text.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

/// One sequence, run on Redis and on the model side by side.
struct Sequence<'a, R: Real> {
    real: &'a mut R,
    /// One model per node.
    models: Vec<Server>,
    generator: Generator<'a>,
    seed: u64,
    memory_full: bool,
    /// Each key's expiry in Redis after the last command (for commands whose keys expire
    /// within their window).
    expiries: BTreeMap<Vec<u8>, u64>,
    /// The commands so far, for a failure's report.
    history: Vec<String>,
    /// Each admission's turn of the remainder at its latest take with one (coverage).
    remainder_turns: BTreeMap<Vec<u8>, u64>,
    totals: &'a mut Totals,
}

impl<R: Real> Sequence<'_, R> {
    fn run(&mut self) {
        let first_turn = self.generator.clock_ms / TURN_MS;
        for _ in 0..COMMANDS_PER_SEQUENCE {
            let step = self.generator.next_step();
            self.take(step);
        }
        self.compare_keyspaces();
        let turns = (self.generator.clock_ms / TURN_MS).saturating_sub(first_turn) + 1;
        let turns = if turns < 3 {
            turns.to_string()
        } else {
            "3 or more".into()
        };
        *self
            .totals
            .outcomes
            .entry(format!(
                "sequence over {turns} turns of the permits' remainder"
            ))
            .or_default() += 1;
    }

    fn take(&mut self, step: Step) {
        match step {
            Step::Command {
                command,
                shape,
                admin,
                learn,
            } => {
                let reply = self.command(&command, shape, admin);
                self.generator.learn(learn, &reply);
            }
            Step::Script {
                evalsha,
                eval,
                shape,
                learn,
                by_text,
            } => {
                let mut reply = Value::Nil;
                if !by_text {
                    reply = self.command(&evalsha, shape, false);
                }
                let no_script =
                    matches!(&reply, Value::ServerError(error) if error.code() == "NOSCRIPT");
                if by_text || no_script {
                    reply = self.command(&eval, shape, false);
                }
                self.generator.learn(learn, &reply);
            }
            Step::Scan { pattern, count } => self.scan(&pattern, count),
            Step::Sleep(duration) => std::thread::sleep(duration),
            Step::MemoryFull(full) => {
                self.history.push(format!("(memory full: {full})"));
                self.real.set_memory_full(full);
                self.models
                    .iter_mut()
                    .for_each(|model| model.set_memory_full(full));
                self.memory_full = full;
            }
            Step::InfoRefused(refused) => {
                self.history.push(format!("(INFO refused: {refused})"));
                self.real.set_info_refused(refused);
                self.models[0].set_info_refused(refused);
            }
            Step::Restart => {
                if self.real.restart() {
                    self.history.push("(restart)".into());
                    let run_id = self.real.run_id(0);
                    self.models[0].restart(run_id, false);
                    self.totals.restarts += 1;
                }
            }
        }
    }

    /// The keys whose state the test reads after a command on `node`.
    fn keys_on(&self, node: usize) -> Vec<Vec<u8>> {
        self.generator
            .known_keys()
            .into_iter()
            .filter(|key| self.real.node_of(key) == node)
            .collect()
    }

    /// Runs one command on both sides and compares; Redis's reply.
    fn command(&mut self, command: &[Vec<u8>], shape: Shape, admin: bool) -> Value {
        let index = self.history.len();
        self.history.push(printable(command));
        let node = command
            .get(key_position(command))
            .map_or(0, |key| self.real.node_of(key));
        let keys = self.keys_on(node);
        let observed = self.real.observe(node, command, admin, &keys);
        self.generator.clock_ms = observed.read_at.last_ms();
        let mut first_try = None;
        for (attempt, at) in observed.window.candidates().into_iter().enumerate() {
            let mut model = self.models[node].clone();
            let executed = model.execute(at, command);
            let states = read_keys(&mut model, observed.read_at.from, &keys);
            let disagreement =
                disagreement(&observed, &executed, &states, &keys, shape, &self.generator);
            match disagreement {
                None => {
                    if attempt > 0 {
                        self.totals.later_millisecond += 1;
                    }
                    self.models[node] = model;
                    self.take_keyspace(node, &observed, &keys);
                    self.count(command, &observed, &keys);
                    return observed.reply;
                }
                Some(why) => {
                    first_try.get_or_insert((executed, why));
                }
            }
        }
        let (executed, why) = first_try.expect("at least one time tried");
        if self.expires_within(command, observed.window) {
            // Redis read its clock more than once around an expiry: either way is Redis's.
            self.totals.undecided += 1;
            self.take_keyspace(node, &observed, &keys);
            self.count(command, &observed, &keys);
            return observed.reply;
        }
        self.fail(index, command, &observed, &executed, &why);
    }

    fn count(&mut self, command: &[Vec<u8>], observed: &Observed, keys: &[Vec<u8>]) {
        self.totals.commands += 1;
        let mut outcomes = outcome_of(command, &observed.reply, &observed.published);
        let permits = command
            .get(1)
            .is_some_and(|script| script_name(script) == "permits");
        let hearing = command
            .get(1)
            .is_some_and(|script| script_name(script) == "hearing");
        if (permits || hearing) && self.memory_full {
            outcomes.push(format!("{} (memory full)", outcomes[0]));
        }
        if permits && let Some(split) = self.permits_split(command, observed, keys) {
            outcomes.push(split);
        }
        for outcome in outcomes {
            *self.totals.outcomes.entry(outcome).or_default() += 1;
        }
    }

    /// For a take that answered: how its replica's fair share was split, from the
    /// admission's hash after it (what each replica holds and waits for then is what the
    /// take counted), and whether the remainder went round in another turn than at the
    /// admission's last take with one. Only for the coverage report: the model decides.
    fn permits_split(
        &mut self,
        command: &[Vec<u8>],
        observed: &Observed,
        keys: &[Vec<u8>],
    ) -> Option<String> {
        // `EVALSHA sha 1 key take replica limit …`
        let [_, _, _, key, op, me, limit, ..] = command else {
            return None;
        };
        if op.as_slice() != b"take" || !matches!(observed.reply, Value::Array(_)) {
            return None;
        }
        let limit: u64 = std::str::from_utf8(limit).ok()?.parse().ok()?;
        let state = &observed.keys[keys.iter().position(|known| known == key)?];
        let fields = state.hash_fields();
        let mut demand: BTreeMap<&[u8], u64> = BTreeMap::from([(me.as_slice(), 0)]);
        for pair in fields.chunks(2) {
            let [field, value] = pair else { continue };
            match field.split_at_checked(2) {
                Some((b"p ", token)) if token.len() == 24 => {
                    *demand.entry(&token[..8]).or_default() += 1;
                }
                Some((b"w ", name)) => {
                    let count = value.split(|&b| b == b' ').nth(1).unwrap_or_default();
                    let count: u64 = std::str::from_utf8(count)
                        .ok()
                        .and_then(|count| count.parse().ok())
                        .unwrap_or_default();
                    *demand.entry(name).or_default() += count;
                }
                _ => {}
            }
        }
        let mut order: Vec<(&[u8], u64)> = demand.into_iter().collect();
        order.sort_by_key(|&(name, wants)| (wants, name));
        let mut left = limit;
        for (i, &(_, wants)) in order.iter().enumerate() {
            if wants > left / (order.len() - i) as u64 {
                let above = order.len() - i;
                if !order[i..].iter().any(|&(other, _)| other == me.as_slice()) {
                    return Some("permits split: within the even split".into());
                }
                if left.is_multiple_of(above as u64) {
                    return Some(format!("permits split: among {above} above the even split"));
                }
                let turn = observed.window.first_ms() / TURN_MS;
                let last = self.remainder_turns.insert(key.clone(), turn);
                let again = if last.is_some_and(|last| last != turn) {
                    ", in another turn than the last"
                } else {
                    ""
                };
                return Some(format!(
                    "permits split: among {above} above the even split, with a remainder{again}"
                ));
            }
            left -= wants;
        }
        Some("permits split: within the even split".into())
    }

    fn fail(
        &self,
        index: usize,
        command: &[Vec<u8>],
        observed: &Observed,
        executed: &super::server::Executed,
        why: &str,
    ) -> ! {
        let mut report = format!(
            "the model disagrees with Redis: seed {}, command {index} of the sequence: {}\n  {why}\n  Redis:  {:?}\n  model:  {:?}\n  Redis published: {:?}\n  model published: {:?}\n  window: {:?}\nthe sequence so far:\n",
            self.seed,
            printable(command),
            observed.reply,
            executed.reply,
            printable_messages(&observed.published),
            printable_messages(&executed.published),
            observed.window,
        );
        for (i, line) in self.history.iter().enumerate() {
            let _ = writeln!(report, "  {i:3} {line}");
        }
        panic!("{report}");
    }

    /// Whether a key the command names expires within its window (per Redis's keyspace
    /// before it).
    fn expires_within(&self, command: &[Vec<u8>], window: Window) -> bool {
        command.iter().any(|arg| {
            self.expiries
                .get(arg)
                .is_some_and(|&at| at + 1 >= window.first_ms() && at <= window.last_ms() + 1)
        })
    }

    /// The model takes Redis's keyspace (the keys the test reads): what the clock let
    /// differ is equal again.
    fn take_keyspace(&mut self, node: usize, observed: &Observed, keys: &[Vec<u8>]) {
        // A millisecond before the keys were read, so a key Redis still had then is alive.
        let at = (observed.read_at.first_ms().saturating_sub(1)) * 1000;
        let model = &mut self.models[node];
        model.set_memory_full(false);
        for (key, state) in keys.iter().zip(&observed.keys) {
            match state.expires_at() {
                Some(at) => self.expiries.insert(key.clone(), at),
                None => self.expiries.remove(key),
            };
            model.execute(at, &[b"DEL".to_vec(), key.clone()]);
            // A key that expired while it was read (its TYPE said there, its PEXPIRETIME or
            // HGETALL gone) is gone in Redis from then on: written here, the model would
            // keep it for good (a hash with `f v` and no TTL once failed a run this way).
            if !state.present() {
                continue;
            }
            let write: Option<Vec<Vec<u8>>> = match (&state.kind, &state.value) {
                (Value::SimpleString(kind), Value::BulkString(value)) if kind == "string" => {
                    Some(vec![b"SET".to_vec(), key.clone(), value.clone()])
                }
                (Value::SimpleString(kind), _) if kind == "list" => {
                    Some(vec![b"LPUSH".to_vec(), key.clone(), b"x".to_vec()])
                }
                (Value::SimpleString(kind), _) if kind == "hash" => {
                    let fields = state.hash_fields();
                    let mut write = vec![b"HSET".to_vec(), key.clone()];
                    write.extend(fields);
                    Some(write)
                }
                _ => None,
            };
            if let Some(write) = write {
                model.execute(at, &write);
                if let Some(expires) = state.expires_at() {
                    model.execute(
                        at,
                        &[
                            b"PEXPIREAT".to_vec(),
                            key.clone(),
                            expires.to_string().into_bytes(),
                        ],
                    );
                }
            }
        }
        model.set_memory_full(self.memory_full);
    }

    /// A whole SCAN on every node: both sides name the same keys, but for keys that
    /// expire while it runs.
    fn scan(&mut self, pattern: &[u8], count: u64) {
        self.history.push(format!(
            "(SCAN to the end, MATCH {:?} COUNT {count})",
            String::from_utf8_lossy(pattern)
        ));
        for node in 0..self.real.nodes() {
            let (window, real) = self.real.scan(node, pattern, count);
            let model = scan_model(&mut self.models[node], window.from, pattern, count);
            let differ: Vec<&Vec<u8>> = real.symmetric_difference(&model).collect();
            let explained = differ.iter().all(|key| {
                self.expiries
                    .get(*key)
                    .is_some_and(|&at| at + 1 >= window.first_ms() && at <= window.last_ms() + 1)
            });
            assert!(
                explained,
                "the model's SCAN disagrees with Redis's: seed {}, after command {}, node {node}, MATCH {:?}: only one side names {:?}",
                self.seed,
                self.history.len(),
                String::from_utf8_lossy(pattern),
                differ
                    .iter()
                    .map(|key| String::from_utf8_lossy(key))
                    .collect::<Vec<_>>()
            );
            self.totals.scans += 1;
        }
    }

    /// At the end of a sequence: every key on each side, not only the ones the test
    /// knows, is on the other.
    fn compare_keyspaces(&mut self) {
        self.scan(b"*", 1000);
    }
}

/// Where a command's first key is (`EVALSHA sha numkeys key…`, `GET key`).
fn key_position(command: &[Vec<u8>]) -> usize {
    let name = command.first().map(|name| name.to_ascii_uppercase());
    match name.as_deref() {
        Some(b"EVAL" | b"EVALSHA") => 3,
        _ => 1,
    }
}

/// Every key of a whole SCAN of `model` at `at`.
fn scan_model(model: &mut Server, at: u64, pattern: &[u8], count: u64) -> BTreeSet<Vec<u8>> {
    let mut cursor = b"0".to_vec();
    let mut keys = BTreeSet::new();
    for _ in 0..100_000 {
        let reply = model
            .execute(
                at,
                &[
                    b"SCAN".to_vec(),
                    cursor,
                    b"MATCH".to_vec(),
                    pattern.to_vec(),
                    b"COUNT".to_vec(),
                    count.to_string().into_bytes(),
                ],
            )
            .reply;
        let (next, found) = scan_page(&reply);
        keys.extend(found);
        if next == b"0" {
            return keys;
        }
        cursor = next;
    }
    panic!("the model's SCAN never came back to cursor 0");
}

/// The keys' states in the model at `at`, read as the test reads Redis's.
fn read_keys(model: &mut Server, at: u64, keys: &[Vec<u8>]) -> Vec<KeyState> {
    keys.iter()
        .map(|key| {
            let replies = key_state_commands(key).map(|command| model.execute(at, &command).reply);
            KeyState::from_replies(&replies)
        })
        .collect()
}

/// Why the model's run of a command disagrees with Redis's, if it does.
fn disagreement(
    observed: &Observed,
    executed: &super::server::Executed,
    states: &[KeyState],
    keys: &[Vec<u8>],
    shape: Shape,
    generator: &Generator<'_>,
) -> Option<String> {
    let window = observed.window;
    if !replies_agree(shape, &observed.reply, &executed.reply, window) {
        return Some("the replies differ".into());
    }
    if observed.published.len() != executed.published.len()
        || !observed
            .published
            .iter()
            .zip(&executed.published)
            .all(|(real, model)| messages_agree(real, model, window))
    {
        return Some("the published messages differ".into());
    }
    for ((key, real), model) in keys.iter().zip(&observed.keys).zip(states) {
        if !key_states_agree(real, model, observed, generator.is_tag_key(key)) {
            return Some(format!(
                "the keyspace after it differs at {:?}: Redis {real:?}, model {model:?}",
                String::from_utf8_lossy(key)
            ));
        }
    }
    None
}

fn int_of(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn number_of(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(digits) => std::str::from_utf8(digits).ok()?.parse().ok(),
        _ => None,
    }
}

fn within(a: i64, b: i64, spread: u64) -> bool {
    a.abs_diff(b) <= spread
}

fn replies_agree(shape: Shape, real: &Value, model: &Value, window: Window) -> bool {
    if real == model {
        return true;
    }
    let spread_us = window.to - window.from;
    match (shape, real, model) {
        (Shape::Read, Value::Array(real), Value::Array(model)) if real.len() == 10 => {
            model.len() == 10
                && (0..10).all(|i| match i {
                    // The lease's PTTL, read after the script's TIME.
                    4 => match (int_of(&real[i]), int_of(&model[i])) {
                        (Some(a), Some(b)) => within(a, b, window.spread_ms()),
                        _ => false,
                    },
                    _ => real[i] == model[i],
                })
        }
        (Shape::Tag, Value::BulkString(real), Value::BulkString(model)) => {
            let split = |text: &[u8]| {
                let text = String::from_utf8_lossy(text).into_owned();
                match text.strip_prefix("memory ") {
                    Some(version) => (true, version.parse::<u64>().ok()),
                    None => (false, text.parse::<u64>().ok()),
                }
            };
            match (split(real), split(model)) {
                ((a_full, Some(a)), (b_full, Some(b))) => {
                    a_full == b_full && a.abs_diff(b) <= spread_us
                }
                _ => false,
            }
        }
        (Shape::Pttl, Value::Int(real), Value::Int(model)) => {
            *real >= 0 && *model >= 0 && within(*real, *model, window.spread_ms())
        }
        (Shape::Time, Value::Array(_), Value::Array(_)) => {
            time_of(real).abs_diff(time_of(model)) <= spread_us
        }
        (Shape::Info, Value::BulkString(real), Value::BulkString(model)) => {
            run_id_in(real).is_some() && run_id_in(real) == run_id_in(model)
        }
        (Shape::Publish, Value::Int(_), Value::Int(_)) => true,
        (Shape::Hearing, Value::Array(real), Value::Array(model)) => {
            let entries = |reply: &[Value]| -> BTreeSet<(String, i64)> {
                (reply.get(1..).unwrap_or_default().chunks(2))
                    .filter_map(|pair| Some((text_of(pair.first()?)?, int_of(pair.get(1)?)?)))
                    .collect()
            };
            real.get(..2) == model.get(..2)
                && real.len() == model.len()
                && entries(&real[1..]) == entries(&model[1..])
        }
        _ => false,
    }
}

/// Two published messages: equal, but for a tag's version (the clock's microseconds).
fn messages_agree(real: &(Vec<u8>, Vec<u8>), model: &(Vec<u8>, Vec<u8>), window: Window) -> bool {
    if real == model {
        return true;
    }
    let fields = |payload: &[u8]| -> Option<(u64, Vec<u8>)> {
        let rest = payload.strip_prefix(b"t ")?;
        let end = rest.iter().position(|&b| b == b' ')?;
        let version = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
        Some((version, rest[end..].to_vec()))
    };
    real.0 == model.0
        && match (fields(&real.1), fields(&model.1)) {
            (Some((a, a_rest)), Some((b, b_rest))) => {
                a_rest == b_rest && a.abs_diff(b) <= window.to - window.from
            }
            _ => false,
        }
}

fn key_states_agree(real: &KeyState, model: &KeyState, observed: &Observed, tag: bool) -> bool {
    if real == model {
        return true;
    }
    let spread = observed.window.spread_ms();
    let read = observed.read_at;
    let expiring =
        |at: u64| at + spread + 1 >= read.first_ms() && at <= read.last_ms() + spread + 1;
    if real.present() != model.present() {
        // Expiring while the keys were read (or within the command's own spread). A key
        // Redis saw go midway no longer says when it expired: the model's must say it.
        let there = if model.present() { model } else { real };
        return there.expires_at().is_some_and(expiring);
    }
    let expiries_agree = match (real.expires_at(), model.expires_at()) {
        (Some(a), Some(b)) => a.abs_diff(b) <= spread,
        _ => real.expires == model.expires,
    };
    let values_agree = real.value == model.value
        || (tag
            && matches!((number_of(&real.value), number_of(&model.value)),
                (Some(a), Some(b)) if a.abs_diff(b) <= observed.window.to - observed.window.from));
    real.kind == model.kind && expiries_agree && values_agree && real.fields == model.fields
}

fn printable(command: &[Vec<u8>]) -> String {
    let mut line = String::new();
    for (i, arg) in command.iter().enumerate() {
        if i > 0 {
            line.push(' ');
        }
        // The scripts' text is long and known: its hash or name is enough.
        if arg.len() > 1000 && arg.starts_with(b"--") {
            line.push_str("<script text>");
            continue;
        }
        let _ = write!(line, "{:?}", String::from_utf8_lossy(arg));
    }
    line
}

fn printable_messages(messages: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    messages
        .iter()
        .map(|(channel, payload)| {
            format!(
                "{} <- {:?}",
                String::from_utf8_lossy(channel),
                String::from_utf8_lossy(payload)
            )
        })
        .collect()
}

/// The seeded source of commands: stampede's operations on a few entries of two caches
/// and on the permits of two admissions, and what an operator, a full memory, an ACL and
/// a restart do to them.
struct Generator<'s> {
    rng: fastrand::Rng,
    scripts: &'s Scripts,
    entries: Vec<EntryKey>,
    /// The caches the entries belong to (name, version), for SCAN's patterns.
    caches: Vec<(&'static str, u32)>,
    tags: Vec<String>,
    /// Replica ids (`hub.replica()`), 16 hex digits.
    nodes: Vec<String>,
    /// Lease tokens (`LeaseToken`), 16 hex digits.
    tokens: Vec<String>,
    /// The fences each entry's replies named, in order.
    fences: Vec<Vec<u64>>,
    /// The token each entry's lease was last granted to.
    holders: Vec<Option<String>>,
    run_ids: Vec<String>,
    /// The token of the latest read that asked for a lease.
    last_token: Option<String>,
    /// The admissions whose permits the sequence takes (`admission_key`).
    admissions: Vec<&'static str>,
    /// The replica tags that take permits (a replica id's first 8 hex digits).
    replica_tags: Vec<String>,
    /// Permit tokens takes granted, oldest first (some given back or lapsed since).
    permits: Vec<String>,
    /// The latest take's replica and tokens, for a take sent again.
    last_take: Option<(String, Vec<String>)>,
    /// A sequence mostly of permits, over several turns of their remainder: the fair
    /// split's remainder goes round the replicas within it.
    permits_mostly: bool,
    memory_full: bool,
    info_refused: bool,
    clock_ms: u64,
    /// Whether the sequence may use what only a whole server has (FLUSHALL, INFO
    /// refused, a restart, commands without a key).
    whole_server: bool,
}

impl<'s> Generator<'s> {
    fn new(seed: u64, scripts: &'s Scripts, clock_ms: u64, whole_server: bool) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let permits_mostly = rng.u8(..4) == 0;
        let caches = vec![("user-profile", 1), ("prices", 3)];
        let entries = (0..4)
            .map(|i| {
                let (name, version) = caches[i % 2];
                match i {
                    3 => EntryKey::new(PREFIX, name, version, "a b{c}"),
                    _ => EntryKey::new(PREFIX, name, version, &(rng.u64(..1000))),
                }
                .expect("an entry key")
            })
            .collect::<Vec<_>>();
        let hex = |rng: &mut fastrand::Rng| format!("{:016x}", rng.u64(..));
        let nodes: Vec<String> = (0..3).map(|_| hex(&mut rng)).collect();
        let replica_tags = nodes.iter().map(|node| node[..8].to_owned()).collect();
        let tokens = (0..4)
            .map(|i| {
                // A token starts with its replica's id, as `LeaseToken::of_replica` makes it.
                format!("{}{:08x}", &nodes[i % 3][..8], rng.u32(..))
            })
            .collect();
        Self {
            fences: vec![Vec::new(); entries.len()],
            holders: vec![None; entries.len()],
            entries,
            caches,
            tags: vec!["tenant:1".into(), "all prices".into()],
            nodes,
            tokens,
            run_ids: Vec::new(),
            last_token: None,
            admissions: vec!["checkout", "search {b}"],
            replica_tags,
            permits: Vec::new(),
            last_take: None,
            permits_mostly,
            memory_full: false,
            info_refused: false,
            clock_ms,
            whole_server,
            scripts,
            rng,
        }
    }

    fn known_keys(&self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self
            .entries
            .iter()
            .flat_map(|entry| [entry.value().to_owned(), entry.lease(), entry.fence()])
            .map(String::into_bytes)
            .collect();
        keys.extend(
            self.tags
                .iter()
                .map(|tag| tag_key(PREFIX, tag).into_bytes()),
        );
        keys.push(probe_key().into_bytes());
        keys.push(hearing_key(PREFIX).into_bytes());
        keys.extend(
            self.admissions
                .iter()
                .map(|admission| admission_key(PREFIX, admission).into_bytes()),
        );
        keys
    }

    fn is_tag_key(&self, key: &[u8]) -> bool {
        self.tags
            .iter()
            .any(|tag| tag_key(PREFIX, tag).as_bytes() == key)
    }

    fn pick<'v, T>(&mut self, items: &'v [T]) -> &'v T {
        &items[self.rng.usize(..items.len())]
    }

    fn chance(&mut self, percent: u8) -> bool {
        self.rng.u8(..100) < percent
    }

    fn learn(&mut self, learn: Learn, reply: &Value) {
        match (learn, reply) {
            (Learn::Read(entry), Value::Array(fields)) if fields.len() == 10 => {
                if let Value::Int(fence) = fields[2] {
                    self.fences[entry].push(fence as u64);
                }
                if let Value::BulkString(lease) = &fields[3]
                    && (lease.as_slice() == b"granted" || lease.as_slice() == b"taken over")
                {
                    // The read's token is the last one this generator handed out.
                    self.holders[entry] = self.last_token.clone();
                }
                if let Some(run_id) = text_of(&fields[9])
                    && !run_id.is_empty()
                    && !self.run_ids.contains(&run_id)
                {
                    self.run_ids.push(run_id);
                }
            }
            (Learn::Invalidate(entry), Value::Int(fence)) if *fence > 0 => {
                self.fences[entry].push(*fence as u64);
            }
            (Learn::Permits, Value::Array(fields)) => {
                for token in fields.iter().skip(2).filter_map(text_of) {
                    if !self.permits.contains(&token) {
                        self.permits.push(token);
                    }
                }
                let excess = self.permits.len().saturating_sub(PERMITS_KEPT);
                self.permits.drain(..excess);
            }
            _ => {}
        }
    }
}

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// The permission probe's key, as `diagnosis.rs` names it.
fn probe_key() -> String {
    format!("{PREFIX}:{LAYOUT}:probe")
}

/// How many granted permit tokens the generator remembers.
const PERMITS_KEPT: usize = 24;

/// Source versions that meet at the edges the scripts care about: equal, just above, one
/// half of the 20 digits apart, the largest.
const VERSIONS: [u64; 7] = [
    1,
    2,
    3,
    9_999_999_999,
    10_000_000_000,
    10_000_000_001,
    u64::MAX,
];

impl Generator<'_> {
    fn next_step(&mut self) -> Step {
        if self.memory_full && self.chance(15) {
            self.memory_full = false;
            return Step::MemoryFull(false);
        }
        if self.info_refused && self.chance(10) {
            self.info_refused = false;
            return Step::InfoRefused(false);
        }
        if self.permits_mostly && self.chance(60) {
            return if self.chance(10) {
                self.sleep()
            } else {
                self.permits()
            };
        }
        match self.rng.u16(..1250) {
            0..=279 => self.read(),
            280..=449 => self.publish(),
            450..=539 => self.invalidate(),
            540..=589 => self.release(),
            590..=639 => self.beat(),
            640..=679 => self.tag(),
            680..=709 => {
                let tag = self.pick(&self.tags.clone()).clone();
                self.command(
                    vec![b"GET".to_vec(), tag_key(PREFIX, &tag).into_bytes()],
                    Shape::Exact,
                )
            }
            710..=749 => self.fast_read(),
            750..=769 => self.scan(),
            770..=859 => self.damage(),
            860..=929 => self.plain(),
            930..=969 => self.sleep(),
            970..=979 if !self.memory_full => {
                self.memory_full = true;
                Step::MemoryFull(true)
            }
            980..=989 if self.whole_server && !self.info_refused => {
                self.info_refused = true;
                Step::InfoRefused(true)
            }
            990..=995 => self.probe(),
            996..=999 if self.whole_server && self.chance(25) => Step::Restart,
            1000..=1199 => self.permits(),
            1200..=1249 => self.hearing(),
            _ => self.read(),
        }
    }

    /// The hearing registry: a replica's renewal (a lease from 1 ms, which ends within the
    /// sequence, to a second), a write's list of hearers, or an operator's damage to it.
    fn hearing(&mut self) -> Step {
        let key = hearing_key(PREFIX);
        let mut invocation = self.scripts.hearing.prepare_invoke();
        invocation.key(key.as_str());
        match self.rng.u8(..10) {
            0..=4 => {
                let replica = self.pick(&self.nodes.clone()).clone();
                let lease = match self.rng.u8(..4) {
                    0 => 1,
                    1 => self.rng.u64(2..30),
                    2 => 200,
                    _ => 1000,
                };
                let channel = format!("{}:r:{replica}", notice_channel(PREFIX));
                let message = format!("h 3 {}", self.rng.u64(..1 << 40));
                (invocation.arg("renew").arg(replica.as_str()))
                    .arg(lease)
                    .arg(channel.as_str())
                    .arg(message.as_str());
                Self::script_step(
                    |evalsha| invocation.arguments(evalsha),
                    Shape::Exact,
                    Learn::Nothing,
                )
            }
            5..=7 => {
                let grace = match self.rng.u8(..3) {
                    0 => 0,
                    1 => 20,
                    _ => 500,
                };
                invocation.arg("list").arg(grace);
                Self::script_step(
                    |evalsha| invocation.arguments(evalsha),
                    Shape::Hearing,
                    Learn::Nothing,
                )
            }
            8 => self.command(
                vec![b"SET".to_vec(), key.into_bytes(), b"not a hash".to_vec()],
                Shape::Exact,
            ),
            _ => {
                let field = self.pick(&self.nodes.clone()).clone();
                let ends = match self.rng.u8(..3) {
                    0 => (self.clock_ms + self.rng.u64(..300)).to_string(),
                    1 => "abc".to_owned(),
                    _ => self.clock_ms.saturating_sub(5).to_string(),
                };
                let field = match self.chance(20) {
                    true => "@since".to_owned(),
                    false => field,
                };
                self.command(
                    vec![
                        b"HSET".to_vec(),
                        key.into_bytes(),
                        field.into_bytes(),
                        ends.into_bytes(),
                    ],
                    Shape::Exact,
                )
            }
        }
    }

    /// A real sleep, so leases, values and permits expire; now and then to just past the
    /// next turn of the permits' remainder (where it is near, or in a sequence mostly of
    /// permits), so the remainder goes round within a sequence.
    fn sleep(&mut self) -> Step {
        let to_turn = TURN_MS - self.clock_ms % TURN_MS;
        let near = to_turn <= TURN_MS / 5;
        if (near && self.chance(50)) || (self.permits_mostly && self.chance(25)) {
            return Step::Sleep(Duration::from_millis(to_turn + self.rng.u64(..3)));
        }
        Step::Sleep(Duration::from_millis(self.rng.u64(1..12)))
    }

    fn command(&self, command: Vec<Vec<u8>>, shape: Shape) -> Step {
        Step::Command {
            command,
            shape,
            admin: false,
            learn: Learn::Nothing,
        }
    }

    fn entry(&mut self) -> usize {
        self.rng.usize(..self.entries.len())
    }

    fn token(&mut self) -> String {
        self.pick(&self.tokens.clone()).clone()
    }

    fn node(&mut self) -> String {
        self.pick(&self.nodes.clone()).clone()
    }

    /// A key's bucket channel, as `ops.rs` names it (`listen::bucket_channel`).
    fn channel(&mut self) -> String {
        format!("{}:{:03x}", notice_channel(PREFIX), self.rng.u16(..4096))
    }

    fn version(&mut self) -> Option<u64> {
        self.chance(50).then(|| *self.pick(&VERSIONS))
    }

    /// A script call as the store sends it: EVALSHA, and EVAL after NOSCRIPT.
    fn script_step(arguments: impl Fn(bool) -> Vec<Vec<u8>>, shape: Shape, learn: Learn) -> Step {
        Step::Script {
            evalsha: arguments(true),
            eval: arguments(false),
            shape,
            learn,
            by_text: false,
        }
    }

    /// `Client::read`: the read script, with or without a lease request.
    fn read(&mut self) -> Step {
        let n = self.entry();
        let mode = *self.pick(&["none", "miss", "miss", "miss", "refresh", "force"]);
        let optional = |rng: &mut fastrand::Rng, percent: u8, max: u64| -> i64 {
            if rng.u8(..100) < percent {
                rng.u64(..max) as i64
            } else {
                -1
            }
        };
        let (ttl, token, quiet_after, held_after, recompute) = if mode == "none" {
            (0, String::new(), -1, -1, -1)
        } else {
            let ttl: u64 = if self.chance(10) {
                400
            } else {
                self.rng.u64(2..40)
            };
            let token = self.token();
            self.last_token = Some(token.clone());
            (
                ttl.max(1),
                token,
                optional(&mut self.rng, 50, 30),
                optional(&mut self.rng, 40, 60),
                optional(&mut self.rng, 50, 300),
            )
        };
        let entry = &self.entries[n];
        let mut invocation = self.scripts.read.prepare_invoke();
        invocation
            .key(entry.value())
            .key(entry.lease())
            .key(entry.fence())
            .arg(mode)
            .arg(ttl)
            .arg(token.as_str())
            .arg(quiet_after)
            .arg(held_after)
            .arg(recompute);
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Read,
            Learn::Read(n),
        )
    }

    /// A fence for a publish: the latest the entry's replies named, an older one, none,
    /// one made from the clock, or another entry's.
    fn fence_for(&mut self, n: usize) -> u64 {
        let seen = self.fences[n].clone();
        match self.rng.u8(..100) {
            0..=64 if !seen.is_empty() => *seen.last().expect("not empty"),
            65..=79 if !seen.is_empty() => *self.pick(&seen),
            80..=84 => 0,
            85..=89 => self.clock_ms * 1024 + self.rng.u64(..4),
            _ => {
                let all: Vec<u64> = self.fences.concat();
                if all.is_empty() {
                    self.rng.u64(..1 << 53)
                } else {
                    *self.pick(&all)
                }
            }
        }
    }

    fn header(&mut self, fence: u64) -> Header {
        let now = self.clock_ms;
        let fresh = now.saturating_add_signed(self.rng.i64(-30..60));
        let stale = fresh + self.rng.u64(..60);
        let keep = stale + self.rng.u64(..80);
        let fence = match self.rng.u8(..100) {
            0..=84 => fence,
            85..=89 => self.rng.u64(..),
            90..=94 => fence + self.rng.u64(1..3000),
            _ => 0,
        };
        Header {
            fresh_until_ms: fresh,
            stale_until_ms: stale,
            keep_until_ms: keep,
            loaded_at_ms: now,
            delta: self.rng.f64(),
            fence,
            source_version: self.version(),
        }
    }

    /// An envelope as `tier` writes it, or bytes that only look like one.
    fn envelope(&mut self, header: &Header) -> Vec<u8> {
        let wire = Wire::default();
        let length = match self.rng.u8(..10) {
            0..=4 => self.rng.usize(..100),
            5..=7 => self.rng.usize(100..2000),
            _ => self.rng.usize(1900..3000),
        };
        let tags: Vec<(std::sync::Arc<str>, u64)> = if self.chance(20) {
            vec![(self.tags[0].as_str().into(), self.rng.u64(..1 << 52))]
        } else {
            Vec::new()
        };
        let mut encoded = wire
            .encode(header, &tags, &"x".repeat(length))
            .expect("an envelope");
        if self.chance(15) {
            // Right at the largest envelope a notice carries, or one byte either side.
            let target = NOTICE_VALUE_MAX + self.rng.usize(..3) - 1;
            let length = (length + target).saturating_sub(encoded.len());
            encoded = wire
                .encode(header, &tags, &"x".repeat(length))
                .expect("an envelope");
        }
        match self.rng.u8(..100) {
            0..=4 => {
                let mut short: Vec<u8> = b"STPD\x03".to_vec();
                short.extend((0..self.rng.usize(..77)).map(|_| self.rng.u8(..)));
                short.truncate(self.rng.usize(..=short.len()));
                short
            }
            5..=9 => {
                encoded[self.rng.usize(..5)] ^= 0x20;
                encoded
            }
            10..=14 => {
                let at = self.rng.usize(5..82);
                encoded[at] = self.rng.u8(..);
                encoded
            }
            15..=19 => wire.too_large(header),
            _ => encoded,
        }
    }

    /// `Client::publish`.
    fn publish(&mut self) -> Step {
        let n = self.entry();
        let fence = self.fence_for(n);
        let header = self.header(fence);
        let envelope = self.envelope(&header);
        let keep_until = match self.rng.u8(..100) {
            0..=84 => header.keep_until_ms,
            85..=89 => self.clock_ms.saturating_sub(self.rng.u64(..50)),
            // Far enough that its TTL, a double, prints with an exponent.
            90..=92 => u64::MAX,
            // Far, but an integer to Redis still.
            93..=95 => 1 << 54,
            _ => self.clock_ms + self.rng.u64(..100),
        };
        let version = match self.rng.u8(..100) {
            0..=79 => header.source_version,
            _ => self.version(),
        }
        .map(version_digits)
        .unwrap_or_default();
        let token = match self.rng.u8(..100) {
            0..=59 => self.holders[n].clone().unwrap_or_default(),
            60..=79 => self.token(),
            _ => String::new(),
        };
        let incarnation = match self.rng.u8(..100) {
            0..=59 => self.run_ids.last().cloned().unwrap_or_default(),
            60..=84 => String::new(),
            85..=92 if !self.run_ids.is_empty() => self.pick(&self.run_ids.clone()).clone(),
            _ => format!("{:040x}", self.rng.u128(..)),
        };
        let (channel, node) = (self.channel(), self.node());
        let recompute = self.rng.u64(..500);
        // A write-through's: the fence of its own invalidation, and of its start.
        let (own, began) = match self.rng.u8(..100) {
            0..=69 => (String::new(), String::new()),
            _ => {
                let own = self.fence_for(n);
                let began = self.clock_ms.saturating_sub(self.rng.u64(..300)) * 1024;
                (own.to_string(), began.to_string())
            }
        };
        let entry = &self.entries[n];
        let mut invocation = self.scripts.publish.prepare_invoke();
        invocation
            .key(entry.value())
            .key(entry.lease())
            .key(entry.fence())
            .arg(fence.to_string())
            .arg(envelope.as_slice())
            .arg(keep_until)
            .arg(version.as_str())
            .arg(channel.as_str())
            .arg(node.as_str())
            .arg(token.as_str())
            .arg(recompute)
            .arg(incarnation.as_str())
            .arg(NOTICE_VALUE_MAX)
            .arg(own.as_str())
            .arg(began.as_str());
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Exact,
            Learn::Nothing,
        )
    }

    /// `Client::invalidate`, with and without a source version.
    fn invalidate(&mut self) -> Step {
        let n = self.entry();
        let version = self.version().map(version_digits).unwrap_or_default();
        let (channel, node) = (self.channel(), self.node());
        let entry = &self.entries[n];
        let mut invocation = self.scripts.invalidate.prepare_invoke();
        invocation
            .key(entry.value())
            .key(entry.lease())
            .key(entry.fence())
            .arg(channel.as_str())
            .arg(node.as_str())
            .arg(version.as_str());
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Exact,
            Learn::Invalidate(n),
        )
    }

    /// A holder's token most of the time, another replica's otherwise.
    fn holder_or_not(&mut self, n: usize) -> String {
        match (self.chance(60), self.holders[n].clone()) {
            (true, Some(holder)) => holder,
            _ => self.token(),
        }
    }

    /// `Client::release`.
    fn release(&mut self) -> Step {
        let n = self.entry();
        let token = self.holder_or_not(n);
        let (channel, node) = (self.channel(), self.node());
        let entry = &self.entries[n];
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(entry.value())
            .key(entry.lease())
            .key(entry.fence())
            .arg(token.as_str())
            .arg(channel.as_str())
            .arg(node.as_str());
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Exact,
            Learn::Nothing,
        )
    }

    /// `Client::beat`.
    fn beat(&mut self) -> Step {
        let n = self.entry();
        let token = self.holder_or_not(n);
        let entry = &self.entries[n];
        let mut invocation = self.scripts.beat.prepare_invoke();
        invocation
            .key(entry.value())
            .key(entry.lease())
            .key(entry.fence())
            .arg(token.as_str());
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Exact,
            Learn::Nothing,
        )
    }

    /// `Client::invalidate_tag`.
    fn tag(&mut self) -> Step {
        let tag = self.pick(&self.tags.clone()).clone();
        let keep: u64 = if self.chance(60) {
            self.rng.u64(1..80)
        } else {
            3_600_000
        };
        let node = self.node();
        let mut invocation = self.scripts.tag.prepare_invoke();
        invocation
            .key(tag_key(PREFIX, &tag).as_str())
            .arg(keep)
            .arg(notice_channel(PREFIX).as_str())
            .arg(node.as_str())
            .arg(tag.as_str());
        Self::script_step(
            |evalsha| invocation.arguments(evalsha),
            Shape::Tag,
            Learn::Nothing,
        )
    }

    /// The permission probe (`diagnosis.rs`): EVAL, once.
    fn probe(&mut self) -> Step {
        let key = probe_key();
        let mut invocation = self.scripts.probe.prepare_invoke();
        invocation
            .key(key.as_str())
            .arg(format!("{key}:channel").as_str());
        Step::Script {
            evalsha: invocation.arguments(true),
            eval: invocation.arguments(false),
            shape: Shape::Exact,
            learn: Learn::Nothing,
            by_text: true,
        }
    }

    /// `Client::take_permits`, `renew_permit` and `give_permit` on an admission's permits,
    /// and what else may be found at their key.
    fn permits(&mut self) -> Step {
        let admission = if self.permits_mostly && self.chance(80) {
            self.admissions[0]
        } else {
            *self.pick(&self.admissions.clone())
        };
        let key = admission_key(PREFIX, admission);
        let mut invocation = self.scripts.permits.prepare_invoke();
        invocation.key(key.as_str());
        let learn = match self.rng.u8(..40) {
            0..=19 => {
                let arguments = self.take();
                invocation.arg(&arguments);
                Learn::Permits
            }
            20..=26 => {
                let (ttl, token) = (self.permit_ttl(), self.permit_token());
                invocation.arg("renew").arg(ttl).arg(token.as_str());
                Learn::Nothing
            }
            27..=33 => {
                let token = self.permit_token();
                invocation.arg("give").arg(token.as_str());
                Learn::Nothing
            }
            34 => {
                invocation.arg("borrow").arg(self.permit_token().as_str());
                Learn::Nothing
            }
            _ => return self.permits_damage(key.into_bytes()),
        };
        Self::script_step(|evalsha| invocation.arguments(evalsha), Shape::Exact, learn)
    }

    /// A take's arguments (`'take'` first): some replica's new tokens, one it was granted
    /// already now and then (a call sent again), or the latest take's tokens again; a
    /// load's returned permit or none.
    fn take(&mut self) -> Vec<String> {
        let (tag, tokens) = match self.last_take.clone() {
            Some(last) if self.chance(15) => last,
            _ => {
                let tag = self.pick(&self.replica_tags.clone()).clone();
                let count = match self.rng.u8(..10) {
                    0 => 0,
                    1..=5 => 1,
                    _ => self.rng.usize(2..5),
                };
                let mut tokens: Vec<String> = Vec::new();
                for _ in 0..count {
                    let held = self.granted_to(&tag);
                    let token = match self.rng.u8(..10) {
                        0..=1 if !held.is_empty() => self.pick(&held).clone(),
                        2 if !tokens.is_empty() => self.pick(&tokens).clone(),
                        _ => self.new_permit_token(&tag),
                    };
                    tokens.push(token);
                }
                (tag, tokens)
            }
        };
        let held = self.granted_to(&tag);
        let returned = match self.rng.u8(..10) {
            0..=3 if !held.is_empty() => self.pick(&held).clone(),
            4 => self.permit_token(),
            _ => String::new(),
        };
        let mut arguments = vec![
            "take".to_owned(),
            tag.clone(),
            self.rng.u64(1..=6).to_string(),
            self.permit_ttl().to_string(),
            self.permit_ttl().to_string(),
            returned,
        ];
        arguments.extend(tokens.iter().cloned());
        self.last_take = Some((tag, tokens));
        arguments
    }

    /// A permit's or a waiter's TTL: most lapse within a sequence, some outlive it.
    fn permit_ttl(&mut self) -> u64 {
        match self.rng.u8(..10) {
            0..=4 => self.rng.u64(1..40),
            5..=8 => self.rng.u64(40..300),
            _ => self.rng.u64(300..2000),
        }
    }

    /// A new permit token of the replica `tag`: its tag and 16 random hex digits.
    fn new_permit_token(&mut self, tag: &str) -> String {
        format!("{tag}{:016x}", self.rng.u64(..))
    }

    /// The tokens granted to `tag`'s replica (given back or lapsed since, some).
    fn granted_to(&self, tag: &str) -> Vec<String> {
        self.permits
            .iter()
            .filter(|token| token.starts_with(tag))
            .cloned()
            .collect()
    }

    /// A token granted once, mostly; one never granted otherwise.
    fn permit_token(&mut self) -> String {
        if !self.permits.is_empty() && self.chance(75) {
            return self.pick(&self.permits.clone()).clone();
        }
        let tag = self.pick(&self.replica_tags.clone()).clone();
        self.new_permit_token(&tag)
    }

    /// What an operator, an old build or another tool may leave in an admission's hash.
    fn permits_damage(&mut self, key: Vec<u8>) -> Step {
        let tag = self.pick(&self.replica_tags.clone()).clone();
        let clock = self.clock_ms;
        let expiry = match self.rng.u8(..10) {
            0..=5 => (clock + self.rng.u64(..300)).to_string(),
            6 => clock.saturating_sub(self.rng.u64(1..50)).to_string(),
            7 => "99999999999999999".to_owned(),
            8 => "abc".to_owned(),
            _ => format!("00{}", clock + 100),
        };
        let count = match self.rng.u8(..10) {
            0 => String::new(),
            1 => " ".to_owned(),
            2 => " 99999999999999999".to_owned(),
            3 => " x".to_owned(),
            4 => "  2".to_owned(),
            _ => format!(" {}", self.rng.u64(..6)),
        };
        let hset = |field: String, value: String| {
            vec![
                b"HSET".to_vec(),
                key.clone(),
                field.into_bytes(),
                value.into_bytes(),
            ]
        };
        let command = match self.rng.u8(..9) {
            0 => vec![b"SET".to_vec(), key.clone(), b"not a hash".to_vec()],
            1 => hset("f".into(), "v".into()),
            // A waiter of this replica or another (one no take names, among them).
            2 | 3 => {
                let name = match self.rng.u8(..4) {
                    0 => "0000000f".to_owned(),
                    1 => "abc".to_owned(),
                    _ => tag.clone(),
                };
                hset(format!("w {name}"), format!("{expiry}{count}"))
            }
            // A permit held by a replica (one no take names, among them), or one whose
            // token is not 24 digits (an older build's 16, among them).
            4 | 5 => {
                let token = match self.rng.u8(..6) {
                    0 => "abc".to_owned(),
                    1 => format!("{tag}{:08x}", self.rng.u32(..)),
                    2 => format!("0000000e{:016x}", self.rng.u64(..)),
                    _ => self.new_permit_token(&tag),
                };
                let value = if self.chance(80) {
                    expiry
                } else {
                    format!("{expiry}{count}")
                };
                hset(format!("p {token}"), value)
            }
            6 => hset(format!("p {}", self.new_permit_token(&tag)), "1 2 3".into()),
            7 => hset(format!("q {tag}"), expiry),
            _ => vec![
                b"PEXPIRE".to_vec(),
                key.clone(),
                self.rng.u64(1..40).to_string().into_bytes(),
            ],
        };
        Step::Command {
            command,
            shape: Shape::Exact,
            admin: true,
            learn: Learn::Nothing,
        }
    }

    /// `read_fresh`: `MGET value fence` and `PTTL value`.
    fn fast_read(&mut self) -> Step {
        let n = self.entry();
        let entry = &self.entries[n];
        let (value, fence) = (
            entry.value().as_bytes().to_vec(),
            entry.fence().into_bytes(),
        );
        if self.chance(50) {
            self.command(vec![b"MGET".to_vec(), value, fence], Shape::Exact)
        } else {
            self.command(vec![b"PTTL".to_vec(), value], Shape::Pttl)
        }
    }

    /// `invalidate_all`'s SCAN, or a pattern made from a key to try Redis's globs.
    fn scan(&mut self) -> Step {
        let count = if self.chance(70) {
            1000
        } else {
            self.rng.u64(1..4)
        };
        let pattern = match self.rng.u8(..10) {
            0..=4 => {
                let (name, version) = *self.pick(&self.caches.clone());
                EntryKey::cache_pattern(PREFIX, name, version).into_bytes()
            }
            5 => b"*".to_vec(),
            _ => {
                let key = self.pick(&self.known_keys()).clone();
                self.glob_of(&key)
            }
        };
        Step::Scan { pattern, count }
    }

    /// `key` with some of its bytes replaced by glob syntax that may or may not match it.
    fn glob_of(&mut self, key: &[u8]) -> Vec<u8> {
        let mut pattern = Vec::new();
        let mut at = 0;
        while at < key.len() {
            let byte = key[at];
            match self.rng.u8(..40) {
                0 => pattern.push(b'?'),
                1 => {
                    pattern.push(b'*');
                    at += self.rng.usize(..4);
                }
                2 => pattern.extend([b'[', byte, b']']),
                3 => pattern.extend([b'[', b'^', byte, b']']),
                4 => pattern.extend([
                    b'[',
                    byte.saturating_sub(1),
                    b'-',
                    byte.saturating_add(1),
                    b']',
                ]),
                5 => pattern.extend([
                    b'[',
                    byte.saturating_add(2),
                    b'-',
                    byte.saturating_sub(1),
                    b']',
                ]),
                6 => pattern.extend([b'\\', byte]),
                7 => pattern.push(b'x'),
                8 => pattern.extend([b'[', b'\\', byte, b'a', b']']),
                _ => pattern.push(byte),
            }
            at += 1;
        }
        match self.rng.u8(..10) {
            0 => pattern.push(b'*'),
            1 => pattern.push(b'['),
            2 => pattern.push(b'\\'),
            3 => pattern.extend(b"[a-"),
            _ => {}
        }
        pattern
    }

    /// What an operator (or an old build, or a bug) may leave at stampede's keys.
    fn damage(&mut self) -> Step {
        let n = self.entry();
        let entry = self.entries[n].clone();
        let keys = self.known_keys();
        let any_key = self.pick(&keys).clone();
        let px = |rng: &mut fastrand::Rng| -> Vec<Vec<u8>> {
            if rng.bool() {
                vec![b"PX".to_vec(), rng.u64(1..60).to_string().into_bytes()]
            } else {
                Vec::new()
            }
        };
        let set = |key: Vec<u8>, value: Vec<u8>, rest: Vec<Vec<u8>>| {
            let mut command = vec![b"SET".to_vec(), key, value];
            command.extend(rest);
            command
        };
        let command = match self.rng.u8(..13) {
            0 => {
                let garbage: Vec<u8> = (0..self.rng.usize(..100))
                    .map(|_| self.rng.u8(..))
                    .collect();
                set(entry.value().into(), garbage, px(&mut self.rng))
            }
            1 => {
                let fence = self.fence_for(n);
                let header = self.header(fence);
                set(entry.value().into(), self.envelope(&header), Vec::new())
            }
            2 => {
                // Deadlines far past the key's TTL.
                let fence = self.fence_for(n);
                let mut header = self.header(fence);
                header.keep_until_ms += 60_000;
                header.stale_until_ms = header.stale_until_ms.min(header.keep_until_ms);
                let envelope = self.envelope(&header);
                set(
                    entry.value().into(),
                    envelope,
                    vec![b"PX".to_vec(), b"50".to_vec()],
                )
            }
            3 => {
                let text = self.lease_text();
                set(entry.lease().into_bytes(), text, px(&mut self.rng))
            }
            4 => {
                let text = self.fence_text();
                set(entry.fence().into_bytes(), text, px(&mut self.rng))
            }
            5 => {
                let tag = self.pick(&self.tags.clone()).clone();
                let text = self.tag_text();
                set(tag_key(PREFIX, &tag).into_bytes(), text, px(&mut self.rng))
            }
            6 | 7 => vec![b"DEL".to_vec(), any_key],
            8 => vec![b"LPUSH".to_vec(), any_key, b"x".to_vec()],
            9 => vec![b"HSET".to_vec(), any_key, b"f".to_vec(), b"v".to_vec()],
            10 if self.chance(50) => vec![
                b"PEXPIRE".to_vec(),
                any_key,
                self.rng.u64(1..40).to_string().into_bytes(),
            ],
            10 => vec![b"PERSIST".to_vec(), any_key],
            11 => set(any_key, b"kept".to_vec(), vec![b"KEEPTTL".to_vec()]),
            _ if self.whole_server && self.chance(30) => vec![b"FLUSHALL".to_vec()],
            _ => vec![b"DEL".to_vec(), entry.fence().into_bytes()],
        };
        Step::Command {
            command,
            shape: Shape::Exact,
            admin: true,
            learn: Learn::Nothing,
        }
    }

    fn lease_text(&mut self) -> Vec<u8> {
        let fence = match self.rng.u8(..10) {
            0 => "99999999999999999".to_owned(),
            1 => "9007199254740993".to_owned(),
            2 => "x".to_owned(),
            _ => (self.clock_ms * 1024 + self.rng.u64(..8)).to_string(),
        };
        let token = match self.rng.u8(..10) {
            0 => "zz".to_owned(),
            1 => "ABCDEF0123".to_owned(),
            _ => self.token(),
        };
        let at = |rng: &mut fastrand::Rng, clock: u64| match rng.u8(..10) {
            0 => "99999999999999999".to_owned(),
            _ => clock.saturating_sub(rng.u64(..60)).to_string(),
        };
        let (granted, alive) = (
            at(&mut self.rng, self.clock_ms),
            at(&mut self.rng, self.clock_ms),
        );
        let mut text = match self.rng.u8(..12) {
            0 => "hello".to_owned(),
            1 => "1 2".to_owned(),
            2 => format!("{fence} {token} {granted}"),
            3 => format!("-1 {token} {granted} {alive}"),
            _ => format!("{fence} {token} {granted} {alive}"),
        };
        if self.chance(40) {
            let _ = write!(text, " {}", self.rng.u64(..500));
        }
        if self.chance(30) {
            text.push_str(" w");
        }
        text.into_bytes()
    }

    fn fence_text(&mut self) -> Vec<u8> {
        let fence = self.clock_ms * 1024 + self.rng.u64(..8);
        let mark = version_digits(*self.pick(&VERSIONS));
        match self.rng.u8(..12) {
            0 => "abc".to_owned(),
            1 => "9007199254740993".to_owned(),
            2 => "00042".to_owned(),
            3 => " 5".to_owned(),
            4 => format!("{fence} m123"),
            5 => format!("{fence} r99999999999999999"),
            6 => format!("{fence} m{mark} r{}", self.rng.u64(..500)),
            7 => format!("{fence} r{} m{mark}", self.rng.u64(..500)),
            8 => format!("{fence} mx m{mark}"),
            _ => format!("{fence} m{mark}"),
        }
        .into_bytes()
    }

    fn tag_text(&mut self) -> Vec<u8> {
        match self.rng.u8(..7) {
            0 => "abc".to_owned(),
            1 => "-1".to_owned(),
            2 => "9007199254740993".to_owned(),
            3 => "0012".to_owned(),
            // Ahead of the clock: the next version is one above it.
            4 => (self.clock_ms * 1000 + 1_000_000).to_string(),
            _ => (self.clock_ms * 1000).to_string(),
        }
        .into_bytes()
    }

    /// Plain commands: the store's own (GET, PTTL, EXISTS…), and the replies to mistakes.
    fn plain(&mut self) -> Step {
        let keys = self.known_keys();
        let key = self.pick(&keys).clone();
        let other = self.pick(&keys).clone();
        let per_key: Vec<(Vec<Vec<u8>>, Shape)> = vec![
            (vec![b"GET".to_vec(), key.clone()], Shape::Exact),
            (vec![b"PTTL".to_vec(), key.clone()], Shape::Pttl),
            (vec![b"TYPE".to_vec(), key.clone()], Shape::Exact),
            (vec![b"PEXPIRETIME".to_vec(), key.clone()], Shape::Exact),
            (
                vec![b"EXISTS".to_vec(), key.clone(), key.clone()],
                Shape::Exact,
            ),
            (vec![b"SET".to_vec(), key.clone()], Shape::Exact),
            (
                vec![
                    b"SET".to_vec(),
                    key.clone(),
                    b"v".to_vec(),
                    b"PX".to_vec(),
                    b"0".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![
                    b"SET".to_vec(),
                    key.clone(),
                    b"v".to_vec(),
                    b"PX".to_vec(),
                    b"010".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![
                    b"SET".to_vec(),
                    key.clone(),
                    b"v".to_vec(),
                    b"PX".to_vec(),
                    b"5".to_vec(),
                    b"KEEPTTL".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![
                    b"SET".to_vec(),
                    key.clone(),
                    b"v".to_vec(),
                    b"BOGUS".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![b"PEXPIRE".to_vec(), key.clone(), b"x".to_vec()],
                Shape::Exact,
            ),
            (
                vec![b"HSET".to_vec(), key.clone(), b"f".to_vec()],
                Shape::Exact,
            ),
        ];
        let whole: Vec<(Vec<Vec<u8>>, Shape)> = vec![
            (
                vec![b"EXISTS".to_vec(), key.clone(), other.clone()],
                Shape::Exact,
            ),
            (
                vec![b"DEL".to_vec(), key.clone(), other.clone()],
                Shape::Exact,
            ),
            (
                vec![b"MGET".to_vec(), key.clone(), other.clone()],
                Shape::Exact,
            ),
            (vec![b"TIME".to_vec()], Shape::Time),
            (vec![b"TIME".to_vec(), b"now".to_vec()], Shape::Exact),
            (vec![b"PING".to_vec()], Shape::Exact),
            (vec![b"PING".to_vec(), b"hello".to_vec()], Shape::Exact),
            (
                vec![b"ping".to_vec(), b"a".to_vec(), b"b".to_vec()],
                Shape::Exact,
            ),
            (
                vec![
                    b"CLIENT".to_vec(),
                    b"SETNAME".to_vec(),
                    b"stampede-1".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![b"CLIENT".to_vec(), b"SETNAME".to_vec(), b"a b".to_vec()],
                Shape::Exact,
            ),
            (vec![b"CLIENT".to_vec(), b"nosuch".to_vec()], Shape::Exact),
            (vec![b"INFO".to_vec(), b"server".to_vec()], Shape::Info),
            (
                vec![
                    b"PUBLISH".to_vec(),
                    self.channel().into_bytes(),
                    b"hello".to_vec(),
                ],
                Shape::Publish,
            ),
            (
                vec![
                    b"NOSUCH".to_vec(),
                    b"a\nb".to_vec(),
                    "é".repeat(80).into_bytes(),
                ],
                Shape::Exact,
            ),
            (vec![b"GET".to_vec()], Shape::Exact),
            (vec![b"SCAN".to_vec(), b"x".to_vec()], Shape::Exact),
            (
                vec![
                    b"SCAN".to_vec(),
                    b"0".to_vec(),
                    b"COUNT".to_vec(),
                    b"0".to_vec(),
                ],
                Shape::Exact,
            ),
            (
                vec![b"EVALSHA".to_vec(), b"abc".to_vec(), b"0".to_vec()],
                Shape::Exact,
            ),
            (
                vec![b"EVALSHA".to_vec(), vec![b'0'; 40], b"x".to_vec()],
                Shape::Exact,
            ),
            (
                vec![
                    b"EVAL".to_vec(),
                    self.scripts.read.code().as_bytes().to_vec(),
                    b"3".to_vec(),
                    key.clone(),
                ],
                Shape::Exact,
            ),
        ];
        let (command, shape) = if self.whole_server && self.chance(50) {
            self.pick(&whole).clone()
        } else {
            self.pick(&per_key).clone()
        };
        self.command(command, shape)
    }
}
