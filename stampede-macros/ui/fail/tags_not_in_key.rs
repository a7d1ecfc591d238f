// An entry is tagged from its key: a skipped argument is not there to read.
use stampede::cached;

struct Db(u32);

#[cached(fresh = "60s", skip(db), tags = [format!("tenant:{tenant}"), format!("db:{}", db.0)])]
async fn get(tenant: u32, db: &Db) -> u64 {
    let _ = db;
    u64::from(tenant)
}

fn main() {}
