//! The model's trickier rules, each pinned where the differential test reaches it only
//! by chance (or, for an exact millisecond, not at all).
use super::*;
use crate::shared::keys::EntryKey;
use crate::shared::redis::Scripts;
use crate::shared::wire::{version_digits, Header, Wire};

const RUN_ID: &str = "0123456789abcdef0123456789abcdef01234567";
const OTHER_RUN_ID: &str = "fedcba9876543210fedcba9876543210fedcba98";
/// A server time, in milliseconds (2023-11-14).
const T: u64 = 1_700_000_000_000;
const NODE: &str = "00000000000000aa";
const CHANNEL: &str = "stampede:3:notices:001";
const A: &str = "aaaaaaaa00000001";
const B: &str = "bbbbbbbb00000002";

fn us(ms: u64) -> u64 {
    ms * 1000
}

fn command(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|arg| arg.to_vec()).collect()
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

fn entry() -> EntryKey {
    EntryKey::new("stampede", "prices", 1, &42_u64).expect("a key")
}

/// The model and the scripts as the store sends them (EVAL: each call loads its script).
struct Fixture {
    server: Server,
    scripts: Scripts,
    key: EntryKey,
}

impl Fixture {
    fn new() -> Self {
        Self {
            server: Server::new(RUN_ID.into()),
            scripts: Scripts::new(),
            key: entry(),
        }
    }

    fn run(&mut self, at_ms: u64, args: &[&[u8]]) -> Executed {
        self.server.execute(us(at_ms), &command(args))
    }

    fn eval(&mut self, at_ms: u64, arguments: Vec<Vec<u8>>) -> Executed {
        self.server.execute(us(at_ms), &arguments)
    }

    fn read(&mut self, at_ms: u64, mode: &str, token: &str, quiet: i64, held: i64) -> Vec<Value> {
        let mut invocation = self.scripts.read.prepare_invoke();
        invocation
            .key(self.key.value())
            .key(self.key.lease())
            .key(self.key.fence())
            .arg(mode)
            .arg(100_u64)
            .arg(token)
            .arg(quiet)
            .arg(held)
            .arg(-1_i64);
        match self.eval(at_ms, invocation.arguments(false)).reply {
            Value::Array(fields) => fields,
            other => panic!("read answered {other:?}"),
        }
    }

    fn publish(
        &mut self,
        at_ms: u64,
        fence: u64,
        envelope: &[u8],
        version: Option<u64>,
        token: &str,
        incarnation: &str,
    ) -> Executed {
        let mut invocation = self.scripts.publish.prepare_invoke();
        invocation
            .key(self.key.value())
            .key(self.key.lease())
            .key(self.key.fence())
            .arg(fence.to_string())
            .arg(envelope)
            .arg(at_ms + 1000)
            .arg(version.map(version_digits).unwrap_or_default().as_str())
            .arg(CHANNEL)
            .arg(NODE)
            .arg(token)
            .arg(20_u64)
            .arg(incarnation)
            .arg(2048_usize)
            .arg("")
            .arg("");
        self.eval(at_ms, invocation.arguments(false))
    }

    /// A write-through's publish: `own` its own invalidation's fence, `began` its start's.
    fn publish_written_through(
        &mut self,
        at_ms: u64,
        fence: u64,
        token: &str,
        (own, began): (u64, u64),
    ) -> Executed {
        let bytes = envelope(fence, at_ms, None, 10);
        let mut invocation = self.scripts.publish.prepare_invoke();
        invocation
            .key(self.key.value())
            .key(self.key.lease())
            .key(self.key.fence())
            .arg(fence.to_string())
            .arg(bytes.as_slice())
            .arg(at_ms + 1000)
            .arg("")
            .arg(CHANNEL)
            .arg(NODE)
            .arg(token)
            .arg(20_u64)
            .arg("")
            .arg(2048_usize)
            .arg(own.to_string())
            .arg(began.to_string());
        self.eval(at_ms, invocation.arguments(false))
    }

    fn invalidate(&mut self, at_ms: u64, version: Option<u64>) -> Executed {
        let mut invocation = self.scripts.invalidate.prepare_invoke();
        invocation
            .key(self.key.value())
            .key(self.key.lease())
            .key(self.key.fence())
            .arg(CHANNEL)
            .arg(NODE)
            .arg(version.map(version_digits).unwrap_or_default().as_str());
        self.eval(at_ms, invocation.arguments(false))
    }

    fn beat(&mut self, at_ms: u64, token: &str) -> Value {
        let mut invocation = self.scripts.beat.prepare_invoke();
        invocation
            .key(self.key.value())
            .key(self.key.lease())
            .key(self.key.fence())
            .arg(token);
        self.eval(at_ms, invocation.arguments(false)).reply
    }

    fn tag(&mut self, at_ms: u64) -> Executed {
        let mut invocation = self.scripts.tag.prepare_invoke();
        invocation
            .key("stampede:3:tag:{t}")
            .arg(1000_u64)
            .arg("stampede:3:notices")
            .arg(NODE)
            .arg("t");
        self.eval(at_ms, invocation.arguments(false))
    }

    fn probe(&mut self, at_ms: u64) -> Value {
        let mut invocation = self.scripts.probe.prepare_invoke();
        invocation
            .key("stampede:3:probe")
            .arg("stampede:3:probe:channel");
        self.eval(at_ms, invocation.arguments(false)).reply
    }

    fn value_key(&self) -> String {
        self.key.value().to_owned()
    }

    fn get(&mut self, at_ms: u64, key: &str) -> Value {
        self.run(at_ms, &[b"GET", key.as_bytes()]).reply
    }

    /// `take` on [`ADMISSION`]'s permits, the waiters' TTL the permits'.
    fn take(
        &mut self,
        at_ms: u64,
        replica: &str,
        (limit, ttl): (u64, u64),
        returned: &str,
        tokens: &[&str],
    ) -> Value {
        let mut invocation = self.scripts.permits.prepare_invoke();
        invocation
            .key(ADMISSION)
            .arg("take")
            .arg(replica)
            .arg(limit)
            .arg(ttl)
            .arg(ttl)
            .arg(returned)
            .arg(tokens);
        self.eval(at_ms, invocation.arguments(false)).reply
    }

    fn renew(&mut self, at_ms: u64, ttl: u64, token: &str) -> Value {
        let mut invocation = self.scripts.permits.prepare_invoke();
        invocation.key(ADMISSION).arg("renew").arg(ttl).arg(token);
        self.eval(at_ms, invocation.arguments(false)).reply
    }

    fn give(&mut self, at_ms: u64, token: &str) -> Value {
        let mut invocation = self.scripts.permits.prepare_invoke();
        invocation.key(ADMISSION).arg("give").arg(token);
        self.eval(at_ms, invocation.arguments(false)).reply
    }

    /// The permits hash, field by field (`HGETALL`).
    fn permits(&mut self, at_ms: u64) -> Vec<(String, String)> {
        let Value::Array(items) = self.run(at_ms, &[b"HGETALL", ADMISSION.as_bytes()]).reply else {
            panic!("HGETALL answered something else than an array");
        };
        items
            .chunks(2)
            .map(|pair| {
                let text = |value: &Value| match value {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => panic!("HGETALL named {other:?}"),
                };
                (text(&pair[0]), text(&pair[1]))
            })
            .collect()
    }
}

/// An admission's permits key, as `admission_key` names it.
const ADMISSION: &str = "stampede:3:admission:{checkout}";

/// A permit token of the replica `tag`: its tag, then `n` in 16 hex digits.
fn token(tag: &str, n: u32) -> String {
    format!("{tag}{n:016x}")
}

/// How long a turn of the remainder of a fair split lasts (`TURN_MS`).
const TURN: u64 = PERMITS_TURN_MS;

/// The first millisecond of a turn of the remainder after `T` whose number is a multiple
/// of `replicas`: the turn the remainder starts at the first by name.
fn first_turn(replicas: u64) -> u64 {
    (T / (TURN * replicas) + 1) * TURN * replicas
}

/// A take's reply: `{share, held, granted token…}`.
fn taken(share: i64, held: i64, granted: &[&str]) -> Value {
    let mut reply = vec![Value::Int(share), Value::Int(held)];
    reply.extend(granted.iter().map(|token| bulk(token)));
    Value::Array(reply)
}

fn field(name: &str, value: String) -> (String, String) {
    (name.to_owned(), value)
}

fn envelope(fence: u64, at_ms: u64, version: Option<u64>, bytes: usize) -> Vec<u8> {
    let header = Header {
        fresh_until_ms: at_ms + 100,
        stale_until_ms: at_ms + 500,
        keep_until_ms: at_ms + 1000,
        loaded_at_ms: at_ms,
        delta: 0.02,
        fence,
        source_version: version,
    };
    Wire::default()
        .encode(&header, &[], &"v".repeat(bytes))
        .expect("an envelope")
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("{other:?} is not an integer"),
    }
}

fn notice(kind: &str, fence: u64, key: &EntryKey) -> (Vec<u8>, Vec<u8>) {
    (
        CHANNEL.as_bytes().to_vec(),
        format!("{kind} {fence} {NODE} {}", key.value()).into_bytes(),
    )
}

#[test]
fn a_lost_fence_restarts_at_the_clock_times_1024_or_above_the_stored_value() {
    let mut fixture = Fixture::new();
    let first = fixture.read(T, "none", "", -1, -1);
    assert_eq!(int(&first[2]), (T * 1024 + 1) as i64);
    // Lost, and the clock moved on: above every fence handed out before.
    fixture.run(T, &[b"DEL", fixture.key.fence().as_bytes()]);
    assert_eq!(
        int(&fixture.read(T + 3, "none", "", -1, -1)[2]),
        ((T + 3) * 1024 + 1) as i64
    );
    // Lost again with a value stored under a fence above the clock's floor.
    let above = (T + 50) * 1024;
    let stored = envelope(above, T + 4, None, 10);
    let value_key = fixture.key.value().to_owned();
    fixture.run(
        T + 4,
        &[b"SET", value_key.as_bytes(), &stored, b"PX", b"1000"],
    );
    fixture.run(T + 4, &[b"DEL", fixture.key.fence().as_bytes()]);
    assert_eq!(
        int(&fixture.read(T + 5, "none", "", -1, -1)[2]),
        (above + 1) as i64
    );
}

#[test]
fn a_silent_holder_is_taken_over_after_quiet_after_and_its_waiters_stay_marked() {
    let mut fixture = Fixture::new();
    let granted = fixture.read(T, "miss", A, -1, -1);
    assert_eq!(granted[3], bulk("granted"));
    let fence = int(&granted[2]);
    let held = fixture.read(T + 9, "miss", B, 10, -1);
    assert_eq!(held[3], bulk(&format!("held {A}")));
    assert_eq!(&held[4..7], &[Value::Int(91), Value::Int(9), Value::Int(9)]);
    let lease = fixture.get(T + 9, &fixture.key.lease());
    assert_eq!(lease, bulk(&format!("{fence} {A} {T} {T} w")));
    // A beat resets the silence, not the time held.
    assert_eq!(fixture.beat(T + 9, A), Value::Int(1));
    assert_eq!(
        fixture.read(T + 18, "miss", B, 10, -1)[3],
        bulk(&format!("held {A}"))
    );
    let taken = fixture.read(T + 19, "miss", B, 10, -1);
    assert_eq!(taken[3], bulk("taken over"));
    assert!(int(&taken[2]) > fence);
    let lease = fixture.get(T + 19, &fixture.key.lease());
    assert_eq!(
        lease,
        bulk(&format!("{} {B} {} {} w", int(&taken[2]), T + 19, T + 19))
    );
}

#[test]
fn a_refused_publish_announces_r_and_ends_the_owners_lease() {
    let mut fixture = Fixture::new();
    let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
    let raised = int(&fixture.invalidate(T + 1, None).reply) as u64;
    assert!(raised > fence);
    // A new lease for A's token, then a publish under the old fence.
    fixture.read(T + 2, "miss", A, -1, -1);
    let published = fixture.publish(T + 3, fence, &envelope(fence, T, None, 10), None, A, "");
    assert_eq!(
        published.reply,
        Value::Array(vec![bulk("fence"), Value::Int(1)])
    );
    assert_eq!(published.published, vec![notice("r", fence, &fixture.key)]);
    assert_eq!(fixture.get(T + 3, &fixture.key.lease()), Value::Nil);
    assert_eq!(fixture.get(T + 3, &fixture.value_key()), Value::Nil);
}

#[test]
fn a_publish_a_replica_waits_for_carries_the_envelope_up_to_the_notice_limit() {
    for (bytes, carried) in [(10, true), (2048 - 85, true), (2048 - 84, false)] {
        for waited in [false, true] {
            let mut fixture = Fixture::new();
            let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
            let envelope = envelope(fence, T, None, bytes);
            assert_eq!(envelope.len() <= 2048, carried, "{} bytes", envelope.len());
            if waited {
                let held = fixture.read(T + 1, "miss", B, -1, -1);
                assert_eq!(held[3], bulk(&format!("held {A}")));
            }
            let published = fixture.publish(T + 2, fence, &envelope, None, A, RUN_ID);
            assert_eq!(
                published.reply,
                Value::Array(vec![bulk("stored"), Value::Int(1)])
            );
            let key = fixture.key.value();
            let mut with_value = format!("v {fence} {NODE} {} {key}", key.len()).into_bytes();
            with_value.extend_from_slice(&envelope);
            let expected = match waited && carried {
                true => (CHANNEL.as_bytes().to_vec(), with_value),
                false => notice("p", fence, &fixture.key),
            };
            assert_eq!(published.published, vec![expected]);
            assert_eq!(fixture.get(T + 2, &fixture.key.lease()), Value::Nil);
            assert_eq!(
                fixture.get(T + 2, &fixture.key.fence()),
                bulk(&format!("{fence} r20"))
            );
        }
    }
}

#[test]
fn a_late_invalidate_at_keeps_the_value_and_raises_the_mark_and_the_fence() {
    let mut fixture = Fixture::new();
    let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
    let stored = fixture.publish(
        T + 1,
        fence,
        &envelope(fence, T, Some(5), 10),
        Some(5),
        A,
        "",
    );
    assert_eq!(
        stored.reply,
        Value::Array(vec![bulk("stored"), Value::Int(1)])
    );
    // Older than the stored value: the value stays; the mark and the fence rise, and the
    // new fence is announced, so copies and loads read before it go.
    let late = fixture.invalidate(T + 2, Some(3));
    assert_eq!(late.reply, Value::Int(-1));
    let raised = (T + 2) * 1024 + 1;
    assert_eq!(late.published, vec![notice("i", raised, &fixture.key)]);
    assert_eq!(
        fixture.get(T + 2, &fixture.key.fence()),
        bulk(&format!("{raised} m{} r20 i{raised}", version_digits(3)))
    );
    assert_ne!(fixture.get(T + 2, &fixture.value_key()), Value::Nil);
    // A load that read before it stores nothing.
    let before = fixture.publish(
        T + 2,
        fence,
        &envelope(fence, T, Some(5), 10),
        Some(5),
        "",
        "",
    );
    assert_eq!(
        before.reply,
        Value::Array(vec![bulk("fence"), Value::Int(1)])
    );
    // Below the mark: nothing at all, not even a notice.
    let later = fixture.invalidate(T + 3, Some(2));
    assert_eq!((later.reply, later.published.len()), (Value::Int(-1), 0));
    // A load from below the mark is not stored.
    let value_key = fixture.key.value().to_owned();
    fixture.run(T + 4, &[b"DEL", value_key.as_bytes()]);
    let old = fixture.publish(
        T + 5,
        raised,
        &envelope(raised, T, Some(2), 10),
        Some(2),
        "",
        "",
    );
    assert_eq!(
        old.reply,
        Value::Array(vec![bulk("version"), Value::Int(1)])
    );
    // One above the stored version deletes and fences as a plain invalidation does.
    let newer = fixture.invalidate(T + 6, Some(6));
    assert_eq!(int(&newer.reply), ((T + 6) * 1024 + 1) as i64);
}

#[test]
fn full_memory_refuses_a_scripts_writes_until_one_of_them_went_through() {
    let mut fixture = Fixture::new();
    let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
    fixture.server.set_memory_full(true);
    let value_key = fixture.key.value().to_owned();
    let oom = error_reply("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(fixture.run(T, &[b"SET", b"k", b"v"]).reply, oom);
    assert_eq!(fixture.run(T, &[b"LPUSH", b"k", b"v"]).reply, oom);
    assert_eq!(
        fixture.run(T, &[b"PUBLISH", b"c", b"m"]).reply,
        Value::Int(0)
    );
    // No lease, no new fence, and the load goes on without them.
    let read = fixture.read(T + 1, "force", B, -1, -1);
    assert_eq!((&read[3], &read[8]), (&bulk("none"), &bulk("memory full")));
    assert_eq!(int(&read[2]), fence as i64);
    assert_eq!(fixture.beat(T + 1, A), Value::Int(0));
    // The publish cannot store: its lease goes and replicas hear of it.
    let published = fixture.publish(T + 2, fence, &envelope(fence, T, None, 10), None, A, "");
    assert_eq!(
        published.reply,
        Value::Array(vec![bulk("memory"), Value::Int(1)])
    );
    assert_eq!(published.published, vec![notice("r", fence, &fixture.key)]);
    assert_eq!(fixture.get(T + 2, &fixture.key.lease()), Value::Nil);
    // An invalidation deletes first: once its DEL went through, Redis lets it raise the fence.
    let invalidated = fixture.invalidate(T + 3, None);
    assert_eq!(int(&invalidated.reply), ((T + 3) * 1024 + 1) as i64);
    // A late one writes nothing else first: refused.
    fixture.server.set_memory_full(false);
    let fence = int(&fixture.read(T + 4, "miss", A, -1, -1)[2]) as u64;
    fixture.publish(
        T + 5,
        fence,
        &envelope(fence, T, Some(5), 10),
        Some(5),
        A,
        "",
    );
    fixture.server.set_memory_full(true);
    let late = fixture.invalidate(T + 6, Some(3));
    assert_eq!((late.reply, late.published.len()), (Value::Int(-2), 0));
    let tag = fixture.tag(T + 7);
    assert_eq!(tag.reply, bulk(&format!("memory {}", us(T + 7))));
    assert_eq!(tag.published.len(), 1);
    assert_eq!(
        fixture.probe(T + 8),
        Value::Array(vec![bulk(
            "set: OOM command not allowed when used memory > 'maxmemory'."
        )])
    );
    assert_ne!(fixture.get(T + 8, &value_key), Value::Nil);
}

#[test]
fn keys_of_the_wrong_type_read_as_absent_and_are_written_over() {
    let mut fixture = Fixture::new();
    for key in [
        fixture.key.value().to_owned(),
        fixture.key.lease(),
        fixture.key.fence(),
    ] {
        fixture.run(T, &[b"LPUSH", key.as_bytes(), b"x"]);
    }
    let value_key = fixture.key.value().to_owned();
    assert_eq!(
        fixture.get(T, &value_key),
        error_reply("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    let read = fixture.read(T + 1, "miss", A, -1, -1);
    assert_eq!(read[1], Value::Nil);
    assert_eq!(read[3], bulk("granted"));
    assert_eq!(read[8], bulk("fence not ours"));
    let fence = int(&read[2]) as u64;
    // Made once for the read (none was there), raised once more for its lease.
    assert_eq!(
        fixture.get(T + 1, &fixture.key.fence()),
        bulk(&fence.to_string())
    );
    assert_eq!(fence, (T + 1) * 1024 + 2);
    let stored = fixture.publish(T + 2, fence, &envelope(fence, T, None, 10), None, A, "");
    assert_eq!(
        stored.reply,
        Value::Array(vec![bulk("stored"), Value::Int(1)])
    );
    assert_eq!(
        fixture.probe(T + 3),
        Value::Array(Vec::new()),
        "the probe's key is stampede's own, and free"
    );
}

#[test]
fn a_restart_forgets_the_scripts_and_changes_the_run_id() {
    let mut fixture = Fixture::new();
    let mut invocation = fixture.scripts.beat.prepare_invoke();
    invocation.key("v").key("l").key("f").arg(A);
    let no_script = error_reply("NOSCRIPT No matching script. Please use EVAL.");
    assert_eq!(fixture.eval(T, invocation.arguments(true)).reply, no_script);
    assert_eq!(
        fixture.eval(T, invocation.arguments(false)).reply,
        Value::Int(0)
    );
    assert_eq!(
        fixture.eval(T, invocation.arguments(true)).reply,
        Value::Int(0)
    );
    fixture.run(T, &[b"SET", b"kept", b"1"]);
    fixture.server.restart(OTHER_RUN_ID.into(), true);
    assert_eq!(fixture.eval(T, invocation.arguments(true)).reply, no_script);
    assert_eq!(fixture.get(T, "kept"), bulk("1"));
    let Value::BulkString(info) = fixture.run(T, &[b"INFO", b"server"]).reply else {
        panic!("INFO answers its text");
    };
    assert!(String::from_utf8_lossy(&info).contains(&format!("\r\nrun_id:{OTHER_RUN_ID}\r\n")));
    // A load that read before the restart cannot publish after it.
    let fence = int(&fixture.read(T + 1, "miss", A, -1, -1)[2]) as u64;
    let restarted = fixture.publish(T + 2, fence, &envelope(fence, T, None, 10), None, A, RUN_ID);
    assert_eq!(
        restarted.reply,
        Value::Array(vec![bulk("restarted"), Value::Int(1)])
    );
    fixture.server.restart(RUN_ID.into(), false);
    assert_eq!(fixture.get(T, "kept"), Value::Nil);
    assert!(fixture.server.keys(us(T)).is_empty());
}

#[test]
fn a_refused_info_leaves_the_fence_alone_to_decide() {
    let mut fixture = Fixture::new();
    assert_eq!(fixture.read(T, "none", "", -1, -1)[9], bulk(RUN_ID));
    fixture.server.set_info_refused(true);
    assert_eq!(
        fixture.run(T, &[b"INFO", b"server"]).reply,
        error_reply("NOPERM this user has no permissions to run the 'info' command")
    );
    let read = fixture.read(T + 1, "miss", A, -1, -1);
    assert_eq!(read[9], bulk(""));
    let fence = int(&read[2]) as u64;
    // A run id read before INFO was refused proves nothing now.
    let refused = fixture.publish(T + 2, fence, &envelope(fence, T, None, 10), None, A, RUN_ID);
    assert_eq!(
        refused.reply,
        Value::Array(vec![bulk("restarted"), Value::Int(1)])
    );
    let fence = int(&fixture.read(T + 3, "miss", A, -1, -1)[2]) as u64;
    let stored = fixture.publish(T + 4, fence, &envelope(fence, T, None, 10), None, A, "");
    assert_eq!(
        stored.reply,
        Value::Array(vec![bulk("stored"), Value::Int(1)])
    );
    assert_eq!(
        fixture.probe(T + 5),
        Value::Array(vec![bulk(
            "info: ERR The user executing the script can't run this command or subcommand"
        )])
    );
}

#[test]
fn a_tag_version_only_rises_and_keeps_the_longer_ttl() {
    let mut fixture = Fixture::new();
    let tag_key = "stampede:3:tag:{t}";
    assert_eq!(fixture.tag(T).reply, bulk(&us(T).to_string()));
    // A version stored at the very microsecond of the clock (a clock that went back).
    fixture.run(
        T,
        &[
            b"SET",
            tag_key.as_bytes(),
            us(T + 5).to_string().as_bytes(),
            b"PX",
            b"5000",
        ],
    );
    let raised = fixture.tag(T + 5);
    assert_eq!(raised.reply, bulk(&(us(T + 5) + 1).to_string()));
    assert_eq!(
        raised.published,
        vec![(
            b"stampede:3:notices".to_vec(),
            format!("t {} {NODE} t", us(T + 5) + 1).into_bytes()
        )]
    );
    // Never kept shorter than it was (4995 ms left, 1000 asked): the same expiry.
    assert_eq!(
        fixture.run(T + 5, &[b"PTTL", tag_key.as_bytes()]).reply,
        Value::Int(4995)
    );
}

#[test]
fn a_key_is_alive_through_the_millisecond_it_expires() {
    let mut fixture = Fixture::new();
    assert_eq!(
        fixture.run(T, &[b"SET", b"k", b"v", b"PX", b"10"]).reply,
        Value::Okay
    );
    assert_eq!(fixture.run(T + 10, &[b"PTTL", b"k"]).reply, Value::Int(0));
    assert_eq!(fixture.server.keys(us(T + 10) + 999), vec![b"k".to_vec()]);
    assert_eq!(fixture.run(T + 11, &[b"PTTL", b"k"]).reply, Value::Int(-2));
    assert!(fixture.server.keys(us(T + 11)).is_empty());
    // KEEPTTL keeps it; a plain SET ends it.
    fixture.run(T, &[b"SET", b"k", b"v", b"PX", b"10"]);
    fixture.run(T + 1, &[b"SET", b"k", b"w", b"KEEPTTL"]);
    assert_eq!(
        fixture.run(T + 1, &[b"PEXPIRETIME", b"k"]).reply,
        Value::Int((T + 10) as i64)
    );
    fixture.run(T + 2, &[b"SET", b"k", b"w"]);
    assert_eq!(fixture.run(T + 2, &[b"PTTL", b"k"]).reply, Value::Int(-1));
}

#[test]
fn a_ttl_lua_prints_with_an_exponent_is_no_integer_to_set() {
    for (keep_until, outcome) in [(u64::MAX, "memory"), (1 << 54, "stored")] {
        let mut fixture = Fixture::new();
        let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
        let envelope = envelope(fence, T, None, 10);
        let mut invocation = fixture.scripts.publish.prepare_invoke();
        invocation
            .key(fixture.key.value())
            .key(fixture.key.lease())
            .key(fixture.key.fence())
            .arg(fence.to_string())
            .arg(envelope.as_slice())
            .arg(keep_until)
            .arg("")
            .arg(CHANNEL)
            .arg(NODE)
            .arg(A)
            .arg(20_u64)
            .arg("")
            .arg(2048_usize)
            .arg("")
            .arg("");
        // keep_until - now: about 1.8e19 prints as `1.8446744073709552e+19`, 1.8e16 as digits.
        let published = fixture.eval(T + 1, invocation.arguments(false)).reply;
        assert_eq!(published, Value::Array(vec![bulk(outcome), Value::Int(1)]));
    }
}

#[test]
fn scan_names_every_key_once_while_keys_come_and_go() {
    let mut server = Server::new(RUN_ID.into());
    let at = us(T);
    for n in 0..50 {
        server.execute(at, &command(&[b"SET", format!("k{n}").as_bytes(), b"v"]));
    }
    let mut cursor = b"0".to_vec();
    let mut seen = Vec::new();
    for round in 0.. {
        let reply = server
            .execute(
                at,
                &command(&[b"SCAN", &cursor, b"MATCH", b"k*", b"COUNT", b"3"]),
            )
            .reply;
        let Value::Array(parts) = reply else {
            panic!("SCAN answered {reply:?}");
        };
        let (Value::BulkString(next), Value::Array(keys)) = (&parts[0], &parts[1]) else {
            panic!("SCAN answered {parts:?}");
        };
        seen.extend(keys.iter().cloned());
        // Keys written and deleted meanwhile may or may not be named; the rest must be.
        server.execute(
            at,
            &command(&[b"SET", format!("new{round}").as_bytes(), b"v"]),
        );
        if next == b"0" {
            break;
        }
        cursor = next.clone();
    }
    let mut names: Vec<Value> = (0..50).map(|n| bulk(&format!("k{n}"))).collect();
    names.sort_by_key(|value| format!("{value:?}"));
    seen.sort_by_key(|value| format!("{value:?}"));
    assert_eq!(seen, names);
}

#[test]
fn globs_follow_redis_quirks() {
    for (pattern, key, matches) in [
        ("stampede:3:{a\\*b}*", "stampede:3:{a*b}:lease", true),
        ("stampede:3:{a\\*b}*", "stampede:3:{axb}:lease", false),
        ("h?llo", "hello", true),
        ("h[^e]llo", "hello", false),
        ("h[a-b-e]llo", "hello", true),
        ("h[z-a]llo", "hello", true),
        ("h[e", "he", true),
        ("h[", "h", false),
        ("a\\", "a\\", true),
        ("*a*b*c*", "xaxbxc", true),
        ("*a*b*c*", "xaxcxb", false),
        ("", "", true),
    ] {
        assert_eq!(
            glob::matches(pattern.as_bytes(), key.as_bytes()),
            matches,
            "{pattern:?} against {key:?}"
        );
    }
}

#[test]
fn mistakes_are_answered_with_redis_texts() {
    let mut server = Server::new(RUN_ID.into());
    let mut reply = |args: &[&[u8]]| server.execute(us(T), &command(args)).reply;
    assert_eq!(
        reply(&[b"NOSUCH", b"a\nb", b"c"]),
        error_reply("ERR unknown command 'NOSUCH', with args beginning with: 'a b' 'c' ")
    );
    assert_eq!(
        reply(&[b"get"]),
        error_reply("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        reply(&[b"SET", b"k", b"v", b"PX", b"5", b"KEEPTTL"]),
        error_reply("ERR syntax error")
    );
    assert_eq!(
        reply(&[b"SET", b"k", b"v", b"PX", b"010"]),
        error_reply("ERR value is not an integer or out of range")
    );
    assert_eq!(
        reply(&[b"SET", b"k", b"v", b"PX", b"0"]),
        error_reply("ERR invalid expire time in 'set' command")
    );
    assert_eq!(
        reply(&[b"SET", b"k", b"v", b"PX", b"5", b"PX", b"9"]),
        Value::Okay
    );
    assert_eq!(
        reply(&[b"EVALSHA", b"abc", b"x"]),
        error_reply("NOSCRIPT No matching script. Please use EVAL.")
    );
    assert_eq!(
        reply(&[b"EVALSHA", &[b'0'; 40], b"x"]),
        error_reply("ERR value is not an integer or out of range")
    );
    assert_eq!(
        reply(&[b"CLIENT", b"SETNAME", b"a b"]),
        error_reply("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(
        reply(&[b"SCAN", b"-1"]),
        Value::Array(vec![bulk("0"), Value::Array(Vec::new())])
    );
}

#[test]
fn an_eviction_takes_a_key_without_a_word() {
    let mut fixture = Fixture::new();
    let fence = int(&fixture.read(T, "miss", A, -1, -1)[2]) as u64;
    let lease = fixture.key.lease();
    // In byte order: `:fence` before `:lease`.
    assert_eq!(
        fixture.server.keys(us(T)),
        vec![fixture.key.fence().into_bytes(), lease.clone().into_bytes()]
    );
    assert!(fixture.server.evict(lease.as_bytes()));
    assert!(!fixture.server.evict(lease.as_bytes()));
    // The holder's publish still stores: its fence stands; no lease is left to end.
    let published = fixture.publish(T + 1, fence, &envelope(fence, T, None, 10), None, A, "");
    assert_eq!(
        published.reply,
        Value::Array(vec![bulk("stored"), Value::Int(1)])
    );
    assert_eq!(published.published, vec![notice("p", fence, &fixture.key)]);
}

#[test]
fn a_write_through_is_refused_after_another_invalidation_since_it_began() {
    // Where another writer's invalidation got in: none, after the insert's own, between
    // the insert's start and its own, before the insert began.
    let cases = [
        (None, "stored"),
        (Some(false), "fence"),
        (Some(true), "fence"),
    ];
    for (other_first, outcome) in cases {
        let mut fixture = Fixture::new();
        // The insert began at T - 1 and its own invalidation ran at T + 1.
        if other_first == Some(true) {
            // Another insert that began later got its invalidation in first.
            fixture.invalidate(T, None);
        }
        let own = int(&fixture.invalidate(T + 1, None).reply) as u64;
        if other_first == Some(false) {
            fixture.invalidate(T + 1, None);
        }
        let read = fixture.read(T + 2, "refresh", A, -1, -1);
        let fence = int(&read[2]) as u64;
        let published = fixture.publish_written_through(T + 3, fence, A, (own, (T - 1) * 1024));
        assert_eq!(
            published.reply,
            Value::Array(vec![bulk(outcome), Value::Int(1)]),
            "another writer's invalidation first: {other_first:?}"
        );
    }
    // An invalidation before the insert began retires nothing it writes.
    let mut fixture = Fixture::new();
    fixture.invalidate(T - 2, None);
    let own = int(&fixture.invalidate(T + 1, None).reply) as u64;
    let read = fixture.read(T + 2, "refresh", A, -1, -1);
    let fence = int(&read[2]) as u64;
    let published = fixture.publish_written_through(T + 3, fence, A, (own, (T - 1) * 1024));
    assert_eq!(
        published.reply,
        Value::Array(vec![bulk("stored"), Value::Int(1)])
    );
}

#[test]
fn a_write_through_is_refused_by_a_server_that_lost_its_own_invalidation() {
    // The insert's invalidation ran; then the server lost its fences (a restart without
    // its data, an eviction of the fence key), and with them any invalidation that came
    // after the insert began: its read and publish reach a server with no record of it.
    let mut fixture = Fixture::new();
    let own = int(&fixture.invalidate(T + 1, None).reply) as u64;
    let fence_key = fixture.key.fence();
    fixture.run(T + 1, &[b"DEL", fence_key.as_bytes()]);
    let read = fixture.read(T + 2, "refresh", A, -1, -1);
    let fence = int(&read[2]) as u64;
    let published = fixture.publish_written_through(T + 3, fence, A, (own, (T - 1) * 1024));
    assert_eq!(
        published.reply,
        Value::Array(vec![bulk("fence"), Value::Int(1)])
    );
}

#[test]
fn a_take_grants_up_to_the_limit_and_records_the_rest_as_waiting() {
    let mut fixture = Fixture::new();
    let (a1, a2, a3) = (
        token("aaaaaaaa", 1),
        token("aaaaaaaa", 2),
        token("aaaaaaaa", 3),
    );
    assert_eq!(
        fixture.take(T, "aaaaaaaa", (2, 100), "", &[&a1, &a2, &a3]),
        taken(2, 2, &[&a1, &a2])
    );
    assert_eq!(
        fixture.permits(T),
        vec![
            field(&format!("p {a1}"), (T + 100).to_string()),
            field(&format!("p {a2}"), (T + 100).to_string()),
            field("w aaaaaaaa", format!("{} 1", T + 100)),
        ]
    );
    assert_eq!(
        fixture.run(T, &[b"PTTL", ADMISSION.as_bytes()]).reply,
        Value::Int(100)
    );
    // Full: nothing more, and the waiter's count is the tokens still asked for.
    assert_eq!(
        fixture.take(T + 1, "aaaaaaaa", (2, 100), "", &[&a3]),
        taken(2, 2, &[])
    );
    assert_eq!(
        fixture.permits(T + 1).last(),
        Some(&field("w aaaaaaaa", format!("{} 1", T + 101)))
    );
    // The TTL is never shortened by a take with a shorter one.
    fixture.take(T + 2, "aaaaaaaa", (2, 10), "", &[]);
    assert_eq!(
        fixture.run(T + 2, &[b"PTTL", ADMISSION.as_bytes()]).reply,
        Value::Int(99)
    );
}

#[test]
fn replicas_share_the_limit_max_min_fairly_ties_by_name() {
    let mut fixture = Fixture::new();
    let a: Vec<String> = (1..=4).map(|n| token("aaaaaaaa", n)).collect();
    let b: Vec<String> = (1..=3).map(|n| token("bbbbbbbb", n)).collect();
    let (a, b): (Vec<&str>, Vec<&str>) = (
        a.iter().map(String::as_str).collect(),
        b.iter().map(String::as_str).collect(),
    );
    // Alone, a replica's share is the whole limit.
    assert_eq!(
        fixture.take(T, "aaaaaaaa", (4, 100), "", &a[..3]),
        taken(3, 3, &a[..3])
    );
    // Each wants 3 of 4: an even split, 2 each; B gets the one free permit.
    assert_eq!(
        fixture.take(T + 1, "bbbbbbbb", (4, 100), "", &b),
        taken(2, 4, &b[..1])
    );
    // A ends a load and asks for another: its permit goes to B's waiters, not back to A
    // (each still wants 3; A holds 2, its share).
    assert_eq!(
        fixture.take(T + 2, "aaaaaaaa", (4, 100), a[0], &a[3..]),
        taken(2, 3, &[])
    );
    // B's take sent again: the permit it holds counts as granted, and it takes the free one.
    assert_eq!(
        fixture.take(T + 3, "bbbbbbbb", (4, 100), "", &b),
        taken(2, 4, &b[..2])
    );
    let held: Vec<String> = fixture
        .permits(T + 3)
        .into_iter()
        .filter(|(name, _)| name.starts_with("p "))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        held,
        [a[1], a[2], b[0], b[1]].map(|token| format!("p {token}"))
    );
}

#[test]
fn a_lapsed_permit_is_reclaimed_and_its_late_renew_and_give_refused() {
    let mut fixture = Fixture::new();
    let (a1, b1) = (token("aaaaaaaa", 1), token("bbbbbbbb", 1));
    assert_eq!(
        fixture.take(T, "aaaaaaaa", (1, 10), "", &[&a1]),
        taken(1, 1, &[&a1])
    );
    // Renewed while it lasts: to now + ttl, and the key kept as long.
    assert_eq!(fixture.renew(T + 5, 10, &a1), Value::Int(1));
    assert_eq!(
        fixture.permits(T + 5),
        vec![field(&format!("p {a1}"), (T + 15).to_string())]
    );
    // Alive through its expiry's millisecond (A's share: of the one permit for the two,
    // the remainder, it is A's turn), lapsed after: another replica takes it.
    assert_eq!(
        fixture.take(T + 15, "bbbbbbbb", (1, 100), "", &[&b1]),
        taken(0, 1, &[])
    );
    assert_eq!(
        fixture.take(T + 16, "bbbbbbbb", (1, 100), "", &[&b1]),
        taken(1, 1, &[&b1])
    );
    assert_eq!(fixture.renew(T + 17, 10, &a1), Value::Int(0));
    assert_eq!(fixture.give(T + 17, &a1), Value::Int(0));
    assert_eq!(
        fixture.permits(T + 17),
        vec![field(&format!("p {b1}"), (T + 116).to_string())]
    );
    // A lapsed permit no take has reclaimed yet: its renew refuses and deletes it, and
    // the hash left empty is no key at all.
    fixture.give(T + 18, &b1);
    fixture.take(T + 20, "aaaaaaaa", (1, 10), "", &[&a1]);
    assert_eq!(fixture.renew(T + 31, 10, &a1), Value::Int(0));
    assert_eq!(
        fixture
            .run(T + 31, &[b"EXISTS", ADMISSION.as_bytes()])
            .reply,
        Value::Int(0)
    );
}

#[test]
fn a_permit_is_given_back_once() {
    let mut fixture = Fixture::new();
    let a1 = token("aaaaaaaa", 1);
    fixture.take(T, "aaaaaaaa", (1, 100), "", &[&a1]);
    assert_eq!(fixture.give(T + 1, &a1), Value::Int(1));
    assert_eq!(fixture.give(T + 2, &a1), Value::Int(0));
    assert_eq!(fixture.renew(T + 3, 100, &a1), Value::Int(0));
    assert_eq!(fixture.give(T + 3, &token("aaaaaaaa", 2)), Value::Int(0));
}

#[test]
fn a_take_sent_again_grants_its_tokens_once() {
    let mut fixture = Fixture::new();
    let (a1, a2) = (token("aaaaaaaa", 1), token("aaaaaaaa", 2));
    // A share is never above what the replica wants.
    let first = fixture.take(T, "aaaaaaaa", (3, 100), "", &[&a1, &a2]);
    assert_eq!(first, taken(2, 2, &[&a1, &a2]));
    // The reply was lost and the call sent again: the same permits, none more.
    assert_eq!(
        fixture.take(T + 1, "aaaaaaaa", (3, 100), "", &[&a1, &a2, &a1]),
        taken(2, 2, &[&a1, &a2])
    );
    assert_eq!(fixture.permits(T + 1).len(), 2, "two permits, no waiter");
    // Renewed by the retry's permits, not counted twice.
    assert_eq!(
        fixture.permits(T + 1)[0],
        field(&format!("p {a1}"), (T + 100).to_string())
    );
}

#[test]
fn permits_delete_what_they_did_not_write_and_answer_an_unknown_operation() {
    let mut fixture = Fixture::new();
    let a1 = token("aaaaaaaa", 1);
    fixture.run(T, &[b"SET", ADMISSION.as_bytes(), b"x"]);
    // Another type at the key: renew and give refuse and leave it; a take deletes it.
    assert_eq!(fixture.renew(T, 10, &a1), Value::Int(0));
    assert_eq!(fixture.give(T, &a1), Value::Int(0));
    assert_eq!(
        fixture.run(T, &[b"TYPE", ADMISSION.as_bytes()]).reply,
        Value::SimpleString("string".into())
    );
    assert_eq!(
        fixture.take(T, "aaaaaaaa", (1, 100), "", &[&a1]),
        taken(1, 1, &[&a1])
    );
    let far = (T + 1_000_000).to_string();
    for (name, value) in [
        ("f", "v"),
        ("p abc", far.as_str()),
        ("p 0000000e000000000000000g", far.as_str()),
        // An older build's token: 16 digits.
        ("p 0000000e00000001", far.as_str()),
        ("w cccccccc", "soon"),
        ("w dddddddd", "1 2"),
    ] {
        fixture.run(
            T,
            &[
                b"HSET",
                ADMISSION.as_bytes(),
                name.as_bytes(),
                value.as_bytes(),
            ],
        );
    }
    // A foreign holder's permit and another replica's waiters count; the rest goes.
    fixture.run(
        T,
        &[
            b"HSET",
            ADMISSION.as_bytes(),
            b"p 0000000e0000000000000001",
            far.as_bytes(),
            b"w 0000000f",
            format!("{far} 2").as_bytes(),
        ],
    );
    // 0000000e holds 1 and 0000000f waits for 2; aaaaaaaa holds 1 and asks for 1 more:
    // 0000000e has its 1, and the two at 2 split the 3 left, 1 each and the remainder
    // by turns: at T it is 0000000f's (the first by name), so A keeps the one it holds.
    assert_eq!(
        fixture.take(T + 1, "aaaaaaaa", (4, 100), "", &[&token("aaaaaaaa", 2)]),
        taken(1, 2, &[])
    );
    let names: Vec<String> = fixture
        .permits(T + 1)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "p 0000000e0000000000000001".to_owned(),
            format!("p {a1}"),
            "w 0000000f".to_owned(),
            "w aaaaaaaa".to_owned(),
        ]
    );
    let mut invocation = fixture.scripts.permits.prepare_invoke();
    invocation.key(ADMISSION).arg("borrow").arg(a1.as_str());
    assert_eq!(
        fixture.eval(T + 2, invocation.arguments(false)).reply,
        error_reply("ERR unknown permits operation")
    );
}

#[test]
fn full_memory_still_renews_and_grants() {
    let mut fixture = Fixture::new();
    let (a1, a2, a3) = (
        token("aaaaaaaa", 1),
        token("aaaaaaaa", 2),
        token("aaaaaaaa", 3),
    );
    fixture.take(T, "aaaaaaaa", (2, 100), "", &[&a1]);
    fixture.server.set_memory_full(true);
    // Each operation deletes before it writes: after that write, Redis lets the script's
    // HSETs through. A renew deletes the permit's field and writes it again…
    assert_eq!(fixture.renew(T + 1, 100, &a1), Value::Int(1));
    assert_eq!(
        fixture.permits(T + 1),
        vec![field(&format!("p {a1}"), (T + 101).to_string())]
    );
    // …a take deletes its replica's waiters first, then grants…
    assert_eq!(
        fixture.take(T + 2, "aaaaaaaa", (2, 100), "", &[&a2]),
        taken(2, 2, &[&a2])
    );
    // …and records the tokens left waiting.
    assert_eq!(
        fixture.take(T + 3, "aaaaaaaa", (2, 100), "", &[&a3]),
        taken(2, 2, &[])
    );
    assert_eq!(
        fixture.permits(T + 3).last(),
        Some(&field("w aaaaaaaa", format!("{} 1", T + 103)))
    );
    // Giving back deletes only; the waiting token is granted in the permit's place.
    assert_eq!(fixture.give(T + 4, &a2), Value::Int(1));
    assert_eq!(
        fixture.take(T + 5, "aaaaaaaa", (2, 100), "", &[&a3]),
        taken(2, 2, &[&a3])
    );
    // Plain writes are still refused.
    assert_eq!(
        fixture
            .run(T + 5, &[b"HSET", ADMISSION.as_bytes(), b"f", b"v"])
            .reply,
        Refusal::out_of_memory().reply()
    );
}

#[test]
fn a_replica_left_out_of_the_remainder_in_one_turn_has_it_in_the_next() {
    let mut fixture = Fixture::new();
    let start = first_turn(3);
    let limit = (2, 10_000);
    let [a1, a2, a3] = [1, 2, 3].map(|n| token("aaaaaaaa", n));
    let (b1, c1) = (token("bbbbbbbb", 1), token("cccccccc", 1));
    assert_eq!(
        fixture.take(start, "aaaaaaaa", limit, "", &[&a1]),
        taken(1, 1, &[&a1])
    );
    assert_eq!(
        fixture.take(start + 1, "bbbbbbbb", limit, "", &[&b1]),
        taken(1, 2, &[&b1])
    );
    // Three want 1 of 2: none within the even split (0), so each has 0 and the
    // remainder, 2, goes to the first two by name from the turn's place: A and B.
    assert_eq!(
        fixture.take(start + 2, "cccccccc", limit, "", &[&c1]),
        taken(0, 2, &[])
    );
    // A swaps its permit for another load's: still its turn, it keeps it over C's waiter.
    assert_eq!(
        fixture.take(start + 3, "aaaaaaaa", limit, &a1, &[&a2]),
        taken(1, 2, &[&a2])
    );
    // The next turn the remainder goes to B and C: A's swap gives the permit up…
    assert_eq!(
        fixture.take(start + TURN, "aaaaaaaa", limit, &a2, &[&a3]),
        taken(0, 1, &[])
    );
    // …and C, left out in the turn before, has it.
    assert_eq!(
        fixture.take(start + TURN + 1, "cccccccc", limit, "", &[&c1]),
        taken(1, 2, &[&c1])
    );
    // The turn after, the remainder is C's and A's (Lua's `%` of a negative number is not
    // negative: B's place is `(1 - 2) % 3 = 2`): B, holding one, asks for one more and
    // waits.
    let b2 = token("bbbbbbbb", 2);
    assert_eq!(
        fixture.take(start + 2 * TURN, "bbbbbbbb", limit, "", &[&b2]),
        taken(0, 2, &[])
    );
    // B gives its permit back: A's waiter, in its turn, takes it over B's.
    assert_eq!(fixture.give(start + 2 * TURN + 1, &b1), Value::Int(1));
    assert_eq!(
        fixture.take(start + 2 * TURN + 2, "aaaaaaaa", limit, "", &[&a3]),
        taken(1, 2, &[&a3])
    );
}

#[test]
fn the_fair_share_splits_whole_permits_and_turns_the_remainder() {
    let demand = |pairs: &[(&str, f64)]| -> BTreeMap<Vec<u8>, f64> {
        pairs
            .iter()
            .map(|(name, wants)| (name.as_bytes().to_vec(), *wants))
            .collect()
    };
    let shares = |pairs: &[(&str, f64)], limit: f64, now: u64| -> Vec<f64> {
        pairs
            .iter()
            .map(|(name, _)| scripts::fair_share(demand(pairs), name.as_bytes(), limit, now as f64))
            .collect()
    };
    // Turn n of both 2 and 3 replicas.
    let turn = |n: u64| first_turn(6) + n * TURN;
    // Within an even split each has what it wants; the rest split what the smaller left:
    // d takes its 1 of 8, and a, b, c, above the split of 7 (2), have 2 each and the
    // remainder 1 by turns, in order of name from the turn's place.
    let four = [("c", 3.0), ("d", 1.0), ("a", 3.0), ("b", 9.0)];
    assert_eq!(shares(&four, 8.0, turn(0)), [2.0, 1.0, 3.0, 2.0]);
    assert_eq!(shares(&four, 8.0, turn(1)), [2.0, 1.0, 2.0, 3.0]);
    assert_eq!(shares(&four, 8.0, turn(3) - 1), [3.0, 1.0, 2.0, 2.0]);
    assert_eq!(shares(&four, 8.0, turn(3)), [2.0, 1.0, 3.0, 2.0]);
    // Remainders of 2 of 3 at the turn whose place is the last: it and the first.
    let three = [("a", 5.0), ("b", 5.0), ("c", 5.0)];
    assert_eq!(shares(&three, 8.0, turn(2)), [3.0, 2.0, 3.0]);
    // Enough for all: each what it wants; the smallest first, ties by name.
    assert_eq!(shares(&three, 15.0, turn(1)), [5.0, 5.0, 5.0]);
    let ties = [("b", 2.0), ("a", 2.0), ("c", 1.0)];
    assert_eq!(shares(&ties, 4.0, turn(0)), [1.0, 2.0, 1.0]);
    assert_eq!(shares(&ties, 4.0, turn(1)), [2.0, 1.0, 1.0]);
    // Fewer permits than replicas: most have none this turn.
    assert_eq!(shares(&three, 1.0, turn(1)), [0.0, 1.0, 0.0]);
}

#[test]
fn the_models_turn_of_the_remainder_is_the_scripts() {
    let code = Scripts::new().permits.code().to_owned();
    let turn = code
        .lines()
        .find_map(|line| line.strip_prefix("local TURN_MS = "))
        .expect("permits.lua sets TURN_MS");
    assert_eq!(turn.trim().parse::<u64>(), Ok(TURN));
}
