use stampede::cached;

// `io::Error` belongs to another crate, so `From<stampede::Error>` cannot be written for it.
#[cached(fresh = "60s")]
async fn read(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
