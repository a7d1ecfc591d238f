use stampede::cached;

struct Db;

#[cached(fresh = "60s", mode = detached, skip(db))]
async fn balance(id: u64, db: &Db) -> u64 {
    let _ = db;
    id
}

fn main() {}
