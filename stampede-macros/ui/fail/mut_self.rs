use stampede::cached;

struct Counter(u64);

impl Counter {
    #[cached(fresh = "60s", skip(self))]
    async fn next(&mut self, id: u64) -> u64 {
        self.0 += 1;
        id
    }
}

fn main() {}
