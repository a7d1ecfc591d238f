use stampede::cached;

#[cached(fresh = "60s")]
async fn warm(id: u64) {
    let _ = id;
}

fn main() {}
