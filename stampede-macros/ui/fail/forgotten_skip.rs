use stampede::cached;

struct PgPool;

impl PgPool {
    async fn balance(&self, id: u64) -> u64 {
        id
    }
}

#[cached(fresh = "60s")]
async fn balance(id: u64, db: &PgPool) -> u64 {
    db.balance(id).await
}

fn main() {}
