use stampede::cached;

#[derive(Debug)]
struct AppError;

impl From<stampede::Error> for AppError {
    fn from(_: stampede::Error) -> Self {
        AppError
    }
}

#[cached(fresh = "60s", key = (tenant, id), admission_group = tenant)]
async fn row(tenant: u32, id: u64) -> Result<u64, AppError> {
    Ok(id + u64::from(tenant))
}

fn main() {}
