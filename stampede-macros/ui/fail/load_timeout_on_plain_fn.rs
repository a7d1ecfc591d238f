use stampede::cached;

#[cached(fresh = "60s", load_timeout = "1s")]
fn get(id: u64) -> Result<u64, stampede::Error> {
    Ok(id)
}

fn main() {}
