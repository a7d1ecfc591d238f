//! Our Lua scripts, sent as EVALSHA and, after NOSCRIPT, once as EVAL.
//!
//! The `redis` crate reloads a script with SCRIPT LOAD, which its cluster client sends to
//! every node and fails if any node does not answer: one dead master would then stop
//! the scripts of every master that lost them (a restart, a failover). EVAL carries the
//! script to the node that owns the call's first key, the only one that needs it, and
//! caches it there for the next EVALSHA.
use redis::aio::ConnectionLike;
use redis::{ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};
use std::sync::Arc;

/// A script's code and hash; cheap to clone, so an invocation owns what it sends.
#[derive(Clone)]
pub(crate) struct LuaScript {
    code: Arc<str>,
    hash: Arc<str>,
}

impl LuaScript {
    pub(crate) fn new(code: String) -> Self {
        let hash = redis::Script::new(&code).get_hash().into();
        Self {
            code: code.into(),
            hash,
        }
    }

    /// The SHA1 that EVALSHA names.
    #[cfg(any(test, feature = "simulation"))]
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// The text that EVAL sends.
    #[cfg(any(test, feature = "simulation"))]
    pub(crate) fn code(&self) -> &str {
        &self.code
    }

    pub(crate) fn prepare_invoke(&self) -> Invocation {
        Invocation {
            script: self.clone(),
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// One call of a script: its keys (all under one hash tag) and arguments. It owns them,
/// so a call whose caller stopped waiting can still be finished in the background (to
/// learn whether Redis answered late or not at all).
pub(crate) struct Invocation {
    script: LuaScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        connection: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self
            .command("EVALSHA", &self.script.hash)
            .query_async(connection)
            .await
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.command("EVAL", &self.script.code)
                    .query_async(connection)
                    .await
            }
            other => other,
        }
    }

    /// As EVAL, with the whole script: for a script sent once.
    pub(crate) async fn eval_async<T: FromRedisValue>(
        &self,
        connection: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        self.command("EVAL", &self.script.code)
            .query_async(connection)
            .await
    }

    /// The command as Redis receives it, name first: EVALSHA with the hash, or EVAL with
    /// the code (for the model of the server, which takes commands as their arguments).
    #[cfg(test)]
    pub(crate) fn arguments(&self, evalsha: bool) -> Vec<Vec<u8>> {
        let command = match evalsha {
            true => self.command("EVALSHA", &self.script.hash),
            false => self.command("EVAL", &self.script.code),
        };
        command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => unreachable!("a script call has plain arguments only"),
            })
            .collect()
    }

    fn command(&self, name: &str, script: &str) -> redis::Cmd {
        let mut command = redis::cmd(name);
        command
            .arg(script)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }
}
