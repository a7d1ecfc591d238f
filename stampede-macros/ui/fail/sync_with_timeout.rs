use stampede::cached;

#[derive(Debug, Clone)]
enum AppError {
    Cache(stampede::Error),
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

#[cached(fresh = "60s", timeout = "2s")]
fn parse(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
