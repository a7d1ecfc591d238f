use stampede::cached;

#[cached(fresh = "36000d", stale = "1000d")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
