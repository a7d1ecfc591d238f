use stampede::cached;

#[cached(fresh = "60s", capacity = 0)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
