use stampede::cached;

struct PgPool;

#[cached(fresh = "60s", clone(db))]
async fn balance(id: u64, db: &PgPool) -> u64 {
    let _ = db;
    id
}

fn main() {}
