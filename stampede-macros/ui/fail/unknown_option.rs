use stampede::cached;

#[cached(fresh = "60s", refresh_ahead)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
