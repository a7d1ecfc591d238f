use stampede::cached;

#[derive(Debug, Clone)]
struct DbError;

#[cached(fresh = "60s")]
async fn get(id: u64) -> Result<u64, DbError> {
    Ok(id)
}

fn main() {}
