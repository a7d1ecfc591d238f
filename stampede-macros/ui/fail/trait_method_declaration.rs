use stampede::cached;

trait Store {
    #[cached(fresh = "60s", skip(self))]
    async fn name_of(&self, id: u64) -> String;
}

fn main() {}
