use stampede::cached;

#[cached(fresh = "60s", returns = option)]
async fn balance(id: u64) -> u64 {
    id
}

fn main() {}
