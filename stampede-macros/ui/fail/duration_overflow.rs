use stampede::cached;

#[cached(fresh = "99999999999999999d")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
