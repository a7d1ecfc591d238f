use stampede::cached;

#[derive(Debug)]
struct AppError;

impl From<stampede::Error> for AppError {
    fn from(_: stampede::Error) -> Self {
        AppError
    }
}

struct Db;

#[cached(fresh = "60s", admission = "db", key = id, skip(db, tenant), admission_group = tenant)]
async fn row(tenant: u32, id: u64, db: &Db) -> Result<u64, AppError> {
    let _ = (tenant, db);
    Ok(id)
}

fn main() {}
