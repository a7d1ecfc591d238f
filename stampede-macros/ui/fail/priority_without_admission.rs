use stampede::cached;

#[derive(Debug)]
struct AppError;

impl From<stampede::Error> for AppError {
    fn from(_: stampede::Error) -> Self {
        AppError
    }
}

#[cached(fresh = "60s", priority = low)]
async fn report(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
