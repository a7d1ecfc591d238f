use stampede::cached;

#[cached(fresh = "60s", xfetch = 2.0)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
