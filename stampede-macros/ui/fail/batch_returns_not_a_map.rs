use stampede::cached;

#[cached(fresh = "60s", batch(ids))]
async fn prices(ids: Vec<u64>) -> Result<Vec<u64>, String> {
    Ok(ids)
}

fn main() {}
