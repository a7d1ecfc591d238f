//! Leases granted by a read whose reply was lost, as the model network saw them: the
//! replica cannot know it holds such a lease, so it must release it by its token as soon
//! as the server answers it again (`docs/fleet.md`, "the reply granting a lease is
//! lost"). Each one is followed until the replica sends its token again (the release, or
//! the read resent), so a simulator can hold the promise: how long after the replica's
//! next answer that came. A lease ended otherwise meanwhile (taken over, expired,
//! deleted) does not excuse the replica: it cannot know that either.
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

/// One lease granted anew, followed from the command that granted it until its reply
/// reaches the replica (then forgotten) or is lost (then an orphan).
struct Orphan {
    replica: String,
    lease_key: Vec<u8>,
    token: Vec<u8>,
    /// When its reply was lost; `None` while on its way.
    lost_at: Option<Instant>,
    /// Since when the server has answered the replica without an outage, once the reply
    /// was lost and while the token was not sent again.
    answered_since: Option<Instant>,
    /// The longest the server answered it so, and from when.
    longest: Option<(Instant, Duration)>,
    /// When the replica sent the token again since the grant (its release, or the read
    /// resent): a release sent at a timeout may reach the server before the lost reply
    /// would have reached the replica.
    sent: Option<Instant>,
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
    let lease = server.string_at(key, now_us)?;
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
    let lease = server.string_at(key, now_us)?;
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
    /// `command` of `replica` ran now and left `grant`: followed if the lease is new to
    /// it. Called after [`Orphans::sent`] for the same command.
    pub(super) fn granted(&mut self, replica: &str, grant: &Grant) {
        if grant.anew {
            self.list.push(Orphan {
                replica: replica.to_owned(),
                lease_key: grant.lease_key.clone(),
                token: grant.token.clone(),
                lost_at: None,
                answered_since: None,
                longest: None,
                sent: None,
                excused: false,
            });
        }
    }

    /// The reply that carried `grant` was lost now: its lease is an orphan.
    pub(super) fn lost(&mut self, grant: &Grant, now: Instant) {
        for orphan in &mut self.list {
            if orphan.lost_at.is_none() && orphan.names(grant) {
                orphan.lost_at = Some(now);
            }
        }
    }

    /// `replica` got a reply now, to a command that left `grant`: it knows it holds that
    /// lease (the reply of its grant, or of a read resent after a lost one, which gets its
    /// own lease back), which is followed no longer.
    pub(super) fn answered(&mut self, replica: &str, grant: Option<&Grant>, now: Instant) {
        if let Some(grant) = grant {
            self.list.retain(|orphan| !orphan.names(grant));
        }
        for orphan in &mut self.list {
            if orphan.replica != replica
                || orphan.sent.is_some()
                || orphan.lost_at.is_none_or(|lost| lost >= now)
            {
                continue;
            }
            let since = *orphan.answered_since.get_or_insert(now);
            let answered = now.saturating_duration_since(since);
            if orphan.longest.is_none_or(|(_, longest)| answered > longest) {
                orphan.longest = Some((since, answered));
            }
        }
    }

    /// The server stopped answering everyone (killed or paused), or answers again after a
    /// pause: an answer before and one after do not show it answered in between.
    pub(super) fn outage(&mut self) {
        for orphan in &mut self.list {
            orphan.answered_since = None;
        }
    }

    /// `replica` was frozen or killed: its leases' releases wait on it.
    pub(super) fn excuse(&mut self, replica: &str) {
        for orphan in &mut self.list {
            if orphan.replica == replica && orphan.sent.is_none() {
                orphan.excused = true;
            }
        }
    }

    /// `command` of `replica` reached the server now: the token of each lease followed
    /// for it that the command carries was sent again.
    pub(super) fn sent(&mut self, replica: &str, command: &[Vec<u8>], now: Instant) {
        for orphan in &mut self.list {
            if orphan.replica == replica && orphan.sent.is_none() && command.contains(&orphan.token)
            {
                orphan.sent = Some(now);
            }
        }
    }

    /// Each lease whose replica the server went on answering for longer than `bound`
    /// before it sent the token again, said in a line (times since `start`).
    pub(super) fn unreleased(&self, bound: Duration, start: Instant) -> Vec<String> {
        let at = |moment: Instant| moment.saturating_duration_since(start).as_secs_f64();
        let mut found = Vec::new();
        for orphan in self.list.iter().filter(|o| !o.excused) {
            let (Some(lost_at), Some((since, answered))) = (orphan.lost_at, orphan.longest) else {
                continue;
            };
            if answered > bound {
                let when = match orphan.sent {
                    Some(sent) => format!("at {:.3}s", at(sent)),
                    None => "never".to_owned(),
                };
                found.push(format!(
                    "{}: a lease whose grant reply was lost at {:.3}s ({}) was released {when}, though the server answered the replica for {answered:?} from {:.3}s",
                    orphan.replica,
                    at(lost_at),
                    String::from_utf8_lossy(&orphan.lease_key),
                    at(since),
                ));
            }
        }
        found
    }
}

impl Orphan {
    fn names(&self, grant: &Grant) -> bool {
        self.lease_key == grant.lease_key && self.token == grant.token
    }
}
