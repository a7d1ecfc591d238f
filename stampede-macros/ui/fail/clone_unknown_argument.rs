use stampede::cached;

#[derive(Clone)]
struct PgPool;

#[cached(fresh = "60s", clone(pool))]
async fn balance(id: u64, db: &PgPool) -> u64 {
    let _ = db;
    id
}

fn main() {}
