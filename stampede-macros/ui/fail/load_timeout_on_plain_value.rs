use stampede::cached;

#[cached(fresh = "60s", load_timeout = "1s")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
