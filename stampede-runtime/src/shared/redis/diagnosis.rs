//! What a failure says about the settings. A refused password, a command the ACL user may
//! not run, a certificate nobody trusts or Sentinels that do not answer are not outages
//! that pass: the store keeps failing until someone changes a setting. Each such cause is
//! logged once, at error level, naming the setting to fix, and is the store's `problem`
//! (in its stats, and degraded mode on a health check) while it recurs.
use super::connection::Connection;
use super::Client;
use crate::clock::StoreInstant as Instant;
use crate::shared::keys::LAYOUT;
use crate::shared::store::StoreError;
use redis::{ErrorKind, RedisError};
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long a problem is reported after it was last seen: a fixed setting (a permission
/// granted) clears it without a restart.
const REPORTED_FOR: Duration = Duration::from_secs(30);

/// What Redis says when a script calls a command its user may not run: it does not say
/// which (the permission probe names it).
const SCRIPT_REFUSED: &str = "can't run this command";

/// What kind of setting a failure points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Cause {
    /// The user or password (`username`, `password`, `password_file`, the URL's).
    Credentials,
    /// A command the ACL user may not run.
    Permission,
    /// The server's certificate, or TLS where the server speaks none.
    Certificate,
    /// The Sentinels: none answered, or none knows the master.
    Sentinel,
}

/// The cause of `error` when it points at a setting, and what to tell the operator.
pub(crate) fn diagnose(error: &RedisError) -> Option<(Cause, String)> {
    let text = error.to_string();
    let code = error.code().unwrap_or_default();
    let cause = if error.kind() == ErrorKind::AuthenticationFailed
        || matches!(code, "WRONGPASS" | "NOAUTH")
        || text.contains("invalid username-password pair")
    {
        Cause::Credentials
    } else if code == "NOPERM" || text.contains(SCRIPT_REFUSED) {
        Cause::Permission
    } else if text.contains("certificate")
        || text.contains("CertificateRequired")
        || text.contains("corrupt message")
        || text.contains("InvalidContentType")
    {
        Cause::Certificate
    } else {
        return None;
    };
    Some((cause, advice(cause, &text)))
}

/// `detail` with what to change.
pub(crate) fn advice(cause: Cause, detail: &str) -> String {
    match cause {
        Cause::Credentials => format!(
            "Redis refused this replica's credentials ({detail}): check the ACL user and password (`username`, `password` or `password_file`, or the URL's `user:password@`)"
        ),
        Cause::Permission => format!(
            "the Redis user may not run a command stampede needs ({detail}): grant it the minimal ACL in the production guide (commands, `~<prefix>:*` keys, `&<prefix>:*` channels)"
        ),
        Cause::Certificate => format!(
            "TLS to Redis failed ({detail}): trust the authority that signed the server's certificate (`tls_ca_file` or `tls_ca_pem`), check the host name in the URL, use `rediss://` only where the server speaks TLS, and give `tls_cert_file`/`tls_key_file` where it asks for a client certificate"
        ),
        Cause::Sentinel => detail.to_owned(),
    }
}

/// The store's problems: each cause logged once, the latest kept for its stats.
#[derive(Default)]
pub(crate) struct Problems {
    logged: Mutex<HashSet<(Cause, String)>>,
    latest: Mutex<Option<(String, Instant)>>,
    /// What the permission probe found missing, named; `Some("")` when it found nothing.
    probed: Mutex<Option<String>>,
}

impl Problems {
    /// Records `message`, logging it the first time this cause says it.
    pub(crate) fn saw(&self, cause: Cause, message: String) {
        let first = (self.logged.lock().unwrap_or_else(PoisonError::into_inner))
            .insert((cause, message.clone()));
        if first {
            tracing::error!(target: "stampede", problem = %message, "the shared store cannot be used as configured; each replica keeps its values in its own memory until this is fixed");
        }
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((message, Instant::now()));
    }

    /// Records what `error` says about the settings, if anything. A script refused a
    /// command without naming it: the probe's finding is the message (and before the
    /// probe answered, nothing: it is about to say which command).
    pub(crate) fn judge(&self, error: &RedisError) {
        let Some((cause, message)) = diagnose(error) else {
            return;
        };
        if cause == Cause::Permission && error.to_string().contains(SCRIPT_REFUSED) {
            let probed = self
                .probed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            match probed {
                None => return,
                Some(found) if !found.is_empty() => return self.saw(cause, found),
                Some(_) => {}
            }
        }
        self.saw(cause, message);
    }

    /// What the permission probe found: the advice naming each refused command, or
    /// `None` when nothing was refused.
    fn probed(&self, refused: Option<String>) {
        let found = refused.clone().unwrap_or_default();
        *self.probed.lock().unwrap_or_else(PoisonError::into_inner) = Some(found);
        if let Some(message) = refused {
            self.saw(Cause::Permission, message);
        }
    }

    /// The latest problem, while it was seen recently.
    pub(crate) fn current(&self) -> Option<String> {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let (message, at) = latest.as_ref()?;
        (at.elapsed() < REPORTED_FOR).then(|| message.clone())
    }
}

/// The commands of the scripts a user may lack and still share a cache, each with what it
/// costs: `INFO` only adds the run-id check to a publish; the hash commands are only a
/// fleet-wide admission's.
const OPTIONAL: &[(&str, &str)] = &[
    ("info", "a publish is checked by its key's fence alone, not also by the server's run id (see the production guide)"),
    ("hset", HASHES),
    ("hgetall", HASHES),
    ("hget", HASHES),
    ("hdel", HASHES),
    ("pexpire", HASHES),
];

const HASHES: &str = "a tiered replica serves no memory copy (each call reads Redis), and a fleet-wide admission (scope = \"fleet\") cannot keep its permits in Redis and each replica takes its local_limit instead";

impl Client {
    /// Tries, once, every command stampede sends (inside its scripts and outside them) on
    /// a key of its own, and names each this user may not run: the required ones as the
    /// store's problem, `INFO` in an info line. Whether the probe got an answer (when it
    /// did not, the next heartbeat tries again).
    pub(super) async fn probe_permissions(&self) -> bool {
        let key = format!("{}:{LAYOUT}:probe", self.config.prefix);
        let channel = format!("{key}:channel");
        let breaker = self.shards.for_key(&key).1;
        let script = self.scripts.probe.clone();
        // EVAL, not EVALSHA: sent once per replica, and apart in the server's counts.
        let scripted = self
            .call_optional(&breaker, |mut connection| {
                let mut invocation = script.prepare_invoke();
                invocation.key(key.as_str()).arg(channel.as_str());
                async move { invocation.eval_async::<Vec<String>>(&mut connection).await }
            })
            .await;
        let mut refused = match scripted {
            Ok(refused) => refused,
            // EVAL itself refused: nothing stampede does on Redis can work.
            Err(StoreError::Backend(error)) if refusal(&error) => vec![format!("eval: {error}")],
            // Not an answer about permissions (no connection, TLS, a password): the
            // calls that fail judge it; the probe tries again next heartbeat.
            Err(_) => return false,
        };
        let outside = |name: &'static str, command: redis::Cmd| {
            let breaker = breaker.clone();
            async move {
                let asked = self
                    .call_optional(&breaker, |connection: Connection| {
                        let command = command.clone();
                        async move {
                            let mut connection = connection;
                            command.query_async::<redis::Value>(&mut connection).await
                        }
                    })
                    .await;
                match asked {
                    Err(StoreError::Backend(error)) if refusal(&error) => {
                        Some(format!("{name}: {error}"))
                    }
                    _ => None,
                }
            }
        };
        // `MGET` (a fresh hit) is used at once and judged there; `SCAN` only by a rare
        // whole-cache invalidation, which should not be the first to find it missing.
        let mut scan = redis::cmd("SCAN");
        scan.arg(0).arg("MATCH").arg(&key).arg("COUNT").arg(1);
        refused.extend(outside("scan", scan).await);
        let cost = |refusal: &str| {
            (OPTIONAL.iter())
                .find(|(name, _)| refusal.starts_with(&format!("{name}:")))
                .map(|(_, cost)| *cost)
        };
        let (optional, required): (Vec<_>, Vec<_>) = refused
            .into_iter()
            .partition(|refusal| cost(refusal).is_some());
        for refusal in &optional {
            let cost = cost(refusal).unwrap_or_default();
            tracing::info!(target: "stampede", %refusal, "Redis does not let this user run a command: {cost}");
        }
        let required =
            (!required.is_empty()).then(|| advice(Cause::Permission, &required.join("; ")));
        self.problems.probed(required);
        true
    }
}

/// Whether a reply refuses a command (an ACL, or a command renamed away).
pub(super) fn refusal(error: &str) -> bool {
    [
        "NOPERM",
        "no permissions",
        SCRIPT_REFUSED,
        "unknown command",
        "Unknown Redis command",
    ]
    .iter()
    .any(|said| error.contains(said))
}

#[cfg(test)]
mod tests;
