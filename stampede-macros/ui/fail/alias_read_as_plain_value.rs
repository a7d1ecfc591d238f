use stampede::cached;

#[derive(Debug, Clone)]
enum DbDown {
    Cache(stampede::Error),
}

impl From<stampede::Error> for DbDown {
    fn from(error: stampede::Error) -> Self {
        DbDown::Cache(error)
    }
}

type Fallible<T> = Result<T, DbDown>;

#[cached(fresh = "60s")]
async fn balance(id: u64) -> Fallible<u64> {
    Ok(id)
}

fn main() {}
