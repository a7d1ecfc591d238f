//! Leases granted by a read whose reply was lost, as the model network saw them: the
//! replica cannot know it holds such a lease, so it must release it by its token as soon
//! as the server answers it again (`docs/fleet.md`, "the reply granting a lease is
//! lost"). Each one is followed until it stops naming that token, so a simulator can hold
//! the promise: how long it lived past the replica's next answer.
use super::server::Server;
use std::time::Duration;
use tokio::time::Instant;

/// The lease a command left at its lease key naming a token among the command's
/// arguments: the lease key, the token, and whether it named another token (or none)
/// before the command ran (a lease granted anew, not a beat's or a resent read's).
pub(super) struct Grant {
    lease_key: Vec<u8>,
    token: Vec<u8>,
    anew: bool,
}

/// One orphaned lease.
struct Orphan {
    replica: String,
    lease_key: Vec<u8>,
    token: Vec<u8>,
    lost_at: Instant,
    /// When the replica next got a reply.
    answered: Option<Instant>,
    /// When the lease stopped naming the token (released, taken over, deleted, expired).
    ended: Option<Instant>,
    /// When it expires, as last seen: an expiry is noticed only at the next command.
    expires: Option<Instant>,
    /// Its replica was frozen or killed since: its release waits on that, unjudged.
    excused: bool,
}

#[derive(Default)]
pub(super) struct Orphans {
    list: Vec<Orphan>,
}

/// The token a lease value names (`<fence> <token> …`).
fn token_of(lease: &[u8]) -> Option<&[u8]> {
    lease.split(|&b| b == b' ').nth(1)
}

/// The lease key of a script call (`EVALSHA sha n k1 … kn a1 …`), its keys' one ending in
/// `:lease`, and the script's arguments.
fn lease_key_and_arguments(command: &[Vec<u8>]) -> Option<(&[u8], &[Vec<u8>])> {
    let name = command.first()?;
    if !(name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL")) {
        return None;
    }
    let count: usize = std::str::from_utf8(command.get(2)?).ok()?.parse().ok()?;
    let keys = command.get(3..3 + count)?;
    let key = keys.iter().find(|key| key.ends_with(b":lease"))?;
    Some((key, command.get(3 + count..)?))
}

/// The token at `command`'s lease key now, if any: taken before the command runs.
pub(super) fn token_before(server: &Server, now_us: u64, command: &[Vec<u8>]) -> Option<Vec<u8>> {
    let (key, _) = lease_key_and_arguments(command)?;
    let (lease, _) = server.string_at(key, now_us)?;
    token_of(lease).map(<[u8]>::to_vec)
}

/// The lease `command` left naming one of its arguments, once it ran.
pub(super) fn granted(
    server: &Server,
    now_us: u64,
    command: &[Vec<u8>],
    before: Option<&[u8]>,
) -> Option<Grant> {
    let (key, arguments) = lease_key_and_arguments(command)?;
    let (lease, _) = server.string_at(key, now_us)?;
    let token = token_of(lease)?;
    let asked = arguments
        .iter()
        .any(|argument| argument.as_slice() == token);
    asked.then(|| Grant {
        lease_key: key.to_vec(),
        token: token.to_vec(),
        anew: before != Some(token),
    })
}

impl Orphans {
    /// `grant`'s reply to `replica` was lost now: an orphan if the lease is new to it.
    pub(super) fn lost(&mut self, replica: &str, grant: Grant, now: Instant) {
        if !grant.anew {
            return;
        }
        self.list.push(Orphan {
            replica: replica.to_owned(),
            lease_key: grant.lease_key,
            token: grant.token,
            lost_at: now,
            answered: None,
            ended: None,
            expires: None,
            excused: false,
        });
    }

    /// `replica` got a reply now, to a command that left `grant` (a read resent after a
    /// lost reply gets its own lease back: the replica knows it holds it from now on).
    pub(super) fn answered(&mut self, replica: &str, grant: Option<Grant>, now: Instant) {
        if let Some(grant) = grant {
            self.list.retain(|orphan| {
                orphan.ended.is_some()
                    || orphan.lease_key != grant.lease_key
                    || orphan.token != grant.token
            });
        }
        for orphan in &mut self.list {
            if orphan.replica == replica && orphan.answered.is_none() && orphan.lost_at < now {
                orphan.answered = Some(now);
            }
        }
    }

    /// `replica` was frozen or killed: its leases' releases wait on it.
    pub(super) fn excuse(&mut self, replica: &str) {
        for orphan in &mut self.list {
            if orphan.replica == replica && orphan.ended.is_none() {
                orphan.excused = true;
            }
        }
    }

    /// Notes which leases still name their tokens, after the server changed.
    pub(super) fn follow(&mut self, server: &Server, now_us: u64, now: Instant) {
        for orphan in self.list.iter_mut().filter(|o| o.ended.is_none()) {
            match server.string_at(&orphan.lease_key, now_us) {
                Some((lease, expires_ms)) if token_of(lease) == Some(&orphan.token) => {
                    orphan.expires = expires_ms.map(|at_ms| {
                        now + Duration::from_micros((at_ms * 1000).saturating_sub(now_us))
                    });
                }
                _ => orphan.ended = Some(orphan.expires.map_or(now, |at| at.min(now))),
            }
        }
    }

    /// Each lease that outlived its replica's next answer by more than `bound`, said in
    /// a line (times since `start`).
    pub(super) fn outliving(&self, bound: Duration, now: Instant, start: Instant) -> Vec<String> {
        let at = |moment: Instant| moment.saturating_duration_since(start).as_secs_f64();
        let mut found = Vec::new();
        for orphan in self.list.iter().filter(|o| !o.excused) {
            let Some(answered) = orphan.answered else {
                continue;
            };
            let ended = orphan.ended.unwrap_or(now);
            if ended.saturating_duration_since(answered) > bound {
                found.push(format!(
                    "{}: a lease whose grant reply was lost at {:.3}s ({}) lived to {:.3}s, {:?} past the replica's next answer at {:.3}s",
                    orphan.replica,
                    at(orphan.lost_at),
                    String::from_utf8_lossy(&orphan.lease_key),
                    at(ended),
                    ended.saturating_duration_since(answered),
                    at(answered),
                ));
            }
        }
        found
    }
}
