//! Deadlines between a memory envelope (this process's clock) and the shared store's
//! header (the server's milliseconds).
use crate::clock::Instant;
use crate::envelope::Envelope;
use crate::shared::wire::Header;
use std::time::Duration;

/// A stored envelope on this cache's clock. Deadlines already past land on `now`.
pub(super) fn to_memory<V>(
    header: &Header,
    value: V,
    server_now: u64,
    now: Instant,
    generation: u64,
) -> Envelope<V> {
    let at = |ms: u64| now + Duration::from_millis(ms.saturating_sub(server_now));
    Envelope {
        value,
        // Its age counts from here: this clock cannot express moments before its start.
        loaded_at: now,
        fresh_until: at(header.fresh_until_ms),
        stale_until: at(header.stale_until_ms),
        keep_until: at(header.keep_until_ms),
        delta: header.delta,
        generation,
        marks: 0,
        source_version: header.source_version,
        tags: None,
    }
}

/// A memory envelope's deadlines in server milliseconds.
pub(super) fn to_wire<V>(
    envelope: &Envelope<V>,
    server_now: u64,
    now: Instant,
    fence: u64,
) -> Header {
    let ms = |at: Instant| {
        let ahead = at.saturating_duration_since(now).as_millis();
        server_now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    };
    Header {
        fresh_until_ms: ms(envelope.fresh_until),
        stale_until_ms: ms(envelope.stale_until),
        keep_until_ms: ms(envelope.keep_until),
        loaded_at_ms: server_now,
        delta: envelope.delta,
        fence,
        source_version: envelope.source_version,
    }
}
