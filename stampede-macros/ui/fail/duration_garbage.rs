use stampede::cached;

#[cached(fresh = "soon")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
