use stampede::cached;

struct Service;

impl Service {
    #[cached(fresh = "60s")]
    async fn get(&self, id: u64) -> u64 {
        id
    }
}

fn main() {}
