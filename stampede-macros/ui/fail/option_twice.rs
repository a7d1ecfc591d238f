use stampede::cached;

#[cached(fresh = "60s", fresh = "30s")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
