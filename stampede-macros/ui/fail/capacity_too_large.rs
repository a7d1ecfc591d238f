use stampede::cached;

#[cached(fresh = "60s", capacity = 5_000_000_000)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
