use stampede::cached;

#[cached(fresh = "60s")]
fn get(id: u64) -> u64 {
    id
}

fn main() {}
