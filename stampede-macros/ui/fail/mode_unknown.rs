use stampede::cached;

#[cached(fresh = "60s", mode = background)]
async fn balance(id: u64) -> u64 {
    id
}

fn main() {}
