use stampede::cached;

#[cached(fresh = "60s", skip(db, db))]
async fn get(id: u64, db: &str) -> u64 {
    id + db.len() as u64
}

fn main() {}
