use super::*;
use redis::ErrorKind;

fn server(code: &str, detail: &str) -> RedisError {
    // The client's parser builds server errors from the reply's text.
    let reply = format!("-{code} {detail}\r\n");
    let value = redis::parse_redis_value(reply.as_bytes()).expect("an error reply");
    match value {
        redis::Value::ServerError(error) => error.into(),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn refused_credentials_name_the_settings() {
    let error = server(
        "WRONGPASS",
        "invalid username-password pair or user is disabled.",
    );
    let (cause, advice) = diagnose(&error).expect("a cause");
    assert_eq!(cause, Cause::Credentials);
    assert!(advice.contains("`password_file`"), "{advice}");
    let failed = RedisError::from((
        ErrorKind::AuthenticationFailed,
        "Password authentication failed",
    ));
    assert_eq!(diagnose(&failed).map(|(c, _)| c), Some(Cause::Credentials));
}

#[test]
fn a_missing_permission_names_the_command() {
    let error = server(
        "NOPERM",
        "this user has no permissions to run the 'evalsha' command",
    );
    let (cause, advice) = diagnose(&error).expect("a cause");
    assert_eq!(cause, Cause::Permission);
    assert!(advice.contains("'evalsha'"), "{advice}");
}

#[test]
fn other_failures_point_at_no_setting() {
    let error = server("OOM", "command not allowed when used memory > 'maxmemory'.");
    assert!(diagnose(&error).is_none());
    let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert!(diagnose(&io).is_none());
}

#[test]
fn a_problem_is_logged_once_and_reported_while_recent() {
    let problems = Problems::default();
    assert_eq!(problems.current(), None);
    problems.saw(Cause::Permission, "no publish".into());
    problems.saw(Cause::Permission, "no publish".into());
    assert_eq!(problems.logged.lock().unwrap().len(), 1);
    assert_eq!(problems.current().as_deref(), Some("no publish"));
}
