use stampede::cached;

#[cached(fresh = "60s", cache_none = false)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
