// Names from other caching crates get a pointer to ours.
use stampede::cached;

#[cached(ttl = "60s", size = 100)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
