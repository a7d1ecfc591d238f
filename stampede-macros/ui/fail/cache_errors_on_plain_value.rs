use stampede::cached;

fn is_missing(_: &String) -> bool {
    true
}

#[cached(fresh = "60s", cache_errors(if = is_missing, for = "5s"))]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
