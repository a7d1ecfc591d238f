//! Free functions of any visibility, associated functions, `&self` methods, generics,
//! borrowed arguments, `mut` arguments, doc comments and other attributes.
use stampede::{cached, LeaderMode};

pub mod users {
    use stampede::cached;

    /// Public, documented, in a module.
    #[cached(fresh = "60s")]
    #[must_use]
    pub async fn name(id: u64) -> String {
        format!("user-{id}")
    }

    #[cached(fresh = "60s")]
    pub(crate) async fn crate_visible(id: u64) -> u64 {
        id
    }
}

struct Repository {
    prefix: String,
}

impl Repository {
    #[cached(fresh = "60s", skip(self))]
    async fn find(&self, id: u64) -> String {
        format!("{}{id}", self.prefix)
    }

    #[cached(fresh = "60s", key = (self.prefix.clone(), id), key_type = (String, u64))]
    async fn find_by_prefix(&self, id: u64) -> String {
        format!("{}{id}", self.prefix)
    }

    #[cached(fresh = "60s")]
    async fn count(shard: u8) -> u64 {
        shard as u64
    }
}

#[cached(fresh = "60s", skip(label))]
async fn generic<L: std::fmt::Display>(id: u64, label: L) -> String {
    format!("{label}{id}")
}

#[cached(fresh = "60s")]
async fn borrowed(name: &str, tags: &[String]) -> usize {
    name.len() + tags.len()
}

#[cached(fresh = "60s")]
async fn mutable(mut id: u64) -> u64 {
    id += 1;
    id
}

#[cached(fresh = "60s")]
async fn no_arguments() -> u64 {
    42
}

#[cached(fresh = "60s", key = id.to_string(), key_type = String)]
async fn keyed_by_expression(id: u64) -> u64 {
    id
}

#[tokio::test(flavor = "current_thread")]
async fn every_placement_compiles_and_runs() {
    assert_eq!(users::name(1).await, "user-1");
    assert_eq!(users::crate_visible(2).await, 2);
    let repository = Repository { prefix: "r".into() };
    assert_eq!(repository.find(3).await, "r3");
    assert_eq!(repository.find_by_prefix(3).await, "r3");
    assert_eq!(Repository::count(4).await, 4);
    assert_eq!(generic(5, "g").await, "g5");
    assert_eq!(borrowed("ab", &["t".to_string()]).await, 3);
    assert_eq!(mutable(6).await, 7);
    assert_eq!(no_arguments().await, 42);
    assert_eq!(keyed_by_expression(7).await, 7);
    assert_eq!(users::NAME.leader_mode(), LeaderMode::Detached);
    assert_eq!(Repository::FIND.leader_mode(), LeaderMode::Inline);
    assert_eq!(Repository::COUNT.leader_mode(), LeaderMode::Detached);
    assert_eq!(BORROWED.leader_mode(), LeaderMode::Inline);
    NO_ARGUMENTS.invalidate(&()).await.unwrap();
}
