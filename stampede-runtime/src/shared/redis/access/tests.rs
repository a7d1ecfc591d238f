use super::*;
use crate::config::BackendSettings;

fn access(pairs: &[(&str, &str)]) -> Result<Access, Refused> {
    let settings = BackendSettings::from_pairs(pairs).expect("settings that parse");
    Access::from_settings(&settings)
}

fn refused(pairs: &[(&str, &str)]) -> Refused {
    match access(pairs) {
        Ok(_) => panic!("{pairs:?} should be refused"),
        Err(refused) => refused,
    }
}

#[test]
fn a_redis_url_reaches_one_node() {
    let access = access(&[("kind", "redis"), ("url", "redis://app:pw@cache:6379/2")]).unwrap();
    let Target::Node(info) = &access.target else {
        panic!("one node")
    };
    assert_eq!(info.addr().to_string(), "cache:6379");
    assert_eq!(info.redis_settings().db(), 2);
    assert_eq!(info.redis_settings().username(), Some("app"));
    assert_eq!(access.describe(), "cache:6379");
}

#[test]
fn settings_override_the_urls_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "from-file\n").unwrap();
    let access = access(&[
        ("url", "redis://app:in-url@cache:6379"),
        ("username", "orders"),
        ("password_file", file.to_str().unwrap()),
    ])
    .unwrap();
    let Target::Node(info) = &access.target else {
        panic!("one node")
    };
    let client = access.client(info).unwrap();
    let settings = client.get_connection_info().redis_settings();
    assert_eq!(settings.username(), Some("orders"));
    assert_eq!(
        settings.password(),
        Some("from-file"),
        "the newline is not the password's"
    );
    assert_eq!(settings.lib_name(), Some("stampede"));
}

#[test]
fn a_password_and_a_password_file_are_one_too_many() {
    let (key, why) = refused(&[
        ("url", "redis://cache"),
        ("password", "a"),
        ("password_file", "/nowhere"),
    ]);
    assert_eq!(key, "password_file");
    assert!(why.contains("not both"), "{why}");
}

#[test]
fn an_unreadable_or_empty_password_file_is_refused() {
    let (key, why) = refused(&[("url", "redis://cache"), ("password_file", "/no/such/file")]);
    assert_eq!(key, "password_file");
    assert!(why.contains("/no/such/file"), "{why}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty");
    std::fs::write(&file, "\n").unwrap();
    let (_, why) = refused(&[
        ("url", "redis://cache"),
        ("password_file", file.to_str().unwrap()),
    ]);
    assert!(why.contains("empty"), "{why}");
}

#[test]
fn a_url_the_client_cannot_parse_is_refused_without_its_password() {
    let (key, why) = refused(&[("url", "redis://app:s3cret@cache:notaport")]);
    assert_eq!(key, "url");
    assert!(!why.contains("s3cret"), "{why}");
    let (key, why) = refused(&[("url", "http://app:s3cret@cache")]);
    assert_eq!(key, "url");
    assert!(why.contains("http://app:***@cache"), "{why}");
}

#[test]
fn sentinels_are_parsed_with_the_master_and_database() {
    let access = access(&[(
        "url",
        "redis+sentinel://app:p%40ss@s1:26379,s2,[::1]:26380/my%20master/3",
    )])
    .unwrap();
    let Target::Sentinel(sentinels) = &access.target else {
        panic!("sentinels")
    };
    let nodes: Vec<_> = sentinels
        .nodes
        .iter()
        .map(|n| n.addr().to_string())
        .collect();
    assert_eq!(nodes, ["s1:26379", "s2:26379", "::1:26380"]);
    assert_eq!(sentinels.master, "my master");
    assert_eq!(sentinels.db, 3);
    assert_eq!(access.username.as_deref(), Some("app"));
    assert_eq!(access.password.as_ref().map(Secret::expose), Some("p@ss"));
    // The master's client carries the data nodes' credentials and the database.
    let client = access.client_at("10.0.0.5", 6379).unwrap();
    let info = client.get_connection_info();
    assert_eq!(info.addr().to_string(), "10.0.0.5:6379");
    assert_eq!(info.redis_settings().db(), 3);
    assert_eq!(info.redis_settings().password(), Some("p@ss"));
    // The Sentinels' own are theirs.
    let sentinel = access.sentinel_client(&sentinels.nodes[0]).unwrap();
    assert_eq!(
        sentinel.get_connection_info().redis_settings().password(),
        None
    );
}

#[test]
fn a_sentinel_url_without_a_master_is_refused() {
    let (key, why) = refused(&[("url", "redis+sentinel://s1:26379,s2:26379")]);
    assert_eq!(key, "url");
    assert!(why.contains("names no master"), "{why}");
    let (_, why) = refused(&[("url", "redis+sentinel://s1,,s2/m")]);
    assert!(why.contains("empty Sentinel"), "{why}");
    let (_, why) = refused(&[("url", "redis+sentinel://s1/m/notadb")]);
    assert!(why.contains("not a database"), "{why}");
}

#[cfg(feature = "tls")]
#[test]
fn tls_settings_need_a_tls_url() {
    let (key, why) = refused(&[("url", "redis://cache"), ("tls_insecure", "true")]);
    assert_eq!(key, "tls_insecure");
    assert!(why.contains("rediss://"), "{why}");
    let access = access(&[("url", "rediss://cache#insecure")]).unwrap();
    assert!(access.insecure());
}

#[cfg(feature = "tls")]
#[test]
fn tls_files_are_read_and_parsed() {
    let (key, why) = refused(&[("url", "rediss://cache"), ("tls_ca_file", "/no/ca.pem")]);
    assert_eq!(key, "tls_ca_file");
    assert!(why.contains("/no/ca.pem"), "{why}");
    let (key, why) = refused(&[
        ("url", "rediss://cache"),
        ("tls_ca_pem", "not a certificate"),
    ]);
    assert_eq!(key, "tls_ca_pem");
    assert!(why.contains("no PEM certificate"), "{why}");
    let (key, _) = refused(&[("url", "rediss://cache"), ("tls_cert_file", "/c.pem")]);
    assert_eq!(key, "tls_key_file", "a certificate without its key");
}

#[cfg(not(feature = "tls"))]
#[test]
fn a_tls_url_names_the_missing_feature() {
    let (key, why) = refused(&[("url", "rediss://cache:6380")]);
    assert_eq!(key, "url");
    assert!(why.contains("`tls` feature"), "{why}");
}
