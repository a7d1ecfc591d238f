use stampede::cached;

#[derive(Clone, serde::Serialize)]
struct Session {
    user: u64,
}

#[cached(fresh = "60s")]
async fn session(user: u64) -> Session {
    Session { user }
}

fn main() {}
