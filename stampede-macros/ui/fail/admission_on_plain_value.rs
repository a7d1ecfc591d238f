use stampede::cached;

#[cached(fresh = "60s", admission = "db")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
