//! testkit's own fixtures: the proxy's black hole, a restart on the same port, and a local
//! cluster that forms, migrates a slot and survives a restart. Here, not in testkit's unit
//! tests, so that they run beside the other tests instead of in a binary of their own.
use testkit::{RedisCluster, RedisServer};

#[test]
fn black_hole_holds_replies_until_healed() {
    use std::io::{Read, Write};
    use std::time::Duration;
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut stream = std::net::TcpStream::connect(redis.proxy().addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").unwrap();
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+PONG\r\n");

    redis.black_hole();
    stream.write_all(b"PING\r\n").unwrap();
    let held = stream.read(&mut reply);
    assert!(held.is_err(), "a black hole answers nothing: {held:?}");

    redis.heal();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
}

#[test]
fn a_cluster_forms_migrates_a_slot_and_survives_a_restart() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    // `{a}` hashes to slot 15495.
    let owner = cluster.owner(15495);
    assert_eq!(cluster.cli(owner, &["SET", "{a}x", "1"]), "OK");
    let to = (owner + 1) % 3;
    cluster.migrate_slot(15495, owner, to);
    assert_eq!(cluster.owner(15495), to);
    assert_eq!(cluster.cli(to, &["GET", "{a}x"]), "1");
    cluster.restart(to);
    assert_eq!(
        cluster.owner(15495),
        to,
        "a restarted master keeps its slots"
    );
    assert_eq!(cluster.cli(to, &["EXISTS", "{a}x"]), "0");
}

#[test]
fn restart_comes_back_empty_on_the_same_port() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    assert_eq!(redis.cli(&["SET", "k", "v"]), "OK");
    let port = redis.port();
    redis.restart();
    assert_eq!(redis.port(), port);
    assert_eq!(redis.cli(&["EXISTS", "k"]), "0");
}
