//! One Redis 7.0 server, as stampede sees it.
//!
//! - [`Server`]: the keyspace (strings, hashes for the permits script, and lists only so
//!   a key can hold the wrong type), each key's expiry in milliseconds, the script cache, the run id, and two
//!   conditions a deployment can impose: memory full under `noeviction`, and `INFO`
//!   refused by an ACL.
//! - [`Server::execute`]: one command, as Redis receives it, at a server time the caller
//!   gives. The plain commands are here; the scripts are in `scripts.rs`.
//! - Errors are the texts Redis 7.0.15 sends, checked in the same order (unknown command,
//!   arity, ACL, memory, then the command's own checks).
//!
//! Time: a key is gone once the clock is past its expiry (`now > expires_at`, in
//! milliseconds: alive at the very millisecond it expires), and a script sees one instant
//! throughout (Redis freezes the clock for expiry inside a script; its `TIME` and `PTTL`
//! read the live clock, which a model with one instant cannot tell apart from it).
mod glob;
mod scripts;

use redis::Value;
use scripts::Script;
use std::collections::{BTreeMap, BTreeSet};

/// `permits.lua`'s turn of the remainder of a fair split, in milliseconds (for the tests).
#[cfg(test)]
pub(crate) const PERMITS_TURN_MS: u64 = scripts::TURN_MS as u64;

/// One Redis server's state: the keyspace with expiries, the script cache, the run id.
///
/// A clone is the same server at the same moment (a simulator may try a command on one).
#[derive(Clone)]
pub struct Server {
    run_id: String,
    keyspace: BTreeMap<Vec<u8>, Entry>,
    /// The scripts EVAL has loaded since the last restart: EVALSHA runs only these.
    scripts: BTreeSet<Script>,
    memory_full: bool,
    info_refused: bool,
}

/// What one command did: Redis's reply, and the messages it published (channel, payload), in order.
pub struct Executed {
    /// Redis's reply, errors included (`Value::ServerError`).
    pub reply: redis::Value,
    /// Each message the command published: its channel and its payload.
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone)]
struct Entry {
    data: Data,
    /// Unix milliseconds; `None`: no TTL.
    expires_at: Option<u64>,
}

#[derive(Clone)]
enum Data {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// A hash's fields and values, as `HGETALL` lists them.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

impl Data {
    fn type_name(&self) -> &'static str {
        match self {
            Data::String(_) => "string",
            Data::List(_) => "list",
            Data::Hash(_) => "hash",
        }
    }
}

/// An error reply's text, code first (`ERR …`, `WRONGTYPE …`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal(String);

impl Refusal {
    fn new(text: impl Into<String>) -> Self {
        Refusal(text.into())
    }

    fn syntax() -> Self {
        Refusal::new("ERR syntax error")
    }

    fn not_an_integer() -> Self {
        Refusal::new("ERR value is not an integer or out of range")
    }

    fn wrong_type() -> Self {
        Refusal::new("WRONGTYPE Operation against a key holding the wrong kind of value")
    }

    fn out_of_memory() -> Self {
        Refusal::new("OOM command not allowed when used memory > 'maxmemory'.")
    }

    fn arity(name: &str) -> Self {
        Refusal(format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    }

    fn reply(&self) -> Value {
        error_reply(&self.0)
    }
}

/// An error reply as the `redis` crate parses `-<text>\r\n` (its kind from the code).
fn error_reply(text: &str) -> Value {
    redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
        .expect("an error line parses as an error reply")
}

/// Where a command's key expires after it: `SET … PX`, `KEEPTTL`, or no TTL.
enum Expiry {
    At(u64),
    Keep,
    Never,
}

/// The version the model answers as, in `INFO`.
const REDIS_VERSION: &str = "7.0.15";

impl Server {
    /// An empty server whose run id is `run_id` (40 hex digits, as Redis's are).
    pub fn new(run_id: String) -> Self {
        Self {
            run_id,
            keyspace: BTreeMap::new(),
            scripts: BTreeSet::new(),
            memory_full: false,
            info_refused: false,
        }
    }

    /// Runs `command` (its name and arguments as Redis receives them: `["EVALSHA", sha, "3", k1, k2, k3, arg…]`) at server time `now_us` (microseconds since the Unix epoch), as Redis 7.0 would.
    pub fn execute(&mut self, now_us: u64, command: &[Vec<u8>]) -> Executed {
        let mut published = Vec::new();
        let reply = self
            .dispatch(now_us, command, &mut published)
            .unwrap_or_else(|refusal| refusal.reply());
        Executed { reply, published }
    }

    /// A restart: the script cache is empty and the run id is `run_id`; `keep_data` keeps the keyspace (a restart from a snapshot: pass the data as it was; keys expired meanwhile go at their next access), else it is empty.
    ///
    /// Memory and the ACL stay as they were: they are the deployment's settings.
    pub fn restart(&mut self, run_id: String, keep_data: bool) {
        self.run_id = run_id;
        self.scripts.clear();
        if !keep_data {
            self.keyspace.clear();
        }
    }

    /// Evicts `key` as `allkeys-lru` would: gone, without a word to anyone.
    ///
    /// Whether it held a key (one past its expiry but not yet collected counts, as in Redis).
    pub fn evict(&mut self, key: &[u8]) -> bool {
        self.keyspace.remove(key).is_some()
    }

    /// The string at `key` if one is alive at `now_us`, for a simulator's bookkeeping.
    #[cfg(feature = "simulation")]
    pub fn string_at(&self, key: &[u8], now_us: u64) -> Option<&[u8]> {
        match self.keyspace.get(key) {
            Some(Entry {
                data: Data::String(value),
                expires_at,
            }) if expires_at.is_none_or(|at| now_us / 1000 <= at) => Some(value),
            _ => None,
        }
    }

    /// Every key alive at `now_us`, in order (for a simulator to pick one to evict).
    pub fn keys(&self, now_us: u64) -> Vec<Vec<u8>> {
        let now = now_us / 1000;
        self.keyspace
            .iter()
            .filter(|(_, entry)| entry.alive_at(now))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// `noeviction` with memory full: every write command (SET) is refused with Redis's OOM error while `full`; DEL and PUBLISH still run.
    ///
    /// Inside a script, as in Redis, only until the script's first write went through (a
    /// DEL or an HDEL among them, even of nothing): Redis never stops a script halfway
    /// through its writes.
    pub fn set_memory_full(&mut self, full: bool) {
        self.memory_full = full;
    }

    /// Whether INFO is refused, as for an ACL user without `@dangerous` (`NOPERM`-style error inside scripts, which `pcall` turns into an error table).
    pub fn set_info_refused(&mut self, refused: bool) {
        self.info_refused = refused;
    }
}

impl Entry {
    fn alive_at(&self, now_ms: u64) -> bool {
        self.expires_at.is_none_or(|at| now_ms <= at)
    }
}

/// The commands the model knows, each with its arity as Redis declares it (negative: at
/// least that many, name included), and whether memory full refuses it (`denyoom`).
const COMMANDS: &[(&str, i32, bool)] = &[
    ("client", -2, false),
    ("del", -2, false),
    ("eval", -3, false),
    ("evalsha", -3, false),
    ("exists", -2, false),
    ("flushall", -1, false),
    ("get", 2, false),
    ("hgetall", 2, false),
    ("hset", -4, true),
    ("info", -1, false),
    ("lpush", -3, true),
    ("mget", -2, false),
    ("persist", 2, false),
    ("pexpire", -3, false),
    ("pexpireat", -3, false),
    ("pexpiretime", 2, false),
    ("ping", -1, false),
    ("pttl", 2, false),
    ("publish", 3, false),
    ("scan", -2, false),
    ("set", -3, true),
    ("time", 1, false),
    ("type", 2, false),
];

fn arity_fits(arity: i32, count: usize) -> bool {
    let count = count as i64;
    let arity = i64::from(arity);
    if arity >= 0 {
        count == arity
    } else {
        count >= -arity
    }
}

impl Server {
    fn dispatch(
        &mut self,
        now_us: u64,
        command: &[Vec<u8>],
        published: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Value, Refusal> {
        let Some(name) = command.first() else {
            // Redis reads an empty command as no command at all; a model caller sent nothing.
            return Err(Refusal::new("ERR empty command"));
        };
        let Some(&(name, arity, denyoom)) = COMMANDS
            .iter()
            .find(|(known, _, _)| name.eq_ignore_ascii_case(known.as_bytes()))
        else {
            return Err(unknown_command(command));
        };
        if !arity_fits(arity, command.len()) {
            return Err(Refusal::arity(name));
        }
        if name == "info" && self.info_refused {
            return Err(Refusal::new(
                "NOPERM this user has no permissions to run the 'info' command",
            ));
        }
        if denyoom && self.memory_full {
            return Err(Refusal::out_of_memory());
        }
        let now_ms = now_us / 1000;
        let args = &command[1..];
        match name {
            "client" => client(args),
            "del" => Ok(Value::Int(self.delete(args, now_ms))),
            "eval" | "evalsha" => self.eval(name == "evalsha", now_us, args, published),
            "exists" => Ok(Value::Int(
                args.iter()
                    .filter(|key| self.live(key, now_ms).is_some())
                    .count() as i64,
            )),
            "flushall" => self.flush_all(args),
            "get" => self.get(&args[0], now_ms),
            "hgetall" => Ok(Value::Array(
                self.hgetall(&args[0], now_ms)?
                    .into_iter()
                    .flat_map(|(field, value)| [Value::BulkString(field), Value::BulkString(value)])
                    .collect(),
            )),
            "hset" => self.hset(args, now_ms),
            "info" => Ok(Value::BulkString(self.info(now_us).into_bytes())),
            "lpush" => self.lpush(args, now_ms),
            "mget" => Ok(Value::Array(
                args.iter()
                    .map(|key| match self.live(key, now_ms) {
                        Some(Entry {
                            data: Data::String(value),
                            ..
                        }) => Value::BulkString(value.clone()),
                        _ => Value::Nil,
                    })
                    .collect(),
            )),
            "persist" => Ok(Value::Int(match self.live(&args[0], now_ms) {
                Some(entry) => i64::from(entry.expires_at.take().is_some()),
                None => 0,
            })),
            "pexpire" | "pexpireat" => self.pexpire(name, args, now_ms),
            "pexpiretime" => Ok(Value::Int(match self.live(&args[0], now_ms) {
                Some(entry) => entry.expires_at.map_or(-1, |at| at as i64),
                None => -2,
            })),
            "ping" => match args {
                [] => Ok(Value::SimpleString("PONG".into())),
                [message] => Ok(Value::BulkString(message.clone())),
                _ => Err(Refusal::arity("ping")),
            },
            "pttl" => Ok(Value::Int(self.pttl(&args[0], now_ms))),
            "publish" => {
                published.push((args[0].clone(), args[1].clone()));
                // The model knows no subscribers: the simulator delivers `published`.
                Ok(Value::Int(0))
            }
            "scan" => self.scan(args, now_ms),
            "set" => self.set_command(args, now_ms),
            "time" => Ok(Value::Array(vec![
                Value::BulkString((now_us / 1_000_000).to_string().into_bytes()),
                Value::BulkString((now_us % 1_000_000).to_string().into_bytes()),
            ])),
            "type" => Ok(Value::SimpleString(
                self.live(&args[0], now_ms)
                    .map_or("none", |entry| entry.data.type_name())
                    .into(),
            )),
            _ => unreachable!("every name in COMMANDS has its arm"),
        }
    }

    /// The entry at `key`, if it is alive at `now_ms`; an expired one goes now.
    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        if self
            .keyspace
            .get(key)
            .is_some_and(|entry| !entry.alive_at(now_ms))
        {
            self.keyspace.remove(key);
        }
        self.keyspace.get_mut(key)
    }

    fn get(&mut self, key: &[u8], now_ms: u64) -> Result<Value, Refusal> {
        match self.live(key, now_ms) {
            None => Ok(Value::Nil),
            Some(Entry {
                data: Data::String(value),
                ..
            }) => Ok(Value::BulkString(value.clone())),
            Some(_) => Err(Refusal::wrong_type()),
        }
    }

    fn pttl(&mut self, key: &[u8], now_ms: u64) -> i64 {
        match self.live(key, now_ms) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            // Alive, so not past its expiry: 0 at the very millisecond.
            Some(Entry {
                expires_at: Some(at),
                ..
            }) => at.saturating_sub(now_ms) as i64,
        }
    }

    fn delete(&mut self, keys: &[Vec<u8>], now_ms: u64) -> i64 {
        let mut deleted = 0;
        for key in keys {
            if self.live(key, now_ms).is_some() {
                self.keyspace.remove(key.as_slice());
                deleted += 1;
            }
        }
        deleted
    }

    /// Stores a string at `key`, of whatever type it held.
    fn store(&mut self, key: &[u8], value: Vec<u8>, expiry: Expiry, now_ms: u64) {
        let expires_at = match expiry {
            Expiry::At(at) => Some(at),
            Expiry::Never => None,
            Expiry::Keep => self.live(key, now_ms).and_then(|entry| entry.expires_at),
        };
        self.keyspace.insert(
            key.to_vec(),
            Entry {
                data: Data::String(value),
                expires_at,
            },
        );
    }

    /// `SET key value [PX ms | KEEPTTL]`, as the command and as a script's call.
    fn set_command(&mut self, args: &[Vec<u8>], now_ms: u64) -> Result<Value, Refusal> {
        let mut px = None;
        let mut keep_ttl = false;
        let mut at = 2;
        while at < args.len() {
            let option = args[at].as_slice();
            let next = args.get(at + 1);
            if option.eq_ignore_ascii_case(b"keepttl") && px.is_none() {
                keep_ttl = true;
            } else if option.eq_ignore_ascii_case(b"px")
                && !keep_ttl
                && let Some(next) = next
            {
                // Redis lets a later PX replace an earlier one.
                px = Some(next.as_slice());
                at += 1;
            } else if ["nx", "xx", "get", "ex", "exat", "pxat", "persist"]
                .iter()
                .any(|unmodelled| option.eq_ignore_ascii_case(unmodelled.as_bytes()))
            {
                return Err(Refusal::new(format!(
                    "ERR the model of Redis does not know SET's {} option: stampede never sends it",
                    String::from_utf8_lossy(option)
                )));
            } else {
                return Err(Refusal::syntax());
            }
            at += 1;
        }
        let expiry = match px {
            Some(ms) => Expiry::At(expires_at(
                string_to_i64(ms).ok_or_else(Refusal::not_an_integer)?,
                now_ms,
                "set",
            )?),
            None if keep_ttl => Expiry::Keep,
            None => Expiry::Never,
        };
        self.store(&args[0], args[1].clone(), expiry, now_ms);
        Ok(Value::Okay)
    }

    fn lpush(&mut self, args: &[Vec<u8>], now_ms: u64) -> Result<Value, Refusal> {
        let entry = match self.live(&args[0], now_ms) {
            Some(entry) => entry,
            None => self.keyspace.entry(args[0].clone()).or_insert(Entry {
                data: Data::List(Vec::new()),
                expires_at: None,
            }),
        };
        let Data::List(items) = &mut entry.data else {
            return Err(Refusal::wrong_type());
        };
        items.splice(0..0, args[1..].iter().rev().cloned());
        Ok(Value::Int(items.len() as i64))
    }

    fn hset(&mut self, args: &[Vec<u8>], now_ms: u64) -> Result<Value, Refusal> {
        if args.len().is_multiple_of(2) {
            return Err(Refusal::arity("hset"));
        }
        let entry = match self.live(&args[0], now_ms) {
            Some(entry) => entry,
            None => self.keyspace.entry(args[0].clone()).or_insert(Entry {
                data: Data::Hash(BTreeMap::new()),
                expires_at: None,
            }),
        };
        let Data::Hash(fields) = &mut entry.data else {
            return Err(Refusal::wrong_type());
        };
        let added = args[1..]
            .chunks(2)
            .filter(|pair| fields.insert(pair[0].clone(), pair[1].clone()).is_none())
            .count();
        Ok(Value::Int(added as i64))
    }

    /// `HGETALL key`: the hash's fields and values (none where the key is missing), in
    /// order of field, where Redis lists a small hash's in the order they were written
    /// (the permits script reads them in any order; the differential test compares them
    /// as a set).
    fn hgetall(&mut self, key: &[u8], now_ms: u64) -> Result<Fields, Refusal> {
        match self.live(key, now_ms) {
            None => Ok(Vec::new()),
            Some(Entry {
                data: Data::Hash(fields),
                ..
            }) => Ok(fields
                .iter()
                .map(|(field, value)| (field.clone(), value.clone()))
                .collect()),
            Some(_) => Err(Refusal::wrong_type()),
        }
    }

    /// `HGET key field`.
    fn hget(&mut self, key: &[u8], field: &[u8], now_ms: u64) -> Result<Option<Vec<u8>>, Refusal> {
        match self.live(key, now_ms) {
            None => Ok(None),
            Some(Entry {
                data: Data::Hash(fields),
                ..
            }) => Ok(fields.get(field).cloned()),
            Some(_) => Err(Refusal::wrong_type()),
        }
    }

    /// `HDEL key field…`: how many were there; a hash left empty is no key at all.
    fn hdel(&mut self, key: &[u8], fields: &[&[u8]], now_ms: u64) -> Result<i64, Refusal> {
        let Some(entry) = self.live(key, now_ms) else {
            return Ok(0);
        };
        let Data::Hash(hash) = &mut entry.data else {
            return Err(Refusal::wrong_type());
        };
        let removed = fields
            .iter()
            .filter(|field| hash.remove(**field).is_some())
            .count();
        if hash.is_empty() {
            self.keyspace.remove(key);
        }
        Ok(removed as i64)
    }

    /// `PEXPIRE key ms` and `PEXPIREAT key unix-ms` (without NX, XX, GT, LT).
    fn pexpire(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Result<Value, Refusal> {
        if args.len() > 2 {
            return Err(Refusal::new(format!(
                "ERR the model of Redis does not know {}'s options: stampede never sends them",
                name.to_uppercase()
            )));
        }
        let when = string_to_i64(&args[1]).ok_or_else(Refusal::not_an_integer)?;
        let base = if name == "pexpire" { now_ms as i64 } else { 0 };
        let at = when
            .checked_add(base)
            .ok_or_else(|| Refusal(format!("ERR invalid expire time in '{name}' command")))?;
        let Some(entry) = self.live(&args[0], now_ms) else {
            return Ok(Value::Int(0));
        };
        if at <= now_ms as i64 {
            // Already past: Redis deletes the key at once.
            self.keyspace.remove(args[0].as_slice());
        } else {
            entry.expires_at = Some(at as u64);
        }
        Ok(Value::Int(1))
    }

    fn flush_all(&mut self, args: &[Vec<u8>]) -> Result<Value, Refusal> {
        match args {
            [] => {}
            [mode] if mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync") => {
            }
            _ => return Err(Refusal::syntax()),
        }
        // The script cache stays: only SCRIPT FLUSH (or a restart) empties it.
        self.keyspace.clear();
        Ok(Value::Okay)
    }

    /// `INFO`'s server section, the lines a client may look for, run id among them.
    fn info(&self, now_us: u64) -> String {
        format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\narch_bits:64\r\nrun_id:{}\r\nserver_time_usec:{now_us}\r\n",
            self.run_id
        )
    }

    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`.
    ///
    /// Keys in the order of a hash of each, the cursor one past the hash to go on from
    /// (0 when done): every key alive from start to end is returned once, whatever was
    /// written or deleted between the calls, and a cursor outlives a restart, as Redis's
    /// do. A cursor past every hash (one the model never hands out) finds nothing left.
    fn scan(&mut self, args: &[Vec<u8>], now_ms: u64) -> Result<Value, Refusal> {
        let cursor = scan_cursor(&args[0]).ok_or_else(|| Refusal::new("ERR invalid cursor"))?;
        let mut count = 10_usize;
        let mut pattern = None;
        let mut kind = None;
        let mut at = 1;
        while at < args.len() {
            let (option, value) = (&args[at], args.get(at + 1));
            match value {
                Some(value) if option.eq_ignore_ascii_case(b"count") => {
                    let n = string_to_i64(value).ok_or_else(Refusal::not_an_integer)?;
                    if n < 1 {
                        return Err(Refusal::syntax());
                    }
                    count = usize::try_from(n).unwrap_or(usize::MAX);
                }
                Some(value) if option.eq_ignore_ascii_case(b"match") => {
                    pattern = Some(value.as_slice());
                }
                Some(value) if option.eq_ignore_ascii_case(b"type") => {
                    kind = Some(value.as_slice())
                }
                _ => return Err(Refusal::syntax()),
            }
            at += 2;
        }
        let mut ordered: Vec<(u64, &Vec<u8>, &Entry)> = self
            .keyspace
            .iter()
            .filter(|(_, entry)| entry.alive_at(now_ms))
            .map(|(key, entry)| (scan_hash(key), key, entry))
            .filter(|(hash, _, _)| *hash >= cursor.saturating_sub(1))
            .collect();
        ordered.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        // A page ends between two hashes only, so a cursor never splits keys of one hash.
        let mut end = ordered.len().min(count);
        while end < ordered.len() && end > 0 && ordered[end].0 == ordered[end - 1].0 {
            end += 1;
        }
        let next = ordered.get(end).map_or(0, |(hash, _, _)| hash + 1);
        let keys = ordered[..end]
            .iter()
            .filter(|(_, key, _)| pattern.is_none_or(|pattern| glob::matches(pattern, key)))
            .filter(|(_, _, entry)| {
                kind.is_none_or(|kind| kind.eq_ignore_ascii_case(entry.data.type_name().as_bytes()))
            })
            .map(|(_, key, _)| Value::BulkString(key.to_vec()))
            .collect();
        Ok(Value::Array(vec![
            Value::BulkString(next.to_string().into_bytes()),
            Value::Array(keys),
        ]))
    }

    /// `EVAL script numkeys key… arg…` and `EVALSHA sha1 numkeys key… arg…`.
    fn eval(
        &mut self,
        by_hash: bool,
        now_us: u64,
        args: &[Vec<u8>],
        published: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Value, Refusal> {
        let no_script = || Refusal::new("NOSCRIPT No matching script. Please use EVAL.");
        // A hash of the wrong length cannot match: Redis says so before anything else.
        if by_hash && args[0].len() != 40 {
            return Err(no_script());
        }
        let numkeys = string_to_i64(&args[1]).ok_or_else(Refusal::not_an_integer)?;
        if numkeys > (args.len() - 2) as i64 {
            return Err(Refusal::new(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        if numkeys < 0 {
            return Err(Refusal::new("ERR Number of keys can't be negative"));
        }
        let script = if by_hash {
            Script::by_hash(&args[0])
                .filter(|script| self.scripts.contains(script))
                .ok_or_else(no_script)?
        } else {
            let script = Script::by_text(&args[0]).ok_or_else(|| {
                Refusal::new(format!(
                    "ERR the model of Redis runs stampede's scripts only, and this one (sha1 {}) is not one of them",
                    redis::Script::new(&String::from_utf8_lossy(&args[0])).get_hash()
                ))
            })?;
            self.scripts.insert(script);
            script
        };
        let (keys, argv) = args[2..].split_at(numkeys as usize);
        scripts::run(self, script, now_us, keys, argv, published)
    }
}

fn client(args: &[Vec<u8>]) -> Result<Value, Refusal> {
    let subcommand = &args[0];
    if !subcommand.eq_ignore_ascii_case(b"setname") {
        return Err(Refusal(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            sanitized(subcommand, 128)
        )));
    }
    let [_, name] = args else {
        return Err(Refusal::arity("client|setname"));
    };
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Refusal::new(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(Value::Okay)
}

/// Redis's reply to a command it does not have (the name and the first arguments, up to
/// about 128 bytes of them, each quoted).
fn unknown_command(command: &[Vec<u8>]) -> Refusal {
    let mut args = String::new();
    for arg in &command[1..] {
        if args.len() >= 128 {
            break;
        }
        let room = 128 - args.len();
        args.push('\'');
        args.push_str(&sanitized(arg, room));
        args.push_str("' ");
    }
    Refusal(format!(
        "ERR unknown command '{}', with args beginning with: {args}",
        sanitized(&command[0], 128)
    ))
}

/// At most `max` bytes of `text` as C's `%.*s` prints them (up to a NUL), with the line
/// breaks Redis takes out of an error reply made spaces. Bytes that are not UTF-8 are
/// replaced: the crate's parser reads an error line as text anyway.
fn sanitized(text: &[u8], max: usize) -> String {
    let end = text
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(text.len())
        .min(max);
    String::from_utf8_lossy(&text[..end]).replace(['\r', '\n'], " ")
}

/// Where `ms` from now lands, as Redis checks it (`SET … PX`): positive, and no overflow.
fn expires_at(ms: i64, now_ms: u64, command: &str) -> Result<u64, Refusal> {
    let invalid = || Refusal(format!("ERR invalid expire time in '{command}' command"));
    if ms <= 0 {
        return Err(invalid());
    }
    ms.checked_add(now_ms as i64)
        .map(|at| at as u64)
        .ok_or_else(invalid)
}

/// Redis's `string2ll`: an optional `-`, then digits without a leading zero (or `0`
/// alone), no spaces, no `+`, within `i64`.
fn string_to_i64(text: &[u8]) -> Option<i64> {
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits
        .first()
        .is_none_or(|first| !(b'1'..=b'9').contains(first))
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let magnitude: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if negative {
        0_i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// SCAN's cursor as Redis reads it (`strtoul`): an optional sign and decimal digits,
/// nothing before or after, within `u64`; `-n` wraps around, and an empty cursor is 0.
fn scan_cursor(text: &[u8]) -> Option<u64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        // strtoul reads no digits and stops at the start: an empty cursor is 0, a lone
        // sign is not a number.
        return text.is_empty().then_some(0);
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    })
}

/// A key's place in SCAN's order (FNV-1a, 63 bits so that the cursor, one past it, fits).
fn scan_hash(key: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash >> 1
}

#[cfg(test)]
mod tests;
