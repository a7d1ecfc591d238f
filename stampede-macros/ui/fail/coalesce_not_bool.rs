use stampede::cached;

#[cached(fresh = "60s", coalesce = "no")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
