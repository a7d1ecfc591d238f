use stampede::cached;

#[derive(Debug)]
struct DbError;

impl From<stampede::Error> for DbError {
    fn from(_: stampede::Error) -> Self {
        DbError
    }
}

#[cached(fresh = "60s")]
async fn get(id: u64) -> Result<u64, DbError> {
    Ok(id)
}

fn main() {}
