use stampede::cached;

#[derive(Debug, Clone)]
enum AppError {
    NotFound,
    Cache(stampede::Error),
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

fn is_not_found(error: &AppError) -> bool {
    matches!(error, AppError::NotFound)
}

#[cached(fresh = "60s", cache_errors(if = is_not_found))]
async fn get(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
