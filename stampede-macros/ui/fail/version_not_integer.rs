use stampede::cached;

#[cached(fresh = "60s", version = "2")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
