//! stampede's Lua scripts (`shared/redis/lua/*.lua`), written out again in Rust: one
//! function per script, in the script's order, each helper named after the prelude's.
//! A change to a script changes its function here in the same commit; the differential
//! test holds the two together.
//!
//! What Redis and Lua do on the way is done the same here:
//! - Lua numbers are doubles (`f64`): the header's `u64_at` rounds above 2^53 as Lua does,
//!   and a reply's numbers are truncated to integers.
//! - `redis.pcall` turns an error into a table the script inspects (`Err` here); the
//!   scripts' `redis.call`s never fail on a server that runs them at all. An ACL that
//!   refuses a command is modelled for `INFO` only: where the permits script answers a
//!   refusal other than `WRONGTYPE` with an error of its own, the model keeps the path,
//!   which memory full never takes (each operation deletes before it writes).
//! - A number handed to `redis.call` travels as `%.17g` text: `SET … PX` of a number of 17
//!   digits or more is not an integer to Redis.
//! - With memory full, Redis refuses a script's `SET` and `HSET` until one of its writes
//!   went through (a `DEL` or an `HDEL`, even of nothing): a script is never stopped
//!   halfway.
//! - Arguments are stampede's (`ops.rs`, `tags.rs`, `permits.rs`): arguments a script
//!   would fail on (a missing key, a non-number where it adds) get an error reply that
//!   says the model does not run them, where Lua would raise one of its own.
//! - Lua compares strings with `strcoll` (Redis sets `LC_COLLATE` from its environment):
//!   here, byte order, as in the C locales; for the lowercase hex names stampede writes
//!   (the permits script's ties) the usual UTF-8 locales order them alike too.
use super::{Data, Entry, Expiry, Fields, Refusal, Server};
use redis::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One of stampede's scripts, as the model recognises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Script {
    Read,
    Publish,
    Invalidate,
    Release,
    Beat,
    Tag,
    Probe,
    Permits,
    Hearing,
}

/// Each script with the text EVAL sends and the SHA1 EVALSHA names, from the store's own
/// scripts (prelude included), so the model knows exactly what the store sends.
fn known() -> &'static [(Script, String, String)] {
    static KNOWN: OnceLock<Vec<(Script, String, String)>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let scripts = crate::shared::redis::Scripts::new();
        [
            (Script::Read, &scripts.read),
            (Script::Publish, &scripts.publish),
            (Script::Invalidate, &scripts.invalidate),
            (Script::Release, &scripts.release),
            (Script::Beat, &scripts.beat),
            (Script::Tag, &scripts.tag),
            (Script::Probe, &scripts.probe),
            (Script::Permits, &scripts.permits),
            (Script::Hearing, &scripts.hearing),
        ]
        .into_iter()
        .map(|(script, lua)| (script, lua.code().to_owned(), lua.hash().to_owned()))
        .collect()
    })
}

impl Script {
    /// The script EVALSHA names (Redis reads the hash in any case).
    pub(super) fn by_hash(sha: &[u8]) -> Option<Self> {
        known()
            .iter()
            .find(|(_, _, hash)| hash.as_bytes().eq_ignore_ascii_case(sha))
            .map(|(script, _, _)| *script)
    }

    /// The script whose text EVAL sends.
    pub(super) fn by_text(text: &[u8]) -> Option<Self> {
        known()
            .iter()
            .find(|(_, code, _)| code.as_bytes() == text)
            .map(|(script, _, _)| *script)
    }

    /// How many keys the script reads (`KEYS[n]`).
    fn keys(self) -> usize {
        match self {
            Script::Tag | Script::Probe | Script::Permits | Script::Hearing => 1,
            _ => 3,
        }
    }
}

// The prelude's constants.
const EXACT: f64 = 9_007_199_254_740_992.0;
const FENCE_KEEP_MS: f64 = 3_600_000.0;
const MARK_KEEP_MS: f64 = 86_400_000.0;

/// Runs `script` with `keys` and `argv` at `now_us`; its reply, as Redis converts Lua's.
pub(super) fn run(
    server: &mut Server,
    script: Script,
    now_us: u64,
    keys: &[Vec<u8>],
    argv: &[Vec<u8>],
    published: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Value, Refusal> {
    if keys.len() < script.keys() {
        return Err(unmodelled(format!(
            "{script:?} reads {} keys, and {} were given",
            script.keys(),
            keys.len()
        )));
    }
    let mut run = Run {
        server,
        now_us,
        keys,
        argv,
        dirty: false,
        published,
    };
    match script {
        Script::Read => run.read(),
        Script::Publish => run.publish(),
        Script::Invalidate => run.invalidate(),
        Script::Release => run.release(),
        Script::Beat => run.beat(),
        Script::Tag => run.tag(),
        Script::Probe => run.probe(),
        Script::Permits => run.permits(),
        Script::Hearing => run.hearing(),
    }
}

/// The reply to arguments stampede never sends, on which Lua would raise an error.
fn unmodelled(what: String) -> Refusal {
    Refusal(format!(
        "ERR the model of Redis does not run stampede's scripts with arguments stampede never sends: {what}"
    ))
}

/// One run of a script: what its `redis.call`s and `redis.pcall`s reach.
struct Run<'a> {
    server: &'a mut Server,
    now_us: u64,
    keys: &'a [Vec<u8>],
    argv: &'a [Vec<u8>],
    /// A write went through: with memory full, Redis lets the script's later writes pass.
    dirty: bool,
    published: &'a mut Vec<(Vec<u8>, Vec<u8>)>,
}

/// How a script's `SET` gives the TTL.
enum Ttl<'t> {
    /// `'PX', ARGV[n]`: the argument's text.
    Text(&'t [u8]),
    /// `'PX', n`: a Lua number, sent as `%.17g` text.
    Number(f64),
    /// `'KEEPTTL'`.
    Keep,
}

/// The prelude's `header(envelope)`: the fields of a stored envelope the scripts decide on.
struct Head {
    fresh_until: f64,
    stale_until: f64,
    keep_until: f64,
    fence: Option<f64>,
    version: Option<Vec<u8>>,
}

/// The prelude's `get_fence()`.
#[derive(Default)]
struct Fence {
    fence: Option<f64>,
    mark: Option<Vec<u8>>,
    recompute: Option<f64>,
    /// The fence the last invalidation raised it to.
    invalidated: Option<f64>,
    /// The fence the invalidation before the last raised it to.
    before: Option<f64>,
}

/// The prelude's `get_lease()`.
struct Lease {
    fence: f64,
    token: Vec<u8>,
    granted: f64,
    alive: f64,
    recompute: Option<f64>,
    waited: bool,
}

// What `redis.call` and `redis.pcall` reach, at the script's one instant.
impl Run<'_> {
    /// `ARGV[n]`; a missing one is an argument stampede never leaves out.
    fn arg(&self, n: usize) -> Result<&[u8], Refusal> {
        self.argv
            .get(n - 1)
            .map(Vec::as_slice)
            .ok_or_else(|| unmodelled(format!("ARGV[{n}] is missing")))
    }

    /// `tonumber(ARGV[n])` where the script computes with it.
    fn number(&self, n: usize) -> Result<f64, Refusal> {
        let text = self.arg(n)?;
        tonumber(text).ok_or_else(|| {
            unmodelled(format!(
                "ARGV[{n}] is {:?}, not a number",
                String::from_utf8_lossy(text)
            ))
        })
    }

    fn now_ms(&self) -> f64 {
        (self.now_us / 1000) as f64
    }

    fn now_ms_int(&self) -> u64 {
        self.now_us / 1000
    }

    /// `redis.pcall('GET', key)`: the string, `Ok(None)` when missing, `Err` for another type.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        let now = self.now_ms_int();
        match self.server.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::String(value),
                ..
            }) => Ok(Some(value.clone())),
            Some(_) => Err(Refusal::wrong_type()),
        }
    }

    fn pttl(&mut self, key: &[u8]) -> f64 {
        let now = self.now_ms_int();
        self.server.pttl(key, now) as f64
    }

    fn exists(&mut self, key: &[u8]) -> bool {
        let now = self.now_ms_int();
        self.server.live(key, now).is_some()
    }

    /// `redis.pcall('SET', key, value, 'PX', ttl)` (or `'KEEPTTL'`).
    fn set(&mut self, key: &[u8], value: Vec<u8>, ttl: Ttl) -> Result<(), Refusal> {
        if self.server.memory_full && !self.dirty {
            return Err(Refusal::out_of_memory());
        }
        self.dirty = true;
        let now = self.now_ms_int();
        let expiry = match ttl {
            Ttl::Keep => Expiry::Keep,
            Ttl::Text(text) => Expiry::At(super::expires_at(
                super::string_to_i64(text).ok_or_else(Refusal::not_an_integer)?,
                now,
                "set",
            )?),
            Ttl::Number(n) => Expiry::At(super::expires_at(
                integer_text(n).ok_or_else(Refusal::not_an_integer)?,
                now,
                "set",
            )?),
        };
        self.server.store(key, value, expiry, now);
        Ok(())
    }

    /// `redis.call('DEL', …)`: a write, even when it deletes nothing.
    fn del(&mut self, keys: &[&[u8]]) {
        self.dirty = true;
        let now = self.now_ms_int();
        for key in keys {
            if self.server.live(key, now).is_some() {
                self.server.keyspace.remove(*key);
            }
        }
    }

    /// `redis.pcall('HGET', key, field)`: the value, `Ok(None)` when missing, `Err` for another type.
    fn hget(&mut self, key: &[u8], field: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        let now = self.now_ms_int();
        self.server.hget(key, field, now)
    }

    /// `redis.pcall('HGETALL', key)`: the fields and values, `Err` for another type.
    fn hgetall(&mut self, key: &[u8]) -> Result<Fields, Refusal> {
        let now = self.now_ms_int();
        self.server.hgetall(key, now)
    }

    /// `redis.pcall('HSET', key, field, value)`: refused with memory full until a write
    /// went through, as `SET` is.
    fn hset(&mut self, key: &[u8], field: &[u8], value: Vec<u8>) -> Result<(), Refusal> {
        if self.server.memory_full && !self.dirty {
            return Err(Refusal::out_of_memory());
        }
        self.dirty = true;
        let now = self.now_ms_int();
        self.server
            .hset(&[key.to_vec(), field.to_vec(), value], now)
            .map(drop)
    }

    /// `redis.call('HDEL', key, field)` (or `pcall`): a write, even when it deletes nothing
    /// or meets another type.
    fn hdel(&mut self, key: &[u8], field: &[u8]) -> Result<i64, Refusal> {
        self.dirty = true;
        let now = self.now_ms_int();
        self.server.hdel(key, &[field], now)
    }

    /// `redis.pcall('PEXPIRE', key, ms)`, `ms` a Lua number (sent as `%.17g` text): a
    /// write, whatever it answers.
    fn pexpire(&mut self, key: &[u8], ms: f64) {
        self.dirty = true;
        let now = self.now_ms_int();
        if let Some(ms) = integer_text(ms) {
            let _ =
                self.server
                    .pexpire("pexpire", &[key.to_vec(), ms.to_string().into_bytes()], now);
        }
    }

    /// `redis.call('PUBLISH', channel, message)`.
    fn send(&mut self, channel: &[u8], message: Vec<u8>) {
        self.published.push((channel.to_vec(), message));
    }

    /// `redis.pcall('INFO', 'server')`.
    fn info(&self) -> Result<String, Refusal> {
        if self.server.info_refused {
            return Err(Refusal::new(
                "ERR The user executing the script can't run this command or subcommand",
            ));
        }
        Ok(self.server.info(self.now_us))
    }
}

// The prelude.
impl Run<'_> {
    /// `get_string(key)`: nil when missing or of another type.
    fn get_string(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.get(key).ok().flatten()
    }

    fn get_fence(&mut self) -> Option<Fence> {
        let v = self.get_string(&self.keys[2])?;
        let fence = exact(leading_digits(&v))?;
        Some(Fence {
            fence: Some(fence),
            mark: version_or_nil(digits_after(&v, b" m")),
            recompute: exact(digits_after(&v, b" r")),
            invalidated: exact(digits_after(&v, b" i")),
            before: exact(digits_after(&v, b" b")),
        })
    }

    fn write_fence(
        &mut self,
        fence: f64,
        mark: Option<&[u8]>,
        recompute: Option<f64>,
        keep_ms: f64,
        invalidated: Option<f64>,
        before: Option<f64>,
    ) -> bool {
        let mut value = digits(fence).into_bytes();
        let mut keep = keep_ms;
        if let Some(mark) = mark {
            value.extend_from_slice(b" m");
            value.extend_from_slice(mark);
            keep = lua_max(keep_ms, MARK_KEEP_MS);
        }
        if let Some(recompute) = recompute {
            value.extend_from_slice(b" r");
            value.extend_from_slice(digits(recompute).as_bytes());
        }
        if let Some(invalidated) = invalidated {
            value.extend_from_slice(b" i");
            value.extend_from_slice(digits(invalidated).as_bytes());
        }
        if let Some(before) = before {
            value.extend_from_slice(b" b");
            value.extend_from_slice(digits(before).as_bytes());
        }
        let key = self.keys[2].clone();
        self.set(&key, value, Ttl::Number(keep)).is_ok()
    }

    fn raise_fence(
        &mut self,
        now: f64,
        stored_fence: Option<f64>,
        keep_ms: f64,
        mark: Option<&[u8]>,
        invalidation: bool,
    ) -> Option<f64> {
        let kept = self.get_fence().unwrap_or_default();
        let mut current = kept.fence.unwrap_or(now * 1024.0);
        if let Some(stored) = stored_fence
            && stored > current
        {
            current = stored;
        }
        if current < now * 1024.0 {
            current = now * 1024.0;
        }
        if current + 1.0 >= EXACT {
            current = now * 1024.0;
        }
        let fence = current + 1.0;
        let mark = mark.or(kept.mark.as_deref());
        let (invalidated, before) = if invalidation {
            (Some(fence), kept.invalidated)
        } else {
            (kept.invalidated, kept.before)
        };
        if !self.write_fence(fence, mark, kept.recompute, keep_ms, invalidated, before) {
            return None;
        }
        Some(fence)
    }

    fn get_lease(&mut self) -> Option<Lease> {
        let v = self.get_string(&self.keys[1])?;
        let fields = lease_fields(&v)?;
        Some(Lease {
            fence: exact(Some(fields.fence))?,
            token: fields.token.to_vec(),
            granted: exact(Some(fields.granted))?,
            alive: exact(Some(fields.alive))?,
            recompute: exact(fields.recompute),
            waited: v.ends_with(b" w"),
        })
    }

    fn incarnation(&self) -> Vec<u8> {
        match self.info() {
            Ok(info) => after_pattern(info.as_bytes(), b"run_id:", u8::is_ascii_hexdigit)
                .unwrap_or_default()
                .to_vec(),
            Err(_) => Vec::new(),
        }
    }

    fn notice(&mut self, channel: &[u8], kind: &str, fence: f64, replica: &[u8]) {
        let mut message = format!("{kind} {} ", digits(fence)).into_bytes();
        message.extend_from_slice(replica);
        message.push(b' ');
        message.extend_from_slice(&self.keys[0]);
        self.send(channel, message);
    }
}

// The scripts.
impl Run<'_> {
    /// `read.lua`.
    fn read(&mut self) -> Result<Value, Refusal> {
        let now = self.now_ms();
        let value_key = self.keys[0].clone();
        let mut envelope = self.get_string(&value_key);
        let mut repaired: &str = "";
        if let Some(stored) = &envelope {
            let ttl = self.pttl(&value_key);
            let head = header(Some(stored));
            if ttl < 0.0 {
                envelope = None;
                repaired = "value without a TTL";
            } else if let Some(head) = head
                && !plausible(&head, now, ttl)
            {
                envelope = None;
                repaired = "deadlines past the TTL";
            }
        }
        let head = header(envelope.as_deref());
        let stored_fence = head.as_ref().and_then(|head| head.fence);
        let fence_keep = lua_max(FENCE_KEEP_MS, self.number(2)?);
        let kept = self.get_fence();
        let mut fence = kept.as_ref().and_then(|kept| kept.fence);
        let last_recompute = kept.as_ref().and_then(|kept| kept.recompute);
        if fence.is_none() {
            if self.exists(&self.keys[2].clone()) {
                repaired = "fence not ours";
            }
            fence = Some(
                self.raise_fence(now, stored_fence, fence_keep, None, false)
                    .unwrap_or(0.0),
            );
        }
        let fence = fence.unwrap_or(0.0);
        let reply = |envelope: &Option<Vec<u8>>,
                     fence: f64,
                     lease: Vec<u8>,
                     numbers: [f64; 4],
                     repaired: &str,
                     incarnation: Vec<u8>| {
            let mut reply = vec![
                int(now),
                envelope.clone().map_or(Value::Nil, Value::BulkString),
                int(fence),
                Value::BulkString(lease),
            ];
            reply.extend(numbers.map(int));
            reply.push(Value::BulkString(repaired.as_bytes().to_vec()));
            reply.push(Value::BulkString(incarnation));
            Value::Array(reply)
        };
        let mode = self.arg(1)?.to_vec();
        let servable = head.as_ref().is_some_and(|head| now < head.stale_until);
        if mode == b"none" || (mode == b"miss" && servable) {
            let incarnation = self.incarnation();
            return Ok(reply(
                &envelope,
                fence,
                b"none".to_vec(),
                [0.0, 0.0, 0.0, -1.0],
                repaired,
                incarnation,
            ));
        }
        let token = self.arg(3)?.to_vec();
        let lease = self.get_lease();
        let mut granted: &[u8] = b"granted";
        if let Some(lease) = &lease {
            let left = self.pttl(&self.keys[1].clone());
            if left > 0.0 {
                let held_for = lua_max(now - lease.granted, 0.0);
                let silent_for = lua_max(now - lease.alive, 0.0);
                let recompute = lease.recompute.or(last_recompute).unwrap_or(-1.0);
                if lease.token == token {
                    let incarnation = self.incarnation();
                    return Ok(reply(
                        &envelope,
                        lease.fence,
                        b"granted".to_vec(),
                        [left, held_for, silent_for, recompute],
                        repaired,
                        incarnation,
                    ));
                }
                let (quiet_after, held_after) = (self.number(4)?, self.number(5)?);
                let quiet = quiet_after >= 0.0 && silent_for >= quiet_after;
                let overdue = held_after >= 0.0 && held_for >= held_after;
                if mode != b"force" && !quiet && !overdue {
                    if mode == b"miss" && !lease.waited {
                        let marked = lease_value(
                            lease.fence,
                            &lease.token,
                            lease.granted,
                            lease.alive,
                            lease.recompute,
                            true,
                        );
                        let lease_key = self.keys[1].clone();
                        // A refusal (memory full) leaves the lease unmarked, as the script does.
                        let _ = self.set(&lease_key, marked, Ttl::Keep);
                    }
                    let mut held = b"held ".to_vec();
                    held.extend_from_slice(&lease.token);
                    let incarnation = self.incarnation();
                    return Ok(reply(
                        &envelope,
                        fence,
                        held,
                        [left, held_for, silent_for, recompute],
                        repaired,
                        incarnation,
                    ));
                }
                granted = b"taken over";
            }
        }
        let Some(taken) = self.raise_fence(now, stored_fence, fence_keep, None, false) else {
            let incarnation = self.incarnation();
            return Ok(reply(
                &envelope,
                fence,
                b"none".to_vec(),
                [0.0, 0.0, 0.0, -1.0],
                "memory full",
                incarnation,
            ));
        };
        let mut recompute = self.number(6)?;
        if recompute < 0.0 {
            recompute = last_recompute.unwrap_or(-1.0);
        }
        let waited = granted == b"taken over" && lease.as_ref().is_some_and(|lease| lease.waited);
        let recorded = lease_value(taken, &token, now, now, Some(recompute), waited);
        let lease_key = self.keys[1].clone();
        let ttl = self.arg(2)?.to_vec();
        if self.set(&lease_key, recorded, Ttl::Text(&ttl)).is_err() {
            let incarnation = self.incarnation();
            return Ok(reply(
                &envelope,
                taken,
                b"none".to_vec(),
                [0.0, 0.0, 0.0, -1.0],
                "memory full",
                incarnation,
            ));
        }
        let lease_ttl = self.number(2)?;
        let incarnation = self.incarnation();
        Ok(reply(
            &envelope,
            taken,
            granted.to_vec(),
            [lease_ttl, 0.0, 0.0, recompute],
            repaired,
            incarnation,
        ))
    }

    /// `publish.lua`.
    fn publish(&mut self) -> Result<Value, Refusal> {
        let now = self.now_ms();
        let fence = self.number(1)?;
        let kept = self.get_fence().unwrap_or_default();
        let (current, mark) = (kept.fence, kept.mark);
        let lease = self.get_lease();
        let token = self.arg(7)?.to_vec();
        let owner = lease
            .as_ref()
            .is_some_and(|lease| !token.is_empty() && lease.token == token);
        let channel = self.arg(5)?.to_vec();
        let replica = self.arg(6)?.to_vec();
        let refuse = |run: &mut Self, outcome: &str| {
            if owner {
                let lease_key = run.keys[1].clone();
                run.del(&[&lease_key]);
            }
            run.notice(&channel, "r", fence, &replica);
            Ok(Value::Array(vec![
                Value::BulkString(outcome.as_bytes().to_vec()),
                Value::Int(1),
            ]))
        };
        if current != Some(fence) {
            return refuse(self, "fence");
        }
        // A write-through that began before an invalidation other than its own: the last,
        // or, when its own is the last, the one before it.
        let own = self.arg(11)?.to_vec();
        if !own.is_empty() {
            // Its own invalidation unknown here: the server lost its fences since, and any
            // invalidation that came after the insert began with them.
            if let Some(own) = tonumber(&own)
                && kept.invalidated.is_none_or(|last| last < own)
            {
                return refuse(self, "fence");
            }
            let other = match kept.invalidated {
                Some(last) if Some(last) == tonumber(&own) => kept.before,
                last => last,
            };
            if let Some(other) = other
                && other >= self.number(12)?
            {
                return refuse(self, "fence");
            }
        }
        let read_under = self.arg(9)?.to_vec();
        if !read_under.is_empty() && read_under != self.incarnation() {
            return refuse(self, "restarted");
        }
        let version = version_or_nil(Some(self.arg(4)?));
        if let (Some(mark), Some(version)) = (&mark, &version)
            && version_above(mark, version)
        {
            return refuse(self, "version");
        }
        let stored = self.get_string(&self.keys[0].clone());
        let head = header(stored.as_deref());
        if let (Some(version), Some(stored_version)) = (
            &version,
            head.as_ref().and_then(|head| head.version.as_ref()),
        ) && version_above(stored_version, version)
        {
            return refuse(self, "version");
        }
        let ttl = self.number(3)? - now;
        if ttl <= 0.0 {
            return refuse(self, "expired");
        }
        let envelope = self.arg(2)?.to_vec();
        let value_key = self.keys[0].clone();
        if self
            .set(&value_key, envelope.clone(), Ttl::Number(ttl))
            .is_err()
        {
            return refuse(self, "memory");
        }
        if owner {
            let lease_key = self.keys[1].clone();
            self.del(&[&lease_key]);
        }
        // `tonumber(ARGV[8])`: not a number is no recompute time, not an error.
        let recompute = tonumber(self.arg(8)?);
        self.write_fence(
            fence,
            mark.as_deref(),
            recompute,
            lua_max(FENCE_KEEP_MS, ttl),
            kept.invalidated,
            kept.before,
        );
        let waited = lease.as_ref().is_some_and(|lease| lease.waited);
        if owner && waited && envelope.len() as f64 <= self.number(10)? {
            let mut message = format!("v {} ", digits(fence)).into_bytes();
            message.extend_from_slice(&replica);
            message.extend_from_slice(format!(" {} ", value_key.len()).as_bytes());
            message.extend_from_slice(&value_key);
            message.extend_from_slice(&envelope);
            self.send(&channel, message);
        } else {
            self.notice(&channel, "p", fence, &replica);
        }
        Ok(Value::Array(vec![
            Value::BulkString(b"stored".to_vec()),
            Value::Int(1),
        ]))
    }

    /// `invalidate.lua`.
    fn invalidate(&mut self) -> Result<Value, Refusal> {
        let now = self.now_ms();
        let stored = self.get_string(&self.keys[0].clone());
        let head = header(stored.as_deref());
        let version = version_or_nil(Some(self.arg(3)?));
        let mark = self.get_fence().unwrap_or_default().mark;
        let (channel, replica) = (self.arg(1)?.to_vec(), self.arg(2)?.to_vec());
        if let Some(version) = &version {
            if let Some(mark) = &mark
                && version_above(mark, version)
            {
                return Ok(Value::Int(-1));
            }
            if let Some(stored_version) = head.as_ref().and_then(|head| head.version.as_ref())
                && !version_above(version, stored_version)
            {
                // Late for the stored value, which stays; the fence still rises and is
                // announced, so what was read before it goes (see the script).
                let stored_fence = head.as_ref().and_then(|head| head.fence);
                let Some(fence) =
                    self.raise_fence(now, stored_fence, FENCE_KEEP_MS, Some(version), true)
                else {
                    return Ok(Value::Int(-2));
                };
                self.notice(&channel, "i", fence, &replica);
                return Ok(Value::Int(-1));
            }
        }
        let (value_key, lease_key) = (self.keys[0].clone(), self.keys[1].clone());
        self.del(&[&value_key, &lease_key]);
        let stored_fence = head.as_ref().and_then(|head| head.fence);
        let fence = self.raise_fence(now, stored_fence, FENCE_KEEP_MS, version.as_deref(), true);
        self.notice(&channel, "i", fence.unwrap_or(0.0), &replica);
        Ok(Value::Int(fence.map_or(-2, |fence| fence as i64)))
    }

    /// `release.lua`.
    fn release(&mut self) -> Result<Value, Refusal> {
        let token = self.arg(1)?.to_vec();
        let Some(lease) = self.get_lease().filter(|lease| lease.token == token) else {
            return Ok(Value::Int(0));
        };
        let lease_key = self.keys[1].clone();
        self.del(&[&lease_key]);
        let (channel, replica) = (self.arg(2)?.to_vec(), self.arg(3)?.to_vec());
        self.notice(&channel, "r", lease.fence, &replica);
        Ok(Value::Int(1))
    }

    /// `beat.lua`.
    fn beat(&mut self) -> Result<Value, Refusal> {
        let token = self.arg(1)?.to_vec();
        let Some(lease) = self.get_lease().filter(|lease| lease.token == token) else {
            return Ok(Value::Int(0));
        };
        let alive = lease_value(
            lease.fence,
            &lease.token,
            lease.granted,
            self.now_ms(),
            lease.recompute,
            lease.waited,
        );
        let lease_key = self.keys[1].clone();
        Ok(Value::Int(i64::from(
            self.set(&lease_key, alive, Ttl::Keep).is_ok(),
        )))
    }

    /// `tag.lua`.
    fn tag(&mut self) -> Result<Value, Refusal> {
        let mut version = self.now_us as f64;
        let tag_key = self.keys[0].clone();
        let held = exact(self.get_string(&tag_key).as_deref());
        if let Some(held) = held
            && held >= version
        {
            version = held + 1.0;
        }
        let text = digits(version);
        let mut keep = self.number(1)?;
        let left = self.pttl(&tag_key);
        if left > keep {
            keep = left;
        }
        let kept = self
            .set(&tag_key, text.clone().into_bytes(), Ttl::Number(keep))
            .is_ok();
        let channel = self.arg(2)?.to_vec();
        let mut message = format!("t {text} ").into_bytes();
        message.extend_from_slice(self.arg(3)?);
        message.push(b' ');
        message.extend_from_slice(self.arg(4)?);
        self.send(&channel, message);
        Ok(Value::BulkString(
            if kept { text } else { format!("memory {text}") }.into_bytes(),
        ))
    }

    /// `probe.lua`: each command the scripts use that this server refuses, named.
    fn probe(&mut self) -> Result<Value, Refusal> {
        let key = self.keys[0].clone();
        let mut refused = Vec::new();
        let mut try_command = |name: &str, outcome: Result<(), Refusal>| {
            if let Err(Refusal(error)) = outcome {
                refused.push(Value::BulkString(format!("{name}: {error}").into_bytes()));
            }
        };
        // TIME, EXISTS, PTTL, DEL and PUBLISH are refused only by an ACL the model has not.
        try_command("get", self.get(&key).map(drop));
        let set = self.set(&key, b"probe".to_vec(), Ttl::Number(1000.0));
        try_command("set", set);
        self.del(&[&key]);
        let channel = self.arg(1)?.to_vec();
        self.send(&channel, b"probe".to_vec());
        try_command("info", self.info().map(drop));
        // The hash commands of `permits.lua`; HGETALL, HGET and PEXPIRE are refused only
        // by an ACL.
        try_command("hset", self.hset(&key, b"probe", b"1".to_vec()));
        let _ = self.hdel(&key, b"probe");
        self.del(&[&key]);
        Ok(Value::Array(refused))
    }

    /// `permits.lua`: `take`, `renew` and `give` on one admission's hash.
    fn permits(&mut self) -> Result<Value, Refusal> {
        let now = self.now_ms();
        match self.argv.first().map(Vec::as_slice) {
            Some(b"renew") => self.renew_permit(now),
            Some(b"give") => self.give_permit(),
            Some(b"take") => self.take_permits(now),
            _ => Err(Refusal::new("ERR unknown permits operation")),
        }
    }

    /// `hearing.lua`.
    fn hearing(&mut self) -> Result<Value, Refusal> {
        let now = self.now_ms();
        let fail = |refusal: &Refusal| Refusal(format!("ERR stampede hearing: {}", refusal.0));
        let key = self.keys[0].clone();
        let all = self.hgetall(&key);
        match self.argv.first().map(Vec::as_slice) {
            Some(b"list") => {
                let all = all.map_err(|refusal| fail(&refusal))?;
                let mut reply = vec![Value::Int(now as i64), Value::Int(-1)];
                // `tonumber(ARGV[2]) or 0`.
                let grace = self
                    .argv
                    .get(1)
                    .and_then(|grace| tonumber(grace))
                    .unwrap_or(0.0);
                let since = now - grace;
                for (replica, ends) in all {
                    let ends = exact(Some(&ends));
                    if replica == b"@since" {
                        if let Some(began) = ends {
                            reply[1] = Value::Int(began as i64);
                        }
                    } else if let Some(ends) = ends
                        && ends > since
                    {
                        reply.push(Value::BulkString(replica));
                        reply.push(Value::Int(ends as i64));
                    }
                }
                Ok(Value::Array(reply))
            }
            Some(b"renew") => {
                let replica = self.arg(2)?.to_vec();
                let lease = self.number(3)?;
                let all = match all {
                    Ok(all) => all,
                    Err(refusal) if wrong_type(&refusal) => {
                        self.del(&[&key]);
                        Vec::new()
                    }
                    Err(refusal) => return Err(fail(&refusal)),
                };
                let mut began = false;
                for (other, ends) in &all {
                    let ends = exact(Some(ends));
                    if other == b"@since" {
                        began = ends.is_some();
                    } else if *other != replica && ends.is_none_or(|ends| ends <= now - 4.0 * lease)
                    {
                        self.hdel(&key, other)?;
                    }
                }
                // Written over the old entry; with memory full, deleted and written again
                // in one step (the delete is the write that lets the next one through).
                let ends = digits(now + lease).into_bytes();
                let out_of_memory = |refusal: &Refusal| refusal.0.starts_with("OOM");
                let mut written = self.hset(&key, &replica, ends.clone());
                if written.as_ref().is_err_and(out_of_memory) {
                    self.hdel(&key, &replica)?;
                    written = self.hset(&key, &replica, ends);
                    if written.as_ref().is_err_and(out_of_memory) {
                        return Ok(Value::Int(0));
                    }
                }
                if let Err(refusal) = written {
                    return Err(fail(&refusal));
                }
                if !began {
                    self.hset(&key, b"@since", digits(now).into_bytes())?;
                }
                self.keep_for(&key, lease * 4.0);
                let (channel, message) = (self.arg(4)?.to_vec(), self.arg(5)?.to_vec());
                self.send(&channel, message);
                Ok(Value::Int(1))
            }
            _ => Err(Refusal::new("ERR unknown hearing operation")),
        }
    }

    /// `permits.lua`'s `keep_for(ms)`: never shorter than the key's time left.
    fn keep_for(&mut self, key: &[u8], ms: f64) {
        let left = self.pttl(key);
        let ms = if left > ms { left } else { ms };
        self.pexpire(key, ms);
    }

    /// `renew(ttl, token)`.
    fn renew_permit(&mut self, now: f64) -> Result<Value, Refusal> {
        // `tonumber(ARGV[2])`: nil where it is no number, an error only where it is added.
        let ttl = tonumber(self.arg(2)?);
        let field = permit_field(b"p ", self.arg(3)?);
        let key = self.keys[0].clone();
        let held = match self.hget(&key, &field) {
            Err(refusal) if wrong_type(&refusal) => return Ok(Value::Int(0)),
            Err(refusal) => return Err(fail(&refusal)),
            Ok(None) => return Ok(Value::Int(0)),
            Ok(Some(held)) => held,
        };
        let expiry = permit_entry(&held).map(|(expiry, _)| expiry);
        // Deleted first: the write that lets the next one through with memory full.
        self.hdel(&key, &field)?;
        if expiry.is_none_or(|expiry| expiry < now) {
            return Ok(Value::Int(0));
        }
        let ttl = ttl.ok_or_else(|| unmodelled("ARGV[2], the ttl, is not a number".into()))?;
        if let Err(refusal) = self.hset(&key, &field, digits(now + ttl).into_bytes()) {
            return Err(fail(&refusal));
        }
        self.keep_for(&key, ttl);
        Ok(Value::Int(1))
    }

    /// `give(token)`.
    fn give_permit(&mut self) -> Result<Value, Refusal> {
        let field = permit_field(b"p ", self.arg(2)?);
        let key = self.keys[0].clone();
        match self.hget(&key, &field) {
            Err(refusal) if wrong_type(&refusal) => return Ok(Value::Int(0)),
            Err(refusal) => return Err(fail(&refusal)),
            Ok(None) => return Ok(Value::Int(0)),
            Ok(Some(_)) => {}
        }
        Ok(Value::Int(self.hdel(&key, &field)?))
    }

    /// `take(replica, limit, ttl, wait ttl, returned, token…)`.
    fn take_permits(&mut self, now: f64) -> Result<Value, Refusal> {
        let me = self.arg(2)?.to_vec();
        let limit = self.number(3)?;
        let (ttl, wait_ttl) = (self.number(4)?, self.number(5)?);
        let returned = self.arg(6)?.to_vec();
        let tokens: Vec<Vec<u8>> = self.argv[6..].to_vec();
        // `asked[token]`: true once found held by this replica ('held').
        let mut asked: BTreeMap<&[u8], bool> = tokens
            .iter()
            .map(|token| (token.as_slice(), false))
            .collect();
        let key = self.keys[0].clone();

        // A snapshot: the fields deleted below are still in it.
        let all = match self.hgetall(&key) {
            Ok(all) => all,
            Err(refusal) if wrong_type(&refusal) => {
                self.del(&[&key]);
                Vec::new()
            }
            Err(refusal) => return Err(fail(&refusal)),
        };
        // This replica's waiting entry is written again below; deleted first, it is the
        // write that lets the grants through with memory full.
        self.hdel(&key, &permit_field(b"w ", &me))?;
        if !returned.is_empty() {
            self.hdel(&key, &permit_field(b"p ", &returned))?;
        }

        let (mut held, mut mine) = (0.0, 0.0);
        let mut demand: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
        for (field, value) in &all {
            // Lapsed, foreign (not `'^([pw]) (%x+)$'`, a value `entry` reads as nil) or a
            // permit whose token is not 24 digits: deleted (again, for the two above).
            let live = permit_kind(field).zip(permit_entry(value)).filter(
                |((kind, name), (expiry, _))| {
                    *expiry >= now && !(*kind == b'p' && name.len() != TOKEN_DIGITS)
                },
            );
            let Some(((kind, name), (_, count))) = live else {
                self.hdel(&key, field)?;
                continue;
            };
            if kind == b'p' {
                // The returned permit, deleted above, counts for no one.
                if name != returned.as_slice() {
                    let owner = name[..8].to_vec();
                    held += 1.0;
                    *demand.entry(owner.clone()).or_insert(0.0) += 1.0;
                    if owner == me {
                        mine += 1.0;
                        if let Some(found) = asked.get_mut(name) {
                            *found = true;
                        }
                    }
                }
            } else if name != me.as_slice() {
                *demand.entry(name.to_vec()).or_insert(0.0) += count;
            }
        }

        // Granted already, and still asked for, in the order they were sent (once each).
        let (mut granted, mut wanted) = (Vec::new(), Vec::new());
        for token in &tokens {
            match asked.remove(token.as_slice()) {
                Some(true) => granted.push(token.clone()),
                Some(false) => wanted.push(token.clone()),
                None => {}
            }
        }
        demand.insert(me.clone(), mine + wanted.len() as f64);
        let share = fair_share(demand, &me, limit, now);

        let grant = lua_min(lua_min(wanted.len() as f64, limit - held), share - mine);
        let expiry = digits(now + ttl).into_bytes();
        let mut new = 0.0;
        let mut i = 1.0;
        while i <= grant {
            let token = &wanted[i as usize - 1];
            match self.hset(&key, &permit_field(b"p ", token), expiry.clone()) {
                Ok(()) => {}
                Err(refusal) if refusal.0.starts_with("OOM") => break,
                Err(refusal) => return Err(fail(&refusal)),
            }
            granted.push(token.clone());
            held += 1.0;
            new += 1.0;
            i += 1.0;
        }
        let waiting = wanted.len() as f64 - new;
        if waiting > 0.0 {
            let value = format!("{} {}", digits(now + wait_ttl), digits(waiting));
            let _ = self.hset(&key, &permit_field(b"w ", &me), value.into_bytes());
        }
        self.keep_for(&key, lua_max(ttl, wait_ttl));
        let mut reply = vec![int(share), int(held)];
        reply.extend(granted.into_iter().map(Value::BulkString));
        Ok(Value::Array(reply))
    }
}

/// `permits.lua`'s `TURN_MS`: how long the replicas above an even split keep their turn
/// at the remainder (a test reads the script's).
pub(crate) const TURN_MS: f64 = 250.0;

/// A permit token's hex digits: the replica tag (8) and 16 random ones.
const TOKEN_DIGITS: usize = 24;

/// `permits.lua`'s fair share of `me`, whose demand is among `demand` (each replica's
/// permits held and waited for): max-min fair in whole permits, in order of demand (ties
/// by name, Lua comparing names as strings: bytes, for the lowercase hex names stampede
/// writes), each getting what it asks while that is within an even split of what the
/// smaller ones left; the rest split what remains, the remainder going round them, in
/// order of name, from a place that moves each `TURN_MS` of `now`.
pub(super) fn fair_share(demand: BTreeMap<Vec<u8>, f64>, me: &[u8], limit: f64, now: f64) -> f64 {
    let mut order: Vec<(Vec<u8>, f64)> = demand.into_iter().collect();
    order.sort_by(|a, b| {
        if a.1 != b.1 {
            a.1.partial_cmp(&b.1).expect("demands are numbers")
        } else {
            a.0.cmp(&b.0)
        }
    });
    let count = order.len();
    let (mut left, mut share, mut rest) = (limit, None, Vec::new());
    for (i, (name, wants)) in order.iter().enumerate() {
        if *wants <= (left / (count - i) as f64).floor() {
            if name.as_slice() == me {
                share = Some(*wants);
            }
            left -= wants;
        } else {
            rest = order[i..].iter().map(|(name, _)| name.as_slice()).collect();
            break;
        }
    }
    if let Some(share) = share {
        return share;
    }
    rest.sort();
    let n = rest.len() as f64;
    let base = (left / n).floor();
    let extra = left - base * n;
    let turn = lua_mod((now / TURN_MS).floor(), n);
    let mut share = None;
    for (j, name) in rest.iter().enumerate() {
        if *name == me {
            // Lua's `(j - 1 - turn) % #rest`, its `j` from 1.
            share = Some(if lua_mod(j as f64 - turn, n) < extra {
                base + 1.0
            } else {
                base
            });
        }
    }
    share.expect("the replica taking is among the demands")
}

/// Lua 5.1's `a % b`: `a - floor(a / b) * b`, of the divisor's sign (`-1 % 3` is 2).
fn lua_mod(a: f64, b: f64) -> f64 {
    a - (a / b).floor() * b
}

/// `permits.lua`'s `wrong_type(reply)`: the key holds another type.
fn wrong_type(refusal: &Refusal) -> bool {
    refusal.0.starts_with("WRONGTYPE")
}

/// `permits.lua`'s `fail(reply)`: any other refusal, answered as an error.
fn fail(refusal: &Refusal) -> Refusal {
    Refusal(format!("ERR stampede permits: {}", refusal.0))
}

/// `prefix .. name`: a permits hash's field (`'p ' .. token`, `'w ' .. replica`).
fn permit_field(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    [prefix, name].concat()
}

/// `string.match(field, '^([pw]) (%x+)$')`: the kind and the name.
fn permit_kind(field: &[u8]) -> Option<(u8, &[u8])> {
    match field {
        [kind @ (b'p' | b'w'), b' ', name @ ..]
            if !name.is_empty() && name.iter().all(u8::is_ascii_hexdigit) =>
        {
            Some((*kind, name))
        }
        _ => None,
    }
}

/// `permits.lua`'s `entry(value)`: `'^(%d+) ?(%d*)$'`, the expiry `exact`, the count
/// `exact` or 0; `None` for anything else.
fn permit_entry(value: &[u8]) -> Option<(f64, f64)> {
    let digits = run_of(value, 0, u8::is_ascii_digit);
    if digits == 0 {
        return None;
    }
    let rest = &value[digits..];
    let count = rest.strip_prefix(b" ").unwrap_or(rest);
    if !count.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let expiry = exact(Some(&value[..digits]))?;
    Some((expiry, exact(Some(count)).unwrap_or(0.0)))
}

/// `math.min(a, b)`: Lua keeps the first unless the second is smaller.
fn lua_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// A Lua number as a reply: Redis truncates it to an integer.
fn int(n: f64) -> Value {
    Value::Int(n as i64)
}

/// `math.max(a, b)`: Lua keeps the first unless the second is greater.
fn lua_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// `string.format('%.0f', n)`.
fn digits(n: f64) -> String {
    if (0.0..EXACT).contains(&n) && n.fract() == 0.0 {
        (n as u64).to_string()
    } else {
        format!("{n:.0}")
    }
}

/// A Lua number as `redis.call` sends it (`%.17g`), read back as Redis's `string2ll`
/// would: an integer below 10^17 in magnitude is plain digits; anything else has an
/// exponent, a point or a `-0` and is not an integer to Redis.
fn integer_text(n: f64) -> Option<i64> {
    (n.fract() == 0.0 && n.abs() < 1e17 && !(n == 0.0 && n.is_sign_negative())).then_some(n as i64)
}

/// Lua 5.1's `tonumber(text)`: a decimal number (what `strtod` reads: sign, point,
/// exponent, `inf`, `nan`) or a `0x` hexadecimal integer, with spaces around it.
fn tonumber(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if trimmed.is_empty() {
        return None;
    }
    let unsigned = trimmed.trim_start_matches(['+', '-']);
    if let Some(hex) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        let value = u64::from_str_radix(hex, 16).ok()? as f64;
        return Some(if trimmed.starts_with('-') {
            -value
        } else {
            value
        });
    }
    trimmed.parse().ok()
}

/// `exact(text)`: decimal digits (at most 16) below 2^53, else nil.
fn exact(text: Option<&[u8]>) -> Option<f64> {
    let text = text?;
    if text.is_empty() || text.len() > 16 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (n < 1 << 53).then_some(n as f64)
}

/// `version_or_nil(v)`: 20 decimal digits, else nil.
fn version_or_nil(v: Option<&[u8]>) -> Option<Vec<u8>> {
    v.filter(|v| v.len() == 20 && v.iter().all(u8::is_ascii_digit))
        .map(<[u8]>::to_vec)
}

/// `version_above(a, b)` for two 20-digit versions: each 10-digit half compared as a number.
fn version_above(a: &[u8], b: &[u8]) -> bool {
    let half = |v: &[u8], range: std::ops::Range<usize>| -> u64 {
        std::str::from_utf8(&v[range])
            .ok()
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_default()
    };
    let (ah, bh) = (half(a, 0..10), half(b, 0..10));
    if ah != bh {
        return ah > bh;
    }
    half(a, 10..20) > half(b, 10..20)
}

/// `u64_at(s, at)` (Lua's 1-based `at`): eight bytes big-endian, added up in doubles.
fn u64_at(s: &[u8], at: usize) -> f64 {
    s[at - 1..at + 7]
        .iter()
        .fold(0.0, |n, &byte| n * 256.0 + f64::from(byte))
}

fn header(envelope: Option<&[u8]>) -> Option<Head> {
    let envelope = envelope?;
    if envelope.len() < 82 || &envelope[..5] != b"STPD\x03" {
        return None;
    }
    let version = if envelope[53] % 2 == 1 {
        version_or_nil(Some(&envelope[54..74]))
    } else {
        None
    };
    let fence = u64_at(envelope, 46);
    Some(Head {
        fresh_until: u64_at(envelope, 6),
        stale_until: u64_at(envelope, 14),
        keep_until: u64_at(envelope, 22),
        fence: (fence < EXACT).then_some(fence),
        version,
    })
}

fn plausible(head: &Head, now: f64, ttl: f64) -> bool {
    head.fresh_until <= head.stale_until
        && head.stale_until <= head.keep_until
        && head.keep_until <= now + ttl + 1000.0
}

fn lease_value(
    fence: f64,
    token: &[u8],
    granted: f64,
    alive: f64,
    recompute: Option<f64>,
    waited: bool,
) -> Vec<u8> {
    let mut v = digits(fence).into_bytes();
    v.push(b' ');
    v.extend_from_slice(token);
    v.extend_from_slice(format!(" {} {}", digits(granted), digits(alive)).as_bytes());
    if let Some(recompute) = recompute
        && recompute >= 0.0
    {
        v.extend_from_slice(format!(" {}", digits(recompute)).as_bytes());
    }
    if waited {
        v.extend_from_slice(b" w");
    }
    v
}

/// `string.match(v, '^(%d+)')`.
fn leading_digits(v: &[u8]) -> Option<&[u8]> {
    let run = run_of(v, 0, u8::is_ascii_digit);
    (run > 0).then(|| &v[..run])
}

/// `string.match(v, '<marker>(%d+)')`, e.g. `' m(%d+)'`: the digits after the first
/// place the marker is followed by one.
fn digits_after<'v>(v: &'v [u8], marker: &[u8]) -> Option<&'v [u8]> {
    after_pattern(v, marker, u8::is_ascii_digit)
}

/// `string.match(v, '<marker>(%class+)')`: the first place `marker` is followed by at
/// least one byte of the class, and the whole run of them there.
fn after_pattern<'v>(v: &'v [u8], marker: &[u8], class: fn(&u8) -> bool) -> Option<&'v [u8]> {
    (0..v.len()).find_map(|start| {
        let from = start + marker.len();
        if !v[start..].starts_with(marker) {
            return None;
        }
        let run = run_of(v, from, class);
        (run > 0).then(|| &v[from..from + run])
    })
}

/// How many bytes of the class run from `at` on.
fn run_of(v: &[u8], at: usize, class: fn(&u8) -> bool) -> usize {
    v.get(at..)
        .map_or(0, |rest| rest.iter().take_while(|b| class(b)).count())
}

/// The captures of `'^(%d+) (%x+) (%d+) (%d+)'` and of the recompute's
/// `'^%d+ %x+ %d+ %d+ (%d+)'`: each run is as long as it goes (a shorter one is never
/// followed by the space the pattern needs next), so no backtracking can find another.
struct LeaseFields<'v> {
    fence: &'v [u8],
    token: &'v [u8],
    granted: &'v [u8],
    alive: &'v [u8],
    recompute: Option<&'v [u8]>,
}

fn lease_fields(v: &[u8]) -> Option<LeaseFields<'_>> {
    let mut at = 0;
    let mut field = |class: fn(&u8) -> bool, then_space: bool| -> Option<&[u8]> {
        let run = run_of(v, at, class);
        if run == 0 || (then_space && v.get(at + run) != Some(&b' ')) {
            return None;
        }
        let captured = &v[at..at + run];
        at += run + usize::from(then_space);
        Some(captured)
    };
    let fence = field(u8::is_ascii_digit, true)?;
    let token = field(u8::is_ascii_hexdigit, true)?;
    let granted = field(u8::is_ascii_digit, true)?;
    let alive = field(u8::is_ascii_digit, false)?;
    let recompute = match v.get(at) {
        Some(b' ') => {
            let run = run_of(v, at + 1, u8::is_ascii_digit);
            (run > 0).then(|| &v[at + 1..at + 1 + run])
        }
        _ => None,
    };
    Some(LeaseFields {
        fence,
        token,
        granted,
        alive,
        recompute,
    })
}
