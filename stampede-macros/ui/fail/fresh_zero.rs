use stampede::cached;

#[cached(fresh = "0s")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
