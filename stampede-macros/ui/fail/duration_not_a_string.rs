use stampede::cached;

#[cached(fresh = 60)]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
