use stampede::cached;

#[cached(fresh = "60s", skip(pool))]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
