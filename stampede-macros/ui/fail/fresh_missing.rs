use stampede::cached;

#[cached(stale = "30s")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
