//! A fleet-wide admission's permits in Redis: one hash per admission
//! (`prefix:3:admission:{<name>}`, see [`admission_key`]), changed only by the `permits`
//! script, so taking, renewing and giving back are each one round trip.
use super::{millis, Client};
use crate::shared::keys::admission_key;
use crate::shared::store::{PermitRequest, PermitToken, Permits, StoreError};
use std::collections::HashMap;
use std::time::Duration;

impl Client {
    pub(super) async fn take_permits(&self, request: PermitRequest) -> Result<Permits, StoreError> {
        let key = admission_key(&self.config.prefix, &request.admission);
        let (_, breaker) = self.shards.for_key(&key);
        let returned = request.returned.map(|t| t.to_string()).unwrap_or_default();
        let tokens: Vec<String> = request.tokens.iter().map(|t| t.to_string()).collect();
        let replica = self.hub.replica().get(..8).unwrap_or_default().to_owned();
        let reply: Vec<redis::Value> = self
            .call_through(&breaker, |mut connection| {
                let mut invocation = self.scripts.permits.prepare_invoke();
                invocation
                    .key(key.as_str())
                    .arg("take")
                    .arg(replica.as_str())
                    .arg(request.limit)
                    .arg(millis(request.ttl).max(1))
                    .arg(millis(request.wait_ttl).max(1))
                    .arg(returned.as_str())
                    .arg(&tokens);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        permits_of(&reply, &request.tokens)
            .ok_or_else(|| StoreError::Backend(format!("the permits script answered {reply:?}")))
    }

    pub(super) async fn renew_permit(
        &self,
        admission: &str,
        token: PermitToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ttl = millis(ttl).max(1).to_string();
        let token = token.to_string();
        let still = self
            .permit_call(admission, &["renew", &ttl, &token])
            .await?;
        Ok(still == 1)
    }

    pub(super) async fn give_permit(
        &self,
        admission: &str,
        token: PermitToken,
    ) -> Result<bool, StoreError> {
        let token = token.to_string();
        let given = self.permit_call(admission, &["give", &token]).await?;
        Ok(given == 1)
    }

    /// The permits script on `admission`'s hash with `args`, answering a number.
    async fn permit_call(&self, admission: &str, args: &[&str]) -> Result<i64, StoreError> {
        let key = admission_key(&self.config.prefix, admission);
        let (_, breaker) = self.shards.for_key(&key);
        self.call_through(&breaker, |mut connection| {
            let mut invocation = self.scripts.permits.prepare_invoke();
            invocation.key(key.as_str()).arg(args);
            async move { invocation.invoke_async(&mut connection).await }
        })
        .await
    }
}

/// The take's reply, `{share, held, granted token...}`, with each granted token one of
/// those asked for; `None` for anything else.
fn permits_of(reply: &[redis::Value], asked: &[PermitToken]) -> Option<Permits> {
    let number = |value: &redis::Value| match value {
        redis::Value::Int(n) => usize::try_from(*n).ok(),
        _ => None,
    };
    let [share, held, granted @ ..] = reply else {
        return None;
    };
    let asked: HashMap<String, PermitToken> = asked
        .iter()
        .map(|token| (token.to_string(), *token))
        .collect();
    let granted = granted
        .iter()
        .map(|value| {
            let redis::Value::BulkString(bytes) = value else {
                return None;
            };
            let text = std::str::from_utf8(bytes).ok()?;
            asked.get(text).copied()
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Permits {
        granted,
        share: number(share)?,
        held: number(held)?,
    })
}
