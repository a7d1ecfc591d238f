use stampede::cached;

#[cached(fresh = "60s", load_timeout = "0s")]
async fn get(id: u64) -> Result<u64, stampede::Error> {
    Ok(id)
}

fn main() {}
