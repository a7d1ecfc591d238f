use super::*;

#[test]
fn slots_follow_the_hash_tag_like_redis() {
    // Values from `CLUSTER KEYSLOT` on Redis 7.
    assert_eq!(slot(b"foo"), 12182);
    assert_eq!(slot(b"{a}x"), 15495);
    assert_eq!(slot(b"x{a}y:lease"), slot(b"{a}"));
    assert_eq!(
        slot(b"{}x"),
        slot(b"{}x"),
        "an empty tag hashes the whole key"
    );
    assert_ne!(slot(b"{}a"), slot(b"{}b"));
}

#[test]
fn keys_pass_their_masters_breaker_only() {
    let shards = Shards::new(1, Duration::from_secs(60));
    let unknown = shards.for_key("{a}x").1;
    unknown.pass().unwrap().failed("refused");
    assert_eq!(
        shards.summary().0,
        BreakerState::Open,
        "before the map, every key shares one breaker"
    );
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let range = |first, last, port| {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
        ])
    };
    assert!(shards.update(&Value::Array(vec![
        range(10923, 16383, 7002),
        range(0, 5460, 7000),
        range(5461, 10922, 7001),
    ])));
    assert_eq!(shards.masters().len(), 3);
    let (master, breaker) = shards.for_key("{a}x");
    assert_eq!(master, "127.0.0.1:7002");
    breaker.pass().unwrap().failed("refused");
    assert_eq!(shards.for_key("foo").1.state(), BreakerState::Open);
    let (other, breaker) = shards.for_key("x{b}");
    assert_eq!(other, "127.0.0.1:7000", "{{b}} is slot 3300");
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(shards.summary().0, BreakerState::Open);
    assert!(
        !shards.update(&Value::Nil),
        "an unreadable reply keeps the map"
    );
    assert_eq!(shards.masters().len(), 3);
    assert!(shards.update(&Value::Array(vec![range(0, 16383, 7000)])));
    assert_eq!(
        shards.summary().0,
        BreakerState::Closed,
        "a master gone from the map leaves no open breaker behind"
    );
}
