use stampede::cached;

#[cached(fresh = "60s", jitter = 0.9)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
