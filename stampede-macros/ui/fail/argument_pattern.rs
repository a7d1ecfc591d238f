use stampede::cached;

#[cached(fresh = "60s")]
async fn get((a, b): (u64, u64)) -> u64 {
    a + b
}

fn main() {}
