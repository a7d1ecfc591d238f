use stampede::cached;

#[cached(fresh = "60s", stale_if_error = "5m")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
